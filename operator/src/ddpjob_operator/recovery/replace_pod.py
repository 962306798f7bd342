"""InPlace: a lost pod is replaced alone (pure).

Under runPolicy.restartStrategy: InPlace a pod that is lost (deleted, evicted, its node gone, or its container
ended) is replaced on its own, in the same attempt: the surviving pods keep their uid, node and container, and
their torchrun agents, whose workers failed with the peer, restart them in place and take the replacement into
the group when it joins the same rendezvous (same attempt, same id). An elastic job's agents accept min..size nodes
(rendezvous.nnodes), so they train on at the smaller size while the replacement is pending.

Under faultTolerance.mode: TorchFT every pod is a replica group of its own (replica_groups.py): any lost pod, pod 0
and several at once included, is replaced alone, and the survivors never stop (torchft drops the dead group from
its quorum).

Otherwise the group is recreated instead when that cannot work:
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

from ..state.plan import Observed, Plan
from ..state.spec import IN_PLACE, JobSpec
from ..state.status import JobStatus
from . import failure_class, failures, in_place, recoveries, replica_groups
from .failures import Failure

LOST_KINDS = (
    failures.DELETED,
    failures.EVICTED,
    failures.NODE_LOST,
    failures.EXIT_CODE,
    failures.SIGNAL,
    failures.UNKNOWN,
)


def forget_gone(status: JobStatus, pods: list[dict[str, Any]]) -> None:
    """A replaced pod's uid is kept until the pod is gone; then it is forgotten."""
    if not status.get("retiredUids"):
        return
    present = {p["metadata"].get("uid") for p in pods}
    kept = [uid for uid in status["retiredUids"] if uid in present]
    if kept:
        status["retiredUids"] = kept
    else:
        status.pop("retiredUids", None)


def pods_to_replace(
    spec: JobSpec, found: list[Failure], current: dict[int, dict[str, Any]], status: JobStatus
) -> list[tuple[int, dict[str, Any]]] | None:
    """(index, pod) of each lost pod to replace alone, or None when the group must be recreated."""
    torchft = spec.fault_tolerance.torchft
    if not found or any(f.kind not in LOST_KINDS for f in found):
        return None
    if not torchft and (spec.run_policy.restart_strategy != IN_PLACE or len(found) != 1):
        return None
    by_name = {pod["metadata"]["name"]: (index, pod) for index, pod in current.items()}
    if any(f.pod not in by_name for f in found):
        return None  # a pod that is missing altogether: its uid is gone, recreate
    targets = [by_name[f.pod] for f in found]
    if not torchft and targets[0][0] == 0:
        return None  # pod 0 hosts the rendezvous store every agent talks to
    if torchft and not _live_peers(current, {index for index, _ in targets}, status):
        # Every group is lost (at once, or one after another before a replacement ran): no live peer to heal
        # from, so the group restarts from its checkpoint, as one recreation.
        return None
    return targets


def _live_peers(current: dict[int, dict[str, Any]], lost: set[int], status: JobStatus) -> list[int]:
    """Indices of running pods that are neither lost now nor a replacement still to heal (status.replacing)."""
    healing = not_missing(status)
    return [
        index
        for index, pod in current.items()
        if index not in lost and index not in healing and (pod.get("status") or {}).get("phase") == "Running"
    ]


def replace_alone(
    now: datetime,
    spec: JobSpec,
    found: list[Failure],
    current: dict[int, dict[str, Any]],
    status: JobStatus,
    cause: Failure,
    message: str,
    plan: Plan,
    scraped: dict[str, Any] | None = None,
) -> bool:
    """Replace the lost pods alone when that works (pods_to_replace); False: recreate the group instead.
    `scraped`: this pass's scrape of worker 0 (recoveries.record)."""
    targets = pods_to_replace(spec, found, current, status)
    if targets is None:
        return False
    lost_ranks = spec.procs_per_pod * len(targets)
    if spec.fault_tolerance.torchft:
        # Only the lost groups' ranks stop; the survivors lose no step (the newcomer heals from them).
        recoveries.record(
            status,
            now,
            recoveries.REPLICA_GROUP_REPLACED,
            cause,
            message,
            ranks=lost_ranks,
            steps_lost=0,
            scraped=scraped,
        )
    else:
        # An elastic group's survivors train on without the lost pod (rendezvous min..size): only its ranks stop.
        # A fixed-size group waits for the replacement to join: every rank stops.
        elastic_goes_on = spec.elastic is not None and status["replicas"] - len(targets) >= spec.elastic.min_replicas
        recoveries.record(
            status,
            now,
            recoveries.POD_REPLACED,
            cause,
            message,
            ranks=lost_ranks if elastic_goes_on else None,
            scraped=scraped,
        )
    charged: set[str] = set()
    for failure, (index, pod) in zip(found, targets, strict=True):
        # The pods lost in one pass are one incident of each class among them: one unit of that class's budget
        # (restart_policy.decide_each checked it), however many groups it took.
        kind = failure_class.class_of(failure)
        replace(spec, status, index, pod, failure, kind, plan, charge=kind not in charged)
        charged.add(kind)
    return True


def replace(
    spec: JobSpec,
    status: JobStatus,
    index: int,
    pod: dict[str, Any],
    cause: Failure,
    kind: str,
    plan: Plan,
    charge: bool = True,
) -> None:
    """Record the decision to replace `pod` alone; the next pass acts on it."""
    replacing = dict(status.get("replacing") or {})
    earlier = replacing.get(str(index))
    if earlier is not None and earlier != pod["metadata"]["uid"]:
        # A replacement lost before it ran: the first lost pod stays retired while it exists (else it came back
        # as the index's pod and was charged again).
        status["retiredUids"] = sorted({*(status.get("retiredUids") or []), earlier})
    replacing[str(index)] = pod["metadata"]["uid"]
    status["replacing"] = replacing
    if not charge:
        pass
    elif kind == failure_class.TRAINER:
        status["restarts"] = status.get("restarts", 0) + 1
    else:
        status["platformRestarts"] = status.get("platformRestarts", 0) + 1
    name = pod["metadata"]["name"]
    if spec.fault_tolerance.torchft:
        message = (
            f"{cause.describe()}; replacing replica group {index} (pod {name}) alone: the other groups train on "
            "without it, and the replacement heals from a live peer"
        )
        plan.event("Warning", "ReplacingReplicaGroup", message)
        plan.observe("group_restarts", reason="ReplicaGroupReplaced")
    else:
        # The survivors' agents restart their workers for this loss too (their collectives failed with the peer),
        # and worker 0 reports that restart: it is this failure's, already counted.
        status["inPlace"] = {
            **in_place.agents_seen(status),  # type: ignore[typeddict-item]
            "attempt": status["attempt"],
            "restarts": in_place.counted(status) + 1,
        }
        plan.event(
            "Warning",
            "ReplacingPod",
            f"{cause.describe()}; replacing pod {name} alone in attempt {status['attempt']}: the other pods keep "
            "running and take the replacement into their group",
        )
        plan.observe("group_restarts", reason="PodReplaced")
    plan.requeue(0)


def end_when_back(
    obs: Observed,
    spec: JobSpec,
    status: JobStatus,
    current: dict[int, dict[str, Any]],
    running: int,
    plan: Plan,
    has_metrics: bool,
) -> None:
    """A Running job replacing pods: the recovery ends once every pod runs again (done) and, under TorchFT, the
    replacements are back in worker 0's quorum (replica_groups.rejoined; `has_metrics`: a metrics endpoint is read,
    which the planner then reads often meanwhile)."""
    if not replica_groups.rejoined(spec, status, obs.progress, has_metrics) or not done(status, current, running):
        return
    recoveries.close(status, obs.now, plan)
    if spec.run_policy.restart_strategy == IN_PLACE and not spec.fault_tolerance.torchft:
        in_place.expect_join(status, obs.now)  # a TorchFT group joins no torchrun rendezvous of the others


def done(status: JobStatus, current: dict[int, dict[str, Any]], running: int) -> bool:
    """Every pod of the attempt runs again: nothing is being replaced any more (True when that happens now)."""
    if status.get("replacing") and running == status["replicas"] and len(current) == status["replicas"]:
        # The lost pods may still be Terminating (a NotReady node's grace): they stay excluded until gone.
        retired = [*(status.get("retiredUids") or []), *status.pop("replacing", {}).values()]
        status["retiredUids"] = sorted(set(retired))
        return True
    return False


def finished_without_replacement(spec: JobSpec, status: JobStatus, done_indices: set[int]) -> bool:
    """The survivors may finish the training while a lost pod's replacement still waits (InPlace elastic: for
    room; TorchFT: any group, for its replacement to start). Their group was complete without it, and the
    replacement is cleaned up with the job."""
    replacing = not_missing(status)
    finisher = bool(done_indices) if spec.fault_tolerance.torchft else 0 in done_indices
    return bool(replacing) and finisher and done_indices | replacing >= set(range(status["replicas"]))


def not_missing(status: JobStatus) -> set[int]:
    """Indices whose pod is being replaced: their absence is no failure."""
    return {int(i) for i in (status.get("replacing") or {})}
