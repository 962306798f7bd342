"""Two corrections to kopf's namespace observation, which decides the namespaces it watches under --namespace (names
or globs). Cluster-wide, kopf observes no namespaces and neither applies.

A namespace being deleted stays watched until it is gone. kopf drops a namespace from its watch set as soon as its
deletion begins, and never starts watching one already Terminating. But the namespace controller deletes the pods
first, and ours carry a tracking finalizer that only this operator removes: an operator (re)started during a
namespace's deletion would never see those pods, and the namespace would stay Terminating for good. So a namespace
counts as deleted only once it is really gone (its DELETED event, or its absence from a relist: relist.py).

A namespace that a listing shows is watched. kopf lists the namespaces once, then starts a watch that lists them
again and ignores that second listing (kopf/_core/reactor/observation.py, `process_discovered_namespace_event`
returns on events of type None). A namespace created between the two listings was therefore never watched, nor
one created while the watch was down long enough to relist: its jobs waited until something modified the
namespace or the operator restarted. CI met it once: a test created its namespace as the operator started, and
its job had no status after 60 s. Here a listed namespace that matches and is not watched yet is added to kopf's
set as a watch event would add it; the known ones cost no lock and no wake-up of kopf's orchestrator."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

log = logging.getLogger("ddpjob.namespaces")

_installed = False


def gone(raw_event: Mapping[str, Any]) -> bool:
    return raw_event.get("type") == "DELETED"


def missed(body: Mapping[str, Any], patterns: Collection[str], watched: Collection[str | None]) -> bool:
    """Whether a listed namespace matches the operator's --namespace patterns (kopf's syntax: globs, `!` negations,
    comma-separated parts) and is not among those kopf watches."""
    from kopf._cogs.structs.references import NamespaceName, match_namespace

    name = (body.get("metadata") or {}).get("name")
    if not isinstance(name, str) or name in watched:
        return False
    return any(match_namespace(NamespaceName(name), pattern) for pattern in patterns)


def install() -> None:
    """Patch kopf's namespace observation (idempotent). Must run before kopf starts observing namespaces."""
    global _installed
    if _installed:
        return
    # The kopf version the hashed lock pins (tests/unit/test_relist.py); tests/unit/test_kopf_namespaces.py checks
    # the code these hooks replace.
    from kopf._core.reactor import observation

    async def process_discovered_namespace_event(*, raw_event, namespaces, insights, **_: Any) -> None:
        if raw_event["type"] is None:
            if not missed(raw_event["object"], namespaces, insights.namespaces):
                return
            log.info(
                "namespace %s matches --namespace but was not watched (created while kopf's namespace watch "
                "started or relisted): watching it now",
                raw_event["object"]["metadata"]["name"],
            )
        async with insights.revised:
            observation.revise_namespaces(raw_events=[raw_event], insights=insights, namespaces=namespaces)
            insights.revised.notify_all()

    observation.is_deleted = gone
    observation.process_discovered_namespace_event = process_discovered_namespace_event
    _installed = True
