"""What this machine offers: CPUs, memory and GPUs, read cheaply (no torch import, it takes seconds)."""

from __future__ import annotations

import os
import shutil
import subprocess


def share(total: int, nodes: int, index: int) -> int:
    """Agent `index`'s share of `total` among `nodes` agents on this machine (the first ones get the rest)."""
    base, extra = divmod(total, nodes)
    return base + (1 if index < extra else 0)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def gpu_count() -> int:
    override = os.environ.get("LOCAL_NODE_GPUS")
    if override is not None:
        return int(override)
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))
