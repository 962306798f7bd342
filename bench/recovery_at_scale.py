"""Recovery at scale: fail a fraction of the Running pods at once (their status patched to Failed, as a kubelet
would report an OOM kill) and time, per affected group, the restart decision and the new attempt Running."""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster_watch import JOB_LABEL, NamespaceWatch
from progress_lines import say
from scale_run import wait_groups_running

FAILED_STATUS = {
    "phase": "Failed",
    "containerStatuses": [
        {
            "name": "trainer",
            "ready": False,
            "restartCount": 0,
            "image": "bench/ddp-trainer:none",
            "imageID": "",
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
        }
    ],
}


def fail_pods(core: client.CoreV1Api, namespace: str, victims: list[tuple[str, str]]) -> dict[str, float]:
    """Patch each (pod, uid) to Failed; the uid in the patch is a precondition, so a pod of a newer attempt
    that took the same name is never failed by mistake. Returns pod -> time the API acknowledged it."""
    acknowledged: dict[str, float] = {}

    def one(victim: tuple[str, str]) -> None:
        name, uid = victim
        try:
            _ = core.patch_namespaced_pod_status(
                name, namespace, {"metadata": {"uid": uid}, "status": FAILED_STATUS}, _preload_content=False
            ).data
            acknowledged[name] = time.monotonic()
        except ApiException as exc:
            if exc.status not in (404, 409, 422):  # gone, or the name is a newer pod's
                raise

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, victims))
    return acknowledged


def measure_recovery(admin: client.ApiClient, fraction: float, pods_per_job: int, timeout: float, seed: int = 7):
    def run(watch: NamespaceWatch, names: list[str], namespace: str, runner=None) -> dict:
        core = client.CoreV1Api(admin)
        time.sleep(3)  # let the last status writes of the creation wave land
        pods = core.list_namespaced_pod(namespace, _preload_content=False)
        items = json.loads(pods.data)["items"]
        running = [p for p in items if (p.get("status") or {}).get("phase") == "Running"]
        chosen = random.Random(seed).sample(running, int(len(running) * fraction))
        victims = [(p["metadata"]["name"], p["metadata"]["uid"]) for p in chosen]
        job_of = {p["metadata"]["name"]: p["metadata"]["labels"][JOB_LABEL] for p in chosen}
        say(f"recovery: failing {len(victims)} of {len(running)} Running pods at once")
        started = time.monotonic()
        acknowledged = fail_pods(core, namespace, victims)
        say(f"  {len(acknowledged)} failures acknowledged by the API in {time.monotonic() - started:.1f}s")
        failed_at: dict[str, float] = {}
        for pod, at in acknowledged.items():
            job = job_of[pod]
            failed_at[job] = min(at, failed_at.get(job, at))
        affected = sorted(failed_at)
        ok = wait_groups_running(
            watch, affected, pods_per_job, timeout, "recovery", attempt_of={j: 1 for j in affected}
        )
        decisions, recoveries = [], []
        for job in affected:
            decided = watch.attempt_time(job, 1)
            if decided is not None:
                decisions.append(decided - failed_at[job])
            running_at = watch.all_running_at(job, 1, pods_per_job)
            if running_at is not None:
                recoveries.append(running_at - failed_at[job])
        say(f"  recovered {len(recoveries)}/{len(affected)} groups")
        return {
            "failed_pods": len(acknowledged),
            "pods_running_before": len(running),
            "affected_groups": len(affected),
            "recovered_groups": len(recoveries),
            "timed_out": not ok,
            "decision_latency_seconds": sorted(decisions),
            "recovery_seconds": sorted(recoveries),
        }

    return run
