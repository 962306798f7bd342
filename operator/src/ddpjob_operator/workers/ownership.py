"""Our objects, told from objects of the same name by the owner uid (pure).

A DDPJob deleted and re-created under its name has new pods with the old pods' names. The old pods carry our
tracking finalizer, and only we remove it: if nobody did, they would stay Terminating for ever, the scheduler
would still count them, and the new job's creates would meet them (409). So pods under the job's label that the
job does not control are "foreign": their finalizer is freed at once, and a pod the current attempt needs is not
created while a foreign pod still holds its name. A foreign pod that is not an earlier DDPJob's (someone's own
pod with our label and name) is never touched: the create is tried, refused (the applier reads the 409 back and
finds another owner), and the refusal says so (pod_rejection.py).

The same for the headless Service: one of the job's name that the job does not control is not adopted. The job
waits, Pending with REASON ServiceConflict, and tries again now and then (the other Service may go). And for the
NetworkPolicy a job asks for (spec.networkPolicy): a foreign one of its name is not taken for the job's own, so
the job never runs without the isolation it asked for (REASON NetworkPolicyConflict)."""

from __future__ import annotations

from datetime import timedelta

from ..recovery import pod_rejection
from ..state import conditions as c
from ..state import owner_refs
from ..state.plan import Observed, Plan, ServiceConflict
from ..state.status import JobStatus

SERVICE_CONFLICT = "ServiceConflict"
NETWORK_POLICY_CONFLICT = "NetworkPolicyConflict"
SERVICE_RETRY_SECONDS = 15.0
WAITING_FOR_OLD_PODS_SECONDS = 1.0


def plan_foreign_pods(obs: Observed, plan: Plan) -> set[str]:
    """Free the tracking finalizers of foreign pods; return the names a new pod of this job must wait for."""
    blocking = set()
    for pod in obs.foreign_pods:
        meta = pod["metadata"]
        if owner_refs.tracked(meta.get("finalizers")):
            plan.release_foreign_pods.append(meta["uid"])
        if meta.get("deletionTimestamp") or owner_refs.ddpjob_controlled(meta.get("ownerReferences")):
            blocking.add(meta["name"])  # going away (the garbage collector removes an earlier job's pods)
    return blocking


def service_conflict(obs: Observed, status: JobStatus, plan: Plan) -> bool:
    """True while the job must not create its Service (another one holds the name): the job says so once."""
    if obs.service_exists:
        return False
    return _waits_for_name(obs.service_conflict, SERVICE_CONFLICT, obs, status, plan)


def network_policy_conflict(obs: Observed, status: JobStatus, plan: Plan) -> bool:
    """The same for the NetworkPolicy the job asked for: it does not run without the isolation it asked for."""
    if obs.network_policy_exists:
        return False
    return _waits_for_name(obs.network_policy_conflict, NETWORK_POLICY_CONFLICT, obs, status, plan)


def _waits_for_name(
    conflict: ServiceConflict | None, reason: str, obs: Observed, status: JobStatus, plan: Plan
) -> bool:
    if conflict is None:
        return False
    retry_at = conflict.at + timedelta(seconds=SERVICE_RETRY_SECONDS)
    if obs.now >= retry_at:
        return False  # try the create again: the other object may be gone
    message = f"{conflict.message}; the job waits and retries every {SERVICE_RETRY_SECONDS:g}s"
    conditions = status.get("conditions") or []
    current = c.find_condition(conditions, pod_rejection.CREATED_CONDITION)
    if current is None or current.get("reason") != reason or current.get("message") != message:
        plan.event("Warning", reason, message)
    status["conditions"] = c.set_condition(
        conditions, pod_rejection.CREATED_CONDITION, "False", reason, message, obs.now
    )
    status["reason"] = reason
    plan.requeue((retry_at - obs.now).total_seconds())
    return True
