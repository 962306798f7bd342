"""The options a tuned GPU trainer sets, each defaulted for its device (docs/trainer.md, "Options per device").
The choices are pure functions of the device and the flags, so each is tested on CPU; `apply_tf32` is the one
global switch.

| option | CUDA default | CPU default |
| --- | --- | --- |
| precision (`--ddp.autocast`) | bf16 where the GPU supports it, else fp16 with a GradScaler | off (fp32) |
| fused AdamW (`--train.fused`) | on | off (foreach) |
| TF32 for fp32 matmuls and convolutions (`--ddp.tf32`) | on | n/a |
| DataLoader workers (`--data.workers -1`) | min(4, CPUs per local rank) | 0 (in-process) |
| intra-op threads (unless `OMP_NUM_THREADS` is set) | the pod's CPUs per local rank | the same |
| pin_memory, prefetch | on, 4 batches per worker | off |
| torch.compile (`--ddp.compile`) | on (off under torchft replica groups) | off |
| MFU peak (`--metrics.peak-tflops 0`) | looked up by device name | none: no MFU |"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

# Dense (no sparsity) bf16/fp16 tensor-core peaks per GPU, TFLOP/s, from each vendor datasheet. First match wins,
# so a longer name comes before its prefix (H100 PCIe before H100, L40S before L4, A100 before A10).
PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM
    ("H800", 989.0),
    ("GH200", 989.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
    ("V100", 125.0),
    ("T4", 65.0),
)
PRECISIONS = ("auto", "bf16", "fp16", "off")
FUSED = ("auto", "on", "off")
CUDA_WORKERS = 4


def peak_tflops(device_name: str, override: float = 0.0) -> float | None:
    """The MFU denominator: `override` (--metrics.peak-tflops) when set, else the table's entry for the device
    name torch reports; None (no MFU) for a device not in it, a CPU included."""
    if override > 0:
        return override
    for name, peak in PEAK_TFLOPS:
        if name.lower() in device_name.lower():
            return peak
    return None


def precision(mode: str, device: torch.device, bf16_supported: bool) -> str:
    """bf16, fp16 or off. auto: bf16 on a GPU that has it (Ampere and later), fp16 on one that does not (V100,
    T4: bf16 there is emulated and slow), off on CPU, where low-precision matmuls are slow on most hosts."""
    if mode != "auto":
        return mode
    if device.type != "cuda":
        return "off"
    return "bf16" if bf16_supported else "fp16"


def use_fused(mode: str, device: torch.device) -> bool:
    """AdamW's fused kernel: one launch for all parameters on CUDA; on CPU the default (foreach) is kept."""
    return mode == "on" or (mode == "auto" and device.type == "cuda")


COMPILE_OFF_UNDER_TORCHFT = (
    "compile auto: off under torchft replica groups (compiled with torchft's comm hook on CPU only, not yet "
    "measured on a GPU); --ddp.compile on turns it on"
)


def use_compile(mode: str, device: torch.device, replica_groups: bool) -> tuple[bool, str | None]:
    """Whether to torch.compile the model, and why not when `auto` says no. auto: on CUDA, where the fused kernels
    are the MFU (docs/trainer.md); off on CPU and under torchft replica groups; on and off are the user's."""
    if mode != "auto":
        return mode == "on", None
    if device.type != "cuda":
        return False, None  # inductor's C++ build costs a small CPU run more than it saves
    if replica_groups:
        return False, COMPILE_OFF_UNDER_TORCHFT
    return True, None


def loader_workers(requested: int, device: torch.device, cpus: int | None, local_world_size: int) -> int:
    """-1 (auto): on CUDA up to 4 worker processes per rank, within this pod's CPUs shared by its ranks, so
    loading overlaps the GPU's step; on CPU none (workers would take the cores the ranks compute on)."""
    if requested >= 0:
        return requested
    if device.type != "cuda":
        return 0
    return max(0, min(CUDA_WORKERS, (cpus or 1) // max(1, local_world_size) - 1))


def apply_tf32(on: bool, device: torch.device) -> bool:
    """TF32 for fp32 matmuls and cuDNN convolutions on CUDA (Ampere and later; 10-bit mantissa, the field's
    default for training). Returns whether it is on."""
    if device.type != "cuda":
        return False
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    return on


def bf16_supported(device: torch.device) -> bool:
    """Native bf16 only (compute capability 8.0 and later). torch's default check also counts emulation: a T4 (7.5)
    passed it, and auto ran it in slow emulated bf16 instead of fp16 with a GradScaler."""
    # torch asks of the current device: distributed_env sets it to the rank's before anything is built.
    return device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The container's CPU limit in cores (`resources.limits.cpu`, which the kubelet writes as a CFS quota): cgroup
    v2's `cpu.max` ("max 100000" when unlimited), or v1's `cpu/cpu.cfs_quota_us` over `cpu.cfs_period_us` (-1 when
    unlimited). None: no limit, or no cgroup to read (not Linux, the local node's processes)."""
    try:
        quota, period = (root / "cpu.max").read_text().split()
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        cores = int(quota) / int(period)
    except ValueError:  # "max"
        return None
    return cores if cores > 0 else None


def cpu_count(root: Path = CGROUP_ROOT) -> int:
    """CPUs this process may use: the pod's cpuset, within its CPU limit rounded up (as Go's GOMAXPROCS and the JVM
    read a container's quota); not the host's cores, which `os.cpu_count()` and torch's default count."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    return max(1, min(cpus, math.ceil(limit))) if limit else cpus


def intra_op_threads(omp_num_threads: str | None, cpus: int, local_world_size: int, default: int) -> int | None:
    """torch's intra-op threads for a rank: the pod's CPUs shared by its local ranks, never more than torch's own
    `default`. That default is the host's physical cores, so a pod limited to 1 CPU, or several ranks or pods on one
    machine, run more threads than cores, and OpenMP's spinning threads then take each other's time slices
    (measured on the 2-core VM under load: 600 digits steps took 45 s at 2 threads against 4 s at 1,
    docs/trainer.md). The cap: on a host whose CPUs are hyperthreads the cpuset counts twice the physical cores,
    and more threads than torch's default there slowed the full suite on CI by half (its nprocPerNode 1 jobs).
    None: OMP_NUM_THREADS is set (the user's, or torchrun's 1 for several processes per node), and torch follows
    it."""
    if omp_num_threads:
        return None
    return min(max(1, default), max(1, cpus // max(1, local_world_size)))
