"""A scrape of a running trainer's endpoint returns the named ddp_trainer_* series, with their labels, and sane
values; a resumed run's counter starts from 0."""

import math
import os
import signal
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from launch import PROGRESS, RESUMED, start, standalone_cmd, stop, trainer_env, wait_for_line
from support.ports import free_port

SERIES = ["ddp_trainer_step", "ddp_trainer_samples_total", "ddp_trainer_run_samples", "ddp_trainer_samples_per_second",
          "ddp_trainer_loss", "ddp_trainer_learning_rate", "ddp_trainer_world_size", "ddp_trainer_total_steps",
          "ddp_trainer_torchrun_restarts",
          "ddp_trainer_last_checkpoint_step", "ddp_trainer_last_checkpoint_duration_seconds",
          "ddp_trainer_last_checkpoint_timestamp_seconds", "ddp_trainer_gpu_memory_bytes",
          "ddp_trainer_checkpoint_save_seconds_count", "ddp_trainer_checkpoint_load_seconds"]
# The DDPJob's name in `ddpjob` (`job` is the scrape config's own label), the attempt, the rank.
LABELS = (("attempt", "3"), ("ddpjob", "metrics-test"), ("rank", "0"))


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def digits(tmp_path, port: int, log, attempt: str = "3"):
    return start(standalone_cmd(1, "--workload", "digits", "--train.steps", "100000", "--train.lr", "0.001",
                                "--train.decay", "constant", "--metrics.port", str(port), "--log.every-steps", "10",
                                "--checkpoint.dir", str(tmp_path / "ck"), "--checkpoint.every-steps", "10"),
                 env=trainer_env(POD_IP="127.0.0.1", DDPJOB_NAME="metrics-test", DDPJOB_ATTEMPT=attempt), log=log)


def scrape_at(port: int, proc, log, step: int) -> dict[tuple[str, tuple], float]:
    """A scrape once the run reached `step`; then SIGTERM (it checkpoints and exits)."""
    try:
        wait_for_line(log, PROGRESS, proc, where=lambda m: int(m["step"]) >= step)
        values = scrape(port)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        stop(proc)
    return values


def test_scrape_returns_the_named_series(tmp_path):
    port, log = free_port(), tmp_path / "run.log"
    values = scrape_at(port, digits(tmp_path, port, log), log, 30)
    labels = LABELS
    got = {name: values.get((name, labels)) for name in SERIES}
    assert all(v is not None for v in got.values()), {k: v for k, v in got.items() if v is None}
    assert got["ddp_trainer_step"] >= 30 and got["ddp_trainer_step"] % 10 == 0
    assert got["ddp_trainer_samples_total"] >= 30 * 32 and got["ddp_trainer_samples_total"] % 32 == 0
    assert got["ddp_trainer_run_samples"] >= got["ddp_trainer_samples_total"]
    assert got["ddp_trainer_samples_per_second"] > 0
    assert 0 < got["ddp_trainer_loss"] < 5 and math.isfinite(got["ddp_trainer_loss"])
    assert got["ddp_trainer_learning_rate"] == 0.001
    assert got["ddp_trainer_world_size"] == 1
    assert got["ddp_trainer_total_steps"] == 100000  # --train.steps
    assert got["ddp_trainer_torchrun_restarts"] == 0
    assert got["ddp_trainer_last_checkpoint_step"] >= 10
    assert time.time() - 300 < got["ddp_trainer_last_checkpoint_timestamp_seconds"] <= time.time()
    assert got["ddp_trainer_gpu_memory_bytes"] == 0  # CPU
    assert got["ddp_trainer_checkpoint_save_seconds_count"] >= 2  # steps 10 and 20 at least
    assert values[("ddp_trainer_checkpoint_save_seconds_sum", labels)] > 0
    assert got["ddp_trainer_checkpoint_load_seconds"] == 0  # nothing to resume
    assert values[("ddp_trainer_tokens_per_second", labels)] == 0  # digits has no tokens
    for phase in ("data", "forward_backward", "optimizer"):
        with_phase = tuple(sorted(labels + (("phase", phase),)))
        assert values[("ddp_trainer_step_phase_seconds_count", with_phase)] >= 30
        assert values[("ddp_trainer_step_phase_seconds_sum", with_phase)] > 0


def test_a_resumed_run_counts_its_samples_from_zero(tmp_path):
    """A counter that started at the checkpoint's count made increase() jump by the whole count at every
    restart; the run's count is the ddp_trainer_run_samples gauge."""
    port, log = free_port(), tmp_path / "first.log"
    scrape_at(port, digits(tmp_path, port, log), log, 20)
    port, log = free_port(), tmp_path / "second.log"
    proc = digits(tmp_path, port, log, attempt="4")
    resumed = wait_for_line(log, RESUMED, proc)
    values = scrape_at(port, proc, log, int(resumed["step"]) + 20)
    labels = tuple(sorted({**dict(LABELS), "attempt": "4"}.items()))
    counted, run = values[("ddp_trainer_samples_total", labels)], values[("ddp_trainer_run_samples", labels)]
    assert int(resumed["step"]) >= 20
    assert 20 * 32 <= counted < run, (counted, run)
    # The gauge is the checkpoint's count plus what this process counted (both set by one report).
    assert run - counted == int(resumed["samples"]), (counted, run, resumed["samples"])
    assert values[("ddp_trainer_checkpoint_load_seconds", labels)] > 0


def test_a_token_workload_serves_tokens_per_second_and_mfu(tmp_path):
    port, log = free_port(), tmp_path / "gpt.log"
    # A CPU has no entry in the peak table: a peak given by flag turns MFU on (1 TFLOP/s, so it is not ~0).
    proc = start(standalone_cmd(1, "--workload", "gpt", "--train.steps", "100000", "--train.batch-size-per-rank", "8",
                                "--metrics.port", str(port), "--log.every-steps", "10", "--metrics.peak-tflops", "1",
                                "--model.activation-checkpointing", "true"),
                 env=trainer_env(POD_IP="127.0.0.1", DDPJOB_NAME="metrics-test", DDPJOB_ATTEMPT="3"), log=log)
    values = scrape_at(port, proc, log, 20)
    tokens, samples = values[("ddp_trainer_tokens_per_second", LABELS)], values[("ddp_trainer_samples_per_second",
                                                                                  LABELS)]
    assert samples > 0 and tokens == samples * 64  # the tiny preset's 64-token sequences
    assert 0 < values[("ddp_trainer_mfu", LABELS)] < 1
