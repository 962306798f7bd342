"""A Lighthouse behind a lost node is not the groups' end: this process's connections to an address the
Lighthouse's name no longer resolves to are shut down, so torchft's Manager connects again, by name, to the new one.

A lost node goes silent: no reset reaches a peer. torchft's Manager (its Rust server, in each group's rank 0)
holds one HTTP/2 connection to the Lighthouse and waits on it, the quorum call until its deadline (the quorum
timeout, minutes) and the heartbeat with none at all; its keep-alive (a ping after 60 s idle, 20 s to answer) never
fires while calls go out. So the groups would stall until their processes end. The operator force-deletes a
Lighthouse on a lost node and makes another, which the cluster's DNS then gives under the same name
(`<job>-lighthouse.<job>.<ns>.svc`): from that moment a connection to any other address is to a Lighthouse that is
no more. Shutting that socket down fails the calls waiting on it, which torchft answers as it does a refused call:
it asks again on a new connection (replica_groups.quorum_retries), resolved by name.

Only connections to the Lighthouse's port at an address the name no longer gives are touched, and only once the
name gives another: while it still resolves to the old address (the node not yet lost past the operator's grace)
or not at all (between the two pods), nothing is done. Read from /proc: the process's socket descriptors, and the
kernel's TCP table for their peers."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

INTERVAL_S = 1.0
# The TCP table's states of a connection calls wait on: ESTABLISHED, SYN_SENT. One shut down here has left them
# (FIN_WAIT1/2) and is not looked at again while its owner has yet to close it.
_OPEN = ("01", "02")


@dataclass(frozen=True)
class Connection:
    fd: int
    inode: int
    peer: str  # an IP address, IPv4-mapped IPv6 written as IPv4
    port: int


def lighthouse_target(url: str) -> tuple[str, int] | None:
    """(host name, port) of TORCHFT_LIGHTHOUSE, or None when there is no name to follow: an IP address can only
    ever be the one Lighthouse."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.hostname or parts.port is None:
        return None
    try:
        ipaddress.ip_address(parts.hostname)
        return None
    except ValueError:
        return parts.hostname, parts.port


def stale(connections: Iterable[Connection], port: int, resolved: set[str]) -> list[Connection]:
    """The connections to `port` at an address the Lighthouse's name no longer gives. None while the name gives
    nothing (between the old pod and the new)."""
    if not resolved:
        return []
    return [c for c in connections if c.port == port and c.peer not in resolved]


def _plain(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """An address as both sides are compared: IPv4-mapped IPv6 (a dual-stack socket's peer) written as IPv4."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _address(hex_address: str) -> tuple[str, int]:
    """A /proc/net/tcp{,6} address ("0100007F:1F90"): the kernel's words in host order (little-endian here)."""
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return _plain(ipaddress.ip_address(words)), int(port, 16)


def tcp_peers(tables: Iterable[str]) -> dict[int, tuple[str, int]]:
    """inode -> (peer address, peer port) of every open TCP connection, from the text of /proc/net/tcp{,6}."""
    peers: dict[int, tuple[str, int]] = {}
    for text in tables:
        for line in text.splitlines()[1:]:
            cols = line.split()
            if len(cols) < 10 or cols[3] not in _OPEN:
                continue
            peers[int(cols[9])] = _address(cols[2])
    return peers


def connections(proc: Path = Path("/proc/self")) -> list[Connection]:
    """This process's TCP connections: its socket descriptors, with their peers from the kernel's table."""
    tables = []
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):  # no IPv6 in this kernel
            tables.append((proc / "net" / name).read_text())
    peers = tcp_peers(tables)
    found = []
    for fd in os.listdir(proc / "fd"):
        try:
            link = os.readlink(proc / "fd" / fd)
        except OSError:
            continue  # closed since the listing
        inode = int(link[8:-1]) if link.startswith("socket:[") else -1
        if inode in peers:
            found.append(Connection(int(fd), inode, *peers[inode]))
    return found


def shut_down(conn: Connection) -> bool:
    """Shut the connection's socket down (both ways: calls waiting on it fail at once), unless its descriptor now
    holds another socket. The descriptor stays its owner's to close."""
    try:
        dup = os.dup(conn.fd)
    except OSError:
        return False
    try:
        if os.fstat(dup).st_ino != conn.inode:
            return False
        with socket.socket(fileno=dup) as sock:
            dup = -1  # the socket object closes it
            sock.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        if dup >= 0:
            os.close(dup)


def resolve(host: str, port: int) -> set[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {_plain(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])) for info in infos}


class LighthouseWatch:
    """A daemon thread in the process that holds the group's Manager server. `say(old, new, n)` is told each time
    connections are shut down."""

    def __init__(
        self,
        host: str,
        port: int,
        say: Callable[[list[str], list[str], int], None],
        interval_s: float = INTERVAL_S,
        resolver: Callable[[str, int], set[str]] = resolve,
        list_connections: Callable[[], list[Connection]] = connections,
    ) -> None:
        self.host, self.port, self.say, self.interval_s = host, port, say, interval_s
        self._resolve, self._connections = resolver, list_connections
        self._clean_for: set[str] | None = None  # the addresses of the last look that found nothing stale
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lighthouse-watch", daemon=True)

    def start(self) -> LighthouseWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def look(self) -> int:
        """One look: the connections shut down. The process's sockets are read only when the name's addresses
        changed since a look found nothing to do."""
        resolved = self._resolve(self.host, self.port)
        if not resolved or resolved == self._clean_for:
            return 0
        old = stale(self._connections(), self.port, resolved)
        closed = [c for c in old if shut_down(c)]
        if closed:
            self.say(sorted({c.peer for c in closed}), sorted(resolved), len(closed))
        else:
            self._clean_for = resolved  # looked again next time while some were shut: a reconnect may race the name
        return len(closed)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.look()
            except Exception:  # noqa: BLE001 - a look that fails must never end training; the next one tries again
                continue
