"""Pod and node faults, injected the way the real thing shows up in the API: a kubelet writing a terminated
container status or an eviction, a user or controller deleting a pod, the eviction API, a node whose kubelet
stopped (for good, or for a blip shorter than the node-lost grace)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from kubernetes import client

from support.nodes import bring_node_up, create_spare_node, delete_node, node_ready, take_node_down  # noqa: F401

EXIT_CODE = "exit-code"
KUBELET_EVICTION = "kubelet-eviction"
API_EVICTION = "api-eviction"
DELETION = "deletion"
NODE_LOST = "node-lost"
# A node NotReady for a few seconds, back well within the operator's node-lost grace: it must cost nothing.
NODE_BLIP = "node-blip"
NODE_FAULTS = (NODE_LOST, NODE_BLIP)
BLIP_SECONDS = 4.0
POD_FAULTS = (EXIT_CODE, KUBELET_EVICTION, API_EVICTION, DELETION)
# Exit codes a trainer really dies with: errors (1, 2), a permanent config error (3), SIGKILL/OOM (137), SIGTERM
# (143), SIGSEGV (139).
EXIT_CODES = (1, 2, 3, 137, 139, 143)


@dataclass(frozen=True)
class Fault:
    kind: str
    exit_code: int | None = None

    def retryable_under_exit_code_policy(self) -> bool:
        return not (self.kind == EXIT_CODE and self.exit_code is not None and 1 <= self.exit_code <= 127)

    def label(self) -> str:
        return f"{self.kind}({self.exit_code})" if self.exit_code is not None else self.kind


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def terminated_status(phase: str, exit_code: int, reason: str, message: str = "") -> dict:
    return {"status": {"phase": phase, "containerStatuses": [{
        "name": "trainer", "ready": False, "restartCount": 0, "image": "example.invalid/trainer:1", "imageID": "",
        "state": {"terminated": {"exitCode": exit_code, "reason": reason, "message": message,
                                 "startedAt": _now(), "finishedAt": _now()}}}]}}


def inject(core: client.CoreV1Api, ns: str, pod: str, fault: Fault) -> None:
    if fault.kind == EXIT_CODE:
        reason = "OOMKilled" if fault.exit_code == 137 else "Error"
        core.patch_namespaced_pod_status(pod, ns, terminated_status("Failed", fault.exit_code, reason,
                                                                     f"chaos exit {fault.exit_code}"))
    elif fault.kind == KUBELET_EVICTION:
        core.patch_namespaced_pod_status(pod, ns, {"status": {
            "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}})
    elif fault.kind == API_EVICTION:
        core.create_namespaced_pod_eviction(pod, ns, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod, namespace=ns)))
    elif fault.kind == DELETION:
        core.delete_namespaced_pod(pod, ns)
    else:
        raise ValueError(f"unknown pod fault {fault.kind!r}; expected one of {', '.join(POD_FAULTS)}")


def succeed(core: client.CoreV1Api, ns: str, pod: str) -> None:
    core.patch_namespaced_pod_status(pod, ns, terminated_status("Succeeded", 0, "Completed"))
