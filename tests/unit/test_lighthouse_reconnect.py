"""Whether a TorchFT job's groups reconnect to a new Lighthouse is read from what the trainer says it can do, the
capability series ddp_trainer_capability{name="lighthouse_reconnect"} 1, into status.progress.lighthouseReconnect
(tracking/progress.py), not from ddp_trainer_replica_groups, which every bundled TorchFT trainer serves, those that
cannot reconnect too (issue 54, defect 8). The trainer's side: tests/trainer/test_capability_series.py."""

from __future__ import annotations

import pytest

from ddpjob_operator import api
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.recovery import replica_groups
from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.tracking.progress import parse_progress
from ddpjob_operator.workers.builders import JobRef, build_lighthouse_pod

from job_builders import NS, UID, make_job, observe, running_pods

STEP = "# TYPE ddp_trainer_step gauge\nddp_trainer_step 50\n"
GROUPS = "# TYPE ddp_trainer_replica_groups gauge\nddp_trainer_replica_groups 2\n"


def capability(name: str, value: str = "1") -> str:
    return f'# TYPE {api.CAPABILITY_SERIES} gauge\n{api.CAPABILITY_SERIES}{{name="{name}",rank="0"}} {value}\n'


@pytest.mark.parametrize("name, text, want", [
    ("the capability", STEP + GROUPS + capability(api.LIGHTHOUSE_RECONNECT), True),
    ("replica groups alone say nothing of it", STEP + GROUPS, None),
    ("another capability", STEP + capability("something_else"), None),
    ("declared 0: cannot", STEP + capability(api.LIGHTHOUSE_RECONNECT, "0"), None),
])
def test_the_capability_is_read_from_its_own_series(name, text, want):
    assert parse_progress(text).get("lighthouseReconnect") is want, name


@pytest.mark.parametrize("name, progress, want", [
    ("declared in this attempt", {"attempt": 0, "replicaGroups": 2, "lighthouseReconnect": True}, True),
    ("replica groups but no capability", {"attempt": 0, "replicaGroups": 2}, False),
    ("declared in an earlier attempt", {"attempt": -1, "lighthouseReconnect": True}, False),
    ("nothing read yet", None, False),
])
def test_reconnects_to_a_new_lighthouse(name, progress, want):
    status = {"attempt": 0, **({"progress": progress} if progress else {})}
    assert replica_groups.reconnects_to_a_new_lighthouse(status) is want, name


def ended_lighthouse():
    pod = build_lighthouse_pod(JobRef("a", NS, UID), parse_spec(make_job("a").build()["spec"] | {
        "faultTolerance": {"mode": "TorchFT"}}))
    pod["metadata"]["uid"] = "lh-1"
    pod["status"] = {"phase": "Failed"}
    return pod


@pytest.mark.parametrize("progress, want_attempt", [
    ({"attempt": 0, "step": 50, "replicaGroups": 2}, 1),  # a trainer serving groups that cannot reconnect: recreated
    ({"attempt": 0, "step": 50, "replicaGroups": 2, "lighthouseReconnect": True}, 0),  # trains on
])
def test_an_ended_lighthouse_recreates_the_group_unless_its_trainer_says_it_reconnects(progress, want_attempt):
    job = make_job("a").replicas(2).restart_backoff(0)
    job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT"}
    job.running().status(progress={**progress, "updateTime": "2026-11-25T09:59:00Z"})
    plan = plan_reconcile(observe(job.build(), [*running_pods("a", 2), ended_lighthouse()]),
                          PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60))
    status = plan.status or job.build()["status"]
    assert status["attempt"] == want_attempt
