"""Timestamps of what the benchmark waits for, taken from two raw watches (pods and DDPJobs of one namespace)
run by the admin, who is neither measured party. Raw JSON lines, not the client's models: decoding thousands of
V1Pod models would make the observer, not the system, the bottleneck on 2 cores."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from ddpjob_operator.api import LABEL_ATTEMPT, LABEL_JOB_NAME

JOB_LABEL = LABEL_JOB_NAME
ATTEMPT_LABEL = LABEL_ATTEMPT


class NamespaceWatch:
    def __init__(self, api_client: client.ApiClient, namespace: str):
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.lock = threading.Lock()
        # (job, attempt) -> {pod name: first time seen Running}
        self.running: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
        self.pods_running_now: set[str] = set()
        # job -> {attempt: first time the job's status carried it}, job -> phase now
        self.attempt_seen: dict[str, dict[int, float]] = defaultdict(dict)
        self.phase: dict[str, str] = {}
        self.events = 0
        self.reconnects = 0
        self._responses: list[Any] = []  # urllib3 responses of the open watches
        self._threads: list[threading.Thread] = []
        self._stopping = False

    def start(self) -> NamespaceWatch:
        listers = [
            lambda **kw: self.core.list_namespaced_pod(self.namespace, _preload_content=False, **kw),
            lambda **kw: self.custom.list_namespaced_custom_object(
                "ddpjob.dev", "v1alpha1", self.namespace, "ddpjobs", _preload_content=False, **kw
            ),
        ]
        for lister, handle in zip(listers, (self._pod, self._job), strict=True):
            thread = threading.Thread(target=self._pump, args=(lister, handle), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping = True
        for response in list(self._responses):
            with contextlib.suppress(Exception):  # already closed by the server
                response.shutdown() if hasattr(response, "shutdown") else response.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _pump(self, lister, handle) -> None:
        """List, then watch from that resourceVersion, and resume from the last one seen whenever the stream
        ends: on a starved 2-core VM the API server closes watchers it finds unresponsive ("Forcing watcher
        close due to unresponsiveness"), and a silent end would freeze the benchmark's view."""
        version = self._relist(lister, handle)
        while not self._stopping:
            response = lister(watch=True, resource_version=version, allow_watch_bookmarks=True, timeout_seconds=600)
            self._responses.append(response)
            try:
                for line in iter_resp_lines(response):
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":  # 410 Gone: our version is too old, list again
                        version = self._relist(lister, handle)
                        break
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] == "BOOKMARK":
                        continue
                    now = time.monotonic()
                    with self.lock:
                        self.events += 1
                        handle(event["type"], obj, now)
            except Exception:
                if self._stopping:
                    return
                time.sleep(0.5)
            finally:
                self._responses.remove(response)
            if not self._stopping:
                self.reconnects += 1

    def _relist(self, lister, handle) -> str:
        listed = json.loads(lister().data)
        now = time.monotonic()
        with self.lock:
            for obj in listed["items"]:
                handle("MODIFIED", obj, now)
        return listed["metadata"]["resourceVersion"]

    def _pod(self, kind: str, pod: dict, now: float) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        name = meta["name"]
        running = (
            kind != "DELETED"
            and (pod.get("status") or {}).get("phase") == "Running"
            and not meta.get("deletionTimestamp")
        )
        if not running:
            self.pods_running_now.discard(name)
            return
        self.pods_running_now.add(name)
        key = (labels.get(JOB_LABEL, ""), int(labels.get(ATTEMPT_LABEL, "0")))
        self.running[key].setdefault(name, now)

    def _job(self, kind: str, job: dict, now: float) -> None:
        name = job["metadata"]["name"]
        if kind == "DELETED":
            return
        status = job.get("status") or {}
        if "attempt" in status:
            self.attempt_seen[name].setdefault(int(status["attempt"]), now)
        if status.get("phase"):
            self.phase[name] = status["phase"]

    # --- queries (thread-safe snapshots) ---------------------------------------------------------------------
    def all_running_at(self, job: str, attempt: int, pods: int) -> float | None:
        with self.lock:
            seen = self.running.get((job, attempt), {})
            return max(seen.values()) if len(seen) >= pods else None

    def count_groups_running(self, jobs: list[str], attempt_of: dict[str, int], pods: int) -> int:
        with self.lock:
            return sum(1 for j in jobs if len(self.running.get((j, attempt_of.get(j, 0)), {})) >= pods)

    def count_phase(self, jobs: list[str], phase: str) -> int:
        with self.lock:
            return sum(1 for j in jobs if self.phase.get(j) == phase)

    def attempt_time(self, job: str, attempt: int) -> float | None:
        with self.lock:
            return self.attempt_seen.get(job, {}).get(attempt)
