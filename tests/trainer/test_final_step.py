"""A finished run leaves its final step where the operator's success policy reads it: a real 2-process run under
the image's entrypoint, its termination log read by the operator's own failures.finished_step."""

from __future__ import annotations

from ddp_trainer.final_step import TERMINATION_LOG_ENV, final_step_record, write_final_step
from ddpjob_operator.recovery import failures
from launch import DDP_TORCHRUN, run, trainer_env

STEPS = 37  # not a multiple of the log interval: the last log line and the last step differ


def succeeded_pod(message: str) -> dict:
    return {"metadata": {"name": "j-worker-0"}, "spec": {"containers": [{"name": "trainer"}]},
            "status": {"phase": "Succeeded", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": 0, "reason": "Completed", "message": message}}}]}}


def test_worker_0_leaves_its_final_step_in_the_termination_log(tmp_path):
    termination_log = tmp_path / "termination-log"
    cmd = [*DDP_TORCHRUN, "--standalone", "--nproc-per-node=2", "--monitor-interval=0.5", "-m", "ddp_trainer",
           "--workload=digits", f"--train.steps={STEPS}", "--log.every-steps=10"]
    done = run(cmd, env=trainer_env(TORCHELASTIC_ERROR_FILE=str(termination_log)), timeout=180)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert failures.finished_step(succeeded_pod(termination_log.read_text())) == STEPS


def test_the_record_is_what_the_operator_reads():
    assert failures.finished_step(succeeded_pod(final_step_record(3000))) == 3000


def test_without_the_entrypoints_path_nothing_is_written(tmp_path):
    assert write_final_step(5, environ={}) is False
    assert write_final_step(5, environ={TERMINATION_LOG_ENV: str(tmp_path / "missing" / "log")}) is False
    assert write_final_step(5, environ={TERMINATION_LOG_ENV: str(tmp_path / "log")}) is True
    assert failures.finished_step(succeeded_pod((tmp_path / "log").read_text())) == 5
