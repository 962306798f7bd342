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
from collections import Counter
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
    """Where the watch streams stand: a stream is `listing` from the moment kopf (re)starts it (continuous_watch
    lists first), `listed` once its listing is over, `stopped` when it ends (kopf paused a standby, or the stream
    failed and is about to list again) until it starts again or its watcher ends for good (a namespace no longer
    watched). A cache is fresh only while no stream is listing or stopped: a standby's indexes stop changing when
    kopf pauses it, and after a failover the new leader planned from them, frozen, until kopf's relist ended
    (force-deletes decided from stale NotReady times). Counted per (resource, namespace): kopf's namespace observer
    and our namespace index watch the same resource, each with streams of its own. Pure: fed by the layer below."""

    def __init__(self) -> None:
        self.listing: Counter[tuple[str, str | None]] = Counter()
        self.stopped_: Counter[tuple[str, str | None]] = Counter()
        self.ended_: Counter[tuple[str, str | None]] = Counter()

    def started(self, key: tuple[str, str | None]) -> None:
        if self.stopped_[key] > 0:
            self.stopped_[key] -= 1  # the same watcher's stream again (any of the key's: they are alike)
        self.listing[key] += 1

    def listed(self, key: tuple[str, str | None]) -> None:
        if self.listing[key] > 0:
            self.listing[key] -= 1

    def stopped(self, key: tuple[str, str | None], listed: bool) -> None:
        if not listed:
            self.listed(key)
        if self.ended_[key] > 0:
            self.ended_[key] -= 1  # its watcher ended first (the stream was finalized after it): gone for good
        else:
            self.stopped_[key] += 1

    def ended(self, key: tuple[str, str | None]) -> None:
        """The watcher itself ended (its namespace is no longer watched): its stopped stream counts no more, also
        when the stream's own end is seen after this (an async generator closed later by the event loop)."""
        if self.stopped_[key] > 0:
            self.stopped_[key] -= 1
        else:
            self.ended_[key] += 1

    def fresh(self) -> bool:
        return not any(self.listing.values()) and not any(self.stopped_.values())

    def stale(self) -> list[str]:
        keys = {k for k, n in (self.listing + self.stopped_).items() if n > 0}
        return sorted(f"{resource}{'' if ns is None else ' in ' + ns}" for resource, ns in keys)


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
        listed = False
        try:
            async for raw in original_stream(**kwargs):
                if raw is watching.Bookmark.LISTED and not listed:
                    listed = True
                    LISTINGS.listed(key)
                yield raw
        finally:
            LISTINGS.stopped(key, listed)

    async def infinite_watch(**kwargs: Any) -> AsyncIterator[Any]:
        # One tracker per watcher, for its whole life (every reconnect and relist of its stream): two watchers of
        # one resource (kopf's namespace observer and our namespace index) list at their own times.
        tracker = ListingTracker()
        try:
            async for raw in _relisted(tracker, original(**kwargs), kwargs):
                yield raw
        finally:
            LISTINGS.ended((str(kwargs.get("resource")), kwargs.get("namespace")))

    async def _relisted(
        tracker: ListingTracker, stream: AsyncIterator[Any], kwargs: dict[str, Any]
    ) -> AsyncIterator[Any]:
        async for raw in stream:
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
