"""Watches one namespace's DDPJobs and pods for the whole of a chaos run and checks the invariants on every
event it sees, not only at the end: a pod count that is briefly too high or a status field that briefly goes
backwards is a violation even if the final state looks fine.

The watches survive an apiserver restart: on any error they re-list and watch again from the new list."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from ddpjob_operator.api import LABEL_ATTEMPT, LABEL_JOB_NAME

GROUP, VERSION, PLURAL = "ddpjob.dev", "v1alpha1", "ddpjobs"
LABEL_JOB = LABEL_JOB_NAME
TERMINAL = ("Succeeded", "Failed")
# Counters that only ever grow over a job's life.
MONOTONIC = ("attempt", "restarts", "platformRestarts", "launchedAttempt", "observedGeneration")


@dataclass
class JobView:
    uid: str
    replicas_bound: int  # the most replicas the job was ever asked for (spec or status)
    status: dict = field(default_factory=dict)
    spec: dict = field(default_factory=dict)
    generation: int = 0


class InvariantRecorder:
    def __init__(self, api: client.ApiClient, namespace: str):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.ns = namespace
        self.lock = threading.Lock()
        self.jobs: dict[str, JobView] = {}
        self.pods: dict[str, dict] = {}
        self.known_job_uids: set[str] = set()
        self.violations: list[str] = []
        self.watch_restarts = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(self._list_jobs, self._job_event), daemon=True,
                                          name="chaos-watch-jobs"),
                         threading.Thread(target=self._loop, args=(self._list_pods, self._pod_event), daemon=True,
                                          name="chaos-watch-pods")]
        self._synced = [threading.Event(), threading.Event()]

    # --- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> InvariantRecorder:
        for t in self._threads:
            t.start()
        for e in self._synced:
            e.wait(30)
        return self

    def stop(self) -> None:
        self._stop.set()

    # --- reads for the workload driver (from the watch cache: no API calls) ---------------------------------
    def job(self, name: str) -> JobView | None:
        with self.lock:
            return self.jobs.get(name)

    def pods_of(self, job: str) -> list[dict]:
        with self.lock:
            return [p for p in self.pods.values() if p["metadata"].get("labels", {}).get(LABEL_JOB) == job]

    def running_pods(self, job: str, attempt: int) -> list[dict]:
        return [p for p in self.pods_of(job)
                if p["metadata"]["labels"].get(LABEL_ATTEMPT) == str(attempt)
                and (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)

    # --- watch loops ----------------------------------------------------------------------------------------
    def _loop(self, lister, on_event) -> None:
        synced = self._synced[0 if on_event == self._job_event else 1]
        while not self._stop.is_set():
            try:
                items, rv = lister()
                for obj in items:
                    on_event("ADDED", obj, relisted=True)
                synced.set()
                w = watch.Watch()
                func = self.custom.list_namespaced_custom_object if on_event == self._job_event \
                    else self.core.list_namespaced_pod
                args = (GROUP, VERSION, self.ns, PLURAL) if on_event == self._job_event else (self.ns,)
                for ev in w.stream(func, *args, resource_version=rv, timeout_seconds=60, deserialize=False,
                                   allow_watch_bookmarks=False):
                    if self._stop.is_set():
                        w.stop()
                        return
                    if ev["type"] == "ERROR":
                        break
                    on_event(ev["type"], ev["raw_object"] if "raw_object" in ev else ev["object"], relisted=False)
            except Exception:  # apiserver down or watch expired: re-list once it answers again
                self.watch_restarts += 1
                time.sleep(0.5)

    def _list_jobs(self):
        out = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)
        return out["items"], out["metadata"]["resourceVersion"]

    def _list_pods(self):
        import json
        resp = self.core.list_namespaced_pod(self.ns, _preload_content=False)
        out = json.loads(resp.data)
        with self.lock:
            listed = {p["metadata"]["name"] for p in out["items"]}
            for name in list(self.pods):
                if name not in listed:
                    del self.pods[name]
        return out["items"], out["metadata"]["resourceVersion"]

    # --- invariants -----------------------------------------------------------------------------------------
    def _job_event(self, kind: str, job: dict, relisted: bool) -> None:
        meta, name = job["metadata"], job["metadata"]["name"]
        spec, status = job.get("spec") or {}, job.get("status") or {}
        with self.lock:
            if kind == "DELETED":
                self.jobs.pop(name, None)
                return
            self.known_job_uids.add(meta["uid"])
            view = self.jobs.get(name)
            if view is None or view.uid != meta["uid"]:
                view = self.jobs[name] = JobView(uid=meta["uid"], replicas_bound=0)
            view.replicas_bound = max(view.replicas_bound, int(spec.get("replicas", 1)),
                                      int(status.get("replicas", 0) or 0))
            self._check_status_forward(name, view.status, status)
            view.status, view.spec, view.generation = status, spec, meta.get("generation", 0)

    def _check_status_forward(self, name: str, old: dict, new: dict) -> None:
        for key in MONOTONIC:
            if key in old and new.get(key, -1) < old[key]:
                self.violations.append(f"{name}: status.{key} went backwards {old[key]} -> {new.get(key)}")
        if old.get("phase") in TERMINAL and new.get("phase") != old["phase"]:
            self.violations.append(f"{name}: left terminal phase {old['phase']} for {new.get('phase')}")
        if old.get("completionTime") and new.get("completionTime") != old["completionTime"]:
            self.violations.append(f"{name}: completionTime changed {old['completionTime']} -> "
                                   f"{new.get('completionTime')}")
        old_step = (old.get("progress") or {}).get("step")
        new_step = (new.get("progress") or {}).get("step")
        if old_step is not None and (new_step is None or new_step < old_step) and \
                new.get("attempt") == old.get("attempt"):
            self.violations.append(f"{name}: progress.step went backwards {old_step} -> {new_step}")

    def _pod_event(self, kind: str, pod: dict, relisted: bool) -> None:
        meta, name = pod["metadata"], pod["metadata"]["name"]
        with self.lock:
            if kind == "DELETED":
                self.pods.pop(name, None)
                return
            self.pods[name] = pod
            job = meta.get("labels", {}).get(LABEL_JOB)
            if job is None:
                return
            owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
            if kind == "ADDED" and not relisted and (len(owners) != 1 or owners[0].get("kind") != "DDPJob"):
                self.violations.append(f"pod {name} was created without a DDPJob controller: {owners}")
            view = self.jobs.get(job)
            count = sum(1 for p in self.pods.values() if p["metadata"].get("labels", {}).get(LABEL_JOB) == job)
            bound = view.replicas_bound if view else None
            if bound is not None and count > bound:
                self.violations.append(f"job {job}: {count} pods exist, more than its {bound} replicas")

    def check_owners_live(self) -> None:
        """Every pod left in the namespace is controlled by a DDPJob that exists now (fresh reads)."""
        live = {j["metadata"]["uid"] for j in self._list_jobs()[0]}
        for pod in self._list_pods()[0]:
            owners = [o["uid"] for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")]
            if not owners or owners[0] not in live:
                self.violation(f"pod {pod['metadata']['name']} has no live owner ({owners})")
