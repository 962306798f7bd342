"""Progress lines for long benchmark runs: elapsed time since the process started, flushed at once."""

from __future__ import annotations

import sys
import time

_STARTED = time.monotonic()


def say(message: str) -> None:
    elapsed = time.monotonic() - _STARTED
    print(f"[bench {int(elapsed) // 60:02d}:{elapsed % 60:05.2f}] {message}", file=sys.stderr, flush=True)
