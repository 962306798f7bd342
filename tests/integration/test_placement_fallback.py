"""A cluster that does not serve the PodGroup API: the control plane is restarted without it (GANG_SCHEDULING=0),
and an operator started there places pods one by one, says so once in its log, and in the job's status.

Marked disrupts_cluster: it restarts the shared apiserver, scheduler and controller-manager (and puts them back
with the API on), so it runs after every other test."""

from __future__ import annotations


import pytest

from support.cluster import Cluster, wait_until
from support.operator import OperatorProcess

from ddpjob_manifests import ddpjob
from namespaced_kubectl import Kube

COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def restart(cluster: Cluster, components: tuple[str, ...], mode: str) -> None:
    """Stop, then start, these components of the local cluster with GANG_SCHEDULING=mode (hack/cluster.sh)."""
    for component in components:
        cluster.sh("stop", component, check=True, capture_output=True, timeout=60)
    for component in components:
        cluster.sh("start", component, env={"GANG_SCHEDULING": mode}, check=True, capture_output=True, timeout=180)


def restart_control_plane(cluster: Cluster, gang: bool) -> None:
    restart(cluster, COMPONENTS, "1" if gang else "0")

    def serves_podgroups() -> bool:
        out = cluster.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name", check=False)
        return out.returncode == 0 and ("podgroups" in out.stdout) == gang

    wait_until(serves_podgroups, timeout=120, interval=1, what=f"the PodGroup API {'on' if gang else 'off'}")


@pytest.fixture
def without_podgroups(cluster, crds):
    restart_control_plane(cluster, gang=False)
    try:
        yield
    finally:
        restart_control_plane(cluster, gang=True)


@pytest.mark.disrupts_cluster
def test_without_the_podgroup_api_jobs_run_pod_by_pod_and_say_so(cluster, without_podgroups, namespace, tmp_path):
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False)
    op.start()
    try:
        kube = Kube(cluster, namespace)
        kube.apply(ddpjob("plain", replicas=2, gpus=1))
        # Right after the control plane restart the node lifecycle controller may still mark kwok nodes NotReady
        # until their next lease renewal: a pod placed there is then rightly a lost node and the group restarts.
        # What is checked here is the placement, at whichever attempt the group runs.
        status = kube.wait_phase("plain", "Running", timeout=150)
        kube.running_pods("plain", attempt=status["attempt"], n=2, timeout=60)
        assert status["placement"] == "PodByPod"
        assert all("schedulingGroup" not in p["spec"] for p in kube.pods("plain"))
        log = op.log()
        assert log.count("NOT all-or-nothing") == 1, log[-3000:]
        row = kube("get", "ddpj", "plain", "-o", "wide", "--no-headers").stdout.split()
        assert row[-1] == "PodByPod", row
    finally:
        op.stop()


def attempt_pods(kube: Kube, job: str, attempt: int, n: int) -> list[dict] | None:
    """The job's pods of this attempt once there are n of them (whatever their phase), else None."""
    pods = [p for p in kube.pods(job) if p["metadata"]["labels"].get("ddpjob.dev/restart-attempt") == str(attempt)]
    return pods if len(pods) >= n else None


@pytest.fixture
def scheduler_without_gangs(cluster, crds):
    """The scheduler alone restarted with GANG_SCHEDULING=api: at its default feature gates it places pods one by
    one while the API server still serves PodGroups."""
    restart(cluster, ("kube-scheduler",), "api")
    try:
        yield
    finally:
        restart(cluster, ("kube-scheduler",), "1")


@pytest.mark.disrupts_cluster
def test_a_scheduler_that_ignores_podgroups_is_found_out_and_jobs_go_pod_by_pod(
        cluster, scheduler_without_gangs, namespace, tmp_path):
    """The API server serves PodGroups, so the operator starts with gangs; the scheduler binds the first attempt's
    pods without a word on its PodGroup. The operator then says `PodByPod` (never `Gang` for what nothing
    enforces), once in its log and with a GangNotEnforced event, and the next attempt gets no PodGroup. A gang the
    scheduler never speaks of does not hide its pods' own Unschedulable."""
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False)
    op.start()
    try:
        kube = Kube(cluster, namespace)
        kube.apply(ddpjob("toobig", replicas=2, gpus=64))  # no node has 64 GPUs
        kube.apply(ddpjob("plain", replicas=2, gpus=1))
        # The first attempt's pods, read as soon as they are made: later, a kwok node that the control plane
        # restart before this test left NotReady for a while can restart the group (a lost node), and the next
        # attempt rightly goes pod by pod once the scheduler has shown it ignores gangs (seen under CI's load).
        first = wait_until(lambda: attempt_pods(kube, "plain", 0, n=2), timeout=60, what="the first attempt's pods")
        assert all(p["spec"].get("schedulingGroup") for p in first), "the first attempt was made a gang"
        big = kube.wait_status("toobig", lambda s: s.get("reason") == "Unschedulable", timeout=90,
                               what="toobig Unschedulable in its pods' words")
        placed = next(c for c in big["conditions"] if c["type"] == "PodsPlaced")
        assert placed["status"] == "False" and "Insufficient nvidia.com/gpu" in placed["message"], placed
        group = cluster.kubectl("-n", namespace, "get", "podgroups.scheduling.k8s.io", "toobig-0", "-o",
                                "jsonpath={.status.conditions}").stdout
        assert "PodGroupScheduled" not in group, group
        status = kube.wait_status("plain", lambda s: s.get("placement") == "PodByPod", timeout=90,
                                  what="placement PodByPod once the scheduler showed it ignores the gang")
        assert "GangNotEnforced" in {e["reason"] for e in kube.events("plain")}
        warnings = [line for line in op.log().splitlines() if "level=warning logger=ddpjob.gang" in line]
        assert len(warnings) == 1 and "does not gang-schedule" in warnings[0], op.log()[-3000:]
        status = kube.wait_phase("plain", "Running", timeout=150)
        kube.running_pods("plain", attempt=status["attempt"], n=2, timeout=60)
        kube.fail_pod("plain-worker-1", exit_code=1)
        attempt = status["attempt"] + 1
        pods = kube.running_pods("plain", attempt=attempt, n=2, timeout=150)
        assert all("schedulingGroup" not in p["spec"] for p in pods)
        groups = cluster.kubectl("-n", namespace, "get", "podgroups.scheduling.k8s.io", "-o", "name").stdout.split()
        assert f"podgroup.scheduling.k8s.io/plain-{attempt}" not in groups, groups
        assert kube.status("plain")["placement"] == "PodByPod"
    finally:
        op.stop()
