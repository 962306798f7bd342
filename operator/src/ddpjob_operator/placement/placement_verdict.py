"""What the scheduler says about the current attempt, and how the job says it (pure): the gang's condition or a
pending pod's PodScheduled=False, shown as the PodsPlaced condition, REASON and one event per change."""

from __future__ import annotations

import re
from typing import Any

from ..state import conditions as c
from ..state.plan import Observed, Plan
from ..state.status import JobStatus
from . import gang, resize_policy

PLACED = "PodsPlaced"  # condition: False with the scheduler's reason while the attempt waits to be placed


def _shape(message: str) -> str:
    """The scheduler's message without its counts ("0/60 nodes are available: 3 Insufficient nvidia.com/gpu"):
    on a busy cluster the counts change all the time, and each change would be an event and a status write."""
    return re.sub(r"\d+", "#", message)


def unschedulable(obs: Observed, status: JobStatus, current: list[dict[str, Any]]) -> gang.Verdict | None:
    """The scheduler's word that the current attempt cannot be placed: its gang's condition, or (placed pod by
    pod, or while the gang has no condition) a pending pod's PodScheduled=False."""
    pod_verdict = None
    for pod in current:
        if (pod.get("spec") or {}).get("nodeName"):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and pod_verdict is None:
                pod_verdict = gang.Verdict(False, cond.get("reason") or "Unschedulable", cond.get("message") or "")
    name = gang.podgroup_name(obs.job["metadata"]["name"], status["attempt"])
    group = next((g for g in obs.podgroups if g["metadata"]["name"] == name), None)
    if group is None:
        return pod_verdict
    verdict = gang.verdict(group)
    if verdict.scheduled is None:
        # No word from the gang: not yet (the scheduler writes the pods' conditions first), or never (a scheduler
        # that ignores PodGroups: gang_discovery.py). The pods' own verdict is the scheduler's word meanwhile.
        return pod_verdict
    if verdict.scheduled:
        return None
    # The gang's own message is generic ("pod group is unschedulable"); a member pod's says what is short.
    detail = pod_verdict.message if pod_verdict is not None and "pod group" not in pod_verdict.message else ""
    return gang.Verdict(False, verdict.reason, "; ".join(m for m in (verdict.message, detail) if m))


def show(obs: Observed, status: JobStatus, current: list[dict[str, Any]], plan: Plan) -> None:
    """Say why a pending attempt is not placed, in the scheduler's words, once per change."""
    conditions = status.get("conditions") or []
    # A recreated group waits to be placed as Restarting, a first one as Pending.
    waiting = status.get("phase") == c.PENDING or (
        status.get("phase") == c.RESTARTING and status.get("launchedAttempt") == status["attempt"]
    )
    verdict = unschedulable(obs, status, current) if waiting else None
    resize_policy.note_unplaced(status, verdict is not None, obs.now)
    if verdict is not None:
        what = "its gang of" if status.get("placement") == gang.GANG else "some of its"
        message = f"attempt {status['attempt']}: {what} {status['replicas']} pods cannot be placed"
        message += f": {verdict.message}" if verdict.message else ""
        shown = c.find_condition(conditions, PLACED)
        if (
            shown is not None
            and (shown.get("status"), shown.get("reason")) == ("False", verdict.reason)
            and _shape(str(shown.get("message") or "")) == _shape(message)
        ):
            message = str(shown.get("message"))  # only its counts moved: no news, no write, no event
        elif shown is None or shown.get("status") != "False" or shown.get("message") != message:
            plan.event("Warning", verdict.reason or "Unschedulable", message)
        status["conditions"] = c.set_condition(conditions, PLACED, "False", verdict.reason, message, obs.now)
        status["reason"] = verdict.reason or "Unschedulable"
    elif current and all((p.get("spec") or {}).get("nodeName") for p in current):
        status.pop("placementTimeouts", None)  # placed whole: the streak of placement timeouts is over
        message = f"all {status['replicas']} pods of attempt {status['attempt']} are placed"
        status["conditions"] = c.clear_condition(conditions, PLACED, "Placed", message, obs.now)
        if c.find_condition(status["conditions"], PLACED) is not None:
            status["conditions"] = c.set_condition(status["conditions"], PLACED, "True", "Placed", message, obs.now)
