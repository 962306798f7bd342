"""World 2 against world 1 on CPU (gloo), and what gradient accumulation does to the cost of the gradient
all-reduce. Run once per world size under torchrun; rank 0 writes one JSON per world size:

    torchrun --standalone --nproc-per-node 2 bench/trainer_scaling.py --out results/w2.json

The per-rank micro-batch is fixed, so k accumulation steps do k micro-batches of work per all-reduce: the
scaling efficiency thr(world 2) / (2 x thr(world 1)) at each k shows how much of the sync cost accumulation
hides. Every rank runs one intra-op thread, so world 2 uses two cores and world 1 one."""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.distributed as dist

from ddp_trainer.bench_gpu import ensure_process_group, harness_throughput, trainer_config
from ddp_trainer.process_exit import leave
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer


def measure(env, device, workload: str, micro_batch: int, accum: int, steps: int, repeats: int) -> dict:
    cfg = trainer_config(workload, "tiny", micro_batch * accum, False)
    cfg.train.grad_accum_steps = accum
    trainer = Trainer(cfg, env, device, Identity("bench", "0", env.rank))
    trainer.talks = False
    harness_throughput(trainer, 3, device)  # warm-up: allocator, first DDP bucket rebuild
    runs = [harness_throughput(trainer, steps, device) for _ in range(repeats)]
    return {
        "workload": workload,
        "world_size": env.world_size,
        "grad_accum_steps": accum,
        "micro_batch_per_rank": micro_batch,
        "samples_per_second": statistics.median(runs),
        "samples_per_second_runs": runs,
        "parameters": sum(p.numel() for p in trainer.ddp.module.parameters()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="gpt")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--accum", default="1,2,4")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    env, device = ensure_process_group()
    results = [measure(env, device, a.workload, a.micro_batch, int(k), a.steps, a.repeats) for k in a.accum.split(",")]
    if env.rank == 0:
        with open(a.out, "w") as f:
            json.dump(
                {"world_size": env.world_size, "threads_per_rank": 1, "backend": "gloo", "results": results},
                f,
                indent=1,
            )
        for r in results:
            print(
                f"world={r['world_size']} accum={r['grad_accum_steps']} samples/s={r['samples_per_second']:.1f}",
                flush=True,
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    leave(main())
