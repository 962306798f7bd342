"""The trainer declares what it can do in one series, read by the operator: the real builder (TrainerMetrics) and
the operator's real parser (tracking/progress.parse_progress) agree on it (issue 54, defect 8)."""

from __future__ import annotations

from prometheus_client import generate_latest

from ddp_trainer import metrics
from ddpjob_operator import api
from ddpjob_operator.tracking.progress import parse_progress


def test_the_names_are_the_operators():
    assert (metrics.CAPABILITY_SERIES, metrics.LIGHTHOUSE_RECONNECT) == (api.CAPABILITY_SERIES,
                                                                        api.LIGHTHOUSE_RECONNECT)


def test_a_declared_capability_reaches_the_operators_progress():
    served = metrics.TrainerMetrics("job", rank=0)
    served.step.set(7)
    assert "lighthouseReconnect" not in parse_progress(generate_latest(served.registry).decode())
    served.add_capability(metrics.LIGHTHOUSE_RECONNECT)
    served.add_capability(metrics.LIGHTHOUSE_RECONNECT)  # idempotent: one series
    progress = parse_progress(generate_latest(served.registry).decode())
    assert progress["lighthouseReconnect"] is True and progress["step"] == 7


def test_the_replica_group_trainer_declares_that_it_reconnects():
    """The bundled replica-group trainer is what reconnects (torchft's quorum retries on a new connection, and the
    Lighthouse watch for one gone silent): it declares so where it builds them."""
    import inspect

    from ddp_trainer import replica_groups

    assert "add_capability(LIGHTHOUSE_RECONNECT)" in inspect.getsource(replica_groups.ReplicaGroups.wrap)
