"""Local recovery (kill -> steps advancing again), taken from `make demo`'s own breakdown, which the local node
measures (ddpjob_localnode.recovery): the demo's stdout in, bench/results/local_recovery.json out.

    python bench/local_recovery.py DEMO_STDOUT_FILE [OUT]"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from machine import describe_machine

PHASES = (
    "detection",
    "pod recreation",
    "process start",
    "rendezvous",
    "checkpoint load",
    "first steps",
    "recovery total",
)
_ROW = re.compile(r"^\s+(" + "|".join(PHASES) + r")\s+(-?[\d.]+) s\s*$")


def parse_breakdown(text: str) -> dict[str, float]:
    rows = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match:
            rows[match.group(1)] = float(match.group(2))
    return rows


def main() -> int:
    source = Path(sys.argv[1])
    out = (
        Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent / "results" / "local_recovery.json"
    )
    rows = parse_breakdown(source.read_text())
    if "recovery total" not in rows:
        print(f"no recovery breakdown in {source} (did the demo kill a worker?)", file=sys.stderr)
        return 1
    out.write_text(
        json.dumps(
            {
                "benchmark": "local_recovery",
                "machine": describe_machine(),
                "workload": "examples/digits.yaml, 2 pods x 2 processes, gloo, kill -9 of worker-1's "
                "trainer at half the steps",
                "breakdown_seconds": rows,
            },
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
