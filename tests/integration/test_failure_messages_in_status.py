"""A failure's cause reaches the user: a pod whose termination message is what the image's entrypoint writes for a
missing script (ddp_trainer.torchrun's record of the worker's stderr tail) shows python's "can't open file" line in
status.lastFailure.message, the Restarting or Failed condition and the event. And the other way round: a Succeeded
job shows the final step worker 0 left in its termination message. Pods on kwok are fake: the tests patch their
status with the message as a kubelet would."""

from __future__ import annotations

import json
import time

from ddp_trainer.final_step import final_step_record
from ddp_trainer.torchrun import error_record

from ddpjob_manifests import ddpjob

CAUSE = "python: can't open file '/workspace/train.py': [Errno 2] No such file or directory"
# What the entrypoint leaves in /dev/termination-log when local rank 0 died with that line and no error file.
MISSING_SCRIPT = json.dumps(error_record(CAUSE, 2, 0))


def condition(status: dict, kind: str) -> dict:
    return next(c for c in status.get("conditions") or [] if c["type"] == kind)


def test_a_missing_script_is_named_while_the_group_restarts(kube, operator):
    # A long backoff holds the job in Restarting, so the condition can be read.
    kube.apply(ddpjob("ms", replicas=2, gpus=1, runPolicy={"restartBackoffSeconds": 600, "backoffLimit": 3}))
    kube.running_pods("ms", attempt=0, n=2)
    kube.fail_pod("ms-worker-0", exit_code=1, message=MISSING_SCRIPT)
    status = kube.wait_phase("ms", "Restarting")
    assert status["lastFailure"]["exitCode"] == 2, "the worker's own code, not torchrun's 1"
    assert status["lastFailure"]["message"] == CAUSE
    assert CAUSE in condition(status, "Restarting")["message"]
    events = [e["message"] for e in kube.events("ms") if e["reason"] == "Restarting"]
    assert events and f"pod ms-worker-0 exited with code 2 (Error): {CAUSE}" in events[0], events


def test_a_missing_script_is_named_when_the_job_fails(kube, operator):
    kube.apply(ddpjob("mf", replicas=2, gpus=1, restartPolicy="ExitCode"))
    kube.running_pods("mf", attempt=0, n=2)
    kube.fail_pod("mf-worker-1", exit_code=1, message=MISSING_SCRIPT)
    status = kube.wait_phase("mf", "Failed")
    failed = condition(status, "Failed")
    assert failed["message"].startswith(f"pod mf-worker-1 exited with code 2 (Error): {CAUSE}"), failed
    assert CAUSE in status["lastFailure"]["message"]
    events = [e["message"] for e in kube.events("mf") if e["reason"] == failed["reason"]]
    assert events and CAUSE in events[0], events


def test_a_succeeded_job_shows_its_final_step(kube, operator):
    kube.apply(ddpjob("fs", replicas=2, gpus=1))
    kube.running_pods("fs", attempt=0, n=2)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for index, message in ((0, final_step_record(3000)), (1, "")):
        patch = {"status": {"phase": "Succeeded", "containerStatuses": [{
            "name": "trainer", "ready": False, "restartCount": 0, "image": "example.invalid/trainer:1",
            "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message,
                                                    "startedAt": now, "finishedAt": now}}}]}}
        kube("patch", "pod", f"fs-worker-{index}", "--subresource=status", "--type=merge", "-p", json.dumps(patch))
    status = kube.wait_phase("fs", "Succeeded")
    assert status["progress"]["step"] == 3000
