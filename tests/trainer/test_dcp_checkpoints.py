"""--checkpoint.format dcp (checkpoint_dcp.py): sharded checkpoints written by every rank, staged and written in
the background; resumed at another world size; a full volume exits 28; SIGTERM waits for the save in flight. (A
corrupt or damaged one gives way to the one before: test_checkpoint_resume.py, beside the file format's case.)"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from launch import DONE, PROGRESS, RESUMED, run, standalone_cmd, start, stop, trainer_env, wait_for_line
from test_disk_full import full_volume  # noqa: F401  (the fixture)
from test_preemption import PREEMPTED


def dcp_run(ck, steps: int, nproc: int, *extra: str) -> list[str]:
    return standalone_cmd(
        nproc,
        "--workload",
        "digits",
        "--train.steps",
        str(steps),
        "--metrics.port",
        "0",
        "--checkpoint.dir",
        str(ck),
        "--checkpoint.format",
        "dcp",
        "--checkpoint.every-steps",
        "10",
        "--checkpoint.keep",
        "2",
        "--log.every-steps",
        "10",
        *extra,
    )


def test_every_rank_writes_a_share_and_a_smaller_group_resumes_it(tmp_path):
    ck = tmp_path / "ck"
    older = run(dcp_run(ck, 20, 2, "--checkpoint.format", "file"))  # what a CPU attempt or an older image wrote
    assert older.returncode == 0, older.stdout[-2000:] + older.stderr[-2000:]
    first = run(dcp_run(ck, 40, 2))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert RESUMED.search(first.stdout)["step"] == "20", "a dcp run goes on from the file checkpoints it finds"
    assert sorted(p.name for p in ck.iterdir() if p.suffix == ".dcp" or p.name.startswith(".")) == [
        "step-000000030.dcp",
        "step-000000040.dcp",
    ]  # keep 2, no temp left
    shards = sorted(p.name for p in (ck / "step-000000040.dcp").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"], shards  # both ranks wrote a share
    second = run(dcp_run(ck, 60, 1))
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    resumed = RESUMED.search(second.stdout)
    assert resumed and resumed["step"] == "40" and resumed["samples"] == str(40 * 64), second.stdout
    assert [int(m["step"]) for m in PROGRESS.finditer(second.stdout)] == [50, 60]
    assert DONE.search(second.stdout)["step"] == "60"


def test_a_full_volume_exits_28_and_leaves_nothing_behind(tmp_path, full_volume):  # noqa: F811
    error_file = tmp_path / "termination-log"
    result = run(dcp_run(full_volume, 1000, 1), env=trainer_env(TORCHELASTIC_ERROR_FILE=str(error_file)), timeout=120)
    assert "exitcode  : 28" in result.stderr, result.stderr[-3000:]
    assert "checkpoint volume full" in json.loads(error_file.read_text())["message"]["message"]
    assert list(full_volume.iterdir()) == []


def test_sigterm_waits_for_the_save_in_flight_and_leaves_a_whole_checkpoint(tmp_path):
    ck, log = tmp_path / "ck", tmp_path / "run.log"
    proc = start(dcp_run(ck, 100000, 2), log=log)
    try:
        wait_for_line(log, PROGRESS, proc, where=lambda m: int(m["step"]) >= 30)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=90)
    finally:
        stop(proc)
    preempted = PREEMPTED.search(log.read_text())
    assert preempted, log.read_text()[-3000:]
    step = int(preempted["step"])
    assert (ck / f"step-{step:09d}.dcp" / ".metadata").is_file()
    assert not [p for p in ck.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_an_async_save_returns_once_staged_and_lands_whole_only_when_done(tmp_path, one_rank_group):
    from ddp_trainer.checkpoint_dcp import DcpStore

    store = DcpStore(tmp_path / "ck", keep=2, asynchronous=True)
    weights = torch.arange(1_000_000, dtype=torch.float32)
    store.save(10, {"w": weights, "meta": {"step": 10}})
    weights.add_(1.0)  # training goes on and changes the weights while the save is written
    assert store.pending is not None and store.list_steps() == []  # in flight: not a checkpoint yet
    assert store.wait() == 10
    ((step, path),) = store.list_steps()
    loaded = {"w": torch.zeros(1_000_000), "meta": {"step": 0}}
    assert step == 10 and store.load(path, loaded) is None
    assert torch.equal(loaded["w"], torch.arange(1_000_000, dtype=torch.float32)) and loaded["meta"]["step"] == 10


def record_staged(store) -> list[dict]:
    """What the store's stager hands DCP at each save, recorded beside what it was given."""
    staged: list[dict] = []
    stage = store.stager.stage

    def recording(state, **kwargs):
        out = stage(state, **kwargs)
        staged.append({"given": state, "staged": out})
        return out

    store.stager.stage = recording
    return staged


@pytest.fixture
def slow_writes(monkeypatch):
    """Each rank's file writes start half a second late, so a save is still in flight when the next one begins."""
    from torch.distributed.checkpoint.filesystem import FileSystemWriter

    write_data = FileSystemWriter.write_data

    def late(self, plan, planner):
        time.sleep(0.5)
        return write_data(self, plan, planner)

    monkeypatch.setattr(FileSystemWriter, "write_data", late)


def test_an_async_save_copies_once_into_host_buffers_reused_by_the_next_save(tmp_path, one_rank_group):
    from ddp_trainer.checkpoint_dcp import DcpStore

    store = DcpStore(tmp_path / "ck", keep=2, asynchronous=True)
    staged = record_staged(store)
    weights = torch.arange(1_000_000, dtype=torch.float32)
    store.save(10, {"w": weights, "meta": {"step": 10}})
    store.wait()
    weights.add_(1.0)
    store.save(20, {"w": weights, "meta": {"step": 20}})
    weights.add_(1.0)  # after the save returned: not in it
    store.wait()
    first, second = staged
    # The stager was given the live tensor (nothing copied it before) and its copy is what DCP wrote.
    assert first["given"]["w"].data_ptr() == weights.data_ptr()
    assert first["staged"]["w"].data_ptr() != weights.data_ptr()
    assert second["staged"]["w"].data_ptr() == first["staged"]["w"].data_ptr(), "the second save reuses the buffer"
    for step, value in [(10, 0.0), (20, 1.0)]:
        loaded = {"w": torch.zeros(1_000_000), "meta": {"step": 0}}
        assert store.load(store.path_for(step), loaded) is None
        assert torch.equal(loaded["w"], torch.arange(1_000_000, dtype=torch.float32) + value), step
        assert loaded["meta"]["step"] == step


def test_a_save_right_after_an_async_one_and_the_exit_wait_leave_whole_checkpoints(
    tmp_path, one_rank_group, slow_writes
):
    """The second save stages into the buffers the first is still writing from: it must wait for it first."""
    from ddp_trainer.checkpoint_dcp import DcpStore

    store = DcpStore(tmp_path / "ck", keep=3, asynchronous=True)
    weights = torch.arange(1_000_000, dtype=torch.float32)
    for step in (10, 20, 30):
        store.save(step, {"w": weights, "meta": {"step": step}})
        weights.add_(1.0)  # the next step, while the save is written
    assert store.wait() == 30  # the end of the run
    assert [s for s, _ in store.list_steps()] == [10, 20, 30]
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == [f"step-{s:09d}.dcp" for s in (10, 20, 30)]
    for i, (step, path) in enumerate(store.list_steps()):
        loaded = {"w": torch.zeros(1_000_000), "meta": {"step": 0}}
        assert store.load(path, loaded) is None
        assert torch.equal(loaded["w"], torch.arange(1_000_000, dtype=torch.float32) + i), step
        assert loaded["meta"]["step"] == step


def test_where_torchs_stager_cannot_stage_twice_each_async_save_is_staged_by_dcp_and_lands_whole(
    tmp_path, one_rank_group, monkeypatch
):
    """torch 2.11's DefaultStager clears its copier at the end of every stage(): a second save through it failed
    with KeyError and the trainer hung (an H200 with torch 2.11). Here a stager that does what 2.11's did stands in
    for it; the locked torch's can stage twice, and the store reuses it."""
    from torch.distributed.checkpoint.staging import DefaultStager

    from ddp_trainer import checkpoint_dcp
    from ddp_trainer.checkpoint_dcp import DcpStore

    assert checkpoint_dcp.stager_reusable(), "the locked torch's stager stages twice: the one-copy path is in use"
    assert DcpStore(tmp_path / "kept", asynchronous=True).stager is not None

    class ClosesAfterEachStage(DefaultStager):
        def _stage(self, state_dict, **kwargs):
            staged = super()._stage(state_dict, **kwargs)
            self._state_dict_stager.close()  # what torch 2.11's DefaultStager._stage ends with
            return staged

    monkeypatch.setattr(checkpoint_dcp, "DefaultStager", ClosesAfterEachStage)
    checkpoint_dcp.stager_reusable.cache_clear()
    try:
        assert not checkpoint_dcp.stager_reusable()
        store = DcpStore(tmp_path / "ck", keep=3, asynchronous=True)
        assert store.stager is None
        weights = torch.arange(1_000_000, dtype=torch.float32)
        for step in (10, 20, 30):
            store.save(step, {"w": weights, "meta": {"step": step}})
            weights.add_(1.0)
        assert store.wait() == 30
    finally:
        checkpoint_dcp.stager_reusable.cache_clear()
    for i, (step, path) in enumerate(store.list_steps()):
        loaded = {"w": torch.zeros(1_000_000), "meta": {"step": 0}}
        assert store.load(path, loaded) is None
        assert torch.equal(loaded["w"], torch.arange(1_000_000, dtype=torch.float32) + i), step
        assert loaded["meta"]["step"] == step


def test_a_sync_save_keeps_no_host_buffers_and_writes_the_state(tmp_path, one_rank_group):
    from ddp_trainer.checkpoint_dcp import DcpStore

    store = DcpStore(tmp_path / "ck", asynchronous=False)
    assert store.stager is None
    weights = torch.arange(1000, dtype=torch.float32)
    store.save(10, {"w": weights, "meta": {"step": 10}})
    weights.add_(1.0)
    loaded = {"w": torch.zeros(1000), "meta": {"step": 0}}
    assert store.pending is None and store.load(store.path_for(10), loaded) is None
    assert torch.equal(loaded["w"], torch.arange(1000, dtype=torch.float32)) and loaded["meta"]["step"] == 10


def test_the_run_figures_are_asked_for_as_they_were_saved_nested():
    """DCP keeps flattened keys: asking for "meta.scheduler" found none, and the schedule and shape were never read."""
    from ddp_trainer.checkpoint_dcp import meta_request

    keys = {
        "meta.step",
        "meta.scheduler.peak_lr",
        "meta.scheduler.anchor_step",
        "meta.scaler.scale",
        "meta.not_ours",
        "model.net.0.weight",
        "rng.0.torch",
    }
    assert meta_request(keys) == {"step": 0, "scheduler": {"peak_lr": 0, "anchor_step": 0}, "scaler": {"scale": 0}}


def test_the_format_follows_the_device():
    from ddp_trainer.trainer import checkpoint_format

    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert (checkpoint_format("auto", gpu), checkpoint_format("auto", cpu)) == ("dcp", "file")
    assert (checkpoint_format("dcp", cpu), checkpoint_format("file", gpu)) == ("dcp", "file")


def test_the_load_vote_runs_where_the_default_group_has_no_cpu_backend(tmp_path):
    """NCCL's default group carries no CPU tensor: the resume's vote failed on a GPU ("No backend type associated
    with device type cpu", an H200). A default group whose only backend is for CUDA ("cuda:gloo") is the same
    situation on a CPU: the vote must still count every rank's word."""
    from ddp_trainer.checkpoint_dcp import DcpStore

    dist.init_process_group("cuda:gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="No backend type associated with device type cpu"):
            dist.all_reduce(torch.tensor([1]))  # the situation: a CPU tensor on the default group fails
        store = DcpStore(tmp_path / "ck")
        assert store.loaded_everywhere(None) is True
        assert store.loaded_everywhere(OSError("unreadable")) is False
    finally:
        dist.destroy_process_group()
