"""The samples a log window counts (ddp_trainer_samples_total) and the samples/s (and MFU) it rates are the samples
this process trained: a torchft heal in mid-run moves the group's count to its peer's, and those steps are the
peer's work, not this process's (sample_windows.py)."""

from __future__ import annotations

import pytest

from ddp_trainer.sample_windows import SampleWindows

GROUP_BATCH = 64


@pytest.mark.parametrize("name, events, want_counted, want_rate", [
    ("10 steps in 10 s", [("train", 10)], 640, 64.0),
    ("a heal from a peer 1,000 steps ahead, between steps", [("train", 4), ("heal", 1000), ("train", 6)], 640, 64.0),
    ("a heal before any step of the window", [("heal", 500), ("train", 10)], 640, 64.0),
    ("two heals", [("train", 2), ("heal", 10), ("train", 3), ("heal", 20), ("train", 5)], 640, 64.0),
    ("a window that only healed counts nothing and keeps the last rate", [("heal", 1000)], 0, 12.5),
])
def test_a_heal_is_not_counted_as_samples_trained(name, events, want_counted, want_rate):
    windows = SampleWindows()
    samples = 1000 * GROUP_BATCH  # a resumed run's count: not this process's either
    windows.start(samples, now=0.0)
    windows.throughput = 12.5  # the last window's figure
    for kind, steps in events:
        if kind == "train":
            samples += steps * GROUP_BATCH
        else:
            windows.received(steps * GROUP_BATCH)
            samples += steps * GROUP_BATCH
    assert windows.counted(samples) == want_counted, name
    assert windows.rate(samples, now=10.0) == pytest.approx(want_rate), name


def test_a_compiling_step_restarts_only_the_rate_and_a_heal_after_it_moves_both():
    windows = SampleWindows()
    windows.start(0, now=0.0)
    windows.restart_rate(64, now=5.0)  # the first step compiled for 5 s: the rate leaves it out
    windows.received(6400)  # then a heal
    samples = 64 + 6400 + 5 * 64
    assert windows.counted(samples) == 6 * 64  # the compiling step was trained here: counted, just not rated
    assert windows.rate(samples, now=10.0) == pytest.approx(64.0)
