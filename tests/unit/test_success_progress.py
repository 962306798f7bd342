"""A Succeeded job shows the step worker 0 finished at (its termination message), not the last scrape before the
exit: the success policy and failures.finished_step, table-driven against the pure planner."""

from __future__ import annotations

import json

import pytest

from ddpjob_operator.recovery import failures
from ddpjob_operator.planner import PlannerSettings, plan_reconcile

from job_builders import ago, make_job, make_pod, observe

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60)
FINISHED = json.dumps({"finished": {"step": 3000}})


def succeeded(index: int, message: str = "") -> dict:
    pod = make_pod("a", index).succeeded().build()
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message
    return pod


SCRAPED = {"step": 2899, "loss": 0.25, "attempt": 0, "updateTime": ago(20), "advanceTime": ago(20)}

DONE = {"percent": 100, "etaSeconds": 0, "text": "100%"}  # a Succeeded job is done, said total or not
CASES = [
    # name, status.progress before, worker 0's message, worker 1's message, want progress after
    ("the final step replaces an older scrape", SCRAPED, FINISHED, "",
     {**SCRAPED, "step": 3000, "advanceTime": ago(0), **DONE}),
    ("a job never scraped gets its final step", None, FINISHED, "",
     {"step": 3000, "attempt": 0, "advanceTime": ago(0), **DONE}),
    ("no final step: the last scrape stays, done", SCRAPED, "", "", {**SCRAPED, **DONE}),
    ("never scraped, no final step: no progress", None, "", "", None),
    ("a scrape already at the end stays", {**SCRAPED, "step": 3000}, FINISHED, "", {**SCRAPED, "step": 3000, **DONE}),
    ("the end is 100% done with no time left", {**SCRAPED, "totalSteps": 3000, "percent": 96, "etaSeconds": 9,
                                                "text": "96% ETA 9s"}, FINISHED, "",
     {**SCRAPED, "step": 3000, "advanceTime": ago(0), "totalSteps": 3000, "percent": 100, "etaSeconds": 0,
      "text": "100%"}),
    ("only worker 0's message counts", SCRAPED, "", json.dumps({"finished": {"step": 5000}}), {**SCRAPED, **DONE}),
    ("an unreadable message is ignored", SCRAPED, '{"finished": {"step": "3000"}', "", {**SCRAPED, **DONE}),
    ("a user's loop with no total (issue 35: STEP 2941, empty PROGRESS)", {**SCRAPED, "step": 2941},
     json.dumps({"finished": {"step": 3000}}), "", {**SCRAPED, "step": 3000, "advanceTime": ago(0), **DONE}),
]


@pytest.mark.parametrize("name, before, message0, message1, want", CASES, ids=[c[0] for c in CASES])
def test_a_succeeded_job_shows_its_final_step(name, before, message0, message1, want):
    job = make_job("a").replicas(2).running()
    if before is not None:
        job = job.status(progress=before)
    plan = plan_reconcile(observe(job.build(), [succeeded(0, message0), succeeded(1, message1)]), SETTINGS)
    assert plan.status["phase"] == "Succeeded", name
    assert plan.status.get("progress") == want, name


STEP_CASES = [
    ("the trainer's record", FINISHED, 0, 3000),
    ("a failed container's message is no success", FINISHED, 1, None),
    ("torchrun's error file", json.dumps({"message": {"message": "x", "errorCode": 1}}), 0, None),
    ("plain text", "done", 0, None),
    ("not an object", "[1]", 0, None),
    ("a bool is no step", json.dumps({"finished": {"step": True}}), 0, None),
    ("a negative step", json.dumps({"finished": {"step": -1}}), 0, None),
    ("empty", "", 0, None),
]


@pytest.mark.parametrize("name, message, exit_code, want", STEP_CASES, ids=[c[0] for c in STEP_CASES])
def test_finished_step(name, message, exit_code, want):
    pod = make_pod("a", 0).failed(exit_code=exit_code, message=message).build() if exit_code else succeeded(0, message)
    assert failures.finished_step(pod) == want, name
