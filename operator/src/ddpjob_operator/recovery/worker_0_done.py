"""InPlace: worker 0's success ends the job (pure).

torchrun's exit barrier lets worker 0's agent end 0 only once every rank of its last round finished, so the
training is done. A pod still running then is one leaving that same barrier, or a replacement that joined the
rendezvous after that round formed: it waits on worker 0's store, which is gone, until torchrun's join timeout
(600 s), holding its node. Neither is a failure of the job (the planner counts none), and the job ends Succeeded once
they ended, or FINISHING_GRACE_SECONDS after worker 0 (cleanPodPolicy then stops them). Recreate, whose pods are one
round made together, and TorchFT, whose groups each finish on their own, wait for every pod."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ..state.plan import Plan
from ..state.spec import IN_PLACE, JobSpec
from ..state.status import JobStatus
from . import failures

# How long the job waits for its other pods to end once worker 0 Succeeded. The pods of worker 0's last round
# passed its exit barrier with it and end in moments.
FINISHING_GRACE_SECONDS = 30.0


def finished_at(spec: JobSpec, current: dict[int, dict[str, Any]], now: datetime) -> datetime | None:
    """When worker 0's trainer ended, once its pod Succeeded under InPlace; None otherwise. A worker 0 without a
    finish time in its record counts as ended the grace before `now`."""
    if spec.run_policy.restart_strategy != IN_PLACE or spec.fault_tolerance.torchft:
        return None
    pod = current.get(0)
    if pod is None or (pod.get("status") or {}).get("phase") != "Succeeded":
        return None
    return failures.finished_at(pod) or now - timedelta(seconds=FINISHING_GRACE_SECONDS)


def success_message(
    now: datetime, spec: JobSpec, status: JobStatus, current: dict[int, dict[str, Any]], plan: Plan
) -> str | None:
    """The Succeeded message when worker 0's success ends the job now; None while it does not (requeued for the
    end of the grace when that is what it waits for)."""
    ended_at = finished_at(spec, current, now)
    if ended_at is None:
        return None
    left = [
        p["metadata"]["name"]
        for i, p in sorted(current.items())
        if i != 0 and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    wait = (ended_at - now).total_seconds() + FINISHING_GRACE_SECONDS
    if left and wait > 0:
        plan.requeue(wait)
        return None
    message = f"worker 0 finished the training of attempt {status['attempt']}"
    if left:
        message += (
            f"; {', '.join(left)} had not ended {FINISHING_GRACE_SECONDS:.0f}s after it "
            "(a replacement that joined after its last round)"
        )
    return message
