"""The learning rate: its peak as a function of the global batch B, and its course as a function of the step.

The peak follows B, never the world size N. Each rank sums its per-sample losses x N/B and DDP averages over the
N ranks, so the gradient of a step is the mean over the B samples however they are shared: at a fixed B, a resize
changes neither the gradient nor, therefore, the step size it should get. When B itself changes (a per-rank batch
x N), the gradient's noise changes, and the rule that keeps training equivalent depends on the optimizer: linear
in B for SGD (k small steps of batch b are about one step of batch k*b with k times the LR; Goyal et al. 2017),
square root of B for Adam-family optimizers, whose update is normalised by the gradient's second moment (Malladi
et al. 2022). The peak is recomputed on every start; the checkpointed schedule records what the run used."""

from __future__ import annotations

import math
from dataclasses import dataclass


def scaling_rule(scaling: str, optimizer: str) -> str:
    """`auto` is the rule for the optimizer: linear for SGD, sqrt for AdamW."""
    if scaling == "auto":
        return "linear" if optimizer == "sgd" else "sqrt"
    return scaling


def reference_batch(lr_reference_batch: int, fixed_global_batch: int, batch_size_per_rank: int) -> int:
    """The global batch at which --train.lr is the right LR. Unset: the fixed global batch when there is one (the
    LR is used as given, at every world size), else one rank's batch (--train.lr is one rank's LR, as it was)."""
    if lr_reference_batch > 0:
        return lr_reference_batch
    return fixed_global_batch if fixed_global_batch > 0 else batch_size_per_rank


def peak_lr_for_batch(base_lr: float, global_batch: int, reference: int, rule: str) -> float:
    ratio = global_batch / reference
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "none":
        return base_lr
    raise ValueError(f"unknown lr scaling {rule!r}")


@dataclass
class LearningRateSchedule:
    peak_lr: float
    total_steps: int
    warmup_steps: int = 0
    decay: str = "cosine"
    min_lr_ratio: float = 0.1

    def lr_at(self, step: int) -> float:
        """LR for the optimizer step that follows `step` completed steps."""
        if self.warmup_steps > 0 and step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        if self.decay == "constant":
            return self.peak_lr
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        floor = self.peak_lr * self.min_lr_ratio
        return floor + (self.peak_lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    def apply(self, optimizer, step: int) -> float:
        lr = self.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    def state_dict(self) -> dict:
        return {
            "peak_lr": self.peak_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "min_lr_ratio": self.min_lr_ratio,
        }
