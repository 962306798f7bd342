"""Admission by Kueue (kueue.x-k8s.io/v1beta2 Workloads), as Kueue's own job integrations do it.

A DDPJob labelled `kueue.x-k8s.io/queue-name` gets one Workload, owned by the job, with one pod set: `count` =
spec.replicas, the worker pod's template (its requests, nodeSelector and priority class), and `minCount` =
elastic.minReplicas for an elastic job (Kueue's partial admission). Until Kueue admits it the job has no pods:
Pending, reason Queued, with Kueue's own message. Admitted, its pods are created at the admitted count with the
ResourceFlavors' node labels and tolerations and any admission check's pod set update. Evicted (preemption,
PodsReadyTimeout, a stopped queue, deactivation), its group is stopped with SIGTERM, so the trainer checkpoints,
and once no pod is left the admission is cleared, as Kueue's jobframework does; that is never a failure. The
operator keeps the Workload's PodsReady condition and sets Finished when the job ends.

Kueue runs with `integrations.externalFrameworks: ["DDPJob.v1alpha1.ddpjob.dev"]` (docs/kueue.md), so it never
takes these pods for its own. Without the label, or on a cluster that does not serve the API, nothing changes.

Everything but `served` is pure: the planner asks `decide`, and the applier writes what it plans."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import api
from ..state import conditions as c
from ..state.plan import ActiveWrite, View, WorkloadWrite

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
WORKLOADS = "workloads"
FLAVORS = "resourceflavors"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
FRAMEWORK = f"{api.KIND}.{api.VERSION}.{api.GROUP}"  # Kueue's integrations.externalFrameworks entry
POD_SET = "workers"
POD_SET_HASH = "ddpjob.dev/pod-set-hash"  # annotation on the Workload (pod_set_hash)

# Workload conditions (Kueue's names)
ADMITTED, QUOTA_RESERVED, EVICTED, FINISHED, PODS_READY, REQUEUED = (
    "Admitted",
    "QuotaReserved",
    "Evicted",
    "Finished",
    "PodsReady",
    "Requeued",
)
# Kueue requeues at once after these evictions (its jobframework sets Requeued True for them).
REQUEUE_AT_ONCE = ("Preempted", "NodeFailures")
# PodsReady reasons (Kueue's): waitForPodsReady times out WaitForStart by default, WaitForRecovery only with
# its recoveryTimeout set.
WAIT_FOR_START, WAIT_FOR_RECOVERY = "WaitForStart", "WaitForRecovery"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"

# The job's own condition and reasons
QUEUED = "Queued"
ADMITTED_REASON = "Admitted"


def slim_workload(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the watch cache keeps of a Workload: identity, the pod set counts, the status."""
    meta = body.get("metadata") or {}
    pod_sets = [{"name": p.get("name"), "count": p.get("count")} for p in (body.get("spec") or {}).get("podSets") or []]
    return {
        "metadata": {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": dict(meta.get("labels") or {}),
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k in KEPT_ANNOTATIONS},
            "ownerReferences": list(meta.get("ownerReferences") or []),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": {
            "podSets": pod_sets,
            "queueName": (body.get("spec") or {}).get("queueName") or "",
            "active": (body.get("spec") or {}).get("active", True) is not False,
        },
        "status": copy.deepcopy(dict(body.get("status") or {})),
    }


def slim_flavor(body: Mapping[str, Any]) -> dict[str, Any]:
    spec = body.get("spec") or {}
    return {"nodeLabels": dict(spec.get("nodeLabels") or {}), "tolerations": list(spec.get("tolerations") or [])}


def queue_name(job: Mapping[str, Any]) -> str | None:
    return (job["metadata"].get("labels") or {}).get(QUEUE_LABEL) or None


@dataclass(frozen=True)
class Admission:
    """Kueue's admission of the job's pod set, as its pods must carry it."""

    count: int
    cluster_queue: str
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hold:
    """No pods now: waiting for admission, or evicted. `stop`: the current group (if any) must go."""

    reason: str
    message: str
    event_type: str = "Normal"


def workload_name(job: str, uid: str, count: int, min_count: int | None, template: Mapping[str, Any]) -> str:
    """One name per job and pod set shape: a new shape (replicas, minimum, template) is a new Workload, as in
    Kueue's jobframework, and the old one is deleted."""
    shape = repr((uid, count, min_count, sorted(_requests(template).items())))
    digest = hashlib.sha256(shape.encode()).hexdigest()[:6]
    return f"ddpjob-{job}"[:240] + f"-{digest}"


def _requests(template: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for container in (template.get("spec") or {}).get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            out[f"{container.get('name')}/{name}"] = str(value)
    return out


def build_workload(
    *,
    job: Mapping[str, Any],
    queue: str,
    owner: dict[str, Any],
    name: str,
    template: dict[str, Any],
    count: int,
    min_count: int | None,
    priorities: Mapping[str, int],
    default_priority_class: str | None = None,
) -> dict[str, Any]:
    meta = job["metadata"]
    pod_spec = copy.deepcopy(template.get("spec") or {})
    # The pod set describes what each pod will ask for and where it may go; per-pod identity stays out of it.
    for key in ("hostname", "subdomain", "schedulingGroup"):
        pod_spec.pop(key, None)
    pod_set: dict[str, Any] = {
        "name": POD_SET,
        "count": count,
        "template": {
            "metadata": {"labels": dict((template.get("metadata") or {}).get("labels") or {})},
            "spec": pod_spec,
        },
    }
    if min_count is not None and min_count < count:
        pod_set["minCount"] = min_count
    spec: dict[str, Any] = {"queueName": queue, "podSets": [pod_set]}
    # As the API server resolves the pods' priority, and Kueue its own jobs': the template's class, else the
    # cluster's globalDefault one.
    priority_class = pod_spec.get("priorityClassName") or default_priority_class
    if priority_class:
        spec["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": priority_class}
        spec["priority"] = int(priorities.get(priority_class, 0))
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {api.LABEL_JOB_NAME: meta["name"], api.LABEL_MANAGED_BY: api.MANAGED_BY},
            "annotations": {POD_SET_HASH: pod_set_hash(spec)},
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


# What Kueue admits on, of a pod set's pod spec: what each pod asks for and where it may go. Everything else the
# operator puts in a pod (the rendezvous env, PET_*, DDPJOB_*, TORCHFT_*, the probe, the shm volume) changes with
# operator releases and with legal edits of a running job (spec.rendezvous, backoffLimit): hashed, it stopped
# every admitted job under Kueue at an upgrade.
ADMITTED_ON = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "topologySpreadConstraints")


def admission_shape(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Workload's spec Kueue admits on: the queue, the priority, and per pod set its name, counts,
    Kueue's own template annotations (its topology requests), the containers' resources and the
    placement fields of the pod spec."""
    sets = []
    for pod_set in spec.get("podSets") or []:
        template = pod_set.get("template") or {}
        pod_spec = template.get("spec") or {}
        containers = [
            {"name": c.get("name"), "resources": c.get("resources") or {}}
            for kind in ("initContainers", "containers")
            for c in pod_spec.get(kind) or []
        ]
        sets.append(
            {
                "name": pod_set.get("name"),
                "count": pod_set.get("count"),
                "minCount": pod_set.get("minCount"),
                # Kueue's own pod set annotations (its topology requests); the operator's labels are no request.
                "annotations": {
                    k: v
                    for k, v in ((template.get("metadata") or {}).get("annotations") or {}).items()
                    if k.startswith(f"{GROUP}/")
                },
                "containers": containers,
                **{k: pod_spec.get(k) for k in ADMITTED_ON if pod_spec.get(k) is not None},
            }
        )
    return {
        "queueName": spec.get("queueName"),
        "priorityClassRef": spec.get("priorityClassRef"),
        "priority": spec.get("priority"),
        "podSets": sets,
    }


def pod_set_hash(spec: Mapping[str, Any]) -> str:
    """The hash of what Kueue admits on (admission_shape). The name hashes only counts and requests; a template
    edited while suspended (node selector, tolerations, priority) changes this hash, and the Workload is replaced
    (`decide`); a change of anything else (an operator upgrade, a rendezvous timeout edited) does not."""
    shape = admission_shape(spec)
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _current_pod_set(workload: Mapping[str, Any], want: str) -> bool:
    """Whether an existing Workload asks for what the job asks for now. Its annotation says so where it holds this
    release's hash; a Workload made by an earlier release (another hash, or none) is judged by its own spec, so an
    upgrade replaces none that asks for the same."""
    have = ((workload.get("metadata") or {}).get("annotations") or {}).get(POD_SET_HASH)
    return have == want or pod_set_hash(workload.get("spec") or {}) == want


def _condition(workload: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((x for x in conditions if x.get("type") == ctype), None)


def _true(workload: Mapping[str, Any], ctype: str) -> bool:
    cond = _condition(workload, ctype)
    return cond is not None and cond.get("status") == "True"


def evicted(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    cond = _condition(workload, EVICTED)
    return cond if cond is not None and cond.get("status") == "True" else None


def admission_of(workload: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]) -> Admission | None:
    """The admission of an admitted, not evicted Workload; None otherwise."""
    status = workload.get("status") or {}
    admission = status.get("admission")
    if not _true(workload, ADMITTED) or evicted(workload) is not None or not admission:
        return None
    assignment = next(
        (a for a in admission.get("podSetAssignments") or [] if a.get("name") == POD_SET),
        None,
    )
    if assignment is None:
        return None
    count = assignment.get("count")
    if count is None:  # Kueue leaves it out when the whole pod set is admitted
        count = next(p["count"] for p in workload["spec"]["podSets"] if p.get("name") == POD_SET)
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    for flavor_name in sorted(set((assignment.get("flavors") or {}).values())):
        flavor = flavors.get(flavor_name) or {}
        node_selector.update(flavor.get("nodeLabels") or {})
        tolerations += [t for t in flavor.get("tolerations") or [] if t not in tolerations]
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for check in status.get("admissionChecks") or []:
        for update in check.get("podSetUpdates") or []:
            if update.get("name") != POD_SET:
                continue
            labels.update(update.get("labels") or {})
            annotations.update(update.get("annotations") or {})
            node_selector.update(update.get("nodeSelector") or {})
            tolerations += [t for t in update.get("tolerations") or [] if t not in tolerations]
    return Admission(
        count=int(count),
        cluster_queue=str(admission.get("clusterQueue") or ""),
        node_selector=node_selector,
        tolerations=tolerations,
        labels=labels,
        annotations=annotations,
    )


def apply_admission(pod: dict[str, Any], admission: Admission) -> dict[str, Any]:
    """The worker pod as the admission places it: flavor node labels and tolerations added to the template's."""
    meta, spec = pod["metadata"], pod["spec"]
    meta["labels"] = {**admission.labels, **meta.get("labels", {})}
    meta["annotations"] = {**meta.get("annotations", {}), **admission.annotations}
    if admission.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **admission.node_selector}
    if admission.tolerations:
        existing = spec.get("tolerations") or []
        spec["tolerations"] = existing + [t for t in admission.tolerations if t not in existing]
    return pod


def waiting_message(queue: str, workload: Mapping[str, Any] | None) -> str:
    """Kueue's own words for why the Workload waits, or where it waits."""
    if workload is not None:
        cond = _condition(workload, QUOTA_RESERVED) or _condition(workload, ADMITTED)
        if cond is not None and cond.get("status") != "True" and cond.get("message"):
            return f"queued in LocalQueue {queue}: {cond['message']}"
    return f"queued in LocalQueue {queue}: waiting for Kueue to admit the job"


def _active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _set(conditions: list[dict[str, Any]], ctype: str, status: str, reason: str, message: str, now: datetime):
    """Kueue's conditions carry an observedGeneration; otherwise as conditions.set_condition."""
    return c.set_condition(conditions, ctype, status, reason, message, now)  # type: ignore[arg-type]


def clear_admission(
    workload: Mapping[str, Any], now: datetime, reason: str | None = None, message: str | None = None
) -> WorkloadWrite:
    """After an eviction (or a suspension), once the group is gone: give the quota back; Kueue queues the Workload
    again, unless it is inactive."""
    ev = evicted(workload) or {}
    reason = reason or str(ev.get("reason") or "")
    message = message or str(ev.get("message") or "evicted")
    status = copy.deepcopy(dict(workload.get("status") or {}))
    conditions = status.get("conditions") or []
    conditions = _set(conditions, REQUEUED, "True" if reason in REQUEUE_AT_ONCE else "False", reason, message, now)
    conditions = _set(conditions, QUOTA_RESERVED, "False", "Pending", message, now)
    if c.find_condition(conditions, ADMITTED) is not None:
        conditions = _set(conditions, ADMITTED, "False", "NoReservation", "The workload has no reservation", now)
    if c.find_condition(conditions, PODS_READY) is not None:
        conditions = _set(conditions, PODS_READY, "False", WAIT_FOR_START, NOT_READY_MESSAGE, now)
    status["conditions"] = conditions
    status["admission"] = None
    return WorkloadWrite(workload["metadata"]["name"], workload["metadata"].get("resourceVersion", ""), status)


def set_condition(
    workload: Mapping[str, Any], ctype: str, status_: str, reason: str, message: str, now: datetime
) -> WorkloadWrite | None:
    """One condition of the Workload, if it differs; None when it already says so."""
    cond = _condition(workload, ctype)
    if cond is not None and (cond.get("status"), cond.get("reason")) == (status_, reason):
        return None
    status = copy.deepcopy(dict(workload.get("status") or {}))
    status["conditions"] = _set(status.get("conditions") or [], ctype, status_, reason, message, now)
    return WorkloadWrite(workload["metadata"]["name"], workload["metadata"].get("resourceVersion", ""), status)


@dataclass
class Decision:
    """What admission allows this pass: `hold` (no pods) or `admission` (pods at its count), and the Workload
    writes that go with it."""

    hold: Hold | None = None
    admission: Admission | None = None
    create: dict[str, Any] | None = None
    delete: list[str] = field(default_factory=list)
    write: WorkloadWrite | None = None
    active: ActiveWrite | None = None  # set the Workload's spec.active (a suspension, a resume)


# The operator deactivates a suspended job's Workload and marks it so. A Workload that Kueue deactivated
# (waitForPodsReady's requeuing limit) or an admin did carries no mark, and the operator never undoes that.
DEACTIVATED_BY = "ddpjob.dev/deactivated-by-operator"
KEPT_ANNOTATIONS = (POD_SET_HASH, DEACTIVATED_BY)  # the watch cache keeps only the annotations a pass reads


def is_active(workload: Mapping[str, Any]) -> bool:
    return (workload.get("spec") or {}).get("active", True) is not False


def deactivated_by_us(workload: Mapping[str, Any]) -> bool:
    return ((workload.get("metadata") or {}).get("annotations") or {}).get(DEACTIVATED_BY) == "true"


def active_write(workload: Mapping[str, Any], active: bool) -> ActiveWrite:
    meta = workload["metadata"]
    return ActiveWrite(meta["name"], active, str(meta.get("resourceVersion", "")))


def inactive_message(workload: Mapping[str, Any], queue: str) -> str:
    """Why an inactive Workload the operator did not deactivate stays so, and what the user can do."""
    evicted_condition: Mapping[str, Any] = next(
        (c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") == "Evicted"), {}
    )
    why = evicted_condition.get("message") or evicted_condition.get("reason") or "by Kueue or an administrator"
    return (
        f"Workload {workload['metadata']['name']} in LocalQueue {queue} was deactivated ({why}); the operator does "
        "not undo that: set its spec.active to true to queue the job again"
    )


# Kueue's reason for a deactivated Workload: its Requeued=False must say it, so that Kueue requeues the Workload
# when it is activated again (Requeued True, "Reactivated").
DEACTIVATED = "Deactivated"


def suspended(workloads: list[dict[str, Any]], pods: list[dict[str, Any]], now: datetime) -> Decision:
    """The job is suspended (spec.runPolicy.suspend): it gives its quota back, as Kueue's integrations do. Its
    Workload is deactivated (spec.active false), so Kueue neither admits it again nor counts it, and once no pod
    is left its admission is cleared. Resuming activates it again, and the job queues as a new one would."""
    out = Decision()
    for workload in workloads:
        if workload["metadata"].get("deletionTimestamp"):
            continue
        if is_active(workload):
            out.active = active_write(workload, False)
        elif (workload.get("status") or {}).get("admission") and not any(_active(p) for p in pods):
            out.write = clear_admission(workload, now, DEACTIVATED, "the DDPJob is suspended")
        return out
    return out


def decide(
    *,
    job: Mapping[str, Any],
    queue: str,
    view: View,
    owner: dict[str, Any],
    template: dict[str, Any],
    replicas: int,
    min_replicas: int | None,
    pods: list[dict[str, Any]],
    now: datetime,
) -> Decision:
    meta = job["metadata"]
    want = workload_name(meta["name"], meta["uid"], replicas, min_replicas, template)
    built = build_workload(
        job=job,
        queue=queue,
        owner=owner,
        name=want,
        template=template,
        count=replicas,
        min_count=min_replicas,
        priorities=view.priorities,
        default_priority_class=view.default_priority_class,
    )
    out = Decision()
    workload = None
    for w in view.workloads:
        current = (w.get("spec") or {}).get("queueName", queue) == queue and _current_pod_set(
            w, built["metadata"]["annotations"][POD_SET_HASH]
        )
        if w["metadata"]["name"] == want and current:
            workload = w
        elif not w["metadata"].get("deletionTimestamp"):
            out.delete.append(w["metadata"]["name"])  # an earlier shape's
    if workload is None:
        out.create = built
        out.hold = Hold(QUEUED, waiting_message(queue, None))
        return out
    if not is_active(workload):
        if deactivated_by_us(workload):  # resumed after a suspension: queued again
            out.active = active_write(workload, True)
            out.hold = Hold(QUEUED, waiting_message(queue, None))
        else:
            # As on an eviction: the pods stop, and once they are gone the quota is given back.
            if not any(_active(p) for p in pods) and (workload.get("status") or {}).get("admission"):
                out.write = clear_admission(workload, now, DEACTIVATED, "its Workload was deactivated")
            out.hold = Hold(QUEUED, inactive_message(workload, queue), "Warning")
        return out
    ev = evicted(workload)
    if ev is not None:
        if not any(_active(p) for p in pods) and (workload.get("status") or {}).get("admission"):
            out.write = clear_admission(workload, now)
        out.hold = Hold(
            QUEUED,
            f"evicted by Kueue ({ev.get('reason') or 'Evicted'}): {ev.get('message') or ''}; "
            f"queued again in LocalQueue {queue}, resuming from its checkpoint once admitted",
            "Warning",
        )
        return out
    admission = admission_of(workload, view.flavors)
    if admission is None:
        out.write = pods_ready(workload, False, now)
        out.hold = Hold(QUEUED, waiting_message(queue, workload))
        return out
    out.admission = admission
    return out


def pods_ready(workload: Mapping[str, Any], running: bool, now: datetime) -> WorkloadWrite | None:
    """The Workload's PodsReady, as Kueue's jobframework writes it and its waitForPodsReady reads it:
    - not admitted (or evicted): False, `WaitForStart`, the only reason whose timeout is on by default;
    - admitted and the whole group runs: True (`Started`, or `Recovered` after `WaitForRecovery`);
    - admitted, not running: `WaitForStart` until it first ran under this admission, `WaitForRecovery` once it
      had (True before), else unchanged.
    An admission after an eviction starts from `WaitForStart` (written while it was not admitted), so a group
    re-admitted onto nodes that cannot run it is timed out and evicted again, never left holding the quota."""
    cond = _condition(workload, PODS_READY)
    if evicted(workload) is not None or not _true(workload, ADMITTED):
        if cond is None or (cond.get("status"), cond.get("reason")) == ("False", WAIT_FOR_START):
            return None
        return set_condition(workload, PODS_READY, "False", WAIT_FOR_START, NOT_READY_MESSAGE, now)
    if running:
        if _true(workload, PODS_READY):
            return None
        reason = "Recovered" if cond is not None and cond.get("reason") == WAIT_FOR_RECOVERY else "Started"
        return set_condition(workload, PODS_READY, "True", reason, "All pods reached readiness", now)
    if cond is None:
        return set_condition(workload, PODS_READY, "False", WAIT_FOR_START, NOT_READY_MESSAGE, now)
    if cond.get("status") == "True":
        return set_condition(workload, PODS_READY, "False", WAIT_FOR_RECOVERY, NOT_READY_MESSAGE, now)
    return None


def finished(workloads: list[dict[str, Any]], succeeded: bool, message: str, now: datetime) -> WorkloadWrite | None:
    """The job ended: its Workload is Finished, so Kueue gives its quota to the next one, or drops it from the
    queue."""
    for workload in workloads:
        if workload["metadata"].get("deletionTimestamp") or _true(workload, FINISHED):
            continue
        reason = "Succeeded" if succeeded else "Failed"
        return set_condition(workload, FINISHED, "True", reason, message, now)
    return None
