"""The operator as a real subprocess (`python -m ddpjob_operator`), scoped to one namespace, with its log kept
in a file so a failing test can print it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "crds"
QUEUE_LABEL_POLICY = ROOT / "charts" / "ddpjob-operator" / "files" / "queue-label-policy"

# Short timers so the integration suite stays fast; production defaults are in ddpjob_operator.config.
FAST_ENV = {
    "DDPJOB_RESYNC_SECONDS": "2",
    "DDPJOB_NODE_LOST_GRACE_SECONDS": "2",
    "DDPJOB_TERMINATING_GRACE_SECONDS": "5",
    "DDPJOB_UNREACHABLE_FORCE_DELETE_SECONDS": "5",
    "DDPJOB_PROGRESS_INTERVAL_SECONDS": "2",
}


def port_taken(log_tail: str) -> bool:
    """Whether an operator's last lines say that one of its ports was taken (EADDRINUSE). Its metrics server (the
    standard library's) says "Address already in use"; its liveness probe (kopf's, on asyncio) says "address already
    in use": the ports live in the ephemeral range, where any outgoing connection of the suite may take one while a
    killed operator is down."""
    return "address already in use" in log_tail.lower()


class OperatorProcess:
    def __init__(self, kubeconfig: Path, namespaces: list[str], log_path: Path, env: dict[str, str] | None = None,
                 verbose: bool = True, launcher: list[str] | None = None):
        self.kubeconfig = kubeconfig
        # What python runs: the operator's module, or a module that wraps its main() (support/late_namespace_operator.py)
        self.launcher = launcher or ["-m", "ddpjob_operator"]
        self.verbose = verbose  # the chaos suite turns kopf's per-event debug lines off: they cost CPU
        self.namespaces = namespaces
        self.log_path = log_path
        self.env = {**FAST_ENV, **(env or {})}
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, wait: bool = True) -> OperatorProcess:
        env = {**os.environ, **self.env, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        for tries_left in (2, 1, 0):
            args = [sys.executable, *self.launcher, "--metrics-port", str(self.metrics_port),
                    "--liveness-port", str(self.liveness_port)] + (["--verbose"] if self.verbose else [])
            for ns in self.namespaces:
                args += ["--namespace", ns]
            self.starts += 1
            log = open(self.log_path, "a")
            log.write(f"\n===== operator start #{self.starts} =====\n")
            log.flush()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
            log.close()
            if not wait:
                return self
            try:
                self.wait_live()
                return self
            except AssertionError:
                self.kill()  # a process that never came up must not outlive the test that started it
                taken = self.proc.poll() is not None and port_taken(self.log()[-2000:])
                if not (taken and tries_left):
                    raise
            # free_port() saw the ports free, and another process of the suite took one since: new ones
            self.metrics_port, self.liveness_port = free_port(), free_port()
        return self

    def wait_live(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"operator not live after {timeout}s:\n{self.log()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def freeze(self) -> None:
        """SIGSTOP: alive but deaf, as an operator starved of CPU or cut off from the API server is."""
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """SIGKILL: the operator is built to be killed at any moment, and kopf's graceful exit takes seconds."""
        self.kill(signal.SIGKILL)

    def terminate(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of the /metrics page (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families
        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


def install_crds(kubectl) -> None:
    """Apply crds/ and wait until the API serves them, then the queue-label admission policy the chart ships
    (idempotent; every suite may call it)."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/ddpjobs.ddpjob.dev")
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(QUEUE_LABEL_POLICY))
