"""The Workload's PodsReady as Kueue's jobframework writes it (issue 27, item 1): `WaitForStart` whenever the
Workload is not admitted, so that after a preemption a re-admission is timed out by waitForPodsReady again. Pure:
every case goes through the planner, and the pods through `slim_pod` as the watch cache keeps them."""

from __future__ import annotations

import pytest
from job_builders import make_job, make_pod, running_pods
from test_kueue_admission import governed, queued_job, workload_of

from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.controller.watch_cache import slim_pod


def pods_ready_of(write):
    if write is None:
        return None
    cond = next((c for c in write.status["conditions"] if c["type"] == "PodsReady"), None)
    return None if cond is None else (cond["status"], cond["reason"])


def with_pods_ready(wl, status, reason):
    wl["status"]["conditions"] = [c for c in wl["status"]["conditions"] if c["type"] != "PodsReady"]
    wl["status"]["conditions"].append({"type": "PodsReady", "status": status, "reason": reason})
    return wl


def running_job(attempt):
    job = queued_job()
    job["status"] = make_job("a").replicas(2).running().build()["status"]
    job["status"].update({"attempt": attempt, "launchedAttempt": attempt, "queue": "team"})
    return job


CASES = [
    # name, attempt, admitted, pods running, PodsReady before, want written (None: no write)
    ("queued after a preemption: back to WaitForStart", 1, False, False, ("True", "Started"), ("False", "WaitForStart")),
    ("queued, already WaitForStart: no write", 1, False, False, ("False", "WaitForStart"), None),
    ("queued, never ran: no condition, no write", 0, False, False, None, None),
    ("re-admitted, pods not running yet: WaitForStart stays", 1, True, False, ("False", "WaitForStart"), None),
    ("admitted, first pass: WaitForStart", 0, True, False, None, ("False", "WaitForStart")),
    ("ran under this admission, a pod down: WaitForRecovery", 1, True, False, ("True", "Started"),
     ("False", "WaitForRecovery")),
    ("running: Started", 1, True, True, ("False", "WaitForStart"), ("True", "Started")),
    ("running again after a recovery: Recovered", 1, True, True, ("False", "WaitForRecovery"), ("True", "Recovered")),
]


@pytest.mark.parametrize("name,attempt,admitted,running,before,want", CASES, ids=[c[0] for c in CASES])
def test_pods_ready_as_kueues_jobframework_writes_it(name, attempt, admitted, running, before, want):
    job = running_job(attempt)
    wl = workload_of(job, admission_count=2 if admitted else None)
    if before is not None:
        with_pods_ready(wl, *before)
    pods = running_pods("a", 2, attempt=attempt)
    if not running:
        pods = [make_pod("a", i, attempt).pending().build() for i in range(2)] if admitted else []
    plan = plan_reconcile(governed(job, [slim_pod(p) for p in pods], [wl]), PlannerSettings())
    assert pods_ready_of(plan.workload_write) == want, (plan.workload_write, plan.status)


def test_clearing_an_admission_after_an_eviction_writes_wait_for_start():
    job = running_job(1)
    wl = with_pods_ready(workload_of(job, admission_count=2, evicted_reason="Preempted"), "True", "Started")
    plan = plan_reconcile(governed(job, [], [wl]), PlannerSettings())
    assert plan.workload_write.status["admission"] is None
    assert pods_ready_of(plan.workload_write) == ("False", "WaitForStart")
