"""runPolicy.restartStrategy: InPlace (in_place.py, rendezvous.max_restarts, recoveries.py): torchrun's in-place
restarts are the job's budget, counted into status.restarts from worker 0's scrape and the pods' termination
records, once each; a group restart and an in-place one each leave an entry in status.recoveries."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest

from ddpjob_operator.recovery import recoveries
from ddpjob_operator.recovery.failures import in_place_restarts, in_place_restarts_of
from ddpjob_operator.state.plan import Plan
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.workers.rendezvous import TORCHRUN_MAX_RESTARTS, max_restarts, overridable_defaults
from ddpjob_operator.state.spec import parse_spec

from job_builders import NOW, make_job, make_pod, observe, running_pods

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60)


def in_place(job):
    job._run()["restartStrategy"] = "InPlace"
    return job


def plan_with(job, pods, progress=None, now=NOW):
    obs = dataclasses.replace(observe(job.build(), pods, now=now), progress=progress)
    return plan_reconcile(obs, SETTINGS)


def env_of(pod) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("strategy, backoff, restarts, want", [
    ("Recreate", 3, 0, 0),  # any failed process ends its pod
    # InPlace: a limit no agent reaches, whatever the budget left; the operator's own count decides (issue 35
    # item 3), and the budgets start over after a healthy hour (issue 54, defect 10: test_torchrun_restart_limit.py).
    ("InPlace", 3, 0, TORCHRUN_MAX_RESTARTS),
    ("InPlace", 3, 2, TORCHRUN_MAX_RESTARTS),
    ("InPlace", 3, 5, TORCHRUN_MAX_RESTARTS),
])
def test_torchruns_limit_never_ends_a_pod_before_the_jobs_budgets(strategy, backoff, restarts, want):
    job = make_job("a").backoff_limit(backoff)
    job._run()["restartStrategy"] = strategy
    spec = parse_spec(job.build()["spec"])
    assert max_restarts(spec, restarts) == want
    assert ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in overridable_defaults(spec)) == (strategy == "InPlace")
    # The trainer's peer watch: only InPlace re-forms a group in running pods, and past the node's NotReady.
    timeout = overridable_defaults(spec).get("DDP_TRAINER_PEER_TIMEOUT_SECONDS")
    assert (timeout is not None) == (strategy == "InPlace")
    assert timeout is None or int(timeout) > 50, "longer than the default --node-monitor-grace-period"


def test_new_pods_get_a_limit_no_agent_reaches_whatever_the_budget_left():
    job = in_place(make_job("a").replicas(2).backoff_limit(3)).running(attempt=1, restarts=2).status(launchedAttempt=0)
    plan = plan_with(job, [])
    assert [env_of(p)["PET_MAX_RESTARTS"] for p in plan.create_pods] == [str(TORCHRUN_MAX_RESTARTS)] * 2


def test_worker_0s_count_is_taken_in_once_as_restarts_with_an_event_and_a_recovery_entry():
    job = in_place(make_job("a").replicas(2)).running(restarts=1)
    job.status(progress={"attempt": 0, "step": 120, "checkpointStep": 100})
    scraped = {"step": 130, "inPlaceRestarts": 1, "updateTime": "2026-11-25T10:00:00Z"}
    plan = plan_with(job, running_pods("a", 2), scraped)
    status = plan.status
    assert (status["restarts"], status["inPlace"], status["attempt"]) == (2, {"attempt": 0, "restarts": 1}, 0)
    assert [e.reason for e in plan.events] == ["RestartedInPlace"]
    assert "restarts 2 of backoffLimit 3; no pod was replaced" in plan.events[0].message
    (entry,) = status["recoveries"]
    # The step is this pass's scrape (130), not status.progress (120), whose writes back off.
    assert (entry["how"], entry["attempt"], entry["step"], entry["stepsLost"]) == ("InPlace", 0, 130, 30)
    assert plan.create_pods == [] and plan.delete_pods == []
    # The same count again: nothing new.
    job.status(**status)
    again = plan_with(job, running_pods("a", 2), scraped)
    assert again.status is None or again.status["restarts"] == 2
    assert "RestartedInPlace" not in [e.reason for e in again.events]


def test_under_recreate_torchruns_count_is_not_taken_in():
    job = make_job("a").running()
    plan = plan_with(job, running_pods("a", 1), {"step": 5, "inPlaceRestarts": 2})
    assert plan.status is None or plan.status["restarts"] == 0


def test_a_count_of_an_earlier_attempt_is_not_this_attempts():
    job = in_place(make_job("a")).running(attempt=2, restarts=1).status(inPlace={"attempt": 1, "restarts": 1})
    plan = plan_with(job, running_pods("a", 1, attempt=2), {"step": 5, "inPlaceRestarts": 1})
    assert (plan.status["restarts"], plan.status["inPlace"]) == (2, {"attempt": 2, "restarts": 1})


def record(restarts: int, **extra) -> str:
    return json.dumps({"message": {"message": "boom", "errorCode": 3}, "ddpjobInPlaceRestarts": restarts, **extra})


def test_an_agent_that_gave_up_says_how_often_it_restarted_and_the_budget_is_then_spent():
    job = in_place(make_job("a").backoff_limit(2)).running()
    plan = plan_with(job, [make_pod("a", 0).failed(1, message=record(2)).build()])
    assert (plan.status["phase"], plan.status["reason"], plan.status["restarts"]) == (
        "Failed", "BackoffLimitExceeded", 2)
    assert plan.status["lastFailure"]["exitCode"] == 3


def test_restarts_only_a_successful_pod_reports_are_counted_at_the_end():
    job = in_place(make_job("a")).running()
    done = make_pod("a", 0).succeeded().build()
    done["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = json.dumps(
        {"finished": {"step": 50}, "ddpjobInPlaceRestarts": 1})
    plan = plan_with(job, [done])
    assert (plan.status["phase"], plan.status["restarts"]) == ("Succeeded", 1)
    assert plan.status["progress"]["step"] == 50


@pytest.mark.parametrize("text, want", [
    (record(2), 2),
    (json.dumps({"finished": {"step": 3}}), 0),
    ("Traceback ... Root Cause", 0),
    ("{not json", 0),
    (json.dumps({"ddpjobInPlaceRestarts": "2"}), 0),
    (json.dumps({"ddpjobInPlaceRestarts": -1}), 0),
])
def test_the_termination_record_is_read_strictly(text, want):
    assert in_place_restarts(text) == want


def test_a_pod_without_a_terminated_trainer_reports_none():
    assert in_place_restarts_of(make_pod("a", 0).build()) == 0


def test_a_group_restart_is_recorded_open_and_closed_when_the_group_runs_again():
    job = make_job("a").replicas(2).running().status(progress={"attempt": 0, "step": 90, "checkpointStep": 80})
    plan = plan_with(job, [make_pod("a", 0).build(), make_pod("a", 1).failed(1).build()])
    (entry,) = plan.status["recoveries"]
    assert (entry["how"], entry["pod"], entry["exitCode"], entry["stepsLost"], entry["ranks"]) == (
        "GroupRecreated", "a-worker-1", 1, 10, 2)
    # The new attempt runs 12 s after the failure was seen: the entry closes, an event and two metrics say so.
    later = NOW + timedelta(seconds=12)
    restarted = make_job("a").replicas(2).status(**{**plan.status, "launchedAttempt": 1})
    plan = plan_with(restarted, running_pods("a", 2, attempt=1), now=later)
    (entry,) = plan.status["recoveries"]
    assert "ranks" not in entry and entry["gpuSecondsLost"] == pytest.approx(2 * entry["recoverySeconds"])
    assert entry["recoverySeconds"] >= 12
    assert "Recovered" in [e.reason for e in plan.events]
    assert {o.metric for o in plan.observations} >= {"recovery_seconds", "gpu_seconds_lost"}


def test_the_history_keeps_the_last_entries_only():
    status = {"attempt": 0}
    for _ in range(recoveries.LIMIT + 3):
        recoveries.record(status, NOW, recoveries.IN_PLACE, None, "x", done=True)  # type: ignore[arg-type]
    assert len(status["recoveries"]) == recoveries.LIMIT
    recoveries.close(status, NOW, Plan())  # type: ignore[arg-type]  # nothing open: nothing changes
    assert all("recoverySeconds" not in e for e in status["recoveries"])


def test_a_lost_pod_is_replaced_alone_and_the_others_are_left_running():
    job = in_place(make_job("a").replicas(3)).running()
    lost = make_pod("a", 1).failed(1, message=record(0)).build()
    plan = plan_with(job, [make_pod("a", 0).build(), lost, make_pod("a", 2).build()])
    status = plan.status
    assert (status["attempt"], status["phase"], status["restarts"]) == (0, "Running", 1)
    assert status["replacing"] == {"1": "pod-1-0"}
    assert status["inPlace"] == {"attempt": 0, "restarts": 1}, "the survivors' own restart for it is this failure's"
    assert [e.reason for e in plan.events] == ["ReplacingPod"]
    assert status["recoveries"][-1]["how"] == "PodReplaced"
    assert (plan.delete_pods, plan.create_pods) == ([], []), "decided first, acted on by the next pass"
    # Next pass: the lost pod is an earlier one now; it is deleted, the others are untouched.
    job.status(**status)
    plan = plan_with(job, [make_pod("a", 0).build(), lost, make_pod("a", 2).build()])
    assert plan.delete_pods == ["a-worker-1"] and plan.release_pods == ["a-worker-1"]
    assert plan.create_pods == [], "its container may still run on a Ready node: wait until it is gone"
    # Gone: its replacement joins the same attempt's rendezvous, hosted by pod 0.
    plan = plan_with(job, [make_pod("a", 0).build(), make_pod("a", 2).build()])
    (new,) = plan.create_pods
    assert (new["metadata"]["name"], new["metadata"]["labels"]["ddpjob.dev/restart-attempt"]) == ("a-worker-1", "0")
    assert env_of(new)["PET_RDZV_ID"] == "uid-1-0" and env_of(new)["PET_RDZV_ENDPOINT"].startswith("a-worker-0.a.")
    assert env_of(new)["PET_MAX_RESTARTS"] == str(TORCHRUN_MAX_RESTARTS), "the operator's count decides"
    # All three run again: the replacement is over and its recovery closed.
    fresh = make_pod("a", 1).build()
    fresh["metadata"]["uid"] = "pod-1-0-new"
    plan = plan_with(job, [make_pod("a", 0).build(), fresh, make_pod("a", 2).build()])
    assert "replacing" not in plan.status and "recoverySeconds" in plan.status["recoveries"][-1]
    assert "Recovered" in [e.reason for e in plan.events]


@pytest.mark.parametrize("name, pods, why", [
    ("pod 0 hosts the rendezvous store", lambda: [make_pod("a", 0).failed(1).build(), make_pod("a", 1).build()],
     "its loss takes the store every agent uses"),
    ("two pods ended at once", lambda: [make_pod("a", 0).build(), make_pod("a", 1).failed(1).build(),
                                        make_pod("a", 2).failed(1).build()], "more than one"),
])
def test_the_group_is_recreated_where_one_pod_cannot_be_replaced_alone(name, pods, why):
    job = in_place(make_job("a").replicas(3)).running()
    plan = plan_with(job, pods())
    assert plan.status["attempt"] == 1 and "replacing" not in plan.status, (name, why)
    assert plan.status["recoveries"][-1]["how"] == "GroupRecreated"


def test_under_recreate_a_lost_pod_restarts_the_group():
    job = make_job("a").replicas(3).running()
    plan = plan_with(job, [make_pod("a", 0).build(), make_pod("a", 1).failed(1).build(), make_pod("a", 2).build()])
    assert plan.status["attempt"] == 1 and "replacing" not in plan.status


def test_an_in_place_elastic_group_accepts_min_to_its_size():
    job = in_place(make_job("a").replicas(3).elastic(2, 3))
    plan = plan_with(job, [])
    assert {env_of(p)["PET_NNODES"] for p in plan.create_pods} == {"2:3"}
    assert {env_of(p)["PET_NNODES"] for p in plan_with(make_job("a").replicas(3).elastic(2, 3), []).create_pods} == {
        "3"}


def test_survivors_that_finish_while_a_replacement_waits_for_room_end_the_job():
    job = in_place(make_job("a").replicas(3).elastic(2, 3)).running().status(replacing={"2": "pod-2-0"})
    waiting = make_pod("a", 2).pending().build()
    waiting["metadata"]["uid"] = "pod-2-0-new"
    plan = plan_with(job, [make_pod("a", 0).succeeded().build(), make_pod("a", 1).succeeded().build(), waiting])
    assert plan.status["phase"] == "Succeeded"
    job.status(**plan.status)
    plan = plan_with(job, [make_pod("a", 0).succeeded().build(), make_pod("a", 1).succeeded().build(), waiting])
    assert "a-worker-2" in plan.delete_pods, "the replacement that never joined goes with the job"


def test_worker_0_done_ends_the_job_once_its_peers_end_or_its_grace_is_over():
    """torchrun's exit barrier: worker 0's agent ends 0 only once every rank of its last round finished. A pod
    still running after that is leaving the same barrier, or a replacement that joined after that round formed
    and waits on worker 0's store, which is gone, until torchrun's join timeout (the CI run of 72d9873: InPlace
    did not end in 420 s after a node came back)."""
    job = in_place(make_job("a").replicas(3)).running()

    def pods(worker_0_ended: float, last):
        return [make_pod("a", 0).succeeded(finished=worker_0_ended).build(),
                make_pod("a", 1).succeeded(finished=worker_0_ended).build(), last]
    # 5 s after worker 0: the last pod may be leaving its barrier; the job waits the rest of the grace for it.
    plan = plan_with(job, pods(5, make_pod("a", 2).build()))
    assert plan.status is None or plan.status["phase"] != "Succeeded"
    assert plan.requeue_after == pytest.approx(25, abs=1)
    assert plan.delete_pods == [] and plan.create_pods == []
    # Past the grace: Succeeded, the late pod named, and cleanPodPolicy (Running) stops it on the next pass.
    plan = plan_with(job, pods(31, make_pod("a", 2).build()))
    assert plan.status["phase"] == "Succeeded"
    assert "worker 0 finished the training of attempt 0; a-worker-2 had not ended 30s after it" in plan.events[
        -1].message
    job.status(**plan.status)
    assert "a-worker-2" in plan_with(job, pods(32, make_pod("a", 2).build())).delete_pods
    # A peer that fails after worker 0 finished (its store is gone) is no failure: no budget, no replacement.
    plan = plan_with(in_place(make_job("a").replicas(3)).running(), pods(5, make_pod("a", 2).failed(1).build()))
    assert plan.status["phase"] == "Succeeded" and plan.status.get("restarts", 0) == 0, plan.status
    assert "replacing" not in plan.status and plan.create_pods == []
    # Recreate keeps waiting for every pod: its pods are one round, made together, and end together.
    recreate = make_job("a").replicas(3).running()
    plan = plan_with(recreate, pods(31, make_pod("a", 2).build()))
    assert plan.status is None or plan.status["phase"] != "Succeeded"


def test_a_replacement_that_finds_the_finished_groups_rendezvous_closed_is_no_failure():
    """Stop 49's CI: the survivors at 2 finished as the lost node came back. Their agents closed the rendezvous;
    the replacement's agent joined it then and exited 1 (RendezvousClosedError) while worker 0's pod still showed
    Running, and the group was recreated as attempt 1. The closed rendezvous is the others' end, not a cause: the
    decision waits for worker 0, whose success ends the job in attempt 0."""
    job = in_place(make_job("a").replicas(3).elastic(2, 3)).running().status(platformRestarts=1)
    closed = ('{"message": {"message": "RendezvousClosedError: ", "extraInfo": {"py_callstack": "Traceback ...'
              'torch.distributed.elastic.rendezvous.api.RendezvousClosedError"}}}')
    replacement = make_pod("a", 2).failed(1, message=closed, finished=1).build()
    plan = plan_with(job, [make_pod("a", 0).build(), make_pod("a", 1).build(), replacement])
    assert plan.status is None or plan.status["attempt"] == 0 and plan.status["phase"] == "Running", plan.status
    assert plan.create_pods == [] and plan.delete_pods == []
    assert plan.requeue_after == pytest.approx(9, abs=0.5)
    survivors = [make_pod("a", i).succeeded(finished=0).build() for i in (0, 1)]
    plan = plan_with(job, [*survivors, replacement])
    assert (plan.status["phase"], plan.status["attempt"], plan.status["platformRestarts"]) == ("Succeeded", 0, 1)
    # Were worker 0 to stay Running, the wait ends: a rendezvous closed 10 s ago is decided on.
    late = make_pod("a", 2).failed(1, message=closed, finished=11).build()
    plan = plan_with(job, [make_pod("a", 0).build(), make_pod("a", 1).build(), late])
    assert plan.status["lastFailure"]["reason"] == "RendezvousClosed", plan.status["lastFailure"]


def _join_window_job(until: str):
    job = in_place(make_job("a").replicas(2)).running().status(platformRestarts=1)
    return job.status(inPlace={"attempt": 0, "restarts": 1, "joinUntil": until})


def test_one_restart_reported_while_a_replacement_joins_is_the_join_not_a_failure():
    """After a pod was replaced alone: the survivors' first restart was credited with the loss (replace_pod), and
    the join of the replacement can cost one more (the stop vote); inside the window it is charged to no budget."""
    job = _join_window_job(until="2026-01-01T12:02:00Z")
    scraped = {"step": 130, "inPlaceRestarts": 2, "updateTime": "2026-01-01T12:00:00Z"}
    plan = plan_with(job, running_pods("a", 2), scraped)
    status = plan.status
    assert (status.get("restarts", 0), status["platformRestarts"]) == (0, 1), "no budget spent on the join"
    assert status["inPlace"] == {"attempt": 0, "restarts": 2, "joinUntil": "2026-01-01T12:02:00Z"}, (
        "counted as seen; the window stays open to its end, for a late read of the loss's own restarts")
    assert [e.reason for e in plan.events] == ["ReplacementJoined"] and not status.get("recoveries")


def test_after_the_join_window_a_restart_is_the_trainers_again():
    job = _join_window_job(until="2026-01-01T09:00:00Z")  # long past
    scraped = {"step": 130, "inPlaceRestarts": 2, "updateTime": "2026-01-01T12:00:00Z"}
    plan = plan_with(job, running_pods("a", 2), scraped)
    assert plan.status["restarts"] == 1 and plan.status["inPlace"] == {"attempt": 0, "restarts": 2}
    assert [e.reason for e in plan.events] == ["RestartedInPlace"]


def test_the_replacement_running_opens_the_join_window():
    job = in_place(make_job("a").replicas(3)).running().status(platformRestarts=1)
    job.status(replacing={"2": "old-uid"}, inPlace={"attempt": 0, "restarts": 1})
    plan = plan_with(job, running_pods("a", 3))
    assert "replacing" not in plan.status
    assert plan.status["inPlace"]["joinUntil"] > "2026-"  # NOW + in_place.JOIN_WINDOW


@pytest.mark.parametrize("strategy, last_call, want", [
    # The first formation's last call: torchrun's 30 s; the re-forms after a loss wait 2 s (issue 54, defect 9:
    # tests/unit/test_rendezvous_last_call.py).
    ("InPlace", None, "last_call_timeout=30,keep_alive_interval=2,keep_alive_max_attempt=3"),
    ("InPlace", 20, "last_call_timeout=20,keep_alive_interval=2,keep_alive_max_attempt=3"),  # the user's word
    ("Recreate", None, "last_call_timeout=30"),
    ("Recreate", 7, "last_call_timeout=7"),
])
def test_in_place_rendezvous_drops_a_dead_node_and_stops_waiting_sooner(strategy, last_call, want):
    """Issue 35: InPlace's stall on a lost node was torchrun's keep-alive expiry (15 s) then a 30 s last call."""
    job = make_job("a").replicas(2)
    job._run()["restartStrategy"] = strategy
    if last_call is not None:
        job.obj["spec"]["rendezvous"] = {"lastCallTimeoutSeconds": last_call}
    (pod, _) = plan_with(job, []).create_pods
    conf = env_of(pod)["PET_RDZV_CONF"]
    assert conf.split("join_timeout=600,")[1] == want, conf
