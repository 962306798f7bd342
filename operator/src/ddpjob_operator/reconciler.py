"""One reconcile pass for one job key: read fresh, plan (pure), apply, and return when to look again."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from kubernetes import client

from . import metrics
from .applier import ApplyResult, PlanApplier
from .plan import Event, Observed, Plan
from .planner import PlannerSettings, plan_reconcile
from .pod_rejection import reject_unschedulable_template
from .progress import ProgressScraper
from .reader import ClusterReader
from .timefmt import utcnow

log = logging.getLogger("ddpjob.reconciler")

Key = tuple[str, str]  # (namespace, name)

CONFLICT_RETRY_SECONDS = 0.2
REJECTED_RETRY_SECONDS = 10.0


class Reconciler:
    def __init__(self, api_client: client.ApiClient, settings: PlannerSettings, progress: ProgressScraper):
        self.reader = ClusterReader(api_client)
        self.applier = PlanApplier(api_client)
        self.settings = settings
        self.progress = progress
        self.phases = metrics.PhaseGauge()

    def forget(self, key: Key) -> None:
        self.phases.set(key, None)
        self.progress.forget(key)

    async def reconcile(self, key: Key) -> float | None:
        started = time.perf_counter()
        try:
            return await self._reconcile(key)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)

    async def _reconcile(self, key: Key) -> float | None:
        namespace, name = key
        obs = await asyncio.to_thread(self.reader.read, namespace, name, utcnow())
        if obs is None:
            self.forget(key)
            return None
        progress = await self.progress.scrape_if_due(key, obs)
        if progress:
            obs = dataclasses.replace(obs, progress=progress)
        plan = plan_reconcile(obs, self.settings)
        result = await asyncio.to_thread(self.applier.apply, obs, plan)
        return self._after(key, obs, plan, result)

    def _after(self, key: Key, obs: Observed, plan: Plan, result: ApplyResult) -> float | None:
        status = plan.status if plan.status is not None else (obs.job.get("status") or {})
        fields = {"job": f"{key[0]}/{key[1]}", "attempt": status.get("attempt"), "phase": status.get("phase")}
        if result.job_gone:
            self.forget(key)
            if plan.delete_job:
                log.info("deleted job after ttlSecondsAfterFinished", extra=fields)
            return None
        if result.rejected:
            return self._rejected(key, obs, plan, result, fields)
        if result.conflict:
            log.debug("status conflict; re-reading", extra=fields)
            return CONFLICT_RETRY_SECONDS
        if plan.status is not None:
            for observation in plan.observations:
                metrics.record(observation)
            for event in plan.events:
                log.info("%s: %s", event.reason, event.message, extra=fields)
        self.phases.set(key, status.get("phase"))
        return plan.requeue_after

    def _rejected(self, key: Key, obs: Observed, plan: Plan, result: ApplyResult, fields: dict) -> float | None:
        pod, code, message = result.rejected[0]
        log.warning("API server refused pod (%s): %s", code, message, extra={**fields, "pod": pod})
        planned = plan.status if plan.status is not None else (obs.job.get("status") or {})
        status = reject_unschedulable_template(planned, obs.now, pod, code, message)
        if status is None:
            return REJECTED_RETRY_SECONDS  # quota, admission webhooks: may pass later
        outcome = ApplyResult()
        if self.applier.write_status(obs.job, status, outcome):
            metrics.JOBS_FAILED.inc()
            event = Event("Warning", "InvalidPodTemplate", status["conditions"][-1]["message"])
            self.applier.post_events(obs.job, Plan(events=[event]), obs.now)
            self.phases.set(key, status.get("phase"))
            return None
        return CONFLICT_RETRY_SECONDS

