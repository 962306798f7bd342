"""Gang placement and capacity-driven elasticity in the planner: which PodGroup and pods a pass creates, what it
says while an attempt cannot be placed, and when an elastic group shrinks or grows."""

from __future__ import annotations

import dataclasses

import pytest
from datetime import timedelta

from ddpjob_operator import api
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.controller.watch_cache import slim_pod

from job_builders import NOW, UID, ago, make_job, make_node, make_pod, observe, running_pods

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60)


def plan_with(job, pods=(), nodes=None, gang=True, podgroups=(), capacity=None, now=NOW):
    built = job.build() if hasattr(job, "build") else job
    obs = dataclasses.replace(
        observe(built, list(pods), nodes, True, now), gang=gang, podgroups=list(podgroups), capacity=capacity
    )
    return plan_reconcile(obs, SETTINGS)


def podgroup(name, attempt, scheduled=None, reason="Unschedulable", message="0/4 nodes are available"):
    conditions = (
        []
        if scheduled is None
        else [
            {
                "type": "PodGroupScheduled",
                "status": "True" if scheduled else "False",
                "reason": reason,
                "message": message,
            }
        ]
    )
    return {
        "metadata": {
            "name": name,
            "uid": f"pg-{attempt}",
            "labels": {api.LABEL_ATTEMPT: str(attempt)},
            "ownerReferences": [{"uid": UID, "controller": True}],
        },
        "spec": {},
        "status": {"conditions": conditions},
    }


def env_of(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def pending_pods(job, n, attempt=0):
    return [make_pod(job, i, attempt).pending().created(60).build() for i in range(n)]


def launched(job):
    """Attempt 0 of the spec's full size, all its pods created, none running yet."""
    n = job.obj["spec"]["replicas"]
    return job.status(
        phase="Pending",
        attempt=0,
        restarts=0,
        launchedAttempt=0,
        replicas=n,
        desiredReplicas=n,
        readyReplicas=0,
        readyText=f"0/{n}",
        placement="Gang",
    )


def test_a_gang_job_creates_its_podgroup_then_pods_that_point_at_it():
    plan = plan_with(make_job("a").replicas(2))
    assert plan.create_podgroup["metadata"]["name"] == "a-0"
    assert plan.create_podgroup["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}
    assert plan.create_podgroup["metadata"]["ownerReferences"][0]["uid"] == UID
    assert [p["spec"]["schedulingGroup"] for p in plan.create_pods] == [{"podGroupName": "a-0"}] * 2
    assert plan.status["placement"] == "Gang"


def test_an_existing_podgroup_is_not_created_again():
    plan = plan_with(make_job("a").replicas(2), podgroups=[podgroup("a-0", 0)])
    assert plan.create_podgroup is None and len(plan.create_pods) == 2


def test_without_the_podgroup_api_pods_are_placed_one_by_one_and_the_status_says_so():
    plan = plan_with(make_job("a").replicas(2), gang=False)
    assert plan.create_podgroup is None
    assert all("schedulingGroup" not in p["spec"] for p in plan.create_pods)
    assert plan.status["placement"] == "PodByPod"


def test_a_template_with_its_own_scheduler_passes_through_without_a_podgroup():
    job = make_job("a").replicas(2)
    job.obj["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    plan = plan_with(job)
    assert plan.create_podgroup is None
    assert [p["spec"].get("schedulerName") for p in plan.create_pods] == ["volcano", "volcano"]
    assert all("schedulingGroup" not in p["spec"] for p in plan.create_pods)
    assert plan.status["placement"] == "OwnScheduler"


def test_a_template_pinned_to_a_node_gets_no_podgroup_so_it_cannot_switch_gangs_off_for_everyone():
    """Its pods bypass the scheduler, which would never write a verdict on a PodGroup of theirs: gang discovery
    would take that silence as the whole cluster's scheduler not gang-scheduling (issue 27, item 9)."""
    job = make_job("a").replicas(2)
    job.obj["spec"]["template"]["spec"]["nodeName"] = "n0"
    plan = plan_with(job)
    assert plan.create_podgroup is None and len(plan.create_pods) == 2
    assert all("schedulingGroup" not in p["spec"] for p in plan.create_pods)
    assert plan.status["placement"] == "PodByPod"


def test_an_unplaceable_gang_is_reported_with_the_schedulers_words_once():
    job = launched(make_job("a").replicas(2))
    group = podgroup("a-0", 0, scheduled=False, message="0/4 nodes are available: 3 Insufficient nvidia.com/gpu")
    plan = plan_with(job, pending_pods("a", 2), podgroups=[group])
    placed = next(c for c in plan.status["conditions"] if c["type"] == "PodsPlaced")
    assert (placed["status"], placed["reason"]) == ("False", "Unschedulable")
    assert "3 Insufficient nvidia.com/gpu" in placed["message"]
    assert plan.status["reason"] == "Unschedulable" and plan.status["phase"] == "Pending"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "Unschedulable")]
    job.status(**plan.status)
    again = plan_with(job, pending_pods("a", 2), podgroups=[group])
    assert again.events == [] and again.status is None
    # On a busy cluster the counts move all the time: no news, no event, no status write (issue 27, item 8).
    busier = podgroup("a-0", 0, scheduled=False, message="0/61 nodes are available: 5 Insufficient nvidia.com/gpu")
    counts_moved = plan_with(job, pending_pods("a", 2), podgroups=[busier])
    assert counts_moved.events == [] and counts_moved.status is None
    # A new kind of reason is news.
    other = podgroup("a-0", 0, scheduled=False, message="0/4 nodes are available: 4 node(s) had untolerated taint")
    changed = plan_with(job, pending_pods("a", 2), podgroups=[other])
    assert [e.reason for e in changed.events] == ["Unschedulable"] and "untolerated" in str(changed.status)


def test_a_gang_without_a_verdict_does_not_hide_its_pods_unschedulable():
    """A scheduler that ignores PodGroups never writes the gang's condition; the pods' own verdict is shown."""
    job = launched(make_job("a").replicas(2))
    pods = pending_pods("a", 2)
    pods[0]["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu"}]
    plan = plan_with(job, pods, podgroups=[podgroup("a-0", 0)])
    placed = next(c for c in plan.status["conditions"] if c["type"] == "PodsPlaced")
    assert (placed["status"], placed["reason"], plan.status["reason"]) == ("False", "Unschedulable", "Unschedulable")
    assert "4 Insufficient nvidia.com/gpu" in placed["message"]
    placed_gang = plan_with(job, pods, podgroups=[podgroup("a-0", 0, scheduled=True)])
    assert placed_gang.status is None or placed_gang.status.get("reason") != "Unschedulable"


def test_podgroups_of_earlier_attempts_are_deleted():
    job = make_job("a").replicas(2).running(attempt=1)
    plan = plan_with(job, running_pods("a", 2, attempt=1), podgroups=[podgroup("a-0", 0), podgroup("a-1", 1)])
    assert plan.delete_podgroups == ["a-0"]


def test_an_elastic_gang_that_cannot_be_placed_shrinks_to_what_fits_without_spending_the_budget():
    job = launched(make_job("a").replicas(4).elastic(2, 4).gpus(8))
    unplaced = [podgroup("a-0", 0, scheduled=False)]
    first = plan_with(job, pending_pods("a", 4), podgroups=unplaced, capacity=3)
    # Not at once: the Unschedulable verdict must last elastic.unschedulableGraceSeconds (30).
    assert (first.status["phase"], first.status["attempt"], first.status["unplacedSince"]) == ("Pending", 0, ago(0))
    assert first.requeue_after == 30
    job.status(**first.status)
    plan = plan_with(job, pending_pods("a", 4), podgroups=unplaced, capacity=3, now=NOW + timedelta(seconds=31))
    s = plan.status
    assert (s["phase"], s["reason"], s["attempt"], s["restarts"]) == ("Restarting", "ShrankToFit", 1, 0)
    # Remembered: 4 did not place; the job does not grow back to it for resizeCooldownSeconds (300).
    assert (s["unplaceableSize"], s["unplaceableUntil"]) == (4, ago(-331))
    assert (s["replicas"], s["desiredReplicas"], s["sizeText"], s["worldSize"]) == (3, 4, "3/4", 24)
    assert [e.reason for e in plan.events] == ["ShrankToFit"]
    job.status(**s)
    later = plan_with(job, [], podgroups=[], capacity=3, now=NOW + timedelta(seconds=33))
    assert later.create_podgroup["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    assert [env_of(p)["PET_NNODES"] for p in later.create_pods] == ["3", "3", "3"]


def test_a_restarted_elastic_group_whose_gang_cannot_be_placed_shrinks_too():
    """A group recreated after a failure (a lost node) stays Restarting until its pods run; when the new gang cannot
    be placed (the lost node's room is gone, anti-affinity the estimate does not see) it must shrink as a pending
    one does. Found on the real nodes: an elastic 1..2 job whose node stopped waited with 2 Pending pods for ever."""
    job = make_job("a").replicas(2).elastic(1, 2).gpus(8)
    job.status(phase="Restarting", attempt=1, restarts=0, launchedAttempt=1, replicas=2, desiredReplicas=2,
               readyReplicas=0, sizeText="2/2", worldSize=16, placement="Gang", observedGeneration=1)
    unplaced = [podgroup("a-1", 1, scheduled=False)]
    first = plan_with(job, pending_pods("a", 2, attempt=1), podgroups=unplaced, capacity=2)
    assert (first.status["unplacedAttempt"], first.status["unplacedSince"]) == (1, ago(0)), first.status
    assert first.requeue_after == 30
    job.status(**first.status)
    plan = plan_with(job, pending_pods("a", 2, attempt=1), podgroups=unplaced, capacity=2,
                     now=NOW + timedelta(seconds=31))
    s = plan.status
    assert (s["phase"], s["reason"], s["attempt"], s["replicas"], s["restarts"]) == (
        "Restarting", "ShrankToFit", 2, 1, 0), s


def three_of_four():
    """An elastic 2..4 job of 8-GPU pods whose attempt 0 runs at 3."""
    return make_job("a").replicas(4).elastic(2, 4).gpus(8).running(replicas=3)


def test_a_group_running_below_its_desired_size_grows_when_room_returns():
    job = three_of_four().status(
        desiredReplicas=4, sizeText="3/4", placement="Gang", worldSize=24, observedGeneration=1
    )
    assert plan_with(job, running_pods("a", 3), capacity=3).status is None, "no room: it stays at 3"
    plan = plan_with(job, running_pods("a", 3), capacity=4)
    s = plan.status
    assert (s["phase"], s["reason"], s["replicas"], s["restarts"], s["attempt"]) == ("Restarting", "GrewToFit", 4, 0, 1)


def test_room_seen_outside_the_jobs_turn_is_reported_not_taken():
    """Only the job whose turn it is at freed room grows (room_wakeups.py); another pass that sees the room says
    so, and the reconciler starts a round in which the waiting jobs look in their order."""
    job = three_of_four().status(
        desiredReplicas=4, sizeText="3/4", placement="Gang", worldSize=24, observedGeneration=1
    ).build()
    obs = dataclasses.replace(observe(job, running_pods("a", 3)), gang=True, capacity=4, may_grow=False)
    plan = plan_reconcile(obs, PlannerSettings())
    assert plan.status is None and plan.grow_blocked


def test_a_rescale_an_elastic_job_cannot_use_now_is_no_restart():
    job = make_job("a").replicas(4).elastic(2, 4).gpus(8).running(replicas=3).status(
        desiredReplicas=3, sizeText="3/3", placement="Gang", worldSize=24, observedGeneration=1).build()
    plan = plan_with(job, running_pods("a", 3), capacity=3)
    s = plan.status
    assert (s["phase"], s["attempt"], s["replicas"], s["sizeText"]) == ("Running", 0, 3, "3/4")
    assert [e.reason for e in plan.events] == ["Rescaled"] and "continuing at 3" in plan.events[0].message


def test_a_lost_node_restarts_an_elastic_group_at_the_size_that_still_fits_and_counts_one_restart():
    job = make_job("a").replicas(3).elastic(2, 3).gpus(8).running()
    pods = [
        make_pod("a", 0).on_node("n0").build(),
        make_pod("a", 1).on_node("n1").build(),
        make_pod("a", 2).on_node("lost").build(),
    ]
    nodes = [make_node("n0"), make_node("n1"), make_node("lost", ready=False, since=60)]
    plan = plan_with(job, pods, nodes=nodes, capacity=2)
    s = plan.status
    assert (s["phase"], s["platformRestarts"], s["replicas"], s["desiredReplicas"], s["sizeText"]) == (
        "Restarting",
        1,  # the platform's failure: backoffLimit is untouched
        2,
        3,
        "2/3",
    )
    assert "2 pods" in plan.events[0].message


def test_a_suspended_elastic_job_is_never_resized():
    job = make_job("a").replicas(4).elastic(2, 4).gpus(8).suspend().running(replicas=3)
    job.status(phase="Suspended", desiredReplicas=4, sizeText="3/4")
    plan = plan_with(job, [], capacity=4)
    assert plan.status is None or plan.status["phase"] == "Suspended"


def test_capacity_that_returns_while_restarting_sizes_the_new_attempt():
    job = three_of_four().status(phase="Restarting", attempt=1, desiredReplicas=4, launchedAttempt=0)
    plan = plan_with(job, [], capacity=4, now=NOW)
    assert plan.status is None or plan.status["replicas"] == 3, "an attempt keeps the size it was decided at"
    assert len(plan.create_pods) == 3
    job.status(phase="Running", attempt=1, launchedAttempt=1)
    grown = plan_with(job, running_pods("a", 3, attempt=1), capacity=4)
    assert grown.status["replicas"] == 4 and grown.status["reason"] == "GrewToFit"


def test_a_new_elastic_job_starts_at_the_size_that_fits():
    plan = plan_with(make_job("a").replicas(4).elastic(2, 4).gpus(8), capacity=3)
    assert (plan.status["replicas"], plan.status["desiredReplicas"], len(plan.create_pods)) == (3, 4, 3)
    assert plan.create_podgroup["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3


def test_the_first_pods_keep_their_size_while_the_first_status_waits_to_be_written():
    """The first status is written by the pass that sees the first pods: a pass in between, with a new estimate,
    must not grow the attempt under a PodGroup of the old size (a gang of 2 among 4 pods: placed in part)."""
    job = make_job("a").replicas(4).elastic(2, 4).gpus(4)
    first = plan_with(job, capacity=2)
    assert first.defer_status and len(first.create_pods) == 2
    assert all(p["metadata"]["labels"][api.LABEL_REPLICAS] == "2" for p in first.create_pods)
    seen = [dict(p, metadata={**p["metadata"], "uid": f"u{i}", "creationTimestamp": ago(1)}, status={})
            for i, p in enumerate(first.create_pods)]
    group = dict(first.create_podgroup, status={})
    group["metadata"] = {**group["metadata"], "uid": "g0", "creationTimestamp": ago(1)}
    again = plan_with(job, seen, podgroups=[group], capacity=4)
    assert (again.status["replicas"], again.create_pods, again.create_podgroup) == (2, [], None)


def test_an_unplaceable_pod_without_a_gang_is_reported_too():
    job = launched(make_job("a").replicas(2))
    pods = pending_pods("a", 2)
    pods[1]["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu",
        }
    ]
    plan = plan_with(job, pods, gang=False)
    placed = next(c for c in plan.status["conditions"] if c["type"] == "PodsPlaced")
    assert placed["status"] == "False" and "Insufficient" in placed["message"]


def test_a_podgroup_of_the_name_held_by_an_earlier_job_is_waited_for():
    """Deleted and re-created under its name: the earlier job's gang `a-0` is still being removed. Pods pointing at
    it would follow the wrong gang, then wait for ever once it is gone."""
    obs = dataclasses.replace(observe(make_job("a").replicas(2).build(), [], None, True, NOW), gang=True,
                              foreign_podgroups=["a-0"])
    plan = plan_reconcile(obs, SETTINGS)
    assert (plan.create_podgroup, plan.create_pods, plan.requeue_after) == (None, [], 1.0)


def test_a_podgroup_deleted_under_its_pods_is_created_again():
    job = make_job("a").replicas(2).running()
    plan = plan_with(job, running_pods("a", 2), podgroups=[])
    assert plan.create_podgroup["metadata"]["name"] == "a-0"
    assert plan.create_pods == []
    assert plan_with(job, running_pods("a", 2), podgroups=[podgroup("a-0", 0)]).create_podgroup is None


def test_a_size_that_did_not_place_is_not_tried_again_for_the_cooldown():
    """The estimate says 4 fit, the scheduler said no: no 4 -> 3 -> 4 -> 3 loop."""
    job = three_of_four().status(desiredReplicas=4, sizeText="3/4", placement="Gang", worldSize=24,
                                 observedGeneration=1, unplaceableSize=4, unplaceableUntil=ago(-100))
    assert plan_with(job, running_pods("a", 3), capacity=4).status is None, "cooling down: stays at 3"
    later = plan_with(job, running_pods("a", 3), capacity=4, now=NOW + timedelta(seconds=101))
    assert (later.status["reason"], later.status["replicas"]) == ("GrewToFit", 4)


def test_no_growing_while_the_current_attempt_is_not_running():
    job = make_job("a").replicas(4).elastic(2, 4).gpus(8).status(
        phase="Pending", attempt=0, restarts=0, replicas=3, desiredReplicas=4, sizeText="3/4", launchedAttempt=0,
        placement="Gang", worldSize=24, observedGeneration=1, conditions=[])
    plan = plan_with(job, pending_pods("a", 3), capacity=4)
    assert plan.status is None or plan.status.get("reason") != "GrewToFit"


@pytest.mark.parametrize("name, edit", [
    ("SchedulingGated", lambda p: p["status"].update(conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "message": "gated"}])),
    ("preemption under way: a node is nominated", lambda p: p["status"].update(nominatedNodeName="n1")),
    ("the autoscaler is bringing a node up", lambda p: p["metadata"].setdefault("annotations", {}).update(
        {"cluster-autoscaler.kubernetes.io/scale-up-triggered": "true"})),
])
def test_no_shrinking_on_a_verdict_that_is_not_final(name, edit):
    job = launched(make_job("a").replicas(4).elastic(2, 4).gpus(8))
    pods = pending_pods("a", 4)
    for pod in pods:
        edit(pod)
    pods = [slim_pod(p) for p in pods]  # as the watch cache keeps them: the guard must survive the slimming
    group = [] if name == "SchedulingGated" else [podgroup("a-0", 0, scheduled=False)]
    job.status(unplacedAttempt=0, unplacedSince=ago(600))  # unplaced for long: only the verdict's kind matters
    plan = plan_with(job, pods, podgroups=group, capacity=3, gang=bool(group))
    assert plan.status is None or plan.status.get("reason") != "ShrankToFit", name


def test_a_new_attempt_does_not_inherit_an_older_attempts_unplaced_clock():
    job = launched(make_job("a").replicas(4).elastic(2, 4).gpus(8))
    job.status(unplacedAttempt=7, unplacedSince=ago(600))
    plan = plan_with(job, pending_pods("a", 4), podgroups=[podgroup("a-0", 0, scheduled=False)], capacity=3)
    assert plan.status["phase"] == "Pending" and plan.status["unplacedAttempt"] == 0


@pytest.mark.parametrize("name, failing, want_memory", [
    ("preempted: the cluster took the size back, remembered", "evicted", True),
    ("node lost: a node that returns is real room, not remembered", "node", False),
])
def test_a_size_taken_back_by_preemption_is_not_grown_into_again_for_the_cooldown(name, failing, want_memory):
    job = three_of_four().restart_backoff(0).status(desiredReplicas=4, sizeText="3/4", placement="Gang",
                                                    worldSize=24, observedGeneration=1)
    pods = [make_pod("a", 0).on_node("n0").build(), make_pod("a", 1).on_node("n1").build()]
    victim = make_pod("a", 2).on_node("n2")
    victim.evicted() if failing == "evicted" else victim.on_node("gone")
    nodes = [make_node("n0"), make_node("n1"), make_node("n2")]
    s = plan_with(job, pods + [victim.build()], nodes=nodes, capacity=2).status
    assert (s["phase"], s["replicas"], s["platformRestarts"]) == ("Restarting", 2, 1), name
    assert (s.get("unplaceableSize"), s.get("unplaceableUntil")) == ((3, ago(-300)) if want_memory else (None, None))


@pytest.mark.parametrize("name, running, capacity, want_size", [
    ("the estimate still says 3 fit (the preemptor is not nominated yet): one pod fewer", 3, 3, 2),
    ("the estimate says fewer still: what fits", 3, 1, 2),
    ("already at the minimum: the minimum", 2, 3, 2),
])
def test_an_elastic_group_that_lost_a_pod_to_preemption_restarts_smaller(name, running, capacity, want_size):
    job = make_job("a").replicas(4).elastic(2, 4).gpus(8).running(replicas=running).restart_backoff(0).status(
        desiredReplicas=4, sizeText=f"{running}/4", placement="Gang", worldSize=8 * running, observedGeneration=1)
    nodes = [make_node(f"n{i}") for i in range(running)]
    pods = [make_pod("a", i).on_node(f"n{i}").build() for i in range(running - 1)]
    pods.append(make_pod("a", running - 1).on_node(f"n{running - 1}").evicted().build())
    s = plan_with(job, pods, nodes=nodes, capacity=capacity).status
    assert (s["phase"], s["replicas"], s["restarts"], s["platformRestarts"]) == ("Restarting", want_size, 0, 1), name
