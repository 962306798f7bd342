"""All-or-nothing placement and capacity-driven elasticity against the real kube-scheduler (v1.36 gang scheduling,
served by the local cluster) on kwok GPU nodes.

Each test gets nodes of its own (a pool: kwok nodes labelled with the test's namespace) and its jobs select them,
so how much fits is exactly what the test says, whatever other tests left on the shared nodes. Room is taken by
plain 8-GPU "blocker" pods in the pool, and given back by deleting them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from support.cluster import wait_until
from support.nodes import NodePool, bring_node_up, take_node_down

from ddpjob_manifests import ddpjob

PLACED_WITHIN = 60  # seconds: scheduler backoff plus a reconcile; generous for a loaded CI machine


@pytest.fixture
def pool(kube_api, op_namespace):
    """Make nodes of this test's own: pool(n) -> their names, all Ready, 8 GPUs each."""
    nodes = NodePool(client.CoreV1Api(kube_api), op_namespace)
    yield nodes
    nodes.delete()


def in_pool(manifest: dict, pool_label: str) -> dict:
    manifest["spec"]["template"]["spec"]["nodeSelector"] = {"pool": pool_label}
    return manifest


def blocker(kube, name: str, pool_label: str, node: str | None = None) -> None:
    """A plain pod (not a DDPJob's) holding one node's 8 GPUs."""
    spec = {"containers": [{"name": "c", "image": "example.invalid/busy:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            "nodeSelector": {"pool": pool_label, **({"kubernetes.io/hostname": node} if node else {})}}
    kube.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    wait_until(lambda: (kube.get("pod", name) or {}).get("status", {}).get("phase") == "Running", timeout=60,
               what=f"blocker {name} running")


def bound(kube, job: str) -> list[dict]:
    return [p for p in kube.pods(job) if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]


def placed_condition(status: dict) -> dict | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == "PodsPlaced"), None)


def test_the_local_cluster_serves_podgroups(cluster):
    resources = cluster.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name").stdout
    assert "podgroups.scheduling.k8s.io" in resources


def test_a_rigid_job_with_room_for_one_pod_binds_nothing_says_why_and_starts_when_a_node_frees(
        kube, operator, pool, op_namespace):
    nodes = pool(2)
    blocker(kube, "busy", op_namespace, node=nodes[0])
    kube.apply(in_pool(ddpjob("rigid", replicas=2, gpus=8), op_namespace))
    status = kube.wait_status("rigid", lambda s: (placed_condition(s) or {}).get("status") == "False",
                              timeout=PLACED_WITHIN, what="PodsPlaced=False")
    assert status["phase"] == "Pending" and status["reason"] == "Unschedulable" and status["placement"] == "Gang"
    assert "cannot be placed" in placed_condition(status)["message"]
    assert "Unschedulable" in {e["reason"] for e in kube.events("rigid")}
    row = kube("get", "ddpj", "rigid", "--no-headers").stdout.split()
    assert row[1:3] == ["Pending", "2/2"] and "Unschedulable" in row
    # Both pods exist, point at the attempt's gang, and neither holds a node.
    pods = kube.pods("rigid")
    assert len(pods) == 2 and bound(kube, "rigid") == []
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {"rigid-0"}
    group = kube.get("podgroups.scheduling.k8s.io", "rigid-0")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert group["metadata"]["ownerReferences"][0]["name"] == "rigid"

    kube("delete", "pod", "busy", "--wait=false")
    kube.running_pods("rigid", attempt=0, n=2, timeout=PLACED_WITHIN)
    status = kube.wait_phase("rigid", "Running")
    assert placed_condition(status)["status"] == "True"
    assert status["restarts"] == 0


def test_two_rigid_jobs_that_do_not_fit_together_one_runs_whole_the_other_holds_nothing(
        kube, operator, pool, op_namespace):
    pool(3)
    for name in ("left", "right"):
        kube.apply(in_pool(ddpjob(name, replicas=2, gpus=8), op_namespace))

    def one_running_one_waiting():
        statuses = {n: kube.status(n) or {} for n in ("left", "right")}
        running = [n for n, s in statuses.items() if s.get("phase") == "Running"]
        waiting = [n for n, s in statuses.items() if (placed_condition(s) or {}).get("status") == "False"]
        return (running, waiting) if len(running) == 1 and len(waiting) == 1 else None

    running, waiting = wait_until(one_running_one_waiting, timeout=PLACED_WITHIN,
                                  what="one job running, the other waiting")
    assert len(bound(kube, running[0])) == 2
    assert bound(kube, waiting[0]) == [], "the waiting job holds no GPU"


def test_an_elastic_job_starts_at_the_size_that_fits_then_grows_back_when_a_node_frees(
        kube, operator, pool, op_namespace):
    nodes = pool(4)
    blocker(kube, "busy", op_namespace, node=nodes[0])
    kube.apply(in_pool(ddpjob("big", replicas=4, gpus=8, elastic={"minReplicas": 2, "maxReplicas": 4}),
                       op_namespace))
    status = kube.wait_status("big", lambda s: s.get("phase") == "Running", timeout=PLACED_WITHIN,
                              what="big Running at the size that fits")
    assert (status["replicas"], status["desiredReplicas"], status["sizeText"]) == (3, 4, "3/4")
    assert status["worldSize"] == 3 * 8
    attempt = status["attempt"]
    pods = kube.running_pods("big", attempt=attempt, n=3)
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "3"

    kube("delete", "pod", "busy", "--wait=false")
    status = kube.wait_status("big", lambda s: s.get("replicas") == 4 and s.get("phase") == "Running",
                              timeout=PLACED_WITHIN, what="big grown back to 4")
    assert status["sizeText"] == "4/4" and status["worldSize"] == 32
    assert status["restarts"] == 0, "a grow is not a failure"
    assert "GrewToFit" in {e["reason"] for e in kube.events("big")}
    assert len(bound(kube, "big")) == 4
    assert operator.process.metric("ddpjob_resize_duration_seconds_count", direction="grow") >= 1


def test_a_lost_node_under_an_elastic_job_shrinks_it_then_it_grows_back_when_the_node_returns(
        kube, kube_api, operator, pool, op_namespace):
    core = client.CoreV1Api(kube_api)
    pool(3)
    kube.apply(in_pool(ddpjob("el", replicas=3, gpus=8, elastic={"minReplicas": 2, "maxReplicas": 3}),
                       op_namespace))
    status = kube.wait_phase("el", "Running", timeout=PLACED_WITHIN)
    assert status["replicas"] == 3
    victim = bound(kube, "el")[-1]["spec"]["nodeName"]
    take_node_down(core, victim)
    status = kube.wait_status("el", lambda s: s.get("replicas") == 2 and s.get("phase") == "Running",
                              timeout=120, what="el continues at 2")
    assert (status["restarts"], status["platformRestarts"]) == (0, 1), \
        "a lost node is the platform's failure: one restart counted against platformFailureLimit"
    assert status["lastFailure"]["kind"] == "NodeLost"
    assert status["sizeText"] == "2/3"
    assert victim not in {p["spec"]["nodeName"] for p in bound(kube, "el")}

    bring_node_up(core, victim)
    status = kube.wait_status("el", lambda s: s.get("replicas") == 3 and s.get("phase") == "Running",
                              timeout=120, what="el back at 3")
    assert (status["restarts"], status["platformRestarts"]) == (0, 1), "growing back spends nothing"
    reasons = [e["reason"] for e in kube.events("el")]
    assert "GrewToFit" in reasons and "Restarting" in reasons
    print(json.dumps({"events": reasons}))


@pytest.mark.parametrize("recovery", [
    {"faultTolerance": {"mode": "TorchFT"}},
    {"runPolicy": {"restartStrategy": "InPlace"}},
], ids=["TorchFT", "InPlace"])
def test_a_pod_replaced_alone_joins_its_attempts_podgroup_and_is_bound(kube, operator, pool, op_namespace, recovery):
    """The replacement takes the lost pod's place in the attempt's gang (no second PodGroup); the quorum its running
    peers meet lets the scheduler bind it; the others keep their uid."""
    pool(3)
    kube.apply(in_pool(ddpjob("rep", replicas=3, **recovery), op_namespace))
    kube.wait_phase("rep", "Running", timeout=PLACED_WITHIN)
    workers = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods("rep")
               if p["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"}
    assert len(workers) == 3
    group = next(p for p in kube.pods("rep") if p["metadata"]["name"] == "rep-worker-0")["spec"]["schedulingGroup"][
        "podGroupName"]
    kube.fail_pod("rep-worker-1", exit_code=137, message="killed")

    def replacement():
        return next((p for p in bound(kube, "rep") if p["metadata"]["labels"].get("ddpjob.dev/replica-index") == "1"
                     and p["metadata"]["uid"] != workers["rep-worker-1"]
                     and p["status"].get("phase") == "Running"), None)

    new = wait_until(replacement, timeout=PLACED_WITHIN, what="the replacement bound and running")
    assert new["spec"]["schedulingGroup"]["podGroupName"] == group
    groups = json.loads(kube("get", "podgroups.scheduling.k8s.io", "-o", "json").stdout)["items"]
    assert [g["metadata"]["name"] for g in groups] == [group], "no second gang for one replacement"
    status = kube.wait_status("rep", lambda s: "replacing" not in s and s.get("phase") == "Running", timeout=60,
                              what="the replacement taken in")
    assert status["attempt"] == 0 and status["recoveries"][-1]["how"] in ("ReplicaGroupReplaced", "PodReplaced")
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods("rep")}
    assert {n: now.get(n) for n in ("rep-worker-0", "rep-worker-2")} == {
        n: workers[n] for n in ("rep-worker-0", "rep-worker-2")}
