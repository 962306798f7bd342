"""Command line and environment of the operator process."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from .planner import PlannerSettings


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...]
    metrics_port: int
    liveness_port: int
    priority: int
    peering: str | None
    verbose: bool
    workers: int
    resync_seconds: float
    progress_interval_seconds: float
    planner: PlannerSettings
    gang_scheduling: str = "auto"  # auto: use PodGroups where the cluster serves them; off: never
    gang: bool = False  # resolved at start (__main__.py): PodGroups are used
    kueue_mode: str = "auto"  # auto: admission by Kueue where the cluster serves its Workloads; off: never
    kueue: bool = False  # resolved at start (__main__.py): jobs with a queue-name label wait for Kueue
    status_writes_per_second: float = 20.0  # status_writes.WriteBudget
    identity: str = ""  # this operator's peer identity, the same for kopf and leadership.py (set at start)

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def parse_args(argv: list[str] | None = None) -> OperatorConfig:
    p = argparse.ArgumentParser(prog="ddpjob-operator", description="Runs PyTorch DDP training jobs (DDPJob).")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace (repeatable; globs such as team-* allowed); default: all namespaces",
    )
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (default)")
    p.add_argument("--metrics-port", type=int, default=8080, help="port of /metrics (0 disables it)")
    p.add_argument("--liveness-port", type=int, default=8081, help="port of kopf's /healthz (0 disables it)")
    p.add_argument("--priority", type=int, default=0, help="peering priority for HA (highest one is active)")
    p.add_argument("--peering", default=None, help="peering name for HA; without it the operator runs standalone")
    p.add_argument("--verbose", "-v", action="store_true", help="debug logs")
    p.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("DDPJOB_WORKERS", 4)),
        help="jobs reconciled concurrently [DDPJOB_WORKERS]",
    )
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=_env_float("DDPJOB_RESYNC_SECONDS", 30),
        help="safety-net period: every job is reconciled at least this often [DDPJOB_RESYNC_SECONDS]",
    )
    p.add_argument(
        "--progress-interval-seconds",
        type=float,
        default=_env_float("DDPJOB_PROGRESS_INTERVAL_SECONDS", 10),
        help="how often worker 0's metrics are read per job [DDPJOB_PROGRESS_INTERVAL_SECONDS]",
    )
    p.add_argument(
        "--progress-write-max-seconds",
        type=float,
        default=_env_float("DDPJOB_PROGRESS_WRITE_MAX_SECONDS", 60),
        help="a Running job's progress-only status writes back off to at most one per this many seconds "
        "[DDPJOB_PROGRESS_WRITE_MAX_SECONDS]",
    )
    p.add_argument(
        "--status-writes-per-second",
        type=float,
        default=_env_float("DDPJOB_STATUS_WRITES_PER_SECOND", 20),
        help="cluster-wide budget of status writes: progress-only writes wait for it, transitions never "
        "(0: no cap) [DDPJOB_STATUS_WRITES_PER_SECOND]",
    )
    p.add_argument(
        "--node-lost-grace-seconds",
        type=float,
        default=_env_float("DDPJOB_NODE_LOST_GRACE_SECONDS", 30),
        help="a pod whose node is NotReady this long has failed [DDPJOB_NODE_LOST_GRACE_SECONDS]",
    )
    p.add_argument(
        "--terminating-grace-seconds",
        type=float,
        default=_env_float("DDPJOB_TERMINATING_GRACE_SECONDS", 60),
        help="report an old pod still Terminating this long past its deadline on a Ready node as stuck (it is never "
        "force-deleted there) [DDPJOB_TERMINATING_GRACE_SECONDS]",
    )
    p.add_argument(
        "--unreachable-force-delete-seconds",
        type=float,
        default=_env_float("DDPJOB_UNREACHABLE_FORCE_DELETE_SECONDS", 300),
        help="force-delete an old pod whose node has been NotReady this long; at once if the node is tainted "
        "node.kubernetes.io/out-of-service or gone [DDPJOB_UNREACHABLE_FORCE_DELETE_SECONDS]",
    )
    p.add_argument(
        "--launch-settle-seconds",
        type=float,
        default=_env_float("DDPJOB_LAUNCH_SETTLE_SECONDS", 5),
        help="after creating pods, wait this long for them to run before writing a Pending status "
        "[DDPJOB_LAUNCH_SETTLE_SECONDS]",
    )
    p.add_argument(
        "--gang-scheduling",
        choices=("auto", "off"),
        default=os.environ.get("DDPJOB_GANG_SCHEDULING", "auto"),
        help="all-or-nothing placement with scheduling.k8s.io/v1alpha2 PodGroups: auto uses them where the API "
        "server serves them, off places pods one by one [DDPJOB_GANG_SCHEDULING]",
    )
    p.add_argument(
        "--kueue",
        choices=("auto", "off"),
        default=os.environ.get("DDPJOB_KUEUE", "auto"),
        help="admission by Kueue for jobs labelled kueue.x-k8s.io/queue-name: auto where the API server serves "
        "kueue.x-k8s.io/v1beta2 Workloads, off never (the label is then ignored) [DDPJOB_KUEUE]",
    )
    a = p.parse_args(argv)
    if a.workers < 1:
        p.error("--workers must be at least 1")
    if a.resync_seconds <= 0:
        p.error("--resync-seconds must be positive")
    return OperatorConfig(
        namespaces=tuple(dict.fromkeys(a.namespace)),
        metrics_port=a.metrics_port,
        liveness_port=a.liveness_port,
        priority=a.priority,
        peering=a.peering,
        verbose=a.verbose,
        workers=a.workers,
        resync_seconds=a.resync_seconds,
        progress_interval_seconds=a.progress_interval_seconds,
        gang_scheduling=a.gang_scheduling,
        kueue_mode=a.kueue,
        planner=PlannerSettings(
            node_lost_grace_seconds=a.node_lost_grace_seconds,
            terminating_grace_seconds=a.terminating_grace_seconds,
            unreachable_force_delete_seconds=a.unreachable_force_delete_seconds,
            launch_settle_seconds=a.launch_settle_seconds,
            progress_interval_seconds=a.progress_interval_seconds,
            progress_write_max_seconds=a.progress_write_max_seconds,
        ),
        status_writes_per_second=a.status_writes_per_second,
    )
