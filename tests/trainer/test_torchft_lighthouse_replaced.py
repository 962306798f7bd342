"""A Lighthouse that ends is not the groups' end (issue 35): two real replica groups train, their Lighthouse is
killed (a reset on every connection, as when its pod is deleted or evicted), and a new one listens at the same
address. torchft's Manager asks the new one (replica_groups.quorum_retries), and both groups train on from the step
they were at: none exits, none reads a checkpoint, and no step fails to commit.

The new Lighthouse numbers its quorums from 1 again. The test makes the numbers meet as they can in a cluster:
group 0 forms the first quorum alone and group 1 joins it (both in quorum 2); after the switch group 1 is held
(SIGSTOP) until group 0 has a new quorum 1 alone, then joins the new quorum 2, a number it already has. torchft
alone rebuilds a process group only when the number changes: group 1 kept its old one while group 0 built a new
one, and steps failed until commit failures moved the Lighthouse on (measured: 52 s). The handles' `built_for`
(replica_groups.QuorumClient) makes both build it."""

import os
import re
import signal

from launch import PROGRESS, RESUMED, stop, wait_for_line
from support.ports import free_port
from torchft_launch import group_env, scrape, start_group, start_lighthouse
from test_torchft_replica_groups import poll_step, trainer_args

NOT_COMMITTED = re.compile(r"step \d+ not committed by every replica group")
QUORUM = re.compile(r"quorum replica_groups=(?P<groups>\d+)/2 step=(?P<step>\d+)")
# Long enough that no load-induced gap in a group's heartbeats takes it out of a quorum: the test's quorums change
# only where it changes them.
HEARTBEAT_TIMEOUT_MS = 5000
STEPS = 1_000_000  # the test stops the groups once it has seen them go on


def quorums(log, since: int, groups: str) -> list[re.Match]:
    return [m for m in QUORUM.finditer(log.read_text()[since:]) if m["groups"] == groups]


def test_the_groups_train_on_with_a_new_lighthouse_when_theirs_is_killed(tmp_path):
    lighthouse_port, ports = free_port(), (free_port(), free_port())
    lighthouse = start_lighthouse(lighthouse_port, HEARTBEAT_TIMEOUT_MS, tmp_path / "lighthouse.log")
    logs = [tmp_path / "group0.log", tmp_path / "group1.log"]
    envs = [group_env(lighthouse_port, g, 2, "lh-test") for g in (0, 1)]
    args = [[str(STEPS) if a == "8000" else a for a in trainer_args(tmp_path, ports[g])] for g in (0, 1)]
    assert all(str(STEPS) in a for a in args)
    groups, again = [start_group(envs[0], logs[0], *args[0])], None
    try:
        # Group 0 alone in quorum 1, then both in quorum 2.
        wait_for_line(logs[0], PROGRESS, groups[0], timeout=120, where=lambda m: int(m["step"]) >= 20)
        groups.append(start_group(envs[1], logs[1], *args[1]))
        wait_for_line(logs[1], QUORUM, groups[1], timeout=120, where=lambda m: m["groups"] == "2")
        poll_step(ports[1], groups[1], 20, deadline_s=120, group=1)

        lighthouse.kill()
        lighthouse.wait(timeout=30)
        at_kill = [len(log.read_text()) for log in logs]
        stalled = [scrape(ports[g], g)["ddp_trainer_step"] for g in (0, 1)]
        os.killpg(groups[1].pid, signal.SIGSTOP)
        try:
            again = start_lighthouse(lighthouse_port, HEARTBEAT_TIMEOUT_MS, tmp_path / "lighthouse-again.log")
            wait_for_line(logs[0], QUORUM, groups[0], timeout=120,
                          where=lambda m: m.start() >= at_kill[0] and m["groups"] == "1")
        finally:
            os.killpg(groups[1].pid, signal.SIGCONT)

        for g in (0, 1):
            poll_step(ports[g], groups[g], stalled[g] + 30, deadline_s=120, group=g)
        assert quorums(logs[0], at_kill[0], "2"), "group 1 never joined group 0 in the new Lighthouse's quorum"
        assert all(proc.poll() is None for proc in groups), "a group exited over its Lighthouse's loss"
        texts = [log.read_text() for log in logs]  # before the groups are stopped: a peer's end fails a step
    finally:
        for proc in (*groups, lighthouse, *([again] if again else [])):
            stop(proc)
    for g, text in enumerate(texts):
        assert RESUMED.search(text) is None, f"group {g} read its checkpoint: it was restarted"
        assert NOT_COMMITTED.search(text[at_kill[g]:]) is None, (
            f"group {g} failed steps after the switch (a process group not rebuilt?):\n{text[at_kill[g]:][-3000:]}"
        )
