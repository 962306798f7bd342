"""Session-wide fixtures. Tests that need Kubernetes ask for `cluster` (one real control plane per session)
and `namespace` (a fresh namespace per test). Pure unit tests ask for neither and start nothing."""

from __future__ import annotations

import os
import uuid

import pytest


from support import chaos_summary
from support import cluster as local_cluster

CHAOS_ROWS: list[dict] = []  # under pytest-xdist: the chaos rows the workers handed back


@pytest.fixture(scope="session")
def cluster():
    c = local_cluster.up()
    os.environ.setdefault("DDPJOB_TEST_KUBECONFIG", str(c.kubeconfig))
    yield c
    # Leave a cluster we started running only when asked (KEEP_CLUSTER=1), so CI ends with nothing left over.
    if c.started_here and os.environ.get("KEEP_CLUSTER") != "1":
        local_cluster.down()


@pytest.fixture(scope="session")
def kube_api(cluster):
    from kubernetes import client, config

    return client.ApiClient(configuration=_load(cluster.kubeconfig, config, client))


def _load(path, config, client):
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=cfg)
    return cfg


@pytest.fixture
def namespace(cluster, request):
    name = f"t-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    cluster.kubectl("create", "namespace", name)
    local_cluster.wait_until(
        lambda: cluster.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
        timeout=30, what=f"default ServiceAccount in {name}")
    yield name
    local_cluster.delete_namespace(cluster, name)


def pytest_collection_modifyitems(session, config, items):
    # A test marked `disrupts_cluster` (an apiserver outage, a control plane restarted without an API) disturbs
    # every suite sharing the cluster: it runs after all of them, whatever its file is called.
    last = [item for item in items if item.get_closest_marker("disrupts_cluster")]
    items[:] = [item for item in items if item not in last] + last


# `make test` runs two lanes, pytest-xdist workers: the tests of the local cluster on one, in their order, one at a time
# as a plain run takes them (they share its nodes, its Kueue, its real nodes and its outages, and that worker alone
# starts and stops it), and everything else on the other, a module at a time (unit, trainer, the chart's
# render-only tests, bench). The lane is decided by path, since xdist's controller schedules before any fixture is
# known; collection checks that no test outside these paths asks for the cluster.
CLUSTER_DIRS = ("tests/chaos/", "tests/e2e/", "tests/integration/", "tests/realnode/")
CLUSTER_MODULES = frozenset(f"tests/chart/{name}.py" for name in (
    "test_chart_on_cluster", "test_ha_by_use", "test_prometheus_scrape", "test_rbac_by_use", "test_uninstall_hook"))


def lane(nodeid: str) -> str:
    """"cluster", or the test's own module."""
    path = nodeid.split("::")[0]
    return "cluster" if path.startswith(CLUSTER_DIRS) or path in CLUSTER_MODULES else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        """xdist's scheduling by scope (each unit runs whole on one worker, the largest first), with lane() as
        the scope. (Its loadgroup mode would do this from markers, but does not work with pytest 9.2's node ids.)"""

        def _split_scope(self, nodeid: str) -> str:
            return lane(nodeid)

    return Lanes(config, log)


def pytest_itemcollected(item):
    if "cluster" in item.fixturenames and lane(item.nodeid) != "cluster":
        raise pytest.UsageError(f"{item.nodeid} uses the local cluster: add its module to CLUSTER_MODULES in "
                                f"tests/conftest.py, so that make test runs it in the cluster's lane")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    CHAOS_ROWS.extend(getattr(node, "workeroutput", {}).get(chaos_summary.KEY, []))


def pytest_terminal_summary(terminalreporter):
    chaos_summary.write(terminalreporter, CHAOS_ROWS)
