"""Percent done and ETA in status.progress (progress_eta.py, pure): from totalSteps and the step rate between
two progress writes of the same attempt."""

import pytest

from ddpjob_operator.tracking.no_progress import progress_after_scrape
from ddpjob_operator.tracking.progress_eta import duration, with_eta
from ddpjob_operator.timefmt import parse_time


def written(step, at, attempt=0, **more):
    return {"step": step, "attempt": attempt, "advanceTime": at, "updateTime": at, **more}


def test_rate_between_two_writes_gives_the_time_left():
    old = written(100, "2026-01-01T00:00:00Z", totalSteps=1000)
    new = written(200, "2026-01-01T00:00:20Z", totalSteps=1000)  # 5 steps/s, 800 to go
    got = with_eta(old, new)
    assert (got["percent"], got["etaSeconds"], got["text"]) == (20, 160, "20% ETA 2m40s")


@pytest.mark.parametrize("old, why", [
    ({}, "the first write has nothing to measure a rate against"),
    (written(100, "2026-01-01T00:00:00Z", attempt=1), "a new attempt's reload and warm-up are not its rate"),
    (written(100, "2026-01-01T00:00:00Z", attempt=2, inPlaceRestarts=1), "nor those of a restart in place"),
])
def test_no_eta_without_a_rate_of_this_attempt(old, why):
    got = with_eta(old, written(200, "2026-01-01T00:00:20Z", attempt=2, totalSteps=1000))
    assert "etaSeconds" not in got and got["text"] == "20%", why


def test_a_write_without_an_advance_keeps_the_last_estimate():
    old = written(200, "2026-01-01T00:00:20Z", totalSteps=1000, etaSeconds=160)
    new = {**old, "loss": 0.5, "updateTime": "2026-01-01T00:00:30Z"}
    assert with_eta(old, new)["etaSeconds"] == 160


def test_without_a_total_nothing_is_derived_and_stale_figures_go():
    old = written(100, "2026-01-01T00:00:00Z", percent=10, etaSeconds=9, text="10% ETA 9s")
    got = with_eta(old, {**written(200, "2026-01-01T00:00:20Z"), "percent": 10, "text": "10% ETA 9s"})
    assert not {"percent", "etaSeconds", "text"} & set(got)


def test_the_end_is_100_percent_and_no_time_left():
    got = with_eta(written(990, "2026-01-01T00:00:00Z"), written(1000, "2026-01-01T00:00:02Z", totalSteps=1000))
    assert (got["percent"], got["etaSeconds"], got["text"]) == (100, 0, "100%")


def test_the_scrape_path_writes_them():
    old = written(100, "2026-01-01T00:00:00Z", totalSteps=400)
    now = parse_time("2026-01-01T00:00:10Z")
    got = progress_after_scrape(old, {"step": 150, "totalSteps": 400, "updateTime": "2026-01-01T00:00:10Z"}, 0, now)
    assert got is not None and (got["percent"], got["etaSeconds"]) == (37, 50)


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (59.6, "1m00s"), (245, "4m05s"), (3720, "1h02m")])
def test_durations_read_like_kubectl_ages(seconds, text):
    assert duration(seconds) == text
