"""What `kubectl ddpj history` lists (pure): one row per recovery the operator kept in status.recoveries (the last
10; events expire, status does not), and a last row for the failure that ended a Failed job."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from .view import cause

COLUMNS = ("TIME", "HOW", "ATTEMPT", "CAUSE", "AT STEP", "STEPS LOST", "RECOVERED IN", "MESSAGE")


def rows(job: dict[str, Any]) -> list[tuple[str, ...]]:
    status = job.get("status") or {}
    out: list[tuple[str, ...]] = []
    for rec in status.get("recoveries") or []:
        recovered = rec.get("recoverySeconds")
        out.append(
            (
                rec.get("time", ""),
                rec.get("how", ""),
                str(rec.get("attempt", "")),
                cause(rec),
                _or_dash(rec.get("step")),
                _or_dash(rec.get("stepsLost")),
                "recovering"
                if recovered is None
                else f"job ended at {recovered:.1f}s"
                if rec.get("endedWithJob")
                else f"{recovered:.1f}s",
                first_line(rec.get("message")),
            )
        )
    failure = status.get("lastFailure")
    if status.get("phase") == "Failed" and failure:
        out.append(
            (
                failure.get("time", ""),
                "JobFailed",
                str(status.get("attempt", 0)),
                cause(failure),
                _or_dash((status.get("progress") or {}).get("step")),
                "-",
                "-",
                first_line(f"{status.get('reason', '')}: {failure.get('message', '')}"),
            )
        )
    return out


def first_line(message: str | None, width: int = 100) -> str:
    """The message's last non-empty line (a traceback ends with its error), cut to `width`."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def table(job: dict[str, Any]) -> Table:
    t = Table(title=f"{job['metadata']['name']}: {len(job.get('status', {}).get('recoveries') or [])} recoveries kept")
    for name in COLUMNS:
        t.add_column(name, overflow="fold")
    for row in rows(job):
        t.add_row(*row)
    return t
