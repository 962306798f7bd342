"""Where recovery time goes after a trainer process is killed on a local node, shared by `make demo`, the e2e
tests and bench/local_recovery.py: detection and pod recreation are observed from the API (job status, pods);
process start, rendezvous and checkpoint load come from the restarted trainer's own `ready` line, read with the
local node's log timestamps through the trainer's own line patterns (ddp_trainer.progress_log)."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddp_trainer.progress_log import DONE, PROGRESS, READY, RESUMED
from ddp_trainer.warm_workers import FORK_SERVER_MARK, cmdline, is_fork_server, parent_pid

from .agent import DDPJOB_LABELS

_LABEL = dict(DDPJOB_LABELS)  # the operator's pod labels, as the agent names them

TOTAL = "recovery total"
# RecoveryClock.breakdown's rows in order, said once: `make demo` prints them and bench/local_recovery.py reads
# them back. Every row but the total is a part, and the parts add up to the total (bench/tests checks the JSON).
PHASES = (
    "detection",
    "pod recreation",
    "later restarts",
    "torchrun start",
    "process start",
    "rendezvous",
    "checkpoint load",
    "first steps",
    TOTAL,
)


def parse_time(stamp: str) -> float:
    """RFC 3339 with up to nanoseconds (kubectl logs --timestamps) as epoch seconds."""
    main, _, frac = stamp.rstrip("Z").partition(".")
    base = calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S"))
    return base + (float(f"0.{frac}") if frac else 0.0)


@dataclass
class TrainerLog:
    accuracy: float | None = None
    metric_name: str = ""
    resumed_step: int | None = None
    ready_at: float | None = None
    process_s: float = 0.0
    rendezvous_s: float = 0.0
    checkpoint_load_s: float = 0.0
    first_step_at: float | None = None
    steps: list[int] = field(default_factory=list)


def parse_trainer_log(text: str) -> TrainerLog:
    """worker-0's log (with timestamps) of the current attempt: the last `ready` line and what follows it."""
    out = TrainerLog()
    for line in text.splitlines():
        stamp_text, _, body = line.partition(" ")
        if not body.startswith("[job="):
            continue
        stamp = parse_time(stamp_text)
        if ready := READY.match(body):
            out.ready_at, out.first_step_at = stamp, None
            out.process_s = float(ready["process"])
            out.rendezvous_s = float(ready["rendezvous"])
            out.checkpoint_load_s = float(ready["load"])
        elif resumed := RESUMED.match(body):
            out.resumed_step = int(resumed["step"])
        elif done := DONE.match(body):
            out.metric_name, out.accuracy = done["metric"], float(done["value"])
        elif step := PROGRESS.match(body):
            out.steps.append(int(step["step"]))
            if out.ready_at is not None and out.first_step_at is None:
                out.first_step_at = stamp
    return out


@dataclass
class RecoveryClock:
    """Kill -> steps advancing again, from the API as a poller sees it. The group may restart more than once
    before it advances (an attempt whose pods run but whose steps never move, then a NoProgress restart): the
    log's `ready` line belongs to the last attempt, so its pods' Running time is the one the in-process phases
    are measured from, and the attempts between the first and the last are a phase of their own."""

    killed_at: float | None = None
    killed_step: int = 0
    restarts_before: int = 0
    restarts_after: int = 0  # group restarts seen since the kill
    detected_at: float | None = None
    first_running_at: float | None = None  # every pod of the first new attempt Running
    pods_running_at: float | None = None  # every pod of the latest attempt Running
    running_attempt: str | None = None

    def kill(self, now: float, step: int, restarts: int = 0) -> None:
        self.killed_at, self.killed_step, self.restarts_before = now, step, restarts

    def observe(self, status: dict, pods: list[dict], now: float) -> None:
        if self.killed_at is None:
            return
        restarts = status.get("restarts", 0)
        if self.detected_at is None and restarts > self.restarts_before:
            self.detected_at = now
        if self.detected_at is None:
            return
        self.restarts_after = max(self.restarts_after, restarts - self.restarts_before)
        attempt = str(status.get("attempt", ""))
        current = [p for p in pods if p["metadata"]["labels"].get(_LABEL["attempt"]) == attempt]
        if (
            attempt != self.running_attempt
            and current
            and len(current) >= int(status.get("replicas") or len(current))
            and all(p.get("status", {}).get("phase") == "Running" for p in current)
        ):
            self.running_attempt, self.pods_running_at = attempt, now
            if self.first_running_at is None:
                self.first_running_at = now

    def breakdown(self, trainer: TrainerLog) -> list[tuple[str, float]]:
        """(phase, seconds) from the kill until training steps advance again, in PHASES' order."""
        killed, detected, ready = self.killed_at, self.detected_at, trainer.ready_at
        first, running = self.first_running_at, self.pods_running_at
        if killed is None or detected is None or first is None or running is None or ready is None:
            return [("incomplete", -1.0)]
        in_process = ready - running
        rows = [
            ("detection", detected - killed),
            ("pod recreation", first - detected),
            # Attempts after the first whose steps never advanced: their detection and recreation included.
            ("later restarts", running - first),
            # torchrun's own start-up and its c10d rendezvous, until it spawns the trainer processes.
            ("torchrun start", max(0.0, in_process - trainer.process_s)),
            # The trainer process: Python + torch imports, model and data, before and after its rendezvous.
            ("process start", max(0.0, trainer.process_s - trainer.rendezvous_s - trainer.checkpoint_load_s)),
            ("rendezvous", trainer.rendezvous_s),
            ("checkpoint load", trainer.checkpoint_load_s),
        ]
        end = trainer.first_step_at or ready
        rows.append(("first steps", max(0.0, end - ready)))
        rows.append((TOTAL, end - killed))
        return rows

    def in_place_breakdown(self, trainer: TrainerLog) -> list[tuple[str, float]]:
        """The same rows for a restart inside the running pods (restartStrategy: InPlace): no pod is recreated and
        the operator's detection is not on the path (torchrun's agents restart on their own), so those rows are 0
        and "torchrun start" is from the kill until torchrun spawned the new processes."""
        killed, ready = self.killed_at, trainer.ready_at
        if killed is None or ready is None or ready < killed:
            return [("incomplete", -1.0)]
        rows = [
            ("detection", 0.0),
            ("pod recreation", 0.0),
            ("later restarts", 0.0),
            ("torchrun start", max(0.0, ready - trainer.process_s - killed)),
            ("process start", max(0.0, trainer.process_s - trainer.rendezvous_s - trainer.checkpoint_load_s)),
            ("rendezvous", trainer.rendezvous_s),
            ("checkpoint load", trainer.checkpoint_load_s),
        ]
        end = trainer.first_step_at or ready
        rows.append(("first steps", max(0.0, end - ready)))
        rows.append((TOTAL, end - killed))
        return rows


@dataclass(frozen=True)
class Victim:
    pid: int
    describe: str


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process, from one walk of /proc."""
    found = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            found[int(proc.name)] = parent_pid(int(proc.name))
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, parents before their children, from one walk of /proc."""
    parents = _parents()
    found, todo = [], [pid]
    while todo:
        below = todo.pop()
        kids = [kid for kid, parent in parents.items() if parent == below]
        found += kids
        todo += kids
    return found


def find_worker_process(
    cluster_dir: Path, pods: list[dict], replica: str, marker: str = "ddp_trainer"
) -> Victim | None:
    """A trainer worker process (a child of torchrun whose command line holds `marker`, or of its fork server:
    ddp_trainer/warm_workers.py) of the running pod with this replica index. The pod's containerID (`local://<pid>`)
    names the local node's shim; the workers are below it."""
    for pod in pods:
        if pod["metadata"]["labels"].get(_LABEL["replica"]) != replica:
            continue
        if pod.get("status", {}).get("phase") != "Running":
            continue
        for status in pod["status"].get("containerStatuses") or []:
            shim = status.get("containerID", "").removeprefix("local://")
            if not shim.isdigit():
                continue
            parents = _parents()
            todo = [int(shim)]
            while todo:
                pid = todo.pop()
                todo += [kid for kid, parent in parents.items() if parent == pid]
                line, parent = cmdline(pid), parents.get(pid, 0)
                if marker not in line:
                    continue
                if is_fork_server(parent):
                    return Victim(pid, "ddp_trainer worker forked by torchrun's fork server")
                if FORK_SERVER_MARK not in line and "torchrun" not in line and "torchrun" in cmdline(parent):
                    return Victim(pid, line[:80])
    return None


# Run inside a worker pod on a real node (`kubectl exec <pod> -- python -c KILL_TRAINER_WORKERS`, as the image's
# user): SIGKILL the trainer's worker processes (`-m ddp_trainer`, or the children of torchrun's fork server:
# ddp_trainer/warm_workers.py), never torchrun's agent; prints the pids killed. The local node's counterpart is
# find_worker_process, which walks this machine's /proc from the pod's shim instead.
KILL_TRAINER_WORKERS = """
import os, signal
from ddp_trainer.warm_workers import FORK_SERVER_MARK, cmdline, is_fork_server, parent_pid
killed = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        continue
    harness = b"ddp_trainer" in argv and b"ddp_trainer.torchrun" not in argv
    if int(pid) != 1 and (harness or is_fork_server(parent)):
        os.kill(int(pid), signal.SIGKILL)
        killed.append(pid)
print(" ".join(killed))
"""
