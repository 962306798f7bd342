"""The reference a harness is measured against: a training loop written the way nanoGPT's train.py writes one, on
the same model. torch.compile of the bare model (the loss outside it, eager), bf16 autocast on CUDA (none on
CPU, as nanoGPT's `nullcontext`), fused AdamW with weight decay on the 2-D parameters only, F.cross_entropy on
the logits, random batches indexed straight out of the token tensor (pinned and copied without blocking on CUDA),
and DDP only when there is more than one rank. No sampler, DataLoader, metrics, phase timers or checkpoints.

The loss runs under `record_function(LOSS_REGION)`, so a profile of these steps can say what share of the step
the loss takes (gpu_checks' profile step)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import record_function

LOSS_REGION = "loss"
BETAS = (0.9, 0.95)  # nanoGPT's
WEIGHT_DECAY = 0.1


def configure_optimizer(model: nn.Module, lr: float, device: torch.device) -> torch.optim.AdamW:
    """nanoGPT's configure_optimizers: decay the matrices (weights, embeddings), not the biases and norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=BETAS, fused=device.type == "cuda")


class NanoGptLoop:
    def __init__(
        self,
        model: nn.Module,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        batch: int,
        device: torch.device,
        compiled: bool,
        lr: float = 6e-4,
    ):
        self.inputs, self.targets, self.batch, self.device = inputs, targets, batch, device
        model = model.to(device)
        self.optimizer = configure_optimizer(model, lr, device)
        wrapped: nn.Module = model
        if dist.is_initialized() and dist.get_world_size() > 1:
            wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
        self.forward: Any = torch.compile(wrapped) if compiled else wrapped
        cuda = device.type == "cuda"
        self.autocast = (lambda: torch.autocast("cuda", torch.bfloat16)) if cuda else contextlib.nullcontext
        self.generator = torch.Generator().manual_seed(1337)

    def get_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        ix = torch.randint(len(self.inputs), (self.batch,), generator=self.generator)
        x, y = self.inputs[ix], self.targets[ix]
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return x, y

    def step(self) -> torch.Tensor:
        x, y = self.get_batch()
        with self.autocast():
            logits = self.forward(x)
            with record_function(LOSS_REGION):
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def run(self, steps: int) -> torch.Tensor | None:
        loss = None
        for _ in range(steps):
            loss = self.step()
        return loss
