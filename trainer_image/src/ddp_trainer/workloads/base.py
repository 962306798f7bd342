"""What every workload is made of: the Workload record and an in-memory data set indexed a batch at a time. The
bundled workloads import these from here, never from the package, which imports them in turn."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import Dataset


class IndexableTensors(Dataset):
    """(inputs, targets) held in memory and indexed a whole batch at a time: the DataLoader calls
    __getitems__ once per batch, which keeps Python per-sample overhead out of GPU throughput figures."""

    returns_batches = True

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor):
        self.inputs, self.targets = inputs, targets

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index):
        return self.inputs[index], self.targets[index]

    def __getitems__(self, indices: list[int]):
        index = torch.as_tensor(indices)
        return self.inputs[index], self.targets[index]


@dataclass
class Workload:
    name: str
    model: nn.Module
    train_set: Dataset
    sample_losses: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (output, target) -> loss per sample, [b]
    evaluate: Callable[[nn.Module, torch.device], float] | None = None  # rank 0, after the last step
    final_metric: str = "final_loss"  # name printed on the done line
    flops_per_sample: float = 0.0  # forward + backward, for MFU; 0 when unknown
    tokens_per_sample: int = 0  # sequence workloads: tokens a sample trains on, for tokens/s; 0 when not tokens
    # The loss traced into the compiled step (ddp_model.WithLoss), where sample_losses is shaped for eager (gpt's is
    # chunked under activation checkpointing, which the compiler need not see); None: sample_losses.
    compiled_sample_losses: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
