"""The real local control plane for tests: started once per session by hack/cluster.sh, or taken from
$KUBECONFIG when one is given. Never a mock."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ddpjob_operator.api import TRACKING_FINALIZER

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




def release_tracking_finalizers(cluster: Cluster, namespace: str) -> int:
    """Free the worker pods the operator can no longer free (it was stopped first), as a user does after
    uninstalling it (docs/operator.md). Returns how many pods were freed."""
    import json
    listed = cluster.kubectl("-n", namespace, "get", "pods", "-o", "json", check=False)
    if listed.returncode != 0:
        return 0
    freed = 0
    for pod in json.loads(listed.stdout)["items"]:
        finalizers = pod["metadata"].get("finalizers") or []
        if TRACKING_FINALIZER not in finalizers:
            continue
        patch = [{"op": "test", "path": f"/metadata/finalizers/{finalizers.index(TRACKING_FINALIZER)}",
                  "value": TRACKING_FINALIZER},
                 {"op": "remove", "path": f"/metadata/finalizers/{finalizers.index(TRACKING_FINALIZER)}"}]
        done = cluster.kubectl("-n", namespace, "patch", "pod", pod["metadata"]["name"], "--type=json",
                               "-p", json.dumps(patch), check=False)
        freed += done.returncode == 0
    return freed


def delete_namespace(cluster: Cluster, namespace: str) -> None:
    """A test namespace goes as a user's would: its DDPJobs first (a running operator then frees their pods), any
    pod still held by the tracking finalizer freed by hand (the test's operator may be stopped already), then the
    namespace. Without the second step a stopped operator's pods would hold their GPUs on the shared nodes."""
    cluster.kubectl("-n", namespace, "delete", "ddpjobs.ddpjob.dev", "--all", "--wait=false", check=False)
    release_tracking_finalizers(cluster, namespace)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
