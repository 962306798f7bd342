"""A group that never forms (a pod of it not placed, not reachable) ends in torchrun's rendezvous timeout, exit 1
from the agent, not from any worker. The operator must not read that 1 as the trainer's exit code: under
`restartPolicy: ExitCode` it would be permanent, under OnFailure a spent restart (failures.py, RendezvousTimeout,
the platform's class). The termination log here is the real one torchrun writes, through the image's launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch.distributed as dist

from support.ports import free_port
from ddpjob_operator.recovery import failures
from ddpjob_operator.recovery.failure_class import PLATFORM, class_of
from ddpjob_operator.recovery.restart_policy import RESTART, RestartBudget, decide_restart


def test_a_rendezvous_timeout_is_not_the_trainers_exit_code(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('never runs: the second node never joins')\n")
    error_file = tmp_path / "termination-log"
    done = subprocess.run(
        [sys.executable, "-m", "ddp_trainer.torchrun", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
         f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-conf=join_timeout=3,is_host=true", "--max-restarts=0",
         str(script)],
        env={**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file)}, capture_output=True, text=True, timeout=180)
    assert done.returncode == 1, done.stderr[-2000:]
    message = error_file.read_text()[:4096]  # what the kubelet keeps of the termination log
    pod = {"metadata": {"name": "j-worker-1"}, "spec": {"containers": [{"name": "trainer"}]},
           "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
               "exitCode": 1, "reason": "Error", "message": message}}}]}}
    failure = failures.classify_pod_failure(pod, {}, datetime.now(timezone.utc), 30)
    assert (failure.kind, failure.reason, class_of(failure)) == ("RendezvousTimeout", "RendezvousTimeout", PLATFORM)
    assert failure.message.startswith("RendezvousTimeoutError")
    decision = decide_restart("ExitCode", failure, RestartBudget(3, 0), RestartBudget(20, 0))
    assert decision.action == RESTART, "never PermanentExitCode: the 1 was torchrun's agent, not the trainer"
    assert "rendezvous timed out" in decision.message


def _torchrun(script: Path, endpoint: str, error_file: Path) -> subprocess.CompletedProcess:
    """One node's agent of a 1..2-node group whose c10d store is the test's (is_host=false), run id `closed`."""
    return subprocess.run(
        [sys.executable, "-m", "ddp_trainer.torchrun", "--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d",
         f"--rdzv-endpoint={endpoint}", "--rdzv-id=closed", "--max-restarts=0",
         "--rdzv-conf=is_host=false,last_call_timeout=1,join_timeout=30", str(script)],
        env={**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file)}, capture_output=True, text=True, timeout=180)


def test_an_agent_that_joins_a_finished_groups_rendezvous_names_its_end_not_its_own(tmp_path):
    """The others' agents close the rendezvous as their run ends; an agent joining it then (a replacement that
    starts as the group finishes) exits 1 with RendezvousClosedError. The operator reads that as a peer's symptom
    (the cause is the agent that closed it), so it waits for the others' pods instead of recreating the group."""
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # outlives both agents
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    finished = _torchrun(script, f"127.0.0.1:{port}", tmp_path / "first")
    assert finished.returncode == 0, finished.stderr[-2000:]
    late = _torchrun(script, f"127.0.0.1:{port}", tmp_path / "late")
    assert late.returncode == 1, late.stderr[-2000:]
    assert "trained" not in late.stdout
    message = (tmp_path / "late").read_text()[:4096]
    pod = {"metadata": {"name": "j-worker-2"}, "spec": {"containers": [{"name": "trainer"}]},
           "status": {"phase": "Failed", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
               "exitCode": 1, "reason": "Error", "message": message}}}]}}
    failure = failures.classify_pod_failure(pod, {}, datetime.now(timezone.utc), 30)
    assert (failure.kind, failure.reason, class_of(failure)) == ("RendezvousTimeout", "RendezvousClosed", PLATFORM)
    assert failures.peer_symptom(failure), failure.message
    del store
