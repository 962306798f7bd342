"""Placed pod by pod, never deadlocked (placement_timeout.py), through the planner: no gang, part of the attempt
placed, the rest waiting."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from job_builders import NOW, ago, make_job, make_pod, observe

from ddpjob_operator.placement.placement_timeout import BACKOFF_CAP_SECONDS, backoff
from ddpjob_operator.planner import PlannerSettings, plan_reconcile

UNPLACED = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu"}]


def partly_placed(elastic=None, unplaced_for=121, timeouts=0):
    job = make_job("a").replicas(2).gpus(8)
    if elastic:
        job = job.elastic(*elastic)
    job.status(phase="Pending", attempt=0, restarts=0, replicas=2, desiredReplicas=2, sizeText="2/2",
               launchedAttempt=0, placement="PodByPod", worldSize=16, observedGeneration=1, conditions=[],
               unplacedAttempt=0, unplacedSince=ago(unplaced_for), **({"placementTimeouts": timeouts} if timeouts
                                                                      else {}))
    waiting = make_pod("a", 1).pending().build()
    waiting["status"]["conditions"] = UNPLACED
    pods = [make_pod("a", 0).build(), waiting]
    return dataclasses.replace(observe(job.build(), pods), gang=False)


def test_before_the_timeout_it_waits_for_the_rest():
    plan = plan_reconcile(partly_placed(unplaced_for=100), PlannerSettings())
    assert plan.status is None or plan.status["attempt"] == 0
    assert plan.requeue_after == 20


def test_a_rigid_job_releases_its_placed_pods_and_waits_with_a_backoff_spending_nothing():
    plan = plan_reconcile(partly_placed(), PlannerSettings())
    s = plan.status
    assert (s["phase"], s["reason"], s["attempt"], s["restarts"], s.get("platformRestarts", 0)) == (
        "Pending", "PlacementTimeout", 1, 0, 0)
    assert s["replicas"] == 2 and s["placementTimeouts"] == 1
    placed = next(c for c in s["conditions"] if c["type"] == "PodsPlaced")
    assert (placed["status"], placed["reason"]) == ("False", "PlacementTimeout")
    assert "only 1 of 2 pods were placed in 120s" in placed["message"]
    assert [e.reason for e in plan.events] == ["PlacementTimeout"]
    delay = (parse(s["nextAttemptTime"]) - NOW).total_seconds()
    assert 10 <= delay <= 12.5
    # The next pass deletes the old attempt's pods: the placed one holds its GPUs no longer.
    later = plan_reconcile(dataclasses.replace(partly_placed(), job={**partly_placed().job, "status": s}),
                           PlannerSettings())
    assert sorted(later.delete_pods) == ["a-worker-0", "a-worker-1"]


def parse(text):
    from ddpjob_operator.timefmt import parse_time
    return parse_time(text)


def test_an_elastic_job_continues_at_the_placed_count():
    s = plan_reconcile(partly_placed(elastic=(1, 2)), PlannerSettings()).status
    assert (s["phase"], s["reason"], s["replicas"], s["attempt"], s["restarts"]) == (
        "Restarting", "PlacedToFit", 1, 1, 0)


def test_the_size_that_did_not_place_is_not_grown_back_into_for_the_cooldown():
    """The estimate promised 2 and the scheduler placed 1: once the job runs at 1, an estimate that still says 2
    fit must not grow it back (a 2 -> 1 -> 2 loop, a group restart each time) until the cooldown is over."""
    s = plan_reconcile(partly_placed(elastic=(1, 2)), PlannerSettings()).status
    assert s["unplaceableSize"] == 2
    assert (parse(s["unplaceableUntil"]) - NOW).total_seconds() == 300
    job = make_job("a").replicas(2).gpus(8).elastic(1, 2).build()
    job["status"] = {**s, "phase": "Running", "reason": "AllPodsRunning", "launchedAttempt": s["attempt"]}
    job["status"].pop("unplacedSince", None)
    running = [make_pod("a", 0, attempt=s["attempt"]).build()]
    for later, grows in ((timedelta(seconds=299), False), (timedelta(seconds=301), True)):
        obs = dataclasses.replace(observe(job, running, now=NOW + later), gang=False, capacity=2)
        out = plan_reconcile(obs, PlannerSettings()).status
        assert ((out or {}).get("reason") == "GrewToFit") is grows, (later, out and out.get("reason"))


def test_an_elastic_job_below_its_minimum_is_released_like_a_rigid_one():
    s = plan_reconcile(partly_placed(elastic=(2, 2)), PlannerSettings()).status
    assert (s["reason"], s["replicas"]) == ("PlacementTimeout", 2)


@pytest.mark.parametrize("streak, low, high", [(1, 10, 12.5), (2, 20, 25), (3, 40, 50), (10, 300, 375)])
def test_the_backoff_doubles_with_the_streak_and_its_jitter_is_stable_per_job(streak, low, high):
    assert low <= backoff("uid-1", streak) <= high
    assert backoff("uid-1", streak) == backoff("uid-1", streak)
    assert backoff("uid-1", 10) <= BACKOFF_CAP_SECONDS * 1.25


def test_jobs_blocking_each_other_do_not_retry_in_lockstep():
    assert len({backoff(f"uid-{i}", 1) for i in range(10)}) > 5


def test_a_gang_placed_job_is_never_timed_out():
    obs = partly_placed()
    obs.job["status"]["placement"] = "Gang"
    plan = plan_reconcile(dataclasses.replace(obs, gang=True), PlannerSettings())
    assert plan.status is None or plan.status.get("reason") != "PlacementTimeout"
