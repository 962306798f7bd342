"""How a global batch is shared between ranks and micro-batches, and where in the data a run stands. Pure
functions, so the arithmetic is tested without a process group."""

from __future__ import annotations

from dataclasses import dataclass


def split_sizes(total: int, parts: int) -> list[int]:
    """total split into `parts` sizes that differ by at most one; the first total % parts get the extra one."""
    if parts < 1:
        raise ValueError(f"cannot split into {parts} parts")
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def rank_slice(global_batch: int, world_size: int, rank: int) -> slice:
    sizes = split_sizes(global_batch, world_size)
    start = sum(sizes[:rank])
    return slice(start, start + sizes[rank])


def global_batch_size(world_size: int, batch_size_per_rank: int, fixed_global_batch: int) -> int:
    batch = fixed_global_batch if fixed_global_batch > 0 else batch_size_per_rank * world_size
    if batch < world_size:
        raise ValueError(
            f"global batch {batch} is smaller than the world size {world_size}: some ranks would get no samples"
        )
    return batch


def check_accumulation(global_batch: int, world_size: int, micro_batches: int) -> None:
    """Every rank must run the same number of non-empty micro-batches, or DDP's reductions fall out of step."""
    smallest_share = global_batch // world_size
    if smallest_share < micro_batches:
        raise ValueError(
            f"each rank gets at least {smallest_share} samples per step, fewer than "
            f"--train.grad-accum-steps={micro_batches} micro-batches"
        )


def loss_scale(world_size: int, global_batch: int) -> float:
    """Per-sample losses are summed and multiplied by this. DDP averages gradients over ranks (divides by N),
    so N/B makes the result the mean over the global batch even when ranks hold unequal shares."""
    return world_size / global_batch


@dataclass(frozen=True)
class BatchPlan:
    """How one attempt runs the global batch: each rank's share in `accum_steps` micro-batches, none larger than
    `micro_batch_limit`. The limit is kept in the checkpoint, so an attempt at a smaller world size (a larger
    share per rank) accumulates more micro-batches instead of running larger ones than the first attempt fit."""

    global_batch: int
    world_size: int
    accum_steps: int
    micro_batch_limit: int

    def rank_batch(self, rank: int) -> int:
        return split_sizes(self.global_batch, self.world_size)[rank]

    def micro_batch(self, rank: int) -> int:
        """The largest of the rank's micro-batches (its share split as evenly as split_sizes splits)."""
        return -(-self.rank_batch(rank) // self.accum_steps)

    @property
    def largest_micro_batch(self) -> int:
        return self.micro_batch(0)  # rank 0 holds the largest share


def plan_batches(global_batch: int, world_size: int, accum_steps: int, micro_batch_limit: int = 0) -> BatchPlan:
    """At least `accum_steps` micro-batches, more when the largest share would not fit `micro_batch_limit`
    (0: no limit yet; the plan's own largest micro-batch becomes the limit it records)."""
    largest_share = -(-global_batch // world_size)
    steps = accum_steps
    if micro_batch_limit > 0:
        steps = max(steps, -(-largest_share // micro_batch_limit))
    if global_batch // world_size < steps and steps > accum_steps:
        raise ValueError(
            f"a micro-batch of at most {micro_batch_limit} samples needs {steps} micro-batches per step, but some "
            f"ranks get only {global_batch // world_size} samples of the global batch {global_batch} at world size "
            f"{world_size}; raise --train.micro-batch-size"
        )
    check_accumulation(global_batch, world_size, steps)
    plan = BatchPlan(global_batch, world_size, steps, micro_batch_limit)
    return plan if micro_batch_limit > 0 else BatchPlan(global_batch, world_size, steps, plan.largest_micro_batch)


@dataclass(frozen=True)
class SamplePosition:
    """Where the next global batch starts: an epoch and an offset into that epoch's permutation. It depends only
    on the global batches consumed, never on how they were split, so it survives a change of world size."""

    epoch: int = 0
    offset: int = 0

    def batch_fits(self, batch: int, dataset_len: int) -> bool:
        return self.offset + batch <= dataset_len

    def start_of_next_batch(self, batch: int, dataset_len: int) -> SamplePosition:
        """The position a batch of `batch` samples starts at: here, or the next epoch when the rest of this
        one is too short (the tail is dropped, as drop_last does)."""
        if batch > dataset_len:
            raise ValueError(f"global batch {batch} is larger than the data set ({dataset_len} samples)")
        return self if self.batch_fits(batch, dataset_len) else SamplePosition(self.epoch + 1, 0)

    def after_batch(self, batch: int, dataset_len: int) -> SamplePosition:
        start = self.start_of_next_batch(batch, dataset_len)
        return SamplePosition(start.epoch, start.offset + batch)
