"""RFC 3339 timestamps as Kubernetes writes them (UTC, second precision, trailing Z)."""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)
