"""One loopback address per pod (127.0.x.y, outside 127.0.0.0/24 which the machine itself uses), so each pod
binds its ports on its own IP as it would in its own network namespace. With several agents on one machine
(LOCAL_NODES), agent i > 0 takes its own block, 127.(10+i).x.y, so two nodes never hand out one address."""

from __future__ import annotations

import ipaddress

FIRST = int(ipaddress.IPv4Address("127.0.1.1"))
LAST = int(ipaddress.IPv4Address("127.0.255.254"))


def block(index: int) -> tuple[int, int]:
    """First and last address of agent `index`'s block."""
    if index == 0:
        return FIRST, LAST
    if not 0 < index < 100:
        raise ValueError(f"local node index {index} out of range: 0..99")
    base = int(ipaddress.IPv4Address(f"127.{10 + index}.0.1"))
    return base, base + 256 * 256 - 3


class LoopbackAllocator:
    def __init__(self, index: int = 0) -> None:
        self._by_key: dict[str, str] = {}
        self._first, self._last = block(index)
        self._next = self._first

    def allocate(self, key: str) -> str:
        if key in self._by_key:
            return self._by_key[key]
        used = set(self._by_key.values())
        # Round-robin rather than lowest-free: a pod recreated right away gets a fresh address, so sockets in
        # TIME_WAIT and peers still holding the old address cannot talk to the wrong pod.
        for _ in range(self._last - self._first + 1):
            candidate = self._next
            self._next = self._first if candidate >= self._last else candidate + 1
            ip = str(ipaddress.IPv4Address(candidate))
            if ip.endswith(".0") or ip.endswith(".255") or ip in used:
                continue
            self._by_key[key] = ip
            return ip
        raise RuntimeError("no free loopback address left for a pod")

    def release(self, key: str) -> None:
        self._by_key.pop(key, None)

    def get(self, key: str) -> str | None:
        return self._by_key.get(key)

    def in_use(self) -> dict[str, str]:
        return dict(self._by_key)
