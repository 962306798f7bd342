"""All-or-nothing placement with Kubernetes' own gang scheduling (v1.36 alpha: `scheduling.k8s.io/v1alpha2`
PodGroup, feature gates GenericWorkload and GangScheduling).

One PodGroup per attempt, named `<job>-<attempt>`, owned by the job: an attempt has a fixed size, a PodGroup's
`minCount` and a pod's `schedulingGroup` are immutable, and every attempt has new pods anyway. Its minCount is the
attempt's size, so the scheduler binds all of the attempt's pods or none.

On a cluster that does not serve the API (or with --gang-scheduling=off) pods are placed one by one, as before,
and the operator says so once at start and in each job's status (`placement`). Where the API is served but the
scheduler does not gang-schedule, the first attempt that shows it turns new attempts pod by pod too
(gang_discovery.py). A pod template that names its own
`schedulerName` (Volcano, scheduler-plugins) gets no PodGroup: that scheduler does its own grouping."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import api

log = logging.getLogger("ddpjob.gang")

GROUP = "scheduling.k8s.io"
VERSION = "v1alpha2"
PLURAL = "podgroups"
KIND = "PodGroup"
SCHEDULED = "PodGroupScheduled"
DEFAULT_SCHEDULER = "default-scheduler"

GANG = "Gang"  # status.placement values
POD_BY_POD = "PodByPod"
OWN_SCHEDULER = "OwnScheduler"


def podgroup_name(job: str, attempt: int) -> str:
    return f"{job}-{attempt}"


def placement_of(template: Mapping[str, Any], gang_enabled: bool) -> str:
    """How the job's attempts are placed. A template that names its node (spec.nodeName) bypasses the scheduler:
    no scheduler would ever write a verdict on its PodGroup, which gang discovery (gang_discovery.py) would take as
    the whole cluster's scheduler not gang-scheduling. So such a job gets no PodGroup and says PodByPod."""
    spec = template.get("spec") or {}
    scheduler = spec.get("schedulerName")
    if scheduler and scheduler != DEFAULT_SCHEDULER:
        return OWN_SCHEDULER
    if spec.get("nodeName"):
        return POD_BY_POD
    return GANG if gang_enabled else POD_BY_POD


def build_podgroup(owner: dict[str, Any], labels: dict[str, str], namespace: str, name: str, size: int, attempt: int):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, api.LABEL_ATTEMPT: str(attempt)},
            "ownerReferences": [owner],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
    }


@dataclass(frozen=True)
class Verdict:
    scheduled: bool | None  # None: the scheduler has not said yet
    reason: str = ""
    message: str = ""


def verdict(podgroup: Mapping[str, Any] | None) -> Verdict:
    """The scheduler's word on a PodGroup, from its PodGroupScheduled condition."""
    for cond in ((podgroup or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == SCHEDULED:
            return Verdict(cond.get("status") == "True", cond.get("reason") or "", cond.get("message") or "")
    return Verdict(None)


def slim_podgroup(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    conditions = [
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in (body.get("status") or {}).get("conditions") or []
        if c.get("type") == SCHEDULED
    ]
    return {
        "metadata": {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "labels": dict(meta.get("labels") or {}),
            "ownerReferences": list(meta.get("ownerReferences") or []),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": dict(body.get("spec") or {}),
        "status": {"conditions": conditions},
    }
