"""A NotReady node's grace (pure): how long the planner waits before a pod on a node that stopped reporting counts
as lost (`node_lost_grace_seconds`, failures.node_lost), and what waits with it.

While a pod's node is inside its grace its loss may be the root cause of everything else the pass sees: its peers
fail first (their connections reset the moment it goes), and under InPlace the survivors' agents count restarts
that are that loss's. So the planner looks again when the grace ends, and until then neither blames a peer's
exit (failure_class) nor takes in restarts (in_place.take_in): the replacement decision absorbs them
(replace_pod)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..state.plan import Observed, Plan
from ..timefmt import parse_time
from .failures import node_ready


def grace_left(obs: Observed, grace_seconds: float, pod: dict[str, Any]) -> float | None:
    """Seconds left of the grace of the pod's NotReady node; None when its node is Ready, gone, down since before
    the pod was made, or past its grace."""
    node = pod.get("spec", {}).get("nodeName")
    if node and node in obs.nodes:
        ready, since = node_ready(obs.nodes[node])
        created = parse_time(pod["metadata"].get("creationTimestamp"))
        if not ready and since is not None and not (created is not None and since < created):
            left = grace_seconds - (obs.now - since).total_seconds()
            return left if left > 0 else None
    return None


def requeue_for_grace(obs: Observed, grace_seconds: float, pod: dict[str, Any], plan: Plan) -> bool:
    """Look again when the pod's NotReady node's grace ends; True when there is such a node."""
    left = grace_left(obs, grace_seconds, pod)
    if left is not None:
        plan.requeue(left)
    return left is not None


def any_in_grace(obs: Observed, grace_seconds: float, pods: Iterable[dict[str, Any]]) -> bool:
    return any(grace_left(obs, grace_seconds, pod) is not None for pod in pods)
