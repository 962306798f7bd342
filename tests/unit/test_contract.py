"""Names two packages must agree on but may not import from each other: the local node agent (a dev-only kubelet
stand-in) and the trainer hold their own copies, and these tests hold the copies equal to the operator's."""

from ddpjob_localnode.agent import DDPJOB_LABELS
from ddpjob_operator import api
from ddpjob_operator.workers import builders


def test_the_local_nodes_log_labels_are_the_operators_pod_labels():
    pod_labels = builders.worker_labels("j", index=1, attempt=2)
    assert dict(DDPJOB_LABELS) == {"job": api.LABEL_JOB_NAME, "attempt": api.LABEL_ATTEMPT,
                                   "replica": api.LABEL_REPLICA_INDEX}
    assert {label for _, label in DDPJOB_LABELS} <= set(pod_labels)


def test_the_local_nodes_log_context_reads_a_real_worker_pod():
    from ddpjob_localnode.agent import pod_context

    pod = {"metadata": {"namespace": "ns", "name": "j-worker-1", "labels": builders.worker_labels("j", 1, 2)}}
    assert pod_context(pod) == "job=j attempt=2 replica=1 pod=ns/j-worker-1"


def test_the_local_node_writes_the_termination_log_where_the_operator_points_torchrun():
    from ddpjob_localnode.launch_plan import DEFAULT_TERMINATION_LOG

    from ddpjob_operator.workers.rendezvous import rendezvous_env
    from ddpjob_operator.state.spec import parse_spec

    env = rendezvous_env(job="j", namespace="ns", job_uid="u", spec=parse_spec({}), index=0, attempt=0, restarts=0)
    assert {e["name"]: e.get("value") for e in env}["TORCHELASTIC_ERROR_FILE"] == DEFAULT_TERMINATION_LOG


def test_the_operator_reads_the_times_the_local_node_writes():
    from datetime import datetime, timezone

    from ddpjob_localnode.node_object import format_time as node_time

    from ddpjob_operator.timefmt import parse_time

    now = datetime(2026, 11, 23, 9, 30, 15, 123456, tzinfo=timezone.utc)
    assert parse_time(node_time(now)) == now.replace(microsecond=0)
