"""Placed pod by pod, never deadlocked nor burning the budget (placement_timeout.py): an operator without gang
scheduling (--gang-scheduling=off, as on a cluster with neither the PodGroup API nor Kueue), the real scheduler,
kwok nodes of the test's own pool. Two rigid 2 x 8-GPU jobs with room for 3 pods: both finish, neither fails,
`restarts` stays 0, and a partly placed group releases what it holds."""

from __future__ import annotations

import time

from support.cluster import wait_until
from support.operator import OperatorProcess

from ddpjob_manifests import ddpjob
from namespaced_kubectl import Kube
from test_placement import in_pool, pool  # noqa: F401 (pool is a fixture)


def test_two_rigid_jobs_with_room_for_three_pods_both_finish_without_a_failure(
        cluster, namespace, op_namespace, pool, tmp_path):
    pool(3)
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False,
                         env={"DDPJOB_GANG_SCHEDULING": "off"}).start()
    kube = Kube(cluster, namespace)
    try:
        for name in ("pa", "pb"):
            kube.apply(in_pool(ddpjob(name, replicas=2, gpus=8, runPolicy={"placementTimeoutSeconds": 10}),
                               op_namespace))
        finished: set[str] = set()
        held_partly = 0.0  # GPU-seconds held by a group that is not whole: what the timeout bounds
        deadline = time.monotonic() + 300
        last = time.monotonic()
        while len(finished) < 2 and time.monotonic() < deadline:
            now = time.monotonic()
            for name in ("pa", "pb"):
                status = kube.status(name)
                assert status.get("phase") != "Failed", status
                if name in finished or status.get("phase") != "Running":
                    bound = [p for p in kube.pods(name) if p["spec"].get("nodeName")
                             and not p["metadata"].get("deletionTimestamp")]
                    if 0 < len(bound) < 2:
                        held_partly += 8 * len(bound) * (now - last)
                    if status.get("phase") == "Succeeded":
                        finished.add(name)
                    continue
                for index in range(2):  # the group ran: its trainers finish
                    kube.succeed_pod(f"{name}-worker-{index}")
            last = now
            time.sleep(1)
        assert finished == {"pa", "pb"}, {n: kube.status(n).get("phase") for n in ("pa", "pb")}
        for name in ("pa", "pb"):
            status = kube.status(name)
            assert (status["restarts"], status["platformRestarts"], status["placement"]) == (0, 0, "PodByPod")
        print(f"GPU-seconds held by partly placed groups: {held_partly:.0f}")
    finally:
        op.stop()


def test_a_partly_placed_rigid_group_releases_its_gpus_and_waits_spending_nothing(
        cluster, namespace, op_namespace, pool, tmp_path):
    pool(1)  # room for one of its two 8-GPU pods
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False,
                         env={"DDPJOB_GANG_SCHEDULING": "off"}).start()
    kube = Kube(cluster, namespace)
    try:
        kube.apply(in_pool(ddpjob("half", replicas=2, gpus=8, runPolicy={"placementTimeoutSeconds": 10}),
                           op_namespace))
        wait_until(lambda: any(p["spec"].get("nodeName") for p in kube.pods("half")), timeout=60,
                   what="one pod placed, the other waiting")
        status = kube.wait_status("half", lambda s: s.get("reason") == "PlacementTimeout", timeout=90,
                                  what="the placement timeout")
        assert (status["phase"], status["restarts"], status["platformRestarts"]) == ("Pending", 0, 0)
        assert status["attempt"] >= 1 and status["placementTimeouts"] >= 1
        # The placed pod of the released attempt goes: it holds no GPU while the job waits for its backoff.
        wait_until(lambda: not [p for p in kube.pods("half") if p["spec"].get("nodeName")
                                and p["metadata"]["labels"]["ddpjob.dev/restart-attempt"] == "0"],
                   timeout=60, what="the partly placed attempt's pods released")
        assert "PlacementTimeout" in {e["reason"] for e in kube.events("half")}
    finally:
        op.stop()


def test_an_elastic_job_that_cannot_place_all_its_pods_trains_at_the_placed_size(
        cluster, namespace, op_namespace, pool, tmp_path):
    """Three 16-GPU nodes and one pod a node (required anti-affinity, which the capacity estimate does not
    model): the estimate says 6 fit, so the job starts at 4; the scheduler binds 3 and the 4th waits. Pod by pod,
    those 3 hold their GPUs; after the placement timeout the job continues at the 3 that are placed (PlacedToFit),
    spending no budget, and the new attempt's rendezvous says 3 nodes."""
    nodes = pool(3, gpus=16)
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False,
                         env={"DDPJOB_GANG_SCHEDULING": "off"}).start()
    kube = Kube(cluster, namespace)
    try:
        job = in_pool(ddpjob("el", replicas=4, gpus=8, elastic={"minReplicas": 2, "maxReplicas": 4},
                             runPolicy={"placementTimeoutSeconds": 10}), op_namespace)
        job["spec"]["template"]["metadata"] = {"labels": {"spread": "el"}}
        job["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"spread": "el"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        kube.apply(job)
        first = kube.wait_status("el", lambda s: s.get("attempt") == 0 and s.get("replicas") == 4, timeout=60,
                                 what="the first attempt at 4, as the estimate promises")
        assert first["placement"] == "PodByPod"
        status = kube.wait_status("el", lambda s: s.get("phase") == "Running", timeout=180,
                                  what="el Running at the placed size")
        assert (status["replicas"], status["sizeText"], status["reason"]) == (3, "3/4", "AllPodsRunning")
        assert (status["restarts"], status["platformRestarts"], status["attempt"]) == (0, 0, 1)
        pods = kube.running_pods("el", attempt=1, n=3, timeout=60)
        env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
        assert env["PET_NNODES"] == "3", env
        assert {p["spec"]["nodeName"] for p in pods} == set(nodes)
        assert "PlacedToFit" in {e["reason"] for e in kube.events("el")}
    finally:
        op.stop()
