"""A plain PyTorch DDP script, as the tutorials write one, that reports its progress to the DDPJob operator with
one call per step: `report(step=..., loss=..., samples=...)` from ddp_trainer.report (status.progress, the STEP
column, the alerts, the dashboard and spec.runPolicy.progressDeadlineSeconds then work as for the bundled
harness). Tiny model, data generated here (no download), checkpoints so a restarted group resumes.

    torchrun --standalone --nproc-per-node 2 examples/user-loop/train.py --steps 300 --checkpoint-dir /tmp/ck

Rank, world size and the rendezvous come only from torchrun's environment."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ddp_trainer.report import report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps in total, across restarts")
    p.add_argument("--global-batch", type=int, default=64, help="split evenly over the ranks")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--checkpoint-dir", default="", help="shared by all ranks; empty: no checkpoints, no resume")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    p.add_argument("--log-every", type=int, default=50, help="steps between rank 0's progress lines")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_dataset(seed: int, size: int = 8192, features: int = 32, classes: int = 4) -> TensorDataset:
    """The same data on every rank: points labelled by a fixed random linear teacher."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    return TensorDataset(x, (x @ teacher).argmax(dim=1))


def make_model(features: int = 32, classes: int = 4) -> nn.Module:
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, classes))


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step-{step:09d}.pt"


def load_latest(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The step to start from: the newest checkpoint's, or 0."""
    found = sorted(folder.glob("step-*.pt")) if folder.is_dir() else []
    if not found:
        return 0
    state = torch.load(found[-1], map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def save(folder: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, keep: int = 2) -> None:
    """Rank 0 only. Written aside and renamed, so a kill mid-write never leaves a torn newest checkpoint."""
    folder.mkdir(parents=True, exist_ok=True)
    target = checkpoint_path(folder, step)
    partial = target.with_suffix(".partial")
    torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, partial)
    os.replace(partial, target)
    for old in sorted(folder.glob("step-*.pt"))[:-keep]:
        old.unlink()


def main() -> None:
    args = parse_args()
    rank, world_size, local_rank = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if args.global_batch % world_size:
        raise SystemExit(f"--global-batch {args.global_batch} does not split evenly over {world_size} ranks")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    folder = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    step = load_latest(folder, model, optimizer) if folder else 0
    if rank == 0 and step:
        print(f"rank 0: resumed from checkpoint step={step}", flush=True)
    ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)

    dataset = make_dataset(args.seed)
    sampler: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.global_batch // world_size, sampler=sampler, drop_last=True)
    epoch, skip = divmod(step, len(loader))  # continue at the batch after the checkpoint's
    while step < args.steps:
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if i < skip:
                continue
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(ddp(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            # The tensor itself: report() reads it when the endpoint is scraped, so no .item() sync here.
            report(step=step, loss=loss, samples=step * args.global_batch, total_steps=args.steps)
            if rank == 0 and (step % args.log_every == 0 or step == args.steps):
                print(f"rank 0: step={step}/{args.steps} epoch={epoch} loss={loss.item():.4f}", flush=True)
            if folder and rank == 0 and (step % args.checkpoint_every == 0 or step == args.steps):
                save(folder, step, model, optimizer)
            if step >= args.steps:
                break
        epoch, skip = epoch + 1, 0
    if rank == 0:
        print(f"rank 0: done step={step}", flush=True)
    # Every rank past its last collective (rank 0's last save included) before the group goes: gloo torn down while
    # a peer still uses it can abort the process at exit ("terminate called without an active exception", seen once
    # in the trainer suite).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
