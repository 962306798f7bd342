"""SIGTERM (pod deletion, preemption, torchrun shutting its workers down) only sets a flag; the trainer checks it
at a step boundary, agrees with the other ranks to stop, writes a checkpoint and exits."""

from __future__ import annotations

import signal


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
