"""Whole DDPJobs on the embedded local node: real torchrun process groups formed from the operator's env,
trained, killed, restarted from checkpoints, and reported back through the API."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from conftest import apply_job, digits_job, job_status, pods
from ddpjob_localnode.recovery import RecoveryClock, find_worker_process, parse_trainer_log
from support import localnode
from support.cluster import RENDEZVOUS_PORTS, wait_until

JOB_TIMEOUT = float(os.environ.get("E2E_JOB_TIMEOUT", 420))


def worker0_log(cluster, namespace: str, job: str = "digits") -> str:
    """The log of the job's newest pod 0: `<job>-worker-0`, or another name where a pod on a lost node still held
    that one (pod_names.py)."""
    found = cluster.get_json(f"/api/v1/namespaces/{namespace}/pods",
                             labelSelector=f"ddpjob.dev/job-name={job},ddpjob.dev/replica-index=0")
    items = (found or {}).get("items") or []
    newest = max(items, key=lambda p: p["metadata"]["creationTimestamp"])["metadata"]["name"] if items else None
    log = cluster.get_text(f"/api/v1/namespaces/{namespace}/pods/{newest or f'{job}-worker-0'}/log", timestamps="true")
    return log or ""


def last_step(cluster, namespace: str) -> int:
    steps = parse_trainer_log(worker0_log(cluster, namespace)).steps
    return steps[-1] if steps else 0


def run_to_end(cluster, namespace: str, job: str = "digits", clock: RecoveryClock | None = None) -> dict:
    deadline = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < deadline:
        status = job_status(cluster, namespace, job)
        if clock is not None:
            clock.observe(status, pods(cluster, namespace, job), time.time())
        if status.get("phase") in ("Succeeded", "Failed"):
            return status
        time.sleep(0.3)
    raise AssertionError(f"job {job} did not finish in {JOB_TIMEOUT}s: {job_status(cluster, namespace, job)}")


def wait_for_step(cluster, namespace: str, step: int) -> int:
    return wait_until(lambda: last_step(cluster, namespace) >= step and last_step(cluster, namespace),
                      timeout=JOB_TIMEOUT, interval=0.5, what=f"training step {step}")


def assert_resumed_and_finished(cluster, namespace: str, status: dict, steps: int, platform: bool = False,
                                job: str = "digits"):
    """`platform`: the one restart was the platform's failure (a deleted pod), not the trainer's (a kill, a hang)."""
    assert status["phase"] == "Succeeded", status
    assert (status["restarts"], status["platformRestarts"]) == ((0, 1) if platform else (1, 0)), status
    trainer = parse_trainer_log(worker0_log(cluster, namespace, job))
    # The new attempt starts from a checkpoint (a periodic one, or the one a SIGTERM wrote), not from step 0.
    assert trainer.resumed_step is not None and 0 < trainer.resumed_step < steps, trainer
    assert trainer.steps and trainer.steps[0] > trainer.resumed_step, trainer.steps
    assert trainer.steps[-1] == steps, trainer.steps
    return trainer


def record_recovery(name: str, clock: RecoveryClock, trainer) -> None:
    rows = clock.breakdown(trainer)
    print(f"\nlocal recovery ({name}): " + ", ".join(f"{k} {v:.2f}s" for k, v in rows))
    path = localnode.CLUSTER_DIR / "local-node" / "recovery.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps({"case": name, **{k: round(v, 2) for k, v in rows}}) + "\n")


def test_digits_job_succeeds_with_test_accuracy_of_at_least_90_percent_and_kubectl_logs_shows_it(
        cluster, operator, namespace):
    apply_job(cluster, namespace, digits_job(steps=200))
    wait_until(lambda: "[job=digits attempt=0 rank=0] step=" in cluster.kubectl(
        "-n", namespace, "logs", "digits-worker-0", check=False).stdout, timeout=JOB_TIMEOUT, interval=1,
        what="trainer progress lines in kubectl logs while the job runs")
    status = run_to_end(cluster, namespace)
    assert status["phase"] == "Succeeded", status
    trainer = parse_trainer_log(worker0_log(cluster, namespace))
    assert trainer.metric_name == "test_accuracy"
    assert trainer.accuracy >= 0.90, trainer
    assert trainer.steps[-1] == 200
    out = cluster.kubectl("-n", namespace, "logs", "digits-worker-0").stdout
    assert "[job=digits attempt=0 rank=0] done step=200 test_accuracy=" in out
    assert "[job=digits attempt=0 rank=2]" not in out  # worker 0 holds ranks 0-1 only


def test_kubectl_delete_pod_restarts_the_group_once_and_resumes_from_a_checkpoint(cluster, operator, namespace):
    apply_job(cluster, namespace, digits_job(steps=300, every=20))
    step = wait_for_step(cluster, namespace, 60)
    clock = RecoveryClock()
    clock.kill(time.time(), step, restarts=0)
    cluster.kubectl("-n", namespace, "delete", "pod", "digits-worker-1", "--wait=false")
    status = run_to_end(cluster, namespace, clock=clock)
    trainer = assert_resumed_and_finished(cluster, namespace, status, 300, platform=True)
    record_recovery("kubectl delete pod", clock, trainer)


def test_trainer_exit_1_under_exit_code_policy_fails_with_its_error_in_status_and_an_event(
        cluster, operator, namespace):
    scripts = localnode.CLUSTER_DIR / "local-node" / "hostpath" / "e2e" / namespace
    scripts.mkdir(parents=True, exist_ok=True)
    (scripts / "broken.py").write_text(
        "def build_workload(cfg):\n    raise RuntimeError('corrupt shard 7: checksum mismatch')\n")
    job = digits_job(steps=50, restartPolicy="ExitCode")
    pod_spec = job["spec"]["template"]["spec"]
    pod_spec["volumes"].append({"name": "scripts", "hostPath": {"path": f"/e2e/{namespace}"}})
    container = pod_spec["containers"][0]
    container["volumeMounts"].append({"name": "scripts", "mountPath": "/scripts"})
    container["args"].append("--entrypoint=/scripts/broken.py")
    apply_job(cluster, namespace, job)
    status = run_to_end(cluster, namespace)
    assert status["phase"] == "Failed", status
    assert status.get("restarts", 0) == 0
    failure = status["lastFailure"]
    assert failure["exitCode"] == 1, failure
    assert "corrupt shard 7: checksum mismatch" in failure["message"], failure
    events = json.loads(cluster.kubectl("-n", namespace, "get", "events", "--field-selector",
                                        "involvedObject.kind=DDPJob", "-o", "json").stdout)["items"]
    assert any("corrupt shard 7" in e["message"] for e in events), [e["message"] for e in events]


@pytest.mark.slow
def test_stopping_the_agent_mid_job_makes_the_node_not_ready_and_the_group_restarts_after_it_returns(
        cluster, operator, namespace):
    apply_job(cluster, namespace, digits_job(steps=300, every=20))
    wait_for_step(cluster, namespace, 40)
    localnode.kill_agent()
    # Without the agent nobody renews the lease: the node lifecycle controller marks the node NotReady.
    wait_until(lambda: localnode.node_ready(cluster) in ("Unknown", "False"), timeout=120, interval=1,
               what="local node NotReady")
    localnode.start(cluster)
    status = run_to_end(cluster, namespace)
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] + status["platformRestarts"] >= 1, status
    trainer = parse_trainer_log(worker0_log(cluster, namespace))
    assert trainer.resumed_step and trainer.resumed_step > 0, trainer
    assert trainer.steps[-1] == 300


def wait_for_reported_step(cluster, namespace: str, job: str, step: int) -> None:
    wait_until(lambda: (job_status(cluster, namespace, job).get("progress") or {}).get("step", 0) >= step,
               timeout=JOB_TIMEOUT, interval=0.5, what=f"{job} reports step {step} in status.progress")


def hang_one_rank(cluster, namespace: str, job: str, deadline: int, marker: str = "ddp_trainer") -> float:
    """SIGSTOP a trainer process of worker 1 (rank 0, which serves worker 0's metrics, stays up and blocks in
    the collective) and return the seconds from the stop to the NoProgress restart in status."""
    victim = find_worker_process(localnode.CLUSTER_DIR, pods(cluster, namespace, job), replica="1", marker=marker)
    assert victim, f"no trainer worker process found under {job}-worker-1"
    stopped = time.monotonic()
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: job_status(cluster, namespace, job).get("restarts") == 1,
                   timeout=deadline + 120, interval=0.3, what="the NoProgress restart")
    finally:
        try:
            os.kill(victim.pid, signal.SIGCONT)  # if the restart did not take it down, let it die normally
        except ProcessLookupError:
            pass
    return time.monotonic() - stopped


def test_a_stopped_rank_is_found_by_the_progress_deadline_and_the_group_resumes_to_the_exact_step(
        cluster, operator, namespace):
    deadline = 15
    # The collective timeout the operator sets (300 s) is far longer than the deadline: only the operator can act.
    apply_job(cluster, namespace, digits_job(steps=300, every=20, runPolicy={
        "backoffLimit": 3, "restartBackoffSeconds": 0, "progressDeadlineSeconds": deadline}))
    wait_for_reported_step(cluster, namespace, "digits", 60)
    detected = hang_one_rank(cluster, namespace, "digits", deadline)
    status = run_to_end(cluster, namespace)
    assert status["lastFailure"]["kind"] == "NoProgress", status
    assert "has not advanced" in status["lastFailure"]["message"], status
    trainer = assert_resumed_and_finished(cluster, namespace, status, 300)
    assert trainer.steps[-1] == 300
    print(f"\nhang detection (harness, deadline {deadline}s, progress interval 2s): {detected:.1f}s from SIGSTOP "
          f"to the NoProgress restart")
    record_hang("harness", deadline, detected)


def record_hang(name: str, deadline: int, detected: float) -> None:
    path = localnode.CLUSTER_DIR / "local-node" / "hang-detection.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps({"case": name, "deadline_seconds": deadline, "detected_seconds": round(detected, 1)})
                + "\n")


USER_LOOP = Path(__file__).resolve().parents[2] / "examples" / "user-loop.yaml"


def user_loop_job(steps: int, deadline: int) -> dict:
    """examples/user-loop.yaml (a plain DDP script calling ddp_trainer.report), shortened."""
    job = yaml.safe_load(USER_LOOP.read_text())
    container = job["spec"]["template"]["spec"]["containers"][0]
    shorter = {"--steps": str(steps), "--checkpoint-every": "20", "--log-every": "10"}
    container["args"] = [f"{a.split('=')[0]}={shorter[a.split('=')[0]]}" if a.split("=")[0] in shorter else a
                         for a in container["args"]]
    job["spec"]["runPolicy"] = {"backoffLimit": 3, "restartBackoffSeconds": 0, "progressDeadlineSeconds": deadline}
    job["spec"]["rendezvous"] = {"port": random.choice(RENDEZVOUS_PORTS)}  # the machine is shared (conftest.py)
    return job


def step_column(cluster, namespace: str, job: str) -> int | None:
    """The STEP column of `kubectl get ddpj -o wide`, as a user reads it."""
    lines = cluster.kubectl("-n", namespace, "get", "ddpj", job, "-o", "wide").stdout.splitlines()
    header, row = lines[0], lines[1]
    # By position, as an eye reads it: a blank cell (QUEUE, for a job Kueue does not govern) would shift a split.
    start = header.index("STEP")
    end = start + len(header[start:].split()[0])
    end += len(header[end:]) - len(header[end:].lstrip())
    value = row[start:end].strip()
    return int(value) if value.isdigit() else None


def test_a_users_own_loop_reports_progress_and_a_stopped_rank_is_found_by_the_deadline(
        cluster, operator, namespace):
    # Long enough that the STEP column (read every 2 s) is seen to move before the end: on a quiet machine 400
    # steps ran in under 10 s, between two reads.
    deadline, steps = 15, 2000
    apply_job(cluster, namespace, user_loop_job(steps, deadline))
    first = wait_until(lambda: step_column(cluster, namespace, "user-loop"), timeout=JOB_TIMEOUT, interval=0.5,
                       what="a STEP in kubectl get ddpj")
    wait_until(lambda: (step_column(cluster, namespace, "user-loop") or 0) > first, timeout=60, interval=0.5,
               what="the STEP column advancing")
    wait_for_reported_step(cluster, namespace, "user-loop", 60)
    detected = hang_one_rank(cluster, namespace, "user-loop", deadline, marker="train.py")
    status = run_to_end(cluster, namespace, job="user-loop")
    assert status["phase"] == "Succeeded", status
    assert (status["restarts"], status["lastFailure"]["kind"]) == (1, "NoProgress"), status
    log = worker0_log(cluster, namespace, "user-loop")
    resumed = [int(m) for m in re.findall(r"resumed from checkpoint step=(\d+)", log)]
    assert resumed and 0 < resumed[-1] < steps, log[-2000:]
    assert f"done step={steps}" in log, log[-2000:]
    print(f"\nhang detection (user loop, deadline {deadline}s, progress interval 2s): {detected:.1f}s from SIGSTOP "
          f"to the NoProgress restart")
    record_hang("user loop", deadline, detected)
