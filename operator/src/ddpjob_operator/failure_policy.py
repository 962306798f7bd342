"""The failure policy, step 5 of the planner (planner.py): what failed in the current attempt (failed or missing
pods, a lost node past its grace, a trainer that stopped making progress, a lost Lighthouse), and what the job does
about it: nothing while a node is inside its grace or the job's own deletion may be showing, fail once a budget
is spent, replace one pod or one replica group alone (replace_pod.py), or recreate the group from its checkpoint,
at the size the cluster holds for an elastic job, after a backoff that grows with the failures of its class. Pure,
like the planner."""

from __future__ import annotations

import copy

from . import api
from .placement import resize_policy
from .placement.capacity import start_size
from .recovery import (
    failure_class,
    failures,
    in_place,
    node_grace,
    recoveries,
    replace_pod,
    replica_groups,
    worker_0_done,
)
from .recovery.restart_policy import RESTART, RestartBudget, backoff_seconds, decide_each, decide_restart
from .state import conditions as c
from .state.attempt_status import drop_restart_clock, sized, start_no_sooner
from .state.plan import Observed, Plan
from .state.spec import JobSpec
from .state.status import JobStatus, LastFailure
from .timefmt import format_time
from .tracking.no_progress import Liveness, decide_no_progress, show_progress_unknown, trainer_ready
from .workers.pod_sort import SortedPods

WARNING = "Warning"


def current_failures(
    obs: Observed, node_lost_grace_seconds: float, spec: JobSpec, status: JobStatus, pods: SortedPods, plan: Plan
) -> list[failures.Failure]:
    if worker_0_done.finished_at(spec, pods.current, obs.now) is not None:
        return []  # InPlace: worker 0 finished the training; what its peers do now is no failure (worker_0_done.py)
    job = obs.job["metadata"]["name"]
    found = []
    node_going = False  # a pod's node is NotReady, its grace not over: its loss may be the root cause of the rest
    for pod in pods.current.values():
        failure = failures.classify_pod_failure(pod, obs.nodes, obs.now, node_lost_grace_seconds)
        if failure is not None:
            found.append(failure)
        else:
            node_going = node_grace.requeue_for_grace(obs, node_lost_grace_seconds, pod, plan) or node_going
    if found and node_going and all(f.kind != failures.NODE_LOST for f in found):
        # Its peers fail first (their connections reset the moment it goes); decide once the node's grace has
        # said whether it is lost, so the cause is the node (the platform's), not a peer's exit (the trainer's).
        return []
    if status.get("launchedAttempt") == status["attempt"]:
        being_replaced = replace_pod.not_missing(status)
        for index in range(status["replicas"]):
            if index not in pods.current and index not in being_replaced:
                name = api.worker_name(job, index)
                found.append(
                    failures.Failure(
                        pod=name,
                        kind=failures.DELETED,
                        reason="PodMissing",
                        message="the pod no longer exists",
                        at=obs.now,
                    )
                )
    if not found:
        unknown: list[str] = []
        hung, wait = decide_no_progress(
            spec.run_policy.progress_deadline_seconds,
            status.get("phase"),
            status["attempt"],
            status.get("progress"),
            obs.progress,
            obs.progress_since,
            obs.now,
            pod=pods.current[0]["metadata"]["name"] if 0 in pods.current else api.worker_name(job, 0),
            liveness=Liveness(trainer_ready(pods.current.get(0)), obs.scrapes_current),
            unknown=unknown,
        )
        show_progress_unknown(obs.now, status, unknown, plan)
        if hung is not None:
            found.append(hung)
        elif wait is not None:
            plan.requeue(wait)
    return found


def decide(
    obs: Observed,
    node_lost_grace_seconds: float,
    spec: JobSpec,
    status: JobStatus,
    pods: SortedPods,
    plan: Plan,
    capacity: int | None,
) -> JobStatus | None:
    """`capacity`: the pods the job may have now (kueue_step.Admitted), the size of an elastic job's new group."""
    found = current_failures(obs, node_lost_grace_seconds, spec, status, pods, plan)
    # A lost Lighthouse (or one ended, for groups that do not reconnect) has no worker to replace: recreated.
    found += replica_groups.lighthouse_failures(obs, spec, status, node_lost_grace_seconds)
    if not node_grace.any_in_grace(obs, node_lost_grace_seconds, pods.current.values()):
        # Nothing is taken in while a node is inside its grace (node_grace.py). A pass that found a lost pod takes
        # in only what ended pods' records say, not worker 0's scrape: those restarts may be that loss's too.
        in_place.take_in(obs, spec, status, plan, [f.in_place_restarts for f in found], scraped=not found)
    if not found:
        spent = in_place.budget_spent(obs, spec, status)
        return None if spent is None else fail_with(obs, status, plan, *spent)
    settling = failures.deletion_settling(found, obs.now, obs.owners_live)
    if settling is None and not spec.fault_tolerance.torchft:  # a replica group's exit is its own cause
        settling = failures.peer_symptoms_settling(found, pods.current.values(), obs.now)
    if settling is not None:
        # The job's or the namespace's own deletion may be about to show, or the pod whose rank died first is
        # about to end: decide nothing yet.
        plan.requeue(settling)
        return status
    cause = failures.root_cause(found)
    kind = failure_class.class_of(cause)
    counts, was_reset = failure_class.counts_before(status, obs.now, spec.run_policy.healthy_reset_seconds)
    alone = replace_pod.pods_to_replace(spec, found, pods.current, status) is not None
    if spec.fault_tolerance.torchft and not alone and status.get("replacing"):
        # TorchFT: the last groups lost while others are still being replaced leave no live group (a common-mode
        # crash seen over a few passes: one group, then the rest). The group is recreated as one incident: the
        # replacements it cuts short are charged back, and the recreation is charged once, below.
        counts = _refund_replacements(status, counts)
    budget = RestartBudget(limit=spec.run_policy.backoff_limit, used=counts.trainer)
    platform = RestartBudget(limit=spec.run_policy.platform_failure_limit, used=counts.platform)
    decision = decide_restart(spec.restart_policy, cause, budget, platform)
    if decision.action == RESTART and len(found) > 1 and spec.fault_tolerance.torchft and alone:
        # Replica groups replaced one by one each spend their class's budget; groups that all failed together are
        # one group recreation (below), charged once, to the root cause's class.
        decision = decide_each(spec.restart_policy, spec.run_policy, found, counts.trainer, counts.platform) or decision
    last_failure: LastFailure = {
        "pod": cause.pod,
        "kind": cause.kind,
        "failureClass": kind,
        "reason": cause.reason,
        "message": cause.message,
        "time": format_time(cause.at or obs.now),
    }
    if cause.exit_code is not None:
        last_failure["exitCode"] = cause.exit_code
    if decision.action != RESTART:
        out = fail(obs, status, plan, decision.reason, decision.message)
        out["lastFailure"] = last_failure
        return out
    trainer, platform_used = (
        (counts.trainer + 1, counts.platform)
        if kind == failure_class.TRAINER
        else (
            counts.trainer,
            counts.platform + 1,
        )
    )
    size = status["replicas"]
    if spec.elastic is not None:
        size = resize_policy.size_after_taken_back(
            cause.kind, start_size(spec, capacity), status["replicas"], spec.elastic.min_replicas
        )
    message = decision.message
    if was_reset:
        message += f" (budgets reset: the job ran healthy for over {spec.run_policy.healthy_reset_seconds}s)"
    replaced = copy.deepcopy(status)
    replaced.update({"restarts": counts.trainer, "platformRestarts": counts.platform})  # the reset, if any
    if replace_pod.replace_alone(obs.now, spec, found, pods.current, replaced, cause, message, plan, obs.progress):
        replaced["lastFailure"] = last_failure
        return replaced
    recoveries.record(status, obs.now, recoveries.GROUP_RECREATED, cause, message, scraped=obs.progress)
    if size != status["replicas"]:
        message += f"; the new group has {size} pods (room for {capacity}), of {spec.replicas} desired"
    out = sized(c.enter_phase(status, c.RESTARTING, decision.reason, message, obs.now), spec, size)
    if spec.elastic is not None:
        resize_policy.remember_taken_back(out, cause.kind, status["replicas"], obs.now, spec.elastic)
    # The backoff grows with the failures of this class: a preemption storm does not slow a trainer bug's retries
    # down, nor the other way round.
    delay = backoff_seconds(
        spec.run_policy.restart_backoff_seconds, trainer if kind == failure_class.TRAINER else platform_used
    )
    out.update(
        {
            "attempt": status["attempt"] + 1,
            "restarts": trainer,
            "platformRestarts": platform_used,
            "lastFailure": last_failure,
        }
    )
    out.setdefault("restartingSince", format_time(obs.now))
    start_no_sooner(out, obs.now, delay)
    plan.event(WARNING, "Restarting", message)
    plan.observe("group_restarts", reason=decision.reason)
    plan.requeue(0)
    return out


def _refund_replacements(status: JobStatus, counts: failure_class.Counts) -> failure_class.Counts:
    """The counts less what the open replica-group replacements of this attempt charged: one unit of the cause's
    class per pass that replaced groups (replace_pod.replace_alone records one entry per pass)."""
    back = {failure_class.TRAINER: 0, failure_class.PLATFORM: 0}
    for entry in status.get("recoveries") or []:
        if (
            entry.get("how") == recoveries.REPLICA_GROUP_REPLACED
            and entry.get("attempt") == status.get("attempt")
            and recoveries.is_open(entry)
        ):
            klass = (
                failure_class.PLATFORM if entry.get("kind") in failure_class.PLATFORM_KINDS else failure_class.TRAINER
            )
            back[klass] += 1
    return failure_class.Counts(
        max(0, counts.trainer - back[failure_class.TRAINER]), max(0, counts.platform - back[failure_class.PLATFORM])
    )


def fail_with(
    obs: Observed, status: JobStatus, plan: Plan, reason: str, message: str, last_failure: LastFailure
) -> JobStatus:
    out = fail(obs, status, plan, reason, message)
    out["lastFailure"] = last_failure
    return out


def fail(obs: Observed, status: JobStatus, plan: Plan, reason: str, message: str) -> JobStatus:
    out = c.enter_phase(status, c.FAILED, reason, message, obs.now)
    out["completionTime"] = format_time(obs.now)
    drop_restart_clock(out)
    plan.event(WARNING, reason, message)
    recoveries.end_with_job(out, obs.now, plan)
    plan.observe("jobs_failed")
    plan.requeue(0)
    return out
