"""A served PodGroup API is no proof that the scheduler enforces gangs (gang.not_enforced): a gang seen partly bound
for 15 s turns the job to pod-by-pod placement, and says so. Pure."""

from __future__ import annotations

import dataclasses

from job_builders import ago, make_job, make_pod, observe

from ddpjob_operator.planner import PlannerSettings, plan_reconcile

REFUSED = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu"}]


def gang_job(bound: int, unplaced_for: float):
    job = make_job("a").replicas(2).gpus(8)
    job.status(phase="Pending", attempt=0, restarts=0, replicas=2, desiredReplicas=2, sizeText="2/2",
               launchedAttempt=0, placement="Gang", worldSize=16, observedGeneration=1, conditions=[],
               unplacedAttempt=0, unplacedSince=ago(unplaced_for))
    pods = []
    for index in range(2):
        if index < bound:
            pods.append(make_pod("a", index).build())
        else:
            waiting = make_pod("a", index).pending().build()
            waiting["status"]["conditions"] = REFUSED
            pods.append(waiting)
    return dataclasses.replace(observe(job.build(), pods), gang=True)


def test_a_gang_partly_bound_for_15_s_is_not_enforced_and_the_job_says_pod_by_pod():
    plan = plan_reconcile(gang_job(bound=1, unplaced_for=20), PlannerSettings())
    assert plan.status["placement"] == "PodByPod"
    assert plan.gang_not_enforced and "does not enforce gang scheduling" in plan.gang_not_enforced
    assert [(e.type, e.reason) for e in plan.events if e.reason == "GangNotEnforced"] == [
        ("Warning", "GangNotEnforced")]


def test_before_15_s_it_waits_to_judge():
    plan = plan_reconcile(gang_job(bound=1, unplaced_for=5), PlannerSettings())
    assert plan.gang_not_enforced is None
    assert (plan.status or {}).get("placement", "Gang") == "Gang"
    assert plan.requeue_after is not None and plan.requeue_after <= 10


def test_a_whole_gang_waiting_is_what_gang_scheduling_does():
    plan = plan_reconcile(gang_job(bound=0, unplaced_for=600), PlannerSettings())
    assert plan.gang_not_enforced is None
    assert (plan.status or {}).get("placement", "Gang") == "Gang"
