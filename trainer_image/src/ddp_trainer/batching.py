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


def scaled_lr(base_lr: float, world_size: int, scaling: str) -> float:
    if scaling == "linear":
        return base_lr * world_size
    if scaling == "none":
        return base_lr
    raise ValueError(f"unknown lr scaling {scaling!r}")


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
