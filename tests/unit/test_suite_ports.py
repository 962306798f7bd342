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
