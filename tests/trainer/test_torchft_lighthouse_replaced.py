"""A lost Lighthouse is not the groups' end (issue 35): two real replica groups train; their Lighthouse goes silent
(SIGSTOP: a lost node sends no reset), then is gone, and a new one listens at the same name. Each group's quorum
call to the silent one ends after QUORUM_ATTEMPT_SECONDS instead of the whole quorum timeout, is asked again,
reaches the new Lighthouse, and both groups go on from the step they were at: none exits, none reads a checkpoint.

Before: the quorum call held on to the silent Lighthouse for TORCHFT_QUORUM_TIMEOUT_SEC and every group's process
then exited 1, so the operator recreated the whole group from its checkpoint."""

import os
import re
import signal

from launch import RESUMED, stop, wait_for_line
from support.ports import free_port
from test_torchft_replica_groups import HEARTBEAT_TIMEOUT_MS, STEPS, poll_step, trainer_args
from torchft_launch import group_env, scrape, start_group, start_lighthouse

ATTEMPT_FAILED = re.compile(r"WARNING quorum attempt 1 failed")
FORMED_AGAIN = re.compile(r"WARNING quorum formed after (?P<failed>\d+) failed attempt")
FIRST_STEPS = 40


def test_the_groups_wait_out_a_lost_lighthouse_and_go_on_with_its_replacement(tmp_path):
    lighthouse_port, ports = free_port(), (free_port(), free_port())
    lighthouse = start_lighthouse(lighthouse_port, HEARTBEAT_TIMEOUT_MS, tmp_path / "lighthouse.log")
    logs = [tmp_path / "group0.log", tmp_path / "group1.log"]
    # group_env's quorum timeout is 60 s: the old code's call to the silent Lighthouse would hold that long.
    envs = [group_env(lighthouse_port, g, 2, "lh-test") for g in (0, 1)]
    # Many steps: the test stops the groups once it has seen them go on.
    args = [["1000000" if a == str(STEPS) else a for a in trainer_args(tmp_path, ports[g])] for g in (0, 1)]
    groups = [start_group(envs[g], logs[g], *args[g]) for g in (0, 1)]
    again = None
    try:
        for g in (0, 1):
            poll_step(ports[g], groups[g], FIRST_STEPS, deadline_s=180, group=g)
        os.kill(lighthouse.pid, signal.SIGSTOP)  # silent, as behind a lost node
        for g in (0, 1):
            wait_for_line(logs[g], ATTEMPT_FAILED, groups[g], timeout=45)
        stalled = [scrape(ports[g], g)["ddp_trainer_step"] for g in (0, 1)]
        lighthouse.kill()
        lighthouse.wait(timeout=30)
        again = start_lighthouse(lighthouse_port, HEARTBEAT_TIMEOUT_MS, tmp_path / "lighthouse-again.log")
        for g in (0, 1):
            formed = wait_for_line(logs[g], FORMED_AGAIN, groups[g], timeout=120)
            assert int(formed["failed"]) >= 1
            poll_step(ports[g], groups[g], stalled[g] + 20, deadline_s=120, group=g)
        assert all(proc.poll() is None for proc in groups), "a group exited over the Lighthouse's loss"
    finally:
        for proc in (*groups, lighthouse, *([again] if again else [])):
            stop(proc)
    for log in logs:
        assert RESUMED.search(log.read_text()) is None, "a group read its checkpoint: it was restarted"
