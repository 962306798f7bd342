"""Chaos fixtures: the CRD, a Python API client, a printed seed (CHAOS_SEED=N reproduces a run), the operator
as a real process, and the summary table printed at the end of the session."""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest


from support import chaos_summary
from support.operator import OperatorProcess, install_crds

SUMMARY: list[ChaosFigures] = []


@dataclass
class ChaosFigures:
    test: str
    seed: int
    jobs: int = 0
    faults: int = 0
    operator_kills: int = 0
    violations: int = 0
    peak_rss_mib: float = 0.0
    seconds: float = 0.0
    detail: str = ""


@pytest.fixture(scope="session")
def crds(cluster):
    install_crds(cluster.kubectl)


@pytest.fixture
def api(cluster):
    from kubernetes import client, config
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = 8
    cfg.retries = False  # a down apiserver must surface at once, not after urllib3's silent retries
    return client.ApiClient(configuration=cfg)


@pytest.fixture
def seed(request) -> int:
    value = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1, 2**31))
    print(f"\nchaos seed for {request.node.name}: {value} (rerun with CHAOS_SEED={value})")
    return value


@pytest.fixture
def figures(request, seed):
    row = ChaosFigures(test=request.node.name, seed=seed)
    started = time.monotonic()
    yield row
    row.seconds = time.monotonic() - started
    SUMMARY.append(row)


@pytest.fixture
def operator_process(cluster, crds, namespace, tmp_path, request):
    # CHAOS_LOG_DIR keeps the logs where pytest's rotation of old tmp dirs cannot remove them.
    log_dir = Path(os.environ.get("CHAOS_LOG_DIR") or tmp_path)
    log_dir.mkdir(parents=True, exist_ok=True)
    # The integration suite's 2 s resync would reconcile all 50 jobs every 2 s: a CPU storm on 2 cores that hides
    # what the chaos is about. Events drive the passes; the resync is only the safety net.
    # A node-lost grace of 15 s (the integration suite's is 2 s): the pod-faults suite's node blips (4 s NotReady,
    # then Ready again) must fall inside it, and its node losses are still seen soon.
    env = {"DDPJOB_RESYNC_SECONDS": "15", "DDPJOB_NODE_LOST_GRACE_SECONDS": "15"}
    if request.node.get_closest_marker("disrupts_cluster"):
        # While the apiserver is down no node can renew its lease; once it is back the node lifecycle controller
        # marks the nodes it has not heard from NotReady for a few seconds, until their next renewal. The
        # default grace (30 s) rides that out, as it does on a real cluster; the suite's fast 2 s would count
        # that blip as a lost node for every pod.
        env["DDPJOB_NODE_LOST_GRACE_SECONDS"] = "30"
    op = OperatorProcess(cluster.kubeconfig, [namespace], log_dir / f"{request.node.name}-operator.log", env=env,
                         verbose=False)
    yield op
    op.stop()
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        print(f"----- operator log ({op.log_path}) -----\n{op.log()[-20000:]}")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def pytest_sessionfinish(session):
    """Under pytest-xdist the controller prints the table: a worker hands it its rows."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[chaos_summary.KEY] = [asdict(row) for row in SUMMARY]


def pytest_terminal_summary(terminalreporter):
    chaos_summary.write(terminalreporter, [asdict(row) for row in SUMMARY])
