"""What a warm operator costs while nothing happens, and what its watch cache holds in memory.

- Steady state: every job Running, nobody acting. The API server's own counters (the operator's FlowSchemas) give
  its requests per second; /proc gives its CPU seconds over the same window.
- Cache memory: labelled pods that no job owns are still cached (the watch is by label), so the benchmark
  creates them directly, unscheduled, and reads the operator's RSS before and after its cache holds them."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench_cluster import BenchCluster
from progress_lines import say
from request_counts import parse_counts

CACHE_POD_THREADS = 8


def measure_steady(cluster: BenchCluster, usage, seconds: float) -> dict:
    """usage() -> ProcessUsage of the operator. Requests and CPU over `seconds` of doing nothing."""
    say(f"  steady state: {seconds:.0f}s with every job Running")
    before, cpu0, t0 = parse_counts(cluster.apiserver_metrics())["operator"], usage().cpu_seconds, time.monotonic()
    time.sleep(seconds)
    after, cpu1, t1 = parse_counts(cluster.apiserver_metrics())["operator"], usage().cpu_seconds, time.monotonic()
    spent = after - before
    window = t1 - t0
    return {
        "seconds": round(window, 1),
        "requests_per_second": round(spent.total / window, 4),
        "reads": spent.reads,
        "writes": spent.writes,
        "cpu_seconds": round(cpu1 - cpu0, 2),
        "cpu_fraction": round((cpu1 - cpu0) / window, 4),
    }


def cache_pod(name: str, job: str) -> dict:
    # An unsatisfiable nodeSelector keeps it Pending: it costs the cache, not a node.
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"ddpjob.dev/job-name": job, "ddpjob.dev/replica-index": "0", "ddpjob.dev/restart-attempt": "0"},
        },
        "spec": {
            "nodeSelector": {"bench.ddpjob.dev/nowhere": "true"},
            "containers": [
                {
                    "name": "trainer",
                    "image": "bench/ddp-trainer:none",
                    "ports": [{"name": "metrics", "containerPort": 9400}],
                    "env": [{"name": f"E{i}", "value": "x" * 20} for i in range(20)],
                }
            ],
        },
    }


def measure_cache_memory(admin: client.ApiClient, namespace: str, rss_mib, cached_pods, pods: int) -> dict:
    """rss_mib() -> the operator's RSS; cached_pods() -> pods its cache holds (its own metric)."""
    core = client.CoreV1Api(admin)
    start_pods, before = cached_pods(), rss_mib()
    say(f"  cache memory: creating {pods} labelled pods (operator RSS now {before:.0f} MiB, {start_pods:.0f} cached)")

    def one(i: int) -> bool:
        body = cache_pod(f"cache-{i:05d}", f"cache-{i // 2:05d}")
        for attempt in range(20):
            try:
                _ = core.create_namespaced_pod(namespace, body, _preload_content=False).data
                return True
            except ApiException as exc:
                if exc.status == 409:
                    return True
                if exc.status not in (429, 500, 503, 504):
                    say(f"  cache memory: pod {i} refused ({exc.status}): {exc.reason}")
                    return False
                time.sleep(min(5.0, 0.2 * 2**attempt))  # the API server sheds load: try again
        return False

    with ThreadPoolExecutor(CACHE_POD_THREADS) as pool:
        pods = sum(pool.map(one, range(pods)))
    deadline = time.monotonic() + 300
    while cached_pods() < start_pods + pods and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(5)  # let the watch's last batches settle
    after = rss_mib()
    held = cached_pods()
    say(f"  cache memory: {held:.0f} pods cached, operator RSS {after:.0f} MiB")
    return {
        "pods_created": pods,
        "pods_cached": held,
        "rss_mib_before": round(before, 1),
        "rss_mib_after": round(after, 1),
    }
