"""A scrape of a running trainer's endpoint returns the named ddp_trainer_* series with sane values."""

import math
import os
import signal
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from launch import PROGRESS, start, standalone_cmd, stop, trainer_env, wait_for_line
from support.ports import free_port

SERIES = ["ddp_trainer_step", "ddp_trainer_samples_total", "ddp_trainer_samples_per_second", "ddp_trainer_loss",
          "ddp_trainer_learning_rate", "ddp_trainer_world_size", "ddp_trainer_restart_count",
          "ddp_trainer_last_checkpoint_step", "ddp_trainer_last_checkpoint_timestamp_seconds",
          "ddp_trainer_gpu_memory_bytes"]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_scrape_returns_the_named_series(tmp_path):
    port, log = free_port(), tmp_path / "run.log"
    proc = start(standalone_cmd(1, "--workload", "digits", "--train.steps", "100000", "--train.lr", "0.001",
                                "--train.decay", "constant", "--metrics.port", str(port), "--log.every-steps", "10",
                                "--checkpoint.dir", str(tmp_path / "ck"), "--checkpoint.every-steps", "10"),
                 env=trainer_env(POD_IP="127.0.0.1", DDPJOB_NAME="metrics-test", DDPJOB_ATTEMPT="3"), log=log)
    try:
        wait_for_line(log, PROGRESS, proc, where=lambda m: int(m["step"]) >= 30)
        values = scrape(port)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        stop(proc)
    labels = (("job", "metrics-test"), ("rank", "0"))
    got = {name: values.get((name, labels)) for name in SERIES}
    assert all(v is not None for v in got.values()), {k: v for k, v in got.items() if v is None}
    assert got["ddp_trainer_step"] >= 30 and got["ddp_trainer_step"] % 10 == 0
    assert got["ddp_trainer_samples_total"] >= 30 * 32 and got["ddp_trainer_samples_total"] % 32 == 0
    assert got["ddp_trainer_samples_per_second"] > 0
    assert 0 < got["ddp_trainer_loss"] < 5 and math.isfinite(got["ddp_trainer_loss"])
    assert got["ddp_trainer_learning_rate"] == 0.001
    assert got["ddp_trainer_world_size"] == 1 and got["ddp_trainer_restart_count"] == 0
    assert got["ddp_trainer_last_checkpoint_step"] >= 10
    assert time.time() - 300 < got["ddp_trainer_last_checkpoint_timestamp_seconds"] <= time.time()
    assert got["ddp_trainer_gpu_memory_bytes"] == 0  # CPU
    for phase in ("data", "forward_backward", "optimizer"):
        with_phase = tuple(sorted(labels + (("phase", phase),)))
        assert values[("ddp_trainer_step_phase_seconds_count", with_phase)] >= 30
        assert values[("ddp_trainer_step_phase_seconds_sum", with_phase)] > 0
