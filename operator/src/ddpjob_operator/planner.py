"""The reconcile planner: (job, pods, nodes, now) -> Plan. Pure, and runs its steps in a fixed order (JobSet's):

  1. sort pods (current attempt, earlier attempts) and initialise status;
  2. finish: clean up and expire a terminal job, release its pods' tracking finalizers (and an earlier job's of
     the same name: ownership.py);
  3. delete pods of earlier attempts (force-deleting only when safe: termination.py) and release their tracking
     finalizers;
  4. deadline, suspend/resume, rescale, and admission by Kueue for a job it governs (kueue_step.py);
  5. a refused pod's verdict, the failure policy (failure_policy.py), the success policy, then the
     placement timeout (placement_timeout.py) and an elastic resize (resize_policy.py);
  6. create the headless Service (never adopting another's: ownership.py) and the missing pods;
  7. readiness, phase and progress;
  8. TorchFT's Lighthouse, one pod beside the workers (replica_groups.py).

Destructive actions follow only from state already written: a restart or a suspension first bumps
status.attempt (one status write), and a later pass deletes the pods whose attempt label is older. A pod's
tracking finalizer is released only once the status has moved past it (a newer attempt, or a terminal phase), so
a pod of the current attempt that is deleted at any moment, even while the operator is down, is still there,
Terminating, for the next pass to count. Killing the operator between any two API calls therefore leaves nothing
that the next pass cannot finish, and a pass that runs twice on the same state decides the same thing twice."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from . import api, failure_policy
from .admission import kueue, kueue_step
from .failure_policy import fail
from .placement import gang, gang_discovery, placement_steps, placement_verdict
from .placement.capacity import GROW, SHRINK, start_size, template_problem
from .placement.placement_steps import running as is_running
from .recovery import (
    failures,
    in_place,
    pod_rejection,
    recoveries,
    replace_pod,
    replica_groups,
    termination,
    worker_0_done,
)
from .state import conditions as c
from .state.attempt_status import drop_restart_clock, new_group, sized, start_no_sooner
from .state.owner_refs import tracked
from .state.plan import Observed, Plan
from .state.spec import JobSpec, parse_spec
from .state.status import JobStatus, status_of
from .timefmt import format_time, parse_time
from .tracking import progress_step
from .tracking.no_progress import final_progress
from .tracking.progress import REJOIN_SCRAPE_SECONDS, metrics_url
from .workers import builders, ownership, pod_names
from .workers.builders import JobRef, build_network_policy, build_podgroup, build_service, build_worker_pod
from .workers.pod_sort import SortedPods, replaced_uids, sort_pods

NORMAL, WARNING = "Normal", "Warning"


@dataclass(frozen=True)
class PlannerSettings:
    node_lost_grace_seconds: float = 30.0
    # A pod of an earlier attempt still Terminating this long after its deletion deadline on a Ready node is
    # reported stuck (never force-deleted: its containers may still run)...
    terminating_grace_seconds: float = 60.0
    # ...but on a NotReady node only after it has been NotReady this long, or sooner once the node is tainted
    # out-of-service or gone (termination.py).
    unreachable_force_delete_seconds: float = 300.0
    # After creating an attempt's pods, wait this long for them to run before writing a Pending status: pods that
    # start quickly then cost one status write (straight to Running) instead of two.
    launch_settle_seconds: float = 5.0
    # A Running job with a metrics port is re-planned this often, to take in worker 0's progress.
    progress_interval_seconds: float = 10.0
    # Progress-only status writes back off to at most one per this many seconds (status_writes.py).
    progress_write_max_seconds: float = 60.0


def initial_status(
    job: str, spec: JobSpec, capacity: int | None = None, pods: list[dict[str, Any]] | None = None
) -> JobStatus:
    status: JobStatus = {
        "phase": c.PENDING,
        "conditions": [],
        "attempt": 0,
        "restarts": 0,
        "platformRestarts": 0,
        "selector": api.selector(job),
    }
    recorded = _recorded_size(pods or [], attempt=0)
    return sized(status, spec, recorded if recorded is not None else start_size(spec, capacity))


def _recorded_size(pods: list[dict[str, Any]], attempt: int) -> int | None:
    """The size an attempt's existing pods were created for. The first status is written by the pass that sees
    the first pods (_launched), not the one that creates them: a pass in between must not decide the size again
    from an estimate that has changed since (a PodGroup of the old size under more pods: a gang placed in part,
    Pending for ever)."""
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(api.LABEL_ATTEMPT) == str(attempt) and str(labels.get(api.LABEL_REPLICAS, "")).isdigit():
            return int(labels[api.LABEL_REPLICAS])
    return None


# A cache that shows two pods under one name is between a pod's deletion and its successor's creation: the watch
# delivers each object's events on its own, so the new pod can appear before the old one's DELETED event. Every
# decision by name (delete, release, "missing") would then be ambiguous, and could hit the new pod: wait.
DUPLICATE_NAME_RETRY_SECONDS = 0.2


def plan_reconcile(obs: Observed, settings: PlannerSettings = PlannerSettings()) -> Plan:
    job = obs.job
    meta = job["metadata"]
    ref = JobRef(meta["name"], meta["namespace"], meta["uid"])
    spec = parse_spec(job.get("spec") or {})
    plan = Plan()
    if len({p["metadata"]["name"] for p in obs.pods}) < len(obs.pods):
        plan.requeue(DUPLICATE_NAME_RETRY_SECONDS)
        return plan
    old = status_of(job)
    status = copy.deepcopy(old)
    if "attempt" not in status:
        status = initial_status(ref.name, spec, obs.capacity, obs.pods) | status
        plan.observe("jobs_created")
    status["observedGeneration"] = meta.get("generation", 1)
    status["placement"] = gang.placement_of(spec.template, obs.gang)
    if old.get("placement") == gang.GANG and status["placement"] == gang.POD_BY_POD and obs.gang_not_enforced:
        plan.event("Warning", gang_discovery.NOT_ENFORCED, obs.gang_not_enforced)
    status.setdefault("desiredReplicas", status["replicas"])
    status.setdefault("sizeText", f"{status['replicas']}/{status['desiredReplicas']}")

    status = _plan_steps(obs, settings, ref, spec, status, plan)
    grace = settings.node_lost_grace_seconds
    replica_groups.lighthouse_step(
        obs,
        spec,
        status,
        plan,
        lambda: builders.build_lighthouse_pod(ref, spec),
        grace,
        settings.unreachable_force_delete_seconds,
    )
    if status != old:
        plan.status = status
    return plan


def _plan_steps(
    obs: Observed, settings: PlannerSettings, ref: JobRef, spec: JobSpec, status: JobStatus, plan: Plan
) -> JobStatus:
    attempt = status["attempt"]
    replace_pod.forget_gone(status, obs.pods)
    pods = sort_pods(obs.pods, attempt, status["replicas"], replaced_uids(status))

    blocked_names = ownership.plan_foreign_pods(obs, plan)
    if c.is_terminal(status.get("phase")):
        _finish(obs, spec, status, pods, plan)
        kueue_step.finished(obs, status, plan)
        return status
    termination.plan_stale(
        obs.now,
        obs.nodes,
        pods.stale,
        settings.terminating_grace_seconds,
        settings.unreachable_force_delete_seconds,
        status,
        plan,
    )
    plan.delete_podgroups = [
        g["metadata"]["name"]
        for g in obs.podgroups
        if g["metadata"].get("labels", {}).get(api.LABEL_ATTEMPT) != str(attempt)
        and not g["metadata"].get("deletionTimestamp")
    ]

    problem = template_problem(spec.template)
    if problem is not None:  # refused at apply by the CRD now; a job stored before that rule still carries it
        out = fail(obs, status, plan, pod_rejection.INVALID_REASON, problem)
        out.pop("launchedAttempt", None)
        return out
    for step in (_deadline, _suspend_or_resume, _rescale):
        new_status = step(obs, spec, status, plan)
        if new_status is not None:
            if new_status.get("phase") == c.SUSPENDED:
                kueue_step.suspended(obs, plan)
            return new_status
    if status.get("phase") == c.SUSPENDED:
        kueue_step.suspended(obs, plan)
        return status
    queued, admitted = kueue_step.admit(obs, ref, spec, status, bool(pods.current), plan)
    if queued is not None:
        return queued

    refusal = pod_rejection.current_refusal(obs, status)
    if refusal is not None and pod_rejection.is_invalid(refusal):
        out = fail(obs, status, plan, pod_rejection.INVALID_REASON, pod_rejection.verdict_message(refusal))
        out.pop("launchedAttempt", None)  # its pods were never all created
        return out
    new_status = failure_policy.decide(
        obs, settings.node_lost_grace_seconds, spec, status, pods, plan, admitted.capacity
    )
    if new_status is not None:
        return new_status
    new_status = _success_policy(obs, spec, status, pods, plan)
    if new_status is not None:
        return new_status
    new_status = placement_steps.placement_timeout(obs, spec, status, list(pods.current.values()), plan)
    if new_status is not None:
        return new_status
    new_status = placement_steps.resize_to_capacity(
        obs, spec, status, list(pods.current.values()), plan, admitted.capacity
    )
    if new_status is not None:
        return new_status

    if not obs.service_exists:
        if ownership.service_conflict(obs, status, plan):
            return status
        plan.create_service = build_service(ref, spec)
    if spec.network_policy and not obs.network_policy_exists:
        if ownership.network_policy_conflict(obs, status, plan):
            return status
        plan.create_network_policy = build_network_policy(ref)
    if _create_missing(obs, ref, spec, status, pods, plan, blocked_names, admitted.admission):
        return status
    launched_now = _launched(obs, settings, status, pods, plan)
    _readiness(obs, settings, spec, status, pods, plan, launched_now)
    kueue_step.pods_ready(obs, admitted, status, plan)
    placement_verdict.show(obs, status, list(pods.current.values()), plan)
    return status


def ref_name(obs: Observed) -> str:
    return obs.job["metadata"]["name"]


# --- 2. terminal ----------------------------------------------------------------------------------------------
def _finish(obs: Observed, spec: JobSpec, status: JobStatus, pods: SortedPods, plan: Plan) -> None:
    policy = spec.run_policy.clean_pod_policy
    for pod in obs.pods:
        if tracked(pod["metadata"].get("finalizers")):
            plan.release_pods.append(pod["metadata"]["name"])
        if pod["metadata"].get("deletionTimestamp"):
            continue
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if pod in pods.stale or policy == "All" or (policy == "Running" and not finished):
            plan.delete_pods.append(pod["metadata"]["name"])
    running = sum(1 for p in pods.current.values() if is_running(p))
    status["readyReplicas"] = running
    status["readyText"] = f"{running}/{status['replicas']}"
    ttl = spec.run_policy.ttl_seconds_after_finished
    finished_at = parse_time(status.get("completionTime"))
    if ttl is not None and finished_at is not None:
        left = (finished_at + timedelta(seconds=ttl) - obs.now).total_seconds()
        if left <= 0:
            plan.delete_job = True
        else:
            plan.requeue(left)


# --- 3. earlier attempts --------------------------------------------------------------------------------------
# --- 4. deadline, suspend, rescale ----------------------------------------------------------------------------
def _deadline(obs: Observed, spec: JobSpec, status: JobStatus, plan: Plan) -> JobStatus | None:
    limit = spec.run_policy.active_deadline_seconds
    started = parse_time(status.get("startTime"))
    if not limit or started is None or status.get("phase") == c.SUSPENDED:
        return None
    left = (started + timedelta(seconds=limit) - obs.now).total_seconds()
    if left > 0:
        plan.requeue(left)
        return None
    message = f"job ran longer than activeDeadlineSeconds ({limit}s)"
    return fail(obs, status, plan, "DeadlineExceeded", message)


def _suspend_or_resume(obs: Observed, spec: JobSpec, status: JobStatus, plan: Plan) -> JobStatus | None:
    suspended = status.get("phase") == c.SUSPENDED
    if spec.run_policy.suspend and not suspended:
        # A new attempt number makes every existing pod "earlier", so the next pass deletes them all.
        out = c.enter_phase(status, c.SUSPENDED, "Suspended", "job is suspended; its pods are deleted", obs.now)
        out["attempt"] = status["attempt"] + 1
        sized(out, spec, start_size(spec, obs.capacity))
        out.pop("startTime", None)
        drop_restart_clock(out)
        plan.event(NORMAL, "Suspended", f"suspended; deleting the pods of attempt {status['attempt']}")
        plan.requeue(0)
        return out
    if not spec.run_policy.suspend and suspended:
        out = c.enter_phase(status, c.PENDING, "Resumed", "job resumed", obs.now)
        out = sized(out, spec, start_size(spec, obs.capacity))
        out = {
            **out,
            "conditions": c.set_condition(out["conditions"], c.SUSPENDED, "False", "Resumed", "job resumed", obs.now),
        }
        start_no_sooner(out, obs.now)
        plan.event(NORMAL, "Resumed", f"resumed as attempt {status['attempt']}")
        plan.requeue(0)
        return out
    if suspended and status.get("desiredReplicas") != spec.replicas:
        sized(status, spec, start_size(spec, obs.capacity))
    return None


def _rescale(obs: Observed, spec: JobSpec, status: JobStatus, plan: Plan) -> JobStatus | None:
    """spec.replicas changed: a new attempt at the new desired size (or what fits of it, for an elastic job)."""
    if status.get("phase") == c.SUSPENDED or status.get("desiredReplicas") == spec.replicas:
        return None
    size = start_size(spec, obs.capacity)
    if spec.elastic is not None and size == status["replicas"] and status.get("launchedAttempt") == status["attempt"]:
        # What fits is what runs: a restart at the same size would cost a resume and gain nothing. The new desired
        # size is the resize policy's to reach when room comes.
        status.update({"desiredReplicas": spec.replicas, "sizeText": f"{size}/{spec.replicas}"})
        plan.event(NORMAL, "Rescaled", f"replicas {spec.replicas} desired; {size} fit now: continuing at {size}")
        return None
    message = (
        f"replicas {status['desiredReplicas']} -> {spec.replicas}: restarting the group as attempt "
        f"{status['attempt'] + 1} with {size} pods"
    )
    return new_group(obs, spec, status, plan, size, "Rescaled", message)


# --- 5. failure and success -----------------------------------------------------------------------------------
def _success_policy(obs: Observed, spec: JobSpec, status: JobStatus, pods: SortedPods, plan: Plan) -> JobStatus | None:
    replicas = status["replicas"]
    done = [p for p in pods.current.values() if (p.get("status") or {}).get("phase") == "Succeeded"]
    done_indices = {i for i, p in pods.current.items() if p in done}
    message = f"all {replicas} pods of attempt {status['attempt']} succeeded"
    if len(done) < replicas and not replace_pod.finished_without_replacement(spec, status, done_indices):
        ended_by_worker_0 = worker_0_done.success_message(obs.now, spec, status, pods.current, plan)
        if ended_by_worker_0 is None:
            return None
        message = ended_by_worker_0
    # In-place restarts after the last scrape are only in the pods' termination records.
    in_place.take_in(obs, spec, status, plan, [failures.in_place_restarts_of(p) for p in done])
    out = c.enter_phase(status, c.SUCCEEDED, "Succeeded", message, obs.now)
    out.update({"completionTime": format_time(obs.now), "readyReplicas": 0, "readyText": f"0/{replicas}"})
    final_progress(obs.now, out, pods.current.get(0))
    drop_restart_clock(out)
    plan.event(NORMAL, "Succeeded", message)
    recoveries.end_with_job(out, obs.now, plan)
    plan.observe("jobs_succeeded")
    plan.requeue(0)
    return out


# --- 6. create ------------------------------------------------------------------------------------------------
def _create_missing(
    obs: Observed,
    ref: JobRef,
    spec: JobSpec,
    status: JobStatus,
    pods: SortedPods,
    plan: Plan,
    blocked: set[str],
    admission: kueue.Admission | None,
) -> bool:
    """Plan the missing pods of the current attempt; True when this pass creates (or waits to create) some.
    `blocked`: names still held by a pod that is not this job's and is going away (ownership.py); `admission`:
    Kueue's, which places them (kueue_step.Admitted)."""
    attempt, replicas = status["attempt"], status["replicas"]
    missing = [i for i in range(replicas) if i not in pods.current]
    podgroup = gang.podgroup_name(ref.name, attempt) if status.get("placement") == gang.GANG else None
    if podgroup is not None and podgroup in obs.foreign_podgroups:
        # An earlier job of this name still has a PodGroup of that name (the garbage collector is removing it):
        # pods pointing at it would follow the wrong gang, then wait for ever once it is gone.
        plan.requeue(ownership.WAITING_FOR_OLD_PODS_SECONDS)
        return True
    if not missing:
        pod_rejection.mark_created(obs, status)
        if podgroup is not None and pods.current and not _has_podgroup(obs, podgroup):
            # Deleted under its pods (by someone): they would wait unplaced for ever. The same group again.
            plan.create_podgroup = build_podgroup(ref, podgroup, replicas, attempt)
        return False
    not_before = parse_time(status.get("nextAttemptTime"))
    if not_before is not None and obs.now < not_before:
        plan.requeue((not_before - obs.now).total_seconds())
        return True
    refusal = pod_rejection.current_refusal(obs, status)
    if refusal is not None:
        wait = pod_rejection.plan_retry(obs, status, refusal, plan)
        if wait > 0:
            plan.requeue(wait)
            return True
    names = pod_names.names_when_free(ref.name, attempt, missing, pods.stale, obs.nodes, plan.force_delete_pods)
    if names is None:
        plan.requeue(1.0)  # old pods that may still run go first (their deletion wakes us up)
        return True
    if any(names[index] in blocked for index in missing):
        plan.requeue(ownership.WAITING_FOR_OLD_PODS_SECONDS)  # an earlier job's pods of these names are going
        return True
    if podgroup is not None and not _has_podgroup(obs, podgroup):
        plan.create_podgroup = build_podgroup(ref, podgroup, replicas, attempt)
    host_pod = names[0] if 0 in names else pod_names.host_of(pods.current[0])
    for index in missing:
        pod = build_worker_pod(
            ref,
            spec,
            index=index,
            attempt=attempt,
            restarts=status.get("restarts", 0),
            size=replicas,
            podgroup=podgroup,
            name=names[index],
            host_pod=host_pod,
        )
        plan.create_pods.append(pod if admission is None else kueue.apply_admission(pod, admission))
    # The pass that sees these pods writes the status (and says they were created), so a kill -9 in between
    # loses nothing: their finalizers keep them visible until then.
    plan.defer_status = True
    return True


def _has_podgroup(obs: Observed, name: str) -> bool:
    return any(g["metadata"]["name"] == name and not g["metadata"].get("deletionTimestamp") for g in obs.podgroups)


def _launched(obs: Observed, settings: PlannerSettings, status: JobStatus, pods: SortedPods, plan: Plan) -> bool:
    """Record that every pod of the attempt exists (from now on a missing one is a failure). True when that
    happens in this pass."""
    attempt = status["attempt"]
    if status.get("launchedAttempt") == attempt:
        return False
    current = list(pods.current.values())
    all_running = all(is_running(p) for p in current)
    created = [t for t in (parse_time(p["metadata"].get("creationTimestamp")) for p in current) if t is not None]
    if not all_running and created:
        wait = settings.launch_settle_seconds - (obs.now - max(created)).total_seconds()
        if wait > 0:
            plan.requeue(wait)
            plan.defer_status = True
            return False
    status["launchedAttempt"] = attempt
    status.pop("nextAttemptTime", None)
    status.setdefault("startTime", format_time(min(created) if created else obs.now))
    if not all_running:
        names = ", ".join(sorted((p["metadata"]["name"] for p in current), key=lambda n: (len(n), n)))
        plan.event(NORMAL, "CreatedPods", f"created {len(current)} pods for attempt {attempt}: {names}")
    return True


# --- 7. readiness ---------------------------------------------------------------------------------------------
def _readiness(
    obs: Observed,
    settings: PlannerSettings,
    spec: JobSpec,
    status: JobStatus,
    pods: SortedPods,
    plan: Plan,
    launched_now: bool,
) -> None:
    replicas = status["replicas"]
    running = sum(1 for p in pods.current.values() if is_running(p))
    status.update(
        {"readyReplicas": running, "readyText": f"{running}/{replicas}", "worldSize": replicas * spec.procs_per_pod}
    )
    phase = status.get("phase")
    if running == replicas and phase != c.RUNNING:
        first_time = c.find_condition(status.get("conditions") or [], c.RUNNING) is None
        message = f"all {replicas} pods of attempt {status['attempt']} are running"
        if launched_now:
            message = f"created {replicas} pods for attempt {status['attempt']}; all are running"
        restarting = c.find_condition(status.get("conditions") or [], c.RESTARTING)
        direction = {GROW: "grow", SHRINK: "shrink"}.get(restarting["reason"] if restarting else "")
        status.update(c.enter_phase(status, c.RUNNING, "AllPodsRunning", message, obs.now))
        plan.event(NORMAL, "Running", message)
        created = parse_time(obs.job["metadata"].get("creationTimestamp"))
        if first_time and created is not None:
            plan.observe("time_to_all_running", (obs.now - created).total_seconds())
        since = parse_time(status.pop("restartingSince", None))
        recoveries.close(status, obs.now, plan)
        if since is not None:
            plan.observe("recovery_duration", (obs.now - since).total_seconds())
            if direction is not None:
                plan.observe("resize_duration", (obs.now - since).total_seconds(), direction=direction)
    elif running < replicas and phase == c.RUNNING and not status.get("replacing"):
        status.update(c.enter_phase(status, c.PENDING, "PodsNotRunning", f"{running}/{replicas} pods running", obs.now))
    if status.get("replacing") and phase == c.RUNNING:
        has_metrics = metrics_url(obs) is not None
        if spec.fault_tolerance.torchft and has_metrics:
            plan.requeue(REJOIN_SCRAPE_SECONDS)  # until the replacements are back in worker 0's quorum
        replace_pod.end_when_back(obs, spec, status, pods.current, running, plan, has_metrics)
    if status.get("phase") != c.RUNNING:
        return
    replica_groups.show_degraded(status, spec, running, obs.now)
    progress_step.take_progress(
        obs,
        status,
        plan,
        settings.progress_interval_seconds,
        settings.progress_write_max_seconds,
        spec.run_policy.progress_deadline_seconds,
    )
