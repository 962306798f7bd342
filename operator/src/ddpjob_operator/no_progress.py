"""Hang detection (spec.runPolicy.progressDeadlineSeconds): a Running group whose reported step has not advanced
for the deadline is restarted from its last checkpoint, like a failure (reason NoProgress).

The clock is `status.progress.advanceTime`: when the step last moved, or when the current attempt first reported
one, so start-up (rendezvous, checkpoint load, first step) is never counted. Worker 0's metrics port tells a hang
from a blind spot:
- it answers with the same step: stuck, once the step is older than the deadline;
- it has answered in this attempt, then went silent for the whole deadline (a stopped or deadlocked process cannot
  serve its own metrics either): stuck too;
- it has not answered yet in this attempt: no clock, no verdict (a trainer without the port, or one still starting).
Silence is measured from when this operator process began scraping the job, so a restarted operator never counts
the time it was away."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from . import failures
from .status import Progress
from .timefmt import format_time, parse_time


def progress_after_scrape(
    old: Progress | None, scraped: dict[str, Any] | None, attempt: int, now: datetime
) -> Progress | None:
    """The status.progress a scrape leads to, or None when nothing worth a write changed (same step, loss and
    rate: the scrape's own time is not news)."""
    if not scraped or "step" not in scraped:
        return None
    old = old or {}
    # The scrape's keys are progress.py's, the Progress fields (parse_progress).
    merged = cast(Progress, {**old, **scraped})
    if old.get("attempt") != attempt or old.get("step") != scraped["step"]:
        merged.update({"attempt": attempt, "advanceTime": scraped.get("updateTime") or format_time(now)})
        return merged
    if any(old.get(k) != v for k, v in scraped.items() if k != "updateTime"):
        return merged
    return None


def decide_no_progress(
    deadline: int | None,
    phase: str | None,
    attempt: int,
    progress: Progress | None,
    scraped: dict[str, Any] | None,
    watching_since: datetime | None,
    now: datetime,
    pod: str = "",
) -> tuple[failures.Failure | None, float | None]:
    """(the NoProgress failure, or None; seconds until it could be decided, or None when there is no clock)."""
    progress = progress or {}
    if not deadline or phase != "Running" or progress.get("attempt") != attempt:
        return None, None
    advanced = parse_time(progress.get("advanceTime"))
    if advanced is None:
        return None, None
    step = progress.get("step")
    stuck_for = (now - advanced).total_seconds()
    seen = parse_time((scraped or {}).get("updateTime"))
    if scraped and scraped.get("step") == step and seen is not None and (seen - advanced).total_seconds() >= deadline:
        message = f"step {step} has not advanced for {stuck_for:.0f}s (progressDeadlineSeconds {deadline})"
        return _failure(pod, message, now), None
    # Silence counts from the later of: the last answer, the step's advance, this process starting to look.
    heard = max(t for t in (seen, advanced, watching_since) if t is not None)
    silent_for = (now - heard).total_seconds()
    if silent_for >= deadline:
        message = (
            f"worker 0 stopped answering its metrics port {silent_for:.0f}s ago, at step {step} "
            f"(progressDeadlineSeconds {deadline})"
        )
        return _failure(pod, message, now), None
    # A step already past the deadline is judged by the next answer (progress requeues bring it); else by time.
    ahead = [left for left in (deadline - stuck_for, deadline - silent_for) if left > 0]
    return None, min(ahead) if ahead else 0.0


def _failure(pod: str, message: str, now: datetime) -> failures.Failure:
    return failures.Failure(pod=pod, kind=failures.NO_PROGRESS, reason="NoProgress", message=message, at=now)
