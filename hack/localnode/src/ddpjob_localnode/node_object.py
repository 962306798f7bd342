"""Pure builders for the Node this agent registers, its status heartbeat and its Lease in kube-node-lease."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from datetime import datetime

from .layout import LOCAL_NODE_LABEL

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
RUNTIME_VERSION = "ddpjob-localnode://0.1.0"


@dataclass(frozen=True)
class NodeResources:
    cpus: int
    memory_bytes: int
    gpus: int
    pods: int = 110


def build_node(name: str) -> dict:
    """The Node as first registered. Labels and the taint keep every pod off it except those that select and
    tolerate `ddpjob.dev/local-node=true` (NodeRestriction lets a node set its taints only at creation)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                LOCAL_NODE_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": _arch(),
            },
        },
        "spec": {"taints": [{"key": LOCAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}]},
    }


def build_node_status(name: str, resources: NodeResources, kubelet_port: int, now: datetime, boot_id: str) -> dict:
    capacity = {
        "cpu": str(resources.cpus),
        "memory": f"{resources.memory_bytes // 1024}Ki",
        "pods": str(resources.pods),
        "ephemeral-storage": "100Gi",
        "nvidia.com/gpu": str(resources.gpus),
    }
    stamp = format_time(now)
    return {
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "conditions": [
                _condition("Ready", "True", "KubeletReady", "local node agent is posting ready status", stamp),
                _condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure", stamp),
                _condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure", stamp),
                _condition("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure", stamp),
            ],
            "nodeInfo": {
                "machineID": boot_id,
                "systemUUID": boot_id,
                "bootID": boot_id,
                "kernelVersion": platform.release(),
                "osImage": f"{platform.system()} (local processes)",
                "containerRuntimeVersion": RUNTIME_VERSION,
                "kubeletVersion": "v1.36.3-ddpjob-localnode",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": _arch(),
            },
        }
    }


def build_lease(name: str, node_uid: str, now: datetime) -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": format_micro_time(now),
        },
    }


def format_time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _condition(kind: str, status: str, reason: str, message: str, stamp: str) -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def _arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
