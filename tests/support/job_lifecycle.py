"""Carries one DDPJob through create -> pod failure -> group restart -> success on the real local cluster.
Pods on kwok nodes become Running by themselves; the test fails or succeeds them by patching their status with
the admin kubeconfig, as a kubelet would report a trainer's exit."""

from __future__ import annotations

import json

import yaml

from support.cluster import Cluster, wait_until

JOB_NAME = "chart-probe"


def job_manifest(name: str = JOB_NAME, replicas: int = 2) -> dict:
    return {
        "apiVersion": "ddpjob.dev/v1alpha1",
        "kind": "DDPJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "gpusPerReplica": 1,
            "runPolicy": {"backoffLimit": 3, "restartBackoffSeconds": 0},
            "template": {"spec": {"containers": [{
                "name": "trainer", "image": "ddp-trainer:test",
                "ports": [{"name": "metrics", "containerPort": 9400}],
            }]}},
        },
    }


def get_json(cluster: Cluster, ns: str, *what: str) -> dict:
    return json.loads(cluster.kubectl("-n", ns, "get", *what, "-o", "json").stdout)


def pods_of(cluster: Cluster, ns: str, name: str, attempt: int) -> list[dict]:
    return get_json(cluster, ns, "pods", "-l",
                    f"ddpjob.dev/job-name={name},ddpjob.dev/restart-attempt={attempt}")["items"]


def set_pod_terminated(cluster: Cluster, ns: str, pod: str, exit_code: int) -> None:
    phase = "Succeeded" if exit_code == 0 else "Failed"
    state = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}}
    patch = {"status": {"phase": phase, "containerStatuses": [{
        "name": "trainer", "image": "ddp-trainer:test", "imageID": "", "ready": False, "restartCount": 0,
        "state": state}]}}
    cluster.kubectl("-n", ns, "patch", "pod", pod, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def running(pods: list[dict], want: int) -> bool:
    return len(pods) == want and all((p.get("status") or {}).get("phase") == "Running" for p in pods)


def drive_through_restart(cluster: Cluster, ns: str, name: str = JOB_NAME, replicas: int = 2,
                          timeout: float = 90) -> dict:
    """Returns the finished DDPJob; fails with the last state seen if any step does not happen."""
    cluster.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(job_manifest(name, replicas)))
    wait_until(lambda: running(pods_of(cluster, ns, name, 0), replicas), timeout=timeout,
               what=f"{replicas} Running pods of attempt 0 of {ns}/{name}")
    set_pod_terminated(cluster, ns, f"{name}-worker-1", exit_code=1)
    wait_until(lambda: running(pods_of(cluster, ns, name, 1), replicas), timeout=timeout,
               what=f"{replicas} Running pods of attempt 1 (group restart) of {ns}/{name}")
    for index in range(replicas):
        set_pod_terminated(cluster, ns, f"{name}-worker-{index}", exit_code=0)
    return wait_until(
        lambda: (job := get_json(cluster, ns, "ddpjob", name)).get("status", {}).get("phase") == "Succeeded" and job,
        timeout=timeout, what=f"{ns}/{name} Succeeded")
