"""Session-wide fixtures. Tests that need Kubernetes ask for `cluster` (a real control plane, started once per
session) and `namespace` (a fresh namespace per test). Pure unit tests ask for neither and start nothing.

There are two control planes (tests/support/cluster.py). `cluster` is the first, the one the local nodes join;
tests/integration, tests/realnode and tests/chart override it with `second_cluster` in their conftest.py, so that
`make test` runs them beside the first one's suites (the lanes below)."""

from __future__ import annotations

import os
import uuid

import pytest

from support import chaos_summary
from support import cluster as local_cluster
from support import kueue as kueue_support
from support.operator import OperatorProcess

CHAOS_ROWS: list[dict] = []  # under pytest-xdist: the chaos rows the workers handed back


def _started(env):
    c = local_cluster.up(env)
    yield c
    # Leave a cluster we started running only when asked (KEEP_CLUSTER=1), so CI ends with nothing left over.
    if c.started_here and os.environ.get("KEEP_CLUSTER") != "1":
        local_cluster.down(c)


@pytest.fixture(scope="session")
def cluster():
    yield from _started(None)


@pytest.fixture(scope="session")
def second_cluster():
    yield from _started(local_cluster.SECOND)


@pytest.fixture(scope="session")
def kube_api(cluster):
    return local_cluster.api_client(cluster.kubeconfig)


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


SCENE_LOGS = 6  # pods whose logs a failure shows
SCENE = [
    ("nodes", ("get", "nodes", "-o",
               "custom-columns=NAME:.metadata.name,READY:.status.conditions[?(@.type=='Ready')].status,"
               "SINCE:.status.conditions[?(@.type=='Ready')].lastTransitionTime,TAINTS:.spec.taints[*].key,"
               "GPUS:.status.allocatable.nvidia\\.com/gpu")),
    ("pods on every node", ("get", "pods", "-A", "-o", "wide")),
    ("terminating pods", ("get", "pods", "-A", "-o",
                          "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,NODE:.spec.nodeName,"
                          "DELETING:.metadata.deletionTimestamp")),
]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the scene it failed in: the nodes, every pod, its namespace's DDPJobs and
    events, the last lines of its pods' logs, and the operator's own lines, so that a failure seen once on CI can be
    explained from its log. Any suite whose test has a `cluster` and a `namespace` (e2e, the real nodes, ...)."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    cluster = item.funcargs.get("cluster")
    namespace = item.funcargs.get("namespace") or item.funcargs.get("ns")  # the Kueue suite names it `ns`
    if cluster is None or not isinstance(namespace, str):
        return
    parts = []
    commands = [*SCENE, ("ddpjobs", ("-n", namespace, "get", "ddpj", "-o", "yaml")),
                ("events", ("-n", namespace, "get", "events", "--sort-by=.lastTimestamp"))]
    try:
        names = cluster.kubectl("-n", namespace, "get", "pods", "-o", "name", check=False, timeout=20).stdout.split()
    except Exception:  # noqa: BLE001 (best effort, as below)
        names = []
    commands += [(f"{name}: its last 25 lines", ("-n", namespace, "logs", name, "--all-containers", "--tail=25"))
                 for name in names[:SCENE_LOGS]]
    for title, args in commands:
        try:
            out = cluster.kubectl(*args, check=False, timeout=20)
            parts.append(f"--- {title}\n{out.stdout}{out.stderr}")
        except Exception as err:  # noqa: BLE001 (the scene is best effort: the failure is already reported)
            parts.append(f"--- {title}: {err}")
    # The test's own view of an operator where it has one (the integration suite's: its log since the test began),
    # else any operator process among its fixtures (the Kueue suite's).
    operator = item.funcargs.get("operator")
    if not hasattr(operator, "log"):
        operator = next((value for value in item.funcargs.values() if isinstance(value, OperatorProcess)), None)
    if operator is not None:
        # Its own lines, and kopf's warnings and errors (a watch that keeps failing says so only there).
        lines = [line for line in operator.log().splitlines()
                 if "level=debug" not in line and ("logger=ddpjob" in line or "level=info" not in line)]
        parts.append("--- the operator's last 60 lines\n" + "\n".join(lines[-60:]))
    if "kueue" in item.nodeid:
        parts.append("--- Kueue's last 30 lines\n" + kueue_support.log_tail(cluster, 30))
    report.sections.append(("cluster scene", "\n".join(parts)))


def pytest_collection_modifyitems(session, config, items):
    # A test marked `disrupts_cluster` (an apiserver outage, a control plane restarted without an API) disturbs
    # every suite sharing the cluster: it runs after all of them, whatever its file is called.
    last = [item for item in items if item.get_closest_marker("disrupts_cluster")]
    items[:] = [item for item in items if item not in last] + last
    items[:] = in_lane_order(items)


def in_lane_order(items: list) -> list:
    """The two control planes' lanes first, each in its own order, then the other modules the longest first (as
    LONGEST_FIRST has them), then the rest in collection order. xdist hands the scopes out in this order (the
    scheduler below turns off its reordering by test count), so the long modules start while the cluster lanes run
    and the short ones fill the end: by count, the one-test trainer modules (a torchft test of minutes among
    them) came last and ran on after everything else had finished."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}

    def key(pair):
        index, item = pair
        where = lane(item.nodeid)
        if where == "cluster-1":
            return (0, 0, index)
        if where == "cluster-2":
            return (1, 0, index)
        return (2, rank.get(where, len(rank)), index)
    return [item for _, item in sorted(enumerate(items), key=key)]


# The modules outside the cluster lanes that took a minute or more of a full `make test` on the 2-core machine
# (13811e5, 72 min), the longest first. Only the order depends on it: a module missing here runs after these.
LONGEST_FIRST = tuple(f"tests/trainer/{name}.py" for name in (
    "test_compile", "test_checkpoint_resume", "test_resume_exactness", "test_torchft_replica_groups",
    "test_learning_digits", "test_lr_resize", "test_dcp_checkpoints", "test_preemption", "test_user_loop_example",
    "test_faults_hang", "test_sigterm_checkpoint", "test_metrics_endpoint", "test_failure_messages",
    "test_elastic_recovery", "test_peer_watch", "test_user_entrypoint", "test_faults_checkpoint_kill"))


# `make test` runs three lanes, pytest-xdist workers (-n 3): the suites of each control plane on a worker of their own
# (the first: chaos, then e2e on its local nodes, 54 min of a full run on 0ef47dc; the second: integration, real
# nodes, the chart on a cluster, 52 min; chaos ran there in that run, which made it the critical path at 60 min),
# in their order, one test at a time as a plain run takes them (they share its nodes, its Kueue, its real nodes and
# its outages, and that worker alone starts and stops it), and everything else on the third, a module at a time
# (unit, trainer, the chart's render-only tests, bench). The lane is decided by path, since xdist's controller
# schedules before any fixture is known; collection checks that each test's `cluster` is its lane's.
FIRST_CLUSTER_DIRS = ("tests/chaos/", "tests/e2e/")
SECOND_CLUSTER_DIRS = ("tests/integration/", "tests/realnode/")
SECOND_CLUSTER_MODULES = frozenset(f"tests/chart/{name}.py" for name in (
    "test_chart_on_cluster", "test_ha_by_use", "test_prometheus_scrape", "test_rbac_by_use", "test_uninstall_hook"))


def lane(nodeid: str) -> str:
    """"cluster-1", "cluster-2", or the test's own module."""
    path = nodeid.split("::")[0]
    if path.startswith(FIRST_CLUSTER_DIRS):
        return "cluster-1"
    if path.startswith(SECOND_CLUSTER_DIRS) or path in SECOND_CLUSTER_MODULES:
        return "cluster-2"
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class Lanes(LoadScopeScheduling):
        """xdist's scheduling by scope (each unit runs whole on one worker, the largest first), with lane() as
        the scope. (Its loadgroup mode would do this from markers, but does not work with pytest 9.2's node ids.)"""

        def _split_scope(self, nodeid: str) -> str:
            return lane(nodeid)

    config.option.loadscopereorder = False  # in_lane_order's order, not the largest count of tests first
    return Lanes(config, log)


def pytest_itemcollected(item):
    uses = "cluster" in item.fixturenames
    second = "second_cluster" in item.fixturenames
    where = lane(item.nodeid)
    if uses and not where.startswith("cluster-"):
        raise pytest.UsageError(f"{item.nodeid} uses a local cluster: add its module to a lane in tests/conftest.py "
                                f"(FIRST_CLUSTER_DIRS, SECOND_CLUSTER_DIRS or SECOND_CLUSTER_MODULES)")
    if uses and second != (where == "cluster-2"):
        raise pytest.UsageError(f"{item.nodeid} runs in lane {where} but its `cluster` is the "
                                f"{'second' if second else 'first'} control plane: its conftest.py must agree with "
                                f"tests/conftest.py's lanes")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    CHAOS_ROWS.extend(getattr(node, "workeroutput", {}).get(chaos_summary.KEY, []))


def pytest_terminal_summary(terminalreporter):
    chaos_summary.write(terminalreporter, CHAOS_ROWS)
    terminalreporter.write_sep("=", "machine")
    terminalreporter.write_line(machine_line())


def machine_line() -> str:
    """The facts that decide how long the suite takes, for reading a run's durations elsewhere (CI): the CPUs,
    whether they are hyperthreads, torch's default intra-op threads (its count of physical cores) and the load."""
    import torch

    def read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return "?"
    model = next((line.split(":", 1)[1].strip() for line in read("/proc/cpuinfo").splitlines()
                  if line.startswith("model name")), "?")
    siblings = read("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable; cpu0's siblings: {siblings}), {model}; "
            f"torch's default intra-op threads {torch.get_num_threads()}; load average {load}")
