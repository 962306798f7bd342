"""What a resume makes of a checkpoint it cannot read, in both formats: one with this run's entries in other shapes
(another width) is another run's (CheckpointMismatch, exit 65, naming the shapes), not an unreadable one (66, whose
warning quoted only the head of DCP's exception: its ranks and "Traceback"); a transient storage error (a timeout,
EIO) is read again rather than taken for damage. (The mapping of CheckpointMismatch to 65 is run through torchrun in
test_checkpoint_resume.py.)"""

from __future__ import annotations

import errno

import pytest
import torch
from test_dcp_checkpoints import one_rank_group  # noqa: F401  (the fixture)
from torch.distributed.checkpoint.api import CheckpointException

from ddp_trainer import storage_retry
from ddp_trainer.config import parse_config
from ddp_trainer.distributed_env import DistEnv
from ddp_trainer.progress_log import Identity
from ddp_trainer.resume_checks import CheckpointMismatch
from ddp_trainer.trainer import Trainer

ONE_RANK = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, restart_count=0)


def trainer(ck, fmt: str, *extra: str) -> Trainer:
    cfg = parse_config(["--workload", "digits", "--train.steps", "2", "--metrics.port", "0", "--checkpoint.dir",
                        str(ck), "--checkpoint.format", fmt, *extra], {})
    return Trainer(cfg, ONE_RANK, torch.device("cpu"), Identity("read", "0", 0))


def saved(ck, fmt: str, *extra: str) -> None:
    first = trainer(ck, fmt, *extra)
    first.train(finish=False)
    first.save_checkpoint()
    first.wait_for_checkpoint()


@pytest.mark.parametrize("fmt", ["file", "dcp"])
def test_a_checkpoint_of_another_width_is_another_runs_and_names_the_shapes(
    tmp_path, one_rank_group, fmt, capsys  # noqa: F811
):
    ck = tmp_path / "ck"
    saved(ck, fmt, "--model.width", "64")
    before = sorted(p.name for p in ck.iterdir())
    with pytest.raises(CheckpointMismatch) as refused:
        trainer(ck, fmt, "--model.width", "32").resume()
    message = str(refused.value)
    assert "its tensors have other shapes than this run's model and optimizer: " in message, message
    assert "model.net.0.weight [64, 64] there, [32, 64] here" in message, message
    assert "Was the model changed (--model.width" in message
    assert "skipping unreadable checkpoint" not in capsys.readouterr().err
    assert sorted(p.name for p in ck.iterdir()) == before, "nothing deleted"


def fails_first(real, error: BaseException):
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(*args, **kwargs)

    return flaky, calls


@pytest.mark.parametrize("error", [TimeoutError("read timed out"), OSError(errno.EIO, "Input/output error")],
                         ids=["timeout", "EIO"])
def test_a_transient_read_error_is_read_again_and_the_dcp_resume_succeeds(
    tmp_path, one_rank_group, monkeypatch, capsys, error  # noqa: F811
):
    from torch.distributed.checkpoint import FileSystemReader

    monkeypatch.setattr(storage_retry, "RETRY_DELAYS", (0.0, 0.0, 0.0))
    ck = tmp_path / "ck"
    saved(ck, "dcp")
    metadata, metadata_calls = fails_first(FileSystemReader.read_metadata, error)
    data, data_calls = fails_first(FileSystemReader.read_data, error)
    monkeypatch.setattr(FileSystemReader, "read_metadata", metadata)
    monkeypatch.setattr(FileSystemReader, "read_data", data)
    again = trainer(ck, "dcp")
    assert again.resume() and again.step == 2
    warnings = capsys.readouterr().err
    assert "skipping unreadable checkpoint" not in warnings, warnings
    assert warnings.count("transient storage error reading step-000000002.dcp") == 2, warnings
    assert len(data_calls) >= 2 and len(metadata_calls) >= 2


def test_a_transient_read_error_is_read_again_and_the_file_resume_succeeds(
    tmp_path, one_rank_group, monkeypatch, capsys  # noqa: F811
):
    monkeypatch.setattr(storage_retry, "RETRY_DELAYS", (0.0, 0.0, 0.0))
    ck = tmp_path / "ck"
    saved(ck, "file")
    flaky, calls = fails_first(torch.load, OSError(errno.EIO, "Input/output error"))
    monkeypatch.setattr(torch, "load", flaky)
    again = trainer(ck, "file")
    assert again.resume() and again.step == 2
    warnings = capsys.readouterr().err
    assert "skipping unreadable checkpoint" not in warnings, warnings
    assert "transient storage error reading step-000000002.pt (OSError: [Errno 5] Input/output error)" in warnings


def test_an_error_that_lasts_is_tried_a_few_times_then_reported():
    tries = []

    def read():
        tries.append(1)
        raise OSError(errno.EIO, "Input/output error")

    storage_retry.RETRY_DELAYS, kept = (0.0, 0.0, 0.0), storage_retry.RETRY_DELAYS
    try:
        with pytest.raises(OSError):
            storage_retry.retried(read, "x", lambda message: None)
    finally:
        storage_retry.RETRY_DELAYS = kept
    assert len(tries) == 4


def test_damage_is_not_retried_and_dcps_exception_is_described_by_its_cause():
    tries = []
    damaged = CheckpointException("failed", {0: (RuntimeError("size mismatch for w: [64] vs [32]"), None),
                                             1: (RuntimeError("size mismatch for w: [64] vs [32]"), None)})

    def read():
        tries.append(1)
        raise damaged

    with pytest.raises(CheckpointException):
        storage_retry.retried(read, "x", lambda message: None)
    assert len(tries) == 1
    assert storage_retry.describe(damaged) == "ranks 0,1: RuntimeError: size mismatch for w: [64] vs [32]"
    assert "Traceback" in str(damaged)[:200], "what the old excerpt quoted"
