"""The torchft heartbeat benchmark's pure parts: the stall as the longest gap between committed steps around the
kill, and false evictions counted from the trainer's quorum lines (which progress_log writes)."""

from __future__ import annotations

import pytest

from ddp_trainer.progress_log import Identity, quorum_line
from torchft_heartbeat import false_evictions, longest_gap


@pytest.mark.parametrize(
    "name, arrivals, after, want",
    [
        ("no steps", [], 0.0, 0.0),
        ("steady", [(0.0, 1), (0.1, 2), (0.2, 3)], 0.05, 0.1),
        ("the gap spans the kill", [(0.0, 1), (0.1, 2), (1.3, 3), (1.4, 4)], 0.15, 1.2),
        ("a gap before the window does not count", [(0.0, 1), (2.0, 2), (2.1, 3), (2.2, 4)], 2.05, 0.1),
        ("nothing after the kill", [(0.0, 1), (0.1, 2)], 5.0, 0.0),
    ],
)
def test_longest_gap(name, arrivals, after, want):
    assert longest_gap(arrivals, after) == pytest.approx(want)


def test_false_evictions_count_quorums_short_of_every_group():
    who = Identity("bench", "0", 0, replica_group=0)
    text = "\n".join(
        [
            quorum_line(who, 2, 2, 0),
            "[job=bench attempt=0 group=0 rank=0] step=10/20 epoch=0",
            quorum_line(who, 1, 2, 30),
            quorum_line(who, 2, 2, 31),
        ]
    )
    assert false_evictions(text) == 1
    assert false_evictions(quorum_line(who, 2, 2, 5)) == 0
