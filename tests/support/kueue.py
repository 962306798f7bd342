"""A real Kueue beside the local control plane (hack/kueue.sh), and the queues a test needs: a ResourceFlavor, a
ClusterQueue of its own and LocalQueue `q`. Shared by the integration suite (kwok nodes) and the e2e suite (the
local node's real processes)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from support.cluster import wait_until
from support.operator import ROOT

API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def start(cluster, pods_ready_timeout: str) -> None:
    """Kueue up (its CRDs, webhooks and manager; restarted only if its settings changed), and its API served.
    `pods_ready_timeout`: waitForPodsReady, after which an admitted job whose pods do not all run is evicted."""
    env = cluster.script_env(KUEUE_PODS_READY_TIMEOUT=pods_ready_timeout)
    done = subprocess.run(["bash", str(ROOT / "hack" / "kueue.sh"), "up"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    served = cluster.kubectl("api-resources", "--api-group=kueue.x-k8s.io", "-o", "name").stdout
    assert "workloads.kueue.x-k8s.io" in served


def queue(cluster, name: str, namespace: str, quota: dict[str, str | int], node_labels: dict[str, str],
          preemption: dict | None = None) -> None:
    """ResourceFlavor and ClusterQueue `name` (the flavor's nodes, `quota` of them), LocalQueue `q` in namespace."""
    cq: dict = {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name},
                "spec": {"namespaceSelector": {}, "queueingStrategy": "StrictFIFO",
                         "resourceGroups": [{"coveredResources": sorted(quota), "flavors": [
                             {"name": name, "resources": [{"name": r, "nominalQuota": quota[r]}
                                                          for r in sorted(quota)]}]}]}}
    if preemption:
        cq["spec"]["preemption"] = preemption
    for manifest in (
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {"nodeLabels": node_labels}},
        cq,
        {"apiVersion": API, "kind": "LocalQueue", "metadata": {"name": "q", "namespace": namespace},
         "spec": {"clusterQueue": name}},
    ):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    wait_until(lambda: json.loads(cluster.kubectl("get", "clusterqueue", name, "-o", "json").stdout)
               .get("status", {}).get("conditions"), timeout=30, what=f"ClusterQueue {name} active")


def log_tail(cluster, lines: int) -> str:
    """The last lines of this cluster's Kueue manager log (hack/kueue.sh writes it under the cluster's logs/)."""
    path = Path(cluster.env.get("CLUSTER_DIR", ROOT / ".local-cluster")) / "logs" / "kueue.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else f"(no {path})"


def delete_queues(cluster, name: str) -> None:
    for kind in ("clusterqueue", "resourceflavor"):
        cluster.kubectl("delete", kind, name, "--wait=false", check=False)


def condition(obj: dict, ctype: str) -> dict:
    """A condition of a status, or of an object's status."""
    conditions = obj["conditions"] if "conditions" in obj else (obj.get("status") or {}).get("conditions")
    return next((c for c in conditions or [] if c["type"] == ctype), {})


def is_queued(status: dict) -> bool:
    return status.get("phase") == "Pending" and status.get("reason") == "Queued"
