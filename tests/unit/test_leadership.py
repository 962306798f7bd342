"""leadership.leads: kopf's peering rule, read from the peering object's status (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddpjob_operator.leadership import leads

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def peer(priority, seen_ago=1.0, lifetime=60):
    return {"priority": priority, "lifetime": lifetime, "lastseen": (NOW - timedelta(seconds=seen_ago)).isoformat()}


@pytest.mark.parametrize("name, peers, want", [
    ("alone", {"me": peer(50)}, True),
    ("a live higher priority peer: standby", {"me": peer(50), "primary": peer(100)}, False),
    ("a lower priority peer: leading", {"me": peer(100), "standby": peer(50)}, True),
    ("the same priority: both pause, as kopf does", {"me": peer(50), "twin": peer(50)}, False),
    ("a dead higher priority peer: leading", {"me": peer(50), "primary": peer(100, seen_ago=61)}, True),
    ("an entry without lastseen is dead", {"me": peer(50), "odd": {"priority": 100}}, True),
])
def test_leads_by_kopfs_rule(name, peers, want):
    assert leads(peers, "me", peers["me"]["priority"], NOW) is want, name
