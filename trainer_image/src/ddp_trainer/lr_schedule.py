"""The learning rate: its peak as a function of the global batch B, and its course as a function of the step.

The peak follows B, never the world size N. Each rank sums its per-sample losses x N/B and DDP averages over the
N ranks, so the gradient of a step is the mean over the B samples however they are shared: at a fixed B, a resize
changes neither the gradient nor, therefore, the step size it should get. When B itself changes (a per-rank batch
x N), the gradient's noise changes, and the rule that keeps training equivalent depends on the optimizer: linear
in B for SGD (k small steps of batch b are about one step of batch k*b with k times the LR; Goyal et al. 2017),
square root of B for Adam-family optimizers, whose update is normalised by the gradient's second moment (Malladi
et al. 2022). The peak is recomputed on every start; the checkpointed schedule records what the run used."""

from __future__ import annotations

import dataclasses
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


@dataclass(frozen=True)
class LearningRateSchedule:
    """Linear warm-up to the peak, then constant or a cosine from the peak down to peak x min_lr_ratio at
    total_steps. The cosine is a function of progress p in [0, 1]; p starts at anchor_progress at anchor_step
    (0 and the end of warm-up on a fresh run) and grows linearly to 1 at total_steps. A resume with another
    --train.steps re-anchors at the resume step (continued_from), so the LR goes on from where it was and reaches
    the floor at the new total, instead of jumping to the new total's value for that step."""

    peak_lr: float
    total_steps: int
    warmup_steps: int = 0
    decay: str = "cosine"
    min_lr_ratio: float = 0.1
    anchor_step: int = 0
    anchor_progress: float = 0.0

    def progress(self, step: int) -> float:
        start = max(self.anchor_step, self.warmup_steps)
        span = max(1, self.total_steps - start)
        return min(1.0, self.anchor_progress + (1.0 - self.anchor_progress) * max(0, step - start) / span)

    def lr_at(self, step: int) -> float:
        """LR for the optimizer step that follows `step` completed steps."""
        if self.warmup_steps > 0 and step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        if self.decay == "constant":
            return self.peak_lr
        floor = self.peak_lr * self.min_lr_ratio
        return floor + (self.peak_lr - floor) * 0.5 * (1 + math.cos(math.pi * self.progress(step)))

    def apply(self, optimizer, step: int) -> float:
        lr = self.lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    def continued_from(self, stored: dict, step: int) -> LearningRateSchedule:
        """This run's schedule, resumed at `step` from a checkpoint's (state_dict). The same total keeps the
        stored anchor; another total anchors at the resume step with the progress the stored schedule had there
        (a checkpoint from before anchors were stored has none: 0 and its warm-up)."""
        anchor = (int(stored.get("anchor_step", 0)), float(stored.get("anchor_progress", 0.0)))
        if int(stored["total_steps"]) != self.total_steps:
            previous = LearningRateSchedule(
                self.peak_lr,
                int(stored["total_steps"]),
                int(stored["warmup_steps"]),
                anchor_step=anchor[0],
                anchor_progress=anchor[1],
            )
            at = max(step, self.warmup_steps)
            anchor = (at, previous.progress(at))
        return dataclasses.replace(self, anchor_step=anchor[0], anchor_progress=anchor[1])

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)
