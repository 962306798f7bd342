"""A node gone silent (its processes frozen: no reset reaches a peer) is left by its peers within
--peer-timeout-seconds, not the collective timeout, and torchrun forms the group again without it
(ddp_trainer/peer_watch.py)."""

from __future__ import annotations

import os
import re
import signal
import sys
import uuid

import pytest
import torch.distributed as dist
from launch import DONE, RESUMED, start, stop, trainer_env, wait_for_line, worker_pids
from support.ports import free_port

from ddp_trainer import exit_codes
from ddp_trainer.peer_watch import PeerWatch, Ring, beat_seconds

SILENT = re.compile(r"WARNING node (?P<node>\d+) of the group has been silent for (?P<s>\d+) s")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch_of(store, node: int, nodes: int, timeout: float = 10, clock=None):
    found: list[tuple[int, float]] = []
    watch = PeerWatch(store, Ring(node, nodes), timeout, lambda n, s: found.append((n, s)), clock=clock or Clock())
    return watch, found


def test_a_node_whose_counter_stops_is_found_silent_after_the_timeout_and_only_then():
    store, clock = dist.HashStore(), Clock()
    watcher, found = watch_of(store, 0, 3, timeout=10, clock=clock)
    peer, _ = watch_of(store, 1, 3, clock=clock)
    for _ in range(20):  # the peer beats: never silent, however long
        clock.now += 2
        peer.tick()
        assert watcher.tick() is False
    assert found == []
    for _ in range(4):  # it stops: silent once 10 s passed without a move
        clock.now += 2
        assert watcher.tick() is False
    clock.now += 2
    assert watcher.tick() is True
    assert found == [(1, 10.0)]
    assert store.add("beat/0", 0) == 25, "the watcher beats for its own node on every tick"


def test_a_node_that_finished_is_never_taken_for_silent():
    store, clock = dist.HashStore(), Clock()
    watcher, found = watch_of(store, 1, 2, timeout=4, clock=clock)
    peer, _ = watch_of(store, 0, 2, clock=clock)
    peer.tick()
    peer.stop()  # node 0 is done (it finished, or stops with its checkpoint)
    clock.now += 60
    assert watcher.tick() is True and found == []


def test_a_store_that_does_not_answer_is_no_evidence_against_the_peer():
    class Unanswered:
        def add(self, key, amount):
            raise TimeoutError("the store's host does not answer")

    clock = Clock()
    watcher, found = watch_of(Unanswered(), 0, 2, timeout=4, clock=clock)
    for _ in range(10):
        clock.now += 2
        assert watcher.tick() is False
    assert found == []


@pytest.mark.parametrize("node, nodes, watched", [(0, 1, None), (0, 2, 1), (1, 2, 0), (2, 3, 0), (1, 3, 2)])
def test_each_node_watches_the_next_one_in_a_ring(node, nodes, watched):
    assert Ring(node, nodes).watched() == watched


def test_the_beat_leaves_several_chances_inside_the_timeout():
    assert beat_seconds(60) == 5 and beat_seconds(6) == 1.5


def test_survivors_leave_a_frozen_node_and_train_on_without_it(tmp_path):
    """Two torchrun agents as two nodes (the operator's InPlace env: elastic 1..2, a keep-alive of 1 s x 3), a
    checkpoint directory both see. Node 1 is frozen whole (its agent and its worker, SIGSTOP: nothing is closed).
    Node 0's worker leaves the group after the peer timeout (6 s here), well before the collective timeout (120 s),
    with the exit code and the message that say so; its agent forms the group again alone and it trains to the end
    from the checkpoint."""
    port, rdzv_id, steps = free_port(), f"{uuid.uuid4()}-0", 3000

    def env(node: int) -> dict[str, str]:
        conf = (f"is_host={'true' if node == 0 else 'false'},join_timeout=120,last_call_timeout=2,"
                "keep_alive_interval=1,keep_alive_max_attempt=3")
        return trainer_env(
            PET_NNODES="1:2", PET_NPROC_PER_NODE="1", PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT=f"127.0.0.1:{port}",
            PET_RDZV_ID=rdzv_id, PET_RDZV_CONF=conf, PET_MAX_RESTARTS="3", PET_NODE_RANK=str(node),
            PET_MONITOR_INTERVAL="0.5", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
            DDPJOB_NAME="frozen", DDPJOB_NAMESPACE="default", DDPJOB_ATTEMPT="0", DDPJOB_REPLICA_INDEX=str(node),
            DDPJOB_RESTARTS="0", DDPJOB_COLLECTIVE_TIMEOUT_SECONDS="120", DDP_TRAINER_PEER_TIMEOUT_SECONDS="6",
        )

    cmd = [sys.executable, "-m", "ddp_trainer.torchrun", "-m", "ddp_trainer", "--workload", "digits",
           "--train.steps", str(steps), "--metrics.port", "0", "--log.every-steps", "10",
           "--checkpoint.dir", str(tmp_path / "ck"), "--checkpoint.every-steps", "20"]
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    agents = [start(cmd, env=env(i), log=logs[i]) for i in range(2)]
    frozen: list[int] = []
    try:
        wait_for_line(logs[0], re.compile(r"world_size=2 "), agents[0], timeout=180)
        wait_for_line(logs[0], re.compile(r"step=(?P<step>\d+)/"), agents[0], where=lambda m: int(m["step"]) >= 60)
        # Node 1 goes silent: its agent and its worker (a session of its own) stop at once, their sockets open.
        frozen = [agents[1].pid, *worker_pids(agents[1].pid)]
        assert len(frozen) == 2, frozen
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        silent = wait_for_line(logs[0], SILENT, agents[0], timeout=150)
        resumed = wait_for_line(logs[0], RESUMED, agents[0], timeout=150)
        assert agents[0].wait(timeout=300) == 0, logs[0].read_text()[-4000:]
    finally:
        for agent in agents:
            stop(agent)
        for pid in frozen:  # the worker has a session of its own: stopping its agent's group leaves it stopped
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    text = logs[0].read_text()
    assert silent["node"] == "1" and 6 <= int(silent["s"]) < 120, silent.group(0)
    assert f"failed (exitcode: {exit_codes.PEER_LOST})" in text[silent.end():], text[silent.end():][:3000]
    assert "world_size=1 " in text[silent.end():], "the group formed again without the frozen node"
    assert int(resumed["step"]) >= 40, resumed.group(0)
    done = DONE.search(text)
    assert done and int(done["step"]) == steps, text[-3000:]
