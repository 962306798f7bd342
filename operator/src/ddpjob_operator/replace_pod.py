"""InPlace: a lost pod is replaced alone (pure).

Under runPolicy.restartStrategy: InPlace a pod that is lost (deleted, evicted, its node gone, or its container
ended) is replaced on its own, in the same attempt: the surviving pods keep their uid, node and container, and
their torchrun agents, whose workers failed with the peer, restart them in place and take the replacement into
the group when it joins the same rendezvous (same attempt, same id). An elastic job's agents accept min..size nodes
(rendezvous.nnodes), so they train on at the smaller size while the replacement is pending.

The group is recreated instead when that cannot work:
- the lost pod is pod 0: its agent hosts the rendezvous store every agent talks to;
- more than one pod ended at once, or the cause is the group's own (no progress, a rendezvous that timed out).

Bookkeeping, level-based like everything else: the decision is written first, as status.replacing (index -> the
lost pod's uid). From then on that pod is an earlier one (sort_pods leaves it out of the current group), so the
next pass deletes it (force-deleting only when termination.py says it is safe), frees its tracking finalizer and
creates the replacement beside it (pod_names.py gives it another name while the lost one holds its own). The
entry goes once every pod of the attempt runs again."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import failure_class, failures, in_place, recoveries
from .failures import Failure
from .plan import Plan
from .spec import IN_PLACE, JobSpec
from .status import JobStatus

LOST_KINDS = (
    failures.DELETED,
    failures.EVICTED,
    failures.NODE_LOST,
    failures.EXIT_CODE,
    failures.SIGNAL,
    failures.UNKNOWN,
)


def replaced_uids(status: JobStatus) -> set[str]:
    return set((status.get("replacing") or {}).values())


def pod_to_replace(
    spec: JobSpec, found: list[Failure], current: dict[int, dict[str, Any]]
) -> tuple[int, dict[str, Any]] | None:
    """(index, pod) of the one lost pod to replace alone, or None when the group must be recreated."""
    if spec.run_policy.restart_strategy != IN_PLACE or len(found) != 1:
        return None
    (cause,) = found
    if cause.kind not in LOST_KINDS:
        return None
    for index, pod in current.items():
        if pod["metadata"]["name"] == cause.pod:
            return (index, pod) if index != 0 else None
    return None  # a pod that is missing altogether: its uid is gone, recreate


def replace_alone(
    now: datetime,
    spec: JobSpec,
    found: list[Failure],
    current: dict[int, dict[str, Any]],
    status: JobStatus,
    cause: Failure,
    kind: str,
    message: str,
    plan: Plan,
) -> bool:
    """Replace the one lost pod alone when that works (pod_to_replace); False: recreate the group instead."""
    target = pod_to_replace(spec, found, current)
    if target is None:
        return False
    recoveries.record(status, now, recoveries.POD_REPLACED, cause, message)
    replace(status, *target, cause, kind, plan)
    return True


def replace(status: JobStatus, index: int, pod: dict[str, Any], cause: Failure, kind: str, plan: Plan) -> None:
    """Record the decision to replace `pod` alone; the next pass acts on it."""
    replacing = dict(status.get("replacing") or {})
    replacing[str(index)] = pod["metadata"]["uid"]
    status["replacing"] = replacing
    if kind == failure_class.TRAINER:
        status["restarts"] = status.get("restarts", 0) + 1
    else:
        status["platformRestarts"] = status.get("platformRestarts", 0) + 1
    # The survivors' agents restart their workers for this loss too (their collectives failed with the peer), and
    # worker 0 reports that restart: it is this failure's, already counted.
    status["inPlace"] = {"attempt": status["attempt"], "restarts": in_place.counted(status) + 1}
    plan.event(
        "Warning",
        "ReplacingPod",
        f"{cause.describe()}; replacing pod {pod['metadata']['name']} alone in attempt {status['attempt']}: the "
        "other pods keep running and take the replacement into their group",
    )
    plan.observe("group_restarts", reason="PodReplaced")
    plan.requeue(0)


def done(status: JobStatus, current: dict[int, dict[str, Any]], running: int) -> bool:
    """Every pod of the attempt runs again: nothing is being replaced any more (True when that happens now)."""
    if status.get("replacing") and running == status["replicas"] and len(current) == status["replicas"]:
        status.pop("replacing", None)
        return True
    return False


def finished_without_replacement(status: JobStatus, done_indices: set[int]) -> bool:
    """InPlace elastic: the survivors may finish the training while a lost pod's replacement still waits for
    room. Their group was complete without it, and the replacement is cleaned up with the job."""
    replacing = not_missing(status)
    return bool(replacing) and 0 in done_indices and done_indices | replacing >= set(range(status["replicas"]))


def not_missing(status: JobStatus) -> set[int]:
    """Indices whose pod is being replaced: their absence is no failure."""
    return {int(i) for i in (status.get("replacing") or {})}
