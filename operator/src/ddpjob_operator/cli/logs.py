"""`kubectl ddpj logs`: every rank of every pod of a job, merged, each line prefixed with its attempt, worker and
rank. With follow it picks up the pods of new attempts and replacement pods as they start, and ends when the job
has ended and every stream is done.

A pod already gone (a failed attempt's, a replaced one's) has no log left to read; what survives it is what the
operator kept with its failure: the last lines torchrun's entrypoint put in the termination message, up to 300
characters per recovery in status.recoveries (the last 10) and 1,024 in status.lastFailure. Those are printed in its
place, marked as kept. The cost is a few KiB of status per job."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from .. import api

RANK = re.compile(r"(?:\brank=(\d+)\]|^\[rank(\d+)\]:|\[default(\d+)\]:)")
WAIT_SECONDS = 1.0


def rank_of(line: str) -> int | None:
    """The global rank a trainer line names: the harness's `[job=.. attempt=.. rank=N]`, or torchrun's `[rankN]:` and
    `[defaultN]:` prefixes (the latter a local rank, the best the line says)."""
    m = RANK.search(line)
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))


def prefix(pod: dict[str, Any], rank: int | None) -> str:
    labels = pod["metadata"].get("labels") or {}
    who = f"a{labels.get(api.LABEL_ATTEMPT, '?')} w{labels.get(api.LABEL_REPLICA_INDEX, '?')}"
    return f"[{who} r{'?' if rank is None else rank}]"


def container_started(pod: Any) -> bool:
    """Whether the pod's trainer container has started (it runs, or ran and ended): only then is there a log."""
    if not pod.spec.node_name:
        return False
    for status in pod.status.container_statuses or []:
        if status.name == api.TRAINER_CONTAINER:
            state = status.state
            return bool(state and (state.running or state.terminated) or (status.restart_count or 0) > 0)
    return False


def wanted(line_rank: int | None, rank: int | None) -> bool:
    return rank is None or line_rank == rank


def list_pods(core: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    """The job's pods (every attempt), as plain dicts."""
    listed = core.list_namespaced_pod(namespace, label_selector=f"{api.LABEL_JOB_NAME}={job}")
    return [core.api_client.sanitize_for_serialization(p) for p in listed.items]


class Follower:
    def __init__(
        self,
        core: Any,
        custom: Any,
        namespace: str,
        job: str,
        rank: int | None = None,
        attempt: int | None = None,
        since_seconds: int | None = None,
        follow: bool = False,
        out: Callable[[str], None] = print,
    ):
        self.core, self.custom, self.namespace, self.job = core, custom, namespace, job
        self.rank, self.attempt, self.since, self.follow = rank, attempt, since_seconds, follow
        self._out = out
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._kept_shown: set[str] = set()

    def emit(self, text: str) -> None:
        with self._lock:
            self._out(text)

    def run(self) -> None:
        while True:
            job = self.custom.get_namespaced_custom_object(api.GROUP, api.VERSION, self.namespace, api.PLURAL, self.job)
            pods = self._pods()
            for pod in pods:
                uid = pod["metadata"]["uid"]
                if uid not in self._threads:
                    t = threading.Thread(target=self._stream, args=(pod,), daemon=True, name=pod["metadata"]["name"])
                    self._threads[uid] = t
                    t.start()
            self._show_kept(job, {p["metadata"]["name"] for p in pods})
            ended = (job.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if not self.follow or ended:
                for t in list(self._threads.values()):
                    t.join()
                return
            time.sleep(WAIT_SECONDS)

    def _pods(self) -> list[dict[str, Any]]:
        pods = list_pods(self.core, self.namespace, self.job)
        if self.attempt is not None:
            pods = [p for p in pods if p["metadata"]["labels"].get(api.LABEL_ATTEMPT) == str(self.attempt)]
        return sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))

    def _stream(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        # A pod not yet bound has no log and the API server answers that with an empty 200, not an error: a follow
        # begun then would end at once and miss the whole pod. So a follow first waits for the container to start.
        if self.follow and not self._wait_started(pod):
            return
        while True:
            try:
                response = self.core.read_namespaced_pod_log(
                    name,
                    self.namespace,
                    container=api.TRAINER_CONTAINER,
                    follow=self.follow,
                    since_seconds=self.since,
                    _preload_content=False,
                )
                break
            except ApiException as e:
                # 400: no log yet (the container is being restarted); wait for it while following.
                if e.status == 400 and self.follow and self._wait_started(pod):
                    time.sleep(WAIT_SECONDS)
                    continue
                if e.status != 404:
                    self.emit(f"{prefix(pod, None)} (no log: {e.reason})")
                return
        try:
            for raw in response:
                line = raw.decode(errors="replace").rstrip("\n")
                rank = rank_of(line)
                if wanted(rank, self.rank):
                    self.emit(f"{prefix(pod, rank)} {line}")
        finally:
            response.release_conn()

    def _wait_started(self, pod: dict[str, Any]) -> bool:
        """Wait until the trainer container of this pod (this uid) has run; False once the pod is gone or ended
        without it ever starting."""
        while True:
            try:
                now = self.core.read_namespaced_pod(pod["metadata"]["name"], self.namespace)
            except ApiException:
                return False
            if now.metadata.uid != pod["metadata"]["uid"]:
                return False
            if container_started(now):
                return True
            if now.status.phase not in ("Pending", "Running"):
                return False
            time.sleep(WAIT_SECONDS)

    def _show_kept(self, job: dict[str, Any], present: set[str]) -> None:
        status = job.get("status") or {}
        kept = [(r.get("pod"), r.get("attempt"), r.get("message")) for r in status.get("recoveries") or []]
        failure = status.get("lastFailure") or {}
        if failure.get("pod"):
            kept.append((failure["pod"], status.get("attempt"), failure.get("message")))
        for pod, attempt, message in kept:
            if not pod or not message or pod in present or pod in self._kept_shown or pod in self._streamed_names():
                continue
            if self.attempt is not None and attempt != self.attempt:
                continue
            self._kept_shown.add(pod)
            for line in message.splitlines():
                rank = rank_of(line)
                if wanted(rank, self.rank):
                    self.emit(
                        f"[a{attempt} {pod} r{'?' if rank is None else rank}] (gone; kept by the operator) {line}"
                    )

    def _streamed_names(self) -> set[str]:
        return {t.name for t in self._threads.values()}
