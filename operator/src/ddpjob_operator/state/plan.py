"""What one reconcile pass decided to do. The planner fills it; the applier carries it out in a fixed order:
deletions and finalizer releases, Service, pod creations, the status write (once, with a resourceVersion
precondition), then events and metric observations, which only go out once that write succeeded."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .status import JobStatus


# What admission by Kueue reads and writes (admission/kueue.py decides; the watch cache and the applier do the I/O).
@dataclass(frozen=True)
class View:
    """What the watch cache knows that admission needs: the job's Workloads, the ResourceFlavors (name -> spec)
    and the value of each PriorityClass."""

    workloads: list[dict[str, Any]] = field(default_factory=list)
    flavors: dict[str, dict[str, Any]] = field(default_factory=dict)
    priorities: dict[str, int] = field(default_factory=dict)
    default_priority_class: str | None = None  # the cluster's globalDefault PriorityClass, if any


@dataclass(frozen=True)
class WorkloadWrite:
    """A status update of the job's Workload, with the resourceVersion it was computed from."""

    name: str
    resource_version: str
    status: dict[str, Any]


@dataclass(frozen=True)
class ActiveWrite:
    """Set a Workload's spec.active, from the resourceVersion it was decided on (a precondition: a Workload that
    changed meanwhile is decided again). Deactivating marks it admission/kueue.py's DEACTIVATED_BY (the operator's
    own), and only a Workload so marked is ever activated again."""

    name: str
    active: bool
    resource_version: str


@dataclass(frozen=True)
class PodRefusal:
    """The API server refused to create one of the job's pods (for a reason other than AlreadyExists). The applier
    reports it; the next pass's planner decides what it means (pod_rejection.py)."""

    pod: str
    code: int  # HTTP status
    message: str
    attempt: int  # of the refused pod
    generation: int  # of the spec the pod was built from
    at: datetime


@dataclass(frozen=True)
class ServiceConflict:
    """A Service of the job's name exists and the job does not control it (the applier's 409, read back)."""

    message: str
    at: datetime


@dataclass(frozen=True)
class Observed:
    """One job's world as the watch cache shows it."""

    job: dict[str, Any]
    pods: list[dict[str, Any]]
    nodes: dict[str, dict[str, Any]]
    service_exists: bool
    now: datetime
    progress: dict[str, Any] | None = None  # worker 0's latest answer (step, loss, ..., updateTime)
    progress_since: datetime | None = None  # when this operator process began reading worker 0 of this attempt
    scrapes_current: bool = True  # this process has been scraping worker 0 lately (False: it is overloaded)
    # restartStrategy InPlace: each pod's torchrun agent's in-place restart count, as last read
    # from its endpoint, by pod uid (progress.agent_urls); pods not read yet are absent.
    agent_restarts: dict[str, int] = field(default_factory=dict)
    # ...and the uids of the attempt's running pods whose agent did not answer the latest read (its node rebooting
    # or gone, say): an increase of the others' may be that pod's loss, not yet shown by the API (in_place.py).
    agents_silent: frozenset[str] = frozenset()
    network_policy_exists: bool = True  # only read when spec.networkPolicy asks for one
    gang: bool = False  # the cluster serves PodGroups and the operator uses them (gang.py)
    # The scheduler showed it does not gang-schedule (gang_discovery.py): why, in a sentence; "" otherwise.
    gang_not_enforced: str = ""
    podgroups: list[dict[str, Any]] = field(default_factory=list)  # the job's PodGroups, every attempt
    foreign_podgroups: list[str] = field(default_factory=list)  # names of PodGroups under its label it does not own
    # Pods of this job's shape the cluster can place now, counting the room of its own pods (capacity.py); None
    # for a rigid job, whose size never depends on it.
    capacity: int | None = None
    refusal: PodRefusal | None = None  # the latest refused pod creation of this job, if any (pod_rejection.py)
    # Pods under this job's label that it does not control: an earlier job's of the same name (deleted and
    # re-created), or someone else's. Never counted; their tracking finalizers are freed (ownership.py).
    foreign_pods: list[dict[str, Any]] = field(default_factory=list)
    # Another object holds the name of this job's Service (ownership.py); the time the applier found it.
    service_conflict: ServiceConflict | None = None
    network_policy_conflict: ServiceConflict | None = None  # the same for the job's NetworkPolicy
    # Kueue governs this job (it has a queue-name label and the cluster serves Workloads): its Workloads, the
    # ResourceFlavors and PriorityClasses (kueue.py). None: it does not.
    kueue: View | None = None
    # It is this elastic job's turn at freed room (room_wakeups.py): it may decide to grow now.
    may_grow: bool = True
    # faultTolerance TorchFT: the job's Lighthouse pods, told apart from its workers (`pods`) as the cache reads them
    # (replica_groups.py); their nodes are in `nodes` too.
    lighthouses: list[dict[str, Any]] = field(default_factory=list)
    # The pass read the job and its namespace from the API server, and neither is being deleted: a pod of the job
    # deleted by someone else is then a failure at once, with no settle wait (failures.deletion_to_settle says when
    # the reconciler reads them).
    owners_live: bool = False


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    """A metric update that must happen at most once per transition, hence only after the status write."""

    metric: str
    value: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()


@dataclass
class Plan:
    delete_pods: list[str] = field(default_factory=list)
    force_delete_pods: list[str] = field(default_factory=list)
    release_pods: list[str] = field(default_factory=list)  # drop the tracking finalizer
    release_foreign_pods: list[str] = field(default_factory=list)  # the same for foreign pods, by uid
    create_service: dict[str, Any] | None = None
    create_network_policy: dict[str, Any] | None = None
    create_podgroup: dict[str, Any] | None = None  # the current attempt's gang, created before its pods
    delete_podgroups: list[str] = field(default_factory=list)  # gangs of earlier attempts
    grow_blocked: bool = False  # room to grow into, seen outside the job's turn (room_wakeups.py)
    create_workload: dict[str, Any] | None = None  # Kueue's Workload for the job (kueue.py)
    delete_workloads: list[str] = field(default_factory=list)  # Workloads of an earlier shape
    workload_write: WorkloadWrite | None = None  # a status update of the job's Workload
    workload_active: ActiveWrite | None = None  # a Workload's spec.active: off while the job is suspended
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    status: JobStatus | None = None  # None: nothing changed, write nothing
    # The pass that creates pods writes no status: the pass that sees them (usually Running) writes it once, so
    # a job reaches Running in pods + 3 writes.
    defer_status: bool = False
    events: list[Event] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    delete_job: bool = False
    requeue_after: float | None = None

    def requeue(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def observe(self, metric: str, value: float = 1.0, **labels: str) -> None:
        self.observations.append(Observation(metric, value, tuple(sorted(labels.items()))))
