"""A pod the API server refuses as invalid will be refused on every attempt: fail the job with the server's
message instead of retrying forever. Invalid is 422 (a field fails validation) or 400 (the body cannot even be
decoded as a Pod, e.g. a resource quantity such as "lots": found by the fuzz suite, which used to retry it
forever). Other refusals (quota, webhooks) may pass later and are retried."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import conditions as c
from .timefmt import format_time

INVALID = (400, 422)
MESSAGE_LIMIT = 1024


def reject_unschedulable_template(
    status: dict[str, Any], now: datetime, pod: str, code: int, message: str
) -> dict[str, Any] | None:
    """`status` (as planned) turned Failed because pod was rejected with HTTP `code`; None when retryable."""
    if code not in INVALID:
        return None
    text = f"pod {pod} was rejected by the API server: {message}"[:MESSAGE_LIMIT]
    out = c.enter_phase(status, c.FAILED, "InvalidPodTemplate", text, now)
    out["completionTime"] = format_time(now)
    out.pop("launchedAttempt", None)
    return out
