"""torchrun's --max-restarts under restartStrategy InPlace (rendezvous.max_restarts) never binds before the job's
own budgets, which the operator counts (in_place.py) and which start over after each healthy
runPolicy.healthyResetSeconds. A limit fixed when the pod is made from the budget then left (backoffLimit left +
platformFailureLimit + 1: 24 by default) ended pod 0's agent after ~24 events in one attempt, although the job's
budgets, reset in between, allowed every one of them (issue 54, defect 10)."""

from __future__ import annotations

import pytest

from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers import rendezvous
from ddpjob_operator.workers.builders import JobRef, build_worker_pod

from job_builders import NS, UID, make_job

YEAR = 365 * 24 * 3600


def in_place(job, torchft=False):
    job._run()["restartStrategy"] = "InPlace"
    if torchft:
        job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT"}
    return job


def limit_of(job, restarts=0) -> int:
    spec = parse_spec(job.build()["spec"])
    pod = build_worker_pod(JobRef("a", NS, UID), spec, index=0, attempt=0, restarts=restarts)
    return int({e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}["PET_MAX_RESTARTS"])


@pytest.mark.parametrize("torchft", [False, True], ids=["group", "TorchFT replica groups"])
@pytest.mark.parametrize("restarts", [0, 2, 5])
def test_the_agents_limit_does_not_depend_on_the_budget_left_when_the_pod_was_made(torchft, restarts):
    job = in_place(make_job("a").replicas(2).backoff_limit(3), torchft)
    assert limit_of(job, restarts) == rendezvous.TORCHRUN_MAX_RESTARTS


@pytest.mark.parametrize("backoff, platform, reset", [
    (3, 20, 3600),  # the defaults: 24 events a healthy hour
    (100, 100, 60),  # a generous budget that starts over every minute
])
def test_no_pod_lives_through_the_restarts_its_agent_would_stop_at(backoff, platform, reset):
    """Each budget window holds at most backoffLimit + platformFailureLimit + 1 events (one more fails the job), and
    one starts over only after healthyResetSeconds without a failure: ten years of a pod's life in windows."""
    job = in_place(make_job("a").replicas(2).backoff_limit(backoff))
    job._run().update(platformFailureLimit=platform, healthyResetSeconds=reset)
    most_in_ten_years = (10 * YEAR // reset + 1) * (backoff + platform + 1)
    assert limit_of(job) > most_in_ten_years


def test_recreate_still_ends_the_pod_at_the_first_failed_process():
    assert limit_of(make_job("a").replicas(2)) == 0
    assert limit_of(make_job("a").replicas(2).elastic(1, 2, max_restarts=2)) == 2  # deprecated, torchrun's own
