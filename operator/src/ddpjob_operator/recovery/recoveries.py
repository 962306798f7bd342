"""status.recoveries: the job's last recoveries, kept in status (events expire), each closed when the group runs
again (pure).

An entry records when and what failed (pod, exit code or reason, failure class), how it was handled, how long it
took and what it cost: the steps done since the last checkpoint (lost, done again) and the rank-seconds no rank
trained (`gpuSecondsLost`: on a GPU cluster one rank is one GPU). Only the recovery itself is counted there, not
the time spent doing the lost steps again. Each entry has an id (one more than the newest), and every open entry is
closed when the group runs again, not only the last one. A lost node's recovery starts at its NotReady transition,
when the ranks on it stopped, not when the grace let the operator call it lost."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..state.plan import Plan
from ..state.status import JobStatus, Recovery
from ..timefmt import format_time, parse_time
from .failures import Failure

LIMIT = 10  # entries kept: a status is one object, read whole on every pass
IN_PLACE, POD_REPLACED, GROUP_RECREATED = "InPlace", "PodReplaced", "GroupRecreated"
REPLICA_GROUP_REPLACED = "ReplicaGroupReplaced"  # TorchFT: the other groups trained on (replica_groups.py)


def record(
    status: JobStatus,
    now: datetime,
    how: str,
    cause: Failure | None,
    message: str,
    done: bool = False,
    ranks: int | None = None,
    steps_lost: int | None = None,
    scraped: dict[str, Any] | None = None,
) -> Recovery:
    """Append an entry for a recovery that starts now (or, `done`, one that already happened in place). `ranks`:
    the ranks that stop until it is done (default: all of them); `steps_lost`: when known better than the steps
    since the last checkpoint (a replica group heals from a live peer: none); `scraped`: this pass's scrape of
    worker 0, newer than status.progress (whose writes back off)."""
    progress: dict[str, Any] = dict(status.get("progress") or {})
    if scraped and isinstance(scraped.get("step"), int):
        progress = {**progress, **scraped, "attempt": status.get("attempt", 0)}
    entries = status.get("recoveries") or []
    entry: Recovery = {
        "id": max((e.get("id", 0) for e in entries), default=0) + 1,
        "time": format_time(cause.at if cause is not None and cause.at is not None else now),
        "how": how,
        "attempt": status.get("attempt", 0),
        "message": message[:300],
    }
    if cause is not None:
        entry.update({"pod": cause.pod, "kind": cause.kind, "reason": cause.reason})
        if cause.exit_code is not None:
            entry["exitCode"] = cause.exit_code
    if progress.get("attempt") == status.get("attempt") and isinstance(progress.get("step"), int):
        entry["step"] = progress["step"]
        if isinstance(progress.get("checkpointStep"), int):
            entry["stepsLost"] = max(0, progress["step"] - progress["checkpointStep"])
    if steps_lost is not None:
        entry["stepsLost"] = steps_lost
    if not done:
        entry["ranks"] = ranks if ranks is not None else status.get("worldSize", 0)
    kept = [*entries, entry][-LIMIT:]
    status["recoveries"] = kept
    return entry


def is_open(entry: Recovery) -> bool:
    return "ranks" in entry and "recoverySeconds" not in entry


def close(status: JobStatus, now: datetime, plan: Plan, ended: bool = False) -> None:
    """The group runs again: every open entry, found by its id wherever it stands in the history (an in-place
    restart may have been appended after it), gets its duration and rank-seconds, as an event and metrics too.
    `ended`: the job ended instead (end_with_job)."""
    entries = list(status.get("recoveries") or [])
    for at, open_entry in enumerate(entries):
        if is_open(open_entry):
            entries[at] = _closed(status, open_entry, now, plan, ended)
    if entries != (status.get("recoveries") or []):
        status["recoveries"] = entries


def end_with_job(status: JobStatus, now: datetime, plan: Plan) -> None:
    """The job ended (Succeeded, Failed) while a recovery was still open: TorchFT's survivors finished the training
    before the replacement was back, say. Each open entry is closed at the end (`endedWithJob`): its ranks were
    lost until then, and nothing is left to wait for."""
    close(status, now, plan, ended=True)


def _closed(status: JobStatus, open_entry: Recovery, now: datetime, plan: Plan, ended: bool = False) -> Recovery:
    entry = Recovery(**open_entry)
    began = parse_time(entry["time"]) or now
    seconds = max(0.0, (now - began).total_seconds())
    lost = seconds * int(entry.pop("ranks", 0) or 0)
    entry.update({"recoverySeconds": round(seconds, 1), "gpuSecondsLost": round(lost, 1)})
    if ended:
        entry["endedWithJob"] = True
    steps = f", {entry['stepsLost']} steps to do again" if "stepsLost" in entry else ""
    number = f" #{entry['id']}" if "id" in entry else ""
    how = f"{entry['how']} recovery{number} of attempt {entry['attempt']}"
    plan.event(
        "Normal",
        "Recovered",
        f"{how} not finished: the job ended {seconds:.1f}s after the failure, {status.get('phase')}"
        if ended
        else f"{how} done in {seconds:.1f}s{steps}; now attempt {status.get('attempt')}",
    )
    plan.observe("recovery_seconds", seconds, how=entry["how"])
    plan.observe("gpu_seconds_lost", lost, how=entry["how"])
    return entry
