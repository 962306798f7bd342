"""Elastic sizes that settle (resize_policy.py, room_wakeups.py) against the real kube-scheduler on kwok nodes of
each test's own pool (test_placement.py's fixtures).

"Nothing more happens" is shown by positive evidence: the operator has re-planned the job many times since
(its resync runs every 2 s here), each time with the same answer."""

from __future__ import annotations

from support.cluster import wait_until

from ddpjob_manifests import ddpjob
from test_placement import PLACED_WITHIN, blocker, bound, in_pool, pool  # noqa: F401 (pool is a fixture)

PASSES = 10  # operator passes over everything after the decision: 20 s of 2 s resyncs


def passes(operator) -> float:
    return operator.process.metric("ddpjob_reconcile_duration_seconds_count")


def wait_passes(operator, n: int = PASSES) -> None:
    start = passes(operator)
    wait_until(lambda: passes(operator) - start >= n, timeout=120, interval=0.5,
               what=f"{n} more reconcile passes")


def test_a_size_the_estimate_promises_but_the_scheduler_refuses_is_not_retried(kube, operator, pool, op_namespace):
    """One pod per node (required anti-affinity, which the estimate does not model) on 3 nodes, 4 GPUs a pod: the
    estimate says 6 fit. The gang of 4 cannot place; the job shrinks once, to 3, and stays there: no 4 -> 3 -> 4."""
    pool(3)
    job = in_pool(ddpjob("aa", replicas=4, gpus=4, elastic={
        "minReplicas": 2, "maxReplicas": 4, "unschedulableGraceSeconds": 2, "resizeCooldownSeconds": 300}),
        op_namespace)
    job["spec"]["template"]["metadata"] = {"labels": {"spread": "aa"}}
    job["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"spread": "aa"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    kube.apply(job)
    status = kube.wait_status("aa", lambda s: s.get("phase") == "Running", timeout=PLACED_WITHIN * 2,
                              what="aa Running after stepping down")
    assert (status["replicas"], status["sizeText"], status["reason"]) == (3, "3/4", "AllPodsRunning")
    assert (status["unplaceableSize"], status["restarts"], status["platformRestarts"]) == (4, 0, 0)
    attempt = status["attempt"]
    wait_passes(operator)
    status = kube.status("aa")
    assert (status["phase"], status["replicas"], status["attempt"]) == ("Running", 3, attempt), \
        "the estimate still says 4 fit; the cooldown keeps the job from trying 4 again"
    assert [e["reason"] for e in kube.events("aa")].count("ShrankToFit") == 1
    assert "GrewToFit" not in {e["reason"] for e in kube.events("aa")}


def test_two_elastic_jobs_waiting_for_the_same_room_one_takes_it_the_other_does_not_restart(
        kube, operator, pool, op_namespace):
    nodes = pool(3)
    blocker(kube, "busy0", op_namespace, node=nodes[0])
    blocker(kube, "busy1", op_namespace, node=nodes[1])
    elastic = {"minReplicas": 1, "maxReplicas": 2}
    kube.apply(in_pool(ddpjob("first", replicas=2, gpus=8, elastic=elastic), op_namespace))
    status = kube.wait_status("first", lambda s: s.get("phase") == "Running", timeout=PLACED_WITHIN,
                              what="first Running at the 1 pod that fits")
    assert status["sizeText"] == "1/2"
    kube.apply(in_pool(ddpjob("second", replicas=2, gpus=8, elastic=elastic), op_namespace))
    kube.wait_status("second", lambda s: s.get("phase") == "Pending" and s.get("replicas") == 1,
                     timeout=PLACED_WITHIN, what="second waiting at its minimum, 1 pod, for room")

    kube("delete", "pod", "busy0", "--wait=false")  # room for one 8-GPU pod: both want it
    status = kube.wait_status("second", lambda s: s.get("phase") == "Running", timeout=PLACED_WITHIN,
                              what="second placed in the freed room")
    wait_passes(operator)
    first = kube.status("first")
    assert (first["phase"], first["attempt"], first["sizeText"]) == ("Running", 0, "1/2"), \
        "the room went to the waiting job; first did not restart to grow into it"
    assert "GrewToFit" not in {e["reason"] for e in kube.events("first")}
    assert len(bound(kube, "second")) == 1
