"""What the user was promised, checked after every step of a simulation (docs/simulation.md).

Each invariant returns None or a sentence naming the broken promise; the first broken one ends the run."""

from __future__ import annotations

from collections.abc import Callable

from ddpjob_operator.recovery import recoveries
from sim.world import PLATFORM, TRAINER, World

Invariant = Callable[[World], "str | None"]


def trainer_charged_only_for_its_own(world: World) -> str | None:
    """Each incident is charged once, to its class: the trainer's budget never counts more than the trainer's own
    failures (a lost, rebooted, evicted or deleted pod is the platform's). The healthy reset is off in the model."""
    charged, truth = int(world.status.get("restarts", 0)), world.truth.count(TRAINER)
    if charged > truth:
        return f"status.restarts is {charged} after {truth} trainer incidents"
    return None


def platform_charged_only_for_its_own(world: World) -> str | None:
    charged, truth = int(world.status.get("platformRestarts", 0)), world.truth.count(PLATFORM)
    if charged > truth:
        return f"status.platformRestarts is {charged} after {truth} platform incidents"
    return None


def fails_only_past_a_budget(world: World) -> str | None:
    """A job fails only when the budget of that class is exceeded, and says which."""
    if world.status.get("phase") != "Failed":
        return None
    reason = world.status.get("reason") or ""
    trainer, platform = world.truth.count(TRAINER), world.truth.count(PLATFORM)
    if reason == "BackoffLimitExceeded" and trainer <= world.config.backoff_limit:
        return f"failed BackoffLimitExceeded after {trainer} trainer incidents (backoffLimit {world.config.backoff_limit})"
    if reason == "PlatformFailureLimitExceeded" and platform <= world.config.platform_limit:
        return f"failed PlatformFailureLimitExceeded after {platform} platform incidents"
    if reason not in ("BackoffLimitExceeded", "PlatformFailureLimitExceeded"):
        return f"failed for {reason}: {world.status.get('message')}"
    if not world.status.get("lastFailure"):
        return "failed without saying which incident did it (status.lastFailure)"
    return None


def one_live_pod_per_index(world: World) -> str | None:
    seen: dict[int, list[str]] = {}
    replaced = set((world.status.get("replacing") or {}).values()) | set(world.status.get("retiredUids") or [])
    for pod in world.workers():
        meta = pod["metadata"]
        if meta["labels"].get("ddpjob.dev/restart-attempt") != str(world.attempt()) or meta.get("deletionTimestamp"):
            continue
        if meta["uid"] in replaced or pod["status"].get("phase") in ("Failed", "Succeeded"):
            continue
        seen.setdefault(int(meta["labels"]["ddpjob.dev/replica-index"]), []).append(meta["name"])
    doubled = {i: names for i, names in seen.items() if len(names) > 1}
    return f"two live pods for one index: {doubled}" if doubled else None


def no_force_delete_on_a_ready_node(world: World) -> str | None:
    names = world.truth.force_deleted_on_ready
    return f"force-deleted {names} on a Ready node (their containers may still run)" if names else None


def deletes_only_what_it_owns(world: World) -> str | None:
    names = world.truth.deleted_current
    return f"deleted {names}, live pods of the running attempt that no decision retired" if names else None


def admitted_workload_kept_while_running(world: World) -> str | None:
    """Nothing Kueue admits on changes in the model, so an admitted Workload is never replaced while the job runs."""
    names = world.truth.workloads_replaced_while_running
    return f"deleted the admitted Workload {names} of a running job (its pods stop)" if names else None


def torchruns_limit_never_binds_first(world: World) -> str | None:
    if world.truth.agent_gave_up and world.status.get("phase") not in ("Failed",):
        if world.truth.count(TRAINER) <= world.config.backoff_limit:
            return f"torchrun's own limit (PET_MAX_RESTARTS) ended {world.truth.agent_gave_up} within the budgets"
    return None


def recoveries_closed_at_the_end(world: World) -> str | None:
    if world.status.get("phase") not in ("Succeeded", "Failed"):
        return None
    open_ = [r.get("id") for r in world.status.get("recoveries") or [] if recoveries.is_open(r)]
    return f"the job ended with recoveries {open_} still open" if open_ else None


# Long enough after the end for the force-delete of a pod on a lost node (PlannerSettings: 300 s), with passes.
CLEAN_UP_SECONDS = 400


def nothing_left_running_after_the_end(world: World) -> str | None:
    """cleanPodPolicy Running (the default): once the job has ended, its pods stop and their tracking finalizers
    go; none is left running or holding the job's finalizer."""
    ended = world.truth.ended_at
    if ended is None or world.truth.passes_since_end < 3 or (world.now - ended).total_seconds() < CLEAN_UP_SECONDS:
        return None
    left = [p["metadata"]["name"] for p in world.pods.values()
            if p["metadata"].get("finalizers") or (p["status"].get("phase") in ("Pending", "Running")
                                                   and not p["metadata"].get("deletionTimestamp"))]
    return f"{CLEAN_UP_SECONDS} s after the end, {left} still run or hold the tracking finalizer" if left else None


INVARIANTS: list[Invariant] = [
    trainer_charged_only_for_its_own,
    platform_charged_only_for_its_own,
    fails_only_past_a_budget,
    one_live_pod_per_index,
    no_force_delete_on_a_ready_node,
    deletes_only_what_it_owns,
    admitted_workload_kept_while_running,
    torchruns_limit_never_binds_first,
    recoveries_closed_at_the_end,
    nothing_left_running_after_the_end,
]


def broken(world: World) -> str | None:
    for invariant in INVARIANTS:
        problem = invariant(world)
        if problem is not None:
            return f"{invariant.__name__}: {problem}"
    return None
