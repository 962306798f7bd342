"""Log lines other programs parse (the e2e tests, the demo, the local-node recovery breakdown). Each line's
writer and its pattern live here side by side, and the readers import the patterns: a format changes in one
place, and tests/trainer/test_progress_log.py parses what every writer prints.

The patterns search one line (re.M), so they also find a line that `kubectl logs --timestamps` prefixed."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

# A torchft replica group names itself before the rank, so readers that look for `rank=N]` (kubectl ddpj logs) still
# find the rank.
_WHO = r"\[job=(?P<job>\S+) attempt=(?P<attempt>\S+) (?:group=(?P<group>\d+) )?rank=(?P<rank>\d+)\]"
PROGRESS = re.compile(
    _WHO + r" step=(?P<step>\d+)/(?P<total>\d+) epoch=(?P<epoch>\d+) loss=(?P<loss>\d+\.\d{4}) "
    r"lr=(?P<lr>\d\.\de[-+]\d\d) samples/s=(?P<sps>\d+\.\d)$",
    re.M,
)
DONE = re.compile(
    _WHO + r" done step=(?P<step>\d+) (?P<metric>\w+)=(?P<value>\d+\.\d{4}) wall_s=(?P<wall>\d+\.\d)$", re.M
)
RESUMED = re.compile(
    _WHO + r" resumed from checkpoint step=(?P<step>\d+) samples=(?P<samples>\d+) world_size_was=(?P<was>\d+)$",
    re.M,
)
SIZED = re.compile(
    _WHO + r" sized world_size=(?P<world>\d+) global_batch=(?P<batch>\d+) rank_batch=(?P<rank_batch>\d+) "
    r"micro_batch=(?P<micro_batch>\d+) accum=(?P<accum>\d+) peak_lr=(?P<lr>\d\.\d{3}e[-+]\d\d)"
    r"(?: micro_batch_auto=(?P<auto>\w+))?$",
    re.M,
)
STARTED = re.compile(
    _WHO + r" started pid=(?P<pid>\d+) world_size=(?P<world>\d+) backend=(?P<backend>\w+) device=(?P<device>\S+) "
    r"threads=(?P<threads>\d+) rendezvous_s=(?P<rendezvous>\d+\.\d\d)$",
    re.M,
)
HEALED = re.compile(
    _WHO + r" healed from live peer group=(?P<peer>\d+) step=(?P<step>\d+) samples=(?P<samples>\d+) "
    r"seconds=(?P<seconds>\d+\.\d\d)$",
    re.M,
)
LIGHTHOUSE_MOVED = re.compile(
    _WHO + r" lighthouse moved host=(?P<host>\S+) from=(?P<old>\S+) to=(?P<new>\S+) connections_closed=(?P<n>\d+)$",
    re.M,
)
COMPILED = re.compile(
    _WHO + r" compiled step=(?P<step>\d+) graphs=(?P<graphs>\d+) seconds=(?P<seconds>\d+\.\d) "
    r"total_graphs=(?P<total_graphs>\d+) total_seconds=(?P<total_seconds>\d+\.\d)$",
    re.M,
)
READY = re.compile(
    _WHO + r" ready process_s=(?P<process>\d+\.\d\d) rendezvous_s=(?P<rendezvous>\d+\.\d\d) "
    r"checkpoint_load_s=(?P<load>\d+\.\d\d)$",
    re.M,
)


@dataclass(frozen=True)
class Identity:
    job: str
    attempt: str
    rank: int
    replica_group: int | None = None  # torchft replica groups: this pod's group (fault_tolerance.py)

    @classmethod
    def from_environ(cls, rank: int, environ=None) -> Identity:
        env = os.environ if environ is None else environ
        attempt = env.get("DDPJOB_ATTEMPT") or env.get("TORCHELASTIC_RESTART_COUNT") or "0"
        return cls(job=env.get("DDPJOB_NAME") or "local", attempt=attempt, rank=rank)

    @property
    def prefix(self) -> str:
        group = "" if self.replica_group is None else f"group={self.replica_group} "
        return f"[job={self.job} attempt={self.attempt} {group}rank={self.rank}]"


def progress_line(
    who: Identity, step: int, total: int, epoch: int, loss: float, lr: float, samples_per_second: float
) -> str:
    return (
        f"{who.prefix} step={step}/{total} epoch={epoch} loss={loss:.4f} lr={lr:.1e} samples/s={samples_per_second:.1f}"
    )


def done_line(who: Identity, total: int, metric_name: str, metric_value: float, wall_seconds: float) -> str:
    return f"{who.prefix} done step={total} {metric_name}={metric_value:.4f} wall_s={wall_seconds:.1f}"


def resumed_line(who: Identity, step: int, samples: int, world_size_was: int) -> str:
    return f"{who.prefix} resumed from checkpoint step={step} samples={samples} world_size_was={world_size_was}"


def sized_line(
    who: Identity,
    world_size: int,
    global_batch: int,
    rank_batch: int,
    micro_batch: int,
    accum: int,
    peak_lr: float,
    micro_batch_auto: str | None = None,
) -> str:
    """How this attempt shares the work: the global batch, this rank's share of it (B/N) in `accum` micro-batches
    of at most `micro_batch`, and the peak learning rate, which follows the global batch only. A group that shrank
    or grew says it here. Under --train.micro-batch-size auto, how the micro-batch was settled (micro_batch.py):
    probed on this device, kept from a checkpoint of the same device, or the rank's share (CPU)."""
    auto = f" micro_batch_auto={micro_batch_auto}" if micro_batch_auto else ""
    return (
        f"{who.prefix} sized world_size={world_size} global_batch={global_batch} rank_batch={rank_batch} "
        f"micro_batch={micro_batch} accum={accum} peak_lr={peak_lr:.3e}{auto}"
    )


def compiled_line(who: Identity, step: int, graphs: int, total_graphs: int, seconds: float, total: float) -> str:
    """torch.compile compiled `graphs` graphs in the step that made `step` (compile_watch.py): that step's seconds,
    left out of the throughput, and this process's totals (a restart or resize compiles again)."""
    return (
        f"{who.prefix} compiled step={step} graphs={graphs} seconds={seconds:.1f} "
        f"total_graphs={total_graphs} total_seconds={total:.1f}"
    )


def healed_line(who: Identity, peer_group: int, step: int, samples: int, seconds: float) -> str:
    """A torchft replica group took its weights and optimizer state from a live peer group instead of a checkpoint:
    the peer, the step it took over, and how long the transfer and load took."""
    return f"{who.prefix} healed from live peer group={peer_group} step={step} samples={samples} seconds={seconds:.2f}"


def quorum_line(who: Identity, participants: int, groups: int, step: int) -> str:
    """torchft replica groups: the groups in this group's quorum changed (a peer left or joined)."""
    return f"{who.prefix} quorum replica_groups={participants}/{groups} step={step}"


def lighthouse_moved_line(who: Identity, host: str, old: list[str], new: list[str], connections: int) -> str:
    """torchft replica groups: the Lighthouse's name now gives another address (it was made again elsewhere, its
    node lost): the connections to the old one were shut down and the Manager connects to the new one."""
    return (
        f"{who.prefix} lighthouse moved host={host} from={','.join(old)} to={','.join(new)} "
        f"connections_closed={connections}"
    )


def started_line(
    who: Identity, world_size: int, backend: str, device: str, threads: int, rendezvous_seconds: float
) -> str:
    """`threads`: torch's intra-op threads in this rank (device_options.intra_op_threads)."""
    return (
        f"{who.prefix} started pid={os.getpid()} world_size={world_size} backend={backend} device={device} "
        f"threads={threads} rendezvous_s={rendezvous_seconds:.2f}"
    )


def emit(line: str) -> None:
    # Flushed at once: pods' logs are read live, and a killed process must not lose its last lines.
    print(line, file=sys.stdout, flush=True)


def warn(who: Identity, message: str) -> None:
    print(f"{who.prefix} WARNING {message}", file=sys.stderr, flush=True)


def startup_line(who: Identity, process_seconds: float, rendezvous_seconds: float, load_seconds: float) -> str:
    """Where the start-up time went, for recovery breakdowns: process age when training begins, of which the
    rendezvous (init_process_group) and the checkpoint load."""
    return (
        f"{who.prefix} ready process_s={process_seconds:.2f} rendezvous_s={rendezvous_seconds:.2f} "
        f"checkpoint_load_s={load_seconds:.2f}"
    )
