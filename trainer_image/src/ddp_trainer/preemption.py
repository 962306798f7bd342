"""SIGTERM (pod deletion, preemption, torchrun shutting its workers down) only sets a flag; every rank votes on
it after every step, so all of them stop at the same step, write a checkpoint together, and exit. The same vote
carries rank 0's request for a checkpoint by time (--checkpoint.every-seconds): every rank takes part in a save
(each gives its RNG state), so every rank must learn at which step it happens."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import cast

import torch
import torch.distributed as dist


class PreemptionFlag:
    def __init__(self):
        self.requested = False
        self.signal_name = ""

    def install(self) -> PreemptionFlag:
        signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.requested = True
        self.signal_name = signal.Signals(signum).name


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

    def step(self, ask_to_save: bool = False) -> Verdict:
        """After each step: the result of the previous vote, then cast the next one; on CPU the vote of this very
        step. Without a group (a single process outside torchrun) this process's own ballot is the verdict."""
        ballot = torch.tensor([float(self.flag.requested), float(ask_to_save)])
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
