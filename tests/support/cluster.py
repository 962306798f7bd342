"""The real local control plane for tests: started once per session by hack/cluster.sh, or taken from
$KUBECONFIG when one is given. Never a mock."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "bin"
CLUSTER_SH = ROOT / "hack" / "cluster.sh"


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    started_here: bool

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, check=check, timeout=timeout,
        )


def up(env: dict[str, str] | None = None) -> Cluster:
    given = os.environ.get("KUBECONFIG")
    if given:
        return Cluster(Path(given), started_here=False)
    subprocess.run(["bash", str(CLUSTER_SH), "up"], check=True, env={**os.environ, **(env or {})})
    return Cluster(ROOT / ".local-cluster" / "kubeconfig", started_here=True)


def down() -> None:
    subprocess.run(["bash", str(CLUSTER_SH), "down"], check=True)


def wait_until(predicate, timeout: float = 30, interval: float = 0.25, what: str = "condition"):
    """Poll predicate() until it returns a truthy value, and return that value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")
