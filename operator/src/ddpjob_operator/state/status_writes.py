"""How often a Running job's progress is written, and a cluster-wide cap on status writes (pure but for the clock
the reconciler hands in).

Progress is news only to a person reading `kubectl get ddpj -o wide`; every write of it is an etcd write. A job
scraped every 10 s whose step always moves cost one status write every 10 s: 100 writes/s at 1,000 jobs. So:

- Per job, progress-only writes back off with the time the attempt has been Running: every scrape at first
  (a person watching a new job sees it move), then one write per tenth of the running time, at most one per
  `max_seconds` (60 s by default). A job with `progressDeadlineSeconds` writes at least three times per
  deadline, so hang detection (no_progress.py), whose clock is the written `advanceTime`, is late by at most a
  third of the deadline. Anything else in the status (a phase, a condition, a NaN loss) is written at once.
- Cluster-wide, `WriteBudget` is a token bucket of `--status-writes-per-second`: a progress-only write finds
  a token or waits for one; every other write takes one but never waits.

The STEP column is then at most `max_seconds` + one scrape interval old while the budget keeps up (at 1,000 jobs,
1,000 / 60 s = 17 writes/s against a default budget of 20/s)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from ..timefmt import parse_time
from .status import JobStatus, Progress


def write_interval(
    running_since: datetime | None, now: datetime, scrape_seconds: float, max_seconds: float, deadline: int | None
) -> float:
    ran = (now - running_since).total_seconds() if running_since is not None else 0.0
    interval = min(max_seconds, max(scrape_seconds, ran / 10))
    if deadline:
        interval = min(interval, deadline / 3)
    return max(interval, 0.0)


def progress_due_in(old: Progress | None, new: Progress, interval: float, now: datetime) -> float:
    """0 when the new progress is written now; else the seconds until it is due."""
    if not old or old.get("attempt") != new.get("attempt") or old.get("lossNonFinite") != new.get("lossNonFinite"):
        return 0.0
    last = parse_time(old.get("updateTime"))
    if last is None:
        return 0.0
    return max(0.0, interval - (now - last).total_seconds())


def progress_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a planned status differs from the written one in its progress alone."""
    if old.get("progress") == new.get("progress"):
        return False
    rest_old, rest_new = copy.copy(dict(old)), copy.copy(dict(new))
    rest_old.pop("progress", None)
    rest_new.pop("progress", None)
    return rest_old == rest_new


class WriteBudget:
    """A token bucket of `per_second` status writes, `per_second` deep. 0 or less: no cap."""

    def __init__(self, per_second: float, clock: Callable[[], float]):
        self.rate, self.clock = per_second, clock
        self.tokens, self.at = max(per_second, 0.0), clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def take(self, status: JobStatus | None, old: Mapping[str, Any]) -> float:
        """0: write `status` now (a token taken, or no cap, or not progress-only); else seconds to wait."""
        if self.rate <= 0 or status is None:
            return 0.0
        self._refill()
        if self.tokens >= 1 or not progress_only(old, status):
            self.tokens -= 1  # a transition is never held back; it may leave the bucket in debt
            return 0.0
        return (1 - self.tokens) / self.rate
