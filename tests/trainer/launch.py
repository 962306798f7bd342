"""Runs the trainer as the image does: torchrun as a real subprocess, on CPU with gloo."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# The trainer's log-line patterns, defined beside their writers; re-exported for the trainer tests.
from ddp_trainer import warm_workers
from ddp_trainer.progress_log import DONE, PROGRESS, RESUMED  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# The image's entrypoint: torchrun that puts a failed worker's stderr tail in the error file.
DDP_TORCHRUN = [sys.executable, "-m", "ddp_trainer.torchrun"]


def trainer_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TRAINER_", "DDPJOB_", "PET_"))}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""})
    # No metrics endpoint unless a test asks for one (a flag, or this variable in `extra`): the default, 9400 on
    # every address, would take the port from the local node's pods, which the other `make test` worker runs.
    env["DDP_TRAINER_METRICS_PORT"] = "0"
    env.update(extra)
    return env


def standalone_cmd(nproc: int, *trainer_args: str, max_restarts: int = 0) -> list[str]:
    return [*DDP_TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", f"--max-restarts={max_restarts}",
            "--monitor-interval=0.5", "-m", "ddp_trainer", *trainer_args]


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env or trainer_env(), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def start(cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """Own session, so a test can signal torchrun and its workers as one group."""
    out = open(log, "w") if log else subprocess.PIPE
    return subprocess.Popen(cmd, env=env or trainer_env(), stdout=out, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT, start_new_session=True)


def wait_for_line(log: Path, pattern: re.Pattern, proc: subprocess.Popen, timeout: float = 120, where=None):
    """Poll a log file until `pattern` matches (optionally a match satisfying `where`); fail if proc exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        for m in pattern.finditer(text):
            if where is None or where(m):
                return m
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before {pattern.pattern!r}:\n{text[-4000:]}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {pattern.pattern!r}:\n{(log.read_text() if log.exists() else '')[-4000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def worker_pids(torchrun_pid: int) -> list[int]:
    """The trainer processes torchrun started: its children, or its fork server's (ddp_trainer/warm_workers.py)."""
    return warm_workers.worker_pids(torchrun_pid)
