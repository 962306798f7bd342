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


# --- issue 54, defect 12: after a failover, lead only from a fresh listing -----------------------------------------
def test_a_cache_is_fresh_only_while_every_stream_it_knows_has_listed():
    from ddpjob_operator.controller.relist import ListingStates

    states = ListingStates()
    assert states.fresh(), "no stream yet: nothing stale"
    pods, jobs = ("pods", "ns"), ("ddpjobs", "ns")
    states.started(pods)
    states.started(jobs)
    states.listed(pods)
    assert not states.fresh() and states.stale() == ["ddpjobs in ns"], "one stream still listing"
    states.listed(jobs)
    assert states.fresh()
    states.stopped(pods, listed=True)  # kopf paused a standby: its indexes stop changing from here on
    assert not states.fresh() and states.stale() == ["pods in ns"]
    states.started(pods)  # the lead taken: kopf resumes, the stream lists again
    assert not states.fresh(), "planning now would read the frozen indexes of the pause"
    states.listed(pods)
    assert states.fresh()


@pytest.mark.parametrize("order", ["stream first", "watcher first"])
def test_a_namespace_no_longer_watched_leaves_nothing_stale(order):
    from ddpjob_operator.controller.relist import ListingStates

    states, key = ListingStates(), ("pods", "gone")
    states.started(key)
    states.listed(key)
    if order == "stream first":
        states.stopped(key, listed=True)
        states.ended(key)
    else:  # the stream's generator finalized by the event loop after its watcher ended
        states.ended(key)
        states.stopped(key, listed=True)
    assert states.fresh()


def test_two_watchers_of_one_resource_each_count():
    from ddpjob_operator.controller.relist import ListingStates

    states, key = ListingStates(), ("namespaces", None)
    states.started(key)
    states.started(key)
    states.listed(key)
    assert not states.fresh(), "the second watcher's listing is not over"
    states.listed(key)
    assert states.fresh()


def test_the_layer_marks_each_stream_through_kopfs_continuous_watch(monkeypatch):
    """relist.install() wraps continuous_watch too, which infinite_watch calls by its module name for each
    (re)started stream: listing from its start, listed at its Bookmark.LISTED, stopped at its end."""
    import asyncio
    import inspect

    from kopf._cogs.clients import watching

    from ddpjob_operator.controller import relist

    assert "stream = continuous_watch(" in inspect.getsource(watching.infinite_watch)
    seen: list[bool] = []

    async def kopfs_stream(**kwargs):  # as kopf's: the listing, its bookmark, then the watch
        seen.append(relist.LISTINGS.fresh())
        yield {"type": None, "object": {"metadata": {"uid": "a"}}}
        seen.append(relist.LISTINGS.fresh())
        yield watching.Bookmark.LISTED
        seen.append(relist.LISTINGS.fresh())

    monkeypatch.setattr(watching, "continuous_watch", kopfs_stream)
    monkeypatch.setattr(watching, "infinite_watch", watching.infinite_watch)
    monkeypatch.setattr(relist, "_installed", False)
    monkeypatch.setattr(relist, "LISTINGS", relist.ListingStates())
    relist.install()
    assert watching.continuous_watch.__module__ == relist.__name__

    async def run():
        async for _ in watching.continuous_watch(resource="pods", namespace="t"):
            pass

    asyncio.run(run())
    assert seen == [False, False, True]
    assert not relist.LISTINGS.fresh(), "the stream ended (a pause, or a failure before a relist): stopped"
