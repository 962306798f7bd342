"""A DistributedSampler that shards each global batch instead of the whole epoch.

The stock sampler deals epoch indices round-robin to a fixed number of replicas, so a run cannot resume mid-epoch
at another world size. This one keeps its permutation (seed + epoch, set_epoch) but yields, per step, this
rank's contiguous share of the next B indices, so the global order of samples is the same at any world size."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data.distributed import DistributedSampler

from .batching import SamplePosition, rank_slice


class GlobalBatchSampler(DistributedSampler):
    """Use as a DataLoader `batch_sampler`: yields lists of indices, one list per optimizer step."""

    def __init__(
        self,
        dataset,
        world_size: int,
        rank: int,
        global_batch: int,
        start: SamplePosition,
        shuffle: bool = True,
        seed: int = 0,
    ):
        super().__init__(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=True)
        self.global_batch = global_batch
        # Map-style, fixed length (DistributedSampler reads it once too); torch's Dataset type declares no len.
        self.dataset_size = len(dataset)
        self.start = start.start_of_next_batch(global_batch, self.dataset_size)
        self.set_epoch(self.start.epoch)

    def epoch_order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.dataset_size))
        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)  # the same rule as DistributedSampler
        return torch.randperm(self.dataset_size, generator=generator).tolist()

    def __iter__(self) -> Iterator[list[int]]:
        """Endless: the trainer stops after its step count. set_epoch is called as each epoch begins, so a
        DataLoader worker that copied this object still follows the epoch sequence from the start position."""
        position, n = self.start, self.dataset_size
        share = rank_slice(self.global_batch, self.num_replicas, self.rank)
        while True:
            position = position.start_of_next_batch(self.global_batch, n)
            if position.epoch != self.epoch:
                self.set_epoch(position.epoch)
            order = self.epoch_order(position.epoch)
            while position.batch_fits(self.global_batch, n):
                batch = order[position.offset : position.offset + self.global_batch]
                yield batch[share]
                position = SamplePosition(position.epoch, position.offset + self.global_batch)

    def __len__(self) -> int:
        return self.dataset_size // self.global_batch
