"""Kueue's priority preemption with real trainer processes (the local node runs the pods as torchrun groups): the
low-priority job is evicted, its trainer gets SIGTERM and writes a checkpoint, the job waits Queued with no budget
spent, and when the high-priority job is over it is admitted again and resumes from that checkpoint: the trainer's
own resume line says so. A real Kueue manager (hack/kueue.sh) admits both; the quota is the node's CPU."""

from __future__ import annotations

import time

import pytest

from conftest import apply_job, digits_job, job_status
from ddpjob_localnode.recovery import parse_trainer_log
from support import kueue, localnode
from support.cluster import wait_until
from support.operator import OperatorProcess
from test_local_jobs import JOB_TIMEOUT, run_to_end, worker0_log

STEPS = 400


@pytest.fixture(scope="module")
def kueue_up(cluster):
    kueue.start(cluster, "5m")


@pytest.fixture
def kueue_operator(cluster, crds, local_node, kueue_up, namespace, tmp_path):
    """Started after Kueue's API exists: the operator looks for it once, at start."""
    proc = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log").start()
    wait_until(lambda: "Kueue found" in proc.log(), timeout=30, what="the operator to find Kueue")
    yield proc
    proc.stop()
    kueue.delete_queues(cluster, namespace)


def queued_digits(name: str, steps: int, priority_class: str | None = None) -> dict:
    # No periodic checkpoint before the end: the only one a resumed run can start from is the one SIGTERM wrote.
    job = digits_job(name, steps=steps, every=10 * steps)
    job["metadata"]["labels"] = {kueue.QUEUE_LABEL: "q"}
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}  # what Kueue's quota counts
    if priority_class:
        pod["priorityClassName"] = priority_class
    return job


def progress_step(cluster, namespace: str, job: str) -> int:
    return int((job_status(cluster, namespace, job).get("progress") or {}).get("step") or 0)


def test_a_preempted_job_checkpoints_on_sigterm_waits_queued_and_resumes_from_that_checkpoint(
        cluster, kueue_operator, namespace):
    kueue.queue(cluster, namespace, namespace, {"cpu": "200m"}, {localnode.LABEL: "true"},
                preemption={"withinClusterQueue": "LowerPriority"})
    high_class = f"{namespace}-high"[-63:]
    cluster.kubectl("apply", "-f", "-", input=(
        f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {high_class}}}\nvalue: 1000\n"))
    try:
        apply_job(cluster, namespace, queued_digits("low", STEPS))
        wait_until(lambda: progress_step(cluster, namespace, "low") >= 40, timeout=JOB_TIMEOUT, interval=0.5,
                   what="low training")
        reached = progress_step(cluster, namespace, "low")

        apply_job(cluster, namespace, queued_digits("high", 60, priority_class=high_class))
        status = wait_until(lambda: (lambda s: s if kueue.is_queued(s) else None)(
            job_status(cluster, namespace, "low")), timeout=120, interval=0.5, what="low evicted and Queued")
        assert "Preempted" in kueue.condition(status, "Queued")["message"], status
        assert (status["restarts"], status["platformRestarts"]) == (0, 0), status

        assert run_to_end(cluster, namespace, "high")["phase"] == "Succeeded"
        started = time.monotonic()
        status = run_to_end(cluster, namespace, "low")
        assert status["phase"] == "Succeeded", status
        assert status["attempt"] >= 1 and (status["restarts"], status["platformRestarts"]) == (0, 0), status
        trainer = parse_trainer_log(worker0_log(cluster, namespace, "low"))
        # The resumed run starts where SIGTERM stopped it (at or past the last step the operator had seen), not
        # from step 0: the checkpoint the eviction's SIGTERM wrote is the only one there was.
        assert trainer.resumed_step is not None and reached <= trainer.resumed_step < STEPS, (reached, trainer)
        assert trainer.steps and trainer.steps[0] > trainer.resumed_step and trainer.steps[-1] == STEPS, trainer
        print(f"low: preempted at step >= {reached}, resumed at {trainer.resumed_step}, finished "
              f"{time.monotonic() - started:.0f}s after high")
    finally:
        cluster.kubectl("delete", "priorityclass", high_class, "--wait=false", check=False)
