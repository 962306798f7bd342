"""The process group, formed only from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_COLLECTIVE_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    restart_count: int  # torchrun's in-place restarts (TORCHELASTIC_RESTART_COUNT)

    @classmethod
    def from_environ(cls, environ=None) -> DistEnv:
        env = os.environ if environ is None else environ
        missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k not in env]
        if missing:
            raise RuntimeError(
                f"not started by torchrun: {', '.join(missing)} missing from the environment; "
                "run `torchrun --nproc-per-node N -m ddp_trainer ...`"
            )
        return cls(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env["LOCAL_RANK"]),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", "1")),
            restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        )


def collective_timeout(environ=None) -> timedelta:
    env = os.environ if environ is None else environ
    text = env.get("DDPJOB_COLLECTIVE_TIMEOUT_SECONDS", "")
    try:
        seconds = float(text) if text else DEFAULT_COLLECTIVE_TIMEOUT_SECONDS
    except ValueError:
        raise RuntimeError(f"DDPJOB_COLLECTIVE_TIMEOUT_SECONDS must be a number of seconds, got {text!r}") from None
    if seconds <= 0:
        raise RuntimeError(f"DDPJOB_COLLECTIVE_TIMEOUT_SECONDS must be > 0, got {text!r}")
    return timedelta(seconds=seconds)


def choose_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def choose_device(env: DistEnv) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def attempt_store(env: DistEnv, timeout: timedelta, environ=None) -> dist.Store | None:
    """torchrun's workers share the agent's rendezvous TCPStore, and this torch no longer prefixes it per
    restart: after an in-place restart (--max-restarts), the new group would read the dead group's gloo/NCCL
    addresses and fail to connect. A prefix per restart count keeps each attempt's keys apart, as torch used to.
    None when the agent does not share its store (env:// then works as is)."""
    e = os.environ if environ is None else environ
    if e.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    shared = dist.TCPStore(e["MASTER_ADDR"], int(e["MASTER_PORT"]), env.world_size, is_master=False, timeout=timeout)
    return dist.PrefixStore(f"/ddp_trainer/attempt_{env.restart_count}", shared)


def init_process_group(env: DistEnv, device: torch.device) -> float:
    """Join the group and return how long it took (the rendezvous part of a recovery)."""
    started = time.monotonic()
    timeout = collective_timeout()
    kwargs: dict[str, Any] = {"backend": choose_backend(), "timeout": timeout}
    store = attempt_store(env, timeout)
    if store is not None:
        kwargs.update(store=store, rank=env.rank, world_size=env.world_size)
    if device.type == "cuda":
        kwargs["device_id"] = device  # eager NCCL init, so a bad peer shows up here and not at step 1
    dist.init_process_group(**kwargs)
    dist.barrier()
    return time.monotonic() - started
