"""torchft replica groups under restartStrategy InPlace, end to end on CPU: a real Lighthouse and two replica groups,
group 1's torchrun allowed restarts as the operator allows them (PET_MAX_RESTARTS). kill -9 of group 1's worker:
its own torchrun starts the worker again in the same process tree (no pod replaced), the new worker heals from
group 0 live (no checkpoint read), the agent's endpoint counts the restart for the operator, and both groups end
at the last step with exit 0. Under Recreate (max restarts 0) the same kill ends group 1's torchrun:
test_torchft_replica_groups.py."""

import os
import signal
import urllib.request

from launch import DONE, PROGRESS, RESUMED, stop, wait_for_line, worker_pids
from prometheus_client.parser import text_string_to_metric_families
from support.ports import free_port
from test_torchft_replica_groups import HEARTBEAT_TIMEOUT_MS, STEPS, hold_back_until_worker_starts, trainer_args
from torchft_launch import group_env, pod_ip, scrape, start_group, start_lighthouse

from ddp_trainer import torchrun as launcher
from ddp_trainer.progress_log import HEALED

KILL_AT = 60


def agent_restarts(port: int, group: int) -> int | None:
    """The group's torchrun agent's restart count (what the operator reads from every pod), or None."""
    try:
        with urllib.request.urlopen(f"http://{pod_ip(group)}:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    samples = (s for f in text_string_to_metric_families(text) for s in f.samples)
    return next((int(s.value) for s in samples if s.name == launcher.AGENT_RESTARTS_SERIES), None)


def test_a_killed_group_restarts_in_its_pod_and_heals_live(tmp_path):
    lighthouse_port, ports, agent_port = free_port(), (free_port(), free_port()), free_port()
    lighthouse = start_lighthouse(lighthouse_port, HEARTBEAT_TIMEOUT_MS, tmp_path / "lighthouse.log")
    logs = [tmp_path / "group0.log", tmp_path / "group1.log"]
    envs = [group_env(lighthouse_port, g, 2, "ft-in-place") for g in (0, 1)]
    envs[1][launcher.AGENT_PORT_ENV] = str(agent_port)  # as the operator sets it under InPlace
    groups = [
        start_group(envs[g], logs[g], *trainer_args(tmp_path, ports[g]), max_restarts=1 if g else 0) for g in (0, 1)
    ]
    try:
        wait_for_line(logs[0], PROGRESS, groups[0], timeout=90, where=lambda m: int(m["step"]) >= KILL_AT)
        wait_for_line(logs[1], PROGRESS, groups[1], timeout=30, where=lambda m: int(m["step"]) >= KILL_AT)
        assert agent_restarts(agent_port, 1) == 0
        victims = worker_pids(groups[1].pid)
        assert len(victims) == 1, victims
        os.kill(victims[0], signal.SIGKILL)
        killed_at = scrape(ports[0])["ddp_trainer_step"]
        survivor_heals = scrape(ports[0])["ddp_trainer_heals_total"]

        # Group 1's own torchrun starts a new worker: the pod would stay, nothing replaced. The survivor is held back
        # meanwhile: on a busy machine it could run out its steps before the new worker asks for a quorum.
        new = hold_back_until_worker_starts(groups[0], groups[1], logs[1], timeout=120, old=tuple(victims))
        assert len(new) == 1, new
        healed = wait_for_line(
            logs[1], HEALED, groups[1], timeout=120, where=lambda m: int(m["step"]) > killed_at
        )
        assert healed["peer"] == "0" and healed["group"] == "1"
        assert scrape(ports[1], 1)["ddp_trainer_checkpoint_load_seconds"] == 0
        assert agent_restarts(agent_port, 1) == 1  # what the operator counts against backoffLimit
        assert scrape(ports[0])["ddp_trainer_heals_total"] == survivor_heals  # the survivor took nothing

        assert groups[0].wait(timeout=600) == 0, logs[0].read_text()[-3000:]
        assert groups[1].wait(timeout=120) == 0, logs[1].read_text()[-3000:]
    finally:
        for proc in (*groups, lighthouse):
            stop(proc)
    restarted = logs[1].read_text()
    assert RESUMED.search(restarted) is None, "the restarted worker read a checkpoint instead of healing"
    for text in (logs[0].read_text(), restarted):
        done = DONE.search(text)
        assert done and int(done["step"]) == STEPS, text[-2000:]
