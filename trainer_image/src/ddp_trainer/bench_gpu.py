"""One command for the GPU figures: throughput of each workload through the harness, GPT MFU against a given
peak, and the harness's overhead against a nanoGPT-style loop (nanogpt_loop.py) on the same model, batch and
precision. Runs on CPU too (tiny sizes), and under torchrun for world size > 1 (rank 0 writes the JSON).

    python -m ddp_trainer.bench_gpu --out bench.json --preset small --peak-tflops 989
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import time
from typing import cast

import torch
import torch.distributed as dist

from .config import parse_config
from .device_options import peak_tflops
from .distributed_env import DistEnv, choose_backend, choose_device, init_process_group
from .nanogpt_loop import NanoGptLoop
from .progress_log import Identity
from .trainer import Trainer
from .workloads import IndexableTensors, build_workload

# Per-rank batch per workload and preset: large enough to keep a GPU busy, small enough for a CPU test.
BATCH = {"tiny": {"digits": 64, "cnn": 32, "gpt": 8}, "small": {"digits": 1024, "cnn": 256, "gpt": 16}}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ddp_trainer.bench_gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--workloads", default="digits,cnn,gpt")
    p.add_argument("--preset", default="small" if torch.cuda.is_available() else "tiny", choices=BATCH)
    p.add_argument("--steps", type=int, default=50, help="measured steps per repeat")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3, help="harness and baseline alternate; medians reported")
    p.add_argument(
        "--peak-tflops", type=float, default=0.0, help="one GPU's dense bf16 peak for MFU; 0: looked up by its name"
    )
    p.add_argument("--compile", action="store_true", help="torch.compile both the harness and the baseline")
    return p.parse_args(argv)


def ensure_process_group() -> tuple[DistEnv, torch.device]:
    """Outside torchrun, form a group of one on localhost, so the harness runs exactly as in a job."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(
            RANK="0",
            WORLD_SIZE="1",
            LOCAL_RANK="0",
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
    env = DistEnv.from_environ()
    device = choose_device(env)
    init_process_group(env, device)
    return env, device


def trainer_config(workload: str, preset: str, batch: int, compile_model: bool):
    return parse_config(
        [
            "--workload",
            workload,
            "--model.preset",
            preset,
            "--train.batch-size-per-rank",
            str(batch),
            "--train.decay",
            "constant",
            "--metrics.port",
            "0",
            "--log.every-steps",
            "10",
            "--ddp.compile",
            "on" if compile_model else "off",
            "--train.steps",
            "1",
        ],
        environ={},
    )


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def harness_throughput(trainer: Trainer, steps: int, device: torch.device) -> float:
    """Samples/s of the group through Trainer.train() for `steps` more steps (progress lines are silenced by
    the caller's log cadence; the metrics, phase timers and log-step all-reduce all still run)."""
    sync(device)
    dist.barrier()
    started = time.perf_counter()
    trainer.cfg.train.steps = trainer.step + steps
    trainer.train(finish=False)
    sync(device)
    return trainer.global_batch * steps / (time.perf_counter() - started)


def baseline_throughput(trainer: Trainer, steps: int, device: torch.device, compile_model: bool) -> float:
    """The nanoGPT-style loop (nanogpt_loop.py) on a fresh copy of the same workload's model and batch, compiled when
    the harness is: what the harness costs against a loop with no harness at all. Timed as harness_throughput is,
    after three steps of its own (so the compile is outside the figure, as the harness's warm-up puts it)."""
    workload = build_workload(trainer.cfg)
    data = cast(IndexableTensors, workload.train_set)
    loop = NanoGptLoop(workload.model, data.inputs, data.targets, trainer.rank_batch, device, compile_model)
    loop.run(3)
    sync(device)
    dist.barrier()
    started = time.perf_counter()
    loop.run(steps)
    sync(device)
    return trainer.global_batch * steps / (time.perf_counter() - started)


def bench_workload(name: str, args, env: DistEnv, device: torch.device) -> dict:
    batch = BATCH[args.preset][name]
    cfg = trainer_config(name, args.preset, batch, args.compile)
    trainer = Trainer(cfg, env, device, Identity("bench", "0", env.rank))
    trainer.talks = False
    harness_throughput(trainer, args.warmup_steps, device)
    harness, baseline = [], []
    for _ in range(args.repeats):
        baseline.append(baseline_throughput(trainer, args.steps, device, args.compile))
        harness.append(harness_throughput(trainer, args.steps, device))
    h, b = statistics.median(harness), statistics.median(baseline)
    result = {
        "workload": name,
        "preset": args.preset,
        "batch_per_rank": batch,
        "world_size": env.world_size,
        "samples_per_second": h,
        "baseline_samples_per_second": b,
        "harness_overhead": 1 - h / b,
        "samples_per_second_runs": harness,
        "baseline_runs": baseline,
        "flops_per_sample": trainer.workload.flops_per_sample,
        "parameters": sum(p.numel() for p in trainer.ddp.module.parameters()),
    }
    if name == "gpt":
        tokens = cast(IndexableTensors, trainer.workload.train_set)  # what the gpt workload builds
        result["tokens_per_second"] = h * tokens.inputs.shape[1]
    peak = peak_tflops(torch.cuda.get_device_name(device), args.peak_tflops) if device.type == "cuda" else None
    if peak and trainer.workload.flops_per_sample:
        result["mfu"] = h * trainer.workload.flops_per_sample / env.world_size / (peak * 1e12)
        result["baseline_mfu"] = b * trainer.workload.flops_per_sample / env.world_size / (peak * 1e12)
        result["peak_tflops"] = peak
        result["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device)
    return result


def machine(device: torch.device) -> dict:
    info = {
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "device": str(device),
        "backend": choose_backend(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


def main(argv=None) -> int:
    args = parse_args(argv)
    env, device = ensure_process_group()
    results = [bench_workload(name, args, env, device) for name in args.workloads.split(",")]
    if env.rank == 0:
        report = {
            "machine": machine(device),
            "peak_tflops": args.peak_tflops or "by device name",
            "compile": args.compile,
            "autocast": "bf16" if device.type == "cuda" else "off",
            "results": results,
        }
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        for r in results:
            mfu = f" mfu={r['mfu']:.3f}" if "mfu" in r else ""
            print(
                f"{r['workload']:>6} samples/s={r['samples_per_second']:.1f} "
                f"baseline={r['baseline_samples_per_second']:.1f} overhead={r['harness_overhead']:+.3f}{mfu}",
                flush=True,
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
