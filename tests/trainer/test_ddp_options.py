"""DDP options that depend on the device, decided before any process group exists."""

import os

import pytest
import torch

from ddp_trainer.ddp_model import SYNC_BATCHNORM_ON_CPU, autocast_context, use_sync_batchnorm


def test_sync_batchnorm_is_dropped_on_cpu_with_a_warning():
    assert use_sync_batchnorm(True, torch.device("cpu")) == (False, SYNC_BATCHNORM_ON_CPU)
    assert "SyncBatchNorm only works on CUDA" in SYNC_BATCHNORM_ON_CPU


def test_sync_batchnorm_is_kept_on_cuda_and_off_when_not_asked():
    assert use_sync_batchnorm(True, torch.device("cuda", 0)) == (True, None)
    assert use_sync_batchnorm(False, torch.device("cpu")) == (False, None)


@pytest.mark.filterwarnings("ignore:CUDA is not available")  # building a CUDA autocast on a CPU-only host
def test_autocast_is_bf16_on_cuda_by_default_and_off_on_cpu():
    assert isinstance(autocast_context(torch.device("cuda", 0), "auto"), torch.autocast)
    assert not isinstance(autocast_context(torch.device("cpu"), "auto"), torch.autocast)
    forced = autocast_context(torch.device("cpu"), "bf16")
    assert isinstance(forced, torch.autocast) and forced.fast_dtype == torch.bfloat16


# device_options.py: each GPU option defaulted for its device, decided as a pure function of device and flags.
CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


@pytest.mark.parametrize("mode, device, bf16, want", [
    ("auto", GPU, True, "bf16"),    # Ampere and later
    ("auto", GPU, False, "fp16"),   # V100, T4: fp16 with a GradScaler
    ("auto", CPU, False, "off"),
    ("fp16", CPU, False, "fp16"),   # asked for: kept
    ("off", GPU, True, "off"),
])
def test_precision_by_device(mode, device, bf16, want):
    from ddp_trainer.device_options import precision
    assert precision(mode, device, bf16) == want


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_fp16_autocast_and_the_fused_and_worker_defaults():
    from ddp_trainer.device_options import loader_workers, use_fused
    assert autocast_context(CPU, "fp16").fast_dtype == torch.float16
    assert (use_fused("auto", GPU), use_fused("auto", CPU), use_fused("on", CPU), use_fused("off", GPU)) == (
        True, False, True, False)
    assert loader_workers(-1, GPU, cpus=32, local_world_size=8) == 3  # 4 CPUs per rank, one for the rank itself
    assert loader_workers(-1, GPU, cpus=96, local_world_size=8) == 4
    assert loader_workers(-1, CPU, cpus=96, local_world_size=1) == 0
    assert loader_workers(2, CPU, cpus=1, local_world_size=1) == 2  # asked for: kept


def _cgroup(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("files, want", [
    ({"cpu.max": "100000 100000\n"}, 1.0),                                   # v2, limits.cpu: 1
    ({"cpu.max": "150000 100000\n"}, 1.5),                                   # v2, 1500m
    ({"cpu.max": "max 100000\n"}, None),                                     # v2, no limit
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),  # v1, 500m
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),    # v1, no limit
    ({}, None),                                                               # no cgroup to read
])
def test_the_containers_cpu_limit_is_read_from_its_cgroup(tmp_path, files, want):
    from ddp_trainer.device_options import cgroup_cpu_limit
    assert cgroup_cpu_limit(_cgroup(tmp_path, files)) == want


def test_the_cpus_a_rank_counts_are_its_cpuset_within_its_limit_rounded_up(tmp_path):
    from ddp_trainer.device_options import cpu_count
    cpuset = len(os.sched_getaffinity(0))
    assert cpu_count(_cgroup(tmp_path / "none", {})) == cpuset
    assert cpu_count(_cgroup(tmp_path / "half", {"cpu.max": "50000 100000"})) == 1
    assert cpu_count(_cgroup(tmp_path / "big", {"cpu.max": f"{(cpuset + 8) * 100000} 100000"})) == cpuset
    if cpuset >= 2:
        assert cpu_count(_cgroup(tmp_path / "1.5", {"cpu.max": "150000 100000"})) == 2


@pytest.mark.parametrize("omp, cpus, local_ranks, default, want", [
    (None, 2, 1, 2, 2),      # one rank has the pod's CPUs
    (None, 16, 4, 16, 4),    # shared by the pod's ranks
    (None, 1, 1, 8, 1),      # limits.cpu: 1 on a many-core node: 1 thread, not one per host core
    (None, 2, 8, 2, 1),      # never 0
    (None, 2, 1, 1, 1),      # 2 hyperthreads of 1 core: torch's default (physical cores) is the most
    (None, 4, 1, 0, 1),      # a default that says nothing: still 1
    ("3", 16, 1, 16, None),  # OMP_NUM_THREADS set (the user's, or torchrun's 1): torch follows it
    ("", 4, 2, 4, 2),        # set but empty: as unset
])
def test_intra_op_threads(omp, cpus, local_ranks, default, want):
    from ddp_trainer.device_options import intra_op_threads
    assert intra_op_threads(omp, cpus, local_ranks, default) == want


@pytest.mark.parametrize("name, override, want", [
    ("NVIDIA H100 80GB HBM3", 0, 989.0),
    ("NVIDIA H100 PCIe", 0, 756.0),
    ("NVIDIA H100 NVL", 0, 835.0),
    ("NVIDIA H200", 0, 989.0),
    ("NVIDIA A100-SXM4-80GB", 0, 312.0),
    ("NVIDIA A10G", 0, 70.0),
    ("NVIDIA L40S", 0, 362.0),
    ("NVIDIA L4", 0, 121.0),
    ("NVIDIA B200", 0, 2250.0),
    ("NVIDIA H100 PCIe", 700.0, 700.0),  # --metrics.peak-tflops wins
    ("", 0, None),  # a CPU: no MFU
    ("Some Future GPU", 0, None),
])
def test_the_mfu_peak_is_looked_up_by_device_name(name, override, want):
    from ddp_trainer.device_options import peak_tflops
    assert peak_tflops(name, override) == want


def test_tf32_is_a_cuda_switch_only():
    from ddp_trainer.device_options import apply_tf32
    before = torch.backends.cuda.matmul.allow_tf32
    assert apply_tf32(True, CPU) is False and torch.backends.cuda.matmul.allow_tf32 == before
    try:
        assert apply_tf32(True, GPU) is True and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_activation_checkpointing_gives_the_same_gradients():
    from ddp_trainer.workloads.gpt import GPT, sequence_losses
    grads = []
    for on in (False, True):
        torch.manual_seed(0)
        model = GPT(2, 32, 2, 16, 64, activation_checkpointing=on)
        tokens = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))
        sequence_losses(model(tokens[:, :-1]), tokens[:, 1:]).mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads, strict=True))


@pytest.mark.parametrize("mode, device, replica_groups, want, says_why", [
    ("auto", GPU, False, True, False),  # the default on CUDA
    ("auto", CPU, False, False, False),  # inductor's C++ build costs a small CPU run more than it saves
    ("auto", GPU, True, False, True),  # torchft: off, and the line says why and how to turn it on
    ("on", CPU, False, True, False),
    ("on", GPU, True, True, False),
    ("off", GPU, False, False, False),
])
def test_compile_is_on_by_default_on_cuda_only(mode, device, replica_groups, want, says_why):
    from ddp_trainer.device_options import COMPILE_OFF_UNDER_TORCHFT, use_compile
    on, why = use_compile(mode, device, replica_groups)
    assert on is want
    assert why == (COMPILE_OFF_UNDER_TORCHFT if says_why else None)


@pytest.mark.parametrize("name, major, minor, want", [
    ("Tesla T4", 7, 5, "fp16"),  # bf16 only emulated (torch's default check says yes): fp16 + GradScaler
    ("Tesla V100-SXM2-16GB", 7, 0, "fp16"),
    ("NVIDIA A100-SXM4-80GB", 8, 0, "bf16"),
    ("NVIDIA H100 80GB HBM3", 9, 0, "bf16"),
])
def test_auto_precision_takes_bf16_only_where_the_gpu_has_it_not_emulated(monkeypatch, name, major, minor, want):
    """torch.cuda.is_bf16_supported() says yes on a T4 by default: it counts emulation, which is slow. No GPU here:
    the device's properties are faked, and emulation "works", as on a T4."""
    from types import SimpleNamespace

    from ddp_trainer.device_options import bf16_supported, precision

    props = SimpleNamespace(name=name, major=major, minor=minor, total_memory=16 << 30)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True, raising=False)
    assert precision("auto", GPU, bf16_supported(GPU)) == want
