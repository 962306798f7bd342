"""ddpjob_jobs{phase}: each pass reports its job's phase; the counts move in O(1) and a deleted job leaves."""

from __future__ import annotations

from ddpjob_operator import metrics


def counts() -> dict[str, float]:
    return {p: metrics.JOBS.labels(phase=p)._value.get() for p in metrics.PHASES}


def test_counts_follow_transitions_and_deletions():
    gauge = metrics.PhaseGauge()
    for key, phase in [(("n", "a"), "Pending"), (("n", "b"), "Running"), (("n", "a"), "Running"),
                       (("n", "a"), "Running"), (("n", "b"), "Succeeded"), (("n", "c"), None), (("n", "b"), None)]:
        gauge.set(key, phase)
    assert {p: c for p, c in counts().items() if c} == {"Running": 1}
