"""Whole-group restarts: a pod failure restarts every pod as a new attempt, within the budget; ExitCode and
Never fail at once; a pod stuck Terminating on a NotReady node does not block the restart."""

from __future__ import annotations

import json
import time

import pytest

from support.cluster import wait_until

from ddpjob_manifests import ddpjob


def attempts_of(pods: list[dict]) -> set[str]:
    return {p["metadata"]["labels"]["ddpjob.dev/restart-attempt"] for p in pods}


def test_pod_failure_restarts_the_whole_group(kube, operator):
    kube.apply(ddpjob("rs", replicas=3, gpus=2))
    old = {p["metadata"]["uid"] for p in kube.running_pods("rs", attempt=0, n=3)}
    kube.wait_phase("rs", "Running")
    kube.fail_pod("rs-worker-1", exit_code=1, message="RuntimeError: NCCL error")

    new = kube.running_pods("rs", attempt=1, n=3)
    status = kube.wait_phase("rs", "Running")
    assert (status["restarts"], status["attempt"]) == (1, 1)
    assert not old & {p["metadata"]["uid"] for p in new}, "every pod of attempt 0 is replaced"
    assert attempts_of(kube.pods("rs")) == {"1"}
    assert status["lastFailure"]["pod"] == "rs-worker-1"
    assert status["lastFailure"]["exitCode"] == 1
    assert status["lastFailure"]["message"] == "RuntimeError: NCCL error"
    restarting = [e for e in kube.events("rs") if e["reason"] == "Restarting"]
    assert restarting and "pod rs-worker-1 exited with code 1 (Error): RuntimeError: NCCL error" in \
        restarting[0]["message"]
    env = {e["name"]: e.get("value") for e in new[0]["spec"]["containers"][0]["env"]}
    assert (env["DDPJOB_ATTEMPT"], env["DDPJOB_RESTARTS"]) == ("1", "1")
    assert env["PET_RDZV_ID"].endswith("-1")
    assert operator.metric("ddpjob_group_restarts_total", reason="ExitCode") == 1
    assert operator.metric("ddpjob_recovery_duration_seconds_count") == 1


def test_exit_code_1_under_exitcode_policy_fails_without_restart(kube, operator):
    kube.apply(ddpjob("ec", replicas=2, gpus=1, restartPolicy="ExitCode"))
    kube.running_pods("ec", attempt=0, n=2)
    kube.fail_pod("ec-worker-0", exit_code=1, message="ValueError: bad config")
    status = kube.wait_phase("ec", "Failed")
    assert (status["restarts"], status["attempt"]) == (0, 0)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PermanentExitCode"
    assert failed["message"] == ("pod ec-worker-0 exited with code 1 (Error): ValueError: bad config; exit codes "
                                 "1-127 are permanent under restartPolicy ExitCode")
    assert status["completionTime"]
    # cleanPodPolicy Running (the default): the still-running worker is deleted, the failed one kept for logs.
    wait_until(lambda: [p["metadata"]["name"] for p in kube.pods("ec")] == ["ec-worker-0"], timeout=30,
               what="running pod cleaned up")
    assert operator.metric("ddpjob_jobs_failed_total") == 1


def test_exit_137_under_exitcode_policy_restarts(kube, operator):
    kube.apply(ddpjob("ec137", replicas=1, gpus=1, restartPolicy="ExitCode"))
    kube.running_pods("ec137", attempt=0, n=1)
    kube.fail_pod("ec137-worker-0", exit_code=137, reason="OOMKilled", message="")
    kube.running_pods("ec137", attempt=1, n=1)
    assert kube.wait_phase("ec137", "Running")["restarts"] == 1


def test_budget_exhausted_fails_with_backoff_limit_exceeded(kube, operator):
    kube.apply(ddpjob("bud", replicas=2, gpus=1, runPolicy={"backoffLimit": 2}))
    for attempt in range(3):
        kube.running_pods("bud", attempt=attempt, n=2)
        kube.fail_pod("bud-worker-1", exit_code=2, message=f"crash {attempt}")
    status = kube.wait_phase("bud", "Failed")
    assert (status["restarts"], status["attempt"]) == (2, 2)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == ("pod bud-worker-1 exited with code 2 (Error): crash 2; backoffLimit 2 reached "
                                 "after 2 restarts")
    assert "BackoffLimitExceeded" in {e["reason"] for e in kube.events("bud")}


def test_restart_policy_never_fails_on_first_failure(kube, operator):
    kube.apply(ddpjob("nev", replicas=1, gpus=1, restartPolicy="Never"))
    kube.running_pods("nev", attempt=0, n=1)
    kube.fail_pod("nev-worker-0", exit_code=137)
    status = kube.wait_phase("nev", "Failed")
    assert next(c for c in status["conditions"] if c["type"] == "Failed")["reason"] == "PodFailed"


def test_deleted_pod_restarts_the_group(kube, operator):
    kube.apply(ddpjob("del", replicas=2, gpus=1))
    kube.running_pods("del", attempt=0, n=2)
    kube.wait_phase("del", "Running")
    kube("delete", "pod", "del-worker-0", "--wait=false")
    kube.running_pods("del", attempt=1, n=2)
    status = kube.wait_phase("del", "Running")
    assert (status["restarts"], status["platformRestarts"]) == (0, 1)  # someone else's deletion: the platform's
    assert (status["lastFailure"]["kind"], status["lastFailure"]["failureClass"]) == ("Deleted", "Platform")


def test_job_succeeds_when_all_pods_succeed(kube, operator):
    kube.apply(ddpjob("ok", replicas=2, gpus=1))
    kube.running_pods("ok", attempt=0, n=2)
    for i in range(2):
        kube.succeed_pod(f"ok-worker-{i}")
    status = kube.wait_phase("ok", "Succeeded")
    assert status["completionTime"] and status["restarts"] == 0
    assert "Succeeded" in {e["reason"] for e in kube.events("ok")}
    assert operator.metric("ddpjob_jobs_succeeded_total") == 1


def set_node_ready(cluster, node: str, ready: bool) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    patch = {"status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                        "reason": "KubeletReady" if ready else "KubeletStopped",
                                        "message": "simulated", "lastHeartbeatTime": now,
                                        "lastTransitionTime": now}]}}
    cluster.kubectl("patch", "node", node, "--subresource=status", "--type=strategic", "-p", json.dumps(patch))


@pytest.fixture
def spare_node(cluster, op_namespace):
    """A node of our own that no kwok manages, so nothing runs or removes its pods: like a node whose kubelet
    died. The test drives its Ready condition and its pods' status by hand."""
    name = f"spare-{op_namespace}"[:60]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"spare": name}},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                       "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(node))
    set_node_ready(cluster, name, True)
    yield name
    cluster.kubectl("delete", "node", name, "--wait=false", check=False)


def mark_running(kube, pod: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    patch = {"status": {"phase": "Running", "podIP": "10.250.0.9", "containerStatuses": [{
        "name": "trainer", "ready": True, "restartCount": 0, "image": "example.invalid/trainer:1", "imageID": "",
        "state": {"running": {"startedAt": now}}}]}}
    kube("patch", "pod", pod, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def test_pod_stuck_terminating_on_a_notready_node_is_force_deleted_and_replaced(kube, operator, cluster,
                                                                                spare_node):
    job = ddpjob("nl", replicas=1, gpus=8)
    job["spec"]["template"]["spec"]["nodeName"] = spare_node  # bound directly: no scheduler, no kwok
    kube.apply(job)
    wait_until(lambda: kube.pods("nl"), timeout=30, what="pod created")
    old_uid = kube.pods("nl")[0]["metadata"]["uid"]
    mark_running(kube, "nl-worker-0")
    kube.wait_phase("nl", "Running")
    set_node_ready(cluster, spare_node, False)
    # After the node-lost grace the group restarts; the old pod's deletion is never confirmed (no kubelet), so it
    # sits Terminating until the operator force-deletes it; then attempt 1's pod (same name) is created.
    status = kube.wait_status("nl", lambda s: s.get("attempt") == 1 and s.get("launchedAttempt") == 1, timeout=60,
                              what="attempt 1 launched")
    assert (status["restarts"], status["platformRestarts"]) == (0, 1)
    assert (status["lastFailure"]["kind"], status["lastFailure"]["failureClass"]) == ("NodeLost", "Platform")
    assert status["lastFailure"]["message"] == f"node {spare_node} is not Ready"
    pods = kube.pods("nl")
    assert [(p["metadata"]["labels"]["ddpjob.dev/restart-attempt"], p["metadata"]["uid"] != old_uid)
            for p in pods] == [("1", True)]
    assert "force-deleted pod" in operator.log()


def test_evictions_and_lost_nodes_never_spend_the_trainers_budget(kube, operator, cluster, spare_node):
    """5 evictions (the eviction API: DisruptionTarget) and 2 node losses on a job with backoffLimit 1: it keeps
    running, and each count is right; then the trainer's own exit 1 twice fails it at backoffLimit, as before."""
    job = ddpjob("wx", replicas=1, gpus=8, runPolicy={"backoffLimit": 1})
    job["spec"]["template"]["spec"]["nodeName"] = spare_node  # bound directly: the test plays its kubelet
    kube.apply(job)

    def running_attempt(attempt: int) -> dict:
        wait_until(lambda: [p for p in kube.pods("wx") if p["metadata"]["labels"]["ddpjob.dev/restart-attempt"]
                            == str(attempt) and not p["metadata"].get("deletionTimestamp")],
                   timeout=60, what=f"attempt {attempt}'s pod")
        mark_running(kube, "wx-worker-0")
        return kube.wait_status("wx", lambda s: s.get("phase") == "Running" and s.get("attempt") == attempt,
                                timeout=60, what=f"attempt {attempt} Running")

    def finish_old_pod() -> None:
        # No kubelet on the spare node: confirm the old pod's end as one would, so the next attempt can start.
        for pod in kube.pods("wx"):
            if pod["metadata"].get("deletionTimestamp"):
                kube("delete", "pod", pod["metadata"]["name"], "--grace-period=0", "--force", check=False)

    attempt = 0
    running_attempt(attempt)
    for _ in range(5):
        kube("create", "-f", "-", "--raw", f"/api/v1/namespaces/{kube.ns}/pods/wx-worker-0/eviction",
             input=json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                               "metadata": {"name": "wx-worker-0", "namespace": kube.ns}}))
        kube.wait_status("wx", lambda s, a=attempt: s.get("attempt") == a + 1, timeout=60, what="restart")
        finish_old_pod()
        attempt += 1
        running_attempt(attempt)
    for _ in range(2):
        set_node_ready(cluster, spare_node, False)
        kube.wait_status("wx", lambda s, a=attempt: s.get("attempt") == a + 1, timeout=60, what="restart")
        set_node_ready(cluster, spare_node, True)
        finish_old_pod()
        attempt += 1
        running_attempt(attempt)
    status = kube.status("wx")
    assert (status["phase"], status["restarts"], status["platformRestarts"]) == ("Running", 0, 7)
    assert status["lastFailure"]["failureClass"] == "Platform"

    for _ in range(2):
        kube.fail_pod("wx-worker-0", exit_code=1)
        if kube.status("wx").get("phase") == "Failed":
            break
        kube.wait_status("wx", lambda s, a=attempt: s.get("attempt") == a + 1 or s.get("phase") == "Failed",
                         timeout=60, what="the trainer's failure decided")
        if kube.status("wx").get("phase") == "Failed":
            break
        finish_old_pod()
        attempt += 1
        running_attempt(attempt)
    status = kube.wait_phase("wx", "Failed", timeout=60)
    assert (status["restarts"], status["platformRestarts"]) == (1, 7)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert status["lastFailure"]["failureClass"] == "Trainer"
