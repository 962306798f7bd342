"""kubectl bound to one test namespace, with the waits and status patches the operator tests share."""

from __future__ import annotations

import json
import time

from support.cluster import wait_until


class Kube:
    """kubectl in one namespace, returning parsed JSON where that helps."""

    def __init__(self, cluster, namespace: str):
        self.cluster = cluster
        self.ns = namespace

    def __call__(self, *args: str, check: bool = True, input: str | None = None):
        return self.cluster.kubectl("-n", self.ns, *args, check=check, input=input)

    def apply(self, manifest: dict | str):
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self("apply", "-f", "-", input=text)

    def get(self, kind: str, name: str | None = None) -> dict | None:
        args = ["get", kind] + ([name] if name else []) + ["-o", "json"]
        res = self(*args, check=False)
        if res.returncode != 0:
            if "NotFound" in res.stderr:
                return None
            raise AssertionError(res.stderr)
        return json.loads(res.stdout)

    def job(self, name: str) -> dict | None:
        return self.get("ddpjob", name)

    def status(self, name: str) -> dict:
        return (self.job(name) or {}).get("status") or {}

    def pods(self, job: str) -> list[dict]:
        res = self("get", "pods", "-l", f"ddpjob.dev/job-name={job}", "-o", "json")
        return json.loads(res.stdout)["items"]

    def wait_status(self, name: str, predicate, timeout: float = 60, what: str = "status"):
        return wait_until(lambda: predicate(self.status(name)) and self.status(name), timeout=timeout,
                          interval=0.3, what=f"{name}: {what}")

    def wait_phase(self, name: str, phase: str, timeout: float = 60) -> dict:
        return self.wait_status(name, lambda s: s.get("phase") == phase, timeout, f"phase {phase}")

    def running_pods(self, job: str, attempt: int, n: int, timeout: float = 60) -> list[dict]:
        def ready():
            pods = [p for p in self.pods(job)
                    if p["metadata"]["labels"].get("ddpjob.dev/restart-attempt") == str(attempt)
                    and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
            return pods if len(pods) == n else None
        return wait_until(ready, timeout=timeout, interval=0.3, what=f"{n} running pods of {job} attempt {attempt}")

    def fail_pod(self, pod: str, exit_code: int = 1, message: str = "boom", reason: str = "Error") -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = {"status": {"phase": "Failed", "containerStatuses": [{
            "name": "trainer", "ready": False, "restartCount": 0, "image": "example.invalid/trainer:1",
            "imageID": "", "state": {"terminated": {"exitCode": exit_code, "reason": reason, "message": message,
                                                    "startedAt": now, "finishedAt": now}}}]}}
        self("patch", "pod", pod, "--subresource=status", "--type=merge", "-p", json.dumps(patch))

    def succeed_pod(self, pod: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch = {"status": {"phase": "Succeeded", "containerStatuses": [{
            "name": "trainer", "ready": False, "restartCount": 0, "image": "example.invalid/trainer:1",
            "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                    "startedAt": now, "finishedAt": now}}}]}}
        self("patch", "pod", pod, "--subresource=status", "--type=merge", "-p", json.dumps(patch))

    def events(self, name: str) -> list[dict]:
        items = self.get("events")["items"]
        return [e for e in items if e["involvedObject"].get("name") == name
                and e["involvedObject"].get("kind") == "DDPJob"]
