"""Step phase times (ddp_trainer.phase_timer): host timers observed at once on CPU; on a GPU, events recorded on the
stream and read one window late, at the next log step, so reading them never waits for the device."""

from __future__ import annotations

import torch

from ddp_trainer.phase_timer import WINDOW_LIMIT, PhaseTimer


class FakeEvent:
    """A CUDA event's interface on a fake device clock: `now` is where the stream is when the event is recorded."""

    clock = [0.0]
    reads: list[int] = []

    def __init__(self) -> None:
        self.at: float | None = None

    def record(self) -> None:
        self.at = self.clock[0]

    def elapsed_time(self, end: "FakeEvent") -> float:
        FakeEvent.reads.append(id(self))
        assert self.at is not None and end.at is not None
        return (end.at - self.at) * 1000.0

    def synchronize(self) -> None:
        pass


def device_step(timer: PhaseTimer, seconds: tuple[float, float, float]) -> None:
    marks = [timer.mark()]
    for spent in seconds:
        FakeEvent.clock[0] += spent
        marks.append(timer.mark())
    timer.step(tuple(marks))


def test_on_cpu_host_times_are_observed_at_once():
    seen = []
    timer = PhaseTimer(lambda *p: seen.append(p), torch.device("cpu"))
    timer.step((1.0, 1.5, 3.5, 4.0))
    assert seen == [(0.5, 2.0, 0.5)]


def test_on_a_gpu_a_window_is_read_at_the_next_log_step_in_seconds():
    seen = []
    timer = PhaseTimer(lambda *p: seen.append(p), torch.device("cuda"), new_event=FakeEvent)
    device_step(timer, (0.01, 0.2, 0.03))
    device_step(timer, (0.02, 0.2, 0.03))
    assert seen == []  # queued kernels are not waited for
    timer.window_done()  # first log step: the first window is held, not read
    assert seen == []
    device_step(timer, (0.5, 0.2, 0.03))  # a slow batch
    timer.window_done()  # second log step: the first window is read now
    assert [tuple(round(x, 3) for x in p) for p in seen] == [(0.01, 0.2, 0.03), (0.02, 0.2, 0.03)]
    timer.flush()  # the end: the rest, after waiting for the device
    assert [round(x, 3) for x in seen[-1]] == [0.5, 0.2, 0.03]


def test_a_long_window_keeps_a_bounded_number_of_events():
    seen = []
    timer = PhaseTimer(lambda *p: seen.append(p), torch.device("cuda"), new_event=FakeEvent)
    for _ in range(WINDOW_LIMIT + 50):
        device_step(timer, (0.01, 0.01, 0.01))
    timer.flush()
    assert len(seen) == WINDOW_LIMIT
