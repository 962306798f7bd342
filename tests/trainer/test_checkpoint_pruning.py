"""Pruning never leaves a run without a checkpoint to load, in both formats. It kept the `--checkpoint.keep` highest
step numbers, unreadable ones included: with keep 1, a good step 10 and a crashed save at step 50, the restart resumed
from 10, and its first save pruned 10 and kept the crashed 50, so the next start found nothing that loads (66)."""

from __future__ import annotations

import shutil

import pytest
import torch
from test_dcp_checkpoints import one_rank_group  # noqa: F401  (the fixture)

from ddp_trainer.config import parse_config
from ddp_trainer.distributed_env import DistEnv
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer

ONE_RANK = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, restart_count=0)


def trainer(ck, fmt: str, steps: int) -> Trainer:
    cfg = parse_config(["--workload", "digits", "--train.steps", str(steps), "--metrics.port", "0",
                        "--checkpoint.dir", str(ck), "--checkpoint.format", fmt, "--checkpoint.keep", "1",
                        "--checkpoint.every-steps", "10", "--log.every-steps", "10"], {})
    return Trainer(cfg, ONE_RANK, torch.device("cpu"), Identity("prune", "0", 0))


def crash_a_save_at_step_50(ck, fmt: str) -> str:
    """What a writer killed mid-save or a bad disk leaves under a final name: no metadata, or a truncated file."""
    if fmt == "dcp":
        crashed = shutil.copytree(ck / "step-000000010.dcp", ck / "step-000000050.dcp")
        (crashed / ".metadata").unlink()
        return crashed.name
    (ck / "step-000000050.pt").write_bytes((ck / "step-000000010.pt").read_bytes()[:100])
    return "step-000000050.pt"


@pytest.mark.parametrize("fmt", ["file", "dcp"])
def test_keep_1_with_a_crashed_save_above_the_good_one_resumes_on_every_restart(
    tmp_path, one_rank_group, fmt, capsys  # noqa: F811
):
    ck = tmp_path / "ck"
    first = trainer(ck, fmt, 10)
    first.train(finish=False)
    first.save_checkpoint()
    first.wait_for_checkpoint()
    crashed = crash_a_save_at_step_50(ck, fmt)

    restart = trainer(ck, fmt, 30)
    assert restart.resume() and restart.step == 10
    restart.train(finish=False)  # saves step 20, which prunes
    restart.wait_for_checkpoint()
    warnings = capsys.readouterr().err

    again = trainer(ck, fmt, 30)
    assert again.resume() and again.step == 20, "the second restart found a checkpoint that loads"
    assert f"skipping unreadable checkpoint {crashed}" in warnings, warnings
    assert f"moved unreadable checkpoint {crashed} aside to {crashed}.unreadable" in warnings, warnings
    suffix = ".dcp" if fmt == "dcp" else ".pt"
    assert sorted(p.name for p in ck.iterdir()) == [f"step-000000020{suffix}", f"{crashed}.unreadable"]
