"""The capacity estimate's cost per pass (issue 21): one elastic job's WatchCache.capacity() over N nodes and M
bound pods, as the watch-cache indexes hold them (built with the operator's own index functions), when nothing
changed since the last pass and right after one pod event (one bound pod replaced on one node). Pure CPU, no
cluster. The baseline is another tree's operator/src measured the same way: --baseline-commit (a git worktree of
it; default: the tree before the estimate kept any cache) or --operator-src.

Usage: bench/capacity_estimate.py --out bench/results/capacity_estimate.json [--nodes 1000 --pods 10000]"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from worktree import operator_src_at  # bench/ is on sys.path: this script's own directory

# The tree before 4eb58ae, the first of the estimate's caches: every pass parsed every node and summed every pod.
BASELINE_COMMIT = "4eb58ae^"


def measure(nodes: int, pods: int, calls: int) -> dict:
    from ddpjob_operator.controller import watch_cache as wc

    node_index: dict[str, list] = {}
    ready = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    for i in range(nodes):
        body = {
            "metadata": {"name": f"n{i}", "labels": {"pool": "a"}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {
                "conditions": ready,
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            },
        }
        node_index[f"n{i}"] = [wc.slim_node(body)]

    def pod_on(node_name: str, uid: str) -> dict:
        return {
            "metadata": {"uid": uid},
            "spec": {
                "nodeName": node_name,
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "0"}}}
                ],
            },
            "status": {"phase": "Running"},
        }

    bound: dict[str, list] = {}
    for j in range(pods):
        node_name = f"n{j % nodes}"
        bound.setdefault(node_name, []).append(wc.bound_pod(pod_on(node_name, f"u{j}")))
    job = {
        "metadata": {"name": "el", "namespace": "ns", "uid": "job"},
        "spec": {
            "replicas": 4,
            "gpusPerReplica": 8,
            "elastic": {"minReplicas": 2, "maxReplicas": 4},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}},
        },
    }
    cache = wc.WatchCache({("ns", "el"): [job]}, {}, node_index, [], bound_pods=bound)
    cache.capacity(job, set())  # warm
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        fits = cache.capacity(job, set())
        times.append(time.perf_counter() - started)
    changed = []
    for i in range(calls):
        node_name = f"n{i % nodes}"
        held = bound.setdefault(node_name, [])
        held[-1:] = [wc.bound_pod(pod_on(node_name, f"event-{i}"))]  # one pod's event: a new index entry
        started = time.perf_counter()
        cache.capacity(job, set())
        changed.append(time.perf_counter() - started)
    return {
        "median_ms": round(1000 * statistics.median(times), 2),
        "p95_ms": round(1000 * sorted(times)[int(0.95 * (len(times) - 1))], 2),
        "after_one_pod_event_median_ms": round(1000 * statistics.median(changed), 2),
        "fits": fits,
        "calls": calls,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=10000)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--operator-src", type=Path, default=None)
    p.add_argument("--baseline-commit", default=BASELINE_COMMIT)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(measure(a.nodes, a.pods, a.calls)))
        return 0
    if a.operator_src is not None:
        return report(a, str(a.operator_src))
    with operator_src_at(a.baseline_commit) as src:
        a.operator_src = src
        return report(a, f"git {a.baseline_commit}")


def report(a: argparse.Namespace, baseline: str) -> int:
    results = {}
    for name, src in (("baseline", a.operator_src), ("this tree", None)):
        if name == "baseline" and src is None:
            continue
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = f"{src.resolve()}:{env.get('PYTHONPATH', '')}"
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "--nodes",
                str(a.nodes),
                "--pods",
                str(a.pods),
                "--calls",
                str(a.calls),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        results[name] = json.loads(out.stdout)
    from machine import describe_machine  # bench/ is on sys.path: this script's own directory

    doc = {
        "machine": describe_machine(),
        "setup": {
            "nodes": a.nodes,
            "bound_pods": a.pods,
            "baseline": baseline,
        },
        **results,
    }
    if "baseline" in results:
        doc["ratio"] = round(results["this tree"]["median_ms"] / results["baseline"]["median_ms"], 3)
        if "after_one_pod_event_median_ms" in results["baseline"]:
            key = "after_one_pod_event_median_ms"
            doc["ratio_after_one_pod_event"] = round(results["this tree"][key] / results["baseline"][key], 3)
    print(json.dumps(doc, indent=1))
    if a.out:
        a.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
