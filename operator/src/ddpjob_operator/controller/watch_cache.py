"""What a reconcile pass reads, kept in memory by watches (kopf indexes), never by a GET or LIST per pass.

kopf lists and then watches every indexed resource, and it runs no handler before every index has been filled by
its first LIST, so a pass never sees a half-filled cache after a restart. Each index keeps only the fields the
planner reads (`slim_*`), which keeps 10,000 pods in a few tens of MB.

The indexes are plain mappings of key -> iterable of values, so the same code reads kopf's `Index` in the operator
and dicts of lists in unit tests."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from .. import api
from ..admission import kueue
from ..placement import gang_discovery
from ..placement.capacity import (
    NodeRoom,
    Requests,
    count_in,
    free_room,
    pod_requests,
    slim_allocatable,
    template_problem,
    usable,
)
from ..placement.resize_policy import AUTOSCALER_PREFIX
from ..recovery import replica_groups
from ..state import owner_refs
from ..state.plan import Observed, View
from ..state.spec import parse_spec

log = logging.getLogger("ddpjob.gang")

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
        {"name": cs.get("name"), "ready": bool(cs.get("ready")), "state": {"terminated": cs["state"]["terminated"]}}
        if (cs.get("state") or {}).get("terminated")
        else {"name": cs.get("name"), "ready": bool(cs.get("ready"))}
        for cs in status.get("containerStatuses") or []
    ]
    conditions = [
        _pick(c, ("type", "status", "reason", "message"))
        for c in status.get("conditions") or []
        if c.get("type") == "DisruptionTarget"
    ] + [
        _pick(c, ("type", "status", "reason", "message", "lastTransitionTime"))  # when bound: gang_discovery.py
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled"
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
                "deletionGracePeriodSeconds",
                "creationTimestamp",
                "finalizers",
                "resourceVersion",
            ),
        )
        | _guard_annotations(meta),
        "spec": {**_pick(spec, ("nodeName",)), "containers": containers},
        "status": {
            # nominatedNodeName: a preemption under way is not a final Unschedulable (resize_policy.py)
            **_pick(status, ("phase", "reason", "message", "podIP", "nominatedNodeName")),
            "conditions": conditions,
            "containerStatuses": container_statuses,
        },
    }


def _guard_annotations(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The only annotations a pass reads: the cluster autoscaler's (a scale-up under way for the pod), for the
    elastic shrink guard. The rest (often large) stay out of the cache."""
    kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(AUTOSCALER_PREFIX)}
    return {"annotations": kept} if kept else {}


def slim_node(body: Mapping[str, Any]) -> dict[str, Any]:
    """A node's name and Ready condition (all the failure policy asks of a node), and what the capacity estimate
    reads: allocatable resources, cordon and taints."""
    status = body.get("status") or {}
    spec = body.get("spec") or {}
    ready = [
        _pick(c, ("type", "status", "lastTransitionTime"))
        for c in status.get("conditions") or []
        if c.get("type") == "Ready"
    ]
    return {
        "metadata": {
            "name": (body.get("metadata") or {}).get("name"),
            "labels": dict((body.get("metadata") or {}).get("labels") or {}),
        },
        "spec": {"unschedulable": bool(spec.get("unschedulable")), "taints": list(spec.get("taints") or [])},
        "status": {"conditions": ready, "allocatable": dict(status.get("allocatable") or {})},
    }


def held_on(body: Mapping[str, Any]) -> str | None:
    """The node whose room a pod holds: the one it is bound to or, not bound yet, the one the scheduler nominated
    it for (a preemption under way: its victims' room is the preemptor's, as the scheduler's nominator counts it).
    None for a finished pod or one with neither."""
    status = body.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    return (body.get("spec") or {}).get("nodeName") or status.get("nominatedNodeName") or None


def bound_pod(body: Mapping[str, Any]) -> tuple[str, Requests] | None:
    """(uid, requests) of any pod that holds room on a node (held_on). None otherwise."""
    if held_on(body) is None:
        return None
    return (body.get("metadata") or {}).get("uid") or "", pod_requests(body.get("spec") or {})


def priority_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the cache keeps of a PriorityClass: its value and whether it is the cluster's default."""
    return {"value": int(body.get("value") or 0), "globalDefault": bool(body.get("globalDefault"))}


def node_room(node: Mapping[str, Any]) -> NodeRoom:
    ready = any(c.get("status") == "True" for c in node["status"].get("conditions") or [])
    return NodeRoom(
        name=node["metadata"]["name"],
        ready=ready,
        unschedulable=bool(node.get("spec", {}).get("unschedulable")),
        taints=tuple(node.get("spec", {}).get("taints") or ()),
        allocatable=slim_allocatable(node["status"].get("allocatable")),
        labels=node["metadata"].get("labels") or {},
    )


def worker_request(job_spec: Mapping[str, Any]) -> tuple[Requests, list[dict[str, Any]], dict[str, str]] | None:
    """What one worker pod of this job asks the scheduler for, the taints it tolerates and its nodeSelector. None
    when its template is one the planner cannot read (capacity.template_problem: the planner fails the job)."""
    if template_problem(job_spec.get("template")) is not None:
        return None
    spec = parse_spec(dict(job_spec))
    pod_spec = (spec.template.get("spec") or {}) if spec.template else {}
    try:
        request = pod_requests(pod_spec)
    except (TypeError, ValueError):
        return None
    if spec.gpus_per_replica is not None:
        request[api.GPU_RESOURCE] = slim_allocatable({"g": str(spec.gpus_per_replica)})["g"]
    tolerations = list(pod_spec.get("tolerations") or [])
    # Clusters with the ExtendedResourceToleration admission plugin (GPU clusters usually) add a toleration for
    # each extended resource a pod requests, so nodes tainted for that resource take it.
    tolerations += [{"key": name, "operator": "Exists"} for name, value in request.items() if "/" in name and value > 0]
    return request, tolerations, dict(pod_spec.get("nodeSelector") or {})


def child_entry(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    owner = owner_refs.controller_uid(meta.get("ownerReferences"))
    return {"kind": kind, "name": meta.get("name"), "uid": meta.get("uid"), "owner": owner}


def namespace_terminating(body: Mapping[str, Any]) -> bool:
    return (
        bool((body.get("metadata") or {}).get("deletionTimestamp"))
        or (body.get("status") or {}).get("phase") == "Terminating"
    )


# A namespace the API server called terminating (403 on a create) is taken as such this long, until the namespace
# watch shows it: the watch decides after that (a namespace re-created under the same name is a new one).
LEARNT_TERMINATING_SECONDS = 60.0


def controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    return owner_refs.controlled_by(obj["metadata"].get("ownerReferences"), uid)


class WatchCache:
    """Read-only view over the four indexes the handlers declare."""

    def __init__(
        self,
        jobs: IndexView,
        pods: IndexView,
        nodes: IndexView,
        children: Iterable[IndexView],
        bound_pods: IndexView | None = None,
        podgroups: IndexView | None = None,
        namespaces: IndexView | None = None,
        kueue: tuple[IndexView, IndexView] | None = None,
        priorities: IndexView | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.jobs = jobs  # (ns, name) -> [job]
        self.pods = pods  # (ns, job-name label) -> [pod]
        self.nodes = nodes  # node name -> [node]
        self.children = list(children)  # each: (ns, job-name label) -> [Service or NetworkPolicy entry]
        self.bound_pods = bound_pods if bound_pods is not None else {}  # node name -> [(uid, requests)]
        self.podgroups = podgroups  # (ns, job-name label) -> [PodGroup]; None: gang scheduling is off
        self.namespaces = namespaces if namespaces is not None else {}  # name -> [terminating?]
        # (ns, job-name label) -> [Workload], flavor name -> [spec]; None: no Kueue
        self.kueue = kueue
        self.priorities = priorities if priorities is not None else {}  # PriorityClass name -> [priority_entry]
        self._room_cache: tuple[tuple, list[NodeRoom], dict[str, Requests], list[Any]] | None = None
        self._per_node: dict[int, tuple[Any, tuple, NodeRoom, Requests]] = {}  # id(node) -> its room (_rooms)
        self.clock = clock
        self.learnt_terminating: dict[str, float] = {}  # namespace -> when the API server said so
        # The scheduler's latest word on gangs, for the whole cluster (gang_discovery.py): None until it has said.
        self.gang_evidence: gang_discovery.Evidence | None = None

    def learn_terminating(self, namespace: str) -> None:
        """The API server refused a create because the namespace is being deleted: believe it before the
        namespace watch says so."""
        self.learnt_terminating[namespace] = self.clock()

    def terminating(self, namespace: str) -> bool:
        """The namespace is being deleted: its jobs are going, and nothing of theirs may be created."""
        if any(_values(self.namespaces, namespace)):
            return True
        learnt = self.learnt_terminating.get(namespace)
        if learnt is None:
            return False
        if self.clock() - learnt < LEARNT_TERMINATING_SECONDS:
            return True
        del self.learnt_terminating[namespace]
        return False

    def _fingerprint(self) -> tuple:
        """What the room depends on, cheaply: which node objects and which bound-pod entries the indexes hold
        (kopf stores a new object on each event of a node or a pod; the room cache keeps the ones it used alive,
        so an id is not reused while it is compared)."""
        return (
            tuple(id(node) for name in self.nodes for node in self.nodes[name]),
            tuple(id(entry) for name in self.bound_pods for entry in self.bound_pods[name]),
        )

    def _rooms(self) -> tuple[list[NodeRoom], dict[str, Requests]]:
        """Every node's room, and its allocatable minus its bound pods' requests. Nothing is recomputed while no
        node or bound pod changed; after a change only the nodes whose object or bound pods changed are parsed
        and summed again (at 1,000 nodes and 10,000 pods, recomputing all took ~20 ms). Keyed by the indexes'
        content itself, so a pass never reads a room older than the cache it runs on."""
        fingerprint = self._fingerprint()
        if self._room_cache is not None and self._room_cache[0] == fingerprint:
            return self._room_cache[1], self._room_cache[2]
        per_node: dict[int, tuple[Any, tuple, NodeRoom, Requests]] = {}
        nodes: list[NodeRoom] = []
        free: dict[str, Requests] = {}
        for name in self.nodes:
            held = tuple(self.bound_pods[name]) if name in self.bound_pods else ()
            for node in self.nodes[name]:
                entry = self._per_node.get(id(node))
                if (
                    entry is None
                    or entry[0] is not node
                    or len(entry[1]) != len(held)
                    or any(a is not b for a, b in zip(entry[1], held, strict=True))
                ):
                    room = node_room(node)
                    used = [(room.name, uid, req) for uid, req in held]
                    entry = (node, held, room, free_room([room], used, set())[room.name])
                per_node[id(node)] = entry
                nodes.append(entry[2])
                free[entry[2].name] = entry[3]
        self._per_node = per_node
        # Every bound-pod entry is kept alive too (those of nodes not in the cache as well): their ids are in the
        # fingerprint.
        self._room_cache = (fingerprint, nodes, free, [tuple(self.bound_pods[name]) for name in self.bound_pods])
        return nodes, free

    def capacity(self, job: Mapping[str, Any], own: set[str]) -> int | None:
        """Pods of this elastic job's shape the nodes hold now, counting its own pods' room; None for a rigid job."""
        spec = job.get("spec") or {}
        wanted = worker_request(spec) if spec.get("elastic") else None
        if wanted is None:
            return None  # rigid, or a template the planner fails (its resources do not parse)
        request, tolerations, selector = wanted
        nodes, free_all = self._rooms()
        names = usable(nodes, tolerations, selector)
        free = {name: dict(room) for name, room in free_all.items() if name in names}
        for name in list(free):  # the job's own pods' room comes back to it (a restart at another size frees it)
            for uid, req in self.bound_pods.get(name, ()):
                if uid in own:
                    for r, v in req.items():
                        free[name][r] = free[name].get(r, Decimal(0)) + v
        return count_in(free, request, self.reserved(exclude=job["metadata"].get("uid")))

    def reserved(self, exclude: str | None = None) -> list[tuple[Requests, int]]:
        """(request, pods) of every other job's current attempt that is decided but not all bound yet: a
        restart, resize or new job in flight holds its room before the scheduler has placed it."""
        out = []
        for key in self.jobs:
            job = self.job(key)
            if job is None or job["metadata"].get("uid") == exclude:
                continue
            status = job.get("status") or {}
            if status.get("phase") not in ("Pending", "Restarting") or "attempt" not in status:
                continue
            attempt = str(status["attempt"])
            placed = sum(
                1
                for p in self.pods_of(key)
                if p["metadata"].get("labels", {}).get(api.LABEL_ATTEMPT) == attempt
                and (p.get("spec") or {}).get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
            )
            missing = int(status.get("replicas", 0)) - placed
            wanted = worker_request(job.get("spec") or {}) if missing > 0 else None
            if wanted is not None:
                out.append((wanted[0], missing))
        return out

    def job(self, key: Key) -> dict[str, Any] | None:
        """The job of this name. Two objects can share a key for a moment (a job deleted and re-created under its
        name, the old one's DELETED event not seen yet): only the newest can exist on the server."""
        jobs = _values(self.jobs, key)
        if len(jobs) <= 1:
            return jobs[0] if jobs else None
        return max(jobs, key=lambda j: (j["metadata"].get("creationTimestamp") or "", _version(j)))

    def job_keys(self) -> list[Key]:
        return list(self.jobs)

    def pods_of(self, key: Key) -> list[dict[str, Any]]:
        return list(self.pods[key]) if key in self.pods else []

    def child_kinds(self, key: Key, name: str, owner: str | None = None) -> set[str]:
        """Kinds of the children named `name` under this job's label (only those `owner` controls, if given)."""
        return {
            e["kind"]
            for index in self.children
            if key in index
            for e in index[key]
            if e.get("name") == name and (owner is None or e.get("owner") == owner)
        }

    def _controlled(self, key: Key, job: dict[str, Any]) -> tuple[list[dict], list[dict], list[dict], list[str]]:
        """(pods, foreign pods, podgroups, foreign podgroup names) under the job's label. Only what this job
        controls is its own: a user's pod that borrows the label is not ours to count or delete. The others under
        the label (an earlier job's of the same name, mostly) are "foreign": the planner frees the ones that carry
        our tracking finalizer and waits for the names it needs."""
        uid = job["metadata"]["uid"]
        pods: list[dict[str, Any]] = []
        foreign: list[dict[str, Any]] = []
        for pod in self.pods_of(key):
            (pods if controlled_by(pod, uid) else foreign).append(pod)
        podgroups: list[dict[str, Any]] = []
        foreign_podgroups: list[str] = []
        if self.podgroups is not None and key in self.podgroups:
            for group in self.podgroups[key]:
                if controlled_by(group, uid):
                    podgroups.append(group)
                else:
                    foreign_podgroups.append(group["metadata"]["name"])
        return pods, foreign, podgroups, foreign_podgroups

    def learn_gang(self, key: Key, now: datetime) -> None:
        """Read the job's current gang for the scheduler's word (gang_discovery.py) into the cluster's evidence.
        The one write of the cache outside its watch handlers, done as its own step of a reconcile pass (before
        observe), never by a read."""
        job = self.job(key)
        if self.podgroups is None or job is None or job["metadata"].get("deletionTimestamp"):
            return
        pods, _, podgroups, _ = self._controlled(key, job)
        attempt = str((job.get("status") or {}).get("attempt", ""))
        group = next((g for g in podgroups if g["metadata"].get("labels", {}).get(api.LABEL_ATTEMPT) == attempt), None)
        current = [p for p in pods if p["metadata"].get("labels", {}).get(api.LABEL_ATTEMPT) == attempt]
        found = gang_discovery.evidence(group, current, now)
        if found is None:
            return
        previous = self.gang_evidence
        if not found.enforced and (previous is None or previous.enforced):
            log.warning("%s", found.message)
        elif found.enforced and previous is not None and not previous.enforced:
            log.info("the scheduler gang-schedules again (a PodGroup has its verdict): gangs for new attempts")
        self.gang_evidence = found

    def gang_not_enforced(self) -> str | None:
        """The message saying the scheduler does not gang-schedule, if that is the cluster's latest evidence."""
        evidence = self.gang_evidence
        return (
            evidence.message if self.podgroups is not None and evidence is not None and not evidence.enforced else None
        )

    def observe(self, key: Key, now: datetime) -> Observed | None:
        """The job's world as the watches last saw it; None when the job is gone or being deleted. A read only:
        it changes nothing in the cache (learn_gang is the pass's step that does)."""
        job = self.job(key)
        if job is None or job["metadata"].get("deletionTimestamp") or self.terminating(key[0]):
            return None
        pods, foreign, podgroups, foreign_podgroups = self._controlled(key, job)
        pods, lighthouses = replica_groups.split(pods)
        nodes = {}
        for name in sorted({p["spec"].get("nodeName") for p in pods + lighthouses} - {None, ""}):
            node = _first(self.nodes, name)
            if node is not None:
                nodes[name] = node
        kinds = self.child_kinds(key, key[1], owner=job["metadata"]["uid"])
        wants_policy = bool((job.get("spec") or {}).get("networkPolicy"))
        not_enforced = self.gang_not_enforced()
        return Observed(
            job=job,
            pods=pods,
            nodes=nodes,
            service_exists=SERVICE in kinds,
            now=now,
            network_policy_exists=not wants_policy or NETWORK_POLICY in kinds,
            gang=self.podgroups is not None and not_enforced is None,
            gang_not_enforced=not_enforced or "",
            podgroups=podgroups,
            foreign_podgroups=foreign_podgroups,
            foreign_pods=foreign,
            capacity=self.capacity(job, {p["metadata"]["uid"] for p in pods}),
            kueue=self.kueue_view(key, job),
            lighthouses=lighthouses,
        )

    def kueue_view(self, key: Key, job: dict[str, Any]) -> View | None:
        """The job's Workloads (those it controls) and what admission reads, if Kueue governs the job or did (its
        label removed: queue_label.py decides whether that is followed yet)."""
        if self.kueue is None:
            return None
        workloads, flavors = self.kueue
        uid = job["metadata"]["uid"]
        mine = [w for w in _values(workloads, key) if controlled_by(w, uid)]
        if kueue.queue_name(job) is None and not mine:
            return None
        return View(
            workloads=mine,
            flavors={name: _first(flavors, name) or {} for name in flavors},
            priorities={name: int((_first(self.priorities, name) or {}).get("value", 0)) for name in self.priorities},
            default_priority_class=next(
                (n for n in self.priorities if (_first(self.priorities, n) or {}).get("globalDefault")), None
            ),
        )

    def priority(self, job: Mapping[str, Any]) -> int:
        """The priority the job's pods get: their PriorityClass's value, else the cluster's globalDefault class's,
        else 0 (as the API server's Priority admission plugin resolves it)."""
        spec = (job.get("spec") or {}).get("template") or {}
        name = (spec.get("spec") or {}).get("priorityClassName")
        if name:
            return int((_first(self.priorities, name) or {}).get("value", 0))
        defaults = [e for n in self.priorities for e in _values(self.priorities, n) if e.get("globalDefault")]
        return int(defaults[0]["value"]) if defaults else 0

    def orphaned_pods(self, key: Key) -> list[dict[str, Any]]:
        """Pods under this job's label that no live job controls: the job was deleted (or re-created under a new
        uid). Their tracking finalizer is released so the garbage collector can remove them."""
        live_uid = self._live_uid(key)
        return [p for p in self.pods_of(key) if live_uid is None or not controlled_by(p, live_uid)]

    def orphaned_podgroups(self, key: Key) -> list[dict[str, Any]]:
        """PodGroups under this job's label that no live job controls (none on a cluster without the gang API)."""
        if self.podgroups is None or key not in self.podgroups:
            return []
        live_uid = self._live_uid(key)
        return [g for g in self.podgroups[key] if live_uid is None or not controlled_by(g, live_uid)]

    def _live_uid(self, key: Key) -> str | None:
        job = self.job(key)
        if job is None or job["metadata"].get("deletionTimestamp") or self.terminating(key[0]):
            return None
        return job["metadata"]["uid"]


def _values(index: IndexView, key: Any) -> list[Any]:
    return list(index[key]) if key in index else []


def _version(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return 0


def _first(index: IndexView, key: Any) -> dict[str, Any] | None:
    if key not in index:
        return None
    return next(iter(index[key]), None)
