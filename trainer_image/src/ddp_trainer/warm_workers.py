"""The bundled harness's workers forked from a warm process instead of each starting Python and torch anew.

Every worker torchrun starts with `-m ddp_trainer` is a new interpreter that imports torch (about 4 CPU-seconds on a
busy 2-core machine) and, once DDP wraps the model, `torch._dynamo` (about 4 more): on a node of 8 ranks that is a
minute of CPU at every start and at every in-place restart, while the survivors wait. So when the agent is to run
the bundled harness and its arguments choose no start method of their own, it runs it through torchrun's function
path (`--run-path` with this package's `forked_worker.py`) with the `forkserver` start method, and has the fork
server import torch, `torch._dynamo` and the harness once: each worker, at the first start and at every restart,
is a fork of that process.

`forkserver`, not `fork`: the fork server is a fresh interpreter that only imports modules, single-threaded, and
never touches CUDA (CUDA cannot be used in a child forked after the parent initialised it; PyTorch's
documentation names spawn and forkserver as the start methods that work with CUDA). `PYTORCH_NVML_BASED_CUDA_CHECK`
makes torch answer `is_available()` from NVML, so no CUDA driver call happens in the agent or the fork server
either; tests/trainer/test_warm_workers.py checks that importing the preloaded modules calls none.

A user's own command (`torchrun ... train.py`, `--no-python`, `--run-path`, a `--start-method` of their own) is
left exactly as given."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

HARNESS_MODULE = "ddp_trainer"
FORKED_WORKER = Path(__file__).with_name("forked_worker.py")
START_METHOD = "forkserver"
# What every worker imports before its first step: torch, what DDP imports at wrap time, and the harness.
PRELOAD = ("torch", "torch._dynamo", "torch.distributed.checkpoint", "ddp_trainer.__main__", "ddp_trainer.trainer")
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
OFF_ENV = "DDP_TRAINER_WARM_WORKERS"  # "0": start each worker as its own interpreter (torchrun's default)
_OWN_START = ("--start-method", "--start_method", "--run-path", "--run_path", "--no-python", "--no_python")


def warm_worker_args(args: list[str], environ: dict[str, str] | os._Environ = os.environ) -> list[str] | None:
    """torchrun's arguments with the bundled harness's workers forked from a warm process, or None when the
    arguments run something else, choose how to start it themselves, or `DDP_TRAINER_WARM_WORKERS=0`."""
    if environ.get(OFF_ENV, "1") == "0":
        return None
    from torch.distributed import run as torch_run  # here: the process helpers below run in a pod without torch

    chosen = torch_run.parse_args(args)
    if not chosen.module or chosen.training_script != HARNESS_MODULE or chosen.no_python or chosen.run_path:
        return None
    rest = list(chosen.training_script_args)
    at = len(args) - len(rest) - 1  # the script's place: argparse's REMAINDER keeps everything after it
    if at < 0 or args[at] != HARNESS_MODULE or args[at + 1 :] != rest:
        return None
    options = args[:at]
    if any(a.split("=", 1)[0] in _OWN_START for a in options):
        return None
    options = [a for a in options if a not in ("-m", "--module")]
    return [*options, "--run-path", f"--start-method={START_METHOD}", str(FORKED_WORKER), *rest]


def likely_warm(args: list[str], environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """Without importing torch: whether warm_worker_args is about to take this command line over (`-m ddp_trainer`,
    no start of its own anywhere on the line, not turned off). It only lets the fork server start early
    (start_fork_server); warm_worker_args decides."""
    if environ.get(OFF_ENV, "1") == "0" or any(a.split("=", 1)[0] in _OWN_START for a in args):
        return False
    return any(a in ("-m", "--module") and b == HARNESS_MODULE for a, b in zip(args, args[1:], strict=False))


def start_fork_server(args: list[str], environ: dict[str, str] | os._Environ = os.environ) -> bool:
    """Start the fork server now, before the agent imports torch, when the harness's workers will be its forks: its
    imports (torch, torch._dynamo, the harness: the longest part of a pod's start) then run beside the agent's own
    import of torch and its rendezvous, not after them. torchrun's forkserver start method finds it running (one
    per process, multiprocessing's). True when it started one."""
    if not likely_warm(args, environ):
        return False
    prepare_fork_server(environ)
    from multiprocessing import forkserver

    forkserver.ensure_running()
    return True


def prepare_fork_server(environ: dict[str, str] | os._Environ = os.environ) -> None:
    """Before torchrun starts its first worker: what the fork server imports, and no CUDA call to answer whether
    CUDA is there (the fork server and this agent inherit the variable; so do the workers, which is harmless)."""
    environ.setdefault(NVML_CHECK_ENV, "1")
    multiprocessing.set_forkserver_preload(list(PRELOAD))


FORK_SERVER_MARK = "multiprocessing.forkserver"
RESOURCE_TRACKER_MARK = "multiprocessing.resource_tracker"


def worker_pids(agent_pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The worker processes of the torchrun agent `agent_pid`: its children, or, when they are forked from the
    warm fork server, that server's (the server and multiprocessing's resource tracker are not workers)."""
    found: list[int] = []
    for kid in _children(agent_pid, proc):
        line = cmdline(kid, proc)
        if FORK_SERVER_MARK in line:
            found += _children(kid, proc)
        elif RESOURCE_TRACKER_MARK not in line:
            found.append(kid)
    return found


def is_fork_server(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether `pid` is a fork server. Its children, the workers, keep its command line: the server is the one
    whose parent's is another."""
    return FORK_SERVER_MARK in cmdline(pid, proc) and FORK_SERVER_MARK not in cmdline(parent_pid(pid, proc), proc)


def parent_pid(pid: int, proc: Path = Path("/proc")) -> int:
    """`pid`'s parent, 0 when it is gone (the local node's process walk uses it too)."""
    try:
        return int((proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _children(pid: int, proc: Path) -> list[int]:
    try:
        return [int(p) for p in (proc / str(pid) / "task" / str(pid) / "children").read_text().split()]
    except OSError:
        return []


def cmdline(pid: int, proc: Path = Path("/proc")) -> str:
    """`pid`'s command line, its arguments joined by spaces; "" when it is gone."""
    try:
        return (proc / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
