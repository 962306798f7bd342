"""Training progress read from worker 0's `metrics` port (ddp_trainer_* series) into status.progress."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, cast

from prometheus_client.parser import text_string_to_metric_families

from .. import api
from ..recovery import failures
from ..state.plan import Observed
from ..state.spec import IN_PLACE, TORCHFT, trainer_container
from ..state.status import JobStatus
from ..timefmt import format_time, utcnow
from ..workers.pod_sort import replaced_uids
from .metrics_fetch import DEADLINE_SECONDS, fetch_metrics

log = logging.getLogger("ddpjob.progress")

Key = tuple[str, str]

SERIES = {
    "ddp_trainer_step": "step",
    "ddp_trainer_loss": "loss",
    "ddp_trainer_samples_per_second": "samplesPerSecond",
    "ddp_trainer_torchrun_restarts": "inPlaceRestarts",  # in_place.py
    "ddp_trainer_last_checkpoint_step": "checkpointStep",  # recoveries.py: steps lost at a failure
    "ddp_trainer_total_steps": "totalSteps",  # progress_eta.py: percent done and ETA
    "ddp_trainer_last_checkpoint_duration_seconds": "checkpointSeconds",  # the newest save, start to in place
    "ddp_trainer_replica_groups": "replicaGroups",  # replica_groups.py: a replaced group is back in the quorum
}
# While a pod is replaced alone, worker 0 is read this often (replica_groups.rejoined: TorchFT's recovery ends when
# the replacement is back in worker 0's quorum).
REJOIN_SCRAPE_SECONDS = 2.0
INTEGERS = ("step", "inPlaceRestarts", "checkpointStep", "totalSteps", "replicaGroups")
# The capabilities worker 0's trainer declares (api.CAPABILITY_SERIES{name=...} 1), as progress fields set True.
CAPABILITIES = {api.LIGHTHOUSE_RECONNECT: "lighthouseReconnect"}  # replica_groups.reconnects_to_a_new_lighthouse


def metrics_url(obs: Observed) -> str | None:
    """The metrics endpoint to read while the job is Running and its template declares a `metrics` port: worker
    0's. Under TorchFT every replica group's pod reports the same step, so the lowest-index group that is live is
    read: not one being replaced (or replaced and still Terminating), being deleted, or on a NotReady node, which
    would answer nothing for up to the 300 s a lost pod is kept (progress and the recovery's end would wait)."""
    status = obs.job.get("status") or {}
    if status.get("phase") != "Running":
        return None
    attempt = str(status.get("attempt", 0))
    torchft = ((obs.job.get("spec") or {}).get("faultTolerance") or {}).get("mode") == TORCHFT
    replaced = replaced_uids(cast(JobStatus, status))
    candidates: list[tuple[int, str]] = []
    for pod in obs.pods:
        labels = pod["metadata"].get("labels", {})
        index = labels.get(api.LABEL_REPLICA_INDEX, "")
        if labels.get(api.LABEL_ATTEMPT) != attempt or not index.isdigit() or (index != "0" and not torchft):
            continue
        if torchft and not _live(pod, obs, replaced):
            continue
        url = _pod_metrics_url(pod)
        if url is not None:
            candidates.append((int(index), url))
    return min(candidates)[1] if candidates else None


def agent_urls(obs: Observed) -> dict[str, str]:
    """restartStrategy InPlace, while the job is Running: every running pod's torchrun agent endpoint (pod uid ->
    URL), which serves the agent's in-place restart count whether or not the trainer serves metrics."""
    status = obs.job.get("status") or {}
    run_policy = (obs.job.get("spec") or {}).get("runPolicy") or {}
    if status.get("phase") != "Running" or run_policy.get("restartStrategy") != IN_PLACE:
        return {}
    attempt = str(status.get("attempt", 0))
    urls = {}
    for pod in obs.pods:
        ip = (pod.get("status") or {}).get("podIP")
        if pod["metadata"].get("labels", {}).get(api.LABEL_ATTEMPT) != attempt or not ip:
            continue
        if (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
            urls[pod["metadata"]["uid"]] = f"http://{ip}:{api.AGENT_METRICS_PORT}/metrics"
    return urls


def parse_agent_restarts(text: str) -> int | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == api.AGENT_RESTARTS_SERIES and math.isfinite(sample.value) and sample.value >= 0:
                return int(sample.value)
    return None


def _live(pod: dict[str, Any], obs: Observed, replaced: set[str]) -> bool:
    if pod["metadata"].get("uid") in replaced or pod["metadata"].get("deletionTimestamp"):
        return False
    name = (pod.get("spec") or {}).get("nodeName")
    return not name or failures.node_ready(obs.nodes.get(name))[0]


def _pod_metrics_url(pod: dict[str, Any]) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    container = trainer_container(pod["spec"].get("containers", [])) or {}
    port = next(
        (p.get("containerPort") for p in container.get("ports") or [] if p.get("name") == api.METRICS_PORT_NAME),
        None,
    )
    if ip and port and (pod.get("status") or {}).get("phase") == "Running":
        return f"http://{ip}:{port}/metrics"
    return None


def parse_progress(text: str) -> dict[str, Any]:
    """worker 0's step, loss and rate. A non-finite value is never kept: JSON has no NaN or Inf, and the API
    server refuses a status that carries one (400), which would freeze every later write of the job's status. A
    non-finite loss (a diverging run, the common case) is reported as `lossNonFinite` instead: "NaN", "+Inf" or
    "-Inf"."""
    found: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == api.CAPABILITY_SERIES:
                declared = CAPABILITIES.get(sample.labels.get("name", ""))
                if declared and sample.value == 1:
                    found[declared] = True
                continue
            key = SERIES.get(sample.name)
            if not key or key in found or (key == "loss" and "lossNonFinite" in found):
                continue
            value = float(sample.value)
            if math.isfinite(value):
                found[key] = int(value) if key in INTEGERS else value
            elif key == "loss":
                found["lossNonFinite"] = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return found


class ProgressScraper:
    """Reads worker 0's metrics in the background: a pass asks for a scrape when one is due and gets the latest
    answer at once, so a slow or silent trainer never holds a reconcile worker. Scrapes run on their own small
    thread pool (not asyncio's default one, which the applier's writes use), at most `concurrency` at a time, and
    each answer wakes its job (`on_answer`). Each scrape is bounded as a whole (metrics_fetch.py), so a trickling
    endpoint holds one thread for at most its deadline, and the others go on serving every other job."""

    def __init__(
        self,
        interval_seconds: float = 10.0,
        timeout_seconds: float = DEADLINE_SECONDS,
        concurrency: int = 8,
        on_answer: Callable[[Key], None] | None = None,
    ):
        self.interval = interval_seconds
        self.timeout = timeout_seconds
        self.on_answer = on_answer
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ddpjob-progress")
        self._last_try: dict[Key, float] = {}
        self._last_done: dict[Key, float] = {}  # when a scrape of the job last finished, answered or not
        self._in_flight: set[Key] = set()
        self._latest: dict[Key, tuple[int, dict[str, Any]]] = {}  # attempt, values + updateTime
        self._since: dict[Key, tuple[int, datetime]] = {}  # attempt, when this process began reading it
        self._agents: dict[Key, tuple[int, dict[str, int]]] = {}  # attempt, pod uid -> its agent's restarts
        self._silent: dict[Key, tuple[int, frozenset[str]]] = {}  # attempt, pod uids whose agent did not answer

    def current(self, key: Key) -> bool:
        """Whether this process has been scraping the job lately: a scrape finished within a few intervals (or
        none was due yet). False when the pool is saturated or the operator starved: its silence is its own."""
        if key not in self._last_try:
            return True
        done = self._last_done.get(key, self._last_try[key])
        return time.monotonic() - done <= 3 * self.interval + self.timeout

    def forget(self, key: Key) -> None:
        self._last_try.pop(key, None)
        self._last_done.pop(key, None)
        self._latest.pop(key, None)
        self._since.pop(key, None)
        self._agents.pop(key, None)
        self._silent.pop(key, None)

    def observe(self, key: Key, obs: Observed) -> tuple[dict[str, Any] | None, datetime | None]:
        """(worker 0's latest answer for the current attempt, when this process began reading that attempt);
        starts a scrape in the background when one is due."""
        url = metrics_url(obs)
        agents = agent_urls(obs)
        if url is None and not agents:
            return None, None
        attempt = int((obs.job.get("status") or {}).get("attempt", 0))
        if self._since.get(key, (None,))[0] != attempt:
            self._since[key] = (attempt, obs.now)
        # The planner requeues a Running job every interval; a little slack keeps that wake-up from missing it.
        # While a replica group is replaced (TorchFT), its return to the quorum ends the recovery: read sooner.
        interval = self.interval
        if (obs.job.get("status") or {}).get("replacing"):
            interval = min(interval, REJOIN_SCRAPE_SECONDS)
        due = time.monotonic() - self._last_try.get(key, -1e9) >= 0.9 * interval
        if due and key not in self._in_flight:
            self._last_try[key] = time.monotonic()
            self._in_flight.add(key)
            asyncio.get_running_loop().create_task(
                self._scrape(key, url, agents, attempt), name=f"ddpjob-progress-{key}"
            )
        latest = self._latest.get(key)
        return (latest[1] if latest and latest[0] == attempt else None), self._since[key][1]

    def agent_restarts(self, key: Key, attempt: int) -> dict[str, int]:
        """The agents' in-place restart counts last read for this attempt (pod uid -> count)."""
        found = self._agents.get(key)
        return dict(found[1]) if found and found[0] == attempt else {}

    def agents_silent(self, key: Key, attempt: int) -> frozenset[str]:
        """The pods whose agent did not answer the latest read of this attempt (in_place.take_in holds for them)."""
        found = self._silent.get(key)
        return found[1] if found and found[0] == attempt else frozenset()

    async def _scrape(self, key: Key, url: str | None, agents: dict[str, str], attempt: int) -> None:
        loop = asyncio.get_running_loop()
        values: dict[str, Any] = {}
        try:
            # Fetched and parsed on the scrape pool, never on the event loop: the page is user-supplied text.
            reads = [loop.run_in_executor(self._pool, self._fetch_agent, a) for a in agents.values()]
            if url is not None:
                try:
                    values = await loop.run_in_executor(self._pool, self._fetch, url)
                except (OSError, ValueError) as exc:  # silent: starting, stopped, or a simulated node; no verdict
                    log.debug("no progress from %s: %s", url, exc)
            counts = await asyncio.gather(*reads)
        finally:
            self._in_flight.discard(key)
            self._last_done[key] = time.monotonic()
        seen = {name: n for name, n in zip(agents, counts, strict=True) if n is not None}
        silent = frozenset(name for name, n in zip(agents, counts, strict=True) if n is None)
        news = silent != self.agents_silent(key, attempt)
        self._silent[key] = (attempt, silent)
        if seen:
            before = self.agent_restarts(key, attempt)
            news = news or any(before.get(name) != n for name, n in seen.items())
            self._agents[key] = (attempt, {**before, **seen})
        if values:
            self._latest[key] = (attempt, {**values, "updateTime": format_time(utcnow())})
            news = True
        if news and self.on_answer is not None:
            self.on_answer(key)

    def _fetch(self, url: str) -> dict[str, Any]:
        """One bounded scrape (metrics_fetch.py: total deadline, byte cap, no redirect, no proxy), parsed here."""
        return parse_progress(fetch_metrics(url, self.timeout))

    def _fetch_agent(self, url: str) -> int | None:
        """An agent's count, or None when it does not answer (starting, or an image without the endpoint)."""
        try:
            return parse_agent_restarts(fetch_metrics(url, self.timeout))
        except (OSError, ValueError) as exc:
            log.debug("no agent count from %s: %s", url, exc)
            return None
