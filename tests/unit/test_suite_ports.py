"""The suites' own ports (tests/support/cluster.py): a job's rendezvous port, drawn at random, never meets a port a
control plane or its Kueue listens on. The full suite met one: Kueue's health port drawn by an InPlace job."""

from __future__ import annotations

import re

from support.cluster import RENDEZVOUS_PORTS, ROOT, SECOND


def defaults(script: str) -> dict[str, str]:
    """The `NAME=${NAME:-PORT}` defaults of a hack/ script: the first control plane's ports."""
    text = (ROOT / "hack" / script).read_text()
    return dict(re.findall(r"^([A-Z_]+PORT)=\$\{\1:-(\d+)\}", text, flags=re.MULTILINE))


def test_no_control_plane_or_kueue_port_is_a_rendezvous_port():
    first = {**defaults("cluster.sh"), **defaults("kueue.sh")}
    second = {k: v for k, v in SECOND.items() if k.endswith("PORT")}
    assert {"APISERVER_PORT", "KUEUE_HEALTH_PORT", "KUEUE_WEBHOOK_PORT"} <= set(first) & set(second)
    clashes = {f"{k}={v}" for k, v in [*first.items(), *second.items()] if int(v) in RENDEZVOUS_PORTS}
    assert not clashes, f"ports among the rendezvous ports {RENDEZVOUS_PORTS}: {sorted(clashes)}"
    assert set(first.values()).isdisjoint(second.values()), "the two control planes share a port"


def test_a_taken_port_is_recognised_in_both_servers_words():
    """A test operator restarted on its old ports retries on new ones when one was taken meanwhile (the ephemeral
    range, where any outgoing connection may take it). The full suite met the liveness port taken: kopf's probe
    server (asyncio) words it in lower case, which the retry did not recognise. Both servers' real errors."""
    import asyncio
    import socket

    from prometheus_client import start_http_server

    from support.operator import port_taken

    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        errors = []
        try:
            start_http_server(port)
        except OSError as err:
            errors.append(str(err))

        async def probe_server():
            await asyncio.get_running_loop().create_server(asyncio.Protocol, "0.0.0.0", port)
        try:
            asyncio.run(probe_server())
        except OSError as err:
            errors.append(str(err))
    assert len(errors) == 2 and all(port_taken(e) for e in errors), errors
    assert not port_taken("Request attempt #1/11 failed; will retry: GET https://127.0.0.1:27443/api")
