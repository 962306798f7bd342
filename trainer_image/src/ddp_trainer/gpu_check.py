"""Refuse to train on CPU when the pod asked for GPUs. Without this, a GPU pod whose CUDA is unusable (a driver older
than the image's CUDA needs, a node without the NVIDIA runtime) runs every rank on gloo and the CPU, exits 0, and
leaves `backend=gloo` in a start line as the only clue.

The pod asked for GPUs when `--device cuda` says so, or when the device plugin handed the container devices:
NVIDIA_VISIBLE_DEVICES names them (UUIDs or indices; a path under the volume-mounts strategy), or
CUDA_VISIBLE_DEVICES does. NVIDIA_VISIBLE_DEVICES=all is not a request: the CUDA base images set it in their own
ENV, so every container of the image has it, on a CPU node too; the device plugin replaces it with the devices it
allocated."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
VISIBLE_DEVICES_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
NOT_A_NVIDIA_REQUEST = frozenset({"", "void", "none", "all"})
NOT_A_CUDA_REQUEST = frozenset({"", "-1", "void", "none"})
SAID_CHARS = 300  # the operator keeps 1,024 characters of a message; the cause comes before this
_DRIVER = re.compile(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)\s")


class NoUsableGpu(RuntimeError):
    """GPUs were asked for and CUDA cannot use any. Retrying on the same node cannot help."""


@dataclass(frozen=True)
class CudaProbe:
    available: bool
    torch_cuda: str | None  # the CUDA version torch was built for (torch.version.cuda)
    driver: str | None  # the NVIDIA kernel driver's version, when the container can read it
    said: str  # what torch warned while initialising CUDA, e.g. "The NVIDIA driver on your system is too old"


def gpus_requested(device: str, environ: Mapping[str, str] | None = None) -> str | None:
    """What asked for GPUs, in words for the message; None when nothing did."""
    env = os.environ if environ is None else environ
    if device == "cuda":
        return "--device cuda"
    for name, not_a_request in (
        ("NVIDIA_VISIBLE_DEVICES", NOT_A_NVIDIA_REQUEST),
        ("CUDA_VISIBLE_DEVICES", NOT_A_CUDA_REQUEST),
    ):
        value = env.get(name)
        if value is not None and value.strip().lower() not in not_a_request:
            return f"{name}={value}"
    return None


def driver_version(path: Path = DRIVER_VERSION_FILE) -> str | None:
    try:
        match = _DRIVER.search(path.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def probe_cuda() -> CudaProbe:
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    return CudaProbe(available, torch.version.cuda, driver_version(), " ".join(str(w.message) for w in said))


def no_gpu_message(asked_by: str, probe: CudaProbe, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    driver = probe.driver or f"not readable ({DRIVER_VERSION_FILE} missing: no NVIDIA driver in the container)"
    visible = ", ".join(f"{name}={env.get(name, '<unset>')}" for name in VISIBLE_DEVICES_ENV)
    needs = probe.torch_cuda or "none (a CPU-only torch)"
    message = (
        f"GPUs were requested ({asked_by}) but CUDA is not usable, refusing to train on CPU: NVIDIA driver {driver}, "
        f"torch {torch.__version__} built for CUDA {needs}, visible devices {visible}"
    )
    if probe.said:
        message += f"; torch said: {probe.said.strip()[:SAID_CHARS]}"
    return message + (
        ". Check the node's driver supports that CUDA version and that the pod runs with the NVIDIA runtime."
    )


def check_gpu(
    device: str, environ: Mapping[str, str] | None = None, probe: Callable[[], CudaProbe] = probe_cuda
) -> None:
    asked_by = gpus_requested(device, environ)
    if asked_by is None:
        return
    found = probe()
    if not found.available:
        raise NoUsableGpu(no_gpu_message(asked_by, found, environ))
