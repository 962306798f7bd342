"""Helpers for the real-node suites (tests/realnode): hack/realnode.sh and hack/images.sh from Python, and pods
pinned to a real node."""

from __future__ import annotations

import json
import os
import subprocess

from support.cluster import ROOT, Cluster, wait_until

REALNODE_SH = ROOT / "hack" / "realnode.sh"
IMAGES_SH = ROOT / "hack" / "images.sh"
NODES = ["realnode-0", "realnode-1"]
BASE_IMAGE = "localhost/ddpjob/debian-python:bookworm"
TOLERATE = [{"key": "ddpjob.dev/real-node", "operator": "Exists", "effect": "NoSchedule"}]
# The control plane the real nodes join (its hack/ settings; the first one when empty). There is one set of real
# nodes on the machine at a time, whichever control plane they join: their bridges, cgroups and sockets are the
# machine's.
_JOINED: dict[str, str] = {}


def join(cluster: Cluster) -> None:
    """Every realnode.sh call from now on works on `cluster`'s real nodes."""
    _JOINED.clear()
    _JOINED.update(cluster.env)


def realnode(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REALNODE_SH), *args], capture_output=True, text=True, check=check,
                          timeout=300, env={**os.environ, **_JOINED})


def left_on_machine() -> list[str]:
    """What of the real nodes is still on this machine (`hack/realnode.sh left`): empty when all is gone."""
    return [line for line in realnode("left").stdout.splitlines() if line.strip()]


def pod_on(node: str, name: str, command: list[str], **spec) -> dict:
    container = {"name": "main", "image": BASE_IMAGE, "imagePullPolicy": "Never", "command": command}
    container.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": TOLERATE,
                     "terminationGracePeriodSeconds": 5, "containers": [container], **spec}}


def apply(cluster: Cluster, namespace: str, manifest: dict) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))


def get(cluster: Cluster, namespace: str, kind: str, name: str) -> dict:
    return json.loads(cluster.kubectl("-n", namespace, "get", kind, name, "-o", "json").stdout)


def wait_running(cluster: Cluster, namespace: str, name: str, timeout: float = 120) -> dict:
    def running():
        pod = get(cluster, namespace, "pod", name)
        return pod.get("status", {}).get("phase") == "Running" and pod
    return wait_until(running, timeout=timeout, interval=0.5, what=f"pod {name} Running")
