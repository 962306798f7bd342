"""The job's Lighthouse pod (replica_groups.build_lighthouse_pod, lighthouse_step): it passes Pod Security
`restricted` by default, the user may size it (spec.faultTolerance.lighthouse.resources), and a refused creation is
retried like a refused worker's, shown in status (PodsCreated=False with the API server's words) and a Warning
event, instead of being tried again at once, for ever (issue 54, defect 4; issue 56, item 3)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.recovery import pod_rejection, replica_groups
from ddpjob_operator.state.plan import PodRefusal
from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers.builders import JobRef, build_lighthouse_pod

from job_builders import NOW, NS, UID, make_job, observe, running_pods

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60)
LIGHTHOUSE = "a-lighthouse"
FORBIDDEN = ('pods "a-lighthouse" is forbidden: violates PodSecurity "restricted:latest": '
             'allowPrivilegeEscalation != false (container "lighthouse" must set '
             'securityContext.allowPrivilegeEscalation=false)')


def torchft(job, **lighthouse):
    job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT", "lighthouse": lighthouse}
    return job


def lighthouse_of(job) -> dict:
    return build_lighthouse_pod(JobRef("a", NS, UID), parse_spec(job.build()["spec"]))


def test_the_lighthouse_passes_pod_security_restricted_by_default():
    (container,) = lighthouse_of(torchft(make_job("a")))["spec"]["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 65532,  # the trainer's image may run as root: runAsNonRoot alone would keep it from starting
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["resources"]["limits"]["cpu"] and container["resources"]["limits"]["memory"]


def test_the_lighthouse_is_restricted_whatever_the_workers_template_says():
    """The template's pod securityContext is copied (its fsGroup, say), but the container's own settings win."""
    job = torchft(make_job("a")).pod_spec(securityContext={"runAsUser": 0, "fsGroup": 1000})
    pod = lighthouse_of(job)
    assert pod["spec"]["securityContext"] == {"runAsUser": 0, "fsGroup": 1000}
    assert pod["spec"]["containers"][0]["securityContext"]["runAsUser"] == 65532


def test_the_user_sizes_the_lighthouse():
    resources = {"requests": {"cpu": "250m", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    (container,) = lighthouse_of(torchft(make_job("a"), resources=resources))["spec"]["containers"]
    assert container["resources"] == resources
    (default,) = lighthouse_of(torchft(make_job("a")))["spec"]["containers"]
    assert default["resources"] == replica_groups.LIGHTHOUSE_RESOURCES


def refused(code=403, message=FORBIDDEN, seconds_ago=0.0, pod=LIGHTHOUSE):
    return PodRefusal(pod, code, message, 0, 1, NOW - timedelta(seconds=seconds_ago))


def plan_with(job, pods, refusal):
    return plan_reconcile(dataclasses.replace(observe(job.build(), pods), refusal=refusal), SETTINGS)


WANT_MESSAGE = f"attempt 0: pod a-lighthouse was rejected by the API server: {FORBIDDEN} (HTTP 403); retrying"


def test_a_refused_lighthouse_is_not_created_again_at_once_and_says_why():
    job = torchft(make_job("a").replicas(2)).running()
    plan = plan_with(job, running_pods("a", 2), refused())
    assert plan.create_pods == []
    assert plan.requeue_after == pytest.approx(pod_rejection.RETRY_SECONDS)
    created = next(c for c in plan.status["conditions"] if c["type"] == "PodsCreated")
    assert (created["status"], created["reason"], created["message"]) == ("False", "FailedCreate", WANT_MESSAGE)
    assert [(e.type, e.reason, e.message) for e in plan.events] == [("Warning", "FailedCreate", WANT_MESSAGE)]


def test_a_refused_lighthouse_is_tried_again_after_the_retry_wait_and_the_event_is_not_repeated():
    job = torchft(make_job("a").replicas(2)).running()
    first = plan_with(job, running_pods("a", 2), refused())
    job.status(**first.status)
    again = plan_with(job, running_pods("a", 2), refused(seconds_ago=pod_rejection.RETRY_SECONDS - 4))
    assert again.create_pods == [] and again.events == []
    assert again.requeue_after == pytest.approx(4)
    assert again.status is None, "nothing changed: no status write (the condition keeps its transition time)"
    later = plan_with(job, running_pods("a", 2), refused(seconds_ago=pod_rejection.RETRY_SECONDS + 1))
    assert [p["metadata"]["name"] for p in later.create_pods] == [LIGHTHOUSE]


def test_a_refused_worker_does_not_hold_a_lighthouse_that_is_running_back():
    job = torchft(make_job("a").replicas(2)).running()
    plan = plan_with(job, running_pods("a", 2), refused(pod="a-worker-1"))
    assert [p["metadata"]["name"] for p in plan.create_pods] == [LIGHTHOUSE]
