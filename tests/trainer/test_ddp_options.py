"""DDP options that depend on the device, decided before any process group exists."""

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
