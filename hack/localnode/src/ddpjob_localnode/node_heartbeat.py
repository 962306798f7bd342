"""Registers the Node and keeps it Ready the way a kubelet does: a Lease in kube-node-lease renewed every few
seconds, and the Ready condition's heartbeat in node status now and then. When the agent is gone the lease
expires and the node lifecycle controller marks the node NotReady."""

from __future__ import annotations

import logging
import os
import threading
import uuid
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.rest import ApiException

from .node_object import (
    LEASE_NAMESPACE,
    NodeResources,
    build_lease,
    build_node,
    build_node_status,
    format_micro_time,
    format_time,
)

log = logging.getLogger("ddpjob_localnode.node")

LEASE_RENEW_SECONDS = float(os.environ.get("LOCAL_NODE_LEASE_RENEW_SECONDS", "4"))
STATUS_HEARTBEAT_SECONDS = 30.0


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return str(uuid.uuid4())


class NodeHeartbeat:
    def __init__(self, api: client.ApiClient, name: str, resources: NodeResources, kubelet_port: int):
        self.core = client.CoreV1Api(api)
        self.leases = client.CoordinationV1Api(api)
        self.name = name
        self.resources = resources
        self.kubelet_port = kubelet_port
        self.node_uid = ""
        self._stop = threading.Event()

    def register(self) -> None:
        try:
            created = self.core.create_node(build_node(self.name))
            log.info("registered node %s", self.name)
            self.node_uid = created.metadata.uid
        except ApiException as err:
            if err.status != 409:
                raise
            # A node keeps its labels and taints across agent restarts; NodeRestriction forbids changing taints.
            self.node_uid = self.core.read_node(self.name).metadata.uid
            log.info("node %s already registered: reusing it", self.name)
        status = build_node_status(self.name, self.resources, self.kubelet_port, datetime.now(UTC), _boot_id())
        self.core.patch_node_status(self.name, status)
        self.renew_lease()

    def renew_lease(self) -> None:
        now = datetime.now(UTC)
        try:
            self.leases.patch_namespaced_lease(
                self.name, LEASE_NAMESPACE, {"spec": {"holderIdentity": self.name, "renewTime": format_micro_time(now)}}
            )
        except ApiException as err:
            if err.status != 404:
                raise
            self.leases.create_namespaced_lease(LEASE_NAMESPACE, build_lease(self.name, self.node_uid, now))

    def post_ready(self) -> None:
        stamp = format_time(datetime.now(UTC))
        self.core.patch_node_status(
            self.name,
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "local node agent is posting ready status",
                            "lastHeartbeatTime": stamp,
                        }
                    ]
                }
            },
        )

    def post_not_ready(self) -> None:
        """A graceful stop says so at once, as a kubelet's graceful node shutdown does: the node is NotReady now,
        not when its lease runs out."""
        stamp = format_time(datetime.now(UTC))
        condition = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "node is shutting down: the local node agent stopped",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        self.core.patch_node_status(self.name, {"status": {"conditions": [condition]}})

    def start(self) -> None:
        threading.Thread(target=self._loop, name="node-heartbeat", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        since_status = 0.0
        while not self._stop.wait(LEASE_RENEW_SECONDS):
            try:
                self.renew_lease()
                since_status += LEASE_RENEW_SECONDS
                if since_status >= STATUS_HEARTBEAT_SECONDS:
                    self.post_ready()
                    since_status = 0.0
            except Exception as err:  # the apiserver may be restarting; the next beat tries again
                log.warning("node heartbeat failed: %s", err)
