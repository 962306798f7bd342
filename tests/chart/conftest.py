"""Fixtures of the chart tests that need the local cluster: the CRDs the chart's objects are instances of, and
one operator run as the chart's ServiceAccount (cluster-wide RBAC) that carries a job through a restart; the
RBAC test and the Prometheus scrape test share it, so the cluster work happens once."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import job_lifecycle
import operator_as_service_account as operator_sa
from support.chart_tools import CHART

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def cluster(second_cluster):
    """This suite runs on the second control plane, beside the first one's (tests/conftest.py's lanes)."""
    return second_cluster


@pytest.fixture(scope="session")
def chart_crds(cluster):
    """prometheus-operator stand-ins and kopf's peering CRDs; the DDPJob CRD is installed by helm (crds/) or
    by whoever applied crds/ first on this shared cluster."""
    files = [FIXTURES / "monitoring-crds.yaml", CHART / "crds" / "kopf.dev_peerings.yaml"]
    for path in files:
        cluster.kubectl("apply", "-f", str(path))
    for name in ("servicemonitors", "podmonitors", "prometheusrules"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}.monitoring.coreos.com", "--timeout=30s")
    for name in ("clusterkopfpeerings", "kopfpeerings"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}.kopf.dev", "--timeout=30s")


@pytest.fixture(scope="session")
def cluster_wide_operator(cluster, chart_crds, tmp_path_factory):
    run = operator_sa.start(cluster, tmp_path_factory.mktemp("operator-cluster"), single_namespace=False)
    yield run
    operator_sa.stop(run)


@pytest.fixture(scope="session")
def cluster_wide_job(cluster, cluster_wide_operator) -> dict:
    run = cluster_wide_operator
    return operator_sa.with_log(run, job_lifecycle.drive_through_restart, cluster, run.watch_namespace)
