"""SIGTERM (pod deletion, preemption, torchrun shutting its workers down) only sets a flag; every rank votes on
it after every step, so all of them stop at the same step, write a checkpoint together, and exit. The same vote
carries rank 0's request for a checkpoint by time (--checkpoint.every-seconds): every rank takes part in a save
(each gives its RNG state), so every rank must learn at which step it happens.

A rank that is in a collective with a peer that no longer answers (a node gone silent: no reset reaches it) never
ends its step, so it never reaches the vote: torchrun's agent, stopping its workers for a membership change, would
wait its whole shutdown timeout (the pod's grace period) before it kills it, and the survivors would form their
group that much later. So once SIGTERM came, a step that has not ended after STUCK_STEP_FACTOR times the longest of
the recent steps (at least STUCK_MIN_SECONDS) ends the process at once, with the same exit code and no checkpoint:
none could be written without that peer. A checkpoint being written is never cut short, and nothing happens outside
the training loop (start-up, the final evaluation). Only a step that computes is timed: a torchft quorum (waiting on
the other groups, a heal from one; it has a timeout of its own) and torch.compile compiling a graph (the first step,
a guard that failed: minutes, with no peer involved) are phases the watch leaves alone, and its wait starts again
where such a phase ends."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import torch
import torch.distributed as dist

from . import exit_codes

STUCK_MIN_SECONDS = 10.0
STUCK_STEP_FACTOR = 3.0
RECENT_STEPS = 20
WATCH_INTERVAL_S = 0.5


class PreemptionFlag:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.requested = False
        self.signal_name = ""
        self.clock = clock
        self.signalled_at: float | None = None
        self.stepping = False  # inside the training loop
        self.saving = 0  # checkpoints being written (nested)
        self.last_step_end: float | None = None
        self.waiting = 0  # phases of a step that do not compute (not_computing), nested
        self.computing_since: float | None = None  # when the last such phase ended
        self.recent: deque[float] = deque(maxlen=RECENT_STEPS)

    def install(self) -> PreemptionFlag:
        signal.signal(signal.SIGTERM, self._handle)
        self._watch_signals()
        return self

    def watch_compiles(self) -> Callable[[], None]:
        """Dynamo's compile start and end callbacks (run on the thread that compiles, around every graph it
        compiles, backward included) make compiling a not_computing phase. Returns what removes them. Only where
        something is compiled: importing dynamo costs a start 1.7 s on the 2-core VM."""
        from torch._dynamo.callback import callback_handler

        phase = self.not_computing()

        def start(_args: object) -> None:
            phase.__enter__()

        def end(_args: object) -> None:
            phase.__exit__(None, None, None)

        callback_handler.register_start_callback(start)
        callback_handler.register_end_callback(end)

        def remove() -> None:
            callback_handler.remove_start_callback(start)
            callback_handler.remove_end_callback(end)

        return remove

    def _handle(self, signum, frame) -> None:
        self.signalled(signal.Signals(signum).name)

    def _watch_signals(self) -> None:
        """Python runs a signal's handler only once the main thread is back in Python: never while it waits in a
        collective that does not end. The interpreter's own C-level handler writes each signal's number to the
        wakeup fd at once, so a thread of ours learns of SIGTERM from it and can end a stuck process. Not from
        another thread (set_wakeup_fd is the main thread's), and a forked child (a DataLoader worker) drops it so
        that its signals are never taken for this process's."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        try:
            signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        except ValueError:  # not the main thread: the handler alone sets the flag, with no watch
            os.close(read_end)
            os.close(write_end)
            return
        os.register_at_fork(after_in_child=lambda: signal.set_wakeup_fd(-1))
        threading.Thread(target=self._watch_loop, args=(read_end,), name="ddp-sigterm-watch", daemon=True).start()

    def _watch_loop(self, read_end: int) -> None:
        while True:
            ready, _, _ = select.select([read_end], [], [], WATCH_INTERVAL_S)
            if ready and signal.SIGTERM in os.read(read_end, 64):
                self.signalled(signal.SIGTERM.name)
            waited = self.stuck_for()
            if waited is not None:
                print(
                    f"ddp_trainer: {self.signal_name} and no step ended for {waited:.0f} s (a collective with a peer "
                    f"that does not answer): exiting {exit_codes.PREEMPTED} without a checkpoint",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(exit_codes.PREEMPTED)

    def signalled(self, name: str) -> None:
        self.requested = True
        self.signal_name = name
        if self.signalled_at is None:
            self.signalled_at = self.clock()

    def loop_started(self) -> None:
        self.stepping = True

    def step_ended(self) -> None:
        now = self.clock()
        if self.last_step_end is not None:
            self.recent.append(now - self.last_step_end)
        self.last_step_end = now

    def loop_ended(self) -> None:
        self.stepping = False

    @contextlib.contextmanager
    def writing_checkpoint(self) -> Iterator[None]:
        self.saving += 1
        try:
            yield
        finally:
            self.saving -= 1

    def not_computing(self) -> _Phase:
        """A phase of a step that the watch does not time (a quorum, a compile)."""
        return _Phase(self)

    def stuck_limit(self) -> float:
        return max(STUCK_MIN_SECONDS, STUCK_STEP_FACTOR * max(self.recent, default=0.0))

    def stuck_for(self) -> float | None:
        """After SIGTERM, inside the training loop and writing no checkpoint: how long the step in progress has
        run past its limit's start (the signal, the last step's end or the last phase not computing's end, whichever
        is latest); None while it may go on, or waits or compiles."""
        if self.signalled_at is None or not self.stepping or self.saving or self.waiting:
            return None
        since = max(self.signalled_at, self.last_step_end or self.signalled_at, self.computing_since or 0.0)
        waited = self.clock() - since
        return waited if waited >= self.stuck_limit() else None


class _Phase:
    """A context manager (re-entered by dynamo's callbacks, so a class rather than a generator's)."""

    def __init__(self, flag: PreemptionFlag):
        self.flag = flag

    def __enter__(self) -> None:
        self.flag.waiting += 1

    def __exit__(self, *_exc: object) -> None:
        self.flag.waiting -= 1
        self.flag.computing_since = self.flag.clock()


@dataclass(frozen=True)
class Verdict:
    stop: bool = False  # some rank got SIGTERM: checkpoint and exit
    save: bool = False  # rank 0 asked for a checkpoint by time


class StepVote:
    """One all-reduce of the ballot (stop, save) per step, asynchronous and on a gloo group of its own: the vote
    cast after step k is read after step k+1, so it never waits on the GPU nor on a peer that is still computing.
    A signal that lands during step k is counted in the vote cast after it, so every rank stops after step k+1 at
    the latest, with its grace period nearly whole for the checkpoint."""

    def __init__(self, flag: PreemptionFlag):
        self.flag = flag
        self.group: dist.ProcessGroup | None = None
        self.synchronous = False
        if dist.is_initialized():
            if dist.get_backend() == "gloo":
                # On CPU the default group is gloo already: one small blocking all-reduce a step costs little, and
                # a second gloo group torn down beside the first aborted a process now and then at exit (SIGABRT
                # from gloo's own thread, seen in the e2e and trainer suites).
                self.synchronous = True
            else:
                # NCCL's default group would need the flag on the GPU and a stream sync to read it; gloo reads
                # the CPU, asynchronously, so the vote never waits on the GPU.
                self.group = cast(dist.ProcessGroup, dist.new_group(backend="gloo"))
        self.ballot = torch.zeros(2)
        self.pending: dist.Work | None = None
        self.cast = 0  # ballots cast

    @property
    def read_ballot(self) -> int:
        """Which ballot (1 for the first cast) the verdict step() just returned counted: the one cast with it, or
        when the vote is asynchronous the one before."""
        return self.cast - (0 if self.synchronous or self.group is None else 1)

    def step(self, ask_to_save: bool = False) -> Verdict:
        """After each step: the result of the previous vote, then cast the next one; on CPU the vote of this very
        step. Without a group (a single process outside torchrun) this process's own ballot is the verdict."""
        ballot = torch.tensor([float(self.flag.requested), float(ask_to_save)])
        self.cast += 1
        if self.synchronous:
            dist.all_reduce(ballot)
            return _verdict(ballot)
        verdict = self._count()
        if self.group is None:
            return _verdict(ballot)
        self.ballot = ballot
        self.pending = dist.all_reduce(self.ballot, group=self.group, async_op=True)
        return verdict

    def settle(self) -> Verdict:
        """Wait for the vote in flight (every rank cast the same number), so the group can be torn down."""
        return self._count()

    def _count(self) -> Verdict:
        if self.pending is None:
            return Verdict()
        self.pending.wait()
        self.pending = None
        return _verdict(self.ballot)


def _verdict(ballot: torch.Tensor) -> Verdict:
    stop, save = ballot.tolist()
    return Verdict(stop=stop > 0, save=save > 0)
