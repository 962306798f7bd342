"""The operator as a real process under chaos: SIGKILL at random moments (also while it is still starting up),
then started again, with its memory sampled from /proc the whole time."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

from support.operator import OperatorProcess


def rss_kib(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of a process in KiB, from /proc (0, 0 once it is gone)."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
    except OSError:
        return 0, 0
    def kib(key: str) -> int:
        return int(fields.get(key, "0 kB").split()[0])
    return kib("VmRSS"), kib("VmHWM")


class OperatorUnderChaos:
    def __init__(self, op: OperatorProcess, seed: int, alive_seconds: tuple[float, float] = (3.0, 8.0),
                 dead_seconds: tuple[float, float] = (0.2, 2.0), kill: bool = True, startup_kill_ratio: float = 0.2,
                 min_kills: int = 0):
        self.op = op
        self.rng = random.Random(seed ^ 0x0C0FFEE)
        self.alive_seconds = alive_seconds
        self.dead_seconds = dead_seconds
        self.kill_enabled = kill
        self.startup_kill_ratio = startup_kill_ratio
        self.min_kills = min_kills if kill else 0
        self.errors: list[str] = []
        self.kills = 0
        self.peak_rss_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="operator-chaos")

    def start(self) -> OperatorUnderChaos:
        self.op.start(wait=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop killing and leave one live operator running (for the final convergence)."""
        self._stop.set()
        self._thread.join(timeout=60)
        if not self.op.alive():
            self.op.start(wait=True)

    def _sample(self) -> None:
        if self.op.proc is not None:
            _, peak = rss_kib(self.op.proc.pid)
            self.peak_rss_kib = max(self.peak_rss_kib, peak)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.rng.random() < self.startup_kill_ratio:
                alive = self.rng.uniform(0.0, 2.0)  # most likely still importing or listing: kill it there
            else:
                self._wait_live()
                alive = self.rng.uniform(*self.alive_seconds)
            deadline = time.monotonic() + alive
            while time.monotonic() < deadline and not self._stop.is_set():
                self._sample()
                time.sleep(0.25)
            if self._stop.is_set() or not self.kill_enabled:
                continue
            self._sample()
            self.op.kill(signal.SIGKILL)
            self.kills += 1
            time.sleep(self.rng.uniform(*self.dead_seconds))
            self.op.start(wait=False)

    def _wait_live(self) -> None:
        try:
            self.op.wait_live(timeout=60)
        except AssertionError as exc:  # the test's final checks report it: the operator must start
            self.errors.append(str(exc)[-2000:])
