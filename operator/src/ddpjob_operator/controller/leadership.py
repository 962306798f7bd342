"""Whether this operator leads its kopf peering, so that a paused standby writes nothing.

kopf's pause stops the watch streams of a standby only. The operator's own work queue, resync and timers would go
on planning from indexes that no longer change: status writes that conflict, pods re-created under names that look
free, force-deletes decided from a NotReady time that keeps growing in a frozen cache. So the reconciler asks this
module first, and a pass of a standby does nothing.

The rule is kopf's own (kopf/_core/engines/peering.py, `process_peering_event`), read from the peering object's
status, which is kopf's public peering format (one key per operator identity: priority, lastseen, lifetime): an
operator pauses while another live peer has a higher priority, or the same one. This module reads that object
with a GET every few seconds, never from the (frozen) watch cache, and writes nothing. The operator's identity
is chosen here and handed to kopf, so both speak of the same peer.

An operator that has just started leads only after it has watched the peering for SETTLE_SECONDS, longer than a
peer's poll. Two operators started together (`helm install` of the chart's primary and standby) would otherwise
both lead at first, each before the other's entry was there: on the real nodes the standby created a job's pods
and stood down 2 s later. A primary that returns waits the same, so the standby it displaces has polled, seen it
and stopped before the primary acts. And it leads only once every watch stream has listed since kopf resumed it
(relist.ListingStates): until then the indexes are the frozen ones of the pause."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .kube import REQUEST_TIMEOUT

log = logging.getLogger("ddpjob.leadership")

POLL_SECONDS = 2.0
SETTLE_SECONDS = 3 * POLL_SECONDS
PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"


def own_identity() -> str:
    """The pod's name where the chart sets POD_ID (as kopf reads it), else host, process and a random suffix."""
    return os.environ.get("POD_ID") or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _parse(value: Any) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def leads(peers: Mapping[str, Any], identity: str, priority: int, now: datetime) -> bool:
    """kopf's rule: False while another live peer has a higher priority or the same one."""
    for peer_id, info in peers.items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        seen = _parse(info.get("lastseen"))
        if seen is None or seen + timedelta(seconds=int(info.get("lifetime", 60))) <= now:
            continue  # dead: kopf ignores it (and cleans it up)
        if int(info.get("priority", 0)) >= priority:
            return False
    return True


def may_lead(leads_by_rule: bool, watched_seconds: float, settle_seconds: float = SETTLE_SECONDS) -> bool:
    """Lead when kopf's rule says so and this operator has watched the peering long enough for a peer starting
    beside it to have announced itself, and for a standby it displaces to have seen it."""
    return leads_by_rule and watched_seconds >= settle_seconds


class Leadership:
    """`leading()` for the reconciler; `run()` polls the peering object(s) and calls `on_lead` when this operator
    takes the lead again (a paused standby's work queue has dropped what it skipped)."""

    def __init__(
        self,
        api: client.ApiClient | None,
        identity: str,
        priority: int,
        peering: str | None,
        namespaces: tuple[str, ...],
        on_lead: Callable[[], None] | None = None,
        fresh: Callable[[], bool] = lambda: True,
    ):
        self.custom = client.CustomObjectsApi(api) if api is not None else None
        self.identity, self.priority, self.peering = identity, priority, peering
        # Namespaced peering lives in each served namespace; a glob's namespaces are not known here, so only
        # kopf's own pause covers those.
        self.namespaces = tuple(n for n in namespaces if not any(ch in n for ch in "*?["))
        self.clusterwide = not namespaces
        self.on_lead = on_lead
        self.fresh = fresh  # every watch stream has listed since it (re)started (relist.ListingStates)
        self._leading = peering is None  # a peering operator starts paused, as kopf starts it

    def leading(self) -> bool:
        return self._leading

    def _read(self) -> list[Mapping[str, Any]]:
        assert self.custom is not None and self.peering is not None
        if self.clusterwide:
            return [
                self.custom.get_cluster_custom_object(
                    PEERING_GROUP,
                    PEERING_VERSION,
                    "clusterkopfpeerings",
                    self.peering,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            ]
        return [
            self.custom.get_namespaced_custom_object(
                PEERING_GROUP, PEERING_VERSION, ns, "kopfpeerings", self.peering, _request_timeout=REQUEST_TIMEOUT
            )
            for ns in self.namespaces
        ]

    async def run(self) -> None:
        if self.peering is None or self.custom is None:
            return
        first_read: datetime | None = None
        said = ""  # the role last logged
        while True:
            try:
                objects = await asyncio.to_thread(self._read)
                now = datetime.now(UTC)
                first_read = first_read or now
                by_rule = all(leads(o.get("status") or {}, self.identity, self.priority, now) for o in objects)
                settled = may_lead(by_rule, (now - first_read).total_seconds())
                leading = settled and self.fresh()
                role = (
                    "leading"
                    if leading
                    else "catching up (watch streams still listing) in"
                    if settled
                    else "settling in"
                    if by_rule
                    else "standing by in"
                )
            except (ApiException, OSError) as exc:  # unknown: keep what we knew; kopf's own pause still holds
                log.debug("cannot read the peering %s: %s", self.peering, exc)
                leading, role = self._leading, said
            if role != said:
                said = role
                suffix = f" (leads after {SETTLE_SECONDS:g}s without a higher peer)" if role == "settling in" else ""
                log.info("%s the peering %s%s", role, self.peering, suffix)
            if leading != self._leading:
                self._leading = leading
                if leading and self.on_lead is not None:
                    self.on_lead()
            await asyncio.sleep(POLL_SECONDS)
