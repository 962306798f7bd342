"""The image's entrypoint as a container's PID 1 (ddp_trainer/pid1.py): `python -m ddp_trainer.torchrun` made PID 1
of a PID namespace of its own (`unshare --pid --fork --mount-proc`, as a container runtime does), a worker that
leaves an orphan behind, and a SIGTERM sent to PID 1 as the kubelet sends it. The orphan is reaped (without the
init it stays a zombie of torchrun's agent, which waits only for its own workers) and the SIGTERM reaches the
worker through torchrun. tests/realnode/test_training.py shows the same in the image on a real node."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddp_trainer.pid1 import exit_code
from launch import ROOT, trainer_env
from support.orphan import REAPED, SIGTERM_SEEN, WORKER


pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="a PID namespace needs root and util-linux's unshare")


def pid_namespace_init(unshare_pid: int) -> int:
    """The host pid of the namespace's PID 1: unshare --fork's only child."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("unshare started no child")


def test_as_pid_1_the_entrypoint_reaps_an_orphan_and_forwards_sigterm_to_the_worker(tmp_path):
    worker, ready = tmp_path / "worker.py", tmp_path / "ready"
    worker.write_text(WORKER)
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", sys.executable, "-m", "ddp_trainer.torchrun", "--standalone",
         "--nproc-per-node=1", "--monitor-interval=0.5", str(worker), str(ready)],
        env=trainer_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        init = pid_namespace_init(proc.pid)
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if not ready.exists():  # say why: the process's own words, if it ended
            out = proc.communicate(timeout=10)[0] if proc.poll() is not None else "(still running)"
            raise AssertionError(f"the worker never got past its orphan; exit {proc.returncode}:\n{out[-3000:]}")
        assert ready.read_text() == REAPED, f"the orphan was left a zombie ({ready.read_text()})"
        os.kill(init, signal.SIGTERM)  # as the kubelet stops a container: PID 1 only
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert SIGTERM_SEEN in out, out[-3000:]
    assert proc.returncode != 0, "torchrun stopped by a signal does not exit 0"


@pytest.mark.parametrize("status,code", [(0, 0), (3 << 8, 3), (signal.SIGKILL, 128 + signal.SIGKILL)])
def test_the_init_exits_with_its_childs_code_or_128_plus_its_signal(status, code):
    assert exit_code(status) == code
