"""A failed worker's cause reaches the job's status: real torchrun runs that fail as a new user's first job does,
their log cut as the kubelet cuts it for FallbackToLogsOnError (the local node's termination_message), and the
operator's own classify_pod_failure reading the result.

The harness records its own errors in the error file, at any process count. A worker that dies before any code of
ours runs (a missing script, an import error in a plain script) leaves only its stderr: the operator finds its
last lines above torchrun's report, but only while they are inside the kubelet's 2 KiB tail. With one process a
pod they are; with two or more, torchrun's table for each rank pushes them out (the gap issue 23 still has)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ddpjob_localnode.pod_status import termination_message
from ddpjob_operator import failures
from launch import TORCHRUN, run, trainer_env


def torchrun(*args: str, nproc: int = 2) -> list[str]:
    return [*TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", "--monitor-interval=0.5", *args]


CASES = [
    ("missing script", lambda tmp: torchrun(str(tmp / "nope" / "train.py"), nproc=1),
     "can't open file", "No such file or directory"),
    ("import error in the user's script", lambda tmp: torchrun(str(tmp / "train.py"), nproc=1),
     "ModuleNotFoundError", "No module named 'not_installed_anywhere'"),
    ("bad argument to the harness", lambda tmp: torchrun("-m", "ddp_trainer", "--train.stepz", "3"),
     "ConfigError", "unrecognized arguments: --train.stepz"),
    ("bad value to the harness", lambda tmp: torchrun("-m", "ddp_trainer", "--train.steps", "0"),
     "ConfigError", "--train.steps must be >= 1, got 0"),
]


@pytest.mark.parametrize("name, cmd, kind_of_error, cause", CASES, ids=[c[0] for c in CASES])
def test_the_failed_pods_message_names_the_cause(tmp_path, name, cmd, kind_of_error, cause):
    (tmp_path / "train.py").write_text("import not_installed_anywhere\n")
    error_file = tmp_path / "termination-log"
    done = run(cmd(tmp_path), env=trainer_env(TORCHELASTIC_ERROR_FILE=str(error_file)), timeout=120)
    assert done.returncode != 0, name
    log = done.stdout + done.stderr
    message = termination_message(error_file.read_text() if error_file.exists() else "", log, done.returncode,
                                  "FallbackToLogsOnError")
    pod = {"metadata": {"name": "j-worker-0"}, "spec": {"containers": [{"name": "trainer"}]},
           "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
               "exitCode": done.returncode, "reason": "Error", "message": message}}}]}}
    failure = failures.classify_pod_failure(pod, {}, datetime.now(timezone.utc), 30)
    text = failure.describe()
    assert kind_of_error in text and cause in text, f"{name}: {text}\n--- log ---\n{log[-3000:]}"
    assert len(failure.message) <= failures.MESSAGE_LIMIT
    # The cause comes first: status.lastFailure.message, the condition and the event all show its start.
    assert text.index(cause) < 400, f"{name}: the cause is buried: {text}"
