"""`--train.micro-batch-size auto`: the largest micro-batch that fits the device, found once and kept.

On CUDA each rank runs a forward and backward of the real model on real samples at growing sizes (doubling, then
bisecting: about 2 log2(share) tries), measuring the allocator's peak. A size fits when it runs and its peak, plus
the optimizer state the first step will allocate, stays within `HEADROOM` of the device's memory (the rest for the
allocator's fragmentation, NCCL's buffers and checkpoint staging). The ranks take the smallest of their answers, so
all run the same number of micro-batches. The probe is eager; a compiled step needs no more memory than that.

The answer goes into each checkpoint with the device it was found on: a restart on the same kind of device keeps it
without probing again, at any world size (the memory a micro-batch needs does not depend on the world size), and one
on another device probes again. On CPU there is no device memory to fill: auto runs the rank's whole share in
`--train.grad-accum-steps` micro-batches, and the sized line says so."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

AUTO = -1  # --train.micro-batch-size auto, as config.MicroBatchSize holds it
HEADROOM = 0.90


@contextlib.contextmanager
def unsynced_batchnorm(module: nn.Module) -> Iterator[None]:
    """SyncBatchNorm layers run as plain BatchNorm (the same parameters and buffers, this rank's batch statistics)
    for the probe: each rank probes sizes of its own, so SyncBatchNorm's all_gather of statistics would pair with
    another rank's at another size, or with none, and hang. The probe then issues no collective; no copy of the
    model is made, so its memory is what training will use."""
    synced = [m for m in module.modules() if isinstance(m, nn.SyncBatchNorm)]
    for m in synced:
        m.forward = types.MethodType(_BatchNorm.forward, m)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for m in synced:
            del m.forward


def largest_fitting(upper: int, fits: Callable[[int], bool]) -> int:
    """The largest m in 1..upper for which fits(m), for a `fits` that holds up to some size and not beyond; 0 when
    not even 1 fits. Doubles from 1, then bisects between the last size that fit and the first that did not."""
    good, bad = 0, None
    m = 1
    while m <= upper:
        if not fits(m):
            bad = m
            break
        good = m
        if m == upper:
            return good
        m = min(2 * m, upper)
    if bad is None:
        return good
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def optimizer_state_bytes(model: torch.nn.Module, optimizer: str) -> int:
    """What the first optimizer step will allocate: AdamW keeps two moments per parameter, SGD one momentum."""
    per_parameter = 2 if optimizer == "adamw" else 1
    return per_parameter * sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def device_key(device: torch.device) -> dict:
    """What the kept answer is valid for: the device's name and memory."""
    props = torch.cuda.get_device_properties(device)
    return {"device": props.name, "memory": int(props.total_memory)}


def device_key_here(device: torch.device) -> dict | None:
    """device_key on CUDA; None on CPU, where there is no device memory and so no answer to keep."""
    return device_key(device) if device.type == "cuda" else None


def probe_cuda(run_at: Callable[[int], None], device: torch.device, reserve_bytes: int, upper: int) -> int:
    """The largest micro-batch whose forward and backward (`run_at(m)`) fit beside `reserve_bytes`."""
    budget = torch.cuda.get_device_properties(device).total_memory * HEADROOM - reserve_bytes

    def fits(m: int) -> bool:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        try:
            run_at(m)
            torch.cuda.synchronize(device)
        except torch.OutOfMemoryError:
            return False
        finally:
            torch.cuda.empty_cache()
        return torch.cuda.max_memory_allocated(device) <= budget

    return largest_fitting(upper, fits)
