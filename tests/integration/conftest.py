"""Integration fixtures: the CRD installed once per session, one operator subprocess for the session watching
only this suite's namespaces (`t-op-*`, one fresh namespace per test), and its log printed when a test fails.

One shared process instead of one per test: starting Python with kopf and the kubernetes client costs seconds
(tens on a loaded CI machine). Tests that kill it restart it; the next test finds it alive again."""

from __future__ import annotations

import uuid

import pytest

from support.cluster import delete_namespace, wait_until
from support.operator import OperatorProcess, install_crds

from namespaced_kubectl import Kube

NS_PREFIX = "t-op-"


@pytest.fixture(scope="session")
def cluster(second_cluster):
    """This suite runs on the second control plane, beside the first one's (tests/conftest.py's lanes)."""
    return second_cluster


@pytest.fixture(scope="session")
def crds(cluster):
    install_crds(cluster.kubectl)


@pytest.fixture(scope="session")
def shared_operator(cluster, crds, tmp_path_factory):
    # Not --verbose: kopf's per-event debug lines cost CPU; the operator's own INFO lines say what it did.
    op = OperatorProcess(cluster.kubeconfig, [f"{NS_PREFIX}*"], tmp_path_factory.mktemp("operator") / "operator.log",
                         verbose=False)
    op.start()
    yield op
    op.stop()


@pytest.fixture
def op_namespace(cluster, crds, request):
    name = f"{NS_PREFIX}{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    cluster.kubectl("create", "namespace", name)
    wait_until(lambda: cluster.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
               timeout=30, what=f"default ServiceAccount in {name}")
    yield name
    # Jobs first: if the namespace controller removed pods before their job, the operator would restart groups
    # of a test that is over (and count it in the metrics of the next one).
    cluster.kubectl("-n", name, "delete", "ddpjobs", "--all", "--wait=true", "--timeout=30s", check=False)
    delete_namespace(cluster, name)


class OperatorView:
    """The shared operator as one test sees it: metrics relative to the start of the test, its log since then."""

    def __init__(self, process: OperatorProcess):
        self.process = process
        self._baseline: dict[tuple, float] = {}
        self._log_offset = len(process.log())
        self._baseline_starts = process.starts

    def metric(self, name: str, **labels: str) -> float:
        value = self.process.metric(name, **labels)
        if self.process.starts != self._baseline_starts:
            return value  # restarted during the test: counters began at 0 again
        key = (name, tuple(sorted(labels.items())))
        if key not in self._baseline:
            raise AssertionError(f"metric {name}{labels} was not snapshotted at test start; add it to BASELINE")
        return value - self._baseline[key]

    def snapshot(self, keys) -> None:
        for name, labels in keys:
            self._baseline[(name, tuple(sorted(labels.items())))] = self.process.metric(name, **labels)

    def kill(self, *args) -> None:
        self.process.kill(*args)

    def start(self) -> None:
        self.process.start()

    def log(self) -> str:
        return self.process.log()[self._log_offset:]


# Counters the tests compare; snapshotted before each test so a shared operator reads like a fresh one.
BASELINE = [
    ("ddpjob_pods_created_total", {}), ("ddpjob_jobs_created_total", {}), ("ddpjob_jobs_failed_total", {}),
    ("ddpjob_jobs_succeeded_total", {}), ("ddpjob_time_to_all_running_seconds_count", {}),
    ("ddpjob_recovery_duration_seconds_count", {}), ("ddpjob_group_restarts_total", {"reason": "ExitCode"}),
    ("ddpjob_group_restarts_total", {"reason": "Rescaled"}), ("ddpjob_group_restarts_total", {"reason": "NoProgress"}),
    ("ddpjob_group_restarts_total", {"reason": "Deleted"}),
]


@pytest.fixture
def operator(shared_operator, op_namespace, request):
    if not shared_operator.alive():
        shared_operator.start()
    view = OperatorView(shared_operator)
    view.snapshot(BASELINE)
    yield view
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        print(f"----- operator log since the test started ({shared_operator.log_path}) -----\n{view.log()[-30000:]}")
    if not shared_operator.alive():
        shared_operator.start()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def kube(cluster, op_namespace) -> Kube:
    return Kube(cluster, op_namespace)
