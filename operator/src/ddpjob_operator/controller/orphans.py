"""What a pass does for a job that is gone or being deleted (watch_cache.observe gave no Observed). Pure.

Its pods' tracking finalizers go: nothing is left to count, and the garbage collector removes the pods.

In a namespace being deleted the job's pods and PodGroups are deleted too, at once. The namespace controller
first looks 5 s after the deletion began, deletes the pods, and moves on to everything else only once they are
gone. Whenever it finds something it deleted still held by a finalizer (a pod's tracking finalizer, or the
PodGroup's `scheduling.k8s.io/podgroup-protection` while its pods live), it looks again only 8 s later. What is
gone before its first look is what the deletion saves (docs/reliability.md, bench/namespace_deletion.py)."""

from __future__ import annotations

from typing import Any

from ..state.owner_refs import tracked
from ..state.plan import Plan


def plan_release_orphans(
    pods: list[dict[str, Any]], podgroups: list[dict[str, Any]] | None = None, namespace_terminating: bool = False
) -> Plan:
    """`pods` and `podgroups`: those under the job's label that no live job controls. Finalizers are released first:
    a finalizer the namespace controller still finds costs the most."""
    plan = Plan()
    plan.release_pods = [p["metadata"]["name"] for p in pods if tracked(p["metadata"].get("finalizers"))]
    if namespace_terminating:
        plan.delete_podgroups = [g["metadata"]["name"] for g in podgroups or [] if not _deleting(g)]
        plan.delete_pods = [p["metadata"]["name"] for p in pods if not _deleting(p)]
    return plan


def _deleting(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))
