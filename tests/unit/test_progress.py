"""Progress is read from worker 0's `metrics` port only while Running, and parsed from ddp_trainer_* series."""

from __future__ import annotations

import pytest

from ddpjob_operator.tracking.progress import metrics_url, parse_progress

from job_builders import make_job, make_pod, observe

TEXT = """# HELP ddp_trainer_step Last optimizer step
# TYPE ddp_trainer_step gauge
ddp_trainer_step{rank="0"} 120.0
# TYPE ddp_trainer_loss gauge
ddp_trainer_loss{rank="0"} 0.25
# TYPE ddp_trainer_samples_per_second gauge
ddp_trainer_samples_per_second 512.5
# TYPE other gauge
other 1
"""


def test_parse_progress():
    assert parse_progress(TEXT) == {"step": 120, "loss": 0.25, "samplesPerSecond": 512.5}


def worker0(port_name="metrics", phase="Running", attempt=0):
    pod = make_pod("a", 0, attempt).build()
    pod["spec"]["containers"][0]["ports"] = [{"name": port_name, "containerPort": 9400}]
    pod["status"] = {"phase": phase, "podIP": "10.0.0.7"}
    return pod


@pytest.mark.parametrize("name, job, pods, want", [
    ("running with metrics port", make_job("a").running(), [worker0()], "http://10.0.0.7:9400/metrics"),
    ("no metrics port", make_job("a").running(), [worker0(port_name="other")], None),
    ("job not running", make_job("a").running().status(phase="Restarting"), [worker0()], None),
    ("pod of an old attempt", make_job("a").running(attempt=1), [worker0(attempt=0)], None),
    ("pod pending", make_job("a").running(), [worker0(phase="Pending")], None),
])
def test_metrics_url(name, job, pods, want):
    assert metrics_url(observe(job.build(), pods)) == want, name


@pytest.mark.parametrize("loss, step, want", [
    ("NaN", "7", {"step": 7, "lossNonFinite": "NaN"}),
    ("+Inf", "7", {"step": 7, "lossNonFinite": "+Inf"}),
    ("-Inf", "7", {"step": 7, "lossNonFinite": "-Inf"}),
    ("0.5", "+Inf", {"loss": 0.5}),  # an infinite step is no step (int() of it raised OverflowError)
    ("0.5", "NaN", {"loss": 0.5}),
])
def test_a_non_finite_value_never_reaches_the_status(loss, step, want):
    text = f"# TYPE ddp_trainer_step gauge\nddp_trainer_step {step}\n# TYPE ddp_trainer_loss gauge\nddp_trainer_loss {loss}\n"
    assert parse_progress(text) == want


def test_the_latest_answer_says_whether_the_loss_is_a_number():
    from datetime import datetime, timezone

    from ddpjob_operator.tracking.no_progress import progress_after_scrape

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    finite = {"step": 5, "loss": 0.5, "attempt": 0}
    nan = progress_after_scrape(finite, {"step": 6, "lossNonFinite": "NaN"}, 0, now)
    assert nan["lossNonFinite"] == "NaN" and "loss" not in nan
    back = progress_after_scrape(nan, {"step": 7, "loss": 0.25}, 0, now)
    assert back["loss"] == 0.25 and "lossNonFinite" not in back
