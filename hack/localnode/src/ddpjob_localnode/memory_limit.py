"""A container's memory limit, enforced the only way local processes allow without cgroups: the agent sums the
resident memory of the container's process tree and kills the tree when it is over the limit, reported as
OOMKilled (exit 137) as the kernel's OOM killer would be inside a real container."""

from __future__ import annotations

import os
import re
from pathlib import Path

_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_FACTORS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "m": 10**-3,
}
_PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_quantity(text: str) -> int:
    """Bytes of a Kubernetes quantity (`512Mi`, `1G`, `100`); exponent forms like `1e9` are refused."""
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _FACTORS:
        raise ValueError(f"unsupported memory quantity {text!r}")
    return int(float(match.group(1)) * _FACTORS[match.group(2)])


def memory_limit(container: dict) -> int | None:
    value = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    return parse_quantity(value) if value is not None else None


def tree_rss(root: int) -> int:
    """Resident bytes of `root` and all its descendants (one pass over /proc)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        rss[pid] = int(fields[21]) * _PAGE
    total, todo, seen = 0, [root], set()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total
