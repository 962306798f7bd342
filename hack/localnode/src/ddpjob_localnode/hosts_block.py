"""The agent's marked block in /etc/hosts: pods' stable DNS names (`<hostname>.<subdomain>.<ns>.svc[.cluster.local]`)
mapped to their loopback IPs. The agent edits only its own block and replaces the file atomically."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path


def pod_dns_names(pod: dict) -> list[str]:
    spec, meta = pod.get("spec", {}), pod.get("metadata", {})
    hostname, subdomain = spec.get("hostname"), spec.get("subdomain")
    if not hostname or not subdomain:
        return []
    base = f"{hostname}.{subdomain}.{meta.get('namespace', 'default')}.svc"
    return [base, f"{base}.cluster.local"]


def hosts_entries(pods: list[tuple[str, dict]]) -> dict[str, list[str]]:
    """ip -> names for (ip, pod) pairs. A pod's short hostname (what `hostname` says inside it, and what its
    own /etc/hosts maps in a real pod) is added too, unless two pods on this machine share it."""
    short = [p.get("spec", {}).get("hostname") or p["metadata"]["name"] for _, p in pods]
    return {
        ip: pod_dns_names(pod) + ([name] if short.count(name) == 1 else [])
        for (ip, pod), name in zip(pods, short, strict=True)
    }


def markers(owner: str) -> tuple[str, str]:
    return f"# BEGIN ddpjob-localnode {owner}", f"# END ddpjob-localnode {owner}"


def render(current: str, owner: str, entries: dict[str, list[str]]) -> str:
    """`current` with our block replaced by `entries` (ip -> names); no block at all when entries is empty."""
    begin, end = markers(owner)
    kept: list[str] = []
    inside = False
    for line in current.splitlines():
        if line.strip() == begin:
            inside = True
        elif line.strip() == end:
            inside = False
        elif not inside:
            kept.append(line)
    rows = [f"{ip} {' '.join(names)}" for ip, names in sorted(entries.items()) if names]
    if rows:
        kept += [begin, *rows, end]
    return "\n".join(kept) + "\n"


def write_block(path: Path, owner: str, entries: dict[str, list[str]]) -> None:
    """Replace `owner`'s block. Several agents on one machine (LOCAL_NODES) edit the same file: an exclusive lock
    on a file beside it makes each read-modify-replace whole."""
    with open(path.with_name(f".{path.name}.ddpjob-localnode.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _write_block(path, owner, entries)


def _write_block(path: Path, owner: str, entries: dict[str, list[str]]) -> None:
    current = path.read_text() if path.exists() else ""
    wanted = render(current, owner, entries)
    if wanted == current:
        return
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(wanted)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
