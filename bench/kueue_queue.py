"""Queue throughput under Kueue (issue 22): a throw-away kwok cluster with Kueue's manager (hack/kueue.sh), a
ClusterQueue with quota for Q jobs, N jobs of 2 pods x 8 GPUs submitted at once, each finishing a fixed simulated
time after all its pods run (this script marks them Succeeded, as a trainer that ends would).

Measured, for each party: the time from a quota freeing (a job's pods ending) to the next job Running (both pods
Running), p50 and p95, and the whole queue's makespan (the first submission to the last job ending).

The baseline, in the same run, on the same cluster and the same Kueue: Kueue's built-in batch/v1 Job integration,
with 2-pod Jobs (parallelism = completions = 2) of the same shape. Its pods are created by the kube-controller-
manager's Job controller once Kueue unsuspends the Job; a DDPJob's by the operator once Kueue admits its Workload.

Usage: bench/kueue_queue.py --out bench/results/kueue_queue.json [--jobs 100 --quota 10 --run-seconds 10]"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

from bench_cluster import ROOT, BenchCluster
from latency_stats import percentile
from machine import describe_machine
from progress_lines import say
from scale_run import Party, create_namespace, ddpjob, succeed_pod

PODS, GPUS = 2, 8
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PORTS = {"KUEUE_WEBHOOK_PORT": "49443", "KUEUE_METRICS_PORT": "48080", "KUEUE_HEALTH_PORT": "48081"}


def queue_objects(name: str, namespace: str, gpus: int) -> list[dict]:
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": "StrictFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [{"name": name, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "q", "namespace": namespace},
            "spec": {"clusterQueue": name},
        },
    ]


def batch_job(name: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "q"}},
        "spec": {
            "parallelism": PODS,
            "completions": PODS,
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"bench-job": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "bench/ddp-trainer:none",
                            "resources": {"limits": {"nvidia.com/gpu": str(GPUS)}},
                        }
                    ],
                },
            },
        },
    }


def queued_ddpjob(name: str) -> dict:
    job = ddpjob(name, PODS, GPUS)
    job["metadata"]["labels"] = {QUEUE_LABEL: "q"}
    return job


def run_case(cluster: BenchCluster, api: client.ApiClient, party_name: str, a, log_dir: Path) -> dict:
    core, custom, batch = client.CoreV1Api(api), client.CustomObjectsApi(api), client.BatchV1Api(api)
    namespace = f"bench-kq-{party_name}"
    create_namespace(core, namespace)
    cluster.kubectl_apply(
        json.dumps(
            {"apiVersion": "v1", "kind": "List", "items": queue_objects(namespace, namespace, a.quota * PODS * GPUS)}
        )
    )
    party = Party(party_name, cluster, namespace, log_dir) if party_name == "operator" else None
    if party is not None:
        party.start()
    label = "ddpjob.dev/job-name" if party_name == "operator" else "bench-job"
    names = [f"q{i:03d}" for i in range(a.jobs)]
    submitted = time.monotonic()
    for name in names:
        if party is not None:
            custom.create_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs", queued_ddpjob(name))
        else:
            batch.create_namespaced_job(namespace, batch_job(name))
    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    most_running = 0
    next_line = time.monotonic() + 10
    while len(ended) < len(names):
        now = time.monotonic()
        if now - submitted > a.timeout_seconds:
            raise RuntimeError(f"{party_name}: {len(ended)}/{len(names)} jobs ended in {a.timeout_seconds}s")
        running: dict[str, list[str]] = {}
        for pod in core.list_namespaced_pod(namespace, label_selector=label).items:
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp:
                running.setdefault(pod.metadata.labels[label], []).append(pod.metadata.name)
        most_running = max(most_running, sum(1 for pods in running.values() if len(pods) == PODS))
        for job, pods in running.items():
            if len(pods) == PODS and job not in started:
                started[job] = now
            if job in started and job not in ended and now - started[job] >= a.run_seconds:
                for pod in pods:
                    succeed_pod(core, namespace, pod)
                ended[job] = time.monotonic()  # the quota frees from here: its pods have ended
        if now >= next_line:
            say(f"  {party_name}: {len(started)} started, {len(ended)} ended, {now - submitted:.0f}s")
            next_line += 10
        time.sleep(0.2)
    makespan = max(ended.values()) - submitted
    if party is not None:
        party.stop()
    starts = sorted(started.values())
    ends = sorted(ended.values())
    # FIFO with Q slots: the (Q+k)-th start took the slot the k-th end gave back.
    handoffs = sorted(starts[a.quota + k] - ends[k] for k in range(len(starts) - a.quota))
    result = {
        "party": party_name,
        "handoff_p50_seconds": round(percentile(handoffs, 50) or 0.0, 2),
        "handoff_p95_seconds": round(percentile(handoffs, 95) or 0.0, 2),
        "makespan_seconds": round(makespan, 1),
        "most_jobs_running_at_once": most_running,
        "handoffs": len(handoffs),
    }
    say(
        f"{party_name}: handoff p50 {result['handoff_p50_seconds']}s p95 {result['handoff_p95_seconds']}s, "
        f"makespan {result['makespan_seconds']}s, at most {most_running} jobs at once (quota {a.quota})"
    )
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--quota", type=int, default=10, help="jobs the ClusterQueue's quota holds at once")
    p.add_argument("--run-seconds", type=float, default=10, help="simulated training time of each job")
    p.add_argument("--nodes", type=int, default=0, help="kwok nodes x 8 GPUs (default: room for the quota, +2)")
    p.add_argument("--timeout-seconds", type=float, default=1800)
    p.add_argument("--cluster-dir", default=None)
    a = p.parse_args()
    nodes = a.nodes or a.quota * PODS + 2  # room is never the limit: the quota is
    cluster = BenchCluster(Path(a.cluster_dir or tempfile.mkdtemp(prefix="ddpjob-kq-")), nodes, GPUS)
    cluster.up()
    env = {**cluster.env, **KUEUE_PORTS, "KUEUE_PODS_READY_TIMEOUT": "5m"}
    log_dir = Path(tempfile.mkdtemp(prefix="ddpjob-kq-logs-"))
    try:
        subprocess.run(["bash", str(ROOT / "hack" / "kueue.sh"), "up"], env=env, check=True)
        api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        baseline = run_case(cluster, api, "baseline", a, log_dir)
        operator = run_case(cluster, api, "operator", a, log_dir)
    finally:
        subprocess.run(["bash", str(ROOT / "hack" / "kueue.sh"), "down"], env=env, check=False)
        cluster.down()
    result = {
        "machine": describe_machine(),
        "setup": {
            "jobs": a.jobs,
            "pods_per_job": PODS,
            "gpus_per_pod": GPUS,
            "quota_jobs": a.quota,
            "run_seconds": a.run_seconds,
            "nodes": nodes,
            "kueue": "v0.19.2",
        },
        "baseline_batch_job": baseline,
        "operator_ddpjob": operator,
        "handoff_p50_ratio": round(operator["handoff_p50_seconds"] / max(baseline["handoff_p50_seconds"], 1e-9), 2),
        "handoff_p95_ratio": round(operator["handoff_p95_seconds"] / max(baseline["handoff_p95_seconds"], 1e-9), 2),
        "makespan_ratio": round(operator["makespan_seconds"] / baseline["makespan_seconds"], 3),
        "logs": str(log_dir),
    }
    a.out.write_text(json.dumps(result, indent=1))
    say(
        f"queue of {a.jobs} on a quota of {a.quota}: makespan ratio {result['makespan_ratio']}, handoff p50 ratio "
        f"{result['handoff_p50_ratio']}, p95 ratio {result['handoff_p95_ratio']} (DDPJob / Kueue's batch/v1 Job)"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
