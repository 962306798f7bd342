"""controller/kopf_namespaces.py: which namespaces kopf watches under --namespace. The hooks replace kopf internals
of the version the lock pins (tests/unit/test_relist.py checks that pin); each test first checks that kopf's own
code still reads as the hook assumes."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from kopf._cogs.structs.references import Insights
from kopf._core.reactor import observation

from ddpjob_operator.controller import kopf_namespaces


def ns(name: str, **meta) -> dict:
    return {"metadata": {"name": name, **meta}}


@pytest.mark.parametrize(("name", "patterns", "watched", "expected"), [
    ("t-kq-a", ["t-kq-*"], set(), True),                 # matches, not watched: the one kopf dropped
    ("t-kq-a", ["t-kq-*"], {"t-kq-a"}, False),           # already watched
    ("other", ["t-kq-*"], set(), False),                 # not ours
    ("team-a", ["team-a"], set(), True),                 # an exact name created late
    ("t-kq-x", ["t-kq-*,!t-kq-x"], set(), False),        # kopf's negations hold
    ("t-op-b", ["t-kq-*", "t-op-*"], {"t-kq-a"}, True),  # any of several patterns
])
def test_a_listed_namespace_is_missed_when_it_matches_and_is_not_watched(name, patterns, watched, expected):
    assert kopf_namespaces.missed(ns(name), patterns, watched) is expected


def test_kopf_ignores_its_watchs_listing_of_namespaces():
    """What the hook corrects: kopf's processor returns on a listed namespace (type None) before revising."""
    source = inspect.getsource(observation)  # the module's file: unchanged by a hook already installed
    body = source[source.index("async def process_discovered_namespace_event"):]
    body = body[: body.index("\nasync def ")]
    assert "if raw_event['type'] is None:\n        return" in body
    # the observer looks the processor up by its module-level name, so replacing that name takes effect
    assert "processor=functools.partial(process_discovered_namespace_event," in source


def test_a_listed_namespace_that_kopf_missed_is_watched_and_a_known_one_wakes_nothing():
    kopf_namespaces.install()

    async def scenario():
        insights = Insights()
        insights.namespaces.add("t-kq-known")
        revisions = []

        async def orchestrator():  # kopf's orchestrator waits on the same condition
            async with insights.revised:
                while True:
                    await insights.revised.wait()
                    revisions.append(set(insights.namespaces))

        watching = asyncio.create_task(orchestrator())
        await asyncio.sleep(0)
        process = observation.process_discovered_namespace_event
        for event in ({"type": None, "object": ns("t-kq-known")}, {"type": None, "object": ns("elsewhere")},
                      {"type": None, "object": ns("t-kq-late")}, {"type": "DELETED", "object": ns("t-kq-known")}):
            await process(raw_event=event, namespaces=["t-kq-*"], insights=insights)
            await asyncio.sleep(0)
        watching.cancel()
        return insights.namespaces, revisions

    watched, revisions = asyncio.run(scenario())
    assert watched == {"t-kq-late"}
    assert revisions == [{"t-kq-known", "t-kq-late"}, {"t-kq-late"}]  # one wake-up per change, none for the rest


def test_a_namespace_being_deleted_stays_watched_until_it_is_gone():
    """kopf stops watching a namespace once its deletion begins, and never starts on one already Terminating; our
    pods there would then never be released."""
    assert "is_deleted(raw_event)" in inspect.getsource(observation.revise_namespaces)
    kopf_namespaces.install()
    terminating = {"type": "MODIFIED", "object": {"metadata": {"name": "t", "deletionTimestamp": "2026-01-01T00:00:00Z"},
                                                  "status": {"phase": "Terminating", "conditions": [{"type": "X"}]}}}
    assert observation.is_deleted(terminating) is False
    assert observation.is_deleted({**terminating, "type": "DELETED"}) is True
    # and a Terminating namespace listed by a (re)starting operator is watched: its pods still need us
    assert kopf_namespaces.missed(terminating["object"], ["t"], set()) is True
