"""What a resume does with checkpoints it cannot use, in both formats. A checkpoint of another optimizer or model is
another run's, not a damaged one: the run stops with 65 and deletes nothing (it used to skip every checkpoint as
"unreadable", start at step 0 and prune them). A damaged newest one gives way to the one before. When none loads,
the run stops with 66 rather than start at step 0. And fp16's loss scale goes on from the checkpoint.

Each format's checkpoints come from one run of the module (`trained`), copied for each test that resumes from them:
a launch costs the seconds of starting torch in three processes, and the runs were the same."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from launch import PROGRESS, RESUMED, run, standalone_cmd, trainer_env
from test_dcp_checkpoints import one_rank_group  # noqa: F401  (the fixture)

from ddp_trainer import exit_codes
from ddp_trainer.config import parse_config
from ddp_trainer.distributed_env import DistEnv
from ddp_trainer.progress_log import Identity
from ddp_trainer.trainer import Trainer


def ck_run(ck, fmt: str, steps: int, *extra: str) -> list[str]:
    return standalone_cmd(2, "--workload", "digits", "--train.steps", str(steps), "--metrics.port", "0",
                          "--checkpoint.dir", str(ck), "--checkpoint.format", fmt, "--checkpoint.every-steps", "10",
                          "--checkpoint.keep", "3", "--log.every-steps", "10", *extra)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{format: a directory with the checkpoints of steps 20, 30 and 40 (keep 3) of a default digits run}."""
    made = {}

    def get(fmt: str):
        if fmt not in made:
            made[fmt] = tmp_path_factory.mktemp(f"trained-{fmt}") / "ck"
            done = run(ck_run(made[fmt], fmt, 40))
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return made[fmt]
    return get


def copy_of(trained, fmt: str, tmp_path):
    return shutil.copytree(trained(fmt), tmp_path / "ck")


def contents(ck) -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in sorted(ck.iterdir())}


def failed_with(result, code: int, error_file) -> str:
    assert f"exitcode  : {code}" in result.stderr, result.stdout[-2000:] + result.stderr[-3000:]
    return json.loads(error_file.read_text())["message"]["message"]


@pytest.mark.parametrize("fmt", ["file", "dcp"])
def test_a_checkpoint_of_another_optimizer_stops_the_run_with_65_and_deletes_nothing(trained, tmp_path, fmt):
    ck, error_file = copy_of(trained, fmt, tmp_path), tmp_path / "termination-log"
    before = contents(ck)  # written by adamw, the default
    again = run(ck_run(ck, fmt, 60, "--train.optimizer", "sgd"),
                env=trainer_env(TORCHELASTIC_ERROR_FILE=str(error_file)))
    message = failed_with(again, exit_codes.CHECKPOINT_MISMATCH, error_file)
    assert "its entries do not fit this run's model and optimizer: missing optim.state." in message, message
    assert ".momentum_buffer" in message and "; unexpected optim.state." in message and ".exp_avg" in message
    assert "Was --train.optimizer or the model changed?" in message
    assert "skipping unreadable checkpoint" not in again.stderr
    assert not RESUMED.search(again.stdout) and "step=10/60" not in again.stdout, "it trained from step 0"
    assert contents(ck) == before, "a checkpoint was deleted or written"


DAMAGE = [
    # format, what is damaged in the newest checkpoint (step 40), how
    ("dcp", "step-000000040.dcp/.metadata", "removed"),
    ("dcp", "step-000000040.dcp/__1_0.distcp", "removed"),  # rank 1's shard
    ("dcp", "step-000000040.dcp/__1_0.distcp", "truncated"),
    ("file", "step-000000040.pt", "truncated"),
]


def damage(ck, name: str, how: str = "removed") -> None:
    target = ck / name
    if how == "truncated":
        target.write_bytes(target.read_bytes()[:100])  # what a crash mid-copy or a bad disk leaves
    else:
        target.unlink()


@pytest.mark.parametrize("fmt, damaged, how", DAMAGE, ids=[f"{d[1]} {d[2]}" for d in DAMAGE])
def test_a_damaged_newest_checkpoint_gives_way_to_the_one_before(trained, tmp_path, fmt, damaged, how):
    ck = copy_of(trained, fmt, tmp_path)
    damage(ck, damaged, how)
    again = run(ck_run(ck, fmt, 50))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    newest = damaged.split("/")[0]
    assert f"skipping unreadable checkpoint {newest}" in again.stderr, again.stderr[-2000:]
    resumed = RESUMED.search(again.stdout)
    assert resumed and resumed["step"] == "30" and resumed["samples"] == str(30 * 64), again.stdout
    assert [int(m["step"]) for m in PROGRESS.finditer(again.stdout)] == [40, 50]


@pytest.mark.parametrize("fmt", ["file", "dcp"])
def test_when_no_checkpoint_loads_the_run_stops_with_66_and_deletes_nothing(trained, tmp_path, fmt):
    ck, error_file = copy_of(trained, fmt, tmp_path), tmp_path / "termination-log"
    names = ["step-000000020", "step-000000030", "step-000000040"]
    for name in names:
        damage(ck, f"{name}.pt" if fmt == "file" else f"{name}.dcp/__0_0.distcp",
               "truncated" if fmt == "file" else "removed")
    before = contents(ck)
    again = run(ck_run(ck, fmt, 50), env=trainer_env(TORCHELASTIC_ERROR_FILE=str(error_file)))
    message = failed_with(again, exit_codes.CHECKPOINT_UNREADABLE, error_file)
    suffix = ".pt" if fmt == "file" else ".dcp"
    listed = ", ".join(n + suffix for n in reversed(names))
    assert message.startswith(f"CheckpointUnreadable: no checkpoint in {ck} loads ({listed}; "), message
    assert "refusing to start again at step 0" in message
    assert all(f"skipping unreadable checkpoint {n}{suffix}" in again.stderr for n in names), again.stderr[-3000:]
    assert "step=10/50" not in again.stdout, "it trained from step 0"
    assert contents(ck) == before, "a checkpoint was deleted or written"


ONE_RANK = DistEnv(rank=0, world_size=1, local_rank=0, local_world_size=1, restart_count=0)


@pytest.mark.parametrize("fmt", ["file", "dcp"])
def test_fp16s_loss_scale_goes_on_from_the_checkpoint(tmp_path, one_rank_group, fmt):  # noqa: F811
    """A resumed fp16 run went back to a scale of 65,536 and skipped steps while it backed off again."""
    cfg = parse_config(["--workload", "digits", "--train.steps", "2", "--ddp.autocast", "fp16", "--metrics.port", "0",
                        "--checkpoint.dir", str(tmp_path / "ck"), "--checkpoint.format", fmt], {})
    first = Trainer(cfg, ONE_RANK, torch.device("cpu"), Identity("fp16", "0", 0))
    first.train(finish=False)
    first.scaler.update(new_scale=512.0)  # as after overflows
    first.save_checkpoint()
    first.wait_for_checkpoint()

    resumed = Trainer(cfg, ONE_RANK, torch.device("cpu"), Identity("fp16", "0", 0))
    assert resumed.resume() and resumed.step == 2
    assert resumed.scaler.get_scale() == 512.0
    assert resumed.scaler.state_dict() == first.scaler.state_dict()
