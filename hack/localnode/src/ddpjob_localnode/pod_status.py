"""Pure builders for the pod status a kubelet reports: Running with a pod IP, then Succeeded/Failed with each
container's exit code, reason and termination message."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .node_object import format_time

MESSAGE_LIMIT_BYTES = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
LOST_MESSAGE = (
    "The container could not be located when the pod was terminated: the local node agent "
    "restarted and its processes were gone"
)


@dataclass(frozen=True)
class ContainerResult:
    name: str
    exit_code: int
    started_at: datetime
    finished_at: datetime
    reason: str = ""
    message: str = ""
    container_id: str = ""


def exit_reason(exit_code: int, oom_killed: bool = False) -> str:
    if oom_killed:
        return "OOMKilled"
    return "Completed" if exit_code == 0 else "Error"


def termination_message(termination_log: str, log_tail: str, exit_code: int, policy: str | None) -> str:
    """The termination-log file wins; with FallbackToLogsOnError a failed container without one reports the
    tail of its log (the last 80 lines, at most 2048 bytes), as the kubelet does."""
    message = termination_log[-MESSAGE_LIMIT_BYTES:]
    if message.strip() or exit_code == 0 or policy != "FallbackToLogsOnError":
        return message
    tail = "\n".join(log_tail.splitlines()[-FALLBACK_LOG_LINES:])
    return tail.encode()[-FALLBACK_LOG_BYTES:].decode(errors="ignore")


def pod_phase(results: list[ContainerResult]) -> str:
    return "Succeeded" if all(r.exit_code == 0 for r in results) else "Failed"


def running_status(pod: dict, pod_ip: str, host_ip: str, started_at: datetime, container_ids: dict[str, str]) -> dict:
    stamp = format_time(started_at)
    statuses = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": container_ids.get(c["name"], ""),
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": stamp}},
        }
        for c in pod["spec"]["containers"]
    ]
    return {
        "status": {
            "phase": "Running",
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": stamp,
            "containerStatuses": statuses,
            "conditions": [
                _condition(kind, "True", stamp)
                for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
            ],
        }
    }


def terminated_status(pod: dict, results: list[ContainerResult], now: datetime) -> dict:
    stamp = format_time(now)
    by_name = {r.name: r for r in results}
    statuses = []
    for c in pod["spec"]["containers"]:
        r = by_name[c["name"]]
        terminated = {
            "exitCode": r.exit_code,
            "reason": r.reason or exit_reason(r.exit_code),
            "startedAt": format_time(r.started_at),
            "finishedAt": format_time(r.finished_at),
            "containerID": r.container_id,
        }
        if r.message:
            terminated["message"] = r.message
        statuses.append(
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "containerID": r.container_id,
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        )
    return {
        "status": {
            "phase": pod_phase(results),
            "containerStatuses": statuses,
            "conditions": [
                _condition("ContainersReady", "False", stamp, "PodCompleted"),
                _condition("Ready", "False", stamp, "PodCompleted"),
                _condition("PodReadyToStartContainers", "False", stamp),
            ],
        }
    }


def lost_results(pod: dict, now: datetime) -> list[ContainerResult]:
    """Containers of a pod the agent had started before it restarted: their processes died with the agent."""
    started = now
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (status.get("state") or {}).get("running") or {}
        if running.get("startedAt"):
            started = datetime.strptime(running["startedAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=now.tzinfo)
    return [
        ContainerResult(c["name"], 137, started, now, "ContainerStatusUnknown", LOST_MESSAGE)
        for c in pod["spec"]["containers"]
    ]


def was_started(pod: dict) -> bool:
    status = pod.get("status") or {}
    return bool(status.get("podIP") or status.get("containerStatuses")) or status.get("phase") == "Running"


def _condition(kind: str, status: str, stamp: str, reason: str = "") -> dict:
    condition = {"type": kind, "status": status, "lastTransitionTime": stamp, "lastProbeTime": None}
    if reason:
        condition["reason"] = reason
    return condition
