"""Events on pods, written as the node (source: kubelet on this node), like a kubelet's."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from kubernetes import client

from .node_object import format_time

log = logging.getLogger("ddpjob_localnode.events")


def build_event(pod: dict, node: str, reason: str, message: str, warning: bool, now: datetime) -> dict:
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": {"component": "kubelet", "host": node},
        "reportingComponent": "kubelet",
        "reportingInstance": node,
        "firstTimestamp": format_time(now),
        "lastTimestamp": format_time(now),
        "count": 1,
    }


class PodEvents:
    def __init__(self, core: client.CoreV1Api, node: str):
        self.core = core
        self.node = node

    def emit(self, pod: dict, reason: str, message: str, warning: bool = False) -> None:
        body = build_event(pod, self.node, reason, message, warning, datetime.now(UTC))
        try:
            self.core.create_namespaced_event(pod["metadata"]["namespace"], body)
        except Exception as err:  # an event is worth a retry by nobody: losing one must not stop a pod
            log.warning("could not record event %s on pod %s: %s", reason, pod["metadata"]["name"], err)
