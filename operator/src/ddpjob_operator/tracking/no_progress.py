"""Hang detection (spec.runPolicy.progressDeadlineSeconds): a Running group whose reported step has not advanced
for the deadline is restarted from its last checkpoint, like a failure (reason NoProgress).

The clock is `status.progress.advanceTime`: when the step last moved, or when the current attempt first reported
one, so start-up (rendezvous, checkpoint load, first step) is never counted. Three cases, never the operator's
fault:
- worker 0 answers with the same step: a hang, once the step is older than the deadline;
- worker 0 answered in this attempt, then the operator heard nothing for the deadline: a hang only if the kubelet
  also reports the trainer container not ready (its readiness probe on the metrics port runs from the node: a
  stopped or deadlocked process fails it). If the kubelet says ready, the operator is cut off (a NetworkPolicy,
  the CNI, its own network): no verdict, the ProgressUnknown condition says so;
- worker 0 went silent when its run was due to end (its total steps and step rate say when): its workers exited
  while the pod's torchrun agent waits at the exit barrier for the other pods', so no verdict until that barrier's
  own timeout has passed;
- the operator has not been scraping it lately (overloaded, its scrape pool saturated): no verdict;
- it has not answered yet in this attempt: no clock, no verdict (a trainer without the port, or one starting).
Silence is measured from when this operator process began scraping the job, so a restarted operator never counts
the time it was away."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from ..recovery import failures
from ..state import conditions as c
from ..state.plan import Plan
from ..state.spec import trainer_container
from ..state.status import JobStatus, Progress
from ..timefmt import format_time, parse_time
from .progress_eta import with_eta


def progress_after_scrape(
    old: Progress | None, scraped: dict[str, Any] | None, attempt: int, now: datetime
) -> Progress | None:
    """The status.progress a scrape leads to, or None when nothing worth a write changed (same step, loss and
    rate: the scrape's own time is not news)."""
    if not scraped or "step" not in scraped:
        return None
    old = old or {}
    # The scrape's keys are progress.py's, the Progress fields (parse_progress). A loss is either a number or
    # non-finite: the latest answer replaces whichever the last one was.
    merged = cast(Progress, {**old, **scraped})
    if "loss" in scraped:
        merged.pop("lossNonFinite", None)
    elif "lossNonFinite" in scraped:
        merged.pop("loss", None)
    if old.get("attempt") != attempt or old.get("step") != scraped["step"]:
        merged.update({"attempt": attempt, "advanceTime": scraped.get("updateTime") or format_time(now)})
        return with_eta(old, merged)
    if any(old.get(k) != v for k, v in scraped.items() if k != "updateTime"):
        return with_eta(old, merged)
    return None


UNKNOWN_CONDITION = "ProgressUnknown"


@dataclass(frozen=True)
class Liveness:
    """What else than worker 0's answers says about it: the kubelet's readiness of its trainer container (the
    readiness probe on the metrics port, run from the node, not from the operator), and whether this operator's
    scrapes of it are keeping up."""

    trainer_ready: bool | None = None  # None: no container status yet
    scrapes_current: bool = True  # False: the operator is too loaded to have tried lately (never a hang)


def decide_no_progress(
    deadline: int | None,
    phase: str | None,
    attempt: int,
    progress: Progress | None,
    scraped: dict[str, Any] | None,
    watching_since: datetime | None,
    now: datetime,
    pod: str = "",
    liveness: Liveness = Liveness(),
    unknown: list[str] | None = None,
) -> tuple[failures.Failure | None, float | None]:
    """(the NoProgress failure, or None; seconds until it could be decided, or None when there is no clock).
    When worker 0 is silent but the kubelet says its trainer is alive, there is no verdict: the reason is appended
    to `unknown` (the ProgressUnknown condition)."""
    progress = progress or {}
    if not deadline or phase != "Running" or progress.get("attempt") != attempt:
        return None, None
    advanced = parse_time(progress.get("advanceTime"))
    if advanced is None:
        return None, None
    step = progress.get("step")
    stuck_for = (now - advanced).total_seconds()
    seen = parse_time((scraped or {}).get("updateTime"))
    # The run reported its last step, or was due to end by now: what follows the last step (a final checkpoint,
    # the workers' exit, the pod's torchrun agent waiting at its exit barrier for the other pods', whose workers a
    # loaded machine can take longer than the deadline to end) is no hang before that barrier's own timeout.
    finishing = _finishing(progress, now)
    if scraped and scraped.get("step") == step and seen is not None and (seen - advanced).total_seconds() >= deadline:
        total = progress.get("totalSteps")
        if finishing is not None and step is not None and total is not None and step >= total:
            return None, finishing
        message = f"step {step} has not advanced for {stuck_for:.0f}s (progressDeadlineSeconds {deadline})"
        return _failure(pod, message, now), None
    # Silence counts from the later of: the last answer, the step's advance, this process starting to look.
    heard = max(t for t in (seen, advanced, watching_since) if t is not None)
    silent_for = (now - heard).total_seconds()
    if silent_for >= deadline:
        silence = f"worker 0 has not answered its metrics port for {silent_for:.0f}s, at step {step}"
        if finishing is not None:
            return None, finishing
        if not liveness.scrapes_current:
            # The operator itself has not been scraping (overloaded): its silence says nothing about the job.
            return None, float(deadline)
        if liveness.trainer_ready is False:
            message = (
                f"{silence}, and its kubelet reports the trainer not ready (the readiness probe on the metrics "
                f"port fails) (progressDeadlineSeconds {deadline})"
            )
            return _failure(pod, message, now), None
        if unknown is not None:
            unknown.append(
                f"{silence}, but its kubelet reports the trainer ready: the operator cannot reach it (a "
                "NetworkPolicy, the CNI, the operator's own network): not counted as a hang"
            )
        return None, float(deadline)
    # A step already past the deadline is judged by the next answer (progress requeues bring it); else by time.
    ahead = [left for left in (deadline - stuck_for, deadline - silent_for) if left > 0]
    return None, min(ahead) if ahead else 0.0


# torchrun's exit barrier timeout (its default): how long an agent whose workers finished waits for the others'.
EXIT_BARRIER_SECONDS = 300


def _finishing(progress: Progress, now: datetime) -> float | None:
    """Seconds left of torchrun's exit barrier when the run was due to end by `now` (progress_eta.py: etaSeconds at
    the last advance, 0 once the last step is reported; only when worker 0 reported its totalSteps), else None."""
    advanced, eta = parse_time(progress.get("advanceTime")), progress.get("etaSeconds")
    if not progress.get("totalSteps") or advanced is None or eta is None:
        return None
    left = (advanced + timedelta(seconds=eta) - now).total_seconds() + EXIT_BARRIER_SECONDS
    return left if 0 < left <= EXIT_BARRIER_SECONDS else None


def _failure(pod: str, message: str, now: datetime) -> failures.Failure:
    return failures.Failure(pod=pod, kind=failures.NO_PROGRESS, reason="NoProgress", message=message, at=now)


def trainer_ready(pod: dict[str, Any] | None) -> bool | None:
    """The kubelet's readiness of worker 0's trainer container (its probe on the metrics port), if reported."""
    if pod is None:
        return None
    container = trainer_container((pod.get("spec") or {}).get("containers") or []) or {}
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container.get("name") and "ready" in cs:
            return bool(cs["ready"])
    return None


def show_progress_unknown(now: datetime, status: JobStatus, unknown: list[str], plan: Plan) -> None:
    """ProgressUnknown=True while worker 0 cannot be reached but is alive; said (event, metric) once per change."""
    conditions = status.get("conditions") or []
    if not unknown:
        message = "worker 0's progress is read"
        status["conditions"] = c.clear_condition(conditions, UNKNOWN_CONDITION, "ProgressRead", message, now)
        return
    shown = c.find_condition(conditions, UNKNOWN_CONDITION)
    if shown is None or shown.get("status") != "True":
        plan.event("Warning", UNKNOWN_CONDITION, unknown[0])
        plan.observe("progress_unknown")
    status["conditions"] = c.set_condition(conditions, UNKNOWN_CONDITION, "True", "MetricsUnreachable", unknown[0], now)


def final_progress(now: datetime, status: JobStatus, worker0: dict[str, Any] | None) -> None:
    """A Succeeded job's progress: the step worker 0 finished at when newer than the last scrape (which can be an
    interval before the exit), and 100% done with no time left, whether or not the run said its total (a user's
    loop that reports steps but no total_steps). A job that never reported a step keeps no progress."""
    step = failures.finished_step(worker0) if worker0 is not None else None
    progress = status.get("progress") or {}
    final: Progress = dict(progress)  # type: ignore[assignment]
    if step is not None and step > progress.get("step", -1):
        final.update({"step": step, "attempt": status["attempt"], "advanceTime": format_time(now)})
    if "step" not in final:
        return
    final = with_eta(progress, final)
    final.update({"percent": 100, "etaSeconds": 0, "text": "100%"})
    status["progress"] = final
