"""A Lighthouse that goes silent (its node lost: no reset reaches anyone) is not the groups' end either (issue 35):
two real replica groups reach their Lighthouse by name, as in a cluster (`<job>-lighthouse.<job>.<ns>.svc`, here a
block of this machine's /etc/hosts, as the local node serves pod names); the Lighthouse's process is stopped
(SIGSTOP: its kernel still acknowledges, so nothing fails on its connections), and a new one listens at another
address, which the name then gives, as the cluster's DNS does once the operator has made it again.

Each group's Manager waits on its connection to the silent one (the quorum call to its deadline, 60 s here, and
the process then exits). lighthouse_watch.py shuts that connection down once the name gives another address, and
torchft connects again by name: both groups train on, none exits, none reads a checkpoint, and each says where its
Lighthouse went."""

import os
import signal
import uuid
from pathlib import Path

from ddp_trainer.progress_log import LIGHTHOUSE_MOVED
from ddpjob_localnode.hosts_block import write_block
from launch import RESUMED, stop, wait_for_line
from support.ports import free_port
from test_torchft_lighthouse_replaced import HEARTBEAT_TIMEOUT_MS, QUORUM, STEPS
from test_torchft_replica_groups import poll_step, trainer_args
from torchft_launch import group_env, scrape, start_group, start_lighthouse

HOSTS = Path("/etc/hosts")
OLD_IP, NEW_IP = "127.0.0.101", "127.0.0.102"


def test_the_groups_follow_the_lighthouse_name_to_a_new_one_when_theirs_goes_silent(tmp_path):
    name = f"lh-{uuid.uuid4().hex[:8]}.lighthouse-watch.test"
    owner = f"test-{name}"
    write_block(HOSTS, owner, {OLD_IP: [name]})
    lighthouse_port, ports = free_port(), (free_port(), free_port())
    lighthouse = start_lighthouse(lighthouse_port, HEARTBEAT_TIMEOUT_MS, tmp_path / "lighthouse.log", ip=OLD_IP)
    logs = [tmp_path / "group0.log", tmp_path / "group1.log"]
    envs = [group_env(lighthouse_port, g, 2, "lh-silent", lighthouse_host=name) for g in (0, 1)]
    args = [[str(STEPS) if a == "8000" else a for a in trainer_args(tmp_path, ports[g])] for g in (0, 1)]
    groups, again, silent = [], None, False
    try:
        for g in (0, 1):
            groups.append(start_group(envs[g], logs[g], *args[g]))
        for g in (0, 1):
            wait_for_line(logs[g], QUORUM, groups[g], timeout=180, where=lambda m: m["groups"] == "2")
            poll_step(ports[g], groups[g], 20, deadline_s=120, group=g)

        os.killpg(lighthouse.pid, signal.SIGSTOP)
        silent = True
        at_stop = [len(log.read_text()) for log in logs]
        stalled = [scrape(ports[g], g)["ddp_trainer_step"] for g in (0, 1)]
        again = start_lighthouse(lighthouse_port, HEARTBEAT_TIMEOUT_MS, tmp_path / "lighthouse-again.log", ip=NEW_IP)
        write_block(HOSTS, owner, {NEW_IP: [name]})

        # 120 s: past the groups' 60 s quorum timeout, when, still waiting on the silent one, they exit.
        for g in (0, 1):
            poll_step(ports[g], groups[g], stalled[g] + 30, deadline_s=120, group=g)
        assert all(proc.poll() is None for proc in groups), "a group exited over its Lighthouse's loss"
        texts = [log.read_text() for log in logs]
    finally:
        for proc in (*groups, *([again] if again else [])):
            stop(proc)
        if silent:
            os.killpg(lighthouse.pid, signal.SIGCONT)
        stop(lighthouse)
        write_block(HOSTS, owner, {})
    for g, text in enumerate(texts):
        assert RESUMED.search(text) is None, f"group {g} read its checkpoint: it was restarted"
        moved = LIGHTHOUSE_MOVED.search(text, at_stop[g])
        assert moved, f"group {g} never said its Lighthouse moved:\n{text[at_stop[g] :][-3000:]}"
        assert (moved["host"], moved["old"], moved["new"]) == (name, OLD_IP, NEW_IP)
