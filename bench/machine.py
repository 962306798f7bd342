"""What the benchmark ran on, recorded next to every figure: absolute times mean little without it."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess


def describe_machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    memory_gib = 0.0
    try:
        with open("/proc/meminfo") as f:
            memory_gib = int(next(line for line in f if line.startswith("MemTotal")).split()[1]) / 2**20
    except (OSError, StopIteration):
        pass
    gpu = ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        gpu = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(memory_gib, 1),
        "gpu": gpu or "none",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "note": "2-core VM shared with the other engineers' work; no GPU" if not gpu and os.cpu_count() == 2 else "",
    }
