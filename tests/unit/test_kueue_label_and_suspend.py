"""Issue 27 items 2 and 3, as the planner decides them (pure; pods through slim_pod as the cache keeps them):
a suspended job gives its quota back, and a queue label changed while the job is admitted or has pods is held,
never followed into pods without an admission or a kill."""

from __future__ import annotations

import pytest
from job_builders import make_job, make_pod, running_pods
from test_kueue_admission import governed, queued_job, workload_of

from ddpjob_operator.admission import kueue, queue_label
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.controller.watch_cache import slim_pod


def admitted_running(label="team"):
    job = queued_job()
    job["status"] = make_job("a").replicas(2).running().build()["status"]
    job["status"].update({"launchedAttempt": 0, "queue": "team"})
    wl = workload_of(job, admission_count=2, pods_ready="True")
    wl["spec"]["active"] = True
    if label is None:
        del job["metadata"]["labels"][kueue.QUEUE_LABEL]
    else:
        job["metadata"]["labels"][kueue.QUEUE_LABEL] = label
    return job, wl


def slim(pods):
    return [slim_pod(p) for p in pods]


def two_passes(job, pods, workloads):
    """The pass that changes the phase returns early; the next one (its status written) takes the Kueue step."""
    first = plan_reconcile(governed(job, pods, workloads), PlannerSettings())
    if first.status is not None:
        job = {**job, "status": first.status}
    return first, plan_reconcile(governed(job, pods, workloads), PlannerSettings())


def suspend(job):
    job["spec"].setdefault("runPolicy", {})["suspend"] = True
    return job


def test_suspending_an_admitted_job_deactivates_its_workload_and_stops_its_pods():
    job, wl = admitted_running()
    plan = plan_reconcile(governed(suspend(job), slim(running_pods("a", 2)), [wl]), PlannerSettings())
    assert plan.status["phase"] == "Suspended"
    change = plan.workload_active
    assert (change.name, change.active) == (wl["metadata"]["name"], False)


def test_a_suspended_job_releases_its_admission_once_its_pods_are_gone():
    job, wl = admitted_running()
    job = suspend(job)
    job["status"].update({"phase": "Suspended", "attempt": 1})
    wl["spec"]["active"] = False
    old_pods = slim([make_pod("a", i, 0).terminating().build() for i in range(2)])
    assert plan_reconcile(governed(job, old_pods, [wl]), PlannerSettings()).workload_write is None, "pods still up"
    plan = plan_reconcile(governed(job, [], [wl]), PlannerSettings())
    assert plan.workload_write is not None and plan.workload_write.status["admission"] is None
    conditions = {c["type"]: c for c in plan.workload_write.status["conditions"]}
    assert conditions["QuotaReserved"]["status"] == "False" and conditions["PodsReady"]["reason"] == "WaitForStart"
    assert plan.create_pods == []


def test_resuming_activates_the_workload_and_queues_the_job():
    job, wl = admitted_running()
    job["status"].update({"phase": "Suspended", "attempt": 1})
    wl["spec"]["active"] = False
    wl["metadata"].setdefault("annotations", {})[kueue.DEACTIVATED_BY] = "true"  # as the suspension left it
    wl["status"] = {"conditions": []}
    first, plan = two_passes(job, [], [wl])
    assert first.status["phase"] == "Pending" and first.create_pods == []
    change = plan.workload_active
    assert (change.name, change.active) == (wl["metadata"]["name"], True)
    assert change.resource_version == wl["metadata"].get("resourceVersion", ""), "a precondition"
    assert plan.create_pods == [] and plan.status["reason"] == "Queued"


@pytest.mark.parametrize("name, evicted, want_in_message", [
    ("Kueue's waitForPodsReady deactivated it: left so", {"type": "Evicted", "status": "True",
     "reason": "Deactivated", "message": "exceeding the maximum number of re-queuing retries"}, "re-queuing"),
    ("an admin deactivated it: left so", None, "by Kueue or an administrator"),
])
def test_a_workload_someone_else_deactivated_is_never_reactivated(name, evicted, want_in_message):
    job, wl = admitted_running()
    job["status"].update({"phase": "Pending", "attempt": 1, "reason": "Queued"})
    wl["spec"]["active"] = False
    wl["status"] = {"conditions": [evicted] if evicted else []}
    plan = plan_reconcile(governed(job, [], [wl]), PlannerSettings())
    assert plan.workload_active is None, name
    assert plan.create_pods == []
    status = plan.status or job["status"]
    assert status["reason"] == "Queued" and want_in_message in status["conditions"][-1]["message"], name
    assert "set its spec.active to true" in status["conditions"][-1]["message"]


HELD_CASES = [
    # name, label now, pods, want governed queue, held
    ("label removed from an admitted running job: still governed", None, "running", "team", True),
    ("label changed on an admitted running job: the old queue", "other", "running", "team", True),
    ("label removed once the pods and quota are gone: followed", None, "none-no-quota", "", False),
    ("label unchanged", "team", "running", "team", False),
]


@pytest.mark.parametrize("name,label,pods,want,held", HELD_CASES, ids=[c[0] for c in HELD_CASES])
def test_a_queue_label_changed_while_admitted_is_held(name, label, pods, want, held):
    job, wl = admitted_running(label)
    if pods == "none-no-quota":
        wl["status"] = {"conditions": []}
        found = queue_label.governance(job, job["status"], [], [wl])
    else:
        found = queue_label.governance(job, job["status"], slim(running_pods("a", 2)), [wl])
    assert (found.queue, found.held is not None) == (want, held)


def test_removing_the_label_of_an_admitted_job_never_creates_unadmitted_pods():
    job, wl = admitted_running(None)
    job["spec"]["replicas"] = 3  # kubectl scale: a new shape, which only a new admission may run
    first, plan = two_passes(job, slim(running_pods("a", 2)), [wl])
    assert first.create_pods == [] and plan.create_pods == []
    assert plan.create_workload is not None and plan.create_workload["spec"]["queueName"] == "team"
    assert plan.status["conditions"] and any(c["type"] == queue_label.HELD and c["status"] == "True"
                                             for c in plan.status["conditions"])
    assert queue_label.HELD in {e.reason for e in plan.events}


def test_adding_the_label_to_a_running_ungoverned_job_never_stops_it():
    job = make_job("a").replicas(2).running().build()
    job["status"]["launchedAttempt"] = 0
    job["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team"}
    plan = plan_reconcile(governed(job, slim(running_pods("a", 2)), []), PlannerSettings())
    assert plan.delete_pods == [] and plan.create_workload is None
    assert plan.status is None or plan.status["phase"] == "Running"
    assert queue_label.HELD in {e.reason for e in plan.events}


def test_the_workload_priority_falls_back_to_the_clusters_global_default_class():
    """As the API server resolves the pods' priority (issue 27, item 7)."""
    import dataclasses

    job = queued_job()
    obs = governed(job)
    obs = dataclasses.replace(obs, kueue=dataclasses.replace(obs.kueue, priorities={"everyone": 500},
                                                             default_priority_class="everyone"))
    wl = plan_reconcile(obs, PlannerSettings()).create_workload
    assert wl["spec"]["priority"] == 500 and wl["spec"]["priorityClassRef"]["name"] == "everyone"


def test_a_template_edited_while_suspended_gets_a_workload_of_the_new_pod_set():
    """The name hashes counts and requests only (an operator upgrade never renames an admitted Workload); the
    pod set's hash annotation catches a new node selector (issue 27, item 7)."""
    job = queued_job()
    old = workload_of(job)
    job["spec"]["template"]["spec"]["nodeSelector"] = {"zone": "b"}
    plan = plan_reconcile(governed(job, [], [old]), PlannerSettings())
    assert plan.delete_workloads == [old["metadata"]["name"]]
    assert plan.create_workload["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] == {"zone": "b"}
    unchanged = plan_reconcile(governed(queued_job(), [], [old]), PlannerSettings())
    assert unchanged.delete_workloads == [] and unchanged.create_workload is None


def test_the_watch_cache_keeps_the_operators_deactivation_mark():
    """The first integration run of issue 35 item 9 failed here: the cache dropped the mark, and the resumed job's
    Workload was taken for someone else's deactivation."""
    job, wl = admitted_running()
    wl["metadata"]["annotations"] = {kueue.DEACTIVATED_BY: "true", "other": "x"}
    slim = kueue.slim_workload(wl)
    assert kueue.deactivated_by_us(slim) and "other" not in slim["metadata"]["annotations"]
