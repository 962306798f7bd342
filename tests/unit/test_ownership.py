"""Our objects told from objects of the same name (ownership.py), through the planner's decisions."""

import dataclasses
from datetime import timedelta

import pytest
from job_builders import NOW, make_job, make_pod, observe

from ddpjob_operator.state.plan import ServiceConflict
from ddpjob_operator.planner import PlannerSettings, plan_reconcile

SETTINGS = PlannerSettings()


def earlier_jobs_pod(index, terminating=False, tracked=True, owner_kind="DDPJob"):
    pod = make_pod("a", index)
    if terminating:
        pod.terminating(since=1)
    if not tracked:
        pod.untracked()
    built = pod.build()
    built["metadata"]["uid"] = f"old-pod-{index}"
    built["metadata"]["ownerReferences"] = [
        {"apiVersion": "ddpjob.dev/v1alpha1", "kind": owner_kind, "name": "a", "uid": "uid-of-the-old-a",
         "controller": True}]
    return built


def plan_with(job, pods=(), foreign=(), service=True, conflict=None, now=NOW):
    obs = dataclasses.replace(observe(job.build(), list(pods), service=service, now=now), foreign_pods=list(foreign),
                              service_conflict=conflict)
    return plan_reconcile(obs, SETTINGS)


@pytest.mark.parametrize("name, foreign, want_released, want_created", [
    ("an earlier job's pods hold the names: freed, and the new pods wait",
     [earlier_jobs_pod(0), earlier_jobs_pod(1, terminating=True)], ["old-pod-0", "old-pod-1"], []),
    ("already freed and going: still waited for", [earlier_jobs_pod(0, terminating=True, tracked=False)], [], []),
    ("someone's own pod under the label and name: not touched; the create is tried (and refused, read back)",
     [earlier_jobs_pod(0, tracked=False, owner_kind="StatefulSet")], [], ["a-worker-0", "a-worker-1"]),
    ("nothing foreign", [], [], ["a-worker-0", "a-worker-1"]),
])
def test_a_new_job_frees_an_earlier_jobs_pods_and_waits_for_their_names(name, foreign, want_released, want_created):
    plan = plan_with(make_job("a").replicas(2), foreign=foreign)
    assert plan.release_foreign_pods == want_released, name
    assert [p["metadata"]["name"] for p in plan.create_pods] == want_created, name
    assert plan.delete_pods == [] and plan.force_delete_pods == [], name  # the garbage collector's, not ours
    if not want_created:
        assert plan.requeue_after == 1.0, name


def test_a_finished_job_also_frees_an_earlier_jobs_pods():
    plan = plan_with(make_job("a").status(phase="Succeeded", attempt=0, restarts=0, replicas=1),
                     foreign=[earlier_jobs_pod(0)])
    assert plan.release_foreign_pods == ["old-pod-0"]


def test_a_service_that_is_not_the_jobs_blocks_it_with_a_reason_said_once_then_is_tried_again():
    conflict = ServiceConflict("Service ns/a exists and is not this job's", NOW)
    job = make_job("a").replicas(2)
    plan = plan_with(job, service=False, conflict=conflict, now=NOW + timedelta(seconds=1))
    assert (plan.create_service, plan.create_pods) == (None, [])
    assert plan.status["reason"] == "ServiceConflict"
    cond = next(c for c in plan.status["conditions"] if c["type"] == "PodsCreated")
    assert (cond["status"], cond["reason"]) == ("False", "ServiceConflict")
    assert "Service ns/a exists and is not this job's" in cond["message"]
    assert [e.reason for e in plan.events] == ["ServiceConflict"]
    assert plan.requeue_after == 14.0
    again = plan_with(make_job("a").replicas(2).status(**plan.status), service=False, conflict=conflict,
                      now=NOW + timedelta(seconds=5))
    assert again.events == []
    later = plan_with(make_job("a").replicas(2).status(**plan.status), service=False, conflict=conflict,
                      now=NOW + timedelta(seconds=16))
    assert later.create_service is not None  # the other Service may be gone: try again
