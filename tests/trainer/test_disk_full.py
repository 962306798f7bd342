"""A full checkpoint volume: a clear error, the distinct exit code 28, the cause in the torchelastic error file
(the pod's termination log), and no hang."""

import json
import subprocess

import pytest

from launch import run, standalone_cmd, trainer_env


@pytest.fixture
def full_volume(tmp_path):
    mount = tmp_path / "ck"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_full_checkpoint_volume_fails_fast_with_a_clear_cause(tmp_path, full_volume):
    error_file = tmp_path / "termination-log"
    result = run(standalone_cmd(1, "--workload", "digits", "--train.steps", "1000", "--metrics.port", "0",
                                "--checkpoint.dir", str(full_volume), "--checkpoint.every-steps", "10"),
                 env=trainer_env(TORCHELASTIC_ERROR_FILE=str(error_file)), timeout=120)
    assert result.returncode != 0
    assert "exitcode  : 28" in result.stderr, result.stderr[-3000:]
    assert "ERROR checkpoint volume full: cannot write step 10 to" in result.stderr
    reported = json.loads(error_file.read_text())["message"]["message"]
    assert "checkpoint volume full" in reported and "no space left on device" in reported
    assert list(full_volume.iterdir()) == []  # no partial checkpoint left behind
