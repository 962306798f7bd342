"""A failed worker's cause reaches the job's status: real torchrun runs that fail as a new user's first job does,
their log cut as the kubelet cuts it for FallbackToLogsOnError (the local node's termination_message), and the
operator's own classify_pod_failure reading the result.

The harness records its own errors in the error file. A worker that dies before any code of ours runs (a missing
script, an import error or a bad argument in a user's script) leaves only its stderr: under the image's entrypoint,
`python -m ddp_trainer.torchrun`, that worker's last stderr lines go into the error file, at any process count.
Under plain torchrun the operator finds them above torchrun's report in the log's 2 KiB tail, which holds them with
one process a pod only (with two, torchrun's table for each rank pushes them out)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ddp_trainer import torchrun as launcher
from ddp_trainer.final_step import final_step_record
from ddpjob_localnode.pod_status import termination_message
from ddpjob_operator.recovery import failures
from launch import DDP_TORCHRUN, TORCHRUN, run, trainer_env

USER_SCRIPT = """import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
parser.parse_args()
"""


def ddp_torchrun(*args: str, nproc: int = 2) -> list[str]:
    return [*DDP_TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", "--monitor-interval=0.5", *args]


def torchrun(*args: str, nproc: int = 1) -> list[str]:
    return [*TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", "--monitor-interval=0.5", *args]


CASES = [
    ("missing script", lambda tmp: ddp_torchrun(str(tmp / "nope" / "train.py")),
     "exited with code 2", "can't open file", "No such file or directory"),
    ("import error in the user's script", lambda tmp: ddp_torchrun(str(tmp / "broken.py")),
     "exited with code 1", "ModuleNotFoundError", "No module named 'not_installed_anywhere'"),
    ("bad argument to the user's script", lambda tmp: ddp_torchrun(str(tmp / "train.py"), "--stepz", "3"),
     "exited with code 2", "error: the following arguments are required: --steps", ""),
    ("bad value to the user's script", lambda tmp: ddp_torchrun(str(tmp / "train.py"), "--steps", "many"),
     "exited with code 2", "argument --steps: invalid int value", "'many'"),
    ("bad argument to the harness", lambda tmp: ddp_torchrun("-m", "ddp_trainer", "--train.stepz", "3"),
     "exited with code 2", "ConfigError", "unrecognized arguments: --train.stepz"),
    ("bad value to the harness", lambda tmp: ddp_torchrun("-m", "ddp_trainer", "--train.steps", "0"),
     "exited with code 2", "ConfigError", "--train.steps must be >= 1, got 0"),
    # A path as a user writes it in the image's working directory: the tail is the last 2 KiB, and torchrun's
    # report above it names the script twice, so a long test-temp path would push the cause out.
    ("plain torchrun, one process: the operator reads the log's tail",
     lambda tmp: torchrun("nope/train.py"),
     "exited with code 2", "can't open file", "No such file or directory"),
]


@pytest.mark.parametrize("name, cmd, verdict, kind_of_error, cause", CASES, ids=[c[0] for c in CASES])
def test_the_failed_pods_message_names_the_cause(tmp_path, name, cmd, verdict, kind_of_error, cause):
    (tmp_path / "broken.py").write_text("import not_installed_anywhere\n")
    (tmp_path / "train.py").write_text(USER_SCRIPT)
    error_file = tmp_path / "termination-log"
    done = run(cmd(tmp_path), env=trainer_env(TORCHELASTIC_ERROR_FILE=str(error_file)), timeout=120)
    assert done.returncode != 0, name
    log = done.stdout + done.stderr
    message = termination_message(error_file.read_text() if error_file.exists() else "", log, done.returncode,
                                  "FallbackToLogsOnError")
    failure = failures.classify_pod_failure(failed_pod(done.returncode, message), {}, datetime.now(timezone.utc), 30)
    text = failure.describe()
    assert verdict in text and kind_of_error in text and cause in text, f"{name}: {text}\n--- log ---\n{log[-3000:]}"
    assert len(failure.message) <= failures.MESSAGE_LIMIT
    # The cause comes first: status.lastFailure.message, the condition and the event all show its start.
    assert text.index(kind_of_error) < 400, f"{name}: the cause is buried: {text}"


def failed_pod(exit_code: int, message: str) -> dict:
    return {"metadata": {"name": "j-worker-0"}, "spec": {"containers": [{"name": "trainer"}]},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": exit_code, "reason": "Error", "message": message}}}]}}


def test_a_worker_killed_without_a_word_leaves_torchruns_report(tmp_path):
    """No stderr, no error file: nothing is written, and the kubelet's fallback (torchrun's table) says -9."""
    (tmp_path / "killed.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    error_file = tmp_path / "termination-log"
    done = run(ddp_torchrun(str(tmp_path / "killed.py")), env=trainer_env(TORCHELASTIC_ERROR_FILE=str(error_file)),
               timeout=120)
    assert done.returncode == 1
    assert not error_file.exists() or error_file.read_text() == ""
    message = termination_message("", done.stdout + done.stderr, done.returncode, "FallbackToLogsOnError")
    failure = failures.classify_pod_failure(failed_pod(done.returncode, message), {}, datetime.now(timezone.utc), 30)
    assert failure.kind == failures.SIGNAL and failure.exit_code == 128 + 9, failure.describe()


class _Failure:
    """What record_stderr_tail reads of torchrun's ProcessFailure."""

    def __init__(self, local_rank: int, exitcode: int, error_file: str = "<N/A>"):
        self.local_rank, self.exitcode, self.error_file = local_rank, exitcode, error_file


def _stderr(log_dir: Path, attempt: int, local_rank: int, text: str) -> None:
    path = log_dir / "run_x" / f"attempt_{attempt}" / str(local_rank) / "stderr.log"
    path.parent.mkdir(parents=True)
    path.write_text(text)


FINAL = final_step_record(100)
RECORD_CASES = [
    # name, stderr logs {(attempt, local rank): text}, failure, error file before, want message (None: unwritten)
    ("the failed rank's own lines", {(0, 0): "rank 0 fine\n", (0, 1): "boom on 1\n"}, _Failure(1, 3), "",
     "boom on 1"),
    ("the last attempt's lines", {(0, 1): "old\n", (2, 1): "new\n", (10, 1): "newest\n"}, _Failure(1, 3), "",
     "newest"),
    ("an error file already written is kept", {(0, 0): "boom\n"}, _Failure(0, 3), '{"message": "mine"}', None),
    ("a worker with its own error file: torchrun copied it", {(0, 0): "boom\n"}, _Failure(0, 3, "SELF"), "", None),
    ("silent worker: nothing to add", {(0, 0): "\n\n"}, _Failure(0, -9), "", None),
    ("no log of that rank", {(0, 0): "boom\n"}, _Failure(1, 3), "", None),
    ("worker 0's final step is no verdict on a failed pod", {(0, 1): "boom\n"}, _Failure(1, 3), FINAL, "boom"),
]


@pytest.mark.parametrize("name, logs, failure, before, want", RECORD_CASES, ids=[c[0] for c in RECORD_CASES])
def test_record_stderr_tail(tmp_path, name, logs, failure, before, want):
    for (attempt, rank), text in logs.items():
        _stderr(tmp_path / "logs", attempt, rank, text)
    if failure.error_file == "SELF":
        failure.error_file = str(tmp_path / "error.json")
        Path(failure.error_file).write_text("{}")
    error_file = tmp_path / "termination-log"
    error_file.write_text(before)
    wrote = launcher.record_stderr_tail(failure, tmp_path / "logs", str(error_file))  # type: ignore[arg-type]
    assert wrote == (want is not None), name
    if want is None:
        assert error_file.read_text() == before
    else:
        code, message = failures.worker_root_cause(error_file.read_text())
        assert (code, message) == (failure.exitcode, want), json.loads(error_file.read_text())


LINE = "x" * 70
TAIL_CASES = [
    ("short stays whole", "a\nb\n", "a\nb"),
    ("blank lines dropped", "a\n\n  \nb\n", "a\nb"),
    ("at most the last lines", "".join(f"{i}\n" for i in range(30)),
     "\n".join(str(i) for i in range(30 - launcher.STDERR_TAIL_LINES, 30))),
    ("whole lines within the characters", f"{LINE}\n" * 11 + "cause\n",
     "\n".join([LINE] * ((launcher.STDERR_TAIL_CHARS - 5) // 71) + ["cause"])),
    ("one huge line keeps its end", "y" * 5000 + "cause", ("y" * 5000 + "cause")[-launcher.STDERR_TAIL_CHARS:]),
]


@pytest.mark.parametrize("name, text, want", TAIL_CASES, ids=[c[0] for c in TAIL_CASES])
def test_last_lines(name, text, want):
    got = launcher.last_lines(text)
    assert got == want, name
    assert len(got) <= launcher.STDERR_TAIL_CHARS


def test_a_final_step_left_by_worker_0_is_cleared_when_the_pod_fails_silently(tmp_path):
    error_file = tmp_path / "termination-log"
    error_file.write_text(FINAL)
    assert launcher.record_stderr_tail(_Failure(1, -9), tmp_path / "logs", str(error_file)) is False  # type: ignore[arg-type]
    assert error_file.read_text() == ""


def _attempts(log_dir, n: int) -> None:
    for attempt in range(n + 1):
        (log_dir / "run_x" / f"attempt_{attempt}" / "0").mkdir(parents=True)


def test_an_agent_that_restarted_in_place_says_how_often_in_the_error_record(tmp_path):
    _attempts(tmp_path / "logs", 2)
    error_file = tmp_path / "termination-log"
    error_file.write_text(json.dumps({"message": {"message": "boom", "errorCode": 3}}))
    assert launcher.record_in_place_restarts(tmp_path / "logs", str(error_file)) is True
    assert json.loads(error_file.read_text())[launcher.IN_PLACE_RESTARTS_KEY] == 2


def test_an_empty_termination_log_stays_empty_on_failure_and_gets_a_record_on_success(tmp_path):
    _attempts(tmp_path / "logs", 1)
    error_file = tmp_path / "termination-log"
    error_file.write_text("")
    assert launcher.record_in_place_restarts(tmp_path / "logs", str(error_file)) is False
    assert error_file.read_text() == "", "the kubelet falls back to the log's last lines only when it is empty"
    assert launcher.record_in_place_restarts(tmp_path / "logs", str(error_file), create=True) is True
    assert json.loads(error_file.read_text()) == {launcher.IN_PLACE_RESTARTS_KEY: 1}


def test_no_restart_writes_nothing(tmp_path):
    _attempts(tmp_path / "logs", 0)
    error_file = tmp_path / "termination-log"
    error_file.write_text(json.dumps({"finished": {"step": 9}}))
    assert launcher.record_in_place_restarts(tmp_path / "logs", str(error_file), create=True) is False
    assert json.loads(error_file.read_text()) == {"finished": {"step": 9}}
