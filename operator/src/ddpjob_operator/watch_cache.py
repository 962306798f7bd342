"""What a reconcile pass reads, kept in memory by watches (kopf indexes), never by a GET or LIST per pass.

kopf lists and then watches every indexed resource, and it runs no handler before every index has been filled by
its first LIST, so a pass never sees a half-filled cache after a restart. Each index keeps only the fields the
planner reads (`slim_*`), which keeps 10,000 pods in a few tens of MB.

The indexes are plain mappings of key -> iterable of values, so the same code reads kopf's `Index` in the operator
and dicts of lists in unit tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from .plan import Observed

Key = tuple[str, str]  # (namespace, job name)
IndexView = Mapping[Any, Iterable[Any]]

SERVICE = "Service"
NETWORK_POLICY = "NetworkPolicy"


def _pick(source: Mapping[str, Any] | None, keys: Iterable[str]) -> dict[str, Any]:
    source = source or {}
    return {k: source[k] for k in keys if k in source and source[k] is not None}


def slim_job(body: Mapping[str, Any]) -> dict[str, Any]:
    """The whole job but managedFields (which the planner never reads and which can be large)."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": meta,
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


def slim_pod(body: Mapping[str, Any]) -> dict[str, Any]:
    """The pod fields the planner, the failure classifier and the progress scraper read."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    containers = [_pick(c, ("name", "ports")) for c in spec.get("containers") or []]
    container_statuses = [
        {"name": cs.get("name"), "state": {"terminated": cs["state"]["terminated"]}}
        if (cs.get("state") or {}).get("terminated")
        else {"name": cs.get("name")}
        for cs in status.get("containerStatuses") or []
    ]
    conditions = [
        _pick(c, ("type", "status", "reason", "message"))
        for c in status.get("conditions") or []
        if c.get("type") in ("DisruptionTarget", "PodScheduled")
    ]
    return {
        "metadata": _pick(
            meta,
            (
                "name",
                "namespace",
                "uid",
                "labels",
                "ownerReferences",
                "deletionTimestamp",
                "creationTimestamp",
                "finalizers",
                "resourceVersion",
            ),
        ),
        "spec": {**_pick(spec, ("nodeName",)), "containers": containers},
        "status": {
            **_pick(status, ("phase", "reason", "message", "podIP")),
            "conditions": conditions,
            "containerStatuses": container_statuses,
        },
    }


def slim_node(body: Mapping[str, Any]) -> dict[str, Any]:
    """A node's name and Ready condition: all the failure policy asks of a node."""
    ready = [
        _pick(c, ("type", "status", "lastTransitionTime"))
        for c in (body.get("status") or {}).get("conditions") or []
        if c.get("type") == "Ready"
    ]
    return {"metadata": {"name": (body.get("metadata") or {}).get("name")}, "status": {"conditions": ready}}


def child_entry(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {"kind": kind, "name": meta.get("name"), "uid": meta.get("uid")}


def controlled_by(pod: Mapping[str, Any], uid: str) -> bool:
    return any(o.get("uid") == uid and o.get("controller") for o in pod["metadata"].get("ownerReferences") or [])


class WatchCache:
    """Read-only view over the four indexes the handlers declare."""

    def __init__(self, jobs: IndexView, pods: IndexView, nodes: IndexView, children: Iterable[IndexView]):
        self.jobs = jobs  # (ns, name) -> [job]
        self.pods = pods  # (ns, job-name label) -> [pod]
        self.nodes = nodes  # node name -> [node]
        self.children = list(children)  # each: (ns, job-name label) -> [Service or NetworkPolicy entry]

    def job(self, key: Key) -> dict[str, Any] | None:
        return _first(self.jobs, key)

    def job_keys(self) -> list[Key]:
        return list(self.jobs)

    def pods_of(self, key: Key) -> list[dict[str, Any]]:
        return list(self.pods[key]) if key in self.pods else []

    def child_kinds(self, key: Key, name: str) -> set[str]:
        return {e["kind"] for index in self.children if key in index for e in index[key] if e.get("name") == name}

    def observe(self, key: Key, now: datetime) -> Observed | None:
        """The job's world as the watches last saw it; None when the job is gone or being deleted."""
        job = self.job(key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return None
        uid = job["metadata"]["uid"]
        # Only pods this job controls: a user's pod that borrows the label is not ours to count or delete.
        pods = [p for p in self.pods_of(key) if controlled_by(p, uid)]
        nodes = {}
        for name in sorted({p["spec"].get("nodeName") for p in pods} - {None, ""}):
            node = _first(self.nodes, name)
            if node is not None:
                nodes[name] = node
        kinds = self.child_kinds(key, key[1])
        wants_policy = bool((job.get("spec") or {}).get("networkPolicy"))
        return Observed(
            job=job,
            pods=pods,
            nodes=nodes,
            service_exists=SERVICE in kinds,
            now=now,
            network_policy_exists=not wants_policy or NETWORK_POLICY in kinds,
        )

    def orphaned_pods(self, key: Key) -> list[dict[str, Any]]:
        """Pods under this job's label that no live job controls: the job was deleted (or re-created under a new
        uid). Their tracking finalizer is released so the garbage collector can remove them."""
        job = self.job(key)
        live_uid = None if job is None or job["metadata"].get("deletionTimestamp") else job["metadata"]["uid"]
        return [p for p in self.pods_of(key) if live_uid is None or not controlled_by(p, live_uid)]


def _first(index: IndexView, key: Any) -> dict[str, Any] | None:
    if key not in index:
        return None
    return next(iter(index[key]), None)
