"""examples/user-loop/train.py, a plain DDP script that calls ddp_trainer.report, under torchrun on CPU: worker 0's
endpoint gives the operator's parser its progress while it trains, and after a worker is killed a new run resumes
at the step of the newest checkpoint."""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import urllib.request
from pathlib import Path

from launch import ROOT, TORCHRUN, run, start, trainer_env, worker_pids
from support.cluster import wait_until
from support.ports import free_port_block

from ddpjob_operator.tracking.progress import parse_progress

SCRIPT = ROOT / "examples" / "user-loop" / "train.py"


def user_loop_cmd(*args: str) -> list[str]:
    return [*TORCHRUN, "--standalone", "--nproc-per-node=2", "--max-restarts=0", "--monitor-interval=0.5",
            str(SCRIPT), *args]


def progress(port: int) -> dict:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return {}
    return parse_progress(text)


def newest_checkpoint_step(folder: Path) -> int:
    return max(int(re.fullmatch(r"step-(\d+)\.pt", p.name)[1]) for p in folder.glob("step-*.pt"))


def kill_tree(proc) -> None:
    """torchrun's workers run in sessions of their own: killing torchrun's group alone would leave them."""
    for pid in [*worker_pids(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_the_example_reports_progress_and_resumes_at_its_checkpoint_after_a_worker_is_killed(tmp_path):
    port, ck = free_port_block(2), tmp_path / "ck"
    env = trainer_env(POD_IP="127.0.0.1", DDP_TRAINER_METRICS_PORT=str(port))
    args = ["--checkpoint-dir", str(ck), "--checkpoint-every", "20", "--log-every", "10"]
    proc = start(user_loop_cmd("--steps", "1000000", *args), env=env, log=tmp_path / "first.log")
    try:
        # The loop reports a step before rank 0 saves it; at step 70 the step-60 save is done (it blocks rank 0's
        # loop), so the kill below cannot land in between on a loaded machine and leave step 40 the newest.
        seen = wait_until(lambda: (p := progress(port)).get("step", 0) >= 70 and "samplesPerSecond" in p and p,
                          timeout=120, interval=0.2, what="step 70 on worker 0's endpoint")
        assert math.isfinite(seen["loss"]) and seen["samplesPerSecond"] > 0, seen
        wait_until(lambda: progress(port + 1).get("step", 0) >= 60, timeout=60, interval=0.2,
                   what="step 60 on worker 1's endpoint (local rank 1 serves on base + 1)")
        victim = wait_until(lambda: worker_pids(proc.pid)[-1:], what="torchrun's workers")[0]
        os.kill(victim, signal.SIGKILL)
        assert proc.wait(timeout=60) != 0  # no restarts allowed: torchrun stops the group and fails
    finally:
        kill_tree(proc)
    saved = newest_checkpoint_step(ck)
    assert saved >= 60 and saved % 20 == 0

    again = run(user_loop_cmd("--steps", str(saved + 10), *args), env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"rank 0: resumed from checkpoint step={saved}\n" in again.stdout
    assert f"rank 0: step={saved + 10}/{saved + 10} " in again.stdout
    assert again.stdout.rstrip().endswith(f"rank 0: done step={saved + 10}")
    assert newest_checkpoint_step(ck) == saved + 10


def test_the_global_batch_must_split_evenly_over_the_ranks(tmp_path):
    out = run(user_loop_cmd("--steps", "5", "--global-batch", "63"), env=trainer_env(DDP_TRAINER_METRICS_PORT="0"))
    assert out.returncode != 0
    assert "--global-batch 63 does not split evenly over 2 ranks" in out.stdout + out.stderr
