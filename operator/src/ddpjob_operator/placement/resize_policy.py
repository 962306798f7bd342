"""When an elastic job changes size (pure): sizes that settle instead of flapping.

capacity.py estimates the room from the cache, but the estimate ignores what it cannot see (affinity and
anti-affinity, topology spread, host ports, pods of unwatched namespaces): it can promise a size the scheduler
then refuses. Left alone, that loops for ever, each step a group restart: 4 does not place -> 3 -> the estimate
says 4 fits -> 4 -> ... So:

- **Shrink** only on the scheduler's real verdict: the attempt's gang (or, pod by pod, a pending pod) says
  `Unschedulable`, and has said so for `elastic.unschedulableGraceSeconds` (30). Not `SchedulingGated`, not a pod
  the scheduler has nominated a node for (a preemption under way), not a pod the cluster autoscaler is bringing a
  node up for (its `TriggeredScaleUp` shows as a `cluster-autoscaler.kubernetes.io/*` annotation or the pod's
  nomination).
- **Remember** the size that did not place (also pod by pod, when the placement timeout continues the job at the
  placed count: placement_timeout.py), and when: `status.unplaceableSize` / `status.unplaceableUntil`. For
  `elastic.resizeCooldownSeconds` (300) the job never grows back to it or beyond; after that it may try again.
- **Grow** only from an attempt that is placed and Running (all its pods), never while it is still pending.
- A pod **evicted or preempted** out of an elastic group is remembered the same way when the group restarts
  smaller: the cluster took that size back. A lost node is not: a node that returns is real room.

With the cooldown, a job whose estimate is wrong restarts at most 1 + T / cooldown times in T seconds."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..recovery.failures import EVICTED
from ..state.spec import Elastic
from ..state.status import JobStatus
from ..timefmt import format_time, parse_time
from . import gang
from .capacity import GROW, SHRINK, SizeDecision, decide_size

DEFAULT_COOLDOWN_SECONDS = 300
DEFAULT_UNSCHEDULABLE_GRACE_SECONDS = 30
AUTOSCALER_PREFIX = "cluster-autoscaler.kubernetes.io/"


def real_unschedulable(verdict: gang.Verdict | None, pending_pods: list[dict[str, Any]]) -> bool:
    """A verdict worth shrinking for: `Unschedulable`, with no preemption or scale-up under way for the pods."""
    if verdict is None or verdict.reason == "SchedulingGated":
        return False
    for pod in pending_pods:
        if (pod.get("status") or {}).get("nominatedNodeName"):
            return False  # preemption (or the autoscaler) has picked a node: it is coming
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if any(key.startswith(AUTOSCALER_PREFIX) for key in annotations):
            return False
    return True


def note_unplaced(status: JobStatus, unplaced: bool, now: datetime) -> None:
    """Start (or stop) the current attempt's unplaced clock: `status.unplacedSince` for `unplacedAttempt`."""
    if not unplaced:
        status.pop("unplacedSince", None)
        status.pop("unplacedAttempt", None)
    elif status.get("unplacedAttempt") != status["attempt"] or not status.get("unplacedSince"):
        status["unplacedAttempt"] = status["attempt"]
        status["unplacedSince"] = format_time(now)


def grace_left(status: JobStatus, now: datetime, grace_seconds: float) -> float:
    """Seconds until the current attempt has been unplaced for the grace; the whole grace when its clock has not
    started (it starts in this very pass): a new attempt never inherits an older one's clock."""
    since = parse_time(status.get("unplacedSince"))
    if since is None or status.get("unplacedAttempt") != status["attempt"]:
        return grace_seconds
    return max(0.0, grace_seconds - (now - since).total_seconds())


def cooled_cap(status: JobStatus, now: datetime) -> int | None:
    """The largest size the job may try while the memory of an unplaceable size holds, else None."""
    until = parse_time(status.get("unplaceableUntil"))
    size = status.get("unplaceableSize")
    if until is None or size is None or now >= until:
        return None
    return int(size) - 1


def decide(
    *,
    status: JobStatus,
    desired: int,
    minimum: int,
    fits: int,
    unschedulable: bool,
    running: bool,
    now: datetime,
) -> SizeDecision | None:
    """The resize to make now, or None. `unschedulable`: a real verdict that has lasted its grace; `running`:
    every pod of the current attempt Running."""
    current = status["replicas"]
    cap = cooled_cap(status, now)
    if cap is not None and not unschedulable:
        fits = min(fits, max(cap, current))  # no growing back to the size that did not place, for the cooldown
    decision = decide_size(desired=desired, minimum=minimum, current=current, fits=fits, unschedulable=unschedulable)
    if decision is None:
        return None
    if decision.reason == GROW and not running:
        return None  # the current attempt is not placed and running yet: it has not shown what fits
    return decision


def remember(out: JobStatus, decision: SizeDecision, previous_size: int, now: datetime, cooldown: float) -> None:
    """After a shrink, the size that did not place and until when it is not tried again."""
    if decision.reason == SHRINK:
        remember_unplaced(out, previous_size, now, cooldown)


def remember_unplaced(out: JobStatus, size: int, now: datetime, cooldown: float) -> None:
    """`size` did not place (a shrink, or pod by pod the placement timeout's PlacedToFit): not tried again until
    the cooldown is over."""
    out["unplaceableSize"] = size
    out["unplaceableUntil"] = format_time(now + timedelta(seconds=cooldown))


def size_after_taken_back(kind: str, size: int, previous: int, minimum: int) -> int:
    """The next group's size after a pod was evicted or preempted out of an elastic group of `previous` pods: the
    cluster took that room back, whatever the estimate says (a preemptor that is not nominated yet does not show
    in it), so at least one pod fewer, never below the minimum. Restarting at the same size would meet the
    preemptor and fail again (issue 21's flapping under a tenant that comes and goes)."""
    if kind == EVICTED:
        return max(minimum, min(size, previous - 1))
    return size


def remember_taken_back(out: JobStatus, kind: str, previous_size: int, now: datetime, elastic: Elastic) -> None:
    """A pod evicted or preempted (not a lost node: a node that comes back is real room): the cluster took that
    size back, so the job does not grow into it again for the cooldown. Under a preemptor that comes and goes,
    the job then restarts at most once per cooldown instead of at each of its arrivals."""
    if kind == EVICTED and out["replicas"] < previous_size:
        remember_unplaced(out, previous_size, now, elastic.resize_cooldown_seconds)
