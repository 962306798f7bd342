"""Reading a checkpoint again after a transient storage error: a timeout or an I/O error of a network volume
(EIO, ETIMEDOUT, ESTALE, ...) says nothing about the checkpoint, and taking it for damaged skipped a good one (and
the pruning then set it aside). A few tries a short while apart; an error of any other kind (a truncated shard, no
metadata, another run's entries) is the checkpoint's and is reported at once.

DCP gathers every rank's failure into one CheckpointException that every rank raises, so each rank sees the same
causes, decides the same, and they all read again together (a collective stays in step)."""

from __future__ import annotations

import errno
import time
import traceback
from collections.abc import Callable, Iterator
from typing import TypeVar

from torch.distributed.checkpoint.api import CheckpointException

T = TypeVar("T")
TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.EAGAIN, errno.ETIMEDOUT, errno.ESTALE, errno.EINTR, errno.EBUSY})
RETRY_DELAYS = (0.5, 1.0, 2.0)  # seconds before each new try: three more, 3.5 s at most
CAUSE_CHARS = 300


def causes(error: BaseException) -> Iterator[BaseException]:
    """`error`, what it was raised from, and each rank's failure a CheckpointException carries."""
    seen: list[BaseException] = [error]
    visited: set[int] = set()
    while seen:
        e = seen.pop()
        if id(e) in visited:
            continue
        visited.add(id(e))
        yield e
        if isinstance(e, CheckpointException):
            seen.extend(pair[0] if isinstance(pair, tuple) else pair for pair in e.failures.values())
        seen.extend(nxt for nxt in (e.__cause__, e.__context__) if nxt is not None)


def transient(error: BaseException) -> bool:
    return any(
        isinstance(e, TimeoutError) or (isinstance(e, OSError) and e.errno in TRANSIENT_ERRNOS) for e in causes(error)
    )


def describe(error: BaseException) -> str:
    """The cause, not the wrapper: a CheckpointException's str() starts with its ranks and a traceback header, so
    its first 200 characters named no cause. Each rank's failure (ranks with the same one together), one line each."""
    if not isinstance(error, CheckpointException):
        return f"{type(error).__name__}: {str(error)[:CAUSE_CHARS]}"
    by_cause: dict[str, list[int]] = {}
    for rank, pair in sorted(error.failures.items()):
        exc = pair[0] if isinstance(pair, tuple) else pair
        line = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        by_cause.setdefault(line[:CAUSE_CHARS], []).append(rank)
    return "; ".join(
        f"rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))}: {line}" for line, ranks in by_cause.items()
    )


def retried(read: Callable[[], T], what: str, warn: Callable[[str], None]) -> T:
    """read(), again after each delay of RETRY_DELAYS while it fails with a transient storage error."""
    for delay in RETRY_DELAYS:
        try:
            return read()
        except (Exception, CheckpointException) as e:
            if not transient(e):
                raise
            warn(f"transient storage error reading {what} ({describe(e)}): trying again in {delay:g} s")
            time.sleep(delay)
    return read()
