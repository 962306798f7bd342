"""The ddp_trainer loop against a minimal hand-written loop (world 1, same model, batch and optimizer), as
paired alternations: each pair runs the two loops back to back, so both see the same load on a shared VM, and
the overhead is the median over pairs of 1 - harness / baseline. The loops themselves are
ddp_trainer.bench_gpu's (its harness_throughput and baseline_throughput).

    python bench/trainer_overhead.py --out results/trainer_overhead.json [--pairs 15 --steps 10]"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.distributed as dist

from ddp_trainer.bench_gpu import BATCH, baseline_throughput, ensure_process_group, harness_throughput, trainer_config
from ddp_trainer.process_exit import leave
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer


def paired_overhead(workload: str, pairs: int, steps: int, env, device) -> dict:
    batch = BATCH["tiny"][workload]
    trainer = Trainer(trainer_config(workload, "tiny", batch, False), env, device, Identity("bench", "0", env.rank))
    trainer.talks = False
    harness_throughput(trainer, 5, device)
    harness, baseline = [], []
    for i in range(pairs):
        # Alternate which loop goes first, so a load change inside a pair does not always favour one of them.
        if i % 2:
            harness.append(harness_throughput(trainer, steps, device))
            baseline.append(baseline_throughput(trainer, steps, device, False))
        else:
            baseline.append(baseline_throughput(trainer, steps, device, False))
            harness.append(harness_throughput(trainer, steps, device))
    overheads = sorted(1 - h / b for h, b in zip(harness, baseline, strict=True))
    quartiles = statistics.quantiles(overheads, n=4) if len(overheads) >= 2 else [overheads[0]] * 3
    return {
        "workload": workload,
        "preset": "tiny",
        "batch_per_rank": batch,
        "world_size": env.world_size,
        "pairs": pairs,
        "steps_per_run": steps,
        "samples_per_second": statistics.median(harness),
        "baseline_samples_per_second": statistics.median(baseline),
        "harness_overhead": statistics.median(overheads),
        "overhead_iqr": [quartiles[0], quartiles[2]],
        "samples_per_second_runs": harness,
        "baseline_runs": baseline,
        "parameters": sum(p.numel() for p in trainer.ddp.module.parameters()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workloads", default="digits,cnn,gpt")
    p.add_argument("--pairs", type=int, default=15)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    torch.set_num_threads(1)  # the same single core for both loops; the VM has two, shared
    env, device = ensure_process_group()
    results = [paired_overhead(w, a.pairs, a.steps, env, device) for w in a.workloads.split(",")]
    with open(a.out, "w") as f:
        json.dump(
            {"method": "paired alternation, median of per-pair overhead", "threads": 1, "results": results}, f, indent=1
        )
    for r in results:
        print(
            f"{r['workload']:>6} overhead median {100 * r['harness_overhead']:+.1f}% "
            f"(IQR {100 * r['overhead_iqr'][0]:+.1f}% .. {100 * r['overhead_iqr'][1]:+.1f}%) over {r['pairs']} pairs",
            flush=True,
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    leave(main())
