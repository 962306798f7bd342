"""The planner's progress step for a Running job (pure): take in worker 0's latest scrape, write it when a write is
due (status_writes.py), and say when its loss stops, or starts again, being a number."""

from __future__ import annotations

from ..state import conditions as c
from ..state import status_writes
from ..state.plan import Observed, Plan
from ..state.status import JobStatus, Progress
from ..timefmt import parse_time
from .no_progress import progress_after_scrape
from .progress import agent_urls, metrics_url

NORMAL, WARNING = "Normal", "Warning"


def take_progress(
    obs: Observed,
    status: JobStatus,
    plan: Plan,
    scrape_seconds: float,
    write_max_seconds: float,
    deadline: int | None,
) -> None:
    if metrics_url(obs) is not None or agent_urls(obs):
        plan.requeue(scrape_seconds)  # worker 0's progress, and under InPlace every pod's agent (in_place.py)
    progress = progress_after_scrape(status.get("progress"), obs.progress, status["attempt"], obs.now)
    if progress is None:
        return
    running = c.find_condition(status.get("conditions") or [], c.RUNNING)
    interval = status_writes.write_interval(
        parse_time(running.get("lastTransitionTime")) if running else None,
        obs.now,
        scrape_seconds,
        write_max_seconds,
        deadline,
    )
    wait = status_writes.progress_due_in(status.get("progress"), progress, interval, obs.now)
    if wait > 0:
        plan.requeue(wait)
        return
    _loss_events((status.get("progress") or {}).get("lossNonFinite"), progress, plan)
    status["progress"] = progress


def _loss_events(before: str | None, progress: Progress, plan: Plan) -> None:
    """A loss that turns NaN or infinite (a diverging run) is news, and so is its return to a number."""
    after = progress.get("lossNonFinite")
    if after and after != before:
        plan.event(
            WARNING,
            "LossNotFinite",
            f"worker 0 reports a {after} loss at step {progress.get('step')}: training has diverged "
            "(status.progress.lossNonFinite); the job keeps running",
        )
    elif before and not after and "loss" in progress:
        plan.event(NORMAL, "LossFinite", f"worker 0 reports a finite loss again at step {progress.get('step')}")
