"""Restarts done in place (runPolicy.restartStrategy: InPlace), counted into the job's budget (pure).

Under InPlace a failed trainer process does not end its pod: torchrun's agents restart their workers inside the
running pods and form the group again (PET_MAX_RESTARTS, rendezvous.max_restarts). The operator sees no pod end,
so it counts those restarts from what reports them:
- worker 0's `ddp_trainer_torchrun_restarts` (its agent's TORCHELASTIC_RESTART_COUNT; a peer's failure fails
  worker 0's collectives too, so its agent restarts with the others), read with the progress scrape;
- the termination record of a pod whose agent gave up (`ddpjobInPlaceRestarts`, ddp_trainer.torchrun), which
  also covers a script that serves no metrics.
torchrun's limit is what was left of backoffLimit when the pod was made, so its counter is the job's budget, never
a second one: when it is spent the pod fails, and the failure policy finds the budget spent."""

from __future__ import annotations

from . import recoveries
from .plan import Observed, Plan
from .spec import IN_PLACE, JobSpec
from .status import JobStatus


def counted(status: JobStatus) -> int:
    """In-place restarts of the current attempt already in status.restarts."""
    seen = status.get("inPlace") or {}
    return int(seen.get("restarts", 0)) if seen.get("attempt") == status.get("attempt") else 0


def reported(obs: Observed, ended: list[int]) -> int:
    """The most in-place restarts anything of the current attempt reports: worker 0's scrape, and the termination
    records of its pods that ended (`ended`)."""
    scraped = (obs.progress or {}).get("inPlaceRestarts")
    most = scraped if isinstance(scraped, int) else 0
    return max([most, *ended])


def take_in(obs: Observed, spec: JobSpec, status: JobStatus, plan: Plan, ended: list[int] | None = None) -> int:
    """Count in-place restarts not yet counted into status.restarts (a Warning event and a recovery entry each
    time); how many were new. `ended`: what the termination records of the attempt's ended pods say."""
    if spec.run_policy.restart_strategy != IN_PLACE:
        return 0
    before = counted(status)
    new = reported(obs, ended or []) - before
    if new <= 0:
        return 0
    status["restarts"] = status.get("restarts", 0) + new
    status["inPlace"] = {"attempt": status["attempt"], "restarts": before + new}
    limit = spec.run_policy.backoff_limit
    message = (
        f"trainer processes restarted in place by torchrun ({before + new} in attempt {status['attempt']}); "
        f"restarts {status['restarts']} of backoffLimit {limit}; no pod was replaced"
    )
    plan.event("Warning", "RestartedInPlace", message)
    plan.observe("in_place_restarts", new)
    recoveries.record(status, obs.now, recoveries.IN_PLACE, cause=None, message=message, done=True)
    return new
