"""Training progress read from worker 0's `metrics` port (ddp_trainer_* series) into status.progress."""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from . import api
from .plan import Observed
from .spec import trainer_container
from .timefmt import format_time

log = logging.getLogger("ddpjob.progress")

SERIES = {"ddp_trainer_step": "step", "ddp_trainer_loss": "loss", "ddp_trainer_samples_per_second": "samplesPerSecond"}


def metrics_url(obs: Observed) -> str | None:
    """worker 0's metrics endpoint while the job is Running and its template declares a `metrics` port."""
    if (obs.job.get("status") or {}).get("phase") != "Running":
        return None
    attempt = str((obs.job.get("status") or {}).get("attempt", 0))
    worker0 = api.worker_name(obs.job["metadata"]["name"], 0)
    for pod in obs.pods:
        labels = pod["metadata"].get("labels", {})
        if pod["metadata"]["name"] != worker0 or labels.get(api.LABEL_ATTEMPT) != attempt:
            continue
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
    found: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = SERIES.get(sample.name)
            if key and key not in found:
                found[key] = int(sample.value) if key == "step" else float(sample.value)
    return found


class ProgressScraper:
    def __init__(self, interval_seconds: float = 10.0, timeout_seconds: float = 1.0):
        self.interval = interval_seconds
        self.timeout = timeout_seconds
        self._last: dict[tuple[str, str], float] = {}

    def forget(self, key: tuple[str, str]) -> None:
        self._last.pop(key, None)

    async def scrape_if_due(self, key: tuple[str, str], obs: Observed) -> dict[str, Any] | None:
        url = metrics_url(obs)
        # The planner requeues a Running job every interval; a little slack keeps that wake-up from missing it.
        if url is None or time.monotonic() - self._last.get(key, -1e9) < 0.9 * self.interval:
            return None
        self._last[key] = time.monotonic()
        try:
            text = await asyncio.to_thread(self._fetch, url)
        except (OSError, ValueError) as exc:  # an unreachable trainer is normal (starting, simulated node)
            log.debug("no progress from %s: %s", url, exc)
            return None
        try:
            values = parse_progress(text)
        except ValueError:
            return None
        if not values:
            return None
        return {**values, "updateTime": format_time(obs.now)}

    def _fetch(self, url: str) -> str:
        with urllib.request.urlopen(url, timeout=self.timeout) as response:  # noqa: S310 (pod IP, http only)
            return response.read(1 << 20).decode("utf-8", "replace")
