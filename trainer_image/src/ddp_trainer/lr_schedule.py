"""The learning rate as a pure function of the step and the peak LR. The peak is recomputed from the world
size on every start, so a restart at another world size rescales it; the checkpointed state only records what
the previous run used, for the resume log and tests."""

from __future__ import annotations

import math
from dataclasses import dataclass


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
