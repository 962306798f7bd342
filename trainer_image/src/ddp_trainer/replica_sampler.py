"""Data for torchft replica groups: torchft's DistributedSampler shards each epoch over every rank of every group
(global rank = group_rank + group_world_size x replica_group), and this batch sampler cuts a rank's shard into
per-step batches from a given step on.

Why from a step: a group's place in the data must follow the step the groups agreed on, which can jump (a group
that healed from a live peer takes over the peer's step) or stand still (a step the groups did not commit is drawn
again). The position is therefore a function of the step alone, and the trainer rebuilds its iterator when the step
moves other than by one.

At step s every rank takes the s-th batch of its shard; over all N x W ranks that is the s-th run of B permuted
samples, the same samples GlobalBatchSampler gives the plain DDP path (sharded between ranks differently). A group
that is down leaves its share of the step unused: torchft's sampler is lossy by design."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torchft.data import DistributedSampler  # type: ignore[import-untyped]


def steps_per_epoch(shard_len: int, rank_batch: int) -> int:
    """Whole batches in one rank's shard of an epoch (its tail is dropped, as drop_last does)."""
    steps = shard_len // rank_batch
    if steps < 1:
        raise ValueError(f"a rank's shard of {shard_len} samples is smaller than its batch of {rank_batch}")
    return steps


def data_position(step: int, per_epoch: int) -> tuple[int, int]:
    """(epoch, batch index within the epoch) of the batch step `step` trains on."""
    return divmod(step, per_epoch)


class ReplicaBatchSampler:
    """A DataLoader `batch_sampler`: endless lists of indices, one per optimizer step, from `start_step` on."""

    def __init__(
        self,
        dataset: Any,
        replica_group: int,
        num_replica_groups: int,
        group_rank: int,
        group_world_size: int,
        rank_batch: int,
        start_step: int,
        shuffle: bool = True,
        seed: int = 0,
    ):
        self.shard = DistributedSampler(
            dataset,
            replica_group,
            num_replica_groups,
            group_rank=group_rank,
            num_replicas=group_world_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=True,
        )
        self.rank_batch = rank_batch
        self.per_epoch = steps_per_epoch(len(self.shard), rank_batch)
        self.start_step = start_step

    def __iter__(self) -> Iterator[list[int]]:
        epoch, index = data_position(self.start_step, self.per_epoch)
        b = self.rank_batch
        while True:
            self.shard.set_epoch(epoch)  # torchft's sampler permutes by seed + epoch, as torch's does
            order = list(self.shard)
            for i in range(index, self.per_epoch):
                yield order[i * b : (i + 1) * b]
            epoch, index = epoch + 1, 0

    def __len__(self) -> int:
        return self.per_epoch
