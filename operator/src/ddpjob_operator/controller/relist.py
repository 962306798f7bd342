"""After a relist, the watch cache holds exactly what the API server holds.

kopf fills its indexes from watch events and drops an object only on its DELETED event. When a watch cannot
resume (410 Gone after an API server restart or a long partition), kopf lists the resource again and streams on,
but an object deleted during the gap gets no DELETED event: it would stay in the indexes for good. A ghost pod of
an old attempt then blocks the next attempt for ever; a ghost node adds room that is not there.

client-go's Reflector solves this with Replace(): what is absent from the new list is gone. This module does the
same for kopf, in a thin layer over its watch stream: kopf 1.45's `infinite_watch` relists through
`continuous_watch`, which yields the listed objects as events of type None and then `Bookmark.LISTED`. The layer
remembers every object the stream delivered, and when a listing ends it emits a DELETED event for each one the
listing did not contain. Everything downstream (indexes, event handlers, the per-object workers) sees an ordinary
deletion."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

log = logging.getLogger("ddpjob.relist")

# What a synthetic DELETED event carries: what kopf needs to find the object in its indexes (uid, name,
# namespace) and what our handlers read from a deleted object (labels, owner, node, phase).
_META = ("name", "namespace", "uid", "labels", "ownerReferences", "resourceVersion")


def tombstone(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta[k] for k in _META if k in meta},
        "spec": {k: v for k, v in (body.get("spec") or {}).items() if k == "nodeName"},
        "status": {k: v for k, v in (body.get("status") or {}).items() if k == "phase"},
    }


class ListingTracker:
    """The objects one watch stream (a resource, in one namespace or cluster-wide) has delivered, by uid. Pure:
    feed it the raw events, and ask it for the deletions a finished listing implies."""

    def __init__(self) -> None:
        self.known: dict[str, dict[str, Any]] = {}
        self._listed: set[str] | None = None  # uids of the listing in progress

    def event(self, raw: Mapping[str, Any]) -> None:
        body = raw.get("object") or {}
        uid = (body.get("metadata") or {}).get("uid")
        if not uid:
            return
        kind = raw.get("type")
        if kind == "DELETED":
            self.known.pop(uid, None)
            return
        if kind is None:  # an object of a listing
            if self._listed is None:
                self._listed = set()
            self._listed.add(uid)
        self.known[uid] = tombstone(body)

    def listing_over(self) -> list[dict[str, Any]]:
        """DELETED events for what the listing that just ended did not contain (an empty listing included)."""
        listed, self._listed = self._listed or set(), None
        gone = [uid for uid in self.known if uid not in listed]
        return [{"type": "DELETED", "object": self.known.pop(uid)} for uid in gone]


class ListingStates:
    """Where each watch stream stands: `listing` from the moment kopf (re)starts it (continuous_watch lists first),
    `listed` once its listing is over, `stopped` when it ends (kopf paused a standby, or the stream failed and is
    about to list again). A cache is fresh only while every stream it has known is `listed`: a standby's indexes
    stop changing when kopf pauses it, and after a failover the new leader planned from them, frozen, until kopf's
    relist ended (force-deletes decided from stale NotReady times). Pure: fed by the layer below."""

    def __init__(self) -> None:
        self.state: dict[tuple[str, str | None], str] = {}

    def started(self, key: tuple[str, str | None]) -> None:
        self.state[key] = "listing"

    def listed(self, key: tuple[str, str | None]) -> None:
        self.state[key] = "listed"

    def stopped(self, key: tuple[str, str | None]) -> None:
        self.state[key] = "stopped"

    def fresh(self) -> bool:
        return all(state == "listed" for state in self.state.values())

    def stale(self) -> list[str]:
        return sorted(
            f"{resource}{'' if ns is None else ' in ' + ns}"
            for (resource, ns), st in self.state.items()
            if st != "listed"
        )


LISTINGS = ListingStates()  # the operator process's streams (leadership.py asks it before leading)


def listings_fresh() -> bool:
    return LISTINGS.fresh()


_installed = False


def install() -> None:
    """Wrap kopf's infinite_watch (idempotent). Must run before kopf starts its watchers."""
    global _installed
    if _installed:
        return
    from kopf._cogs.clients import watching  # the layer this fixes; pinned kopf version in the lock

    original = watching.infinite_watch
    original_stream = watching.continuous_watch

    async def continuous_watch(**kwargs: Any) -> AsyncIterator[Any]:
        # One call per (re)started stream: it lists, then watches (infinite_watch calls it by its module name).
        key = (str(kwargs.get("resource")), kwargs.get("namespace"))
        LISTINGS.started(key)
        try:
            async for raw in original_stream(**kwargs):
                if raw is watching.Bookmark.LISTED:
                    LISTINGS.listed(key)
                yield raw
        finally:
            LISTINGS.stopped(key)

    async def infinite_watch(**kwargs: Any) -> AsyncIterator[Any]:
        # One tracker per watcher, for its whole life (every reconnect and relist of its stream): two watchers of
        # one resource (kopf's namespace observer and our namespace index) list at their own times.
        tracker = ListingTracker()
        async for raw in original(**kwargs):
            if raw is watching.Bookmark.LISTED:
                ghosts = tracker.listing_over()
                if ghosts:
                    log.info(
                        "relist of %s: %d deleted while the watch was down, dropped from the cache: %s",
                        kwargs.get("resource"),
                        len(ghosts),
                        ", ".join(_describe(g["object"]) for g in ghosts[:20]),
                    )
                for ghost in ghosts:
                    yield ghost
            elif not isinstance(raw, watching.Bookmark):
                tracker.event(raw)
            yield raw

    watching.infinite_watch = infinite_watch
    watching.continuous_watch = continuous_watch
    _installed = True


def _describe(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return "/".join(p for p in (meta.get("namespace"), meta.get("name")) if p)
