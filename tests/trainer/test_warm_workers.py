"""The harness's workers forked from a warm fork server (ddp_trainer/warm_workers.py): which torchrun command lines
it takes over, that the fork server's imports ask CUDA nothing, and a run whose workers are forks trains exactly as
one whose workers start as interpreters of their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from launch import PROGRESS, run, standalone_cmd, start, stop, trainer_env, wait_for_line, worker_pids

from ddp_trainer import warm_workers
from ddp_trainer.warm_workers import FORKED_WORKER, OFF_ENV, PRELOAD, is_fork_server, likely_warm, warm_worker_args


def test_the_harness_run_as_a_module_is_forked_with_its_options_and_arguments_kept():
    args = ["--nnodes=1:3", "--nproc-per-node", "2", "--tee=2", "-m", "ddp_trainer", "--workload", "cnn", "-m", "x"]
    assert warm_worker_args(args, environ={}) == [
        "--nnodes=1:3", "--nproc-per-node", "2", "--tee=2", "--run-path", "--start-method=forkserver",
        str(FORKED_WORKER), "--workload", "cnn", "-m", "x"]


@pytest.mark.parametrize("args", [
    ["--nproc-per-node=2", "train.py", "--lr", "1"],                        # a user's own script
    ["--nproc-per-node=2", "-m", "my_package.train"],                       # a user's own module
    ["--start-method=spawn", "-m", "ddp_trainer"],                          # a start method of the user's
    ["--start_method", "fork", "-m", "ddp_trainer"],
    ["--no-python", "ddp_trainer"],
    ["--run-path", "/abs/train.py"],
])
def test_a_command_that_is_not_the_harness_or_chooses_its_own_start_is_left_as_given(args):
    assert warm_worker_args(args, environ={}) is None


@pytest.mark.parametrize("args", [
    ["--nnodes=1:3", "--nproc-per-node", "2", "--tee=2", "-m", "ddp_trainer", "--workload", "cnn", "-m", "x"],
    ["--standalone", "--module", "ddp_trainer"],
    ["--nproc-per-node=2", "train.py", "--lr", "1"],
    ["--nproc-per-node=2", "-m", "my_package.train"],
    ["--start-method=spawn", "-m", "ddp_trainer"],
    ["--start_method", "fork", "-m", "ddp_trainer"],
    ["--no-python", "ddp_trainer"],
    ["--run-path", "/abs/train.py"],
    ["-m", "ddp_trainer", "--train.steps", "5", "--run-path", "x"],  # on the harness's line: no early start
])
def test_the_early_start_never_starts_a_fork_server_the_workers_will_not_use(args):
    """likely_warm reads the line without torch, before warm_worker_args can; where they differ the early server
    is only a start not sped up, never a server for a command that runs otherwise."""
    if likely_warm(args, environ={}):
        assert warm_worker_args(args, environ={}) is not None, args
    assert likely_warm(args, environ={OFF_ENV: "0"}) is False


def test_the_fork_server_runs_before_the_agent_imports_torch(tmp_path: Path):
    """The pod's start: the fork server's imports (torch, torch._dynamo, the harness) run beside the agent's own
    import of torch, not after it. Measured on the 2-core VM, from the entrypoint's start to the worker's `started`
    line, five runs each: 5.3 s median before, 3.8 s after (0.71x); beside two busy loops 9.0 s and 7.2 s."""
    probe = f"""
import sys
from multiprocessing import forkserver

seen = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(forkserver._forkserver._forkserver_pid)
        return None

sys.meta_path.insert(0, Watch())
from ddp_trainer import torchrun
try:
    torchrun.main(["--standalone", "--nproc-per-node=1", "--max-restarts=0", "-m", "ddp_trainer",
                   "--workload", "digits", "--train.steps", "2", "--checkpoint.dir", {str(tmp_path / "ck")!r}])
finally:
    print("fork server before torch:", seen)
"""
    done = run([sys.executable, "-c", probe])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("fork server before torch:")]
    assert line != "fork server before torch: [None]" and line != "fork server before torch: []", line
    assert PROGRESS.search(done.stdout), done.stdout[-2000:]


def test_the_variable_turns_it_off():
    assert warm_worker_args(["-m", "ddp_trainer"], environ={OFF_ENV: "0"}) is None
    assert warm_worker_args(["-m", "ddp_trainer"], environ={OFF_ENV: "1"}) is not None


def test_the_fork_servers_imports_ask_cuda_nothing():
    """A child forked from a process that has called into the CUDA driver cannot use CUDA. This imports torch, then
    counts every CUDA entry point torch has while the rest of the preload is imported as the fork server does."""
    probe = f"""
import os, sys
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
import torch
calls = []
def counted(name, real):
    def call(*a, **k):
        calls.append(name)
        return real(*a, **k)
    return call
for name in ("_cuda_getDeviceCount", "_cuda_init", "_cuda_setDevice", "_cuda_getDevice"):
    if hasattr(torch._C, name):
        setattr(torch._C, name, counted(name, getattr(torch._C, name)))
torch.cuda._lazy_init = counted("_lazy_init", torch.cuda._lazy_init)
for module in {list(PRELOAD)!r}:
    __import__(module)
print("CUDA calls:", calls, torch.cuda.is_initialized())
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env=trainer_env(CUDA_VISIBLE_DEVICES="0"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CUDA calls: [] False" in done.stdout, done.stdout + done.stderr[-2000:]


def losses(log: str) -> dict[int, str]:
    return {int(m["step"]): m["loss"] for m in PROGRESS.finditer(log) if m["rank"] == "0"}


def test_forked_workers_train_as_workers_started_on_their_own(tmp_path: Path):
    args = ("--workload", "digits", "--train.steps", "20", "--log.every-steps", "5", "--metrics.port", "0")
    warm = run(standalone_cmd(2, *args), env=trainer_env(**{OFF_ENV: "1"}))
    cold = run(standalone_cmd(2, *args), env=trainer_env(**{OFF_ENV: "0"}))
    for done in (warm, cold):
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert losses(warm.stdout) == losses(cold.stdout) and len(losses(cold.stdout)) == 4


def test_the_workers_are_children_of_the_fork_server(tmp_path: Path):
    log = tmp_path / "run.log"
    proc = start(standalone_cmd(2, "--train.steps", "1000000", "--log.every-steps", "10", "--metrics.port", "0"),
                 log=log)
    try:
        wait_for_line(log, PROGRESS, proc, timeout=240)
        workers = worker_pids(proc.pid)
        assert len(workers) == 2, (workers, log.read_text()[-2000:])
        assert all(is_fork_server(parent_of(pid)) for pid in workers), workers
    finally:
        stop(proc)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def fake_proc(root: Path, tree: dict[int, tuple[int, str, list[int]]]) -> Path:
    """A /proc with pid -> (parent, command line, children)."""
    for pid, (parent, line, kids) in tree.items():
        (root / str(pid) / "task" / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cmdline").write_bytes(line.replace(" ", "\0").encode() + b"\0")
        (root / str(pid) / "stat").write_text(f"{pid} (python) S {parent} 0 0")
        (root / str(pid) / "task" / str(pid) / "children").write_text(" ".join(map(str, kids)))
    return root


def test_the_workers_are_the_fork_servers_children_not_their_own_children_nor_the_tracker(tmp_path: Path):
    server = "python -c from multiprocessing.forkserver import main; main(3, 4, ['torch', 'ddp_trainer.trainer'])"
    proc = fake_proc(tmp_path, {
        10: (1, "python -m ddp_trainer.torchrun -m ddp_trainer", [11, 12]),
        11: (10, server, [13, 14]),
        12: (10, "python -c from multiprocessing.resource_tracker import main;main(5)", []),
        13: (11, server, []),
        14: (11, server, [15]),   # a worker with a DataLoader worker forked from it: same command line again
        15: (14, server, []),
    })
    assert warm_workers.worker_pids(10, proc) == [13, 14]
    assert [pid for pid in (10, 11, 12, 13, 14, 15) if warm_workers.is_fork_server(pid, proc)] == [11]
    spawned = fake_proc(tmp_path / "spawned", {
        20: (1, "python -m ddp_trainer.torchrun -m ddp_trainer", [21, 22]),
        21: (20, "python -u -m ddp_trainer --workload digits", []),
        22: (20, "python -u -m ddp_trainer --workload digits", []),
    })
    assert warm_workers.worker_pids(20, spawned) == [21, 22]
