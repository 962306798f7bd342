"""DDPJob spec as typed, defaulted values. The API server already applies the CRD's defaults; parsing them again
here keeps the planner correct for objects written before a default existed and for unit tests' raw dicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import api

RESTART_POLICIES = ("OnFailure", "ExitCode", "Never")
RECREATE, IN_PLACE = "Recreate", "InPlace"  # runPolicy.restartStrategy (in_place.py)
NO_FAULT_TOLERANCE, TORCHFT = "None", "TorchFT"  # faultTolerance.mode (replica_groups.py)
CLEAN_POD_POLICIES = ("All", "Running", "None")
# 512 MiB per rank at 8 ranks a pod. A memory-backed emptyDir is charged to the pod's memory only as it fills.
DEFAULT_SHM_SIZE = "4Gi"
# The kubelet's SIGTERM-to-SIGKILL window when the template sets none: long enough for torchrun to pass SIGTERM
# on, the ranks to agree at the next step and rank 0 to write a full checkpoint of a model of a few GiB to a
# network volume. The kubelet's own default of 30 s rarely is.
DEFAULT_GRACE_SECONDS = 120


@dataclass(frozen=True)
class Elastic:
    min_replicas: int
    max_replicas: int
    max_restarts: int = 0
    resize_cooldown_seconds: int = 300  # resize_policy.py: a size that did not place is not tried again this long
    unschedulable_grace_seconds: int = 30  # ...and a gang must be Unschedulable this long before it shrinks


@dataclass(frozen=True)
class RunPolicy:
    backoff_limit: int = 3
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    clean_pod_policy: str = "Running"
    suspend: bool = False
    restart_backoff_seconds: int = 5
    progress_deadline_seconds: int | None = None
    platform_failure_limit: int = 20  # failure_class.py: the platform's failures have their own budget
    healthy_reset_seconds: int = 3600  # both budgets start over after the job ran this long with no failure (0: never)
    placement_timeout_seconds: int = 120  # placement_timeout.py: placed pod by pod, not all placed this long
    restart_strategy: str = RECREATE  # in_place.py


@dataclass(frozen=True)
class Rendezvous:
    port: int = 29400
    join_timeout_seconds: int = 600
    last_call_timeout_seconds: int | None = None  # None: rendezvous.last_call_seconds picks by restartStrategy


@dataclass(frozen=True)
class FaultTolerance:
    """spec.faultTolerance: TorchFT makes each pod a torchft replica group, kept in step by the job's Lighthouse
    (replica_groups.py). The defaults are the measured trade-off (docs/fault-tolerance.md): a dead group costs the
    survivors about heartbeat + quorum tick of stall; shorter heartbeats evict healthy groups under load."""

    mode: str = NO_FAULT_TOLERANCE
    lighthouse_port: int = 29510
    heartbeat_timeout_ms: int = 1000
    quorum_tick_ms: int = 100
    join_timeout_ms: int = 1000
    lighthouse_log_level: str = "warn"  # RUST_LOG of the Lighthouse (replica_groups.build_lighthouse_pod)
    # The Manager's own deadlines (torchft's TORCHFT_*_SEC): a collective or quorum that outlasts them fails the step,
    # and the group drops out and heals, instead of holding its peers.
    timeout_seconds: int = 60
    quorum_timeout_seconds: int = 900
    # Where the Lighthouse runs, instead of the workers' template's (a CPU pool, apart from the GPU nodes whose loss
    # it would otherwise share). None: the template's.
    lighthouse_node_selector: dict[str, str] | None = None
    lighthouse_tolerations: list[dict[str, Any]] | None = None
    # The Lighthouse container's requests and limits; None: replica_groups.LIGHTHOUSE_RESOURCES.
    lighthouse_resources: dict[str, Any] | None = None

    @property
    def torchft(self) -> bool:
        return self.mode == TORCHFT


@dataclass(frozen=True)
class JobSpec:
    replicas: int = 1
    nproc_per_node: int | str = "auto"
    gpus_per_replica: int | None = None
    elastic: Elastic | None = None
    restart_policy: str = "OnFailure"
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    template: dict[str, Any] = field(default_factory=dict)
    network_policy: bool = False
    shm_size: str = DEFAULT_SHM_SIZE  # "0" adds no /dev/shm volume
    fault_tolerance: FaultTolerance = field(default_factory=FaultTolerance)

    @property
    def grace_seconds(self) -> int:
        """The pod's terminationGracePeriodSeconds: the template's own, else DEFAULT_GRACE_SECONDS."""
        own = (self.template.get("spec") or {}).get("terminationGracePeriodSeconds")
        return int(own) if own is not None else DEFAULT_GRACE_SECONDS

    @property
    def gpus_per_pod(self) -> int:
        """GPUs of one worker pod: gpusPerReplica, else the trainer container's nvidia.com/gpu limit."""
        if self.gpus_per_replica is not None:
            return self.gpus_per_replica
        container = trainer_container(self.template.get("spec", {}).get("containers", []))
        limit = ((container or {}).get("resources") or {}).get("limits", {}).get(api.GPU_RESOURCE, 0)
        try:
            return int(limit)
        except (TypeError, ValueError):
            return 0

    @property
    def procs_per_pod(self) -> int:
        if self.nproc_per_node == "auto":
            return self.gpus_per_pod or 1
        return int(self.nproc_per_node)


def trainer_container(containers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The container that receives torchrun's environment: the one named `trainer`, else the first."""
    for container in containers:
        if container.get("name") == api.TRAINER_CONTAINER:
            return container
    return containers[0] if containers else None


def parse_spec(raw: dict[str, Any]) -> JobSpec:
    elastic = raw.get("elastic")
    run = raw.get("runPolicy") or {}
    rdzv = raw.get("rendezvous") or {}
    ft = raw.get("faultTolerance") or {}
    lighthouse = ft.get("lighthouse") or {}
    nproc = raw.get("nprocPerNode", "auto")
    if isinstance(nproc, str) and nproc != "auto":
        nproc = int(nproc) if nproc.isdigit() else "auto"
    return JobSpec(
        replicas=int(raw.get("replicas", 1)),
        nproc_per_node=nproc,
        gpus_per_replica=raw.get("gpusPerReplica"),
        elastic=Elastic(
            min_replicas=int(elastic["minReplicas"]),
            max_replicas=int(elastic["maxReplicas"]),
            max_restarts=int(elastic.get("maxRestarts", 0)),
            resize_cooldown_seconds=int(elastic.get("resizeCooldownSeconds", 300)),
            unschedulable_grace_seconds=int(elastic.get("unschedulableGraceSeconds", 30)),
        )
        if elastic
        else None,
        restart_policy=raw.get("restartPolicy", "OnFailure"),
        run_policy=RunPolicy(
            backoff_limit=int(run.get("backoffLimit", 3)),
            active_deadline_seconds=run.get("activeDeadlineSeconds"),
            ttl_seconds_after_finished=run.get("ttlSecondsAfterFinished"),
            clean_pod_policy=run.get("cleanPodPolicy", "Running"),
            suspend=bool(run.get("suspend", False)),
            restart_backoff_seconds=int(run.get("restartBackoffSeconds", 5)),
            progress_deadline_seconds=run.get("progressDeadlineSeconds"),
            platform_failure_limit=int(run.get("platformFailureLimit", 20)),
            healthy_reset_seconds=int(run.get("healthyResetSeconds", 3600)),
            placement_timeout_seconds=int(run.get("placementTimeoutSeconds", 120)),
            restart_strategy=str(run.get("restartStrategy", RECREATE)),
        ),
        rendezvous=Rendezvous(
            port=int(rdzv.get("port", 29400)),
            join_timeout_seconds=int(rdzv.get("joinTimeoutSeconds", 600)),
            last_call_timeout_seconds=(
                int(rdzv["lastCallTimeoutSeconds"]) if rdzv.get("lastCallTimeoutSeconds") is not None else None
            ),
        ),
        template=raw.get("template") or {},
        network_policy=bool(raw.get("networkPolicy", False)),
        shm_size=str(raw.get("shmSize", DEFAULT_SHM_SIZE)),
        fault_tolerance=FaultTolerance(
            mode=str(ft.get("mode", NO_FAULT_TOLERANCE)),
            lighthouse_port=int(lighthouse.get("port", 29510)),
            heartbeat_timeout_ms=int(lighthouse.get("heartbeatTimeoutMilliseconds", 1000)),
            quorum_tick_ms=int(lighthouse.get("quorumTickMilliseconds", 100)),
            join_timeout_ms=int(lighthouse.get("joinTimeoutMilliseconds", 1000)),
            lighthouse_log_level=str(lighthouse.get("logLevel", "warn")),
            timeout_seconds=int(ft.get("timeoutSeconds", 60)),
            quorum_timeout_seconds=int(ft.get("quorumTimeoutSeconds", 900)),
            lighthouse_node_selector=lighthouse.get("nodeSelector"),
            lighthouse_tolerations=lighthouse.get("tolerations"),
            lighthouse_resources=lighthouse.get("resources") or None,
        ),
    )
