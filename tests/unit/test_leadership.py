"""leadership.leads: kopf's peering rule, read from the peering object's status, and may_lead: not before the
operator has watched the peering long enough (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ddpjob_operator.controller.leadership import POLL_SECONDS, SETTLE_SECONDS, leads, may_lead

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


@pytest.mark.parametrize("name, by_rule, watched, want", [
    # The standby of a chart installed at once: alone in the peering at its first read. It must not lead yet.
    ("alone at the first read", True, 0.0, False),
    ("alone for less than the settle time", True, SETTLE_SECONDS - 0.1, False),
    ("alone for the settle time", True, SETTLE_SECONDS, True),
    ("a higher peer seen: never", False, 10 * SETTLE_SECONDS, False),
])
def test_may_lead_only_after_watching_the_peering(name, by_rule, watched, want):
    assert may_lead(by_rule, watched) is want, name


def test_the_settle_time_outlasts_a_peers_poll():
    """A displaced standby polls every POLL_SECONDS: it has seen the returning primary before the primary acts."""
    assert SETTLE_SECONDS > 2 * POLL_SECONDS
