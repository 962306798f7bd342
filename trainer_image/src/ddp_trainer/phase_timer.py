"""Step phase times (data, forward_backward, optimizer) for ddp_trainer_step_phase_seconds, timed where the work runs.

On CPU the host's clock is the work's clock. On a GPU the host only queues kernels: a host timer charges the
blocking to whichever phase fills the launch queue, and syncing each step to read it would cost the throughput it
measures. So on CUDA each mark is an event recorded on the stream, and a window's events are read one window late,
at the next log step (the log step's all-reduce and .item() have waited for the device by then, so reading them
never blocks). The DDPJobStragglerRank alert compares these phases across ranks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

PHASES = 3  # data, forward_backward, optimizer: four marks a step
WINDOW_LIMIT = 256  # steps a window keeps events for: 4 events each, reused never; the rest of a window is not timed


class Event(Protocol):
    def record(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...  # milliseconds, as torch.cuda.Event's

    def synchronize(self) -> None: ...


Observe = Callable[[float, float, float], None]


class PhaseTimer:
    def __init__(self, observe: Observe, device: torch.device, new_event: Callable[[], Event] | None = None):
        """`new_event`: where events come from (torch.cuda.Event with timing on CUDA; tests pass their own). None on
        a device without events: host timers, observed at once."""
        self.observe = observe
        if new_event is None and device.type == "cuda":
            new_event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        self.new_event = new_event
        self.window: list[tuple[Any, ...]] = []  # this window's steps' marks
        self.held: list[tuple[Any, ...]] = []  # the last window's, read at the next window's end

    def mark(self) -> Any:
        if self.new_event is None:
            return time.perf_counter()
        event = self.new_event()
        event.record()
        return event

    def step(self, marks: tuple[Any, ...]) -> None:
        if self.new_event is None:
            self.observe(*(b - a for a, b in zip(marks, marks[1:], strict=False)))
        elif len(self.window) < WINDOW_LIMIT:
            self.window.append(marks)

    def window_done(self) -> None:
        """At a log step: observe the window before this one (its events are done), hold this one."""
        self._read(self.held)
        self.held, self.window = self.window, []

    def flush(self) -> None:
        """At the end of training: wait for the device, and observe everything still held."""
        pending = self.held + self.window
        if pending:
            pending[-1][-1].synchronize()
        self._read(pending)
        self.held, self.window = [], []

    def _read(self, steps: list[tuple[Any, ...]]) -> None:
        for marks in steps:
            self.observe(*(a.elapsed_time(b) / 1000.0 for a, b in zip(marks, marks[1:], strict=False)))
