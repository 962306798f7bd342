"""The planner's Kueue step (decisions in kueue.py): hold a job that Kueue governs, pod-less, until its Workload is
admitted; then at most the admitted count, placed as the admission says; keep the Workload's PodsReady. Pure."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from ..state import conditions as c
from ..state.attempt_status import drop_restart_clock, sized, start_no_sooner
from ..state.plan import Observed, Plan
from ..state.spec import JobSpec
from ..state.status import JobStatus
from ..workers.builders import JobRef, build_worker_pod, owner_reference
from . import kueue, queue_label

NORMAL, WARNING = "Normal", "Warning"


@dataclass(frozen=True)
class Admitted:
    """The step's decision, for the rest of the pass: Kueue's admission (None where Kueue does not govern the job),
    and how many pods the job may have now: the cluster's room (Observed.capacity) capped at the admitted count."""

    admission: kueue.Admission | None
    capacity: int | None


def admit(
    obs: Observed, ref: JobRef, spec: JobSpec, status: JobStatus, current: bool, plan: Plan
) -> tuple[JobStatus | None, Admitted]:
    """Kueue governs the job (kueue.py): no pods until its Workload is admitted, then at most the admitted count.
    Returns the held status, or None and what was admitted."""
    ungoverned = Admitted(admission=None, capacity=obs.capacity)
    if obs.kueue is None:
        return None, ungoverned
    governed = queue_label.governance(obs.job, status, obs.pods, obs.kueue.workloads)
    if queue_label.note(status, governed, obs.now):
        plan.event(WARNING, queue_label.HELD, governed.held or "")
    if not governed.queue:  # not governed (now): a Workload left from a removed label goes
        plan.delete_workloads = [
            w["metadata"]["name"] for w in obs.kueue.workloads if not w["metadata"].get("deletionTimestamp")
        ]
        status.pop("queue", None)
        return None, ungoverned
    template = build_worker_pod(ref, spec, index=0, attempt=0, restarts=0, size=spec.replicas)
    decision = kueue.decide(
        job=obs.job,
        queue=governed.queue,
        view=obs.kueue,
        owner=owner_reference(ref),
        template=template,
        replicas=spec.replicas,
        min_replicas=spec.elastic.min_replicas if spec.elastic else None,
        pods=obs.pods,
        now=obs.now,
    )
    plan.create_workload, plan.delete_workloads, plan.workload_write, plan.workload_active = (
        decision.create,
        decision.delete,
        decision.write,
        decision.active,
    )
    if decision.hold is not None:
        return _queued(obs, status, current, plan, decision.hold, governed.queue), ungoverned
    admission = decision.admission
    assert admission is not None
    if status.get("launchedAttempt") != status["attempt"] and status["replicas"] != admission.count:
        sized(status, spec, admission.count)
    message = f"admitted by ClusterQueue {admission.cluster_queue} at {admission.count} pods"
    status["queue"] = governed.queue
    queued_before = c.find_condition(status.get("conditions") or [], kueue.QUEUED)
    if queued_before is None or queued_before.get("status") == "True":
        plan.event(NORMAL, kueue.ADMITTED_REASON, message)
    status["conditions"] = c.set_condition(
        status.get("conditions") or [], kueue.QUEUED, "False", kueue.ADMITTED_REASON, message, obs.now
    )
    # Elastic growth never goes past what Kueue admitted.
    capacity = admission.count if obs.capacity is None else min(obs.capacity, admission.count)
    return None, Admitted(admission=admission, capacity=capacity)


def _queued(obs: Observed, status: JobStatus, current: bool, plan: Plan, hold: kueue.Hold, queue: str) -> JobStatus:
    """Waiting for admission, or evicted: a group of this attempt is stopped (SIGTERM, so it checkpoints) by
    moving to a new attempt, as a suspension does. Never a failure: the restart budget is untouched."""
    out = status
    if current or status.get("launchedAttempt") == status["attempt"]:
        out = copy.deepcopy(status)
        out["attempt"] = status["attempt"] + 1
        out.pop("startTime", None)
        drop_restart_clock(out)
        start_no_sooner(out, obs.now)
        plan.event(
            hold.event_type,
            "Evicted" if hold.event_type == WARNING else kueue.QUEUED,
            f"{hold.message}; stopping the pods of attempt {status['attempt']}",
        )
        plan.requeue(0)
    before = c.find_condition(status.get("conditions") or [], kueue.QUEUED)
    if (before is None or before.get("status") != "True") and not current:
        plan.event(NORMAL, kueue.QUEUED, hold.message)
    if (out.get("phase"), out.get("reason")) != (c.PENDING, hold.reason):
        out = c.enter_phase(out, c.PENDING, hold.reason, hold.message, obs.now)
    out["queue"] = queue
    out["conditions"] = c.set_condition(
        out.get("conditions") or [], kueue.QUEUED, "True", hold.reason, hold.message, obs.now
    )
    out.update({"readyReplicas": 0, "readyText": f"0/{out['replicas']}"})
    return out


def suspended(obs: Observed, plan: Plan) -> None:
    """A suspended job gives its quota back (kueue.suspended): its Workload is deactivated, then released."""
    if obs.kueue is None:
        return
    decision = kueue.suspended(obs.kueue.workloads, obs.pods, obs.now)
    plan.workload_write, plan.workload_active = decision.write, decision.active


def pods_ready(obs: Observed, admitted: Admitted, status: JobStatus, plan: Plan) -> None:
    """Tell Kueue's waitForPodsReady whether the admitted group runs."""
    if obs.kueue is None or admitted.admission is None or plan.workload_write is not None:
        return
    workloads = [w for w in obs.kueue.workloads if kueue.admission_of(w, obs.kueue.flavors) is not None]
    if workloads:
        plan.workload_write = kueue.pods_ready(workloads[0], status.get("phase") == c.RUNNING, obs.now)


def finished(obs: Observed, status: JobStatus, plan: Plan) -> None:
    """The job ended: its Workload is Finished, so Kueue gives the quota to the next job."""
    if obs.kueue is None:
        return
    ended = c.find_condition(status.get("conditions") or [], status["phase"])
    message = ended["message"] if ended is not None and ended.get("message") else f"job {status['phase']}"
    plan.workload_write = kueue.finished(obs.kueue.workloads, status["phase"] == c.SUCCEEDED, message, obs.now)
