"""The bookkeeping of a pod replaced alone (replace_pod.py, pod_sort.py, in_place.py, recoveries.py): issue 35's
scenarios, each the first row of its table. Every one failed on the planner before its fix."""

from __future__ import annotations

import dataclasses

import pytest
from job_builders import NOW, ago, make_job, make_node, make_pod, observe, running_pods

from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.workers.pod_sort import sort_pods

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60)
NODES = [make_node("node-0"), make_node("dead", ready=False, since=90)]


def in_place(job):
    job.obj["spec"].setdefault("runPolicy", {})["restartStrategy"] = "InPlace"
    return job


def torchft(job):
    job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT"}
    return job


def replacement(index: int, phase: str = "Running"):
    pod = make_pod("a", index).build()
    pod["metadata"].update(name=f"a-worker-{index}-r", uid=f"pod-{index}-new", creationTimestamp=ago(20))
    pod["status"] = {"phase": phase}
    return pod


def lost_on_dead_node(index: int):
    """The lost pod: deleted, still Terminating on its NotReady node (inside the 300 s safety grace)."""
    return make_pod("a", index).on_node("dead").terminating(since=40).build()


# --- item 2: a replaced pod never takes its index back ------------------------------------------------------------
@pytest.mark.parametrize("name, order", [
    ("the old pod listed before its replacement (the ping-pong)", "old-first"),
    ("the replacement listed first", "new-first"),
])
def test_a_replaced_pod_still_terminating_never_takes_its_index_back(name, order):
    job = in_place(make_job("a").replicas(3)).running(restarts=1).status(replacing={"1": "pod-1-0"})
    old, new = lost_on_dead_node(1), replacement(1)
    middle = [old, new] if order == "old-first" else [new, old]
    pods = [make_pod("a", 0).build(), *middle, make_pod("a", 2).build()]
    plan = plan_reconcile(observe(job.build(), pods, NODES), SETTINGS)
    status = plan.status
    assert "replacing" not in status and status["retiredUids"] == ["pod-1-0"], name
    for _ in range(2):  # the passes after the replacement is over: nothing changes, whatever the order
        job.obj["status"] = status  # as written: whole
        plan = plan_reconcile(observe(job.build(), pods, NODES), SETTINGS)
        status = plan.status or job.obj["status"]
        assert "a-worker-1-r" not in plan.delete_pods, name
        assert (status["phase"], status["restarts"], status.get("platformRestarts", 0)) == ("Running", 1, 0), name
        assert status["attempt"] == 0 and "replacing" not in status, name
    # Gone at last: its uid is forgotten.
    job.obj["status"] = status
    plan = plan_reconcile(observe(job.build(), [p for p in pods if p is not old], NODES), SETTINGS)
    assert "retiredUids" not in (plan.status or {}), name


@pytest.mark.parametrize("name, pods, want", [
    ("a Terminating pod of the index never displaces a live one", [
        make_pod("a", 1).terminating(5).build(), replacement(1)], {1: "pod-1-new"}),
    ("a Terminating pod alone still holds its index (its end is a failure to count)", [
        make_pod("a", 1).terminating(5).build()], {1: "pod-1-0"}),
    ("two live pods: the first keeps it", [make_pod("a", 1).build(), replacement(1)], {1: "pod-1-0"}),
    ("a replaced uid is never current", [make_pod("a", 1).build(), replacement(1)], {1: "pod-1-new"}),
])
def test_sort_pods_gives_each_index_to_a_live_pod_first(name, pods, want):
    replaced = {"pod-1-0"} if name.startswith("a replaced uid") else set()
    got = sort_pods(pods, attempt=0, replicas=3, replaced=replaced)
    assert {i: p["metadata"]["uid"] for i, p in got.current.items()} == want, name


def plan_with(job, pods, progress=None, nodes=NODES, now=NOW):
    obs = dataclasses.replace(observe(job.build(), pods, nodes, now=now), progress=progress)
    return plan_reconcile(obs, SETTINGS)


def node_down(since: float):
    return [make_node("node-0"), make_node("dead", ready=False, since=since)]


# --- item 5: a lost node under InPlace is counted once ------------------------------------------------------------
def test_a_lost_node_under_in_place_is_counted_once():
    job = in_place(make_job("a").replicas(3).backoff_limit(3)).running()
    pods = [make_pod("a", 0).build(), make_pod("a", 1).on_node("dead").build(), make_pod("a", 2).build()]
    survivors_restarted = {"step": 130, "inPlaceRestarts": 1, "updateTime": ago(1)}
    # Inside the node's grace: the survivors' restart may be this loss's; nothing is taken in yet.
    plan = plan_with(job, pods, survivors_restarted, node_down(10))
    assert plan.status is None or plan.status.get("restarts", 0) == 0
    assert "RestartedInPlace" not in [e.reason for e in plan.events]
    # The grace is over: the node is lost, the pod replaced, one platform failure and nothing else.
    plan = plan_with(job, pods, survivors_restarted, node_down(40))
    s = plan.status
    assert (s["restarts"], s["platformRestarts"], s["replacing"]) == (0, 1, {"1": "pod-1-0"})
    assert s["inPlace"] == {"attempt": 0, "restarts": 1}, "the survivors' restart is the replacement's"
    assert [e.reason for e in plan.events] == ["ReplacingPod"]
    # The next pass sees the same count: nothing more.
    job.obj["status"] = s
    again = plan_with(job, pods, survivors_restarted, node_down(41))
    assert (again.status or s)["restarts"] == 0


# --- item 6: status.recoveries --------------------------------------------------------------------------------
def test_an_open_entry_followed_by_another_still_closes():
    from ddpjob_operator.recovery import recoveries
    from ddpjob_operator.state.plan import Plan

    status = {"attempt": 0, "worldSize": 3, "recoveries": [
        {"id": 1, "time": ago(30), "how": "PodReplaced", "attempt": 0, "message": "m", "ranks": 3},
        {"id": 2, "time": ago(10), "how": "InPlace", "attempt": 0, "message": "m"},
    ]}
    plan = Plan()
    recoveries.close(status, NOW, plan)  # type: ignore[arg-type]
    first, second = status["recoveries"]
    assert (first["recoverySeconds"], first["gpuSecondsLost"], "ranks" in first) == (30.0, 90.0, False)
    assert second == {"id": 2, "time": ago(10), "how": "InPlace", "attempt": 0, "message": "m"}
    assert [e.reason for e in plan.events] == ["Recovered"] and "#1" in plan.events[0].message


def test_entries_are_numbered_one_after_the_other():
    from ddpjob_operator.recovery import recoveries

    status = {"attempt": 0, "recoveries": [{"id": 7, "time": ago(30), "how": "InPlace", "attempt": 0, "message": "m"}]}
    entry = recoveries.record(status, NOW, recoveries.IN_PLACE, None, "m", done=True)  # type: ignore[arg-type]
    assert entry["id"] == 8


def test_a_node_loss_starts_at_its_not_ready_transition():
    job = in_place(make_job("a").replicas(3)).running()
    pods = [make_pod("a", 0).build(), make_pod("a", 1).on_node("dead").build(), make_pod("a", 2).build()]
    s = plan_with(job, pods, nodes=node_down(75)).status
    assert s["recoveries"][-1]["time"] == ago(75) and s["lastFailure"]["time"] == ago(75)


def test_steps_lost_come_from_this_passs_scrape():
    job = make_job("a").replicas(2).restart_backoff(0).running()
    job.status(progress={"attempt": 0, "step": 100, "checkpointStep": 100})  # written 50 s ago
    scraped = {"step": 160, "checkpointStep": 100, "updateTime": ago(1)}
    s = plan_with(job, [make_pod("a", 0).build(), make_pod("a", 1).failed(1).build()], scraped).status
    entry = s["recoveries"][-1]
    assert (entry["how"], entry["step"], entry["stepsLost"]) == ("GroupRecreated", 160, 60)


@pytest.mark.parametrize("name, elastic, want_ranks", [
    ("elastic 2..3: the survivors train on, only the lost pod's ranks stop", (2, 3), 2),
    ("fixed size: every rank waits for the replacement", None, 6),
])
def test_an_in_place_replacement_charges_the_ranks_that_stopped(name, elastic, want_ranks):
    job = in_place(make_job("a").replicas(3).nproc(2))
    if elastic:
        job.elastic(*elastic)
    job.running()
    job.obj["status"]["worldSize"] = 6
    pods = [make_pod("a", 0).build(), make_pod("a", 1).failed(1).build(), make_pod("a", 2).build()]
    s = plan_with(job, pods).status
    assert (s["recoveries"][-1]["how"], s["recoveries"][-1]["ranks"]) == ("PodReplaced", want_ranks), name


# --- item 8: several groups lost at once --------------------------------------------------------------------------
@pytest.mark.parametrize("name, backoff, failed, want", [
    ("two groups at once are one incident: one restart left is enough, both replaced", 1, [1, 2],
     ("Running", "", {"1", "2"})),
    ("two groups at once, no restart left: the job fails", 0, [1, 2], ("Failed", "BackoffLimitExceeded", None)),
    ("two groups at once, two left: both replaced", 2, [1, 2], ("Running", "", {"1", "2"})),
    ("every group lost: the group is recreated from its checkpoint", 3, [0, 1, 2], ("Restarting", "", None)),
])
def test_several_groups_lost_at_once(name, backoff, failed, want):
    job = torchft(make_job("a").replicas(3).restart_backoff(0).backoff_limit(backoff)).running()
    job.status(progress={"attempt": 0, "step": 120, "checkpointStep": 100})
    pods = [make_pod("a", i).failed(1).build() if i in failed else make_pod("a", i).build() for i in range(3)]
    s = plan_with(job, pods).status
    failed_condition = next((c for c in s["conditions"] if c["type"] == "Failed"), {})
    replacing = set(s["replacing"]) if "replacing" in s else None
    assert (s["phase"], failed_condition.get("reason", ""), replacing) == want, name
    if want[0] == "Restarting":
        entry = s["recoveries"][-1]
        assert (s["attempt"], entry["how"], entry["stepsLost"]) == (1, "GroupRecreated", 20)


# --- item 10: the join window belongs to its attempt -----------------------------------------------------------
@pytest.mark.parametrize("name, in_place_seen, scraped_at, want_restarts, want_joined", [
    ("a window of an earlier attempt is not this attempt's", {"attempt": 0, "restarts": 1, "joinUntil": ago(-60)},
     1, 1, False),
    ("a join first seen after the window (a scrape gap) is not charged",
     {"attempt": 1, "restarts": 0, "joinUntil": ago(30)}, 1, 0, True),
    ("after a later scrape showed nothing, the window is over",
     {"attempt": 1, "restarts": 0, "joinUntil": ago(30)}, None, 1, False),
])
def test_the_join_window_belongs_to_its_attempt(name, in_place_seen, scraped_at, want_restarts, want_joined):
    job = in_place(make_job("a").replicas(2).backoff_limit(5)).running(attempt=1).status(inPlace=in_place_seen)
    if scraped_at is None:  # a pass with a post-window scrape showing no restart closes the window first
        quiet = plan_with(job, running_pods("a", 2, attempt=1), {"step": 5, "inPlaceRestarts": 0,
                                                                   "updateTime": ago(10)})
        job.obj["status"] = quiet.status or job.obj["status"]
    scraped = {"step": 9, "inPlaceRestarts": 1, "updateTime": ago(1)}
    plan = plan_with(job, running_pods("a", 2, attempt=1), scraped)
    s = plan.status
    assert (s.get("restarts", 0), "ReplacementJoined" in [e.reason for e in plan.events]) == (
        want_restarts, want_joined), name


# --- items 3 and 4: every pod's agent is read, and the operator's count decides ------------------------------------
def agents(**counts):
    """pod uid (pod-<index>-<attempt>) -> its agent's count, as the scraper hands them to the planner."""
    return {f"pod-{k[1:]}-0": v for k, v in counts.items()}


def plan_in_place(job, pods, agent_counts, progress=None, now=NOW):
    obs = dataclasses.replace(observe(job.build(), pods, now=now), progress=progress, agent_restarts=agent_counts)
    return plan_reconcile(obs, SETTINGS)


@pytest.mark.parametrize("name, counts, worker0, want", [
    ("make demo: worker-1's trainer killed; worker 0's agent counted nothing (a membership change is free)",
     agents(p0=0, p1=1), 0, 1),
    ("a peer's loss made every agent count: one group restart", agents(p0=1, p1=1, p2=1), 1, 1),
    ("one agent restarted twice between two reads", agents(p0=0, p1=2), 0, 2),
    ("nothing new", agents(p0=0, p1=0), 0, 0),
])
def test_in_place_restarts_are_read_from_every_pods_agent(name, counts, worker0, want):
    job = in_place(make_job("a").replicas(3).backoff_limit(5)).running()
    plan = plan_in_place(job, running_pods("a", 3), counts, {"step": 40, "inPlaceRestarts": worker0,
                                                             "updateTime": ago(1)})
    s = plan.status or job.obj["status"]
    assert s.get("restarts", 0) == want, name
    assert ("RestartedInPlace" in [e.reason for e in plan.events]) == (want > 0), name
    if want:
        assert s["recoveries"][-1]["how"] == "InPlace" and s["inPlace"]["pods"] == counts, name
        job.obj["status"] = s  # the same counts read again: nothing more
        again = plan_in_place(job, running_pods("a", 3), counts)
        assert (again.status or s)["restarts"] == want and "RestartedInPlace" not in [e.reason for e in again.events]


def test_a_replaced_pods_agent_starts_again_from_zero():
    job = in_place(make_job("a").replicas(2).backoff_limit(5)).running(restarts=2)
    job.status(inPlace={"attempt": 0, "restarts": 2, "pods": {"pod-0-0": 0, "pod-1-0": 2}, "agentTotal": 2})
    new = make_pod("a", 1).created(60).build()  # made long after the attempt's pods: a replacement
    new["metadata"]["uid"] = "pod-1-new"
    plan = plan_in_place(job, [make_pod("a", 0).created(900).build(), new], {"pod-0-0": 0, "pod-1-new": 1})
    s = plan.status
    assert s["restarts"] == 3 and s["inPlace"]["pods"] == {"pod-0-0": 0, "pod-1-new": 1}, "the old uid is dropped"
    assert s["inPlace"]["offsets"] == {"pod-1-new": 2}, "its count starts after the group's 2 restarts"


def test_a_failure_read_from_two_agents_in_two_passes_counts_once():
    """Issue 54 defect 6: the survivors' agents each counted the same group failure, read one pass apart."""
    job = in_place(make_job("a").replicas(3).backoff_limit(5)).running()
    first = plan_in_place(job, running_pods("a", 3), {"pod-0-0": 1, "pod-1-0": 0, "pod-2-0": 0})
    assert first.status["restarts"] == 1
    job.obj["status"] = first.status
    second = plan_in_place(job, running_pods("a", 3), {"pod-0-0": 1, "pod-1-0": 1, "pod-2-0": 1})
    assert (second.status or first.status)["restarts"] == 1, "the same failure, seen by the other agents"


def test_the_operators_count_decides_when_the_budget_is_spent():
    """Issue 35 item 3: torchrun's own limit is now above the job's budgets; a restart past backoffLimit, seen on
    any pod's agent, fails the job at once."""
    job = in_place(make_job("a").replicas(2).backoff_limit(1)).running(restarts=1)
    job.status(inPlace={"attempt": 0, "restarts": 1, "pods": {"pod-0-0": 0, "pod-1-0": 1}, "agentTotal": 1},
               lastFailure={"pod": "a-worker-1", "kind": "ExitCode", "time": ago(60)})
    plan = plan_in_place(job, running_pods("a", 2), agents(p0=0, p1=2))
    s = plan.status
    assert (s["phase"], s["reason"], s["restarts"]) == ("Failed", "BackoffLimitExceeded", 2)
    assert s["lastFailure"]["reason"] == "RestartedInPlace"


def test_after_a_healthy_stretch_an_in_place_restart_starts_the_budget_over():
    job = in_place(make_job("a").replicas(2).backoff_limit(1)).running(restarts=1)
    job.obj["status"]["conditions"][0]["lastTransitionTime"] = ago(7200)
    job.status(progress={"attempt": 0, "step": 900, "advanceTime": ago(5)})
    plan = plan_in_place(job, running_pods("a", 2), agents(p0=0, p1=1))
    s = plan.status
    assert (s["phase"], s["restarts"]) == ("Running", 1)


def test_a_replacement_absorbs_the_survivors_restart_for_the_loss():
    job = in_place(make_job("a").replicas(3).backoff_limit(5)).running()
    lost = make_pod("a", 2).failed(137, signal=9).build()
    pods = [make_pod("a", 0).build(), make_pod("a", 1).build(), lost]
    s = plan_in_place(job, pods, agents(p0=0, p1=0)).status
    assert (s["restarts"], s["replacing"]) == (1, {"2": "pod-2-0"})
    job.obj["status"] = s
    # The survivors' agents each counted the loss: already charged to the replacement.
    after = plan_in_place(job, pods, agents(p0=1, p1=1))
    assert (after.status or s)["restarts"] == 1 and "RestartedInPlace" not in [e.reason for e in after.events]


@pytest.mark.parametrize("name, strategy, phase, want", [
    ("InPlace, Running: every running pod's agent", "InPlace", "Running", {"a-worker-0", "a-worker-1"}),
    ("Recreate: none", "Recreate", "Running", set()),
    ("not Running: none", "InPlace", "Restarting", set()),
])
def test_agent_urls(name, strategy, phase, want):
    from ddpjob_operator import api
    from ddpjob_operator.tracking.progress import agent_urls

    job = make_job("a").replicas(3)
    job._run()["restartStrategy"] = strategy
    job.running().status(phase=phase)
    pods = running_pods("a", 3)
    for i, pod in enumerate(pods):
        pod["status"]["podIP"] = f"10.0.0.{i}"
    pods[2]["status"]["phase"] = "Pending"
    urls = agent_urls(observe(job.build(), pods))
    assert {p["metadata"]["name"] for p in pods if p["metadata"]["uid"] in urls} == want, name
    if want:
        assert urls["pod-0-0"] == f"http://10.0.0.0:{api.AGENT_METRICS_PORT}/metrics"
