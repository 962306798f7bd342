"""Simulated nodes of a test's own: kwok runs them (and their pods) like the shared GPU nodes, so a test can take
one down, bring it back or fill it without touching the nodes other tests use."""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from support.cluster import wait_until


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def create_spare_node(core: client.CoreV1Api, name: str, labels: dict[str, str] | None = None, gpus: int = 8) -> None:
    """A kwok node labelled `spare: <name>` (plus `labels`), tainted for its GPUs like the shared ones."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"type": "kwok-spare", "kubernetes.io/hostname": name, "spare": name, **(labels or {})},
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
        },
    }
    core.create_node(node)


def _ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def node_ready(core: client.CoreV1Api, name: str) -> bool:
    return _ready(core.read_node(name))


def node_schedulable(core: client.CoreV1Api, name: str) -> bool:
    """Ready, and the node lifecycle controller has lifted the `node.kubernetes.io/not-ready` taint it puts on a
    new node: until then the scheduler (and the operator's capacity estimate) leave it out."""
    node = core.read_node(name)
    return _ready(node) and not any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or [])


def take_node_down(core: client.CoreV1Api, name: str) -> None:
    """kwok stops managing the node and its pods, like a kubelet that died; then the node reports NotReady."""
    core.patch_node(name, {"metadata": {"annotations": {"kwok.x-k8s.io/node": None}}})
    now = _now()
    core.patch_node_status(
        name,
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "KubeletStopped",
                        "message": "node down (test)",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ]
            }
        },
    )


def bring_node_up(core: client.CoreV1Api, name: str) -> None:
    core.patch_node(name, {"metadata": {"annotations": {"kwok.x-k8s.io/node": "fake"}}})


def delete_node(core: client.CoreV1Api, name: str) -> None:
    try:
        core.delete_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


class NodePool:
    """kwok nodes of one test's own, labelled pool=<name> (plus any labels given), 8 GPUs each unless told:
    pool(n, gpus=8, **labels) makes n of them and waits until they are Ready and schedulable; delete() removes
    them all."""

    def __init__(self, core: client.CoreV1Api, name: str):
        self.core, self.name, self.made = core, name, []

    def __call__(self, n: int, gpus: int = 8, **labels: str) -> list[str]:
        names = [f"{self.name}-{i}"[-63:].lstrip("-") for i in range(len(self.made), len(self.made) + n)]
        for name in names:
            create_spare_node(self.core, name, labels={"pool": self.name, **labels}, gpus=gpus)
            self.made.append(name)
        for name in names:
            wait_until(lambda name=name: node_schedulable(self.core, name), timeout=60,
                       what=f"node {name} Ready, without the not-ready taint")
        return names

    def delete(self) -> None:
        for name in self.made:
            delete_node(self.core, name)
