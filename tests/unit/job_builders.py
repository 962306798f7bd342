"""Small fluent builders for DDPJobs, pods and nodes as the API server returns them (plain dicts)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

from ddpjob_operator import api
from ddpjob_operator.recovery import replica_groups
from ddpjob_operator.state.plan import Observed
from ddpjob_operator.timefmt import format_time

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
NS = "ns"
UID = "uid-1"


def ago(seconds: float) -> str:
    return format_time(NOW - timedelta(seconds=seconds))


class JobBuilder:
    def __init__(self, name: str):
        self.obj: dict[str, Any] = {
            "apiVersion": api.API_VERSION, "kind": api.KIND,
            "metadata": {"name": name, "namespace": NS, "uid": UID, "generation": 1, "resourceVersion": "1",
                         "creationTimestamp": ago(60)},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "trainer", "image": "example.invalid/trainer:1"}]}}},
        }

    def _run(self) -> dict:
        return self.obj["spec"].setdefault("runPolicy", {})

    def replicas(self, n: int) -> JobBuilder:
        self.obj["spec"]["replicas"] = n
        return self

    def elastic(self, lo: int, hi: int, max_restarts: int = 0) -> JobBuilder:
        self.obj["spec"]["elastic"] = {"minReplicas": lo, "maxReplicas": hi, "maxRestarts": max_restarts}
        return self

    def gpus(self, n: int) -> JobBuilder:
        self.obj["spec"]["gpusPerReplica"] = n
        return self

    def nproc(self, value) -> JobBuilder:
        self.obj["spec"]["nprocPerNode"] = value
        return self

    def restart_policy(self, policy: str) -> JobBuilder:
        self.obj["spec"]["restartPolicy"] = policy
        return self

    def backoff_limit(self, n: int) -> JobBuilder:
        self._run()["backoffLimit"] = n
        return self

    def restart_backoff(self, seconds: int) -> JobBuilder:
        self._run()["restartBackoffSeconds"] = seconds
        return self

    def deadline(self, seconds: int) -> JobBuilder:
        self._run()["activeDeadlineSeconds"] = seconds
        return self

    def ttl(self, seconds: int) -> JobBuilder:
        self._run()["ttlSecondsAfterFinished"] = seconds
        return self

    def clean_pod_policy(self, policy: str) -> JobBuilder:
        self._run()["cleanPodPolicy"] = policy
        return self

    def suspend(self, value: bool = True) -> JobBuilder:
        self._run()["suspend"] = value
        return self

    def shm_size(self, size: str) -> JobBuilder:
        self.obj["spec"]["shmSize"] = size
        return self

    def pod_spec(self, **fields) -> JobBuilder:
        """Fields of the template's pod spec itself (volumes, terminationGracePeriodSeconds, ...)."""
        self.obj["spec"]["template"]["spec"].update(fields)
        return self

    def container(self, **fields) -> JobBuilder:
        self.obj["spec"]["template"]["spec"]["containers"][0].update(fields)
        return self

    def status(self, **fields) -> JobBuilder:
        self.obj.setdefault("status", {}).update(fields)
        return self

    def running(self, attempt: int = 0, restarts: int = 0, replicas: int | None = None) -> JobBuilder:
        """A job in the steady state of `attempt` (as the planner would have left it)."""
        n = replicas if replicas is not None else self.obj["spec"]["replicas"]
        return self.status(phase="Running", attempt=attempt, restarts=restarts, replicas=n, readyReplicas=n,
                           readyText=f"{n}/{n}", selector=api.selector(self.obj["metadata"]["name"]),
                           worldSize=n, launchedAttempt=attempt, startTime=ago(30), desiredReplicas=n,
                           sizeText=f"{n}/{n}", placement="PodByPod", reason="AllPodsRunning",
                           conditions=[{"type": "Running", "status": "True", "reason": "AllPodsRunning",
                                        "message": "", "lastTransitionTime": ago(30)}])

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


def make_job(name: str = "a") -> JobBuilder:
    return JobBuilder(name)


class PodBuilder:
    def __init__(self, job: str, index: int, attempt: int):
        self.obj: dict[str, Any] = {
            "metadata": {"name": api.worker_name(job, index), "namespace": NS, "uid": f"pod-{index}-{attempt}",
                         "labels": {api.LABEL_JOB_NAME: job, api.LABEL_REPLICA_INDEX: str(index),
                                    api.LABEL_ATTEMPT: str(attempt)},
                         "ownerReferences": [{"uid": UID, "controller": True}],
                         "finalizers": [api.TRACKING_FINALIZER], "creationTimestamp": ago(900)},
            "spec": {"nodeName": "node-0", "containers": [{"name": "trainer", "image": "x"}]},
            "status": {"phase": "Running"},
        }

    def pending(self) -> PodBuilder:
        self.obj["status"] = {"phase": "Pending"}
        self.obj["spec"].pop("nodeName", None)
        return self

    def on_node(self, node: str) -> PodBuilder:
        self.obj["spec"]["nodeName"] = node
        return self

    def succeeded(self, finished: float | None = None) -> PodBuilder:
        terminated = {"exitCode": 0, "reason": "Completed"}
        if finished is not None:
            terminated["finishedAt"] = ago(finished)
        self.obj["status"] = {"phase": "Succeeded", "containerStatuses": [
            {"name": "trainer", "state": {"terminated": terminated}}]}
        return self

    def failed(self, exit_code: int = 1, signal: int | None = None, reason: str = "Error", message: str = "",
               finished: float = 5) -> PodBuilder:
        terminated = {"exitCode": exit_code, "reason": reason, "message": message, "finishedAt": ago(finished)}
        if signal:
            terminated["signal"] = signal
        self.obj["status"] = {"phase": "Failed",
                              "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}]}
        return self

    def evicted(self) -> PodBuilder:
        self.obj["status"] = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."}
        return self

    def created(self, seconds_ago: float) -> PodBuilder:
        self.obj["metadata"]["creationTimestamp"] = ago(seconds_ago)
        return self

    def untracked(self) -> PodBuilder:
        self.obj["metadata"]["finalizers"] = []
        return self

    def terminating(self, since: float = 0) -> PodBuilder:
        self.obj["metadata"]["deletionTimestamp"] = ago(since)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


def make_pod(job: str = "a", index: int = 0, attempt: int = 0) -> PodBuilder:
    return PodBuilder(job, index, attempt)


def make_node(name: str = "node-0", ready: bool = True, since: float = 600) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"conditions": [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ago(since)}]}}


def running_pods(job: str, n: int, attempt: int = 0) -> list[dict[str, Any]]:
    return [make_pod(job, i, attempt).build() for i in range(n)]


def observe(job: dict, pods: list[dict] | None = None, nodes: list[dict] | None = None,
            service: bool = True, now: datetime = NOW) -> Observed:
    nodes = nodes if nodes is not None else [make_node()]
    workers, lighthouses = replica_groups.split(pods or [])  # as the watch cache tells them apart
    return Observed(job=job, pods=workers, nodes={n["metadata"]["name"]: n for n in nodes},
                    service_exists=service, now=now, lighthouses=lighthouses)
