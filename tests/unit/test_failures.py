"""Which pods of the current attempt have failed, and how."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from ddpjob_operator.recovery import failures as f

from job_builders import NOW, make_node, make_pod

def preempted(reason="PreemptionByScheduler"):
    pod = make_pod().terminating().build()
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": reason,
                                    "message": "default-scheduler: preempting to accommodate a higher priority pod"}]
    return pod


NODES = {"node-0": make_node("node-0"), "down": make_node("down", ready=False, since=60),
         "flapping": make_node("flapping", ready=False, since=5)}


@pytest.mark.parametrize("name, pod, want_kind, want_code", [
    ("running", make_pod().build(), None, None),
    ("pending unscheduled", make_pod().pending().build(), None, None),
    ("succeeded", make_pod().succeeded().build(), None, None),
    ("exit 1", make_pod().failed(1).build(), f.EXIT_CODE, 1),
    ("exit 137", make_pod().failed(137, reason="OOMKilled").build(), f.SIGNAL, 137),
    ("signal field", make_pod().failed(0, signal=9).build(), f.SIGNAL, 0),
    ("evicted", make_pod().evicted().build(), f.EVICTED, None),
    ("deleted by someone", make_pod().terminating().build(), f.DELETED, None),
    ("preempted by the scheduler: deleted with DisruptionTarget", preempted(), f.EVICTED, None),
    ("deleted by the taint manager (its node lost or out of service)", preempted("DeletionByTaintManager"), f.DELETED,
     None),
    ("node NotReady past grace", make_pod().on_node("down").build(), f.NODE_LOST, None),
    ("node NotReady within grace", make_pod().on_node("flapping").build(), None, None),
    ("node gone", make_pod().on_node("vanished").build(), f.NODE_LOST, None),
    ("placed on an already NotReady node", {**make_pod().on_node("down").build(), "metadata": {
        **make_pod().build()["metadata"], "creationTimestamp": "2026-01-01T11:59:30Z"}}, None, None),
    ("node went NotReady after the pod started", {**make_pod().on_node("down").build(), "metadata": {
        **make_pod().build()["metadata"], "creationTimestamp": "2026-01-01T11:58:00Z"}}, f.NODE_LOST, None),
    ("failed without container status", {**make_pod().build(), "status": {"phase": "Failed"}}, f.UNKNOWN, None),
    ("phase Unknown", {**make_pod().build(), "status": {"phase": "Unknown"}}, f.NODE_LOST, None),
])
def test_classify_pod_failure(name, pod, want_kind, want_code):
    failure = f.classify_pod_failure(pod, NODES, NOW, node_lost_grace_seconds=30)
    assert (failure.kind if failure else None, failure.exit_code if failure else None) == (want_kind, want_code)


def test_termination_message_is_carried_and_trimmed():
    pod = make_pod().failed(1, message="x" * 5000).build()
    failure = f.classify_pod_failure(pod, NODES, NOW, 30)
    assert len(failure.message) == f.MESSAGE_LIMIT and failure.message.endswith("...")


def test_trainer_container_exit_code_preferred_over_sidecar():
    pod = make_pod().build()
    pod["spec"]["containers"] = [{"name": "sidecar"}, {"name": "trainer"}]
    pod["status"] = {"phase": "Failed", "containerStatuses": [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 2}}},
        {"name": "trainer", "state": {"terminated": {"exitCode": 3, "message": "boom"}}}]}
    failure = f.classify_pod_failure(pod, NODES, NOW, 30)
    assert (failure.exit_code, failure.message) == (3, "boom")


def test_a_peer_that_stopped_on_request_is_never_the_root_cause_of_a_deletion():
    """kubectl delete pod worker-1: every rank stops together, checkpoint written, and worker-0 exits 143 before
    the kubelet finishes worker-1 (whose deletion time then moves past it). The deletion is the cause: a platform
    failure, not the trainer's (the e2e delete-pod test saw worker-0's 143 chosen)."""
    stopped = f.Failure(pod="a-worker-0", kind=f.SIGNAL, exit_code=143, at=NOW - timedelta(seconds=5))
    deleted = f.Failure(pod="a-worker-1", kind=f.DELETED, reason="Terminating", at=NOW)
    assert f.root_cause([stopped, deleted]) is deleted
    crashed = f.Failure(pod="a-worker-0", kind=f.SIGNAL, exit_code=137, at=NOW - timedelta(seconds=5))
    assert f.root_cause([crashed, deleted]) is crashed  # an OOM kill is a cause of its own


def test_root_cause_is_the_earliest_failure():
    late = f.classify_pod_failure(make_pod("a", 0).failed(1, finished=1).build(), NODES, NOW, 30)
    early = f.classify_pod_failure(make_pod("a", 1).failed(137, finished=10).build(), NODES, NOW, 30)
    assert f.root_cause([late, early]).pod == "a-worker-1"


ERROR_FILE = ('{"message": {"message": "RuntimeError: dataset shard missing", "extraInfo": '
              '{"py_callstack": "Traceback ...", "timestamp": "1"}, "errorCode": %d}}')
KILLED_LOG = """[rank1]: step=40/300 loss=0.31
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
  <NO_OTHER_FAILURES>
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_03:00:00
  host      : train-worker-1
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
"""


@pytest.mark.parametrize("name, message, want_kind, want_code, want_text", [
    ("worker exit code from torchrun's error file", ERROR_FILE % 3, f.EXIT_CODE, 3, "dataset shard missing"),
    ("worker disk full (28) in the error file", ERROR_FILE % 28, f.EXIT_CODE, 28, "RuntimeError"),
    ("worker SIGKILLed: root-cause table in the log tail", KILLED_LOG, f.SIGNAL, 137, "SIGKILL"),
    ("plain text message keeps the pod's code", "Traceback: boom", f.EXIT_CODE, 1, "boom"),
    ("JSON without errorCode keeps the pod's code", '{"message": "x"}', f.EXIT_CODE, 1, "x"),
])
def test_torchrun_root_cause_replaces_its_generic_exit_1(name, message, want_kind, want_code, want_text):
    failure = f.classify_pod_failure(make_pod().failed(1, message=message).build(), NODES, NOW, 30)
    assert (failure.kind, failure.exit_code) == (want_kind, want_code)
    assert want_text in failure.message


def test_sigkilled_worker_is_retryable_under_exit_code_policy():
    from ddpjob_operator.recovery.restart_policy import RESTART, RestartBudget, decide_restart

    failure = f.classify_pod_failure(make_pod().failed(1, message=KILLED_LOG).build(), NODES, NOW, 30)
    assert decide_restart("ExitCode", failure, RestartBudget(limit=3, used=0)).action == RESTART


MISSING_SCRIPT_LOG = """/usr/bin/python3.11: can't open file '/work/trian.py': [Errno 2] No such file or directory
E1124 10:37:38.056000 7105 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 0 (pid: 7127) of binary: /usr/bin/python3.11
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 2 (pid: 7127)
  error_file: <N/A>
"""


@pytest.mark.parametrize("name, log, want_first_line", [
    ("missing script: python's own line", MISSING_SCRIPT_LOG,
     "/usr/bin/python3.11: can't open file '/work/trian.py': [Errno 2] No such file or directory"),
    ("only the last 5 lines before torchrun's report",
     "\n".join(f"line {i}" for i in range(20)) + "\n" + MISSING_SCRIPT_LOG.split("\n", 1)[1], "line 15"),
    ("the tail lost the worker's lines", MISSING_SCRIPT_LOG.split("\n", 1)[1], None),
])
def test_the_failing_workers_last_lines_lead_the_message(name, log, want_first_line):
    failure = f.classify_pod_failure(make_pod().failed(1, message=log).build(), NODES, NOW, 30)
    assert failure.exit_code == 2, name
    if want_first_line is None:
        assert failure.message.startswith("Root Cause"), name
    else:
        assert failure.message.splitlines()[0] == want_first_line, name
        assert "Root Cause" in failure.message, name


def test_the_workers_lines_are_bounded():
    log = "x" * 5000 + "\n" + MISSING_SCRIPT_LOG.split("\n", 1)[1]
    assert len(f.worker_last_lines(log)) == f.WORKER_TAIL_CHARS


# Rank 0's error file when rank 1's process was SIGKILLed on another node (two torchrun agents, gloo, torch 2.15).
PEER_RESET = json.dumps({"message": {"message": (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
    "[127.0.0.1]:10672: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in "
    "the application. Check the logs of the remote worker before reporting an error. GLHF!"),
    "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1"}, "errorCode": 1}})
NCCL_REMOTE = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3690, remote process exited "
               "or there was a network error, NCCL version 2.28.9\nncclRemoteError: A call failed possibly due to a "
               "network error or a remote process exiting prematurely.")


@pytest.mark.parametrize("name, first, then, want", [
    # The e2e kubectl ddpj test under load: worker-1's trainer was SIGKILLed, worker-0 read the reset and its pod
    # ended 2 s before worker-1's agent noticed its own worker's death; worker-0 was named.
    ("gloo reset beside a SIGKILL", ("a-worker-0", PEER_RESET), ("a-worker-1", KILLED_LOG), "a-worker-1"),
    ("NCCL remote error beside an exception", ("a-worker-1", NCCL_REMOTE), ("a-worker-0", ERROR_FILE % 3),
     "a-worker-0"),
    ("the trainer's PEER_LOST exit beside a crash", ("a-worker-0", ERROR_FILE % 142), ("a-worker-2", ERROR_FILE % 1),
     "a-worker-2"),
    ("two peers' symptoms: the earliest", ("a-worker-1", PEER_RESET), ("a-worker-0", NCCL_REMOTE), "a-worker-1"),
    ("two causes of their own: the earliest", ("a-worker-1", ERROR_FILE % 3), ("a-worker-0", KILLED_LOG),
     "a-worker-1"),
])
def test_a_peers_symptom_is_not_the_root_cause_even_when_its_pod_ended_first(name, first, then, want):
    (pod_a, message_a), (pod_b, message_b) = first, then
    early = f.classify_pod_failure(make_pod("a", int(pod_a[-1])).failed(1, finished=10, message=message_a).build(),
                                   NODES, NOW, 30)
    late = f.classify_pod_failure(make_pod("a", int(pod_b[-1])).failed(1, finished=8, message=message_b).build(),
                                  NODES, NOW, 30)
    assert early.at < late.at
    assert f.root_cause([early, late]).pod == want
    assert f.root_cause([late, early]).pod == want
