"""An elastic digits job on three local nodes (LOCAL_NODES=3 on one machine) with real torchrun training: one
node agent stops mid-run, the group continues at 2 from its checkpoint with the same global batch and learning rate
(B/N per rank), the agent comes back, the group grows back to 3, and the job ends Succeeded at its target step."""

from __future__ import annotations

import json

import pytest

from conftest import apply_job, digits_job, job_status
from ddp_trainer.progress_log import SIZED
from ddpjob_localnode.recovery import parse_trainer_log
from support import localnode
from support.cluster import wait_until
from test_local_jobs import JOB_TIMEOUT, run_to_end, worker0_log

STEPS = 300
# The shrink-and-grow test's group at 2 must still be training when the stopped node is back (its agent started
# and Ready, then the operator's grow): at one intra-op thread per local rank, 300 steps at 2 ended first.
GROW_BACK_STEPS = 3000
GLOBAL_BATCH = 96


@pytest.fixture
def three_local_nodes(cluster, local_node):
    """Agents 1 and 2 beside the session's agent 0: three nodes on this machine."""
    names = [local_node] + [localnode.start_extra(cluster, index, nodes=3) for index in (1, 2)]
    yield names
    for index in (1, 2):
        localnode.stop_extra(index)
    for name in names[1:]:
        cluster.kubectl("delete", "node", name, "--wait=false", check=False)


def sized(cluster, namespace: str) -> tuple[int, int, int, float]:
    """(world size, global batch, per-rank batch, peak lr) from worker 0's `sized` line of the current attempt."""
    found = wait_until(lambda: SIZED.search(worker0_log(cluster, namespace, "el")), timeout=JOB_TIMEOUT,
                       what="worker 0's sized line")
    return int(found["world"]), int(found["batch"]), int(found["rank_batch"]), float(found["lr"])


def wait_size(cluster, namespace: str, size: int) -> dict:
    def at_size():
        status = job_status(cluster, namespace, "el")
        return status.get("phase") == "Running" and status.get("replicas") == size and status
    return wait_until(at_size, timeout=JOB_TIMEOUT, interval=0.5, what=f"el Running at {size} pods")


def elastic_job(steps: int = STEPS) -> dict:
    job = digits_job(name="el", steps=steps, every=20, replicas=3, nprocPerNode=1,
                     elastic={"minReplicas": 2, "maxReplicas": 3})
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [a for a in container["args"] if not a.startswith("--train.batch-size-per-rank")]
    container["args"].append(f"--train.global-batch-size={GLOBAL_BATCH}")
    # One pod per node, so that losing a node loses a pod.
    job["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"ddpjob.dev/job-name": "el"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    return job


def test_an_elastic_job_shrinks_when_a_local_node_stops_and_grows_back_when_it_returns(
        cluster, operator, namespace, three_local_nodes):
    apply_job(cluster, namespace, elastic_job(GROW_BACK_STEPS))
    status = wait_size(cluster, namespace, 3)
    assert status["worldSize"] == 3 and status["sizeText"] == "3/3"
    world3, batch3, rank_batch3, lr3 = sized(cluster, namespace)
    assert (world3, batch3, rank_batch3) == (3, GLOBAL_BATCH, GLOBAL_BATCH // 3)
    wait_until(lambda: (parse_trainer_log(worker0_log(cluster, namespace, "el")).steps or [0])[-1] >= 60,
               timeout=JOB_TIMEOUT, interval=0.5, what="step 60 at size 3")

    lost = three_local_nodes[2]
    localnode.stop_extra(2)
    status = wait_size(cluster, namespace, 2)
    assert (status["restarts"], status["platformRestarts"]) == (0, 1), "a lost node is one platform failure"
    assert status["sizeText"] == "2/3" and status["worldSize"] == 2
    assert all(p["spec"].get("nodeName") != lost for p in _current_pods(cluster, namespace, status["attempt"]))
    world2, batch2, rank_batch2, lr2 = sized(cluster, namespace)
    assert (world2, batch2, rank_batch2) == (2, GLOBAL_BATCH, GLOBAL_BATCH // 2), "same global batch, B/N per rank"
    assert lr2 == lr3, "the learning rate follows the global batch, which a resize keeps"
    trainer = wait_until(lambda: (t := parse_trainer_log(worker0_log(cluster, namespace, "el"))).resumed_step and t,
                         timeout=JOB_TIMEOUT, what="the group at 2 resumed from a checkpoint")
    assert trainer.resumed_step >= 20

    localnode.start_extra(cluster, 2, nodes=3)
    status = wait_size(cluster, namespace, 3)
    assert (status["restarts"], status["platformRestarts"]) == (0, 1), "growing back spends no restart"
    assert sized(cluster, namespace)[:3] == (3, GLOBAL_BATCH, GLOBAL_BATCH // 3)

    status = run_to_end(cluster, namespace, job="el")
    assert status["phase"] == "Succeeded", status
    final = parse_trainer_log(worker0_log(cluster, namespace, "el"))
    # The last attempt trained to the target step, or, when the node came back during the last steps, resumed
    # from the checkpoint the size-2 group wrote at the target step and only evaluated.
    reached = final.steps[-1] if final.steps else final.resumed_step
    assert reached == GROW_BACK_STEPS, final
    assert final.accuracy is not None and final.accuracy >= 0.90, final
    reasons = [e["reason"] for e in _events(cluster, namespace)]
    assert "GrewToFit" in reasons and "Restarting" in reasons


def _current_pods(cluster, namespace: str, attempt: int) -> list[dict]:
    out = cluster.kubectl("-n", namespace, "get", "pods", "-l",
                          f"ddpjob.dev/job-name=el,ddpjob.dev/restart-attempt={attempt}", "-o", "json")
    return json.loads(out.stdout)["items"]


def _events(cluster, namespace: str) -> list[dict]:
    out = cluster.kubectl("-n", namespace, "get", "events", "--field-selector", "involvedObject.name=el", "-o",
                          "json")
    return json.loads(out.stdout)["items"]



def _agent_index(node: str, names: list[str]) -> int:
    return names.index(node)


@pytest.mark.parametrize("strategy", ["Recreate", "InPlace"])
def test_a_group_that_lost_a_node_trains_on_at_2_without_waiting_for_the_pod_stuck_on_that_node(
        cluster, operator, namespace, three_local_nodes, strategy):
    """No out-of-service taint: the lost node's pod stays Terminating (termination.py will not force-delete it for
    300 s, its containers may still run), and the group at 2 must not wait for it. The lost pod is worker 0, the
    rendezvous host, whose name the new group needs too: it takes another (pod_names.py). Under InPlace too: pod 0
    hosts the rendezvous store, so its loss recreates the group (replace_pod.py)."""
    job = elastic_job()
    job["spec"]["runPolicy"] = {**job["spec"].get("runPolicy", {}), "restartStrategy": strategy}
    apply_job(cluster, namespace, job)
    status = wait_size(cluster, namespace, 3)
    wait_until(lambda: (parse_trainer_log(worker0_log(cluster, namespace, "el")).steps or [0])[-1] >= 40,
               timeout=JOB_TIMEOUT, interval=0.5, what="step 40 at size 3")
    first = {p["metadata"]["name"]: p for p in _current_pods(cluster, namespace, status["attempt"])}
    lost = first["el-worker-0"]["spec"]["nodeName"]
    index = _agent_index(lost, three_local_nodes)
    (localnode.stop if index == 0 else lambda: localnode.stop_extra(index))()
    try:
        status = wait_size(cluster, namespace, 2)
        current = _current_pods(cluster, namespace, status["attempt"])
        names = sorted(p["metadata"]["name"] for p in current)
        assert all(p["spec"].get("nodeName") != lost for p in current)
        new0 = next(n for n in names if n.startswith("el-worker-0"))
        if new0 != "el-worker-0":
            # The new group did not wait for the lost node's pod: it took another name while that pod, the same
            # one, was still Terminating (not force-deleted: its node was NotReady for far less than 300 s).
            assert names == sorted([f"el-worker-0-{status['attempt']}", "el-worker-1"]), names
            old = json.loads(cluster.kubectl("-n", namespace, "get", "pod", "el-worker-0", "-o", "json",
                                             check=False).stdout or "{}")
            assert not old or old["metadata"]["uid"] == first["el-worker-0"]["metadata"]["uid"]
        else:
            # Its pod was gone before the new group was made (its Node object removed, say): nothing to wait for.
            assert names == ["el-worker-0", "el-worker-1"], names

        def log0() -> str:
            return cluster.kubectl("-n", namespace, "logs", new0, "--timestamps", check=False).stdout

        found = wait_until(lambda: SIZED.search(log0()), timeout=JOB_TIMEOUT, what="the group at 2 formed")
        assert int(found["world"]) == 2
        status = run_to_end(cluster, namespace, job="el")
        assert status["phase"] == "Succeeded", status
        assert parse_trainer_log(log0()).steps[-1] == STEPS
    finally:
        if index == 0:
            localnode.start(cluster)
        else:
            localnode.start_extra(cluster, index, nodes=3)


def test_in_place_a_lost_nodes_pod_is_replaced_alone_the_others_train_on_at_2_and_take_it_back(
        cluster, operator, namespace, three_local_nodes):
    """InPlace, elastic 2..3, the node of worker 2 stops (no out-of-service taint): worker 2 alone is replaced, the
    two others keep their pods and train on at 2 meanwhile (their agents accept 2..3 nodes); the replacement waits
    for room (one pod per node), the node returns, and the group takes it back at 3, still attempt 0.
    The job trains until the test has seen that: sized by steps (900), the survivors at 2 finished first on CI as
    the node came back (the replacement then found their rendezvous closed: test_in_place_policy.py). A replaced
    pod's job ending Succeeded is test_in_place.py's."""
    job = elastic_job(steps=1_000_000)
    job["spec"]["runPolicy"] = {**job["spec"].get("runPolicy", {}), "restartStrategy": "InPlace"}
    apply_job(cluster, namespace, job)
    wait_size(cluster, namespace, 3)
    wait_until(lambda: (parse_trainer_log(worker0_log(cluster, namespace, "el")).steps or [0])[-1] >= 40,
               timeout=JOB_TIMEOUT, interval=0.5, what="step 40 at size 3")
    first = {p["metadata"]["name"]: p for p in _current_pods(cluster, namespace, 0)}
    lost = first["el-worker-2"]["spec"]["nodeName"]
    index = _agent_index(lost, three_local_nodes)

    def worlds() -> list[int]:
        return [int(m["world"]) for m in SIZED.finditer(worker0_log(cluster, namespace, "el"))]

    (localnode.stop if index == 0 else lambda: localnode.stop_extra(index))()
    try:
        replacing = wait_until(lambda: (s := job_status(cluster, namespace, "el")).get("replacing") and s,
                               timeout=JOB_TIMEOUT, interval=0.5, what="worker 2 being replaced")
        assert replacing["replacing"] == {"2": first["el-worker-2"]["metadata"]["uid"]}
        assert replacing["attempt"] == 0 and replacing["phase"] == "Running", replacing
        wait_until(lambda: 2 in worlds() or None, timeout=JOB_TIMEOUT, what="the survivors training on at 2")
    finally:
        if index == 0:
            localnode.start(cluster)
        else:
            localnode.start_extra(cluster, index, nodes=3)
    seen = wait_until(lambda: (w := worlds()) and 2 in w and 3 in w[w.index(2):] and w, timeout=JOB_TIMEOUT,
                      what="the group back at 3 after training at 2")
    assert seen[0] == 3 and 2 in seen, seen

    def recovered():
        s = job_status(cluster, namespace, "el")
        return any("recoverySeconds" in r for r in s.get("recoveries") or []) and not s.get("replacing") and s

    status = wait_until(recovered, timeout=JOB_TIMEOUT, interval=0.5, what="the replacement's recovery closed")
    assert (status["phase"], status["attempt"], status["platformRestarts"]) == ("Running", 0, 1), status
    assert [r["how"] for r in status["recoveries"]] == ["PodReplaced"], status["recoveries"]
    now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _current_pods(cluster, namespace, 0)}
    for name in ("el-worker-0", "el-worker-1"):
        assert now[name] == first[name]["metadata"]["uid"], f"{name} was never replaced"
    # The three train on together.
    at_join = parse_trainer_log(worker0_log(cluster, namespace, "el")).steps[-1]
    wait_until(lambda: parse_trainer_log(worker0_log(cluster, namespace, "el")).steps[-1] >= at_join + 20,
               timeout=JOB_TIMEOUT, interval=0.5, what="20 steps at 3 after the join")
    assert worlds()[-1] == 3
    cluster.kubectl("-n", namespace, "delete", "ddpj", "el", "--wait=false")
    wait_until(lambda: not _current_pods(cluster, namespace, 0), timeout=120, interval=0.5,
               what="the job's pods gone with it")
