"""A baseline operator for a benchmark: another commit's tree, checked out as a git worktree for the run."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def operator_src_at(commit: str) -> Iterator[Path]:
    """The operator/src of a git worktree of `commit`, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="ddpjob-bench-baseline-")) / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), commit], check=True, capture_output=True
    )
    try:
        yield where / "operator" / "src"
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], capture_output=True)


def short(commit: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", commit], capture_output=True, text=True
    ).stdout.strip()
