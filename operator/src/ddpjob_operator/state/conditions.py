"""Phases and Kubernetes-style conditions. A phase change sets its condition True and clears the ones it
excludes; lastTransitionTime moves only when a condition's status changes."""

from __future__ import annotations

import copy
from datetime import datetime

from ..timefmt import format_time
from .status import Condition, ConditionStatus, JobStatus

PENDING = "Pending"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"

TERMINAL = (SUCCEEDED, FAILED)
CREATED = "Created"

# For each phase: the condition it sets True (None: none), and the conditions it turns False if present.
_PHASE_CONDITIONS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    PENDING: (None, (RUNNING, SUSPENDED)),
    RUNNING: (RUNNING, (RESTARTING, SUSPENDED)),
    RESTARTING: (RESTARTING, (RUNNING,)),
    SUSPENDED: (SUSPENDED, (RUNNING, RESTARTING)),
    SUCCEEDED: (SUCCEEDED, (RUNNING, RESTARTING)),
    FAILED: (FAILED, (RUNNING, RESTARTING)),
}


def find_condition(conditions: list[Condition], ctype: str) -> Condition | None:
    return next((c for c in conditions if c.get("type") == ctype), None)


def set_condition(
    conditions: list[Condition], ctype: str, status: ConditionStatus, reason: str, message: str, now: datetime
) -> list[Condition]:
    out = copy.deepcopy(conditions)
    current = find_condition(out, ctype)
    if current is None:
        out.append(
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": format_time(now),
            }
        )
        return out
    if current.get("status") != status:
        current["lastTransitionTime"] = format_time(now)
    current.update({"status": status, "reason": reason, "message": message})
    return out


def clear_condition(
    conditions: list[Condition], ctype: str, reason: str, message: str, now: datetime
) -> list[Condition]:
    """Turn a condition False, but only if it exists: absent conditions stay absent (less noise)."""
    if find_condition(conditions, ctype) is None:
        return copy.deepcopy(conditions)
    return set_condition(conditions, ctype, "False", reason, message, now)


def is_terminal(phase: str | None) -> bool:
    return phase in TERMINAL


def enter_phase(status: JobStatus, phase: str, reason: str, message: str, now: datetime) -> JobStatus:
    """A copy of status in `phase`. Terminal phases are final: leaving one is refused (status returned as is)."""
    out = copy.deepcopy(status)
    if is_terminal(out.get("phase")) and phase != out.get("phase"):
        return out
    if phase not in _PHASE_CONDITIONS:
        raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(_PHASE_CONDITIONS)}")
    conditions = out.get("conditions") or []
    true_type, cleared = _PHASE_CONDITIONS[phase]
    for ctype in cleared:
        conditions = clear_condition(conditions, ctype, reason, message, now)
    if true_type is not None:
        conditions = set_condition(conditions, true_type, "True", reason, message, now)
    out["conditions"] = conditions
    out["phase"] = phase
    out["reason"] = reason  # kubectl's Reason column: why the job is in its phase
    return out
