"""One container running as a local process tree under the pod_init shim, with its output written to a log
file in the CRI format (`<RFC3339Nano> <stream> F <line>`) that the kubelet API serves back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from .launch_plan import LaunchPlan
from .memory_limit import tree_rss


def cri_timestamp(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


class ContainerProcess:
    """Must be started from a thread that lives as long as the agent: PR_SET_PDEATHSIG fires when the
    *thread* that forked the child exits, not only the process."""

    def __init__(self, plan: LaunchPlan, on_exit: Callable[[ContainerProcess], None], memory_limit: int | None = None):
        self.plan = plan
        self.memory_limit = memory_limit
        self.oom_killed = False
        self.started_at = datetime.now(UTC)
        self.finished_at: datetime | None = None
        self.exit_code: int | None = None
        self.killed_by_agent = False
        for folder in plan.folders:
            folder.mkdir(parents=True, exist_ok=True)
        plan.log_file.parent.mkdir(parents=True, exist_ok=True)
        plan.termination_log.touch()
        # Open for the container's whole life: the pump threads write it, _wait() closes it.
        self._log = open(plan.log_file, "ab", buffering=0)  # noqa: SIM115
        self._log_lock = threading.Lock()
        shim = [
            sys.executable,
            "-m",
            "ddpjob_localnode.pod_init",
            str(os.getpid()),
            str(plan.cwd),
            plan.env.get("HOSTNAME", ""),
            "--",
            *plan.argv,
        ]
        self.proc = subprocess.Popen(
            shim,
            env=plan.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        self.container_id = f"local://{self.proc.pid}"
        self._pumps = [
            threading.Thread(target=self._pump, args=(stream, name), daemon=True)
            for stream, name in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr"))
        ]
        for pump in self._pumps:
            pump.start()
        threading.Thread(target=self._wait, args=(on_exit,), daemon=True).start()

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def terminate(self) -> None:
        """SIGTERM to the shim, which forwards it to the container's main process only (as to PID 1)."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the shim's process group; the PID namespace takes every descendant with it."""
        self.killed_by_agent = True
        self._signal(signal.SIGKILL)

    def enforce_memory_limit(self) -> bool:
        """Kill the tree when it uses more than its limit; True when it did."""
        if self.memory_limit is None or not self.running or self.oom_killed:
            return False
        if tree_rss(self.proc.pid) <= self.memory_limit:
            return False
        self.oom_killed = True
        self.kill()
        return True

    def _signal(self, signum: int) -> None:
        if not self.running:
            return
        try:
            if signum == signal.SIGKILL:
                os.killpg(self.proc.pid, signum)
            else:
                self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    def _pump(self, stream, name: str) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.rstrip(b"\n")
            with self._log_lock:
                self._log.write(f"{cri_timestamp()} {name} F ".encode() + line + b"\n")
        stream.close()

    def _wait(self, on_exit: Callable[[ContainerProcess], None]) -> None:
        code = self.proc.wait()
        for pump in self._pumps:
            pump.join(timeout=5)
        self._log.close()
        self.finished_at = datetime.now(UTC)
        # Popen reports a signal as a negative code; a runtime reports 128 + signal.
        self.exit_code = 128 - code if code < 0 else code
        on_exit(self)


def read_log_text(path: Path) -> str:
    """The log file's lines without the CRI prefix."""
    if not path.exists():
        return ""
    lines = []
    for raw in path.read_text(errors="replace").splitlines():
        parts = raw.split(" ", 3)
        lines.append(parts[3] if len(parts) == 4 else raw)
    return "\n".join(lines)
