"""Admission by Kueue, as the planner decides it (kueue.py): pure, no cluster. The integration suite
(tests/integration/test_kueue.py) runs the same paths against a real Kueue."""

from __future__ import annotations

import dataclasses

from job_builders import NOW, make_job, make_pod, observe, running_pods

from ddpjob_operator.admission import kueue
from ddpjob_operator.workers.builders import JobRef, build_worker_pod, owner_reference
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.state.spec import parse_spec

FLAVORS = {"h100": {"nodeLabels": {"gpu": "h100"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]}}


def queued_job(replicas=2, elastic=None):
    job = make_job("a").replicas(replicas).gpus(8)
    if elastic:
        job = job.elastic(*elastic)
    built = job.build()
    built["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team"}
    return built


def workload_of(job, conditions=(), admission_count=None, evicted_reason=None, pods_ready=None):
    spec = parse_spec(job["spec"])
    ref = JobRef("a", "ns", job["metadata"]["uid"])
    template = build_worker_pod(ref, spec, index=0, attempt=0, restarts=0, size=spec.replicas)
    min_count = spec.elastic.min_replicas if spec.elastic else None
    name = kueue.workload_name("a", job["metadata"]["uid"], spec.replicas, min_count, template)
    wl = kueue.build_workload(job=job, queue="team", owner=owner_reference(ref), name=name, template=template,
                              count=spec.replicas, min_count=min_count, priorities={})
    wl["metadata"]["resourceVersion"] = "7"
    status: dict = {"conditions": [{"type": t, "status": s, "reason": t, "message": f"{t} says so"}
                                   for t, s in conditions]}
    if admission_count is not None:
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": kueue.POD_SET, "count": admission_count, "flavors": {"nvidia.com/gpu": "h100"}}]}
        status["conditions"] += [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                                 {"type": "Admitted", "status": "True", "reason": "Admitted"}]
    if evicted_reason:
        status["conditions"].append({"type": "Evicted", "status": "True", "reason": evicted_reason,
                                     "message": f"evicted: {evicted_reason}"})
    if pods_ready is not None:
        status["conditions"].append({"type": "PodsReady", "status": pods_ready, "reason": "x"})
    wl["status"] = status
    return wl


def governed(job, pods=(), workloads=()):
    view = kueue.View(workloads=list(workloads), flavors=FLAVORS, priorities={"high": 1000})
    return dataclasses.replace(observe(job, list(pods)), kueue=view, gang=False)


def queued_condition(status):
    return next(c for c in status["conditions"] if c["type"] == kueue.QUEUED)


def test_a_new_job_gets_one_workload_and_no_pods():
    job = queued_job(replicas=4, elastic=(2, 4))
    job["spec"]["template"]["spec"]["priorityClassName"] = "high"
    plan = plan_reconcile(governed(job), PlannerSettings())
    assert plan.create_pods == [] and plan.status["phase"] == "Pending" and plan.status["reason"] == "Queued"
    assert queued_condition(plan.status)["status"] == "True" and plan.status["queue"] == "team"
    wl = plan.create_workload
    (pod_set,) = wl["spec"]["podSets"]
    assert (pod_set["count"], pod_set["minCount"], wl["spec"]["queueName"]) == (4, 2, "team")
    assert wl["spec"]["priority"] == 1000 and wl["spec"]["priorityClassRef"]["name"] == "high"
    assert wl["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["nvidia.com/gpu"] == "8"
    assert [e.reason for e in plan.events] == ["Queued"]


def test_a_pending_workload_keeps_the_job_pod_less_with_kueues_own_words():
    job = queued_job()
    wl = workload_of(job, conditions=[("QuotaReserved", "False")])
    plan = plan_reconcile(governed(job, workloads=[wl]), PlannerSettings())
    assert plan.create_pods == [] and plan.create_workload is None
    assert "QuotaReserved says so" in queued_condition(plan.status)["message"]


def test_admitted_at_three_of_four_the_pods_are_three_and_carry_the_flavor():
    job = queued_job(replicas=4, elastic=(2, 4))
    wl = workload_of(job, admission_count=3)
    plan = plan_reconcile(governed(job, workloads=[wl]), PlannerSettings())
    assert len(plan.create_pods) == 3
    pod = plan.create_pods[0]["spec"]
    assert pod["nodeSelector"] == {"gpu": "h100"} and {"key": "gpu", "operator": "Exists"} in pod["tolerations"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["PET_NNODES"] == "3"


def test_elastic_growth_stops_at_the_admitted_count():
    job = queued_job(replicas=4, elastic=(2, 4))
    job["status"] = make_job("a").replicas(4).running(replicas=3).build()["status"]
    job["status"].update(launchedAttempt=0, desiredReplicas=4, sizeText="3/4")
    wl = workload_of(job, admission_count=3, pods_ready="True")
    obs = dataclasses.replace(governed(job, running_pods("a", 3), [wl]), capacity=4)
    plan = plan_reconcile(obs, PlannerSettings())
    assert plan.status is None or plan.status["replicas"] == 3
    assert plan.delete_pods == []


def test_an_eviction_stops_the_group_without_spending_the_budget_then_gives_the_quota_back():
    job = queued_job()
    job["status"] = make_job("a").replicas(2).running().build()["status"]
    job["status"]["launchedAttempt"] = 0
    wl = workload_of(job, admission_count=2, evicted_reason="Preempted")
    plan = plan_reconcile(governed(job, running_pods("a", 2), [wl]), PlannerSettings())
    s = plan.status
    assert (s["phase"], s["reason"], s["attempt"], s["restarts"], s.get("platformRestarts", 0)) == (
        "Pending", "Queued", 1, 0, 0)
    assert "Preempted" in queued_condition(s)["message"]
    assert [e.reason for e in plan.events] == ["Evicted"] and plan.events[0].type == "Warning"
    assert plan.workload_write is None  # its pods still run: the quota is not free yet

    later = plan_reconcile(governed({**job, "status": s}, running_pods("a", 2), [wl]), PlannerSettings())
    assert sorted(later.delete_pods) == ["a-worker-0", "a-worker-1"]  # SIGTERM: the trainer checkpoints

    gone = plan_reconcile(governed({**job, "status": s}, [], [wl]), PlannerSettings())
    write = gone.workload_write
    assert write is not None and write.status["admission"] is None and write.resource_version == "7"
    conditions = {c["type"]: c for c in write.status["conditions"]}
    assert conditions["QuotaReserved"]["status"] == "False" and conditions["Requeued"]["status"] == "True"
    assert conditions["Admitted"]["status"] == "False"


def test_pods_ready_follows_the_group():
    job = queued_job()
    job["status"] = make_job("a").replicas(2).running().build()["status"]
    job["status"]["launchedAttempt"] = 0
    wl = workload_of(job, admission_count=2)
    plan = plan_reconcile(governed(job, running_pods("a", 2), [wl]), PlannerSettings())
    conditions = {c["type"]: c for c in plan.workload_write.status["conditions"]}
    assert conditions["PodsReady"]["status"] == "True"
    ready = workload_of(job, admission_count=2, pods_ready="True")
    assert plan_reconcile(governed(job, running_pods("a", 2), [ready]), PlannerSettings()).workload_write is None


def test_a_finished_job_finishes_its_workload():
    job = queued_job()
    job["status"] = make_job("a").replicas(2).running().build()["status"]
    job["status"]["launchedAttempt"] = 0
    wl = workload_of(job, admission_count=2, pods_ready="True")
    done = [make_pod("a", i).succeeded().build() for i in range(2)]
    plan = plan_reconcile(governed(job, done, [wl]), PlannerSettings())
    assert plan.status["phase"] == "Succeeded"
    after = plan_reconcile(governed({**job, "status": plan.status}, done, [wl]), PlannerSettings())
    finished = {c["type"]: c for c in after.workload_write.status["conditions"]}["Finished"]
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")


def test_a_new_shape_is_a_new_workload_and_the_old_one_goes():
    job = queued_job(replicas=2)
    old = workload_of(job, admission_count=2)
    job["spec"]["replicas"] = 3
    plan = plan_reconcile(governed(job, workloads=[old]), PlannerSettings())
    assert plan.delete_workloads == [old["metadata"]["name"]]
    assert plan.create_workload["spec"]["podSets"][0]["count"] == 3


def test_without_the_label_or_without_kueue_nothing_changes():
    job = make_job("a").replicas(2).gpus(8).build()
    plan = plan_reconcile(dataclasses.replace(observe(job), gang=False), PlannerSettings())
    assert plan.create_workload is None and len(plan.create_pods) == 2
    assert NOW is not None
