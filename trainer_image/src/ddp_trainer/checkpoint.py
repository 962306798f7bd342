"""Checkpoints in one directory shared by all ranks; rank 0 writes. A write is atomic (temp file, fsync, rename,
fsync of the directory), so a reader sees a whole checkpoint or none; a file that still fails to load (a
truncated copy, a disk error) is skipped with a warning in favour of the one before it. When none loads the run
stops (CheckpointUnreadable) rather than start again at step 0.

Pruning keeps the `keep` newest checkpoints that load. One found unreadable is moved aside (`step-N.pt.unreadable`,
named in a warning) rather than counted: a crashed save above the one a run resumed from would otherwise be the one
kept, and the next start would find nothing to load."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from .storage_retry import describe, retried

FORMAT = "ddp_trainer/1"
NAME = re.compile(r"^step-(\d{9})\.pt$")
REQUIRED_KEYS = ("format", "step", "samples", "world_size", "model", "optimizer")


class CheckpointDiskFull(OSError):
    """The checkpoint volume is full. Raised instead of retrying, so the job fails with a clear cause."""


class CheckpointUnreadable(RuntimeError):
    """Checkpoints exist and none of them loads. A run started afresh would write lower steps than theirs, so the
    pruning would delete its own checkpoints and keep the unreadable ones: every restart would begin at step 0."""

    def __init__(self, directory: Path, names: list[str]):
        super().__init__(
            f"no checkpoint in {directory} loads ({', '.join(names)}; the warnings above say why): refusing to "
            "start again at step 0, which would train over them. Repair or move them, or start afresh with another "
            "--checkpoint.dir"
        )


def caused_by_full_disk(error: BaseException | None) -> bool:
    """torch.save's zip writer turns the ENOSPC OSError into a RuntimeError; look down the chain for it."""
    while error is not None:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        error = error.__cause__ or error.__context__
    return False


UNREADABLE_SUFFIX = ".unreadable"


def set_aside(unreadable: Iterable[Path], warn: Callable[[str], None]) -> None:
    """Rename each checkpoint found unreadable to `<name>.unreadable` (`.unreadable.1`, ... when taken), out of the
    listing: pruning then counts only checkpoints that load, and the bytes stay for whoever wants to look."""
    for path in sorted(unreadable):
        if not path.exists():
            continue
        aside = path.with_name(path.name + UNREADABLE_SUFFIX)
        n = 0
        while aside.exists():
            n += 1
            aside = path.with_name(f"{path.name}{UNREADABLE_SUFFIX}.{n}")
        try:
            os.replace(path, aside)
        except OSError as e:
            warn(f"cannot move unreadable checkpoint {path.name} aside: {e}")
            continue
        warn(f"moved unreadable checkpoint {path.name} aside to {aside.name}: pruning keeps only checkpoints that load")


class CheckpointStore:
    def __init__(self, directory: str | Path, keep: int = 3, warn: Callable[[str], None] = print):
        self.directory = Path(directory)
        self.keep = keep
        self.warn = warn
        self.unreadable: set[Path] = set()  # found so by load(): set aside at the next prune, never counted

    def path_for(self, step: int) -> Path:
        return self.directory / f"step-{step:09d}.pt"

    def list_steps(self) -> list[tuple[int, Path]]:
        if not self.directory.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.directory.iterdir() if (m := NAME.match(p.name))]
        return sorted(found)

    def save(self, state: dict) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.path_for(state["step"])
        tmp = self.directory / f".{final.name}.tmp-{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                torch.save({"format": FORMAT, **state}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            self._fsync_directory()
        except (OSError, RuntimeError) as e:
            tmp.unlink(missing_ok=True)
            if caused_by_full_disk(e):
                raise CheckpointDiskFull(
                    errno.ENOSPC,
                    f"checkpoint volume full: cannot write step {state['step']} to {self.directory} "
                    "(no space left on device); free space or enlarge the volume, then restart the job",
                ) from e
            raise
        self._prune()
        return final

    def newest_valid(self) -> tuple[Path, dict] | None:
        for _step, path in reversed(self.list_steps()):
            state = self.load(path)
            if state is not None:
                return path, state
        return None

    def load(self, path: Path) -> dict | None:
        try:
            # weights_only: a checkpoint directory is shared storage, so never unpickle arbitrary objects from it
            state = retried(lambda: torch.load(path, map_location="cpu", weights_only=True), path.name, self.warn)
        except Exception as e:  # a truncated zip, bad pickle data, an I/O error that lasted: all mean "not usable"
            self.warn(f"skipping unreadable checkpoint {path.name}: {describe(e)}")
            self.unreadable.add(path)
            return None
        missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
        if missing or state.get("format") != FORMAT:
            self.warn(f"skipping checkpoint {path.name}: not a {FORMAT} checkpoint (missing {missing})")
            self.unreadable.add(path)
            return None
        return state

    def _prune(self) -> None:
        set_aside(self.unreadable, self.warn)
        self.unreadable.clear()
        for _, path in self.list_steps()[: -self.keep]:
            path.unlink(missing_ok=True)
        # Temp files of writers that were killed mid-write; ours was renamed or removed already.
        for stale in self.directory.glob(".step-*.pt.tmp-*"):
            stale.unlink(missing_ok=True)

    def _fsync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
