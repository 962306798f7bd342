"""When a pod of an earlier attempt that is still Terminating may be force-deleted (pure).

A force-delete removes the pod object at once, whatever its containers are doing. On a node whose kubelet is
alive but slow (an NFS unmount, a stuck runtime) or merely unreachable, those containers may still run: hold the
GPUs the scheduler now hands to the new attempt, or write the checkpoint the new attempt is reading. Kubernetes
itself force-deletes such pods only once an admin says the node is gone (non-graceful node shutdown). So:

- the pod never reached a node, or its Node object is gone: nothing can still run it; force-delete;
- its node carries the `node.kubernetes.io/out-of-service` taint (the admin's word): force-delete;
- its node is NotReady: force-delete once it has been NotReady for `unreachable_force_delete_seconds`
  (default 300 s, the default eviction wait of an unreachable node's pods in Kubernetes);
- its node is Ready: never. Past `terminating_grace_seconds` beyond its deadline the pod is reported stuck
  (condition OldPodsTerminating, a Warning event, a metric) for a human to look at the kubelet.

The cost is recovery time after a node loss: the new attempt starts once the old pods are gone. An admin who
knows the node is down shortens it by tainting the node out-of-service, as the Kubernetes docs describe."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..state import conditions as c
from ..state import owner_refs
from ..state.plan import Plan
from ..state.status import JobStatus
from ..timefmt import parse_time
from .failures import node_ready

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
STUCK_CONDITION = "OldPodsTerminating"


@dataclass(frozen=True)
class Verdict:
    force: bool  # force-delete now
    stuck: bool  # past its grace on a node whose kubelet should have confirmed it: report it
    wait: float | None  # seconds until the verdict may change
    why: str


def out_of_service(node: dict[str, Any]) -> bool:
    return any(t.get("key") == OUT_OF_SERVICE_TAINT for t in (node.get("spec") or {}).get("taints") or [])


# PlannerSettings.unreachable_force_delete_seconds' default (the operator's --unreachable-force-delete-seconds).
DEFAULT_UNREACHABLE_FORCE_DELETE_SECONDS = 300.0


def force_delete_rule(
    pod: dict[str, Any], node: dict[str, Any] | None, now: datetime, unreachable_force_delete_seconds: float
) -> tuple[bool | None, float, str]:
    """Whether nothing can still run the pod's containers, so a force-delete is safe (the module's rule):
    (True, 0, why) now; (False, seconds left, why) on a NotReady node, not yet; (None, 0, "") on a Ready node, never.
    Also the rule for the job's Lighthouse (replica_groups.plan_lighthouse)."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        return True, 0.0, "it was never placed on a node"
    if node is None:
        return True, 0.0, f"its node {node_name} no longer exists"
    if out_of_service(node):
        return True, 0.0, f"its node {node_name} is tainted {OUT_OF_SERVICE_TAINT}"
    ready, since = node_ready(node)
    if ready:
        return None, 0.0, ""
    down = (now - since).total_seconds() if since is not None else unreachable_force_delete_seconds
    left = unreachable_force_delete_seconds - down
    if left <= 0:
        return True, 0.0, f"its node {node_name} has been NotReady for {down:.0f}s"
    why = f"its node {node_name} is NotReady; force-deleted after {unreachable_force_delete_seconds:g}s NotReady"
    return False, left, why


def judge_terminating(
    pod: dict[str, Any],
    node: dict[str, Any] | None,
    now: datetime,
    terminating_grace_seconds: float,
    unreachable_force_delete_seconds: float,
) -> Verdict:
    """The verdict for a pod that has a deletionTimestamp (its deadline to be gone)."""
    force, left, why = force_delete_rule(pod, node, now, unreachable_force_delete_seconds)
    if force:
        return Verdict(True, False, None, why)
    deadline = parse_time(pod["metadata"].get("deletionTimestamp")) or now
    overdue = (now - deadline).total_seconds() - terminating_grace_seconds
    if force is False:  # NotReady, not for long enough yet
        return Verdict(False, overdue >= 0, left if overdue >= 0 else min(left, -overdue), why)
    if overdue >= 0:
        node_name = (pod.get("spec") or {}).get("nodeName")
        why = f"its node {node_name} is Ready but has not confirmed the deletion; check the kubelet there"
        return Verdict(False, True, None, why)
    return Verdict(False, False, -overdue, "")


def report_stuck(now: datetime, status: JobStatus, stuck: list[str], plan: Plan) -> None:
    """Old pods the operator will not force-delete: condition OldPodsTerminating, said (event, metric) once per
    change of the report."""
    conditions = status.get("conditions") or []
    if not stuck:
        message = "no pod of an earlier attempt is stuck Terminating"
        status["conditions"] = c.clear_condition(conditions, STUCK_CONDITION, "Gone", message, now)
        return
    message = "; ".join(stuck)
    shown = c.find_condition(conditions, STUCK_CONDITION)
    if shown is None or shown.get("status") != "True" or shown.get("message") != message:
        plan.event("Warning", "PodsStuckTerminating", message)
        plan.observe("pods_stuck_terminating", len(stuck))
    status["conditions"] = c.set_condition(conditions, STUCK_CONDITION, "True", "StuckTerminating", message, now)


def plan_stale(
    now: datetime,
    nodes: dict[str, dict[str, Any]],
    stale: list[dict[str, Any]],
    terminating_grace_seconds: float,
    unreachable_force_delete_seconds: float,
    status: JobStatus,
    plan: Plan,
) -> None:
    """Pods of earlier attempts: free their tracking finalizers, delete them, force-delete only when safe, and
    report the ones stuck where it is not."""
    stuck = []
    for pod in stale:
        name = pod["metadata"]["name"]
        if owner_refs.tracked(pod["metadata"].get("finalizers")):
            plan.release_pods.append(name)
        if not pod["metadata"].get("deletionTimestamp"):
            plan.delete_pods.append(name)
            continue
        node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        verdict = judge_terminating(pod, node, now, terminating_grace_seconds, unreachable_force_delete_seconds)
        if verdict.force:
            plan.force_delete_pods.append(name)
        if verdict.stuck:
            stuck.append(f"pod {name} is still Terminating: {verdict.why}")
        if verdict.wait is not None:
            plan.requeue(verdict.wait)
    report_stuck(now, status, stuck, plan)
