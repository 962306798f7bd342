"""A pod the API server refuses as invalid fails the job; other refusals are retried. Metric observations are
recorded under the names the chart uses."""

from __future__ import annotations

import pytest

from ddpjob_operator import metrics
from ddpjob_operator.plan import Observation
from ddpjob_operator.pod_rejection import reject_unschedulable_template

from job_builders import NOW, ago


@pytest.mark.parametrize("code, want_phase", [(422, "Failed"), (400, "Failed"), (403, None), (429, None), (500, None)])
def test_only_invalid_pods_fail_the_job(code, want_phase):
    status = {"phase": "Pending", "attempt": 0, "launchedAttempt": 0, "conditions": []}
    out = reject_unschedulable_template(status, NOW, "a-worker-0", code, "spec.containers[0].name: Invalid")
    assert (out or {}).get("phase") == want_phase


def test_rejection_message_and_bookkeeping():
    status = {"phase": "Pending", "attempt": 2, "launchedAttempt": 2, "conditions": []}
    out = reject_unschedulable_template(status, NOW, "a-worker-0", 422, "x" * 2000)
    failed = out["conditions"][-1]
    assert (failed["type"], failed["reason"]) == ("Failed", "InvalidPodTemplate")
    assert failed["message"].startswith("pod a-worker-0 was rejected by the API server: xxx")
    assert len(failed["message"]) == 1024
    assert out["completionTime"] == ago(0)
    assert "launchedAttempt" not in out and out["attempt"] == 2


def test_observations_reach_the_named_series():
    before = metrics.GROUP_RESTARTS.labels(reason="NodeLost")._value.get()
    metrics.record(Observation("group_restarts", 1.0, (("reason", "NodeLost"),)))
    assert metrics.GROUP_RESTARTS.labels(reason="NodeLost")._value.get() == before + 1
    assert metrics.GROUP_RESTARTS._name == "ddpjob_group_restarts"  # exposed as ddpjob_group_restarts_total


def test_unknown_observation_is_an_error_that_names_it():
    with pytest.raises(ValueError, match="unknown metric observation 'jobs_teleported'"):
        metrics.record(Observation("jobs_teleported"))


def test_phase_gauge_counts_each_job_once():
    gauge = metrics.PhaseGauge()
    gauge.set(("ns", "a"), "Running")
    gauge.set(("ns", "b"), "Running")
    gauge.set(("ns", "a"), "Failed")
    assert metrics.JOBS.labels(phase="Running")._value.get() == 1
    assert metrics.JOBS.labels(phase="Failed")._value.get() == 1
    gauge.set(("ns", "a"), None)
    assert metrics.JOBS.labels(phase="Failed")._value.get() == 0
