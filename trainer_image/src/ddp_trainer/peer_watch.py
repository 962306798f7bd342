"""A node gone silent: its peers leave the group within --peer-timeout-seconds, not the collective timeout.

A node that loses its power or its network, or whose containers are frozen, sends no reset: its peers wait in
their next collective until its timeout (300 s or more, so that a slow checkpoint never trips it), and torchrun's
agents only form the group again once a worker ends. Under `restartStrategy: InPlace` the operator sets
DDP_TRAINER_PEER_TIMEOUT_SECONDS (the env form of --peer-timeout-seconds), and then each node's first worker (local
rank 0):
- beats a counter of its own in the group's store every few seconds (a thread: it beats while the main thread
  computes, saves a checkpoint or waits in a collective);
- watches the next node's counter (a ring: every node is watched by one other, O(nodes) store operations).
When the watched counter has not moved for that long and its node did not say it finished, the watcher records why
(the termination log) and ends its process with PEER_LOST: its agent restarts the node's workers, every other
rank's collective fails with them, and the agents form the group again without the silent node, at the size the
rendezvous accepts (elastic min..max). The timeout must exceed the time a silent node takes to turn NotReady
(the controller-manager's --node-monitor-grace-period, 50 s by default), so that the operator has seen the node
lost first and counts the restart as that loss's, never as the trainer's.

The counters live in the agents' rendezvous store (pod 0's agent, which outlives every worker restart), through a
client of the watcher's own with a short timeout, so that a store that does not answer never leaves the watcher
stuck with the rest; a store that does not answer is no evidence against the peer (the clock starts over). The
keys are under a prefix rank 0 draws for this group, which every rank learns from one broadcast as it forms."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from . import exit_codes
from .distributed_env import DistEnv
from .process_exit import recorded_failure

MAX_BEAT_SECONDS = 5.0
BEATS_PER_TIMEOUT = 4  # a counter must miss this many beats in a row before its node is taken for silent


class PeerLost(RuntimeError):
    pass


def beat_seconds(timeout: float) -> float:
    return min(MAX_BEAT_SECONDS, timeout / BEATS_PER_TIMEOUT)


@dataclass(frozen=True)
class Ring:
    """Nodes by torchrun's group rank; each watches the next."""

    node: int
    nodes: int

    @classmethod
    def of(cls, env: DistEnv, environ=None) -> Ring:
        e = os.environ if environ is None else environ
        return cls(
            node=int(e.get("GROUP_RANK", env.rank // env.local_world_size)),
            nodes=max(1, env.world_size // env.local_world_size),
        )

    def watched(self) -> int | None:
        return None if self.nodes < 2 else (self.node + 1) % self.nodes


class Staleness:
    """How long a counter has not moved, by the watcher's own clock (nodes' clocks are never compared)."""

    def __init__(self, now: float):
        self.value: int | None = None
        self.moved_at = now

    def see(self, value: int | None, now: float) -> float:
        if value is not None and value != self.value:
            self.value, self.moved_at = value, now
        return now - self.moved_at


class PeerWatch:
    def __init__(
        self,
        store: dist.Store,
        ring: Ring,
        timeout: float,
        on_silent: Callable[[int, float], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store, self.ring, self.timeout, self.on_silent, self.clock = store, ring, timeout, on_silent, clock
        self.interval = beat_seconds(timeout)
        self.staleness = Staleness(clock())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddp-trainer-peer-watch", daemon=True)

    def start(self) -> PeerWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        """This node is done (finished, or stopping with a checkpoint): its watcher stops waiting for it."""
        self._stop.set()
        with contextlib.suppress(Exception):  # the store may be gone with the group; nobody is left to tell
            self.store.add(f"done/{self.ring.node}", 1)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.tick():
                return

    def tick(self) -> bool:
        """One beat of this node and one look at the watched one; True once the watch is over (the watched node
        finished, or was found silent and on_silent called)."""
        watched = self.ring.watched()
        try:
            self.store.add(f"beat/{self.ring.node}", 1)
            if watched is None:
                return False
            if self.store.add(f"done/{watched}", 0) > 0:
                return True  # the watched node finished: its counter stops for good
            value = self.store.add(f"beat/{watched}", 0)
        except Exception:  # noqa: BLE001 - the store's host does not answer: nothing is known of the peer
            # That host is pod 0's agent, whose loss the operator answers by recreating the group; and at the end
            # of a run it may be gone before this node is. Unknown is never silent: the clock starts over.
            self.staleness = Staleness(self.clock())
            return False
        silent = self.staleness.see(value, self.clock())
        if silent >= self.timeout and not self._stop.is_set():
            self.on_silent(watched, silent)
            return True
        return False


def group_prefix(env: DistEnv) -> str:
    """A prefix rank 0 draws for this group, the same on every rank (one broadcast as the group forms)."""
    token = [uuid.uuid4().hex if env.rank == 0 else ""]
    dist.broadcast_object_list(token, src=0)
    return f"/ddp_trainer/peer_watch/{token[0]}"


def leave_group(prefix: str) -> Callable[[int, float], None]:
    def on_silent(node: int, silent: float) -> None:
        error = PeerLost(
            f"node {node} of the group has been silent for {silent:.0f} s (no heartbeat, no reset): leaving the "
            "group so that torchrun forms it again without that node (--peer-timeout-seconds)"
        )
        # os._exit from this thread: the main thread is stuck in the collective this watch exists to end.
        os._exit(recorded_failure(error, exit_codes.PEER_LOST, f"{prefix} WARNING {error}"))

    return on_silent


def store_address(environ) -> tuple[str, int]:
    """The rendezvous store of torchrun's agents (PET_RDZV_ENDPOINT, which the operator points at pod 0's agent: it
    outlives every worker restart), else the workers' own (MASTER_ADDR:MASTER_PORT)."""
    endpoint = environ.get("PET_RDZV_ENDPOINT", "")
    if endpoint:
        host, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "29400")
        return host, int(port)
    return environ["MASTER_ADDR"], int(environ["MASTER_PORT"])


def start(env: DistEnv, timeout: float, log_prefix: str, environ=None) -> PeerWatch | None:
    """The watch of this node's first worker when timeout > 0 (every rank must call this: the group's prefix is
    broadcast)."""
    e = os.environ if environ is None else environ
    ring = Ring.of(env, e)
    if timeout <= 0 or ring.watched() is None:
        return None
    prefix = group_prefix(env)
    if env.local_rank != 0:
        return None
    host, port = store_address(e)
    client = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=2 * beat_seconds(timeout)))
    store = dist.PrefixStore(prefix, client)
    return PeerWatch(store, ring, timeout, leave_group(log_prefix)).start()
