"""Phase and condition transitions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ddpjob_operator.state import conditions as c

from job_builders import NOW

LATER = NOW + timedelta(seconds=10)


def types(status):
    return {cond["type"]: cond["status"] for cond in status["conditions"]}


@pytest.mark.parametrize("name, start, phase, want_phase, want", [
    ("new job running", {}, c.RUNNING, c.RUNNING, {"Running": "True"}),
    ("running to restarting", {"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]},
     c.RESTARTING, c.RESTARTING, {"Running": "False", "Restarting": "True"}),
    ("restarting back to running",
     {"phase": "Restarting", "conditions": [{"type": "Running", "status": "False"},
                                            {"type": "Restarting", "status": "True"}]},
     c.RUNNING, c.RUNNING, {"Running": "True", "Restarting": "False"}),
    ("running to suspended", {"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]},
     c.SUSPENDED, c.SUSPENDED, {"Running": "False", "Suspended": "True"}),
    ("running to succeeded", {"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]},
     c.SUCCEEDED, c.SUCCEEDED, {"Running": "False", "Succeeded": "True"}),
    ("pending to failed", {"phase": "Pending", "conditions": []}, c.FAILED, c.FAILED, {"Failed": "True"}),
    ("succeeded is final", {"phase": "Succeeded", "conditions": [{"type": "Succeeded", "status": "True"}]},
     c.RUNNING, c.SUCCEEDED, {"Succeeded": "True"}),
    ("failed is final", {"phase": "Failed", "conditions": [{"type": "Failed", "status": "True"}]},
     c.RESTARTING, c.FAILED, {"Failed": "True"}),
    ("pending adds no conditions", {}, c.PENDING, c.PENDING, {}),
])
def test_enter_phase(name, start, phase, want_phase, want):
    out = c.enter_phase(start, phase, "Why", "because", NOW)
    assert out["phase"] == want_phase, name
    assert types(out) == want, name


def test_last_transition_time_moves_only_when_status_changes():
    first = c.set_condition([], "Running", "True", "A", "a", NOW)
    same = c.set_condition(first, "Running", "True", "B", "b", LATER)
    assert same[0]["lastTransitionTime"] == "2026-01-01T12:00:00Z"
    assert same[0]["reason"] == "B"
    flipped = c.set_condition(same, "Running", "False", "C", "c", LATER)
    assert flipped[0]["lastTransitionTime"] == "2026-01-01T12:00:10Z"


def test_enter_phase_does_not_mutate_its_input():
    start = {"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]}
    c.enter_phase(start, c.FAILED, "X", "x", NOW)
    assert start == {"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]}


def test_unknown_phase_is_an_error_that_names_the_choices():
    with pytest.raises(ValueError, match="unknown phase 'Sleeping'; expected one of Pending, Running"):
        c.enter_phase({}, "Sleeping", "X", "x", NOW)
