"""Edits of a job's status that several planning steps make: a new attempt's size, and when its pods may start.
Pure."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..timefmt import format_time
from . import conditions as c
from .plan import Observed, Plan
from .spec import JobSpec
from .status import JobStatus


def sized(status: JobStatus, spec: JobSpec, size: int) -> JobStatus:
    """status at a new attempt of `size` pods (none running yet), of spec.replicas desired."""
    status.update(
        {
            "replicas": size,
            "desiredReplicas": spec.replicas,
            "sizeText": f"{size}/{spec.replicas}",
            "readyReplicas": 0,
            "readyText": f"0/{size}",
            "worldSize": size * spec.procs_per_pod,
        }
    )
    return status


# A new group (after a restart, a rescale or a resume) starts at least this long after the decision: a late
# confirmation of an old pod's end that names it only by name (kwok's simulated kubelet does) would otherwise hit
# its successor, which reuses the name.
RECREATE_QUIET_SECONDS = 2.0


def drop_restart_clock(status: JobStatus) -> None:
    """A group that will not start again (suspended, finished) has no restart to wait for or to time."""
    status.pop("nextAttemptTime", None)
    status.pop("restartingSince", None)


def start_no_sooner(status: JobStatus, now: datetime, delay: float = 0.0) -> None:
    """Set when the pods of the new attempt may be created: after the backoff, and never in the same moment."""
    status["nextAttemptTime"] = format_time(now + timedelta(seconds=max(delay, RECREATE_QUIET_SECONDS)))


def new_group(
    obs: Observed, spec: JobSpec, status: JobStatus, plan: Plan, size: int, reason: str, message: str
) -> JobStatus:
    """A new attempt of `size` pods that is not a failure: attempt moves, restarts (the budget) does not. Its pods
    stop on SIGTERM, which makes the trainer write a checkpoint; the new group resumes from it."""
    out = sized(c.enter_phase(status, c.RESTARTING, reason, message, obs.now), spec, size)
    out["attempt"] = status["attempt"] + 1
    start_no_sooner(out, obs.now)
    out.setdefault("restartingSince", format_time(obs.now))
    plan.event("Normal", reason, message)
    plan.observe("group_restarts", reason=reason)
    plan.requeue(0)
    return out
