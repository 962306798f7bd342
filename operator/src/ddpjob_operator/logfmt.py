"""Structured logs: one logfmt line per record, with the job, attempt and pod when known."""

from __future__ import annotations

import logging
import sys

FIELDS = ("job", "attempt", "pod", "phase")


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [
            f"time={self.formatTime(record, '%Y-%m-%dT%H:%M:%S')}",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={_quote(record.getMessage())}",
        ]
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                parts.append(f"{name}={_quote(str(value))}")
        if record.exc_info:
            parts.append(f"error={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


def _quote(text: str) -> str:
    if text and not any(ch in text for ch in ' "=\n'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # kopf and urllib3 are chatty at INFO about every watch event; our own lines say what matters.
    logging.getLogger("kopf").setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # one line per liveness probe otherwise
