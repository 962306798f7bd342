"""Atomic writes, keep-last-K, and skipping what cannot be loaded, on real files."""

import errno
import subprocess

import pytest
import torch

from ddp_trainer.checkpoint import CheckpointDiskFull, CheckpointStore


def state(step: int, payload_size: int = 10) -> dict:
    return {"step": step, "samples": step * 8, "world_size": 2, "model": {"w": torch.full((payload_size,), step)},
            "optimizer": {}}


@pytest.fixture
def store(tmp_path):
    warnings = []
    s = CheckpointStore(tmp_path / "ck", keep=3, warn=warnings.append)
    s.warnings = warnings
    return s


def test_keeps_the_newest_k(store):
    for step in (10, 20, 30, 40, 50):
        store.save(state(step))
    assert [step for step, _ in store.list_steps()] == [30, 40, 50]
    path, loaded = store.newest_valid()
    assert path.name == "step-000000050.pt" and loaded["step"] == 50 and loaded["model"]["w"][0] == 50


def test_truncated_newest_is_skipped_with_a_warning(store):
    store.save(state(10))
    newest = store.save(state(20))
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    path, loaded = store.newest_valid()
    assert loaded["step"] == 10
    assert len(store.warnings) == 1
    assert store.warnings[0].startswith("skipping unreadable checkpoint step-000000020.pt")


def test_foreign_file_is_skipped(store):
    store.save(state(10))
    torch.save({"step": 99}, store.path_for(99))
    assert store.newest_valid()[1]["step"] == 10
    assert "skipping checkpoint step-000000099.pt: not a ddp_trainer/1 checkpoint" in store.warnings[0]


def test_empty_directory_has_no_checkpoint(store):
    assert store.newest_valid() is None


def test_a_killed_writers_temp_file_is_never_loaded_and_is_cleaned(store):
    store.save(state(10))
    stale = store.directory / ".step-000000020.pt.tmp-4242"
    stale.write_bytes(b"half a checkpoint")
    assert store.newest_valid()[1]["step"] == 10
    store.save(state(30))
    assert not stale.exists()


def test_checkpoints_hold_no_pickled_objects(store):
    """weights_only loading: a checkpoint that needs arbitrary unpickling is refused, not executed."""
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    store.directory.mkdir()
    torch.save({"format": "ddp_trainer/1", "step": 5, "samples": 0, "world_size": 1, "model": Evil(),
                "optimizer": {}}, store.path_for(5))
    assert store.newest_valid() is None
    assert "skipping unreadable checkpoint step-000000005.pt: UnpicklingError" in store.warnings[0]


@pytest.fixture
def tiny_volume(tmp_path):
    """A real 1 MiB tmpfs: the only honest way to get ENOSPC from the kernel."""
    mount = tmp_path / "vol"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_full_disk_raises_a_clear_error_and_leaves_no_partial_file(tiny_volume):
    store = CheckpointStore(tiny_volume, keep=3)
    with pytest.raises(CheckpointDiskFull) as e:
        store.save(state(7, payload_size=1_000_000))  # 4 MB into 1 MiB
    assert e.value.errno == errno.ENOSPC
    assert str(e.value.strerror).startswith(f"checkpoint volume full: cannot write step 7 to {tiny_volume}")
    assert list(tiny_volume.iterdir()) == []
