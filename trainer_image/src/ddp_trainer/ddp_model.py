"""The model as DDP trains it: on its device, BatchNorm made synchronous if asked, DDP's bucket and graph
options, the bf16 gradient compression hook, and torch.compile last so it compiles the DDP-wrapped graph."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from .device_options import bf16_supported, precision

SYNC_BATCHNORM_ON_CPU = "--ddp.sync-batchnorm ignored: SyncBatchNorm only works on CUDA; using plain BatchNorm"


def use_sync_batchnorm(requested: bool, device: torch.device) -> tuple[bool, str | None]:
    """A GPU job's spec stays runnable on a CPU node (local mode, tests): the option is dropped with a warning
    instead of DDP's ValueError."""
    if requested and device.type != "cuda":
        return False, SYNC_BATCHNORM_ON_CPU
    return requested, None


class WithLoss(nn.Module):
    """The model and its per-sample loss as one module, for torch.compile: dynamo compiles what runs inside DDP's
    forward (DDP's own forward it skips), so a loss taken after the compiled call ran eagerly, outside the graph, and
    inductor never fused it with the model's last kernels. DDP wraps this in the model's place: the same parameters,
    the same all-reduce averaging and no_sync. Its state is the model's under a `model.` prefix: the trainer reads and
    writes `bare_model(ddp.module)`, so checkpoints of compiled and eager runs hold the same entries."""

    def __init__(self, model: nn.Module, sample_losses: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
        super().__init__()
        self.model = model
        self.sample_losses = sample_losses

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.sample_losses(self.model(inputs), targets)


def bare_model(module: nn.Module) -> nn.Module:
    """The workload's model inside what DDP wraps."""
    return module.model if isinstance(module, WithLoss) else module


def wrap_model(
    model: nn.Module,
    device: torch.device,
    ddp_cfg,
    warn=print,
    compiled: bool = False,
    sample_losses: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[DDP, Callable[..., Any]]:
    """Returns (the DDP module to train, the module to call: torch.compile's wrapper of it when `compiled`, the
    same object otherwise; device_options.use_compile decides). Compiled with `sample_losses`, DDP wraps
    WithLoss(model, sample_losses) and the call takes (inputs, targets) and returns the per-sample losses: the loss
    is in the compiled graph."""
    sync_bn, warning = use_sync_batchnorm(ddp_cfg.sync_batchnorm, device)
    if warning:
        warn(warning)
    if sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model.to(device)
    if compiled and sample_losses is not None:
        model = WithLoss(model, sample_losses)
    if compiled and (dist.get_world_size() if dist.is_initialized() else 1) == 1:
        # DDPOptimizer splits the graph at bucket boundaries so all-reduces overlap the backward; one rank has
        # nothing to overlap, and the splits only cost fusion.
        torch._dynamo.config.optimize_ddp = False
    ddp = DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=ddp_cfg.find_unused_parameters,
        static_graph=ddp_cfg.static_graph,
        bucket_cap_mb=ddp_cfg.bucket_cap_mb,
        gradient_as_bucket_view=ddp_cfg.gradient_as_bucket_view,
    )
    if ddp_cfg.comm_hook == "bf16":
        ddp.register_comm_hook(state=None, hook=default_hooks.bf16_compress_hook)
    elif ddp_cfg.comm_hook == "powersgd":
        # Low-rank gradients with error feedback (Vogels et al. 2019); exact all-reduces for the first 10 steps.
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=ddp_cfg.powersgd_rank, start_powerSGD_iter=10
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    callable_model = torch.compile(ddp) if compiled else ddp
    return ddp, callable_model


def autocast_context(device: torch.device, mode: str):
    """Autocast in the chosen precision (device_options.precision: bf16, fp16, or off); `auto` resolves there."""
    if mode == "auto":
        mode = precision(mode, device, bf16_supported(device))
    if mode in ("bf16", "fp16"):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if mode == "bf16" else torch.float16)
    return contextlib.nullcontext()


def make_optimizer(model: torch.nn.Module, train_cfg, fused: bool = False) -> torch.optim.Optimizer:
    if train_cfg.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=train_cfg.lr, momentum=train_cfg.momentum, weight_decay=train_cfg.weight_decay
        )
    # fused: one kernel for every parameter's update (device_options.use_fused); None keeps torch's foreach.
    return torch.optim.AdamW(
        model.parameters(), lr=train_cfg.lr, weight_decay=train_cfg.weight_decay, fused=fused or None
    )
