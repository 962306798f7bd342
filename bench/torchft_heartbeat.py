"""The Lighthouse's heartbeat timeout, traded: how long torchft replica groups stall when a peer group dies, against
how often a healthy group is dropped from the quorum when the machine is busy (a false eviction).

For each timeout: a real `torchft_lighthouse` and two replica groups (the trainer's digits workload, one standalone
torchrun each, as two pods run them) on this machine. First both groups train while busy-loop processes load every
core (`--load-seconds`); a quorum line with fewer than both groups in that window is a false eviction (both
processes were alive). Then kill -9 of group 1's worker; the stall is group 0's longest gap between two committed
steps around the kill, read from its per-step progress lines as they are written.

    python bench/torchft_heartbeat.py [--out bench/results/torchft_heartbeat.json] [--timeouts 5000,1000,500,200,100]"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from tempfile import TemporaryDirectory

from ddp_trainer import fault_tolerance as ft
from ddp_trainer.progress_log import PROGRESS
from machine import describe_machine

ROOT = Path(__file__).resolve().parents[1]
LIGHTHOUSE = Path(sys.executable).parent / "torchft_lighthouse"
QUORUM = re.compile(r"\] quorum replica_groups=(?P<participants>\d+)/(?P<groups>\d+) step=(?P<step>\d+)$", re.M)


def longest_gap(arrivals: list[tuple[float, int]], after: float) -> float:
    """The longest time between two new steps, over the steps that arrived from `after` on (and the one before)."""
    times = [t for t, _ in arrivals]
    first = max(0, next((i for i, t in enumerate(times) if t >= after), len(times)) - 1)
    window = times[first:]
    return max((b - a for a, b in zip(window, window[1:], strict=False)), default=0.0)


def false_evictions(log_text: str) -> int:
    """Quorum lines with fewer groups than the job has: while both groups live, each is a healthy group dropped."""
    return sum(1 for m in QUORUM.finditer(log_text) if int(m["participants"]) < int(m["groups"]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log(files: ExitStack, path: Path):
    return files.enter_context(open(path, "w"))  # noqa: SIM115 (the stack closes it)


def _busy() -> None:
    while True:
        pass


class StepWatch:
    """Reads a group's log as it grows and stamps each new step with the time it was first seen."""

    def __init__(self, log: Path):
        self.log, self.offset, self.text = log, 0, ""
        self.arrivals: list[tuple[float, int]] = []  # (when seen, step)

    def poll(self) -> None:
        with open(self.log) as f:
            f.seek(self.offset)
            chunk = f.read()
        cut = chunk.rfind("\n") + 1  # whole lines only
        self.offset += cut
        self.text += chunk[:cut]
        now = time.monotonic()
        for m in PROGRESS.finditer(chunk[:cut]):
            step = int(m["step"])
            if not self.arrivals or step > self.arrivals[-1][1]:
                self.arrivals.append((now, step))

    @property
    def step(self) -> int:
        return self.arrivals[-1][1] if self.arrivals else -1


def run_one(heartbeat_ms: int, load_seconds: float, work: Path) -> dict:
    with ExitStack() as files:
        return _run_one(heartbeat_ms, load_seconds, work, files)


def _run_one(heartbeat_ms: int, load_seconds: float, work: Path, files: ExitStack) -> dict:
    port = free_port()
    lighthouse_cmd = [
        str(LIGHTHOUSE), "--bind", f"127.0.0.1:{port}", "--min_replicas", "1", "--join_timeout_ms", "1000",
        "--quorum_tick_ms", "100", "--heartbeat_timeout_ms", str(heartbeat_ms),
    ]  # fmt: skip
    lighthouse = subprocess.Popen(
        lighthouse_cmd, stdout=_log(files, work / f"lighthouse-{heartbeat_ms}.log"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TRAINER_", "DDPJOB_", "PET_"))}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", DDPJOB_NAME="bench")
    env.update({ft.LIGHTHOUSE_ENV: f"http://127.0.0.1:{port}", ft.NUM_REPLICA_GROUPS_ENV: "2",
                ft.MIN_REPLICAS_ENV: "1", ft.TIMEOUT_ENV: "10", ft.CONNECT_TIMEOUT_ENV: "10"})  # fmt: skip
    groups, logs = [], [work / f"group{g}-{heartbeat_ms}.log" for g in (0, 1)]
    load: list[multiprocessing.Process] = []
    try:
        for g in (0, 1):
            cmd = [sys.executable, "-m", "ddp_trainer.torchrun", "--standalone", "--nproc-per-node=1",
                   "--max-restarts=0", "-m", "ddp_trainer", "--workload", "digits", "--train.steps", "10000000",
                   "--train.global-batch-size", "64", "--train.decay", "constant", "--metrics.port", "0",
                   "--log.every-steps", "1"]  # fmt: skip
            group_env = {**env, ft.REPLICA_GROUP_ENV: str(g)}
            out = _log(files, logs[g])
            groups.append(
                subprocess.Popen(
                    cmd, env=group_env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
        watches = [StepWatch(log) for log in logs]
        deadline = time.monotonic() + 120
        while not all(w.step >= 20 and "replica_groups=2/2" in w.text for w in watches):
            if time.monotonic() > deadline or any(p.poll() is not None for p in groups):
                raise RuntimeError(f"the groups did not start training together: {logs}")
            for w in watches:
                w.poll()
            time.sleep(0.05)
        before_load = [len(w.text) for w in watches]
        load = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(2 * (os.cpu_count() or 1))]
        for p in load:
            p.start()
        loaded_from, loaded_steps = time.monotonic(), watches[0].step
        while time.monotonic() - loaded_from < load_seconds:
            for w in watches:
                w.poll()
            time.sleep(0.05)
        for p in load:
            p.terminate()
        loaded_rate = (watches[0].step - loaded_steps) / load_seconds
        evictions = sum(false_evictions(w.text[start:]) for w, start in zip(watches, before_load, strict=True))
        calm_from = time.monotonic()
        while time.monotonic() - calm_from < 3:  # unloaded steps, for the usual gap
            watches[0].poll()
            time.sleep(0.01)
        usual_gap = longest_gap(watches[0].arrivals, calm_from + 0.5)
        (victim,) = [int(p) for p in Path(f"/proc/{groups[1].pid}/task/{groups[1].pid}/children").read_text().split()]
        step_at_kill, killed = watches[0].step, time.monotonic()
        os.kill(victim, signal.SIGKILL)
        observe_until = killed + heartbeat_ms / 1000 + 10
        while time.monotonic() < observe_until:
            watches[0].poll()
            time.sleep(0.01)
        stall = longest_gap(watches[0].arrivals, killed)
        return {
            "heartbeat_timeout_ms": heartbeat_ms,
            "stall_s": round(stall, 2),
            "usual_step_gap_s": round(usual_gap, 3),
            "survivor_steps_after_kill": watches[0].step - step_at_kill,
            "survivor_alive": groups[0].poll() is None,
            "load_seconds": load_seconds,
            "load_processes": len(load),
            "loaded_steps_per_second": round(loaded_rate, 1),
            "false_evictions_under_load": evictions,
        }
    finally:
        for p in load:
            p.kill()
        for proc in (*groups, lighthouse):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "torchft_heartbeat.json"))
    parser.add_argument("--timeouts", default="5000,1000,500,200,100", help="heartbeat timeouts to measure, ms")
    parser.add_argument("--load-seconds", type=float, default=20.0)
    args = parser.parse_args()
    rows = []
    with TemporaryDirectory() as tmp:
        for ms in (int(x) for x in args.timeouts.split(",")):
            row = run_one(ms, args.load_seconds, Path(tmp))
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {"machine": describe_machine(), "workload": "digits, 2 replica groups x 1 process, gloo", "runs": rows}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
