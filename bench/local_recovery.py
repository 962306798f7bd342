"""Local recovery (kill -> steps advancing again), taken from `make demo`'s own breakdown, which the local node
measures (ddpjob_localnode.recovery): the demo's stdout in, bench/results/local_recovery.json out. A breakdown
whose parts do not add up to its total is refused: a row the parser does not know is a row lost (111.6 s was
once published next to parts summing to 25 s because "torchrun start" was dropped here).

    python bench/local_recovery.py DEMO_STDOUT_FILE [OUT]"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from ddpjob_localnode.recovery import PHASES, TOTAL
from machine import describe_machine

# The demo prints each row to 0.01 s (9 rows: <= 0.05 s), and a phase that the poller saw late (every 0.5 s plus
# a kubectl round trip) is clamped at 0 instead of going negative, which adds at most about one poll.
TOLERANCE_S = 1.0

_ROW = re.compile(r"^\s+(" + "|".join(PHASES) + r")\s+(-?[\d.]+) s\s*$")
_RESTARTS = re.compile(r"^\s+restarts\s+(\d+)\s*$")


def parse_breakdown(text: str) -> dict[str, float]:
    rows = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            rows[match.group(1)] = float(match.group(2))
    return rows


def parse_restarts(text: str) -> int | None:
    """The demo's `restarts N` line: the job's group restarts at the end of the run."""
    found = [int(m.group(1)) for line in text.splitlines() if (m := _RESTARTS.match(line))]
    return found[-1] if found else None


def parts_gap(breakdown: dict[str, float]) -> float:
    """The total minus the sum of its parts (seconds): what no part accounts for."""
    return breakdown[TOTAL] - sum(v for k, v in breakdown.items() if k != TOTAL)


def check_parts(breakdown: dict[str, float], tolerance_s: float = TOLERANCE_S) -> None:
    if TOTAL not in breakdown:
        raise ValueError(f"no {TOTAL!r} in the breakdown: {breakdown}")
    gap = parts_gap(breakdown)
    if abs(gap) > tolerance_s:
        parts = sum(v for k, v in breakdown.items() if k != TOTAL)
        raise ValueError(
            f"the recovery parts add up to {parts:.2f} s but the total is {breakdown[TOTAL]:.2f} s "
            f"({gap:+.2f} s unaccounted for, tolerance {tolerance_s} s): a phase is missing or measured twice"
        )


def main() -> int:
    source = Path(sys.argv[1])
    out = (
        Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent / "results" / "local_recovery.json"
    )
    text = source.read_text()
    rows = parse_breakdown(text)
    if TOTAL not in rows:
        print(f"no recovery breakdown in {source} (did the demo kill a worker?)", file=sys.stderr)
        return 1
    try:
        check_parts(rows)
    except ValueError as e:
        print(f"{source}: {e}", file=sys.stderr)
        return 1
    out.write_text(
        json.dumps(
            {
                "benchmark": "local_recovery",
                "machine": describe_machine(),
                "workload": "examples/digits.yaml, 2 pods x 2 processes, gloo, kill -9 of worker-1's "
                "trainer at half the steps",
                "restarts": parse_restarts(text),
                "breakdown_seconds": rows,
            },
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
