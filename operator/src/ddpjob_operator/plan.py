"""What one reconcile pass decided to do. The planner fills it; the applier carries it out in a fixed order:
deletions and finalizer releases, Service, pod creations, the status write (once, with a resourceVersion
precondition), then events and metric observations, which only go out once that write succeeded."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


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
    network_policy_exists: bool = True  # only read when spec.networkPolicy asks for one


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
    create_service: dict[str, Any] | None = None
    create_network_policy: dict[str, Any] | None = None
    create_pods: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] | None = None  # None: nothing changed, write nothing
    # The pass that creates pods writes no status: the pass that sees them (usually Running) writes it once, so
    # a job reaches Running in pods + 3 writes. The status is kept here for a rejected pod's verdict.
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
