"""Whose failure it was, and which budget it spends (pure).

A multi-day job on a real cluster meets the platform's weather: preemption, drains, evictions, lost nodes, pods
deleted by someone. None of those says the trainer is broken, and a job that spent `backoffLimit` on them would die
at its fourth node incident. So failures come in two classes, each with its own budget:

- Trainer: a non-zero exit (ExitCode), killed by a signal or OOMKilled (Signal), no progress (NoProgress), a pod
  that failed without saying why (Unknown). Budget `runPolicy.backoffLimit` (3), counted in `status.restarts`.
- Platform: evicted or preempted, by the pod's `DisruptionTarget` condition or the kubelet's `Evicted` (Evicted);
  deleted by someone else, or gone (Deleted); its node NotReady past the grace, or gone (NodeLost); torchrun's
  rendezvous timed out, so the group never formed (RendezvousTimeout: pods not all placed or reachable). Budget
  `runPolicy.platformFailureLimit` (20), counted in `status.platformRestarts`.

The class is read from the pod (its phase, reason, conditions, container state), never guessed from timing.

Both budgets start over after a healthy stretch: when a failure comes after the job had been Running (all its pods)
with no failure for at least `runPolicy.healthyResetSeconds` (3600; 0 never resets) and, for a job that reports
progress, whose step advanced in that attempt, both counts go back to 0 before this failure is counted. A week-long
job therefore fails only if failures come close together, not because it is long.

The stretch starts at the latest of: the Running condition's transition, the last failure, the last recovery. A
pod replaced alone (InPlace, TorchFT) or a restart in place never leaves Running, so the condition alone would read
a job replaced every minute as healthy for hours, and its budget would never run out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..state import conditions as c
from ..state.status import JobStatus
from ..timefmt import parse_time
from . import failures as f

TRAINER = "Trainer"
PLATFORM = "Platform"
PLATFORM_KINDS = frozenset({f.EVICTED, f.DELETED, f.NODE_LOST, f.RENDEZVOUS})


def class_of(failure: f.Failure) -> str:
    return PLATFORM if failure.kind in PLATFORM_KINDS else TRAINER


@dataclass(frozen=True)
class Counts:
    trainer: int  # status.restarts
    platform: int  # status.platformRestarts


def counts_before(status: JobStatus, now: datetime, healthy_reset_seconds: int) -> tuple[Counts, bool]:
    """The counts this failure is added to, and whether the healthy stretch that just ended reset them."""
    counts = Counts(status.get("restarts", 0), status.get("platformRestarts", 0))
    if healthy_reset_seconds <= 0 or (counts.trainer == 0 and counts.platform == 0):
        return counts, False
    if status.get("phase") != c.RUNNING:
        return counts, False
    since = healthy_since(status)
    if since is None or (now - since).total_seconds() < healthy_reset_seconds:
        return counts, False
    progress = status.get("progress")
    if progress is not None and progress.get("attempt") != status.get("attempt"):
        return counts, False  # it reports progress, but not in this attempt: no evidence the step advanced
    return Counts(0, 0), True


def healthy_since(status: JobStatus) -> datetime | None:
    """When the current healthy stretch began: Running, and no failure or recovery since. None: not Running."""
    running = c.find_condition(status.get("conditions") or [], c.RUNNING)
    if not running or running.get("status") != "True":
        return None
    since = parse_time(running.get("lastTransitionTime"))
    if since is None:
        return None
    recoveries = status.get("recoveries") or []
    later = [
        parse_time((status.get("lastFailure") or {}).get("time")),
        parse_time(recoveries[-1].get("time")) if recoveries else None,
    ]
    return max([since, *(t for t in later if t is not None)])
