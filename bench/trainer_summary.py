"""Joins the trainer's raw results (ddp_trainer.bench_gpu's overhead figures, one scaling JSON per world size)
into bench/results/trainer.json: overhead per workload and, per accumulation setting, the scaling efficiency
thr(world 2) / (2 x thr(world 1))."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from machine import describe_machine


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def join_scaling(w1: dict, w2: dict) -> list[dict]:
    by_k = {r["grad_accum_steps"]: r for r in w1["results"]}
    rows = []
    for r2 in w2["results"]:
        r1 = by_k.get(r2["grad_accum_steps"])
        if r1 is None:
            continue
        rows.append(
            {
                "grad_accum_steps": r2["grad_accum_steps"],
                "micro_batch_per_rank": r2["micro_batch_per_rank"],
                "world1_samples_per_second": r1["samples_per_second"],
                "world2_samples_per_second": r2["samples_per_second"],
                "efficiency": r2["samples_per_second"] / (2 * r1["samples_per_second"]),
            }
        )
    return rows


def load_trainer(results: Path) -> dict | None:
    joined = _load(results / "trainer.json")
    if joined:
        return joined
    overhead, w1, w2 = (
        _load(results / n) for n in ("trainer_overhead.json", "trainer_scaling_w1.json", "trainer_scaling_w2.json")
    )
    if not (overhead or (w1 and w2)):
        return None
    return {
        "benchmark": "trainer",
        "machine": describe_machine(),
        "overhead_aim": 0.03,
        "overhead": (overhead or {}).get("results", []),
        "overhead_settings": {k: v for k, v in (overhead or {}).items() if k != "results"},
        "scaling_workload": w2["results"][0]["workload"] if w2 else None,
        "scaling_parameters": w2["results"][0]["parameters"] if w2 else None,
        "scaling": join_scaling(w1, w2) if w1 and w2 else [],
    }


def main() -> int:
    results = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent / "results")
    (results / "trainer.json").unlink(missing_ok=True)
    joined = load_trainer(results)
    if joined is None:
        print("no trainer results to join", file=sys.stderr)
        return 1
    (results / "trainer.json").write_text(json.dumps(joined, indent=1) + "\n")
    for name in ("trainer_overhead.json", "trainer_scaling_w1.json", "trainer_scaling_w2.json"):
        (results / name).unlink(missing_ok=True)  # folded into trainer.json
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
