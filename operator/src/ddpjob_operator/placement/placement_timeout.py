"""Placed pod by pod, never deadlocked (pure): clusters with neither the PodGroup API nor Kueue.

Without a gang, the scheduler binds what fits: part of an attempt runs and holds its GPUs while the rest waits,
and two partly placed jobs can block each other for good, until torchrun's rendezvous gives up and the group
dies of a timeout that looks like the trainer's own exit 1. So an attempt (`status.placement: PodByPod`) whose
pods are not all bound within `runPolicy.placementTimeoutSeconds` (120) of its first unplaced verdict is not a
failure and spends no budget:

- an elastic job restarts at the count that *is* placed, if that is at least `minReplicas` (`PlacedToFit`);
- otherwise the placed pods are released (the attempt ends: a new one of the same size is created later), so they
  hold no GPUs, and the job waits Pending, `REASON PlacementTimeout`, for a backoff that doubles with each timeout
  in a row (10 s, 20 s, ... at most 300 s) plus a jitter of up to a quarter of it, derived from the job's uid so
  that two jobs blocking each other do not retry in lockstep. A fully placed attempt ends the streak."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..state.status import JobStatus
from ..timefmt import parse_time

PLACED_TO_FIT = "PlacedToFit"
PLACEMENT_TIMEOUT = "PlacementTimeout"
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_CAP_SECONDS = 300.0


@dataclass(frozen=True)
class Verdict:
    action: str  # PLACED_TO_FIT or PLACEMENT_TIMEOUT
    size: int  # the next attempt's size
    delay: float  # seconds before the next attempt's pods are created
    message: str


def backoff(job_uid: str, timeouts_in_a_row: int) -> float:
    """The wait after the n-th timeout in a row, with a jitter that is stable for the job (pure)."""
    base = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** max(0, timeouts_in_a_row - 1))
    jitter = (zlib.crc32(f"{job_uid}/{timeouts_in_a_row}".encode()) % 1000) / 1000 * base / 4
    return round(base + jitter, 1)


def decide(
    *,
    status: JobStatus,
    pods: list[dict[str, Any]],
    timeout_seconds: int,
    minimum: int | None,
    job_uid: str,
    now: datetime,
) -> tuple[Verdict | None, float | None]:
    """(what to do, or None; seconds until the timeout could be reached, or None). `pods`: the current attempt's."""
    replicas = status["replicas"]
    if status.get("placement") != "PodByPod" or status.get("launchedAttempt") != status["attempt"]:
        return None, None
    placed = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
    since = parse_time(status.get("unplacedSince"))
    if placed >= replicas or since is None or status.get("unplacedAttempt") != status["attempt"]:
        return None, None
    left = timeout_seconds - (now - since).total_seconds()
    if left > 0:
        return None, left
    if minimum is not None and minimum <= placed < replicas:
        message = (
            f"only {placed} of {replicas} pods were placed in {timeout_seconds}s (no gang scheduling here): "
            f"continuing at {placed}"
        )
        return Verdict(PLACED_TO_FIT, placed, 0.0, message), None
    streak = int(status.get("placementTimeouts", 0)) + 1
    delay = backoff(job_uid, streak)
    message = (
        f"only {placed} of {replicas} pods were placed in {timeout_seconds}s (no gang scheduling here): releasing "
        f"them so they hold no GPUs; trying again in {delay:g}s"
    )
    return Verdict(PLACEMENT_TIMEOUT, replicas, delay, message), None
