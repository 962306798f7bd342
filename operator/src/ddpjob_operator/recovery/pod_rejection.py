"""The planner's step for a pod the API server refused to create. The applier only reports the refusal (the
reconciler keeps the latest per job, as an observation); the next pass decides here:

- Invalid (422: a field fails validation; 400: the body cannot even be decoded as a Pod, e.g. a resource quantity
  such as "lots", found by the fuzz suite) will be refused on every attempt: the job fails with the server's
  message instead of retrying forever.
- Any other refusal (quota, admission webhooks) may pass later: condition PodsCreated=False with the server's
  words, a Warning event once per change, and the missing pods are tried again RETRY_SECONDS after the refusal.

A refusal of an earlier attempt, or of an older spec generation, no longer says anything about the pods to create,
and is ignored. The refusal is not stored in the cluster: an operator that restarts tries the creation again and
is refused again, so nothing is lost."""

from __future__ import annotations

from datetime import timedelta

from ..state import conditions as c
from ..state.plan import Observed, Plan, PodRefusal
from ..state.status import JobStatus

INVALID = (400, 422)
MESSAGE_LIMIT = 1024
RETRY_SECONDS = 10.0
CREATED_CONDITION = "PodsCreated"  # False, with the server's words, while a retryable refusal holds pods back
INVALID_REASON = "InvalidPodTemplate"
RETRY_REASON = "FailedCreate"  # the Job controller's word for the same thing


def current_refusal(obs: Observed, status: JobStatus) -> PodRefusal | None:
    """The refusal that is about this attempt's pods as the spec now describes them."""
    refusal = obs.refusal
    if refusal is None or refusal.attempt != status.get("attempt"):
        return None
    if refusal.generation != obs.job["metadata"].get("generation", 1):
        return None
    return refusal


def verdict_message(refusal: PodRefusal) -> str:
    return f"pod {refusal.pod} was rejected by the API server: {refusal.message}"[:MESSAGE_LIMIT]


def is_invalid(refusal: PodRefusal) -> bool:
    return refusal.code in INVALID


def plan_retry(obs: Observed, status: JobStatus, refusal: PodRefusal, plan: Plan) -> float:
    """Record a retryable refusal in status (event on change); the seconds left before trying again."""
    message = f"attempt {status['attempt']}: {verdict_message(refusal)} (HTTP {refusal.code}); retrying"
    conditions = status.get("conditions") or []
    shown = c.find_condition(conditions, CREATED_CONDITION)
    if shown is None or shown.get("status") != "False" or shown.get("message") != message:
        plan.event("Warning", RETRY_REASON, message)
    status["conditions"] = c.set_condition(conditions, CREATED_CONDITION, "False", RETRY_REASON, message, obs.now)
    if status.get("phase") == c.PENDING:
        status["reason"] = RETRY_REASON
    left = (refusal.at + timedelta(seconds=RETRY_SECONDS) - obs.now).total_seconds()
    return max(0.0, left)


def mark_created(obs: Observed, status: JobStatus) -> None:
    """Every pod of the attempt exists: a PodsCreated=False left by a refusal turns True."""
    conditions = status.get("conditions") or []
    shown = c.find_condition(conditions, CREATED_CONDITION)
    if shown is None or shown.get("status") == "True":
        return
    message = f"all {status['replicas']} pods of attempt {status['attempt']} exist"
    status["conditions"] = c.set_condition(conditions, CREATED_CONDITION, "True", "Created", message, obs.now)
    if status.get("reason") == shown.get("reason"):  # FailedCreate, or ownership.py's ServiceConflict
        status["reason"] = "Created"
