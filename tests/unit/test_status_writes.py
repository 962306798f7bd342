"""Progress-only status writes back off per job, and a cluster-wide budget caps them (status_writes.py; issue 27
item 8). Pure: a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from job_builders import NOW

from ddpjob_operator.state.status_writes import WriteBudget, progress_due_in, progress_only, write_interval

MIN = 60.0


@pytest.mark.parametrize("name, ran, deadline, want", [
    ("just started: every scrape", 30, None, 10.0),
    ("five minutes in: every 30 s", 300, None, 30.0),
    ("an hour in: capped at 60 s", 3600, None, 60.0),
    ("a 60 s progress deadline: at least three writes per deadline", 3600, 60, 20.0),
    ("never seen running", None, None, 10.0),
])
def test_write_interval_backs_off_with_the_running_time(name, ran, deadline, want):
    since = None if ran is None else NOW - timedelta(seconds=ran)
    assert write_interval(since, NOW, 10.0, MIN, deadline) == want, name


def progress(step, ago, attempt=0, **extra):
    return {"step": step, "attempt": attempt, "updateTime": (NOW - timedelta(seconds=ago)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), **extra}


@pytest.mark.parametrize("name, old, new, want", [
    ("written 30 s ago, due at 60", progress(10, 30), progress(20, 0), 30.0),
    ("written 60 s ago: now", progress(10, 60), progress(20, 0), 0.0),
    ("a new attempt: now", progress(10, 5), progress(1, 0, attempt=1), 0.0),
    ("the loss turned NaN: now", progress(10, 5), progress(11, 0, lossNonFinite="NaN"), 0.0),
    ("never written: now", None, progress(1, 0), 0.0),
])
def test_progress_is_written_when_due(name, old, new, want):
    assert progress_due_in(old, new, 60.0, NOW) == want, name


def test_progress_only_tells_a_progress_write_from_a_transition():
    old = {"phase": "Running", "progress": {"step": 1}}
    assert progress_only(old, {"phase": "Running", "progress": {"step": 2}})
    assert not progress_only(old, {"phase": "Failed", "progress": {"step": 2}})
    assert not progress_only(old, dict(old))


def test_the_budget_holds_back_progress_but_never_a_transition():
    now = [0.0]
    budget = WriteBudget(2, lambda: now[0])
    running = {"phase": "Running", "progress": {"step": 1}}
    moved = {"phase": "Running", "progress": {"step": 2}}
    assert budget.take(moved, running) == 0 and budget.take(moved, running) == 0
    assert budget.take(moved, running) == pytest.approx(0.5), "third progress write in the same instant waits"
    assert budget.take({"phase": "Failed"}, running) == 0, "a transition is never held"
    now[0] += 1.0  # one second: two tokens back, less the transition's debt
    assert budget.take(moved, running) == 0
    assert WriteBudget(0, lambda: 0.0).take(moved, running) == 0, "0: no cap"
