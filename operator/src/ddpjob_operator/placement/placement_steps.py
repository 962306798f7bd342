"""The planner's two placement steps for a job whose pods all exist (pure): the placement timeout of a job placed
pod by pod (policy: placement_timeout.py) and an elastic job's resize to the cluster's capacity (policy:
resize_policy.py). Each returns the new status, or None."""

from __future__ import annotations

from typing import Any

from ..state import conditions as c
from ..state.attempt_status import new_group, sized, start_no_sooner
from ..state.plan import Observed, Plan
from ..state.spec import JobSpec
from ..state.status import JobStatus
from . import placement_timeout as placement_timeout_policy
from . import placement_verdict, resize_policy
from .capacity import GROW

WARNING = "Warning"


def running(pod: dict[str, Any]) -> bool:
    """The pod runs and is not going away."""
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def placement_timeout(
    obs: Observed, spec: JobSpec, status: JobStatus, pods: list[dict[str, Any]], plan: Plan
) -> JobStatus | None:
    """Placed pod by pod and not all placed in time: continue at what is placed, or release it (never a failure;
    placement_timeout.py)."""
    verdict, wait = placement_timeout_policy.decide(
        status=status,
        pods=pods,
        timeout_seconds=spec.run_policy.placement_timeout_seconds,
        minimum=spec.elastic.min_replicas if spec.elastic else None,
        job_uid=obs.job["metadata"]["uid"],
        now=obs.now,
    )
    if wait is not None:
        plan.requeue(wait)
    if verdict is None:
        return None
    if verdict.action == placement_timeout_policy.PLACED_TO_FIT:
        out = new_group(obs, spec, status, plan, verdict.size, verdict.action, verdict.message)
        if spec.elastic is not None:  # the size that did not place is not tried again for the cooldown
            resize_policy.remember_unplaced(out, status["replicas"], obs.now, spec.elastic.resize_cooldown_seconds)
        return out
    out = sized(c.enter_phase(status, c.PENDING, verdict.action, verdict.message, obs.now), spec, verdict.size)
    out.update({"attempt": status["attempt"] + 1, "reason": verdict.action})
    out["placementTimeouts"] = status.get("placementTimeouts", 0) + 1
    out["conditions"] = c.set_condition(
        out.get("conditions") or [], placement_verdict.PLACED, "False", verdict.action, verdict.message, obs.now
    )
    start_no_sooner(out, obs.now, verdict.delay)
    plan.event(WARNING, verdict.action, verdict.message)
    plan.requeue(0)
    return out


def resize_to_capacity(
    obs: Observed, spec: JobSpec, status: JobStatus, pods: list[dict[str, Any]], plan: Plan, capacity: int | None
) -> JobStatus | None:
    """An elastic job whose pods all exist: shrink when its gang truly cannot be placed, grow when room returned
    and the current group runs (resize_policy.py). `capacity`: the pods it may have now (kueue_step.Admitted)."""
    if spec.elastic is None or capacity is None or status.get("launchedAttempt") != status["attempt"]:
        return None
    # Restarting: a group recreated after a failure keeps that phase until its pods run, and its gang may not
    # place either (the lost node's room is gone).
    if status.get("phase") not in (c.RUNNING, c.PENDING, c.RESTARTING) or len(pods) < status["replicas"]:
        return None
    verdict = placement_verdict.unschedulable(obs, status, pods)
    pending = [p for p in pods if not (p.get("spec") or {}).get("nodeName")]
    unschedulable = False
    if verdict is not None and resize_policy.real_unschedulable(verdict, pending):
        left = resize_policy.grace_left(status, obs.now, spec.elastic.unschedulable_grace_seconds)
        if left > 0:
            plan.requeue(left)  # the scheduler may still place it (a node coming up, a pod going away)
        unschedulable = left <= 0
    decision = resize_policy.decide(
        status=status,
        desired=spec.replicas,
        minimum=spec.elastic.min_replicas,
        fits=capacity,
        unschedulable=unschedulable,
        running=all(running(p) for p in pods),
        now=obs.now,
    )
    if decision is None or decision.size == status["replicas"]:
        return None
    if decision.reason == GROW and not obs.may_grow:
        plan.grow_blocked = True  # not its turn: the waiting jobs look at the room in their order
        return None
    out = new_group(obs, spec, status, plan, decision.size, decision.reason, decision.message)
    resize_policy.remember(out, decision, status["replicas"], obs.now, spec.elastic.resize_cooldown_seconds)
    return out
