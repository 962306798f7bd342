"""kubectl ddpj's pure parts, without a cluster: the watch line and exit code, the history rows, why's answer, the
manifest run writes, and the rank a log line names."""

from __future__ import annotations

import argparse

import pytest

from ddpjob_operator.cli import history, logs, view, why
from ddpjob_operator.cli.main import parser
from ddpjob_operator.cli.manifest import BadInput, job_manifest

RECOVERY = {"time": "2026-01-01T00:01:00Z", "how": "GroupRecreated", "attempt": 0, "pod": "j-worker-1",
            "kind": "Signal", "reason": "SIGKILL", "exitCode": 137, "step": 120, "stepsLost": 0,
            "recoverySeconds": 12.34, "message": "Traceback...\nRuntimeError: boom"}


def job(**status) -> dict:
    return {"metadata": {"name": "j", "uid": "u1"}, "spec": {"runPolicy": {"backoffLimit": 2}}, "status": status}


@pytest.mark.parametrize("phase, code", [("Succeeded", 0), ("Failed", 1), ("Running", None), ("Pending", None),
                                         (None, None)])
def test_watch_ends_with_the_jobs_outcome(phase, code):
    assert view.exit_code(phase) == code


def test_the_plain_line_tells_progress_and_restarts():
    f = view.facts(job(phase="Running", sizeText="2/2", attempt=1, restarts=1, recoveries=[RECOVERY],
                       progress={"step": 200, "totalSteps": 400, "percent": 50, "etaSeconds": 75, "loss": 0.5,
                                 "samplesPerSecond": 812.4}))
    line = view.plain_line(f)
    for part in ("Running", "size 2/2", "step 200/400 50%", "loss 0.5000", "samples/s 812", "ETA 1m15s",
                 "restarts 1", "attempt 1"):
        assert part in line, (part, line)
    assert view.restart_line(f) == ("last restart: j-worker-1 Signal exit 137 SIGKILL, group recreated at step 120, "
                                    "recovered in 12.3s, 0 steps lost")


def test_a_waiting_job_says_why_on_its_line():
    f = view.facts(job(phase="Pending", reason="Unschedulable", conditions=[
        {"type": "Placed", "status": "False", "reason": "Unschedulable", "message": "0/4 nodes are available",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]))
    assert view.plain_line(f).endswith("| 0/4 nodes are available")


def test_history_has_a_row_per_recovery_and_one_for_the_failure_that_ended_the_job():
    failed = job(phase="Failed", reason="BackoffLimitExceeded", attempt=2, recoveries=[RECOVERY],
                 lastFailure={"pod": "j-worker-0", "kind": "ExitCode", "exitCode": 3, "message": "boom",
                              "time": "2026-01-01T00:02:00Z"})
    rows = history.rows(failed)
    assert rows[0][1:8] == ("GroupRecreated", "0", "j-worker-1 Signal exit 137 SIGKILL", "120", "0", "12.3s",
                            "RuntimeError: boom")
    assert rows[1][1] == "JobFailed" and rows[1][3] == "j-worker-0 ExitCode exit 3"
    assert history.rows(job(phase="Running")) == []
    ended = job(phase="Succeeded", recoveries=[{**RECOVERY, "how": "ReplicaGroupReplaced", "endedWithJob": True}])
    assert history.rows(ended)[0][6] == "job ended at 12.3s"  # the survivors finished before the replacement


def test_why_names_the_short_resource_from_the_schedulers_message():
    pod = {"metadata": {"name": "j-worker-0"}, "spec": {"containers": [
        {"resources": {"requests": {"nvidia.com/gpu": "64"}}}]},
           "status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                      "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}}
    answer = why.explain(job(phase="Pending", reason="Unschedulable"), [pod])
    assert answer.reason.endswith("not enough nvidia.com/gpu on any node")
    assert "each pod requests nvidia.com/gpu=64" in answer.evidence


def test_why_for_a_queued_job_gives_its_position_and_what_is_ahead():
    def workload(name, admitted):
        return {"metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"kind": "DDPJob", "name": name}]},
                "spec": {"queueName": "team-a"},
                "status": {"conditions": [{"type": "Admitted", "status": "True" if admitted else "False"}]}}
    mine = workload("j", False)
    mine["status"]["conditions"].append({"type": "QuotaReserved", "status": "False",
                                         "message": "couldn't assign flavors: insufficient quota for nvidia.com/gpu"})
    answer = why.explain(job(phase="Pending", reason="Queued"), [], mine, [workload("a", True), workload("b", False)])
    assert "LocalQueue team-a" in answer.reason
    assert "position 2 in LocalQueue team-a" in answer.evidence
    assert "holding quota: ns/a (DDPJob a)" in answer.evidence and "queued before it: ns/b (DDPJob b)" in answer.evidence
    assert any("insufficient quota for nvidia.com/gpu" in e for e in answer.evidence)


def test_why_for_a_spent_budget_and_an_image_that_does_not_pull():
    spent = why.explain(job(phase="Failed", reason="BackoffLimitExceeded", restarts=2), [])
    assert spent.reason == "its restart budget is spent: 2 restarts of backoffLimit 2"
    pod = {"metadata": {"name": "j-worker-0"}, "status": {"containerStatuses": [
        {"image": "x:1", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}}
    pulled = why.explain(job(phase="Pending"), [pod])
    assert "ImagePullBackOff" in pulled.reason and "image x:1" in pulled.evidence


def run_args(*words: str) -> argparse.Namespace:
    a = parser().parse_args(["run", "j", "--image", "img", *words])
    a.args = ["--workload=digits"]
    return a


def test_run_writes_an_elastic_queued_job():
    m = job_manifest(run_args("-m", "ddp_trainer", "--replicas", "3", "--min-replicas", "2", "--gpus", "8",
                              "--queue", "q"))
    assert m["spec"]["elastic"] == {"minReplicas": 2, "maxReplicas": 3} and m["spec"]["gpusPerReplica"] == 8
    assert m["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q"}
    container = m["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["--module", "ddp_trainer", "--workload=digits"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400}]


@pytest.mark.parametrize("words, message", [
    ((), "give what to run"),
    (("-m", "a", "--script", "b.py"), "give one thing to run"),
    (("-m", "a", "--replicas", "5", "--max-replicas", "4"), "--replicas 5 must be within"),
    (("-m", "a", "--node-selector", "nokey"), "--node-selector takes KEY=VALUE"),
])
def test_run_refuses_flags_it_cannot_build_a_job_from(words, message):
    with pytest.raises(BadInput, match=message):
        job_manifest(run_args(*words))


@pytest.mark.parametrize("line, rank", [
    ("[job=j attempt=0 rank=3] step=10/400 loss=1.0", 3),
    ("[rank1]: Traceback (most recent call last):", 1),
    ("[default0]:hello", 0),
    ("I1125 torchrun starting", None),
])
def test_the_rank_a_log_line_names(line, rank):
    assert logs.rank_of(line) == rank


@pytest.mark.parametrize("node, state, restarts, started", [
    (None, None, 0, False),                                            # not bound: the API answers an empty log
    ("n0", {"waiting": {"reason": "ContainerCreating"}}, 0, False),
    ("n0", {"running": {"startedAt": "2026-11-27T10:00:00Z"}}, 0, True),
    ("n0", {"terminated": {"exitCode": 1}}, 0, True),
    ("n0", {"waiting": {"reason": "CrashLoopBackOff"}}, 1, True),       # it ran before: its last log is there
])
def test_a_log_is_read_only_once_the_trainer_container_has_started(node, state, restarts, started):
    from kubernetes import client

    statuses = [{"name": "sidecar", "ready": True, "restartCount": 0, "image": "i", "imageID": "",
                 "state": {"running": {}}}]
    if state is not None:
        statuses.append({"name": logs.api.TRAINER_CONTAINER, "ready": False, "restartCount": restarts,
                         "image": "i", "imageID": "", "state": state})
    raw = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"nodeName": node, "containers": [{"name": logs.api.TRAINER_CONTAINER}]},
           "status": {"containerStatuses": statuses}}
    pod = client.ApiClient()._ApiClient__deserialize(raw, "V1Pod")
    assert logs.container_started(pod) is started
