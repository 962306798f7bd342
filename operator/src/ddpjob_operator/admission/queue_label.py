"""Which Kueue queue governs a job: its `kueue.x-k8s.io/queue-name` label, except while the job is admitted or
has pods. Kueue forbids changing the label of its own job kinds then, and so does the chart's
ValidatingAdmissionPolicy (charts/ddpjob-operator/files/queue-label-policy). Where that policy is not
installed the operator holds instead: a label removed from an admitted job does not make it ungoverned (no pod
that no admission covers, and its Workload still finishes), and a label added to a running job does not stop
it. The change takes effect once the job has neither (suspended, or between attempts while queued). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..state import conditions as c
from ..state.status import JobStatus
from . import kueue

HELD = "QueueLabelHeld"  # the job's condition while a label change waits


@dataclass(frozen=True)
class Governance:
    queue: str  # "" : Kueue does not govern the job now
    held: str | None = None  # why the label's value is not followed yet


def _has_quota(workload: Mapping[str, Any]) -> bool:
    return bool((workload.get("status") or {}).get("admission")) and not workload["metadata"].get("deletionTimestamp")


def _has_pods(pods: list[dict[str, Any]]) -> bool:
    return any((p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") for p in pods)


def governance(
    job: Mapping[str, Any], status: Mapping[str, Any], pods: list[dict[str, Any]], workloads: list[dict[str, Any]]
) -> Governance:
    label = kueue.queue_name(job) or ""
    # The queue that governs it now: its Workload's, else the one its status records (none for a job that ran
    # ungoverned).
    live = [w for w in workloads if not w["metadata"].get("deletionTimestamp")]
    recorded = str((live[0].get("spec") or {}).get("queueName") or "") if live else str(status.get("queue") or "")
    if label == recorded or not (_has_pods(pods) or any(_has_quota(w) for w in workloads)):
        return Governance(label)
    before = f"LocalQueue {recorded}" if recorded else "no queue"
    after = f"LocalQueue {label}" if label else "no queue"
    return Governance(
        recorded,
        f"the {kueue.QUEUE_LABEL} label changed from {before} to {after} while the job is admitted or has pods: "
        f"the job stays under {before} until it has neither; restore the label, or suspend the job "
        "(spec.runPolicy.suspend: true) and change it once its pods are gone",
    )


def note(status: JobStatus, governed: Governance, now: datetime) -> bool:
    """Record whether a label change is held in the job's conditions; True when it just started being held."""
    conditions = status.get("conditions") or []
    before = c.find_condition(conditions, HELD)
    if governed.held is not None:
        status["conditions"] = c.set_condition(conditions, HELD, "True", "LabelChangedWhileActive", governed.held, now)
        return before is None or before.get("status") != "True"
    if before is not None and before.get("status") == "True":
        status["conditions"] = c.set_condition(
            conditions, HELD, "False", "LabelFollowed", f"governed by {kueue.QUEUE_LABEL} as labelled", now
        )
    return False
