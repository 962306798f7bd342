"""lighthouse_watch: which connections are the old Lighthouse's, read from this process's real sockets, and that
shutting one down fails what waits on it while every other connection goes on."""

import socket

import pytest

from ddp_trainer.lighthouse_watch import (
    Connection,
    LighthouseWatch,
    _address,
    connections,
    lighthouse_target,
    stale,
    tcp_peers,
)
from support.ports import free_port


@pytest.mark.parametrize(
    "url, target",
    [
        ("http://job-lighthouse.job.team.svc:29510", ("job-lighthouse.job.team.svc", 29510)),
        ("job-lighthouse.job.team.svc:29510", ("job-lighthouse.job.team.svc", 29510)),
        ("http://127.0.0.1:29510", None),  # an address is the one Lighthouse there will ever be
        ("http://[::1]:29510", None),
        ("http://job-lighthouse", None),  # no port: nothing torchft could reach either
    ],
)
def test_only_a_name_is_followed(url, target):
    assert lighthouse_target(url) == target


def test_kernel_addresses_read_in_host_order():
    assert _address("0100007F:1F90") == ("127.0.0.1", 8080)
    assert _address("0000000000000000FFFF00000500007F:7436") == ("127.0.0.5", 29750)  # IPv4-mapped, as IPv4
    assert _address("00000000000000000000000001000000:0050") == ("::1", 80)


def test_only_open_connections_are_peers():
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        "   1: 0100007F:D431 0500007F:7436 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
        "   2: 0100007F:D432 0500007F:7436 05 00000000:00000000 00:00000000 00000000     0        0 333 1\n"
    )  # listening (0A), established (01), and one shut down already (FIN_WAIT2, 05)
    assert tcp_peers([table]) == {222: ("127.0.0.5", 29750)}


def test_stale_is_the_lighthouse_port_at_an_address_the_name_no_longer_gives():
    old, new, other_port = (
        Connection(7, 1, "10.0.0.5", 29510),
        Connection(8, 2, "10.0.0.9", 29510),
        Connection(9, 3, "10.0.0.5", 29500),
    )
    assert stale([old, new, other_port], 29510, {"10.0.0.9"}) == [old]
    assert stale([old, new, other_port], 29510, set()) == []  # the name gives nothing yet: keep what there is
    assert stale([old, other_port], 29510, {"10.0.0.5"}) == []  # still the same Lighthouse


def _listen(ip: str, port: int) -> socket.socket:
    server = socket.create_server((ip, port))
    server.settimeout(30)
    return server


def test_a_look_shuts_down_the_old_lighthouse_connections_of_this_process_only():
    port = free_port()
    old_server, new_server = _listen("127.0.0.5", port), _listen("127.0.0.6", port)
    side_server = _listen("127.0.0.5", free_port())  # the old address, another port: not the Lighthouse
    to_old = socket.create_connection(("127.0.0.5", port), timeout=30)
    to_new = socket.create_connection(("127.0.0.6", port), timeout=30)
    to_side = socket.create_connection(side_server.getsockname(), timeout=30)
    accepted = [s.accept()[0] for s in (old_server, new_server, side_server)]
    said = []
    try:
        mine = {c.fd for c in connections()}
        assert {to_old.fileno(), to_new.fileno(), to_side.fileno()} <= mine

        watch = LighthouseWatch(
            "lh.test", port, lambda old, new, n: said.append((old, new, n)), resolver=lambda h, p: {"127.0.0.6"}
        )
        assert watch.look() == 1
        assert said == [(["127.0.0.5"], ["127.0.0.6"], 1)]
        assert to_old.recv(1) == b""  # what waits on it fails at once: end of stream
        assert accepted[0].recv(1) == b""  # and the old Lighthouse's side is told (a FIN)
        for client, server_side in ((to_new, accepted[1]), (to_side, accepted[2])):
            client.sendall(b"x")
            assert server_side.recv(1) == b"x"
        assert watch.look() == 0  # nothing stale is left: the next look reads no socket until the name changes
        assert watch._clean_for == {"127.0.0.6"}
    finally:
        for s in (to_old, to_new, to_side, *accepted, old_server, new_server, side_server):
            s.close()


def test_no_look_while_the_name_gives_no_address():
    listed = []
    watch = LighthouseWatch(
        "lh.test", 1, lambda *a: None, resolver=lambda h, p: set(), list_connections=lambda: listed.append(1) or []
    )
    assert watch.look() == 0
    assert listed == []
