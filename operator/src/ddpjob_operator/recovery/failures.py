"""What counts as a failed pod of the current attempt, and what kind of failure it is."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..api import LABEL_ATTEMPT
from ..state.spec import trainer_container
from ..timefmt import parse_time

EXIT_CODE = "ExitCode"
SIGNAL = "Signal"
EVICTED = "Evicted"
DELETED = "Deleted"
NODE_LOST = "NodeLost"
NO_PROGRESS = "NoProgress"
RENDEZVOUS = "RendezvousTimeout"
UNKNOWN = "Unknown"

MESSAGE_LIMIT = 1024
# The kubelet's reason for a container it could not locate (kubelet's status manager): a rebooted node's.
CONTAINER_STATUS_UNKNOWN = "ContainerStatusUnknown"


@dataclass(frozen=True)
class Failure:
    pod: str
    kind: str
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    at: datetime | None = None
    in_place_restarts: int = 0  # the pod's torchrun agent restarted its workers this often first (in_place.py)

    def describe(self) -> str:
        what = {
            EXIT_CODE: f"exited with code {self.exit_code}",
            SIGNAL: f"was killed by a signal (exit code {self.exit_code})",
            EVICTED: "was evicted",
            DELETED: "was deleted",
            NODE_LOST: "lost its node",
            NO_PROGRESS: "made no training progress",
            RENDEZVOUS: "could not form its group with the others (torchrun's rendezvous timed out)",
        }.get(self.kind, "failed")
        text = f"pod {self.pod} {what}"
        if self.reason:
            text += f" ({self.reason})"
        if self.message:
            text += f": {self.message}"
        return text


# A pod deleted by someone else is judged this long after its deletion began, unless the pass read the job and its
# namespace from the API server (Observed.owners_live): when its job or its namespace is being deleted (the
# namespace controller deletes pods before the other objects), the pod's event can arrive through the watches
# before the job's or the namespace's, and that deletion is no failure. Both are marked deleted before any of
# their pods is, so a live read that finds neither deleted settles it at once.
DELETION_SETTLE_SECONDS = 2.0
TAINT_MANAGER = "DeletionByTaintManager"  # a DisruptionTarget reason


def deletion_started(pod: dict[str, Any]) -> datetime | None:
    """When the pod's deletion was asked for: its deletionTimestamp is that moment plus the grace period."""
    meta = pod["metadata"]
    deadline = parse_time(meta.get("deletionTimestamp"))
    if deadline is None:
        return None
    return deadline - timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))


def deletion_settling(found: list[Failure], now: datetime, owners_live: bool = False) -> float | None:
    """Seconds to wait before acting on these failures: only while every one is a deletion still settling, and the
    pass did not read the job and its namespace live (`owners_live`: neither is being deleted)."""
    if owners_live or not found or any(f.kind != DELETED or f.reason != "Terminating" or f.at is None for f in found):
        return None
    left = max(DELETION_SETTLE_SECONDS - (now - f.at).total_seconds() for f in found if f.at is not None)
    return left if left > 0 else None


def deletion_to_settle(pods: list[dict[str, Any]], attempt: int, now: datetime) -> bool:
    """Whether a pod of this attempt is being deleted by someone else and still inside DELETION_SETTLE_SECONDS: the
    one case in which the pass reads the job and its namespace from the API server (the operator deletes only the
    pods of earlier attempts, so their deletions cost no read)."""
    for pod in pods:
        meta = pod["metadata"]
        if str(attempt) != (meta.get("labels") or {}).get(LABEL_ATTEMPT):
            continue
        started = deletion_started(pod)
        if started is not None and (now - started).total_seconds() < DELETION_SETTLE_SECONDS:
            return True
    return False


def node_ready(node: dict[str, Any] | None) -> tuple[bool, datetime | None]:
    """(ready, since when not ready). A missing node is not ready since an unknown time."""
    if node is None:
        return False, None
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True", parse_time(cond.get("lastTransitionTime"))
    return False, None


def node_lost(pod: dict[str, Any], nodes: dict[str, dict], now: datetime, grace_seconds: float) -> bool:
    node_name = pod.get("spec", {}).get("nodeName")
    if not node_name:
        return False
    if node_name not in nodes:
        return True
    ready, since = node_ready(nodes[node_name])
    if ready:
        return False
    created = parse_time(pod["metadata"].get("creationTimestamp"))
    if since is not None and created is not None and since < created:
        # The node was already down when this pod was put on it: the pod never ran there, so restarting the
        # group would only put it back (a pinned nodeName) and burn the budget. It waits like any Pending pod.
        return False
    return since is None or (now - since).total_seconds() >= grace_seconds


def classify_pod_failure(
    pod: dict[str, Any], nodes: dict[str, dict], now: datetime, node_lost_grace_seconds: float
) -> Failure | None:
    """The pod's failure, or None while it is pending, running or succeeded on a healthy node."""
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Succeeded":
        return None
    if pod["metadata"].get("deletionTimestamp"):
        # The operator never deletes pods of the current attempt, so someone else did: an eviction (the
        # scheduler's preemption, the eviction API: DisruptionTarget) or a plain delete. The taint manager's
        # deletion (DeletionByTaintManager) follows a node's NoExecute taint, a lost or out-of-service node
        # mostly: a deletion, not a size the cluster took back (a node that returns is real room).
        disruption = _disruption(status)
        if disruption is not None and disruption.get("reason") != TAINT_MANAGER:
            return Failure(
                pod=name,
                kind=EVICTED,
                reason=disruption.get("reason") or "Evicted",
                message=_trim(disruption.get("message") or ""),
                at=deletion_started(pod) or now,
            )
        return Failure(pod=name, kind=DELETED, reason="Terminating", at=deletion_started(pod) or now)
    if phase == "Failed":
        return _terminated_failure(pod, now)
    if phase == "Unknown" or node_lost(pod, nodes, now, node_lost_grace_seconds):
        node = pod.get("spec", {}).get("nodeName", "")
        # Its ranks stopped when the node went NotReady, not when the grace let us call it lost.
        _, since = node_ready(nodes.get(node))
        at = since if since is not None and since <= now else now
        return Failure(pod=name, kind=NODE_LOST, reason="NodeNotReady", message=f"node {node} is not Ready", at=at)
    return None


def _terminated_failure(pod: dict[str, Any], now: datetime) -> Failure:
    name = pod["metadata"]["name"]
    status = pod.get("status") or {}
    if status.get("reason") == "Evicted" or _disrupted(status):
        return Failure(
            pod=name,
            kind=EVICTED,
            reason=status.get("reason") or "Evicted",
            message=_trim(status.get("message", "")),
            at=now,
        )
    terminated = _trainer_terminated(pod)
    if terminated is None:
        return Failure(
            pod=name, kind=UNKNOWN, reason=status.get("reason", ""), message=_trim(status.get("message", "")), at=now
        )
    if terminated.get("reason") == CONTAINER_STATUS_UNKNOWN:
        # The kubelet found no trace of the container (its runtime's state went with a node reboot, or the node was
        # replaced): whatever the code it fills in (137), nothing says the trainer ended it. The node's, as a loss.
        node = pod.get("spec", {}).get("nodeName", "")
        return Failure(
            pod=name,
            kind=NODE_LOST,
            reason=CONTAINER_STATUS_UNKNOWN,
            message=_trim(terminated.get("message") or f"the container vanished from node {node}"),
            at=parse_time(terminated.get("finishedAt")) or now,
        )
    code = terminated.get("exitCode")
    message = terminated.get("message", "")
    if worker_code_absent_and_rendezvous_failed(message):
        # torchrun's agent gave up forming the group (not all pods placed or reachable in joinTimeoutSeconds) and
        # exited 1: that 1 is no verdict on the trainer's code.
        return Failure(
            pod=name,
            kind=RENDEZVOUS,
            exit_code=code,
            reason="RendezvousClosed" if "RendezvousClosedError" in message else "RendezvousTimeout",
            message=_trim(_inner_message(message)),
            at=parse_time(terminated.get("finishedAt")) or now,
        )
    worker_code, worker_message = worker_root_cause(message)
    signalled = bool(terminated.get("signal"))
    if worker_code is not None:
        # torchrun exits 1 whenever any worker fails; the root-cause worker's own code is the real verdict.
        signalled = worker_code < 0
        code = 128 - worker_code if worker_code < 0 else worker_code
        message = worker_message or message
    kind = SIGNAL if signalled or (code is not None and code >= 128) else EXIT_CODE
    return Failure(
        pod=name,
        kind=kind,
        exit_code=code,
        reason=terminated.get("reason", ""),
        message=_trim(message),
        at=parse_time(terminated.get("finishedAt")) or now,
        in_place_restarts=in_place_restarts(terminated.get("message", "")),
    )


IN_PLACE_RESTARTS_KEY = "ddpjobInPlaceRestarts"  # ddp_trainer.torchrun writes it


def in_place_restarts_of(pod: dict[str, Any]) -> int:
    """The same, from the trainer container's termination, whatever its exit code (a success records it too)."""
    container = trainer_container(pod.get("spec", {}).get("containers", [])) or {}
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated and cs.get("name") == container.get("name"):
            return in_place_restarts(terminated.get("message", ""))
    return 0


def in_place_restarts(termination_message: str) -> int:
    """How often the pod's torchrun agent restarted its workers before it gave up, from its error record."""
    text = (termination_message or "").strip()
    if not text.startswith("{"):
        return 0
    try:
        value = json.loads(text).get(IN_PLACE_RESTARTS_KEY, 0)
    except (ValueError, AttributeError):
        return 0
    return value if isinstance(value, int) and value > 0 else 0


# What torchrun's @record leaves when its agent, not a worker, failed to form the group.
_RENDEZVOUS_FAILED = re.compile(r"Rendezvous(Timeout|Closed)Error|rendezvous .*timed out", re.I)


def _inner_message(text: str) -> str:
    """The message of torchrun's error-file JSON (not its call stack), or the text as it is."""
    try:
        inner = json.loads(text).get("message")
    except (ValueError, AttributeError):
        return text
    if isinstance(inner, dict):
        return str(inner.get("message") or text)
    return str(inner or text)


def worker_code_absent_and_rendezvous_failed(termination_message: str) -> bool:
    """The termination log says the rendezvous failed, and no worker's own exit code is in it."""
    if not _RENDEZVOUS_FAILED.search(termination_message or ""):
        return False
    code, _ = worker_root_cause(termination_message)
    return code is None


_EXITCODE_LINE = re.compile(r"exitcode\s*:\s*(-?\d+)")


def worker_root_cause(termination_message: str) -> tuple[int | None, str]:
    """The root-cause worker's exit code (negative: killed by that signal) and message, read from what torchrun
    leaves in the termination log: the error file JSON its @record writes (`message.errorCode`), or, when the
    worker died without one (SIGKILL), the "Root Cause" table of its log that FallbackToLogsOnError keeps."""
    text = (termination_message or "").strip()
    if text.startswith("{"):
        try:
            inner = json.loads(text).get("message")
        except (ValueError, AttributeError):
            inner = None
        if isinstance(inner, dict) and isinstance(inner.get("errorCode"), int):
            return inner["errorCode"], str(inner.get("message") or "")
    root = text.rfind("Root Cause")
    match = _EXITCODE_LINE.search(text, root if root >= 0 else 0)
    if match:
        table = text[root:] if root >= 0 else text
        cause = worker_last_lines(text)
        return int(match.group(1)), f"{cause}\n{table}" if cause else table
    return None, ""


# Where torchrun's own report of a failed worker begins in its log: its "failed (exitcode: N)" log line, or the
# ChildFailedError it raises. What comes before is the workers' output, the failing one's last lines included.
_TORCHRUN_REPORT = re.compile(r"^.*(?:elastic/multiprocessing/api\.py.*\] failed \(exitcode|ChildFailedError).*$", re.M)
WORKER_TAIL_LINES = 5
WORKER_TAIL_CHARS = 400


def worker_last_lines(log_tail: str) -> str:
    """The last lines a worker printed before torchrun reported it (at most WORKER_TAIL_LINES lines and
    WORKER_TAIL_CHARS characters): when the worker died outside @record (a missing script, an import error in a
    script of the user's, a crash in native code) it is the only line that says what to fix, e.g. `python: can't
    open file 'x.py': [Errno 2] No such file or directory`. Empty when the tail holds none."""
    report = _TORCHRUN_REPORT.search(log_tail)
    if report is None:
        return ""
    lines = [line for line in log_tail[: report.start()].splitlines() if line.strip()]
    tail = "\n".join(lines[-WORKER_TAIL_LINES:])
    return tail[-WORKER_TAIL_CHARS:]


def finished_step(pod: dict[str, Any]) -> int | None:
    """The final step worker 0's trainer left in its termination message on success (`{"finished": {"step": N}}`,
    ddp_trainer/final_step.py; tests/trainer/test_final_step.py holds the two equal), or None."""
    terminated = _trainer_terminated(pod) or {}
    text = (terminated.get("message") or "").strip()
    if terminated.get("exitCode") != 0 or not text.startswith("{"):
        return None
    try:
        step = (json.loads(text).get("finished") or {}).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def _disruption(status: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's DisruptionTarget=True condition, if any."""
    conditions = status.get("conditions") or []
    return next((c for c in conditions if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)


def _disrupted(status: dict[str, Any]) -> bool:
    return _disruption(status) is not None


def finished_at(pod: dict[str, Any]) -> datetime | None:
    """When the pod's trainer container ended, if its termination record says."""
    terminated = _trainer_terminated(pod)
    return parse_time(terminated.get("finishedAt")) if terminated else None


def _trainer_terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    container = trainer_container(pod.get("spec", {}).get("containers", [])) or {}
    statuses = pod.get("status", {}).get("containerStatuses") or []
    ordered = sorted(statuses, key=lambda s: s.get("name") != container.get("name"))
    for cs in ordered:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode", 0) != 0:
            return terminated
    for cs in ordered:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated:
            return terminated
    return None


def _trim(text: str) -> str:
    text = (text or "").strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


# 128 + SIGTERM: a process that stopped because it was asked to (the trainer's own "preempted, checkpoint written"
# exit, or torchrun passing on a SIGTERM). It is the answer to a cause, never the cause itself.
STOPPED_ON_REQUEST = 143
PEER_LOST = 142  # the trainer's own exit when the node it watches went silent (ddp_trainer/peer_watch.py)

# What a rank reports when another rank's process or node went away first: gloo's connection reset or closed by
# the peer (torch 2.15: "Read error [10.0.0.5]:47338: Connection reset by peer"), NCCL's remote error or aborted
# communicator, a socket the peer held. Such a failure is a symptom of a peer's, not a cause of its own.
# A closed rendezvous is one too: torchrun's agents close it as their run ends (success or not), and an agent that
# joins it then (a replacement starting as the group finishes) exits 1 with RendezvousClosedError. The agent that
# closed it is the cause: worker 0's, Succeeded a moment later (worker_0_done.py), or a failed one.
_PEER_GONE = re.compile(
    r"Connection (?:reset|closed) by peer|Broken pipe|remote process exited|ncclRemoteError"
    r"|NCCL communicator was aborted|DistNetworkError|RendezvousClosedError",
    re.I,
)


def peer_symptom(failure: Failure) -> bool:
    """The failure says a peer went away first: the trainer's PEER_LOST exit, a collective's message that the
    other end is gone, or an agent that found the group's rendezvous closed by the others."""
    return failure.exit_code == PEER_LOST or bool(_PEER_GONE.search(failure.message or ""))


# When the only failures are peers' symptoms (a collective's "Connection reset by peer"), the rank that died first
# is usually in a pod still shown Running: its torchrun agent notices the death at its next monitor tick and its
# pod ends a few seconds after the survivors'. Deciding at once would name a survivor as the cause and charge the
# wrong class; the decision waits this long from the first symptom for the pod that caused it, then goes ahead.
PEER_SETTLE_SECONDS = 10.0


def peer_symptoms_settling(found: list[Failure], pods: Iterable[dict[str, Any]], now: datetime) -> float | None:
    """Seconds to wait before acting on these failures: only while every one is a peer's symptom and another pod
    of the attempt (`pods`) still runs, up to PEER_SETTLE_SECONDS from the first."""
    if not found or not all(peer_symptom(f) and f.at is not None for f in found):
        return None
    failed = {f.pod for f in found}
    if not any(p["metadata"]["name"] not in failed and (p.get("status") or {}).get("phase") == "Running" for p in pods):
        return None
    first = min(f.at for f in found if f.at is not None)
    left = PEER_SETTLE_SECONDS - (now - first).total_seconds()
    return left if left > 0 else None


def root_cause(failures: list[Failure]) -> Failure:
    """A lost node or an eviction first; then anything but a stop on request (exit 143); then anything but a
    peer's symptom (a collective's connection reset by the peer); then the earliest. The others are usually peers
    noticing that a rank died (a gloo or NCCL connection reset is reported before the node's loss is, which needs
    its grace, and before the killed rank's own pod ends: its agent notices the death at its next monitor tick),
    or ranks that stopped together, checkpoint written, when one pod got SIGTERM: its deletion's time is when the
    kubelet finished it, which can be after its peers' exits."""
    return min(
        failures,
        key=lambda f: (
            f.kind not in (NODE_LOST, EVICTED),
            f.exit_code == STOPPED_ON_REQUEST,
            peer_symptom(f),
            f.at.timestamp() if f.at else float("inf"),
            _index(f.pod),
        ),
    )


def _index(pod: str) -> int:
    tail = pod.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0
