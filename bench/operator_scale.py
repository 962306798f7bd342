"""Operator scale and recovery at scale, against the baseline, on a throw-away kwok cluster.

    python bench/operator_scale.py [--workload 1000x2 --workload 100x16] [--nodes 250] [--out FILE]

Writes bench/results/operator_scale.json: per workload and party, apply -> all pods Running (p50, p95, max,
total), API requests per job (the API server's own APF counters, one FlowSchema per party), peak RSS and CPU
seconds; the operator / baseline ratios; recovery after failing 10% of the pods of the first workload."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client, config

from bench_cluster import BenchCluster
from latency_stats import summarize
from machine import describe_machine
from process_usage import read_rss_mib
from progress_lines import say
from recovery_at_scale import measure_recovery
from scale_run import OPERATOR_WORKERS, RunResult, run_workload
from steady_state import measure_cache_memory, measure_steady

RESULTS = Path(__file__).resolve().parent / "results"
AIM_TIME_RATIO = 1.1
AIM_EXTRA_WRITES_PER_JOB = 3  # writes per job <= pods + 3


def summarize_run(r: RunResult) -> dict:
    out = {
        "jobs": r.jobs,
        "pods_per_job": r.pods_per_job,
        "groups_running": r.groups_running,
        "timed_out": r.timed_out,
        "total_seconds": round(r.total_seconds, 2),
        "apply_to_all_running_seconds": {
            k: (round(v, 3) if isinstance(v, float) else v) for k, v in summarize(r.latencies).items()
        },
        "latencies_seconds": [round(x, 3) for x in r.latencies],
        "requests_per_job": {
            "total": round(r.requests.total / r.jobs, 2),
            "writes": round(r.requests.writes / r.jobs, 2),
            "reads": round(r.requests.reads / r.jobs, 2),
        },
        "requests_total": {"writes": r.requests.writes, "reads": r.requests.reads},
        "peak_rss_mib": round(r.usage.peak_rss_mib, 1) if r.usage else None,
        "cpu_seconds": round(r.usage.cpu_seconds, 2) if r.usage else None,
    }
    if r.status_running_seconds is not None:
        out["all_status_running_seconds"] = round(r.status_running_seconds, 2)
    return out


def ratios(op: dict, base: dict) -> dict:
    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    lat_op, lat_base = op["apply_to_all_running_seconds"], base["apply_to_all_running_seconds"]
    return {
        "p50": ratio(lat_op["p50"], lat_base["p50"]),
        "p95": ratio(lat_op["p95"], lat_base["p95"]),
        "max": ratio(lat_op["max"], lat_base["max"]),
        "total": ratio(op["total_seconds"], base["total_seconds"]),
        "requests_per_job": ratio(op["requests_per_job"]["total"], base["requests_per_job"]["total"]),
        "writes_per_job": ratio(op["requests_per_job"]["writes"], base["requests_per_job"]["writes"]),
        "cpu_seconds": ratio(op["cpu_seconds"], base["cpu_seconds"]),
        "peak_rss_mib": ratio(op["peak_rss_mib"], base["peak_rss_mib"]),
    }


def verdicts(workload: dict) -> dict:
    pods = workload["operator"]["pods_per_job"]
    writes = workload["operator"]["requests_per_job"]["writes"]
    total_ratio = workload["ratio"]["total"]
    return {
        "time_ratio_aim": AIM_TIME_RATIO,
        "time_ratio_met": total_ratio is not None and total_ratio <= AIM_TIME_RATIO,
        "writes_per_job_aim": pods + AIM_EXTRA_WRITES_PER_JOB,
        "writes_per_job_met": writes <= pods + AIM_EXTRA_WRITES_PER_JOB,
    }


def at_rest_then_recovery(cluster: BenchCluster, admin: client.ApiClient, a: argparse.Namespace, pods: int):
    """While the operator still runs the first workload: steady state, recovery at scale, then cache memory."""
    recovery = measure_recovery(admin, a.recovery_fraction, pods, a.timeout)

    def run(watch, names, namespace, runner) -> dict:
        steady = measure_steady(cluster, runner.usage, a.steady_seconds)
        rec = recovery(watch, names, namespace, runner)
        try:
            memory = measure_cache_memory(
                admin,
                namespace,
                lambda: read_rss_mib(runner.proc.pid),
                lambda: operator_metric(runner.metrics_port, "ddpjob_watch_cache_objects", kind="pods"),
                a.cache_pods,
            )
        except Exception as exc:  # a failed memory figure must not lose the figures measured before it
            say(f"  cache memory: not measured ({type(exc).__name__}: {exc})")
            memory = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        return {"steady_state": steady, "recovery": rec, "cache_memory": memory}

    return run


def operator_metric(port: int, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", action="append", default=[], help="JOBSxPODS (repeatable; default 1000x2, 100x16)")
    p.add_argument("--nodes", type=int, default=250)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--recovery-fraction", type=float, default=0.10)
    p.add_argument("--steady-seconds", type=float, default=300, help="steady state: every job Running, no change")
    p.add_argument("--cache-pods", type=int, default=10000, help="labelled pods for the cache-memory figure")
    p.add_argument("--timeout", type=float, default=420, help="seconds per run before it is cut short")
    p.add_argument("--cluster-dir", default="", help="reuse this cluster directory and leave the cluster up")
    p.add_argument("--out", default=str(RESULTS / "operator_scale.json"))
    a = p.parse_args()
    workloads = [tuple(int(x) for x in w.split("x")) for w in (a.workload or ["1000x2", "100x16"])]
    keep = bool(a.cluster_dir)
    cluster = BenchCluster(Path(a.cluster_dir or tempfile.mkdtemp(prefix="ddpjob-bench-")), a.nodes, a.gpus_per_node)
    log_dir = Path(tempfile.mkdtemp(prefix="ddpjob-bench-logs-"))
    say(f"party logs in {log_dir}")
    started = time.monotonic()
    report: dict[str, Any] = {
        "benchmark": "operator_scale",
        "machine": describe_machine(),
        "nodes": a.nodes,
        "gpus_per_node": a.gpus_per_node,
        "operator_workers": OPERATOR_WORKERS,
        "baseline_threads": OPERATOR_WORKERS,
        "request_counting": "apiserver_flowcontrol_dispatched_requests_total by FlowSchema: each party is its "
        "own client-certificate user, with one FlowSchema for its writes "
        "(create/update/patch/delete) and one for everything else",
        "workloads": [],
    }
    try:
        cluster.up()
        admin_cfg = client.Configuration()
        config.load_kube_config(config_file=str(cluster.admin_kubeconfig), client_configuration=admin_cfg)
        admin_cfg.connection_pool_maxsize = 32
        admin = client.ApiClient(admin_cfg)
        for index, (jobs, pods) in enumerate(workloads):
            entry: dict[str, Any] = {"name": f"{jobs}x{pods}", "jobs": jobs, "pods_per_job": pods}
            base = run_workload(cluster, admin, "baseline", jobs, pods, log_dir, a.timeout)
            entry["baseline"] = summarize_run(base)
            after = at_rest_then_recovery(cluster, admin, a, pods) if index == 0 else None
            op = run_workload(cluster, admin, "operator", jobs, pods, log_dir, a.timeout, after_running=after)
            entry["operator"] = summarize_run(op)
            entry["ratio"] = ratios(entry["operator"], entry["baseline"])
            entry["aims"] = verdicts(entry)
            if op.recovery is not None:
                report["steady_state"] = {"workload": entry["name"], **op.recovery["steady_state"]}
                report["cache_memory"] = op.recovery["cache_memory"]
                rec = op.recovery["recovery"]
                report["recovery"] = {
                    "workload": entry["name"],
                    "fraction_failed": a.recovery_fraction,
                    **{k: v for k, v in rec.items() if not k.endswith("_seconds")},
                    "recovery": summarize(rec["recovery_seconds"]),
                    "decision_latency": summarize(rec["decision_latency_seconds"]),
                    "recovery_seconds": [round(x, 3) for x in rec["recovery_seconds"]],
                    "decision_latency_seconds": [round(x, 3) for x in rec["decision_latency_seconds"]],
                }
            report["workloads"].append(entry)
            say(f"{entry['name']}: operator/baseline total {entry['ratio']['total']}, p95 {entry['ratio']['p95']}")
    finally:
        report["wall_seconds"] = round(time.monotonic() - started, 1)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
        say(f"wrote {a.out}")
        if not keep:
            cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
