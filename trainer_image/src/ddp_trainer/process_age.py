"""How long this process has existed, from /proc: the "process start" part of a recovery breakdown."""

from __future__ import annotations

import os


def process_age_seconds() -> float:
    """Seconds since the kernel started this process; 0.0 where /proc is not available."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except OSError:
        return 0.0
    start_ticks = int(fields[19])  # field 22 of stat; the split above dropped pid and comm
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
