"""A job's pods sorted by the planner's first step (pure): the current attempt's, one per replica index, and the
earlier ones (older attempts, indices past the size, duplicates, and pods being replaced alone)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import api
from ..state.status import JobStatus


@dataclass(frozen=True)
class SortedPods:
    current: dict[int, dict[str, Any]]
    stale: list[dict[str, Any]]
    by_name: dict[str, dict[str, Any]]


def replaced_uids(status: JobStatus) -> set[str]:
    """Pods replaced alone (replace_pod.py): those being replaced and those replaced that still exist
    (status.retiredUids)."""
    return set((status.get("replacing") or {}).values()) | set(status.get("retiredUids") or [])


def pod_attempt(pod: dict[str, Any]) -> int:
    try:
        return int(pod["metadata"].get("labels", {}).get(api.LABEL_ATTEMPT, "-1"))
    except ValueError:
        return -1


def pod_index(pod: dict[str, Any]) -> int:
    try:
        return int(pod["metadata"].get("labels", {}).get(api.LABEL_REPLICA_INDEX, "-1"))
    except ValueError:
        return -1


def sort_pods(
    pods: list[dict[str, Any]], attempt: int, replicas: int, replaced: set[str] | frozenset[str] = frozenset()
) -> SortedPods:
    """`replaced`: uids of pods of the attempt replaced alone (replace_pod.py): earlier pods, like those of an
    earlier attempt. A pod being deleted never takes an index from a live one: a lost pod still Terminating on a
    NotReady node must not displace its running replacement (the next pass would delete the replacement)."""
    current: dict[int, dict[str, Any]] = {}
    live_first = sorted(pods, key=lambda p: bool(p["metadata"].get("deletionTimestamp")))
    for pod in live_first:
        index = pod_index(pod)
        fresh = pod["metadata"].get("uid") not in replaced
        if pod_attempt(pod) == attempt and 0 <= index < replicas and index not in current and fresh:
            current[index] = pod
    chosen = {id(p) for p in current.values()}
    stale = [p for p in pods if id(p) not in chosen]  # in the order given
    return SortedPods(current, stale, {p["metadata"]["name"]: p for p in pods})
