"""The DDPJob status as a type, as spec.py types the spec. The status is JSON the operator reads back from the
watch cache and writes whole with the status subresource, so its type is a TypedDict: the planner still builds
plain dicts, and mypy checks every key and value it touches. tests/unit/test_status_type.py holds these fields
equal to the CRD's status schema, field by field and type by type."""

from __future__ import annotations

from typing import Any, Literal, TypedDict, cast

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(TypedDict):
    type: str
    status: ConditionStatus
    reason: str
    message: str
    lastTransitionTime: str  # RFC 3339


class LastFailure(TypedDict, total=False):
    pod: str
    kind: str  # failures.py: ExitCode, Signal, Evicted, Deleted, NodeLost, NoProgress, Unknown
    failureClass: str  # failure_class.py: Trainer or Platform
    exitCode: int
    reason: str
    message: str
    time: str


class Progress(TypedDict, total=False):
    step: int
    loss: float
    lossNonFinite: str  # "NaN", "+Inf" or "-Inf": worker 0's loss, which JSON cannot carry (progress.py)
    samplesPerSecond: float
    updateTime: str
    advanceTime: str
    attempt: int
    inPlaceRestarts: int
    checkpointStep: int
    checkpointSeconds: float  # worker 0's newest checkpoint save, from its start to its files in place
    totalSteps: int  # progress_eta.py: the step the run ends at...
    percent: int  # ...how much of it is done...
    etaSeconds: int  # ...how long the rest takes at the recent step rate...
    text: str  # ...and both in words, for the PROGRESS column ("45% ETA 3m20s")
    replicaGroups: int  # TorchFT: the replica groups in worker 0's last quorum (replica_groups.py)
    lighthouseReconnect: bool  # TorchFT: the trainer declares it follows a new Lighthouse (replica_groups.py)


class InPlace(TypedDict, total=False):
    attempt: int
    restarts: int
    joinUntil: str  # in_place.JOIN_WINDOW: until when one reported restart is a replacement's join
    pods: dict[str, int]  # in_place.agent_record: each pod's agent's count last read (pod uid -> count)...
    agentTotal: int  # ...and the group restarts the agents showed in the attempt
    offsets: dict[str, int]  # ...a replacement's agent's start: the group's total when it was first read
    heldSince: str  # in_place.take_in: when an increase was first held (an agent silent: maybe a peer's loss)


class Recovery(TypedDict, total=False):
    id: int  # one more than the newest entry's
    time: str
    how: str  # recoveries.py: InPlace, GroupRecreated
    attempt: int
    pod: str
    kind: str
    reason: str
    exitCode: int
    message: str
    step: int
    stepsLost: int
    ranks: int  # while open
    recoverySeconds: float
    gpuSecondsLost: float
    endedWithJob: bool  # recoveries.end_with_job: closed by the job's end, not by the group running again


class JobStatus(TypedDict, total=False):
    phase: str  # conditions.py: Pending, Running, Restarting, Succeeded, Failed, Suspended
    reason: str
    conditions: list[Condition]
    replicas: int
    desiredReplicas: int
    sizeText: str
    placement: str  # gang.py: Gang, PodByPod, OwnScheduler
    queue: str  # kueue.py: the LocalQueue of a job that Kueue admits
    readyReplicas: int
    readyText: str
    selector: str
    worldSize: int
    restarts: int
    inPlace: InPlace  # in_place.py: in-place restarts counted in an attempt
    replacing: dict[str, str]  # replace_pod.py: replica index -> uid of the lost pod being replaced alone
    retiredUids: list[str]  # replace_pod.py: replaced pods that still exist, excluded until they are gone
    recoveries: list[Recovery]  # recoveries.py
    platformRestarts: int
    attempt: int
    launchedAttempt: int
    nextAttemptTime: str
    restartingSince: str
    startTime: str
    completionTime: str
    observedGeneration: int
    lastFailure: LastFailure
    unplaceableSize: int  # resize_policy.py: a size whose gang did not place...
    unplaceableUntil: str  # ...and until when the job does not grow back to it
    unplacedSince: str  # when the current attempt was first seen unplaced...
    unplacedAttempt: int  # ...and which attempt that clock belongs to
    placementTimeouts: int  # placement_timeout.py: attempts released in a row for not being placed in time
    progress: Progress


def status_of(job: dict[str, Any]) -> JobStatus:
    """The job's status as last written, typed (the API server validated it against the same schema). It is the
    cached object itself, not a copy: copy it before changing it."""
    return cast(JobStatus, job.get("status") or {})
