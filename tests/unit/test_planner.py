"""The reconcile planner: (job, pods, nodes, now) -> Plan, step by step."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.recovery import failures

from job_builders import NOW, ago, make_job, make_node, make_pod, observe, running_pods

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60)


def plan_for(job, pods=None, nodes=None, service=True, now=NOW):
    return plan_reconcile(observe(job.build() if hasattr(job, "build") else job, pods, nodes, service, now), SETTINGS)


def created(plan):
    return [(p["metadata"]["name"], p["metadata"]["labels"]["ddpjob.dev/restart-attempt"]) for p in plan.create_pods]


def reasons(plan):
    return [e.reason for e in plan.events]


def test_new_job_gets_service_and_pods_and_defers_its_status():
    plan = plan_for(make_job("a").replicas(2).gpus(4), service=False)
    assert plan.create_service["metadata"]["name"] == "a"
    assert created(plan) == [("a-worker-0", "0"), ("a-worker-1", "0")]
    assert all(p["metadata"]["finalizers"] == ["ddpjob.dev/pod-tracking"] for p in plan.create_pods)
    # The status is planned, but written by the pass that sees the pods.
    assert plan.defer_status
    s = plan.status
    assert (s["phase"], s["attempt"], s["restarts"], s["replicas"], s["worldSize"]) == ("Pending", 0, 0, 2, 8)
    assert "launchedAttempt" not in s
    assert reasons(plan) == []


def test_pods_seen_running_write_one_status_and_one_event():
    job = make_job("a").replicas(2)
    pods = [make_pod("a", i).created(3).build() for i in range(2)]
    plan = plan_for(job, pods)
    s = plan.status
    assert not plan.defer_status
    assert (s["phase"], s["launchedAttempt"], s["readyText"], s["startTime"]) == ("Running", 0, "2/2", ago(3))
    assert reasons(plan) == ["Running"]
    assert plan.events[0].message == "created 2 pods for attempt 0; all are running"
    assert [o.metric for o in plan.observations] == ["jobs_created", "time_to_all_running"]


@pytest.mark.parametrize("name, age, want_deferred, want_requeue, want_reasons", [
    ("young pending pods wait for the settle time", 2, True, 3.0, []),
    ("pods pending past the settle time are reported", 5, False, None, ["CreatedPods"]),
])
def test_pending_pods_settle_before_the_status_is_written(name, age, want_deferred, want_requeue, want_reasons):
    pods = [make_pod("a", 0).created(age).build(), make_pod("a", 1).created(age).pending().build()]
    plan = plan_for(make_job("a").replicas(2), pods)
    assert plan.defer_status is want_deferred, name
    assert plan.requeue_after == want_requeue, name
    assert reasons(plan) == want_reasons, name
    if not want_deferred:
        assert (plan.status["phase"], plan.status["launchedAttempt"]) == ("Pending", 0)
        assert plan.events[0].message == "created 2 pods for attempt 0: a-worker-0, a-worker-1"


def test_all_pods_running_makes_the_job_running_once():
    job = make_job("a").replicas(2).status(phase="Pending", attempt=0, restarts=0, replicas=2, launchedAttempt=0,
                                           conditions=[])
    plan = plan_for(job, running_pods("a", 2))
    assert plan.status["phase"] == "Running"
    assert plan.status["readyText"] == "2/2"
    assert reasons(plan) == ["Running"]
    assert plan.events[0].message == "all 2 pods of attempt 0 are running"
    assert [o.metric for o in plan.observations] == ["time_to_all_running"]
    assert plan.observations[0].value == 60.0


def test_steady_state_writes_nothing():
    plan = plan_for(make_job("a").replicas(2).running().status(observedGeneration=1), running_pods("a", 2))
    assert (plan.status, plan.create_pods, plan.delete_pods, plan.events) == (None, [], [], [])


@pytest.mark.parametrize("name, policy, backoff_limit, restarts, pod, want_phase, want_reason, want_attempt", [
    ("exit 1 restarts", "OnFailure", 3, 0, make_pod("a", 1).failed(1), "Restarting", "ExitCode", 1),
    ("eviction restarts", "OnFailure", 3, 1, make_pod("a", 1).evicted(), "Restarting", "Evicted", 2),
    ("deleted pod restarts", "OnFailure", 3, 0, make_pod("a", 1).terminating(since=5), "Restarting", "Deleted", 1),
    ("node lost restarts", "OnFailure", 3, 0, make_pod("a", 1).on_node("dead"), "Restarting", "NodeLost", 1),
    ("budget spent fails", "OnFailure", 3, 3, make_pod("a", 1).failed(1), "Failed", "BackoffLimitExceeded", 3),
    ("ExitCode exit 1 fails", "ExitCode", 3, 0, make_pod("a", 1).failed(1), "Failed", "PermanentExitCode", 0),
    ("ExitCode exit 137 restarts", "ExitCode", 3, 0, make_pod("a", 1).failed(137), "Restarting", "Signal", 1),
    ("Never fails", "Never", 3, 0, make_pod("a", 1).failed(137), "Failed", "PodFailed", 0),
])
def test_failure_policy(name, policy, backoff_limit, restarts, pod, want_phase, want_reason, want_attempt):
    job = (make_job("a").replicas(2).restart_policy(policy).backoff_limit(backoff_limit).restart_backoff(0)
           .running(attempt=restarts, restarts=restarts))
    pods = [make_pod("a", 0, restarts).build(), {**pod.build(), "metadata": {
        **pod.build()["metadata"], "labels": {**pod.build()["metadata"]["labels"],
                                              "ddpjob.dev/restart-attempt": str(restarts)}}}]
    nodes = [make_node("node-0"), make_node("dead", ready=False, since=120)]
    plan = plan_for(job, pods, nodes)
    s = plan.status
    assert (s["phase"], s["conditions"][-1]["reason"], s["attempt"]) == (want_phase, want_reason, want_attempt), name
    assert s["lastFailure"]["pod"] == "a-worker-1"
    # Deciding never deletes or creates in the same pass: the next pass acts on the written attempt.
    assert (plan.create_pods, plan.delete_pods) == ([], [])
    assert plan.requeue_after == 0
    if want_phase == "Restarting":
        platform = want_reason in ("Evicted", "Deleted", "NodeLost")
        # The platform's failures spend platformFailureLimit, never backoffLimit (failure_class.py).
        assert (s["restarts"], s.get("platformRestarts", 0)) == ((restarts, 1) if platform else (restarts + 1, 0))
        assert s["lastFailure"]["failureClass"] == ("Platform" if platform else "Trainer")
        assert reasons(plan) == ["Restarting"]
    else:
        assert s["completionTime"] == ago(0)
        assert reasons(plan) == [want_reason]


def test_restart_message_and_last_failure_carry_the_termination_message():
    job = make_job("a").replicas(2).restart_backoff(0).running()
    pods = [make_pod("a", 0).build(), make_pod("a", 1).failed(3, message="CUDA error: out of memory").build()]
    s = plan_for(job, pods).status
    assert s["lastFailure"] == {"pod": "a-worker-1", "kind": "ExitCode", "failureClass": "Trainer", "exitCode": 3,
                                "reason": "Error", "message": "CUDA error: out of memory", "time": ago(5)}
    assert s["conditions"][-1]["message"] == ("pod a-worker-1 exited with code 3 (Error): CUDA error: out of "
                                              "memory; restarting the group (1/3)")


def test_next_pass_deletes_old_attempt_then_creates_new_one():
    job = make_job("a").replicas(2).restart_backoff(0).running().status(attempt=1, restarts=1, phase="Restarting")
    old = [make_pod("a", 0, 0).build(), make_pod("a", 1, 0).failed(1).build()]
    plan = plan_for(job, old)
    assert plan.delete_pods == ["a-worker-0", "a-worker-1"]
    assert plan.release_pods == ["a-worker-0", "a-worker-1"], "their outcome is in status: the finalizers go"
    assert created(plan) == []  # names still taken
    assert plan.requeue_after == 1.0
    plan = plan_for(job, [make_pod("a", 1, 0).terminating().build()])
    assert created(plan) == [], "no new pod while any pod of the old group remains"
    plan = plan_for(job, [])
    assert created(plan) == [("a-worker-0", "1"), ("a-worker-1", "1")]
    env = {e["name"]: e.get("value") for e in plan.create_pods[0]["spec"]["containers"][0]["env"]}
    assert (env["DDPJOB_RESTARTS"], env["PET_RDZV_ID"]) == ("1", "uid-1-1")


def test_backoff_delays_the_new_attempt():
    job = (make_job("a").running().status(attempt=1, restarts=1, phase="Restarting",
                                          nextAttemptTime=(NOW + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")))
    plan = plan_for(job, [])
    assert created(plan) == []
    assert plan.requeue_after == 5.0
    assert created(plan_for(job, [], now=NOW + timedelta(seconds=5))) == [("a-worker-0", "1")]


def test_restart_sets_exponential_backoff():
    job = make_job("a").restart_backoff(5).running(attempt=1, restarts=1)
    plan = plan_for(job, [make_pod("a", 0, 1).failed(1).build()])
    assert plan.status["nextAttemptTime"] == (NOW + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("name, node, since, want_force", [
    ("never placed: nothing can run it", None, 1, True),
    ("node object gone", "gone", 1, True),
    ("node tainted out-of-service", make_node("dead", ready=False, since=10), 1, True),
    ("NotReady a short while: its containers may still run", make_node("dead", ready=False, since=120), 1, False),
    ("NotReady past the unreachable wait", make_node("dead", ready=False, since=301), 1, True),
    ("Ready node, past the grace: never", make_node("node-0"), 61, False),
])
def test_old_pod_terminating_is_force_deleted_only_when_safe(name, node, since, want_force):
    job = make_job("a").running().status(attempt=1, restarts=1, phase="Restarting")
    pod = make_pod("a", 0, 0).terminating(since=since)
    nodes = []
    if node is None:
        pod.obj["spec"].pop("nodeName", None)
    elif node == "gone":
        pod.on_node("gone")
    else:
        pod.on_node(node["metadata"]["name"])
        if "out-of-service" in name:
            node["spec"] = {"taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]}
        nodes = [node]
    plan = plan_for(job, [pod.build()], nodes)
    assert (plan.force_delete_pods, plan.delete_pods) == (["a-worker-0"] if want_force else [], []), name
    # The new group waits for a pod force-deleted now (gone in a moment), never for one on a lost node that may
    # not be force-deleted yet: it leaves that pod its name (pod_names.py).
    waits = want_force or "Ready node" in name
    assert created(plan) == ([] if waits else [("a-worker-0-1", "1")]), name


def test_a_new_group_takes_other_names_and_rendezvous_host_beside_a_pod_stuck_on_a_lost_node():
    job = make_job("a").replicas(3).running().status(attempt=1, restarts=1, phase="Restarting")
    stuck = make_pod("a", 0, 0).terminating(since=30).on_node("dead").build()
    gone_soon = make_pod("a", 2, 0).terminating(since=1).build()  # on node-0, Ready: in the way
    plan = plan_for(job, [stuck, gone_soon], [make_node("dead", ready=False, since=60), make_node("node-0")])
    assert created(plan) == [], "a pod of the old group on a Ready node may still run: wait for it"
    plan = plan_for(job, [stuck], [make_node("dead", ready=False, since=60), make_node("node-0")])
    assert created(plan) == [("a-worker-0-1", "1"), ("a-worker-1", "1"), ("a-worker-2", "1")]
    for pod in plan.create_pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["PET_RDZV_ENDPOINT"] == "a-worker-0-1.a.ns.svc:29400"
    assert plan.create_pods[0]["spec"]["hostname"] == "a-worker-0-1"


def test_old_pod_stuck_on_a_ready_node_is_reported_once_never_force_deleted():
    job = make_job("a").running().status(attempt=1, restarts=1, phase="Restarting")
    plan = plan_for(job, [make_pod("a", 0, 0).terminating(since=10).build()])
    # Already deleting: no second delete, no force; the name is still taken, so look again soon.
    assert (plan.force_delete_pods, plan.delete_pods, plan.create_pods, plan.requeue_after) == ([], [], [], 1.0)
    assert plan.status is None or "OldPodsTerminating" not in [c["type"] for c in plan.status["conditions"]]
    plan = plan_for(job, [make_pod("a", 0, 0).terminating(since=61).build()])
    assert plan.force_delete_pods == []
    stuck = next(c for c in plan.status["conditions"] if c["type"] == "OldPodsTerminating")
    assert stuck["status"] == "True"
    assert "is Ready but has not confirmed the deletion; check the kubelet" in stuck["message"]
    assert reasons(plan) == ["PodsStuckTerminating"]
    assert [o.metric for o in plan.observations] == ["pods_stuck_terminating"]
    # Said once: the same report on the next pass posts nothing.
    again = plan_for(make_job("a").running().status(**plan.status), [make_pod("a", 0, 0).terminating(since=70).build()])
    assert again.events == []


def test_a_pod_deleted_by_someone_else_is_judged_after_the_deletion_settles():
    job = make_job("a").replicas(2).restart_backoff(0).running().status(observedGeneration=1)
    pods = [make_pod("a", 0).build(), make_pod("a", 1).terminating(since=0.5).build()]
    plan = plan_for(job, pods)
    assert plan.status is None and 0 < plan.requeue_after <= 1.5
    pods[1] = make_pod("a", 1).terminating(since=2).build()
    assert plan_for(job, pods).status["phase"] == "Restarting"


def test_a_deleted_pod_is_judged_at_once_when_the_pass_read_its_job_and_namespace_live():
    job = make_job("a").replicas(2).restart_backoff(0).running().status(observedGeneration=1)
    pods = [make_pod("a", 0).build(), make_pod("a", 1).terminating(since=0.5).build()]
    obs = dataclasses.replace(observe(job.build(), pods, None, True, NOW), owners_live=True)
    s = plan_reconcile(obs, SETTINGS).status
    assert s["phase"] == "Restarting" and s["lastFailure"]["kind"] == "Deleted", s


@pytest.mark.parametrize("name, pods, want", [
    # The first row is the scenario: a pod of this attempt deleted half a second ago by someone else.
    ("this attempt's pod deleted 0.5 s ago", [make_pod("a", 1, attempt=1).terminating(since=0.5)], True),
    ("past the settle time: judged anyway, no read", [make_pod("a", 1, attempt=1).terminating(since=2.5)], False),
    ("an earlier attempt's pod: the operator's own delete", [make_pod("a", 1, attempt=0).terminating(since=0.5)],
     False),
    ("no pod being deleted", [make_pod("a", 0, attempt=1), make_pod("a", 1, attempt=1)], False),
])
def test_a_pass_reads_the_owners_live_only_while_a_deletion_of_this_attempt_settles(name, pods, want):
    assert failures.deletion_to_settle([p.build() for p in pods], 1, NOW) is want


def test_a_survivors_peer_symptom_waits_for_the_pod_whose_rank_died_first():
    # Worker 1's trainer was killed; worker 0's collective saw the reset and its pod ended first, while worker 1's
    # agent had yet to notice. Deciding then would name the survivor, a trainer failure of its own.
    job = make_job("a").replicas(2).restart_backoff(0).running().status(observedGeneration=1)
    reset = "RuntimeError: [gloo] Read error [10.0.0.5]:47338: Connection reset by peer"
    survivor = make_pod("a", 0).failed(1, message=reset, finished=3).build()
    plan = plan_for(job, [survivor, make_pod("a", 1).build()])
    assert plan.status is None and plan.requeue_after == pytest.approx(7, abs=0.5)
    killed = make_pod("a", 1).failed(137, signal=9, finished=1).build()
    s = plan_for(job, [survivor, killed]).status
    assert s["phase"] == "Restarting" and s["lastFailure"]["pod"] == "a-worker-1", s["lastFailure"]
    # The wait has an end: a peer that never fails does not hold the decision back.
    late = make_pod("a", 0).failed(1, message=reset, finished=11).build()
    s = plan_for(job, [late, make_pod("a", 1).build()]).status
    assert s["phase"] == "Restarting" and s["lastFailure"]["pod"] == "a-worker-0"


def test_missing_pod_of_a_launched_attempt_is_a_failure():
    job = make_job("a").replicas(2).restart_backoff(0).running()
    plan = plan_for(job, [make_pod("a", 0).build()])
    assert plan.status["phase"] == "Restarting"
    assert plan.status["lastFailure"]["reason"] == "PodMissing"


def test_node_not_ready_within_grace_requeues_for_the_rest_of_it():
    job = make_job("a").running().status(observedGeneration=1)
    plan = plan_for(job, [make_pod("a", 0).on_node("n").build()], [make_node("n", ready=False, since=10)])
    assert plan.status is None
    assert plan.requeue_after == 20


def test_all_succeeded_finishes_the_job():
    job = make_job("a").replicas(2).running()
    plan = plan_for(job, [make_pod("a", i).succeeded().build() for i in range(2)])
    assert plan.status["phase"] == "Succeeded"
    assert plan.status["completionTime"] == ago(0)
    assert reasons(plan) == ["Succeeded"]


def test_partial_success_keeps_running():
    job = make_job("a").replicas(2).running()
    plan = plan_for(job, [make_pod("a", 0).succeeded().build(), make_pod("a", 1).build()])
    assert plan.status["phase"] == "Pending" and plan.status["readyText"] == "1/2"


@pytest.mark.parametrize("name, policy, want_deleted", [
    ("Running deletes unfinished", "Running", ["a-worker-1"]),
    ("All deletes everything", "All", ["a-worker-0", "a-worker-1"]),
    ("None keeps everything", "None", []),
])
def test_clean_pod_policy_on_finish(name, policy, want_deleted):
    job = make_job("a").replicas(2).clean_pod_policy(policy).running().status(phase="Failed",
                                                                               completionTime=ago(1))
    plan = plan_for(job, [make_pod("a", 0).failed(1).build(), make_pod("a", 1).build()])
    assert plan.delete_pods == want_deleted, name
    assert plan.release_pods == ["a-worker-0", "a-worker-1"], name
    assert plan.create_pods == []


def test_ttl_after_finished():
    job = make_job("a").ttl(30).running().status(phase="Succeeded", completionTime=ago(10))
    plan = plan_for(job)
    assert (plan.delete_job, plan.requeue_after) == (False, 20)
    job = make_job("a").ttl(30).running().status(phase="Succeeded", completionTime=ago(30))
    assert plan_for(job).delete_job is True


def test_deadline_exceeded_fails_the_job():
    job = make_job("a").deadline(30).running()  # started 30 s ago
    plan = plan_for(job, running_pods("a", 1))
    assert plan.status["phase"] == "Failed"
    assert plan.status["conditions"][-1]["reason"] == "DeadlineExceeded"
    assert plan.status["conditions"][-1]["message"] == "job ran longer than activeDeadlineSeconds (30s)"
    plan = plan_for(make_job("a").deadline(100).running(), running_pods("a", 1))
    assert plan.requeue_after == 70


def test_suspend_bumps_attempt_then_deletes_pods_and_resume_creates_new_ones():
    job = make_job("a").replicas(2).suspend().running()
    plan = plan_for(job, running_pods("a", 2))
    s = plan.status
    assert (s["phase"], s["attempt"], s["restarts"]) == ("Suspended", 1, 0)
    assert "startTime" not in s
    assert reasons(plan) == ["Suspended"]
    suspended = make_job("a").replicas(2).suspend().build()
    suspended["status"] = s
    plan = plan_for(suspended, running_pods("a", 2))
    assert plan.delete_pods == ["a-worker-0", "a-worker-1"] and plan.create_pods == []
    resumed = make_job("a").replicas(2).suspend(False).build()
    resumed["status"] = s
    plan = plan_for(resumed, [])
    assert plan.status["phase"] == "Pending"
    assert reasons(plan) == ["Resumed"]
    resumed["status"] = plan.status
    plan = plan_for(resumed, [], now=NOW + timedelta(seconds=2))
    assert created(plan) == [("a-worker-0", "1"), ("a-worker-1", "1")]


def test_scale_is_a_group_restart_that_does_not_spend_the_budget():
    job = make_job("a").replicas(3).elastic(1, 4).running(replicas=2)
    plan = plan_for(job, running_pods("a", 2))
    s = plan.status
    assert (s["phase"], s["attempt"], s["restarts"], s["replicas"]) == ("Restarting", 1, 0, 3)
    assert reasons(plan) == ["Rescaled"]
    assert [(o.metric, o.labels) for o in plan.observations] == [("group_restarts", (("reason", "Rescaled"),))]


def test_recovery_is_observed_when_the_new_attempt_runs():
    job = make_job("a").running(attempt=1, restarts=1).status(phase="Restarting", restartingSince=ago(12))
    plan = plan_for(job, running_pods("a", 1, attempt=1))
    assert plan.status["phase"] == "Running"
    assert "restartingSince" not in plan.status
    assert [(o.metric, o.value) for o in plan.observations] == [("recovery_duration", 12.0)]


def test_foreign_pod_with_the_label_of_an_earlier_attempt_is_deleted_not_counted():
    job = make_job("a").replicas(1).running(attempt=2)
    plan = plan_for(job, [make_pod("a", 0, 2).build(), make_pod("a", 5, 2).build()])
    assert plan.delete_pods == ["a-worker-5"]


@pytest.mark.parametrize("name, pods, want_released", [
    ("current attempt keeps its finalizers", [make_pod("a", 0, 1), make_pod("a", 1, 1)], []),
    ("a deleted pod of the current attempt keeps it until the restart is written",
     [make_pod("a", 0, 1), make_pod("a", 1, 1).terminating()], []),
    ("an earlier attempt's pods lose it", [make_pod("a", 0, 0).terminating(), make_pod("a", 1, 0)],
     ["a-worker-0", "a-worker-1"]),
    ("a pod without it is left alone", [make_pod("a", 0, 0).untracked()], []),
])
def test_tracking_finalizer_is_released_only_after_the_status_moved_past_the_pod(name, pods, want_released):
    job = make_job("a").replicas(2).restart_backoff(0).running(attempt=1, restarts=1)
    plan = plan_for(job, [p.build() for p in pods])
    assert plan.release_pods == want_released, name


def test_orphaned_pods_of_a_deleted_job_are_released():
    from ddpjob_operator.controller.orphans import plan_release_orphans
    plan = plan_release_orphans([make_pod("a", 0).terminating().build(), make_pod("a", 1).untracked().build()])
    assert plan.release_pods == ["a-worker-0"]
    assert (plan.status, plan.create_pods, plan.delete_pods) == (None, [], [])


def _podgroup(name, deleting=False):
    meta = {"name": name, "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


@pytest.mark.parametrize("name, pods, groups, terminating, want", [
    ("a deleted job in a live namespace: the garbage collector deletes, we only release",
     [make_pod("a", 0), make_pod("a", 1).untracked()], [_podgroup("a-0")], False,
     (["a-worker-0"], [], [])),
    ("a namespace being deleted: release, then delete the PodGroups and the pods not yet going",
     [make_pod("a", 0), make_pod("a", 1).terminating()], [_podgroup("a-0"), _podgroup("a-1", deleting=True)], True,
     (["a-worker-0", "a-worker-1"], ["a-0"], ["a-worker-0"])),
    ("a namespace being deleted on a cluster without the gang API",
     [make_pod("a", 0).untracked()], [], True, ([], [], ["a-worker-0"])),
])
def test_a_namespace_being_deleted_has_its_jobs_pods_and_podgroups_deleted_at_once(name, pods, groups, terminating,
                                                                                   want):
    from ddpjob_operator.controller.orphans import plan_release_orphans
    plan = plan_release_orphans([p.build() for p in pods], groups, terminating)
    assert (plan.release_pods, plan.delete_podgroups, plan.delete_pods) == want, name
    assert (plan.status, plan.create_pods, plan.events) == (None, [], []), name


@pytest.mark.parametrize("name, old, scraped, want_written", [
    ("a new step is written", {"step": 10, "attempt": 0, "updateTime": ago(10)}, {"step": 20, "updateTime": ago(0)},
     True),
    ("the same step writes nothing", {"step": 10, "attempt": 0, "updateTime": ago(10)},
     {"step": 10, "updateTime": ago(0)}, False),
    ("the same step of an earlier attempt is the new attempt's first report", {"step": 10, "attempt": 1},
     {"step": 10, "updateTime": ago(0)}, True),
    ("a first scrape is written", None, {"step": 1, "updateTime": ago(0)}, True),
])
def test_progress_is_written_only_when_it_moved(name, old, scraped, want_written):
    import dataclasses

    from job_builders import observe
    job = make_job("a").running().status(observedGeneration=1)
    if old:
        job = job.status(progress=old)
    obs = dataclasses.replace(observe(job.build(), running_pods("a", 1)), progress=scraped)
    plan = plan_reconcile(obs, SETTINGS)
    assert (plan.status is not None) is want_written, name
    if want_written:
        assert plan.status["progress"]["step"] == scraped["step"]


def test_running_job_with_a_metrics_port_is_requeued_for_progress():
    job = make_job("a").running().status(observedGeneration=1)
    pod = make_pod("a", 0).build()
    pod["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 9400}]
    pod["status"]["podIP"] = "127.0.1.5"
    settings = PlannerSettings(progress_interval_seconds=7)
    assert plan_reconcile(observe(job.build(), [pod]), settings).requeue_after == 7
    assert plan_reconcile(observe(job.build(), running_pods("a", 1)), settings).requeue_after is None


def test_a_cache_showing_two_pods_under_one_name_decides_nothing_until_the_watch_catches_up():
    # The old attempt's pod (deleted, its DELETED event not yet seen) and its successor under the same name.
    job = make_job("a").replicas(2).restart_backoff(0).running(attempt=2, restarts=2)
    old = make_pod("a", 0, 1).build()
    new = make_pod("a", 0, 2).build()
    new["metadata"]["uid"] = "a-worker-0-new"
    plan = plan_for(job, [old, new, make_pod("a", 1, 2).build()])
    assert (plan.status, plan.delete_pods, plan.release_pods, plan.create_pods, plan.events) == (None, [], [], [], [])
    assert plan.requeue_after == 0.2


def _decided(change):
    """A job (dict) right after the pass that decided a new group, and that pass's plan."""
    if change == "restart after a failure, no backoff":
        job = make_job("a").replicas(2).restart_backoff(0).running().build()
        pods = [make_pod("a", 0, 0).build(), make_pod("a", 1, 0).failed(1).build()]
    elif change == "rescale 2 -> 3":
        job, pods = make_job("a").replicas(3).elastic(1, 4).running(replicas=2).build(), running_pods("a", 2)
    else:  # resume: the suspended status, then the spec says suspend: false
        suspending = make_job("a").replicas(2).suspend().running()
        job = make_job("a").replicas(2).suspend(False).build()
        job["status"], pods = plan_for(suspending, running_pods("a", 2)).status, []
    return job, plan_for(job, pods)


@pytest.mark.parametrize("change", ["restart after a failure, no backoff", "rescale 2 -> 3", "resume"])
def test_a_new_group_starts_2_s_after_the_decision_that_made_it(change):
    job, decided = _decided(change)
    job["status"] = decided.status
    assert decided.status["nextAttemptTime"] == (NOW + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    a_moment_later = plan_for(job, [], now=NOW + timedelta(seconds=1))
    assert (a_moment_later.create_pods, a_moment_later.requeue_after) == ([], 1.0)
    two_seconds_later = plan_for(job, [], now=NOW + timedelta(seconds=2))
    assert len(two_seconds_later.create_pods) == decided.status["replicas"]


