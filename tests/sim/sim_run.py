"""`make sim SIM_STEPS=N [SIM_SEED=S]`: the simulation at length. Runs seeds from S until N steps have run,
prints a progress line every few seconds and, at the end, steps/s and the invariants checked; a broken one prints
its seed and the shrunk story, and exits 1 (docs/simulation.md)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for the sim package

from sim.driver import run_seed, shrink, story  # noqa: E402
from sim.invariants import INVARIANTS  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--length", type=int, default=400, help="events per seed at most")
    args = parser.parse_args()
    started = last = time.monotonic()
    steps, seed, modes = 0, args.seed, Counter()
    while steps < args.steps:
        out = run_seed(seed, args.length)
        steps += out.steps
        modes[out.config.mode] += 1
        if out.problem is not None:
            print(f"seed {seed} broke a promise after {out.steps} events; shrinking...", flush=True)
            print(story(shrink(out)))
            print(f"replay: make sim SIM_SEED={seed} SIM_STEPS=1")
            return 1
        seed += 1
        if time.monotonic() - last > 5:
            last = time.monotonic()
            rate = steps / (last - started)
            print(f"  {steps:,} / {args.steps:,} steps, seed {seed}, {rate:,.0f} steps/s", flush=True)
    took = time.monotonic() - started
    print(f"{steps:,} steps over {seed - args.seed} seeds ({dict(modes)}) in {took:.0f} s: {steps / took:,.0f} steps/s;"
          f" {len(INVARIANTS)} invariants checked after every step ({steps * len(INVARIANTS):,} checks); none broken")
    return 0


if __name__ == "__main__":
    sys.exit(main())
