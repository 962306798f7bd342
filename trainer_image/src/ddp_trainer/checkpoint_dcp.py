"""Sharded checkpoints with torch.distributed.checkpoint (`--checkpoint.format dcp`), written in the background
(`--checkpoint.async`, on by default).

Why: the `file` format has rank 0 write the whole state with torch.save while every other rank waits in its next
all-reduce, and every rank reads the whole file back on resume. Here:
- every rank writes a share: DDP's state is replicated, and DCP's planner writes each tensor once, spread over
  the ranks;
- an async save copies the state once, into host buffers allocated by the first save and reused by every later
  one (pinned when CUDA is available, so the device-to-host copy is a DMA without a bounce buffer), and hands
  DCP that copy to write from: DCP stages nothing more. The step waits for that copy and no more (DCP's
  planning and the file writes run in a background thread) while training goes on. The buffers hold one copy
  of the state for the store's lifetime. One save is in flight at a time: the next waits for it (so it never
  overwrites buffers still being written), and so do the end of the run and a preemption (SIGTERM), which is
  how a save fits the grace period. A sync save (`--checkpoint.async-save false`) copies nothing and keeps no
  buffers: DCP writes the live state, and training waits until it is written;
- on resume each rank reads the tensors into its own model and optimizer, without unpickling one whole file.

Guarantees kept from the `file` format:
- atomic: a save goes to `.step-<n>.dcp.tmp/`; rank 0 renames it to `step-<n>.dcp/` (and fsyncs the directory)
  only once its save has finished, which for DCP's coordinator is after every rank's writes and the metadata;
- a checkpoint that fails to load on any rank (a truncated or missing shard, no metadata) is skipped for the one
  before it, and when none loads the run stops (CheckpointUnreadable) rather than start again at step 0. One whose
  entries are another model's or optimizer's is not damaged but another run's: the run stops (CheckpointMismatch);
- a full volume fails the job with exit code 28 and its cause (CheckpointDiskFull);
- a resume at another world size loads the same state (each rank reads what it needs);
- the newest `--checkpoint.keep` that load are kept: one without metadata, or one a resume found unreadable, is
  moved aside (`step-<n>.dcp.unreadable`, with a warning) rather than counted, so the checkpoint the run resumed
  from (or a newer one) is always among those kept.

The background writes use a process group of their own (gloo), so they never interleave with the training
collectives of the default group."""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed import ProcessGroup
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from .checkpoint import CheckpointDiskFull, set_aside
from .fault_tolerance import BATCHES_COMMITTED_KEY
from .storage_retry import retried

NAME = re.compile(r"^step-(\d{9})\.dcp$")


@functools.cache
def stager_reusable() -> bool:
    """Whether one DefaultStager can stage twice. torch 2.11's clears its copier at the end of every `stage()`
    (to break a reference cycle), so a second save through the same stager failed with `KeyError: <class 'type'>`
    and the trainer hung at its next save (seen on an H200 with torch 2.11: hack/gpu_checks.sh). Asked once, of
    the torch at hand, on two tiny CPU states."""
    stager = DefaultStager(
        StagingOptions(
            use_pinned_memory=False, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=False
        )
    )
    state = {"t": torch.zeros(2), "meta": {"step": 1}}
    try:
        stager.stage(state)
        stager.stage(state)
    except KeyError:
        return False
    finally:
        stager.close()
    return True


def reused_host_stager() -> DefaultStager:
    """torch's stager, staging on the calling thread: it copies each tensor into a host buffer it caches by the
    source's storage, so a later save of the same weights and optimizer moments copies into the same buffers (a
    tensor new at each save, the RNG state's, gets a new small one). Pinned and non-blocking only with CUDA: both
    need it, and a CPU source gains nothing from them."""
    cuda = torch.cuda.is_available()
    return DefaultStager(
        StagingOptions(
            use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=cuda
        )
    )


def full_disk(error: BaseException) -> bool:
    """ENOSPC anywhere in the chain, or in any rank's failure DCP reports."""
    seen: list[BaseException] = [error]
    while seen:
        e = seen.pop()
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return True
        if isinstance(e, CheckpointException):
            seen.extend(pair[0] if isinstance(pair, tuple) else pair for pair in e.failures.values())
        for nxt in (e.__cause__, e.__context__):
            if nxt is not None:
                seen.append(nxt)
    return False


NEARLY_FULL_BYTES = 1 << 20


def nearly_full(directory: Path) -> bool:
    try:
        return shutil.disk_usage(directory).free < NEARLY_FULL_BYTES
    except OSError:
        return False


class DcpStore:
    def __init__(
        self,
        directory: str | Path,
        keep: int = 3,
        warn: Callable[[str], None] = print,
        asynchronous: bool = True,
        rank: int = 0,
    ):
        self.directory = Path(directory)
        self.keep = keep
        self.warn = warn
        self.asynchronous = asynchronous
        self.rank = rank
        # Every rank must create it, in the same order (a collective); gloo moves DCP's small plan messages.
        self.group = cast(ProcessGroup | None, dist.new_group(backend="gloo") if dist.is_initialized() else None)
        self.pending: tuple[int, Any] | None = None  # the step and its Future
        # Where torch's stager cannot be reused, DCP stages each save with one of its own (a copy into fresh host
        # memory each time); else this one's buffers are reused.
        self.stager = reused_host_stager() if asynchronous and stager_reusable() else None
        self.unreadable: set[Path] = set()  # found so by a resume (mark_unreadable): set aside at the next prune

    def mark_unreadable(self, path: Path) -> None:
        self.unreadable.add(path)

    def loaded_everywhere(self, error: BaseException | None) -> bool:
        """Whether every rank loaded the checkpoint (`error`: this rank's). The vote is a CPU tensor on the store's
        gloo group: NCCL's default group has no CPU backend, and a resume on a GPU failed there with "No backend
        type associated with device type cpu" (seen on an H200: hack/gpu_checks.sh)."""
        failed = torch.tensor([0 if error is None else 1])
        if self.group is not None:
            dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=self.group)
        return not failed.item()

    def path_for(self, step: int) -> Path:
        return self.directory / f"step-{step:09d}.dcp"

    def _tmp_for(self, step: int) -> Path:
        return self.directory / f".step-{step:09d}.dcp.tmp"

    def list_steps(self) -> list[tuple[int, Path]]:
        """Checkpoints put in place, oldest first. Only a finished save is renamed to its final name, so one
        without its metadata is damaged (and listed: resuming says so and takes the one before), never unfinished."""
        if not self.directory.is_dir():
            return []
        return sorted((int(m.group(1)), p) for p in self.directory.iterdir() if (m := NAME.match(p.name)))

    def save(self, step: int, state: dict[str, Any]) -> None:
        """A collective: every rank calls it with its state (model, optimizer, its own RNG, the run's figures)."""
        # Before the stager copies anything: it copies into the buffers the save in flight writes from, which
        # must be finished (and in place) first.
        self.wait()
        tmp = self._tmp_for(step)
        if self.rank == 0 and tmp.exists():
            shutil.rmtree(tmp)  # a writer killed mid-save left it
        if self.group is not None:
            dist.barrier(group=self.group)
        try:
            if self.asynchronous:
                # Returns once the stager has copied the state (on this thread): its copy is what DCP writes.
                future = dcp.async_save(state, checkpoint_id=tmp, process_group=self.group, async_stager=self.stager)
                self.pending = (step, future)
                return
            dcp.save(state, checkpoint_id=tmp, process_group=self.group)
        except (OSError, RuntimeError, CheckpointException) as e:
            self._failed(step, e)
        self._finalize(step)

    def poll(self) -> int | None:
        """The step of a background save that has just finished (and is now in place), else None."""
        if self.pending is None or not self.pending[1].done():
            return None
        return self.wait()

    def wait(self) -> int | None:
        """Wait for the save in flight, if any, and put it in place; its step."""
        if self.pending is None:
            return None
        step, future = self.pending
        self.pending = None
        try:
            future.result()
        except (OSError, RuntimeError, CheckpointException) as e:
            self._failed(step, e)
        self._finalize(step)
        return step

    def _failed(self, step: int, e: BaseException) -> None:
        # torch.save's zip writer can report a short write with no errno ("unexpected pos"): a failed write on a
        # volume with next to nothing free is a full volume all the same. Measured before the cleanup frees it.
        full = full_disk(e) or nearly_full(self.directory)
        if self.rank == 0:
            shutil.rmtree(self._tmp_for(step), ignore_errors=True)  # no partial checkpoint left behind
        if full:
            raise CheckpointDiskFull(
                errno.ENOSPC,
                f"checkpoint volume full: cannot write step {step} to {self.directory} "
                "(no space left on device); free space or enlarge the volume, then restart the job",
            ) from e
        if isinstance(e, CheckpointException):
            raise RuntimeError(f"checkpoint step {step} failed: {e}") from None
        raise e

    def _finalize(self, step: int) -> None:
        if self.rank != 0:
            return
        final = self.path_for(step)
        if final.exists():  # the same step again (a resumed run that re-ran it): the new one replaces it
            os.replace(final, self.directory / f".{final.name}.old")
        os.replace(self._tmp_for(step), final)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        # Only checkpoints that load count towards `keep`: a crashed save kept in place of the one resumed from would
        # leave the next start nothing to load.
        set_aside(
            {p for _, p in self.list_steps() if p in self.unreadable or not (p / ".metadata").is_file()}, self.warn
        )
        self.unreadable.clear()
        for _, path in self.list_steps()[: -self.keep]:
            shutil.rmtree(path, ignore_errors=True)
        # What a replaced step or a writer killed mid-save left; the one save in flight was just put in place.
        for stale in [*self.directory.glob(".step-*.dcp.old"), *self.directory.glob(".step-*.dcp.tmp")]:
            shutil.rmtree(stale, ignore_errors=True)

    def read_entries(self, path: Path) -> tuple[dict[str, tuple[int, ...] | None], BaseException | None]:
        """The flattened keys a checkpoint holds ("model.0.weight", "rng.1.torch", "meta.step", ...), each with its
        tensor's shape (None: not a tensor); the error instead when its metadata cannot be read (missing, cut short).
        A transient storage error is tried again first (storage_retry.py)."""
        try:
            metadata = retried(lambda: FileSystemReader(str(path)).read_metadata(), path.name, self.warn)
        except Exception as e:
            return {}, e
        return {
            key: tuple(entry.size) if isinstance(entry, TensorStorageMetadata) else None
            for key, entry in metadata.state_dict_metadata.items()
        }, None

    def load(self, path: Path, request: dict[str, Any]) -> BaseException | None:
        """Fill `request` (a collective); the error on this rank, if its part failed to load. A transient storage
        error is tried again first, on every rank alike: each sees every rank's failure in DCP's exception."""
        try:
            retried(lambda: dcp.load(request, checkpoint_id=str(path), process_group=self.group), path.name, self.warn)
        except (Exception, CheckpointException) as e:  # a missing or truncated shard, a bad metadata file
            return e
        return None


def meta_request(keys: Iterable[str]) -> dict[str, Any]:
    """The run's figures a checkpoint holds (META_KEYS), as placeholders for dcp.load to fill, nested as they were
    saved: "meta.scheduler.peak_lr" is request["scheduler"]["peak_lr"]. (Asking for "meta.scheduler" alone finds
    no such key: DCP keeps the flattened ones, and the schedule and shape were not read back.)"""
    request: dict[str, Any] = {}
    for key in sorted(keys):
        top, *path = key.split(".")
        if top != "meta" or not path or path[0] not in META_KEYS:
            continue
        node = request
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = 0
    return request


def model_and_optimizer_keys(keys: Iterable[str]) -> set[str]:
    """Of a checkpoint's keys, those resume_checks.state_keys names (the optimizer's state, not its param_groups)."""
    return {k for k in keys if k.startswith(("model.", "optim.state."))}


def checkpoint_format(mode: str, device: torch.device) -> str:
    """auto: dcp on CUDA, where idle host cores write in the background while the GPU steps; file on CPU, where
    the writer and the step share the cores (measured: docs/trainer.md, Checkpoints)."""
    if mode != "auto":
        return mode
    return "dcp" if device.type == "cuda" else "file"


# The run's figures a checkpoint keeps beside the weights (the dcp format's `meta`).
META_KEYS = (
    "step",
    "samples",
    "epoch",
    "offset",
    "world_size",
    "global_batch",
    "micro_batch_limit",
    "micro_batch_auto",  # --train.micro-batch-size auto: the limit found and the device it holds on
    "workload",
    "shape",
    "scheduler",
    "time",
    "scaler",  # fp16's GradScaler: its scale and growth tracker (empty, so absent, when it is off)
    BATCHES_COMMITTED_KEY,  # torchft replica groups: the Manager's counter beside the step
)
