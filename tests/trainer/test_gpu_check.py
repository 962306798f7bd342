"""A pod that asked for GPUs and cannot use CUDA exits 69 with the cause, instead of training on CPU with gloo. On
this CPU machine the request is simulated by env: NVIDIA_VISIBLE_DEVICES as the device plugin sets it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ddp_trainer import exit_codes
from ddp_trainer.gpu_check import CudaProbe, NoUsableGpu, check_gpu, driver_version, gpus_requested, no_gpu_message
from ddpjob_localnode.pod_status import termination_message
from ddpjob_operator.recovery import failures
from launch import DDP_TORCHRUN, run, trainer_env
from test_failure_messages import failed_pod

REQUEST_CASES = [
    # name, --device, env, what asked (None: nothing)
    ("nothing", "auto", {}, None),
    ("the device plugin's UUIDs", "auto", {"NVIDIA_VISIBLE_DEVICES": "GPU-1a2b,GPU-3c4d"},
     "NVIDIA_VISIBLE_DEVICES=GPU-1a2b,GPU-3c4d"),
    ("the volume-mounts strategy's path", "auto", {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
     "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"),
    ("all: the CUDA base image's own ENV, on any node", "auto", {"NVIDIA_VISIBLE_DEVICES": "all"}, None),
    ("void", "auto", {"NVIDIA_VISIBLE_DEVICES": "void"}, None),
    ("none", "auto", {"NVIDIA_VISIBLE_DEVICES": "None"}, None),
    ("empty", "auto", {"NVIDIA_VISIBLE_DEVICES": ""}, None),
    ("CUDA_VISIBLE_DEVICES set", "auto", {"CUDA_VISIBLE_DEVICES": "0,1"}, "CUDA_VISIBLE_DEVICES=0,1"),
    ("CUDA_VISIBLE_DEVICES hiding every GPU (as the tests do)", "auto", {"CUDA_VISIBLE_DEVICES": ""}, None),
    ("CUDA_VISIBLE_DEVICES=-1", "auto", {"CUDA_VISIBLE_DEVICES": "-1"}, None),
    ("--device cuda", "cuda", {}, "--device cuda"),
]


@pytest.mark.parametrize("name, device, environ, want", REQUEST_CASES, ids=[c[0] for c in REQUEST_CASES])
def test_gpus_requested(name, device, environ, want):
    assert gpus_requested(device, environ) == want, name


@pytest.mark.parametrize("text, want", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version: 12\n",
     "535.104.05"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build  (dvs-builder@U16)\n",
     "570.124.06"),
    ("something else\n", None),
])
def test_driver_version(tmp_path, text, want):
    path = tmp_path / "version"
    path.write_text(text)
    assert driver_version(path) == want
    assert driver_version(tmp_path / "missing") is None


TOO_OLD = CudaProbe(False, "13.2", "535.104.05", "CUDA initialization: The NVIDIA driver on your system is too old "
                                                 "(found version 12020).")


def test_the_message_names_driver_cuda_and_devices():
    environ = {"NVIDIA_VISIBLE_DEVICES": "GPU-1a2b"}
    message = no_gpu_message("NVIDIA_VISIBLE_DEVICES=GPU-1a2b", TOO_OLD, environ)
    assert message.startswith("GPUs were requested (NVIDIA_VISIBLE_DEVICES=GPU-1a2b) but CUDA is not usable, "
                              "refusing to train on CPU: NVIDIA driver 535.104.05, torch ")
    assert "built for CUDA 13.2, visible devices NVIDIA_VISIBLE_DEVICES=GPU-1a2b, CUDA_VISIBLE_DEVICES=<unset>" in message
    assert "torch said: CUDA initialization: The NVIDIA driver on your system is too old (found version 12020)" in message
    no_driver = no_gpu_message("--device cuda", CudaProbe(False, None, None, ""), {})
    assert "NVIDIA driver not readable (/proc/driver/nvidia/version missing: no NVIDIA driver in the container)" in no_driver
    assert "built for CUDA none (a CPU-only torch)" in no_driver and "torch said" not in no_driver


def test_check_gpu():
    check_gpu("auto", {}, probe=lambda: pytest.fail("nothing asked: CUDA is not even probed"))
    check_gpu("cuda", {}, probe=lambda: CudaProbe(True, "13.2", "580.1", ""))
    with pytest.raises(NoUsableGpu, match=r"GPUs were requested \(--device cuda\) but CUDA is not usable"):
        check_gpu("cuda", {}, probe=lambda: TOO_OLD)


def test_two_ranks_that_asked_for_gpus_exit_69_and_the_operator_shows_why(tmp_path):
    """The image's entrypoint, 2 processes, on this CPU machine: the device plugin's env says GPUs were given."""
    error_file = tmp_path / "termination-log"
    env = trainer_env(TORCHELASTIC_ERROR_FILE=str(error_file), NVIDIA_VISIBLE_DEVICES="GPU-1a2b,GPU-3c4d")
    done = run([*DDP_TORCHRUN, "--standalone", "--nproc-per-node=2", "--monitor-interval=0.5", "-m", "ddp_trainer",
                "--train.steps", "5", "--metrics.port", "0"], env=env, timeout=120)
    log = done.stdout + done.stderr
    assert done.returncode != 0 and "step=" not in done.stdout, log[-3000:]
    assert "ddp_trainer: GPUs were requested (NVIDIA_VISIBLE_DEVICES=GPU-1a2b,GPU-3c4d)" in log
    message = termination_message(error_file.read_text(), log, done.returncode, "FallbackToLogsOnError")
    failure = failures.classify_pod_failure(failed_pod(done.returncode, message), {}, datetime.now(timezone.utc), 30)
    text = failure.describe()
    assert f"exited with code {exit_codes.NO_USABLE_GPU}" in text, text
    cause = "NoUsableGpu: GPUs were requested (NVIDIA_VISIBLE_DEVICES=GPU-1a2b,GPU-3c4d) but CUDA is not usable"
    assert cause in text and text.index(cause) < 400, text
    assert "NVIDIA driver not readable" in text, text
