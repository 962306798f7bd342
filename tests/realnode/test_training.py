"""DDPJobs of the trainer image on the two real nodes (issue 36, item 5): the image built from
trainer_image/Dockerfile, one torchrun node per real node, the group formed through the headless Service's DNS
(CoreDNS), checkpoints on a hostPath both nodes see (they share this machine's disk), and what only a kubelet
decides: its OOM kill of a trainer over its memory limit, classed and explained."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from support.cluster import ROOT, wait_until
from support.operator import OperatorProcess, install_crds
from support.realnode import IMAGES_SH, TOLERATE

JOB_TIMEOUT = 420.0
CHECKPOINTS = Path("/var/lib/ddpjob-realnode-tests")


@pytest.fixture(scope="module")
def trainer_image(real_nodes):
    subprocess.run(["bash", str(IMAGES_SH), "trainer"], check=True)
    subprocess.run(["bash", str(IMAGES_SH), "load"], check=True)
    yield subprocess.run(["bash", str(IMAGES_SH), "trainer-ref"], capture_output=True, text=True,
                         check=True).stdout.strip()
    shutil.rmtree(CHECKPOINTS, ignore_errors=True)


@pytest.fixture
def operator(cluster, namespace, tmp_path):
    install_crds(cluster.kubectl)
    proc = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log").start()
    yield proc
    proc.stop()


def digits_job(image: str, name: str, steps: int = 120, memory: str = "1536Mi") -> dict:
    """examples/digits.yaml on the real nodes: the trainer image's own entrypoint, one pod per node."""
    checkpoints = CHECKPOINTS / uuid.uuid4().hex[:8]
    checkpoints.mkdir(parents=True, exist_ok=True)
    os.chmod(checkpoints, 0o777)  # the image's user (UID 1000) writes there; a hostPath gets no fsGroup
    return {
        "apiVersion": "ddpjob.dev/v1alpha1", "kind": "DDPJob", "metadata": {"name": name},
        "spec": {
            "replicas": 2, "nprocPerNode": 1, "gpusPerReplica": 0, "restartPolicy": "OnFailure",
            "runPolicy": {"backoffLimit": 2, "restartBackoffSeconds": 0},
            "template": {"spec": {
                "nodeSelector": {"ddpjob.dev/real-node": "true"}, "tolerations": TOLERATE,
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"ddpjob.dev/job-name": name}},
                    "topologyKey": "kubernetes.io/hostname"}]}},
                "terminationGracePeriodSeconds": 10,
                "volumes": [{"name": "checkpoints", "hostPath": {"path": str(checkpoints), "type": "Directory"}}],
                "containers": [{
                    "name": "trainer", "image": image, "imagePullPolicy": "Never",
                    "args": ["-m", "ddp_trainer", "--workload=digits", f"--train.steps={steps}",
                             "--train.batch-size-per-rank=32", "--train.lr=0.002",
                             "--checkpoint.dir=/checkpoints/$(DDPJOB_NAMESPACE)/$(DDPJOB_NAME)",
                             "--checkpoint.every-steps=20", "--log.every-steps=10"],
                    "resources": {"limits": {"memory": memory, "cpu": "1"}, "requests": {"cpu": "100m"}},
                    "ports": [{"name": "metrics", "containerPort": 9400}],
                    "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
                }],
            }},
        },
    }


def status_of(cluster, namespace: str, name: str) -> dict:
    out = cluster.kubectl("-n", namespace, "get", "ddpj", name, "-o", "json", check=False)
    return json.loads(out.stdout).get("status", {}) if out.returncode == 0 else {}


def finished(cluster, namespace: str, name: str) -> dict:
    return wait_until(lambda: (s := status_of(cluster, namespace, name)).get("phase") in ("Succeeded", "Failed") and s,
                      timeout=JOB_TIMEOUT, interval=1, what=f"{name} to finish")


def test_a_digits_job_of_the_trainer_image_trains_across_the_two_real_nodes(
        cluster, namespace, real_nodes, trainer_image, operator):
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(digits_job(trainer_image, "digits")))

    def both_running():
        pods = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-l", "ddpjob.dev/job-name=digits",
                                          "-o", "json").stdout)["items"]
        return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) and pods
    pods = wait_until(both_running, timeout=JOB_TIMEOUT, interval=1, what="both workers Running")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(real_nodes)
    print(cluster.kubectl("-n", namespace, "get", "pods", "-o", "wide").stdout)
    status = finished(cluster, namespace, "digits")
    assert status["phase"] == "Succeeded", status
    log = cluster.kubectl("-n", namespace, "logs", "digits-worker-0").stdout
    assert "world_size=2 backend=gloo" in log, log[-2000:]
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"].startswith("digits-worker-0."), "the rendezvous host is a DNS name (CoreDNS)"


def test_a_trainer_over_its_memory_limit_is_the_kubelets_oom_kill_classed_and_explained(
        cluster, namespace, real_nodes, trainer_image, operator):
    """torch alone takes more than 200 MiB: the kubelet's cgroup kills the trainer, the pod's container says
    OOMKilled with exit 137, and the operator's failure class, event, history and `kubectl ddpj why` say so."""
    job = digits_job(trainer_image, "oom", memory="200Mi")
    job["spec"]["runPolicy"]["backoffLimit"] = 0
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job))
    status = finished(cluster, namespace, "oom")
    assert status["phase"] == "Failed", status
    text = json.dumps(status)
    assert "OOMKilled" in text, status
    events = cluster.kubectl("-n", namespace, "get", "events", "--field-selector", "involvedObject.name=oom").stdout
    assert "OOMKilled" in events, events
    why = subprocess.run([str(ROOT / ".venv" / "bin" / "kubectl-ddpj"), "--kubeconfig", str(cluster.kubeconfig), "-n",
                          namespace, "why", "oom"], capture_output=True, text=True, timeout=60)
    assert "OOMKilled" in why.stdout + why.stderr, why.stdout + why.stderr
