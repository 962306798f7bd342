"""Elastic sizes that settle (resize_policy.py, room_wakeups.py) against the real kube-scheduler on kwok nodes of
each test's own pool (test_placement.py's fixtures).

"Nothing more happens" is shown by positive evidence: the operator has re-planned the job many times since
(its resync runs every 2 s here), each time with the same answer."""

from __future__ import annotations

import time

from support.cluster import wait_until
from support.operator import OperatorProcess

from ddpjob_manifests import ddpjob
from namespaced_kubectl import Kube
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


# The default cooldown is 300 s; the job sets 120 s and the oscillation lasts as long, the same ratio (T/cooldown = 1)
# as 5 minutes at the default, in 40% of the suite's time.
OSCILLATION_SECONDS = 120
COOLDOWN_SECONDS = 120
TOGGLE_SECONDS = 20


def test_capacity_that_comes_and_goes_every_20s_for_a_cooldown_restarts_the_job_at_most_1_plus_t_over_cooldown(
        kube, operator, pool, op_namespace, cluster):
    """An elastic 2..4 job on 4 nodes; every 20 s a higher-priority filler pod (another tenant) arrives on one of
    them, preempting the job's pod there if it holds it, and 20 s later it leaves. For one cooldown (120 s) the
    room oscillates between 3 and 4 pods. The job must settle: at most 1 + T/cooldown group restarts (2), none
    charged to the trainer, and no 4 -> 3 -> 4 within the cooldown. Printed for the closing note:
    restarts and the fraction of wall time the job spent Running (bench/capacity_oscillation.py measures the
    operator before the settling rules the same way)."""
    nodes = pool(4)
    priority = f"{op_namespace}-filler"[-63:]
    cluster.kubectl("apply", "-f", "-", input=(
        f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {priority}}}\nvalue: 1000\n"))
    try:
        elastic = {"minReplicas": 2, "maxReplicas": 4, "resizeCooldownSeconds": COOLDOWN_SECONDS}
        job = in_pool(ddpjob("osc", replicas=4, gpus=8, elastic=elastic), op_namespace)
        kube.apply(job)
        status = kube.wait_status("osc", lambda s: s.get("phase") == "Running" and s.get("replicas") == 4,
                                  timeout=PLACED_WITHIN, what="osc Running at 4")
        cooldown = COOLDOWN_SECONDS
        first_attempt = status["attempt"]
        filler = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "filler"},
                  "spec": {"priorityClassName": priority, "nodeSelector": {"kubernetes.io/hostname": nodes[3]},
                           "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0,
                           "containers": [{"name": "c", "image": "example.invalid/tenant:1",
                                           "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
        sizes: list[int] = []
        running = samples = 0
        started = time.monotonic()
        toggles = 0
        while (elapsed := time.monotonic() - started) < OSCILLATION_SECONDS:
            if elapsed >= toggles * TOGGLE_SECONDS:
                if toggles % 2 == 0:
                    kube.apply(filler)
                else:
                    kube("delete", "pod", "filler", "--wait=false", "--grace-period=0", "--force", check=False)
                toggles += 1
            status = kube.status("osc")
            samples += 1
            running += status.get("phase") == "Running"
            if not sizes or sizes[-1] != status.get("replicas"):
                sizes.append(status.get("replicas"))
            time.sleep(1)
        status = kube.status("osc")
        restarts = status["attempt"] - first_attempt
        print(f"capacity oscillation, {OSCILLATION_SECONDS}s, a filler every {TOGGLE_SECONDS}s: {restarts} group "
              f"restarts, sizes {sizes}, Running {running / samples:.0%} of the time ({samples} samples)")
        assert toggles >= OSCILLATION_SECONDS // TOGGLE_SECONDS
        assert restarts <= 1 + OSCILLATION_SECONDS // cooldown, sizes
        assert status["restarts"] == 0, "an eviction by a higher-priority pod is the platform's, not the trainer's"
        assert 3 in sizes and 4 not in sizes[sizes.index(3):], f"the job grew back within the cooldown: {sizes}"
        assert status["platformRestarts"] >= 1 and status["unplaceableSize"] == 4, \
            "the filler must really have taken the room (the test would prove nothing otherwise)"
    finally:
        kube("delete", "pod", "filler", "--wait=false", "--grace-period=0", "--force", check=False)
        cluster.kubectl("delete", "priorityclass", priority, "--wait=false", check=False)


def test_freed_room_goes_first_to_the_higher_priority_job_though_it_is_younger(
        cluster, namespace, op_namespace, pool, tmp_path):
    """Two elastic jobs running at 1 of 2, the younger one of a higher PriorityClass (preemptionPolicy Never, so
    the scheduler itself takes nothing from the older). Room for one more pod appears: the operator offers it to
    the higher-priority job first (room_wakeups.py), which grows, and the older job does not, whichever of the two
    saw the room first. A resync of its own (10 min) keeps the test about room events."""
    nodes = pool(3)
    high = f"{namespace}-high"[-63:]
    cluster.kubectl("apply", "-f", "-", input=(
        f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {high}}}\nvalue: 1000\n"
        "preemptionPolicy: Never\n"))
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False,
                         env={"DDPJOB_RESYNC_SECONDS": "600"}).start()
    kube = Kube(cluster, namespace)
    try:
        blocker(kube, "busy", op_namespace, node=nodes[2])
        elastic = {"minReplicas": 1, "maxReplicas": 2}
        kube.apply(in_pool(ddpjob("old", replicas=1, gpus=8, elastic=elastic), op_namespace))
        kube.wait_status("old", lambda s: s.get("phase") == "Running", timeout=PLACED_WITHIN, what="old Running")
        young = in_pool(ddpjob("young", replicas=1, gpus=8, elastic=elastic), op_namespace)
        young["spec"]["template"]["spec"]["priorityClassName"] = high
        kube.apply(young)
        kube.wait_status("young", lambda s: s.get("phase") == "Running", timeout=PLACED_WITHIN,
                         what="young Running")
        attempts = {name: kube.status(name)["attempt"] for name in ("old", "young")}
        for name in ("old", "young"):  # both want 2 now; no room for either: they go on at 1, no restart
            kube("patch", "ddpj", name, "--type=merge", "-p", '{"spec": {"replicas": 2}}')
            status = kube.wait_status(name, lambda s: s.get("sizeText") == "1/2", timeout=PLACED_WITHIN,
                                      what=f"{name} at 1 of 2")
            assert (status["phase"], status["attempt"]) == ("Running", attempts[name]), status

        kube("delete", "pod", "busy", "--wait=false")  # room for one 8-GPU pod: both could use it
        status = kube.wait_status("young", lambda s: s.get("phase") == "Running" and s.get("replicas") == 2,
                                  timeout=PLACED_WITHIN, what="young grown into the freed room")
        assert status["attempt"] == attempts["young"] + 1
        # Had the older job been offered the room first, it would have grown into it, and young could not have.
        old = kube.status("old")
        assert (old["phase"], old["attempt"], old["sizeText"]) == ("Running", attempts["old"], "1/2"), \
            "the older, lower-priority job must not have restarted to take the same room"
        assert "GrewToFit" not in {e["reason"] for e in kube.events("old")}
    finally:
        op.stop()
        cluster.kubectl("delete", "priorityclass", high, "--wait=false", check=False)
