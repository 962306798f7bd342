"""A pod the API server refuses is an observation; the next pass's planner decides: invalid fails the job, other
refusals hold the missing pods back and are retried. Metric observations are recorded under the names the chart
uses."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from ddpjob_operator import metrics
from ddpjob_operator.state.plan import Observation, PodRefusal
from ddpjob_operator.planner import plan_reconcile
from ddpjob_operator.recovery.pod_rejection import RETRY_SECONDS

from job_builders import NOW, ago, make_job, make_pod, observe


def refused(code: int, message: str = "spec.containers[0].name: Invalid", attempt: int = 0, generation: int = 1,
            seconds_ago: float = 0.0) -> PodRefusal:
    return PodRefusal("a-worker-0", code, message, attempt, generation, NOW - timedelta(seconds=seconds_ago))


def pending_job(attempt: int = 0):
    """Two replicas whose pods are about to be created (the attempt's status is written, no pod exists yet)."""
    return make_job("a").replicas(2).status(phase="Pending", attempt=attempt, restarts=attempt, replicas=2,
                                            desiredReplicas=2, conditions=[])


def plan_with(job, refusal, pods=None):
    return plan_reconcile(dataclasses.replace(observe(job.build(), pods), refusal=refusal))


def names(plan):
    return [p["metadata"]["name"] for p in plan.create_pods]


def test_without_a_refusal_the_pods_are_created():
    plan = plan_with(pending_job(), None)
    assert names(plan) == ["a-worker-0", "a-worker-1"]


@pytest.mark.parametrize("code", [400, 422])
def test_an_invalid_pod_fails_the_job_with_the_servers_words(code):
    plan = plan_with(pending_job(), refused(code, "x" * 2000))
    assert plan.create_pods == [] and plan.status["phase"] == "Failed"
    failed = plan.status["conditions"][-1]
    assert (failed["type"], failed["reason"]) == ("Failed", "InvalidPodTemplate")
    assert failed["message"].startswith("pod a-worker-0 was rejected by the API server: xxx")
    assert len(failed["message"]) == 1024
    assert plan.status["completionTime"] == ago(0)
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "InvalidPodTemplate")]
    assert [o.metric for o in plan.observations] == ["jobs_failed"]


@pytest.mark.parametrize("phase", [None, "Pending", "Running"])
def test_a_stored_template_whose_quantity_does_not_parse_fails_the_job_and_creates_nothing(phase):
    """The CRD refuses "lots" at apply; a DDPJob stored before that rule reached the planner, which failed every
    pass on it (ValueError) and retried forever. Now it fails once, naming the field."""
    job = make_job("a").replicas(2).elastic(1, 2) if phase is None else pending_job()
    if phase == "Running":
        job.status(phase="Running", attempt=0, restarts=0, replicas=2, desiredReplicas=2, conditions=[])
    job.obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "lots"}}
    pods = None if phase != "Running" else [make_pod("a", i).build() for i in range(2)]
    plan = plan_with(job, None, pods)
    assert plan.create_pods == [] and plan.status["phase"] == "Failed"
    failed = plan.status["conditions"][-1]
    assert (failed["type"], failed["reason"]) == ("Failed", "InvalidPodTemplate")
    assert failed["message"].startswith(
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: 'lots' is not a Kubernetes quantity")
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "InvalidPodTemplate")]


@pytest.mark.parametrize("name, template_change, message", [
    ("grace period with a unit", lambda t: t["spec"].update(terminationGracePeriodSeconds="30s"),
     "spec.template.spec.terminationGracePeriodSeconds: '30s' is not a whole number of seconds"),
    ("labels not a map of strings", lambda t: t.setdefault("metadata", {}).update(labels={"tier": 1}),
     "spec.template.metadata.labels[tier]: 1 is not a string"),
    ("annotations a list", lambda t: t.setdefault("metadata", {}).update(annotations=["a"]),
     "spec.template.metadata.annotations: ['a'] is not a map of names to strings"),
    ("tolerations not a list", lambda t: t["spec"].update(tolerations={"key": "gpu"}),
     "spec.template.spec.tolerations: {'key': 'gpu'} is not a list of tolerations"),
])
@pytest.mark.parametrize("phase", [None, "Pending", "Running"])
def test_a_stored_template_of_the_wrong_types_fails_the_job_naming_the_field(name, template_change, message, phase):
    """Each made every planner pass raise (retried forever, no status, no event) in a DDPJob stored before the CRD
    typed them (issue 54, defect 11)."""
    job = make_job("a").replicas(2).elastic(1, 2) if phase is None else pending_job()
    if phase == "Running":
        job.status(phase="Running", attempt=0, restarts=0, replicas=2, desiredReplicas=2, conditions=[])
    template_change(job.obj["spec"]["template"])
    pods = None if phase != "Running" else [make_pod("a", i).build() for i in range(2)]
    plan = plan_with(job, None, pods)
    assert plan.create_pods == [] and plan.status["phase"] == "Failed", name
    failed = plan.status["conditions"][-1]
    assert (failed["type"], failed["reason"]) == ("Failed", "InvalidPodTemplate")
    assert failed["message"].startswith(message), failed["message"]
    assert failed["message"].endswith("fix the template and apply the job again")
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "InvalidPodTemplate")]


@pytest.mark.parametrize("code", [403, 429, 500])
def test_other_refusals_hold_the_pods_back_then_retry(code):
    job = pending_job()
    plan = plan_with(job, refused(code, "exceeded quota: gpus"))
    assert plan.create_pods == [] and plan.status["phase"] == "Pending"
    assert plan.requeue_after == RETRY_SECONDS
    shown = next(c for c in plan.status["conditions"] if c["type"] == "PodsCreated")
    assert (shown["status"], shown["reason"]) == ("False", "FailedCreate")
    assert "exceeded quota: gpus" in shown["message"] and plan.status["reason"] == "FailedCreate"
    assert [(e.type, e.reason) for e in plan.events] == [("Warning", "FailedCreate")]

    # The same refusal seen again (the status now shows it): no second event.
    job.status(**plan.status)
    again = plan_with(job, refused(code, "exceeded quota: gpus", seconds_ago=4))
    assert again.events == [] and again.create_pods == [] and again.requeue_after == RETRY_SECONDS - 4

    # Once the wait is over the pods are created again, and once they all exist the condition turns True.
    retry = plan_with(job, refused(code, "exceeded quota: gpus", seconds_ago=RETRY_SECONDS))
    assert names(retry) == ["a-worker-0", "a-worker-1"]
    pods = [make_pod("a", i).pending().created(1).build() for i in (0, 1)]
    seen = plan_with(job, refused(code, "exceeded quota: gpus", seconds_ago=RETRY_SECONDS + 1), pods)
    shown = next(c for c in seen.status["conditions"] if c["type"] == "PodsCreated")
    assert shown["status"] == "True" and seen.status["reason"] != "FailedCreate"


@pytest.mark.parametrize("stale", [{"attempt": 1}, {"generation": 2}])
def test_a_refusal_of_an_earlier_attempt_or_spec_says_nothing(stale):
    job = pending_job(attempt=2)
    job.obj["metadata"]["generation"] = 3
    fields = {"attempt": 2, "generation": 3, **stale}
    plan = plan_with(job, refused(422, attempt=fields["attempt"], generation=fields["generation"]))
    assert names(plan) == ["a-worker-0", "a-worker-1"] and plan.events == []


def test_a_suspended_job_is_not_failed_by_a_refusal():
    job = pending_job().suspend()
    plan = plan_with(job, refused(422))
    assert plan.status["phase"] == "Suspended"


def test_observations_reach_the_named_series():
    before = metrics.GROUP_RESTARTS.labels(reason="NodeLost")._value.get()
    metrics.record(Observation("group_restarts", 1.0, (("reason", "NodeLost"),)))
    assert metrics.GROUP_RESTARTS.labels(reason="NodeLost")._value.get() == before + 1
    assert metrics.GROUP_RESTARTS._name == "ddpjob_group_restarts"  # exposed as ddpjob_group_restarts_total


def test_unknown_observation_is_an_error_that_names_it():
    with pytest.raises(ValueError, match="unknown metric observation 'jobs_teleported'"):
        metrics.record(Observation("jobs_teleported"))


def test_phase_gauge_counts_each_job_once():
    gauge = metrics.PhaseGauge()
    gauge.set(("ns", "a"), "Running")
    gauge.set(("ns", "b"), "Running")
    gauge.set(("ns", "a"), "Failed")
    assert metrics.JOBS.labels(phase="Running")._value.get() == 1
    assert metrics.JOBS.labels(phase="Failed")._value.get() == 1
    gauge.set(("ns", "a"), None)
    assert metrics.JOBS.labels(phase="Failed")._value.get() == 0
