"""Free loopback ports for the processes a test starts."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_block(count: int, attempts: int = 50) -> int:
    """The first of `count` consecutive free ports: a trainer's local rank r serves on base + r, and base + 1 taken
    by another process of the suite would send rank 1's scrape elsewhere."""
    for _ in range(attempts):
        base = free_port()
        with ExitStack() as held:
            try:
                for port in range(base, base + count):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1 in {attempts} tries")
