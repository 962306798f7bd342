"""What `kubectl ddpj why` says (pure): for a job that is not Running, the one reason in plain words and the
evidence for it, read from the job's status, its pods (the scheduler's PodScheduled message, a container stuck
waiting) and, for a job Kueue holds, its Workload and the others in the same LocalQueue."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .view import cause

STUCK_WAITING = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CrashLoopBackOff",
)


@dataclass
class Answer:
    reason: str  # the one reason, in plain words
    evidence: list[str] = field(default_factory=list)


def explain(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    workload: dict[str, Any] | None = None,
    ahead: list[dict[str, Any]] | None = None,
) -> Answer:
    """`ahead`: the Workloads of the same LocalQueue that hold quota or were queued before this one."""
    status = job.get("status") or {}
    spec = job.get("spec") or {}
    phase, reason = status.get("phase") or "Pending", status.get("reason") or ""
    if phase == "Running":
        return Answer(f"it is Running ({status.get('sizeText', '-')} pods): nothing holds it back")
    if phase == "Succeeded":
        return Answer(f"it Succeeded at {status.get('completionTime', '?')}")
    if phase == "Failed":
        return _failed(status, spec)
    if workload is not None and not _admitted(workload):
        return _queued(status, workload, ahead or [])
    if spec.get("suspend"):
        return Answer("it is suspended (spec.suspend: true): set it to false to run it")
    waiting = _stuck_container(pods)
    if waiting:
        return waiting
    unscheduled = _unscheduled(pods)
    if unscheduled:
        return unscheduled
    if reason == "PlacementTimeout":
        return Answer(
            "its pods were not placed within the placement timeout; it released them and waits to try again",
            [m for m in [_message(status, reason), _when(status.get("nextAttemptTime"))] if m],
        )
    if phase == "Restarting":
        failure = status.get("lastFailure") or {}
        evidence = [f"after {cause(failure)}: {failure.get('message', '')}".strip()] if failure else []
        if status.get("nextAttemptTime"):
            evidence.append(_when(status["nextAttemptTime"]))
        return Answer(f"it is restarting the group (attempt {status.get('attempt', 0)})", evidence)
    message = _message(status, reason)
    return Answer(f"it is {phase}" + (f" ({reason})" if reason else ""), [message] if message else [])


def _failed(status: dict[str, Any], spec: dict[str, Any]) -> Answer:
    failure = status.get("lastFailure") or {}
    reason = status.get("reason") or "Failed"
    evidence = [_message(status, reason)]
    if failure:
        evidence.append(f"last failure: {cause(failure)} ({failure.get('failureClass', '?')} failure)")
        if failure.get("message"):
            evidence.append(failure["message"])
    if reason == "BackoffLimitExceeded":
        limit = (spec.get("runPolicy") or {}).get("backoffLimit")
        return Answer(
            f"its restart budget is spent: {status.get('restarts', 0)} restarts of backoffLimit {limit}", evidence
        )
    return Answer(f"it Failed: {reason}", [e for e in evidence if e])


def has_condition(workload: dict[str, Any], kind: str) -> bool:
    """A Kueue Workload's condition `kind` (Admitted, Finished) is True."""
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (workload.get("status") or {}).get("conditions") or []
    )


def _admitted(workload: dict[str, Any]) -> bool:
    return has_condition(workload, "Admitted")


def _queued(status: dict[str, Any], workload: dict[str, Any], ahead: list[dict[str, Any]]) -> Answer:
    queue = (workload.get("spec") or {}).get("queueName") or status.get("queue") or "?"
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    evidence = []
    quota = conditions.get("QuotaReserved") or {}
    if quota.get("message"):
        evidence.append(f"Kueue: {quota['message']}")
    holding = [w for w in ahead if _admitted(w)]
    waiting = [w for w in ahead if not _admitted(w)]
    evidence.append(f"position {len(waiting) + 1} in LocalQueue {queue}")
    for w in holding:
        evidence.append(f"holding quota: {_workload_name(w)}")
    for w in waiting:
        evidence.append(f"queued before it: {_workload_name(w)}")
    return Answer(f"Kueue has not admitted it: it waits in LocalQueue {queue} for quota", evidence)


def _workload_name(w: dict[str, Any]) -> str:
    owners = w["metadata"].get("ownerReferences") or [{}]
    owner = f" ({owners[0].get('kind')} {owners[0].get('name')})" if owners[0].get("name") else ""
    return f"{w['metadata'].get('namespace')}/{w['metadata']['name']}{owner}"


def _stuck_container(pods: list[dict[str, Any]]) -> Answer | None:
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_WAITING:
                image = cs.get("image", "")
                return Answer(
                    f"pod {pod['metadata']['name']} cannot start its container: {waiting['reason']}",
                    [f"image {image}" if image else "", waiting.get("message", "")],
                )
    return None


def _unscheduled(pods: list[dict[str, Any]]) -> Answer | None:
    for pod in pods:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                message = cond.get("message") or ""
                short = sorted(set(re.findall(r"Insufficient ([\w./-]*\w)", message)))
                what = f"not enough {', '.join(short)} on any node" if short else "no node fits it"
                return Answer(
                    f"the scheduler cannot place pod {pod['metadata']['name']}: {what}",
                    [f"scheduler: {message}", _requests(pod)],
                )
    return None


def _requests(pod: dict[str, Any]) -> str:
    wanted: dict[str, str] = {}
    for c in pod["spec"].get("containers") or []:
        wanted.update((c.get("resources") or {}).get("requests") or {})
    return "each pod requests " + ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())) if wanted else ""


def _message(status: dict[str, Any], reason: str) -> str:
    for cond in status.get("conditions") or []:
        if cond.get("reason") == reason and cond.get("message"):
            return str(cond["message"])
    return ""


def _when(timestamp: str | None) -> str:
    return f"next attempt at {timestamp}" if timestamp else ""
