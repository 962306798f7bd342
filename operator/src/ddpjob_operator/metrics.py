"""The operator's Prometheus series (the Helm chart's alerts and dashboard use these exact names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from .state.plan import Observation

JOBS_CREATED = Counter("ddpjob_jobs_created_total", "DDPJobs the operator started managing")
JOBS_SUCCEEDED = Counter("ddpjob_jobs_succeeded_total", "DDPJobs that Succeeded")
JOBS_FAILED = Counter("ddpjob_jobs_failed_total", "DDPJobs that Failed")
GROUP_RESTARTS = Counter("ddpjob_group_restarts_total", "Whole-group restarts, by reason", ["reason"])
PODS_CREATED = Counter("ddpjob_pods_created_total", "Worker pods created")
STANDBY_PASSES = Counter(
    "ddpjob_standby_passes_skipped_total", "Reconcile passes a paused standby skipped (leadership.py)"
)
API_WRITES = Counter(
    "ddpjob_api_writes_total",
    "Requests that write (POST, PUT, PATCH, DELETE) the operator sent to the API server, by verb (kopf's own "
    "peering keep-alives are not among them)",
    ["verb"],
)
JOBS = Gauge("ddpjob_jobs", "DDPJobs by phase", ["phase"])
RECONCILE_SECONDS = Histogram(
    "ddpjob_reconcile_duration_seconds",
    "Duration of one reconcile pass",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# Seconds a group takes to run (again): from a fraction of a second in place to half an hour waiting for room.
RECOVERY_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800)
TIME_TO_ALL_RUNNING = Histogram(
    "ddpjob_time_to_all_running_seconds",
    "From job creation to all pods of its first attempt Running",
    buckets=RECOVERY_BUCKETS,
)
RECOVERY_SECONDS = Histogram(
    "ddpjob_recovery_duration_seconds",
    "From a failure (or rescale) seen to all pods of the new attempt Running",
    buckets=RECOVERY_BUCKETS,
)

RECOVERY_BY_HOW = Histogram(
    "ddpjob_recovery_seconds",
    "From a failure seen to the group running again, by how it was handled (recoveries.py)",
    ["how"],
    buckets=RECOVERY_BUCKETS,
)
GPU_SECONDS_LOST = Counter(
    "ddpjob_gpu_seconds_lost",
    "Rank-seconds (a GPU each on a GPU cluster) no rank trained while the group recovered, by how it was handled",
    ["how"],
)
IN_PLACE_RESTARTS = Counter(
    "ddpjob_in_place_restarts", "Trainer restarts torchrun did inside running pods (restartStrategy: InPlace)"
)

RESIZE_SECONDS = Histogram(
    "ddpjob_resize_duration_seconds",
    "From a capacity change seen (an elastic group's resize decided) to all pods at the new size Running",
    ["direction"],
    buckets=RECOVERY_BUCKETS,
)

PODS_STUCK_TERMINATING = Counter(
    "ddpjob_pods_stuck_terminating_total",
    "Pods of earlier attempts found Terminating past their grace where a force-delete is not safe (counted once "
    "per change of the job's report)",
)

PROGRESS_UNKNOWN = Counter(
    "ddpjob_progress_unknown_total",
    "Times a job's worker 0 stopped answering the operator while its kubelet reported it alive (ProgressUnknown "
    "turned True; not counted as a hang)",
)

CACHE_OBJECTS = Gauge("ddpjob_watch_cache_objects", "Objects the watch cache holds, by kind", ["kind"])

PHASES = ("Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended")


def record(observation: Observation) -> None:
    labels = dict(observation.labels)
    match observation.metric:
        case "jobs_created":
            JOBS_CREATED.inc(observation.value)
        case "jobs_succeeded":
            JOBS_SUCCEEDED.inc(observation.value)
        case "jobs_failed":
            JOBS_FAILED.inc(observation.value)
        case "group_restarts":
            GROUP_RESTARTS.labels(reason=labels.get("reason", "Unknown")).inc(observation.value)
        case "pods_created":
            PODS_CREATED.inc(observation.value)
        case "time_to_all_running":
            TIME_TO_ALL_RUNNING.observe(observation.value)
        case "recovery_duration":
            RECOVERY_SECONDS.observe(observation.value)
        case "resize_duration":
            RESIZE_SECONDS.labels(direction=labels.get("direction", "unknown")).observe(observation.value)
        case "recovery_seconds":
            RECOVERY_BY_HOW.labels(how=labels.get("how", "Unknown")).observe(observation.value)
        case "gpu_seconds_lost":
            GPU_SECONDS_LOST.labels(how=labels.get("how", "Unknown")).inc(observation.value)
        case "in_place_restarts":
            IN_PLACE_RESTARTS.inc(observation.value)
        case "progress_unknown":
            PROGRESS_UNKNOWN.inc(observation.value)
        case "pods_stuck_terminating":
            PODS_STUCK_TERMINATING.inc(observation.value)
        case other:
            raise ValueError(f"unknown metric observation {other!r}")


class PhaseGauge:
    """Phase of every job this process has seen; a pass reports it, a deletion forgets it."""

    def __init__(self):
        self._phases: dict[tuple[str, str], str] = {}
        for phase in PHASES:
            JOBS.labels(phase=phase).set(0)

    def set(self, key: tuple[str, str], phase: str | None) -> None:
        """O(1): only the old and the new phase's counts move (every pass calls this)."""
        old = self._phases.pop(key, None) if phase is None else self._phases.get(key)
        if old == phase:
            return
        if phase is not None:
            self._phases[key] = phase
            JOBS.labels(phase=phase).inc()
        if old is not None:
            JOBS.labels(phase=old).dec()


def watch_cache_sizes(indexes: dict[str, Any]) -> None:
    """Report each index's size at scrape time (nothing is counted on the hot path)."""
    for kind, index in indexes.items():
        CACHE_OBJECTS.labels(kind=kind).set_function(_size_of(index))


def _size_of(index: Any) -> Callable[[], float]:
    return lambda: float(sum(len(index[key]) for key in index))


def serve(port: int) -> None:
    start_http_server(port)
