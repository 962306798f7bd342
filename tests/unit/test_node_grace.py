"""node_grace: how long a NotReady node's pods wait before they count as lost, and the requeue at its end (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddpjob_operator.recovery.node_grace import any_in_grace, grace_left, requeue_for_grace
from ddpjob_operator.state.plan import Observed, Plan
from ddpjob_operator.timefmt import format_time

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
GRACE = 30.0


def node(ready: bool, since_ago: float) -> dict:
    return {"metadata": {"name": "n1"}, "status": {"conditions": [{
        "type": "Ready", "status": "True" if ready else "False",
        "lastTransitionTime": format_time(NOW - timedelta(seconds=since_ago))}]}}


def pod(on: str | None = "n1", made_ago: float = 60) -> dict:
    return {"metadata": {"name": "p", "creationTimestamp": format_time(NOW - timedelta(seconds=made_ago))},
            "spec": {"nodeName": on} if on else {}}


def observed(*nodes: dict) -> Observed:
    return Observed(job={}, pods=[], nodes={n["metadata"]["name"]: n for n in nodes}, service_exists=True, now=NOW)


@pytest.mark.parametrize("name, nodes, the_pod, want", [
    ("NotReady for 10 s: 20 s of grace left", [node(False, 10)], pod(), 20.0),
    ("Ready: no grace", [node(True, 10)], pod(), None),
    ("past its grace: lost, no more waiting", [node(False, 45)], pod(), None),
    ("down since before the pod was made: not this pod's loss", [node(False, 50)], pod(made_ago=40), None),
    ("its node is gone", [], pod(), None),
    ("never placed", [node(False, 10)], pod(on=None), None),
])
def test_grace_left(name, nodes, the_pod, want):
    assert grace_left(observed(*nodes), GRACE, the_pod) == want, name


def test_a_pod_in_grace_requeues_the_job_at_its_end():
    obs, plan = observed(node(False, 10)), Plan()
    assert requeue_for_grace(obs, GRACE, pod(), plan) is True
    assert plan.requeue_after == 20.0
    assert any_in_grace(obs, GRACE, [pod()]) and not any_in_grace(observed(node(True, 1)), GRACE, [pod()])
