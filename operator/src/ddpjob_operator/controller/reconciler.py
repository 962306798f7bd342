"""One reconcile pass for one job key: read the watch cache, wait out our own writes the cache has not shown yet,
plan (pure), apply, and return when to look again."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .. import api, metrics
from ..placement.room_wakeups import RoomRounds, turn_order
from ..planner import PlannerSettings, plan_reconcile
from ..recovery import failures
from ..state.plan import Observed, Plan, PodRefusal, ServiceConflict
from ..state.status_writes import WriteBudget
from ..timefmt import utcnow
from ..tracking.progress import ProgressScraper
from .applier import ApplyResult, PlanApplier
from .expectations import Expectations, view_of
from .kube import reason_of, status_of
from .orphans import plan_release_orphans
from .watch_cache import WatchCache

log = logging.getLogger("ddpjob.reconciler")

Key = tuple[str, str]  # (namespace, name)

CONFLICT_RETRY_SECONDS = 0.2
# Between two jobs' turns at freed room: time for the first one's decision (its status write) to reach the cache,
# where its new attempt's pods then count as reserved room.
ROOM_TURN_SECONDS = 1.0
# The API server's 403 for any create in a namespace being deleted ("unable to create new content in namespace X
# because it is being terminated").
TERMINATING_NAMESPACE = "because it is being terminated"


def refused_as_terminating(code: int, message: str) -> bool:
    return code == 403 and TERMINATING_NAMESPACE in message


def namespace_terminating(exc: ApiException) -> bool:
    return refused_as_terminating(status_of(exc), reason_of(exc))


class Reconciler:
    def __init__(
        self,
        api_client: client.ApiClient,
        cache: WatchCache,
        settings: PlannerSettings,
        progress: ProgressScraper,
        expectations: Expectations | None = None,
    ):
        self.cache = cache
        self.expectations = expectations or Expectations(time.monotonic)
        self.applier = PlanApplier(api_client, self.expectations)
        self.settings = settings
        self.progress = progress
        self.phases = metrics.PhaseGauge()
        # Elastic jobs below their desired size or waiting to be placed: a pod or node that gives room back wakes
        # them (handlers.py), so they grow without waiting for the resync.
        self.waiting_for_room: set[Key] = set()
        # ...one at a time, highest priority then oldest first (room_wakeups.py); `wake_later` (set by handlers.py)
        # queues the next turn.
        self.rounds = RoomRounds(self._turn_order)
        self.wake_later: Callable[[Key, float], None] | None = None
        # Jobs whose pass found room to grow into outside their turn: a round starts when the pass is over.
        self.saw_room: set[Key] = set()
        # The latest pod creation the API server refused, per job: an observation for the next pass's planner,
        # which decides what it means (pod_rejection.py). Lost on restart, and then simply observed again.
        self.refusals: dict[Key, PodRefusal] = {}
        # The same for a Service of the job's name that the job does not control (ownership.py).
        self.service_conflicts: dict[Key, ServiceConflict] = {}
        self.network_policy_conflicts: dict[Key, ServiceConflict] = {}
        # Whether this operator leads its peering (leadership.py): a paused standby's pass does nothing at all.
        self.leading: Callable[[], bool] = lambda: True
        # The cluster-wide budget of status writes (status_writes.py); handlers.py sets the configured one.
        self.budget = WriteBudget(0, time.monotonic)

    def _turn_order(self, key: Key) -> tuple[int, str]:
        job = self.cache.job(key) or {}
        return turn_order(self.cache.priority(job), str(job.get("metadata", {}).get("creationTimestamp") or ""))

    def room_freed(self) -> Key | None:
        """A pod or node gave room back: the waiting job whose turn it is to look, if any."""
        return self.rounds.room_freed(self.waiting_for_room)

    def forget(self, key: Key) -> None:
        self.waiting_for_room.discard(key)
        self.refusals.pop(key, None)
        self.service_conflicts.pop(key, None)
        self.network_policy_conflicts.pop(key, None)
        self.phases.set(key, None)
        self.progress.forget(key)
        self.expectations.forget(key)

    async def reconcile(self, key: Key) -> float | None:
        if not self.leading():
            metrics.STANDBY_PASSES.inc()
            return None  # dropped: taking the lead plans every job again (handlers.py)
        started = time.perf_counter()
        try:
            return await self._reconcile(key)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
            nxt = self.rounds.pass_done(key, self.waiting_for_room)
            if key in self.saw_room:  # room seen outside a turn: the waiting jobs look at it in their order
                self.saw_room.discard(key)
                nxt = nxt or self.rounds.room_freed(self.waiting_for_room)
            if nxt is not None and self.wake_later is not None:
                self.wake_later(nxt, ROOM_TURN_SECONDS)

    async def _reconcile(self, key: Key) -> float | None:
        job, pods = self.cache.job(key), self.cache.pods_of(key)
        ready, wait = self.expectations.satisfied(
            key, view_of(job, pods, self.cache.child_kinds(key, key[1]), api.TRACKING_FINALIZER)
        )
        if not ready:
            # The watch event that satisfies it wakes this key again; the wait is only the timeout's safety net.
            return wait
        now = utcnow()
        self.cache.learn_gang(key, now)
        obs = self.cache.observe(key, now)
        if obs is None:
            return await self._release_orphans(key)
        progress, since = self.progress.observe(key, obs)
        obs = dataclasses.replace(
            obs,
            progress=progress,
            progress_since=since,
            agent_restarts=self.progress.agent_restarts(key, int((obs.job.get("status") or {}).get("attempt", 0))),
            agents_silent=self.progress.agents_silent(key, int((obs.job.get("status") or {}).get("attempt", 0))),
            scrapes_current=self.progress.current(key),
            refusal=self.refusals.get(key),
            service_conflict=self.service_conflicts.get(key),
            network_policy_conflict=self.network_policy_conflicts.get(key),
            may_grow=self.rounds.may_grow(key),
        )
        attempt = int((obs.job.get("status") or {}).get("attempt", 0))
        if failures.deletion_to_settle(obs.pods, attempt, now):
            # The job's or the namespace's deletion may not have reached the watches yet: ask the API server.
            owners_live = await asyncio.to_thread(self.applier.owners_live, key, obs.job["metadata"]["uid"])
            obs = dataclasses.replace(obs, owners_live=owners_live)
        plan = plan_reconcile(obs, self.settings)
        wait = self.budget.take(plan.status, obs.job.get("status") or {})
        if wait > 0:  # progress alone, and the cluster-wide budget is spent: the write waits, nothing else does
            plan.status = None
            plan.requeue(wait)
        if plan.grow_blocked:
            self.saw_room.add(key)
        try:
            result = await asyncio.to_thread(self.applier.apply, obs, plan)
        except ApiException as exc:
            if not namespace_terminating(exc):
                raise
            # Nothing can be created there any more, and the pods are going with the namespace: not a failure.
            log.info("namespace is being deleted; releasing the job's pods", extra={"job": f"{key[0]}/{key[1]}"})
            self.cache.learn_terminating(key[0])
            return 0.0
        return self._after(key, obs, plan, result)

    async def _release_orphans(self, key: Key) -> float | None:
        """The job is gone or being deleted: free its pods' tracking finalizers for the garbage collector; in a
        namespace being deleted, delete its pods and PodGroups too (orphans.py says why)."""
        self.phases.set(key, None)
        self.progress.forget(key)
        orphans = self.cache.orphaned_pods(key)
        plan = plan_release_orphans(orphans, self.cache.orphaned_podgroups(key), self.cache.terminating(key[0]))
        await asyncio.to_thread(self.applier.free_orphans, key, orphans, plan)
        return None

    def _after(self, key: Key, obs: Observed, plan: Plan, result: ApplyResult) -> float | None:
        status = plan.status if plan.status is not None else (obs.job.get("status") or {})
        fields = {"job": f"{key[0]}/{key[1]}", "attempt": status.get("attempt"), "phase": status.get("phase")}
        if result.job_gone:
            self.forget(key)
            if plan.delete_job:
                log.info("deleted job after ttlSecondsAfterFinished", extra=fields)
            return None
        if result.service_conflict is not None:
            if key not in self.service_conflicts:
                log.warning(result.service_conflict, extra=fields)
            self.service_conflicts[key] = ServiceConflict(result.service_conflict, obs.now)
            return 0.0
        if result.network_policy_conflict is not None:
            if key not in self.network_policy_conflicts:
                log.warning(result.network_policy_conflict, extra=fields)
            self.network_policy_conflicts[key] = ServiceConflict(result.network_policy_conflict, obs.now)
            return 0.0
        if plan.create_service is not None:
            self.service_conflicts.pop(key, None)
        if plan.create_network_policy is not None:
            self.network_policy_conflicts.pop(key, None)
        if result.rejected:
            if any(refused_as_terminating(code, message) for _, code, message in result.rejected):
                log.info("namespace is being deleted; releasing the job's pods", extra=fields)
                self.cache.learn_terminating(key[0])
                return 0.0
            return self._refused(key, obs, result, int(status.get("attempt", 0)), fields)
        if result.created_pods:
            self.refusals.pop(key, None)
        if result.conflict:
            log.debug("status conflict; re-reading", extra=fields)
            return CONFLICT_RETRY_SECONDS
        if result.status_written:
            for observation in plan.observations:
                metrics.record(observation)
            for event in plan.events:
                log.info("%s: %s", event.reason, event.message, extra=fields)
        shown = (plan.status if result.status_written else None) or obs.job.get("status") or {}
        if shown.get("phase"):
            self.phases.set(key, shown["phase"])
        elastic = bool((obs.job.get("spec") or {}).get("elastic"))
        short = shown.get("replicas", 0) < shown.get("desiredReplicas", 0) or shown.get("phase") == "Pending"
        if elastic and short and shown.get("phase") not in ("Succeeded", "Failed", "Suspended"):
            self.waiting_for_room.add(key)
        else:
            self.waiting_for_room.discard(key)
        return plan.requeue_after

    def _refused(self, key: Key, obs: Observed, result: ApplyResult, attempt: int, fields: dict) -> float:
        """Keep the refusal for the next pass, which plans what follows from it, and run that pass now. `attempt`
        is the planned status's: the attempt whose pods this pass created."""
        pod, code, message = result.rejected[0]
        log.warning("API server refused pod (%s): %s", code, message, extra={**fields, "pod": pod})
        generation = obs.job["metadata"].get("generation", 1)
        self.refusals[key] = PodRefusal(pod, code, message, attempt, generation, obs.now)
        return 0.0
