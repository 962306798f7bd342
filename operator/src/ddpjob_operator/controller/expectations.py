"""Expectations, as the Kubernetes Job controller keeps them: the writes a pass issued that the watch cache has not
shown yet. While any is outstanding the job's next pass waits, because a cache that lags behind our own writes
would make it decide wrong: create a pod again, call a just-created pod missing (a false failure), delete twice, or
plan from a status older than the one just written. Each expectation ends when the cache shows its effect, or
after a timeout (a lost watch event must not stall a job for ever; the pass then runs on what the cache shows,
and the API server's uid and resourceVersion preconditions keep its writes safe).

Pure bookkeeping: the caller passes the cache's view in, so every rule is table-tested without a cluster."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Key = tuple[str, str]
DEFAULT_TIMEOUT_SECONDS = 30.0


@dataclass
class Pending:
    created_pods: set[str] = field(default_factory=set)  # uids to appear
    deleted_pods: set[str] = field(default_factory=set)  # uids to disappear or show a deletionTimestamp
    released_pods: set[str] = field(default_factory=set)  # uids to lose the tracking finalizer (or vanish)
    children: set[str] = field(default_factory=set)  # child kinds (Service, NetworkPolicy) to appear
    # The job's resourceVersion the cache must move past: the one our status write was based on (or that a 409
    # told us is stale).
    job_version: str | None = None
    since: float = 0.0

    def empty(self) -> bool:
        return not (
            self.created_pods
            or self.deleted_pods
            or self.released_pods
            or self.children
            or self.job_version is not None
        )


@dataclass(frozen=True)
class CacheView:
    """What the watch cache shows for one job, reduced to what expectations compare."""

    job_version: str | None  # None: the job is not in the cache
    pods: dict[str, dict[str, Any]]  # uid -> pod
    child_kinds: frozenset[str]
    finalizer: str


def view_of(
    job: dict[str, Any] | None, pods: Iterable[dict[str, Any]], child_kinds: Iterable[str], finalizer: str
) -> CacheView:
    return CacheView(
        job_version=(job or {}).get("metadata", {}).get("resourceVersion") if job else None,
        pods={p["metadata"]["uid"]: p for p in pods},
        child_kinds=frozenset(child_kinds),
        finalizer=finalizer,
    )


class Expectations:
    def __init__(self, clock: Callable[[], float], timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS):
        self._clock = clock
        self.timeout = timeout_seconds
        self._pending: dict[Key, Pending] = {}
        self._lock = threading.Lock()  # the applier records writes from several threads at once

    def _entry(self, key: Key) -> Pending:
        entry = self._pending.get(key)
        if entry is None or entry.empty():
            entry = self._pending[key] = Pending(since=self._clock())
        return entry

    def created_pod(self, key: Key, uid: str) -> None:
        with self._lock:
            self._entry(key).created_pods.add(uid)

    def deleted_pod(self, key: Key, uid: str) -> None:
        with self._lock:
            self._entry(key).deleted_pods.add(uid)

    def released_pod(self, key: Key, uid: str) -> None:
        with self._lock:
            self._entry(key).released_pods.add(uid)

    def created_child(self, key: Key, kind: str) -> None:
        with self._lock:
            self._entry(key).children.add(kind)

    def wrote_status(self, key: Key, based_on_version: str) -> None:
        with self._lock:
            self._entry(key).job_version = based_on_version

    def forget(self, key: Key) -> None:
        with self._lock:
            self._pending.pop(key, None)

    def outstanding(self, key: Key) -> Pending | None:
        entry = self._pending.get(key)
        return None if entry is None or entry.empty() else entry

    def satisfied(self, key: Key, view: CacheView) -> tuple[bool, float]:
        """(may the pass run, seconds until the wait times out). Drops what the cache now shows."""
        with self._lock:
            return self._satisfied(key, view)

    def _satisfied(self, key: Key, view: CacheView) -> tuple[bool, float]:
        entry = self._pending.get(key)
        if entry is None:
            return True, 0.0
        entry.created_pods = {uid for uid in entry.created_pods if uid not in view.pods}
        entry.deleted_pods = {
            uid
            for uid in entry.deleted_pods
            if uid in view.pods and not view.pods[uid]["metadata"].get("deletionTimestamp")
        }
        entry.released_pods = {
            uid
            for uid in entry.released_pods
            if uid in view.pods and view.finalizer in (view.pods[uid]["metadata"].get("finalizers") or [])
        }
        entry.children = {kind for kind in entry.children if kind not in view.child_kinds}
        # Our write was based on this version, and the watch delivers versions in order: any other version in the
        # cache (or no job at all) means it has seen our write or something after it.
        if entry.job_version is not None and view.job_version != entry.job_version:
            entry.job_version = None
        if entry.empty():
            del self._pending[key]
            return True, 0.0
        left = entry.since + self.timeout - self._clock()
        if left <= 0:
            del self._pending[key]
            return True, 0.0
        return False, left
