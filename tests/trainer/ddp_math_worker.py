"""Runs inside torch.multiprocessing.spawn: one harness step per scenario on a 2-rank gloo group, parameters
written to a file for the test to compare with a single-process step on the union batch."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddp_trainer.config import parse_config
from ddp_trainer.distributed_env import DistEnv
from ddp_trainer.process_exit import leave
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer
from ddp_trainer.workloads import IndexableTensors, Workload

SEED = 11


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return torch.randn(24, 5, generator=g), torch.randint(0, 3, (24,), generator=g)


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def sample_losses(out, y):
    return F.cross_entropy(out, y, reduction="none")


def args_for(global_batch: int, accum: int, extra: list[str]) -> list[str]:
    return [*extra, "--train.steps", "1", "--train.global-batch-size", str(global_batch), "--train.grad-accum-steps",
            str(accum), "--train.optimizer", "sgd", "--train.momentum", "0", "--train.lr", "0.5",
            "--train.lr-scaling", "none", "--train.decay", "constant", "--train.seed", str(SEED),
            "--data.shuffle", "false", "--metrics.port", "0", "--log.every-steps", "1"]


def count_allreduces(counter: list[int]):
    def hook(state, bucket):
        counter[0] += 1
        return default_hooks.allreduce_hook(None, bucket)
    return hook


def run_scenarios(rank: int, world: int, port: int, out_dir: str, scenarios: list[tuple[str, int, int, list]]):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    dist.init_process_group("gloo")
    env = DistEnv.from_environ()
    for name, global_batch, accum, extra in scenarios:
        cfg = parse_config(args_for(global_batch, accum, extra), {})
        torch.manual_seed(SEED)
        workload = Workload(name="math", model=model(), train_set=IndexableTensors(*data()),
                            sample_losses=sample_losses)
        trainer = Trainer(cfg, env, torch.device("cpu"), Identity("math", "0", rank), workload=workload)
        calls = [0]
        if cfg.ddp.comm_hook == "none":  # DDP takes one hook only; the bf16 scenario has the harness's own
            trainer.ddp.register_comm_hook(None, count_allreduces(calls))
        trainer.train()
        if rank == 0:
            torch.save({"params": [p.detach().clone() for p in trainer.ddp.module.parameters()],
                        "allreduce_calls": calls[0]}, os.path.join(out_dir, f"{name}.pt"))
    dist.destroy_process_group()
    leave(0)
