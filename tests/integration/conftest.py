"""Integration fixtures: the CRD installed once per session, and the operator as a real subprocess watching only
the test's namespace. Its log is printed when a test fails."""

from __future__ import annotations

import pytest

from support.operator import OperatorProcess, install_crds

from namespaced_kubectl import Kube


@pytest.fixture(scope="session")
def crds(cluster):
    install_crds(cluster.kubectl)


@pytest.fixture
def operator(cluster, crds, namespace, tmp_path, request):
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log").start()
    yield op
    op.stop()
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        print(f"----- operator log ({op.log_path}) -----\n{op.log()[-30000:]}")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def kube(cluster, namespace) -> Kube:
    return Kube(cluster, namespace)

