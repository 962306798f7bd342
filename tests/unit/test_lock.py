"""The one Python lock (hack/requirements.lock) and what must follow it: the trainer image's base tag names the
locked torch with the CUDA and cuDNN of its nvidia-* wheels, the image's constraints are the lock's versions,
and the lock is not older than its inputs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "hack" / "requirements.lock"
DOCKERFILE = ROOT / "trainer_image" / "Dockerfile"
CONSTRAINTS = ROOT / "trainer_image" / "constraints.txt"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.MULTILINE)
# The base is FROM's image, or the default of the BASE_IMAGE build argument that FROM names (a registry-free build
# passes its own stand-in; users build on the default).
_BASE_TAG = re.compile(
    r"^(?:FROM|ARG BASE_IMAGE=)\s*pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn(\d+)-runtime\s*$", re.MULTILINE
)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """name -> version of every `name==version` line (requirements or constraints format)."""
    return {normalize(name): version for name, version in _PIN.findall(text)}


def base_tag(dockerfile: str) -> tuple[str, str, str] | None:
    """(torch, cuda major.minor, cudnn major) of a pytorch/pytorch:<torch>-cuda<X.Y>-cudnn<N>-runtime base."""
    match = _BASE_TAG.search(dockerfile)
    return (match[1], match[2], match[3]) if match else None


def _one(locked: dict[str, str], pattern: str) -> str | None:
    found = [version for name, version in locked.items() if re.fullmatch(pattern, name)]
    return found[0] if len(found) == 1 else None


def tag_drift(dockerfile: str, locked: dict[str, str]) -> list[str]:
    """What differs between the image's base tag and the lock; empty when they agree."""
    tag = base_tag(dockerfile)
    if tag is None:
        return ["the Dockerfile's base is not pytorch/pytorch:<torch>-cuda<X.Y>-cudnn<N>-runtime"]
    torch, cuda, cudnn = tag
    problems = []
    locked_torch = locked.get("torch", "").split("+")[0]  # a local version (+cu132) names the same release
    if torch != locked_torch:
        problems.append(f"base image has torch {torch}, the lock has torch {locked_torch or 'none'}")
    runtime = _one(locked, r"nvidia-cuda-runtime(-cu\d+)?")
    locked_cuda = ".".join(runtime.split(".")[:2]) if runtime else None
    if cuda != locked_cuda:
        problems.append(f"base image has CUDA {cuda}, the lock's nvidia-cuda-runtime is {runtime or 'missing'}")
    cudnn_wheel = _one(locked, r"nvidia-cudnn-cu\d+")
    if cudnn_wheel is None or cudnn != cudnn_wheel.split(".")[0]:
        problems.append(f"base image has cuDNN {cudnn}, the lock's nvidia-cudnn is {cudnn_wheel or 'missing'}")
    return problems


LOCKED = {"torch": "2.15.0", "nvidia-cuda-runtime": "13.2.86", "nvidia-cudnn-cu13": "9.26.0.51"}


@pytest.mark.parametrize(
    "name, dockerfile, locked, want",
    [
        ("in step", "FROM pytorch/pytorch:2.15.0-cuda13.2-cudnn9-runtime\n", LOCKED, []),
        (
            "local version of the same torch",
            "FROM pytorch/pytorch:2.15.0-cuda13.2-cudnn9-runtime\n",
            {**LOCKED, "torch": "2.15.0+cu132"},
            [],
        ),
        (
            "CUDA 12 wheel names",
            "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n",
            {"torch": "2.5.1", "nvidia-cuda-runtime-cu12": "12.4.127", "nvidia-cudnn-cu12": "9.1.0.70"},
            [],
        ),
        (
            "torch bumped in the lock only",
            "FROM pytorch/pytorch:2.14.0-cuda13.2-cudnn9-runtime\n",
            LOCKED,
            ["base image has torch 2.14.0, the lock has torch 2.15.0"],
        ),
        (
            "another CUDA variant",
            "FROM pytorch/pytorch:2.15.0-cuda12.8-cudnn9-runtime\n",
            LOCKED,
            ["base image has CUDA 12.8, the lock's nvidia-cuda-runtime is 13.2.86"],
        ),
        (
            "another cuDNN major",
            "FROM pytorch/pytorch:2.15.0-cuda13.2-cudnn8-runtime\n",
            LOCKED,
            ["base image has cuDNN 8, the lock's nvidia-cudnn is 9.26.0.51"],
        ),
        (
            "a CPU-only lock",
            "FROM pytorch/pytorch:2.15.0-cuda13.2-cudnn9-runtime\n",
            {"torch": "2.15.0"},
            [
                "base image has CUDA 13.2, the lock's nvidia-cuda-runtime is missing",
                "base image has cuDNN 9, the lock's nvidia-cudnn is missing",
            ],
        ),
        (
            "not a pytorch/pytorch runtime tag",
            "FROM python:3.11-slim\n",
            LOCKED,
            ["the Dockerfile's base is not pytorch/pytorch:<torch>-cuda<X.Y>-cudnn<N>-runtime"],
        ),
    ],
)
def test_tag_drift(name, dockerfile, locked, want):
    assert tag_drift(dockerfile, locked) == want


def test_trainer_image_base_tag_follows_the_lock():
    assert tag_drift(DOCKERFILE.read_text(), pins(LOCK.read_text())) == []


def test_trainer_image_constraints_are_the_locks_versions():
    locked, constrained = pins(LOCK.read_text()), pins(CONSTRAINTS.read_text())
    assert constrained, "trainer_image/constraints.txt pins nothing"
    assert {name: locked.get(name) for name in constrained} == constrained, "run `make lock`"


def test_every_locked_requirement_is_pinned_with_a_hash():
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text())
    requirements = [b for b in blocks if not b.startswith("#")]
    assert len(requirements) == len(pins(LOCK.read_text())) > 0
    assert [b.split()[0] for b in requirements if "--hash=sha256:" not in b] == []


def test_lock_is_not_older_than_its_inputs():
    recorded = re.search(r"^# inputs-sha256: ([0-9a-f]{16})$", LOCK.read_text(), re.MULTILINE)
    assert recorded, "hack/requirements.lock has no inputs-sha256 header line"
    # lock.sh itself says what the inputs' digest is now (it exits before resolving anything).
    now = subprocess.run(
        ["bash", str(ROOT / "hack" / "lock.sh")],
        env={**os.environ, "PRINT_INPUTS_DIGEST": "1"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    assert recorded.group(1) == now, (
        "hack/requirements.lock is older than the pyprojects or hack/requirements-dev.txt: run `make lock`"
    )
