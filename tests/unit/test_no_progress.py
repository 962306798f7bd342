"""The no-progress decision (spec.runPolicy.progressDeadlineSeconds), table-driven, and what a scrape writes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ddpjob_operator.tracking.no_progress import Liveness, decide_no_progress, progress_after_scrape

from job_builders import NOW, ago, make_job, make_pod, observe

DEADLINE = 60


def progress(step, advanced, attempt=0):
    return {"step": step, "attempt": attempt, "advanceTime": ago(advanced)}


def scrape(step, seen=0):
    return {"step": step, "updateTime": ago(seen)}


@pytest.mark.parametrize(
    "name, phase, attempt, status_progress, scraped, watching, want_hung, want_wait",
    [
        ("advancing", "Running", 0, progress(20, 5), scrape(20), 300, False, 55.0),
        ("stuck below the deadline", "Running", 0, progress(20, 59), scrape(20), 300, False, 1.0),
        ("stuck past it, worker 0 answering", "Running", 0, progress(20, 61), scrape(20), 300, True, None),
        ("a new attempt that has not reported yet", "Running", 1, progress(20, 600, attempt=0), None, 300, False, None),
        ("a suspended job", "Suspended", 0, progress(20, 600), scrape(20), 300, False, None),
        ("a finished job", "Succeeded", 0, progress(20, 600), scrape(20), 300, False, None),
        ("no deadline", "Running", 0, progress(20, 600), scrape(20), 300, None, None),
        (
            "silent since the last answer past the deadline",
            "Running",
            0,
            progress(20, 200),
            scrape(20, seen=61),
            300,
            True,
            None,
        ),
        ("silent, but this operator only began looking", "Running", 0, progress(20, 600), None, 10, False, 50.0),
        ("never reported in this attempt", "Running", 0, None, None, 600, False, None),
    ],
)
def test_decide_no_progress(name, phase, attempt, status_progress, scraped, watching, want_hung, want_wait):
    deadline = None if want_hung is None else DEADLINE
    hung, wait = decide_no_progress(
        deadline, phase, attempt, status_progress, scraped, NOW - timedelta(seconds=watching), NOW, pod="a-worker-0"
    )
    assert (hung is not None) is bool(want_hung), name
    assert wait == want_wait, name
    if hung is not None:
        assert (hung.kind, hung.reason, hung.pod) == ("NoProgress", "NoProgress", "a-worker-0")
        assert "step 20" in hung.message and "progressDeadlineSeconds 60" in hung.message


def test_the_message_says_where_and_for_how_long():
    hung, _ = decide_no_progress(60, "Running", 0, progress(150, 75), scrape(150), None, NOW)
    assert hung.message == "step 150 has not advanced for 75s (progressDeadlineSeconds 60)"
    hung, _ = decide_no_progress(60, "Running", 0, progress(150, 100), scrape(151, seen=70), None, NOW,
                                 liveness=Liveness(trainer_ready=False))
    assert hung.message == (
        "worker 0 has not answered its metrics port for 70s, at step 150, and its kubelet reports the trainer not "
        "ready (the readiness probe on the metrics port fails) (progressDeadlineSeconds 60)"
    )


@pytest.mark.parametrize("name, liveness, want_hung, want_unknown", [
    ("answered, then silent; the kubelet says not ready: a hang", Liveness(trainer_ready=False), True, False),
    ("silent, but the kubelet says ready: the operator is cut off, not a hang", Liveness(trainer_ready=True), False,
     True),
    ("silent, no container status yet: not a hang", Liveness(trainer_ready=None), False, True),
    ("the operator has not been scraping (overloaded): never a hang", Liveness(trainer_ready=False,
                                                                             scrapes_current=False), False, False),
])
def test_silence_is_a_hang_only_with_the_kubelets_word(name, liveness, want_hung, want_unknown):
    unknown: list[str] = []
    hung, wait = decide_no_progress(60, "Running", 0, progress(150, 100), scrape(151, seen=70), None, NOW,
                                    liveness=liveness, unknown=unknown)
    assert (hung is not None, bool(unknown)) == (want_hung, want_unknown), name
    if want_unknown:
        assert "the operator cannot reach it" in unknown[0] and "not counted as a hang" in unknown[0]
    if not want_hung:
        assert wait == 60.0, "looked at again later"


def ending(step, advanced, eta, total=2000):
    return {**progress(step, advanced), "totalSteps": total, "etaSeconds": eta}


@pytest.mark.parametrize("name, status_progress, want_hung, want_wait", [
    # The user loop of tests/e2e/test_local_jobs.py, full suite, load 10: last read at step 1939 of 2000, then the
    # workers exited and the agent waited at torchrun's exit barrier for the other pod's, silent and not ready.
    ("due to end 30 s ago: torchrun's exit barrier", ending(1939, 31, eta=1), False, 300 - 30.0),
    ("its final step reported", ending(2000, 70, eta=0), False, 300 - 70.0),
    ("past the barrier's own timeout: a hang", ending(1939, 400, eta=1), True, None),
    ("silent halfway, its end far off: a hang", ending(1000, 70, eta=600), True, None),
    ("answering, stuck one step short of its end: a hang", ending(1999, 70, eta=1), True, None),
    ("no total reported: a hang", progress(150, 70), True, None),
])
def test_silence_when_the_run_was_due_to_end_waits_out_torchruns_exit_barrier(name, status_progress, want_hung,
                                                                               want_wait):
    hung, wait = decide_no_progress(15, "Running", 0, status_progress, scrape(status_progress["step"], seen=20),
                                    None, NOW, liveness=Liveness(trainer_ready=False))
    assert (hung is not None) is want_hung, name
    assert wait == pytest.approx(want_wait) if want_wait is not None else wait is None, name


@pytest.mark.parametrize(
    "name, old, scraped, attempt, want",
    [
        (
            "first report of an attempt starts the clock",
            None,
            scrape(5),
            0,
            {"step": 5, "updateTime": ago(0), "attempt": 0, "advanceTime": ago(0)},
        ),
        (
            "a new step moves the clock",
            progress(5, 30),
            scrape(6),
            0,
            {"step": 6, "updateTime": ago(0), "attempt": 0, "advanceTime": ago(0)},
        ),
        ("the same step keeps it and writes nothing", progress(5, 30), scrape(5), 0, None),
        (
            "a new loss at the same step is written, the clock kept",
            progress(5, 30),
            {**scrape(5), "loss": 0.3},
            0,
            {"step": 5, "attempt": 0, "advanceTime": ago(30), "loss": 0.3, "updateTime": ago(0)},
        ),
        ("no answer writes nothing", progress(5, 30), None, 0, None),
    ],
)
def test_progress_after_scrape(name, old, scraped, attempt, want):
    assert progress_after_scrape(old, scraped, attempt, NOW) == want, name


def test_a_hung_job_restarts_with_reason_no_progress_and_spends_the_budget():
    import dataclasses

    from ddpjob_operator.planner import plan_reconcile

    job = make_job("a").replicas(2).restart_backoff(0).running().status(progress=progress(150, 90))
    job.obj["spec"]["runPolicy"]["progressDeadlineSeconds"] = 60
    obs = dataclasses.replace(
        observe(job.build(), [make_pod("a", 0).build(), make_pod("a", 1).build()]), progress=scrape(150)
    )
    plan = plan_reconcile(obs)
    s = plan.status
    assert (s["phase"], s["restarts"], s["attempt"]) == ("Restarting", 1, 1)
    assert s["lastFailure"]["kind"] == "NoProgress" and s["lastFailure"]["pod"] == "a-worker-0"
    assert [e.reason for e in plan.events] == ["Restarting"]
    assert "step 150 has not advanced for 90s" in plan.events[0].message
    assert [(o.metric, o.labels) for o in plan.observations] == [("group_restarts", (("reason", "NoProgress"),))]


def test_a_job_the_operator_cannot_reach_shows_progress_unknown_once_and_is_not_restarted():
    import dataclasses

    from ddpjob_operator.planner import plan_reconcile

    job = make_job("a").replicas(2).restart_backoff(0).running().status(progress=progress(150, 100))
    job.obj["spec"]["runPolicy"]["progressDeadlineSeconds"] = 60
    worker0 = make_pod("a", 0).build()
    worker0["status"]["containerStatuses"] = [{"name": "trainer", "ready": True}]
    obs = dataclasses.replace(observe(job.build(), [worker0, make_pod("a", 1).build()]),
                              progress=scrape(151, seen=70))
    plan = plan_reconcile(obs)
    s = plan.status
    assert (s["phase"], s["restarts"], s["attempt"]) == ("Running", 0, 0)
    unknown = next(c for c in s["conditions"] if c["type"] == "ProgressUnknown")
    assert (unknown["status"], unknown["reason"]) == ("True", "MetricsUnreachable")
    assert [e.reason for e in plan.events] == ["ProgressUnknown"]
    assert [o.metric for o in plan.observations] == ["progress_unknown"]
    again_job = make_job("a").replicas(2).restart_backoff(0).running().status(**s)
    again_job.obj["spec"]["runPolicy"]["progressDeadlineSeconds"] = 60
    again = plan_reconcile(dataclasses.replace(obs, job=again_job.build()))
    assert again.events == [], "said once"
    assert next(c for c in again.status["conditions"] if c["type"] == "ProgressUnknown")["status"] == "True" \
        if again.status else True
    worker0["status"]["containerStatuses"] = [{"name": "trainer", "ready": False}]
    hung = plan_reconcile(dataclasses.replace(obs, pods=[worker0, make_pod("a", 1).build()]))
    assert (hung.status["phase"], hung.status["lastFailure"]["kind"]) == ("Restarting", "NoProgress")
