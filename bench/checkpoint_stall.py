"""The step stall of a periodic checkpoint, by format (docs/trainer.md, Checkpoints): per-step wall times of a
gpt model whose state (weights + AdamW moments, about 400 MB at the defaults) costs more to save than a step
takes, on a gloo group (run it under torchrun). For each mode a run times `--steps` steps with a save every
`--every`; the stall per save is its time over the median time of the same steps without saves, over its saves.
Modes alternate in rounds, so a load change on a shared VM does not favour one. The baseline is `file` (rank 0's
torch.save + fsync while the others wait), measured in the same run.

    torchrun --standalone --nproc-per-node 2 bench/checkpoint_stall.py --out results/checkpoint_stall.json"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time

import torch.distributed as dist

from ddp_trainer.bench_gpu import ensure_process_group
from ddp_trainer.config import parse_config
from ddp_trainer.process_exit import leave
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer
from machine import describe_machine

MODES = {
    "none": [],
    "file": ["--checkpoint.format", "file"],
    "dcp_sync": ["--checkpoint.format", "dcp", "--checkpoint.async-save", "false"],
    "dcp_async": ["--checkpoint.format", "dcp", "--checkpoint.async-save", "true"],
}


PARAMETERS = [0]  # the model's size, as the last run built it


def config(mode: str, folder: str, args: argparse.Namespace):
    saves = ["--checkpoint.dir", folder, "--checkpoint.every-steps", str(args.every), "--checkpoint.keep", "1"]
    return parse_config(
        [
            "--workload", "gpt", "--model.layers", str(args.layers), "--model.width", str(args.width),
            "--model.heads", "8", "--model.seq-len", "16", "--model.vocab-size", "256",
            "--train.batch-size-per-rank", "2", "--train.decay", "constant", "--metrics.port", "0",
            "--log.every-steps", "1000", "--checkpoint.on-finish", "false", "--train.steps", "1",
            *(saves + MODES[mode] if mode != "none" else []),
        ],
        environ={},
    )  # fmt: skip


def run_once(mode: str, args: argparse.Namespace, env, device) -> tuple[float, int]:
    """(wall seconds of `--steps` steps after a warm-up, saves among them) with a fresh Trainer and folder. The
    last async save's background write, after the timed steps, is waited for outside the timing."""
    folder = tempfile.mkdtemp(prefix="ckstall-") if env.rank == 0 else ""
    box = [folder]
    dist.broadcast_object_list(box, src=0)
    trainer = Trainer(config(mode, box[0], args), env, device, Identity("bench", "0", env.rank))
    trainer.talks = False
    PARAMETERS[:] = [sum(q.numel() for q in trainer.ddp.module.parameters())]
    trainer.cfg.train.steps = args.warmup
    trainer.train(finish=False)
    start, end = trainer.step, trainer.step + args.steps
    dist.barrier()
    started = time.perf_counter()
    trainer.cfg.train.steps = end
    trainer.train(finish=False)
    seconds = time.perf_counter() - started
    trainer.wait_for_checkpoint()
    dist.barrier()
    if env.rank == 0:
        shutil.rmtree(box[0], ignore_errors=True)
    saves = 0 if mode == "none" else sum(1 for s in range(start + 1, end) if s % args.every == 0)
    # Collected here, not by chance later in a DataLoader worker forked for the next run, where freeing its DDP
    # reducer touches CUDA and kills the worker ("CUDA error: initialization error", seen on an H200).
    del trainer
    gc.collect()
    return seconds, saves


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--every", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    env, device = ensure_process_group()
    runs: dict[str, list[tuple[float, int]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES if r % 2 == 0 else reversed(MODES):
            runs[mode].append(run_once(mode, args, env, device))
            if env.rank == 0:
                seconds, saves = runs[mode][-1]
                print(f"round {r + 1}/{args.rounds} {mode}: {seconds:.2f}s for {args.steps} steps, {saves} saves",
                      flush=True)  # fmt: skip
    plain = statistics.median(seconds for seconds, _ in runs["none"])
    step = plain / args.steps
    stall = {m: statistics.median((sec - plain) / n for sec, n in runs[m]) for m in MODES if m != "none"}
    saves = runs["file"][0][1]
    if env.rank == 0:
        params = PARAMETERS[0]
        result = {
            "machine": describe_machine(),
            "device": str(device),
            "world_size": env.world_size,
            "parameters": params,
            "state_mb": round(params * 4 * 3 / 2**20),  # weights and AdamW's two moments, fp32
            "median_step_seconds": step,
            "saves_per_run": saves,
            "stall_seconds_per_save": stall,
            "stall_vs_file": {m: stall[m] / stall["file"] for m in stall},
            "runs": runs,
        }
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    dist.barrier()
    leave(0)
    return 0


if __name__ == "__main__":
    main()
