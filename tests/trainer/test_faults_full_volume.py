"""The checkpoint volume fills up mid-run, with two ranks: rank 0 fails its write with the clear ENOSPC error
and exit code 28, its peer (blocked in the next collective) is torn down instead of hanging, and the checkpoints
written before the volume filled stay valid for the next start. (test_disk_full covers one rank and a volume
too small for even the first checkpoint.)"""

import subprocess
import time

import pytest

from launch import run, standalone_cmd, trainer_env

from ddp_trainer.checkpoint import CheckpointStore

# A digits checkpoint is ~139 KiB: 400 KiB holds two, and the third write (two kept + its temp file) fails.
VOLUME = "400k"


@pytest.fixture
def small_volume(tmp_path):
    mount = tmp_path / "ck"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={VOLUME}", "tmpfs", str(mount)],
                            capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_volume_filling_mid_run_fails_both_ranks_fast_and_keeps_earlier_checkpoints(small_volume):
    started = time.monotonic()
    result = run(standalone_cmd(2, "--workload", "digits", "--train.steps", "1000", "--metrics.port", "0",
                                "--checkpoint.dir", str(small_volume), "--checkpoint.every-steps", "10"),
                 env=trainer_env(), timeout=240)
    took = time.monotonic() - started
    assert result.returncode != 0
    assert "exitcode  : 28" in result.stderr, result.stderr[-3000:]
    assert "ERROR checkpoint volume full: cannot write step 30 to" in result.stderr, result.stderr[-3000:]
    assert took < 200, f"took {took:.0f}s: the peer of the failed rank hung"
    store = CheckpointStore(small_volume, warn=lambda message: pytest.fail(message))
    assert [step for step, _ in store.list_steps()] == [10, 20]
    newest = store.newest_valid()
    assert newest is not None and newest[1]["step"] == 20
    assert not [p.name for p in small_volume.iterdir() if ".tmp-" in p.name]
