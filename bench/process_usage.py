"""Peak RSS and CPU seconds of a process (and its children that were waited for), read from /proc: the
operator and the baseline both run as their own process, so their footprints compare directly."""

from __future__ import annotations

import os
from dataclasses import dataclass

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessUsage:
    peak_rss_mib: float
    cpu_seconds: float


def read_usage(pid: int) -> ProcessUsage:
    """Must be called while the process is alive (before it is reaped)."""
    peak_kib = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                peak_kib = int(line.split()[1])
    with open(f"/proc/{pid}/stat") as f:
        # Fields after the command name, which may contain spaces, start after the last ')'.
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ProcessUsage(peak_rss_mib=peak_kib / 1024, cpu_seconds=(utime + stime + cutime + cstime) / CLOCK_TICKS)


def read_rss_mib(pid: int) -> float:
    """The process's resident set now (VmRSS), in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0
