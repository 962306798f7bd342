"""What `kubectl ddpj watch` shows (pure): one job's status as a live panel (rich) or a plain line per change."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..tracking.progress_eta import duration

ENDED = ("Succeeded", "Failed")
PHASE_STYLE = {"Running": "green", "Succeeded": "bold green", "Failed": "bold red", "Restarting": "yellow"}


def exit_code(phase: str | None) -> int | None:
    """watch's exit code once the job has ended: 0 Succeeded, 1 Failed; None while it runs."""
    return {"Succeeded": 0, "Failed": 1}.get(phase or "")


def facts(job: dict[str, Any]) -> dict[str, Any]:
    """The figures both forms show, from the job as the API returns it."""
    status = job.get("status") or {}
    progress = status.get("progress") or {}
    recoveries = status.get("recoveries") or []
    loss = progress.get("loss")
    return {
        "name": job["metadata"]["name"],
        "phase": status.get("phase") or "Pending",
        "reason": status.get("reason") or "",
        "size": status.get("sizeText") or "-",
        "attempt": status.get("attempt", 0),
        "restarts": status.get("restarts", 0),
        "disruptions": status.get("platformRestarts", 0),
        "step": progress.get("step"),
        "total": progress.get("totalSteps"),
        "percent": progress.get("percent"),
        "eta": progress.get("etaSeconds"),
        "loss": progress.get("lossNonFinite") or (None if loss is None else f"{loss:.4f}"),
        "rate": progress.get("samplesPerSecond"),
        "queue": status.get("queue"),
        "message": _condition_message(status),
        "last": recoveries[-1] if recoveries else None,
        "failure": status.get("lastFailure"),
    }


def _condition_message(status: dict[str, Any]) -> str:
    """The message of the condition that says why the job is in its phase (its reason's condition, else the
    newest one)."""
    conditions = status.get("conditions") or []
    reason = status.get("reason")
    for cond in conditions:
        if reason and cond.get("reason") == reason and cond.get("message"):
            return str(cond["message"])
    newest = max(conditions, key=lambda c: c.get("lastTransitionTime") or "", default=None)
    return str((newest or {}).get("message") or "")


def cause(rec: dict[str, Any]) -> str:
    """One recovery's cause in a phrase: pod, kind, exit code, reason."""
    parts = [rec.get("pod") or "?", rec.get("kind") or ""]
    if rec.get("exitCode") is not None:
        parts.append(f"exit {rec['exitCode']}")
    if rec.get("reason") and rec.get("reason") != rec.get("kind"):
        parts.append(str(rec["reason"]))
    return " ".join(p for p in parts if p)


def restart_line(f: dict[str, Any]) -> str:
    rec = f["last"]
    if not rec:
        return ""
    how = {
        "InPlace": "restarted in place",
        "PodReplaced": "pod replaced",
        "GroupRecreated": "group recreated",
        "ReplicaGroupReplaced": "replica group replaced, the others trained on",
    }
    text = f"last restart: {cause(rec)}, {how.get(rec.get('how', ''), rec.get('how', ''))}"
    if rec.get("step") is not None:
        text += f" at step {rec['step']}"
    if rec.get("recoverySeconds") is not None:
        text += f", recovered in {rec['recoverySeconds']:.1f}s"
    elif rec.get("ranks") is not None or rec.get("how"):
        text += ", recovering"
    if rec.get("stepsLost") is not None:
        text += f", {rec['stepsLost']} steps lost"
    return text


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def plain_line(f: dict[str, Any]) -> str:
    """One line per change, for a pipe or a CI log."""
    step = "-" if f["step"] is None else (f"{f['step']}/{f['total']}" if f["total"] else str(f["step"]))
    parts = [
        f"{f['name']}",
        f"{f['phase']}" + (f" ({f['reason']})" if f["reason"] and f["phase"] != "Running" else ""),
        f"size {f['size']}",
        f"step {step}" + (f" {f['percent']}%" if f["percent"] is not None else ""),
        f"loss {f['loss'] or '-'}",
        f"samples/s {_rate(f['rate'])}",
        f"ETA {'-' if f['eta'] is None else duration(f['eta'])}",
        f"restarts {f['restarts']}",
        f"disruptions {f['disruptions']}",
        f"attempt {f['attempt']}",
    ]
    line = "  ".join(parts)
    if f["phase"] not in ("Running", "Succeeded") and f["message"]:
        line += f"  | {f['message']}"
    return line


def panel(f: dict[str, Any]) -> RenderableType:
    """The live view: a header, the bar, the restart line and, while the job waits, why."""
    head = Text.assemble(
        (f["name"], "bold"),
        "  ",
        (f["phase"], PHASE_STYLE.get(f["phase"], "cyan")),
        (f" {f['reason']}" if f["reason"] and f["phase"] != "Running" else "", "dim"),
        f"   size {f['size']}   attempt {f['attempt']}   restarts {f['restarts']}   disruptions {f['disruptions']}",
    )
    if f["queue"]:
        head.append(f"   queue {f['queue']}")
    grid = Table.grid(padding=(0, 2))
    grid.add_column()
    grid.add_column()
    total, step = f["total"], f["step"] or 0
    bar = ProgressBar(total=total or None, completed=min(step, total or step), width=32)
    figures = f"step {step}" + (f"/{total}  {f['percent']}%" if total else "")
    figures += f"   loss {f['loss'] or '-'}"
    figures += f"   samples/s {_rate(f['rate'])}"
    figures += f"   ETA {'-' if f['eta'] is None else duration(f['eta'])}"
    grid.add_row(bar, figures)
    lines: list[RenderableType] = [head, grid]
    if f["last"]:
        lines.append(Text(restart_line(f), style="yellow"))
    if f["phase"] not in ("Running", "Succeeded") and f["message"]:
        lines.append(Text(f"why: {f['message']}", style="dim"))
    return Group(*lines)
