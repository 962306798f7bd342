"""Whole DDPJobs on the shared local cluster: the local node agent (started once per session) runs the pods as
real torchrun processes, and the operator runs as a subprocess scoped to each test's namespace."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
import yaml

from ddpjob_operator.api import GROUP, PLURAL, VERSION
from support import localnode
from support.cluster import RENDEZVOUS_PORTS
from support.operator import OperatorProcess, install_crds

ROOT = Path(__file__).resolve().parents[2]

EXAMPLE = ROOT / "examples" / "digits.yaml"


@pytest.fixture(scope="session")
def local_node(cluster):
    started = localnode.start(cluster)
    yield localnode.node_name()
    if started:
        localnode.stop()


@pytest.fixture(scope="session")
def crds(cluster):
    install_crds(cluster.kubectl)


@pytest.fixture
def operator(cluster, crds, local_node, namespace, tmp_path):
    # Without kopf's per-event debug lines, as the integration and chaos suites run it: they cost CPU beside the
    # trainers, and the failure report leaves them out anyway.
    proc = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False).start()
    yield proc
    proc.stop()


def digits_job(name: str = "digits", steps: int = 200, every: int = 20, **spec) -> dict:
    """examples/digits.yaml with a shorter run: the tests exercise the same manifest `make demo` applies."""
    job = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    job["metadata"]["name"] = name
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    replaced = {"--train.steps": str(steps), "--checkpoint.every-steps": str(every), "--log.every-steps": "10"}
    job["spec"]["template"]["spec"]["containers"][0]["args"] = [
        f"{a.split('=')[0]}={replaced[a.split('=')[0]]}" if a.split("=")[0] in replaced else a for a in args]
    # torchrun's c10d store binds *:<port>, so jobs sharing this machine (other suites, the demo) need their own.
    job["spec"]["rendezvous"] = {"port": random.choice(RENDEZVOUS_PORTS)}
    job["spec"].update(spec)
    return job


def apply_job(cluster, namespace: str, job: dict) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job))


def job_status(cluster, namespace: str, name: str) -> dict:
    job = cluster.get_json(f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}")
    return (job or {}).get("status", {})


def pods(cluster, namespace: str, job: str) -> list[dict]:
    found = cluster.get_json(f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"ddpjob.dev/job-name={job}")
    assert found is not None, f"cannot list the pods of {namespace}/{job}"
    return found["items"]


