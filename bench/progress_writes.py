"""Status writes of Running jobs that report progress (issue 27, item 8), this tree against an earlier one, on a
throw-away kwok cluster.

N one-pod jobs run; every worker 0's metrics port is one local HTTP server whose step advances 10 steps a second,
so every scrape (every --progress-interval-seconds) finds a new step. Once every job shows a step, for a window of
--window seconds: the operator's writes per second (the API server's own APF counters for the operator's user,
its status writes in this steady state), and the STEP column's staleness (the server's step now minus the
job's status.progress.step, in seconds; sampled every 10 s over every job).

    python bench/progress_writes.py [--jobs 1000] [--before COMMIT] [--out FILE]"""

from __future__ import annotations

import argparse
import http.server
import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from bench_cluster import BenchCluster
from latency_stats import summarize
from machine import describe_machine
from progress_lines import say
from request_counts import parse_counts
from scale_run import Party, create_namespace, ddpjob, delete_namespace, free_port
from worktree import operator_src_at, short

RESULTS = Path(__file__).resolve().parent / "results"
STEPS_PER_SECOND = 10
THREADS = 16


class AdvancingTrainer:
    """worker 0's metrics page for every job at once: the step is the time since start, 10 steps a second."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        trainer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = (
                    f"# TYPE ddp_trainer_step gauge\nddp_trainer_step {trainer.step()}\n"
                    "# TYPE ddp_trainer_loss gauge\nddp_trainer_loss 0.5\n"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def step(self) -> int:
        return int((time.monotonic() - self.t0) * STEPS_PER_SECOND)


def progress_job(name: str, port: int) -> dict:
    job = ddpjob(name, 1)
    job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": port}]
    return job


def point_at_the_trainer(core: client.CoreV1Api, namespace: str, names: list[str]) -> None:
    """kwok gives pods made-up IPs: worker 0 of each job is pointed at the local trainer (its status podIP)."""
    patch = {"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}

    def one(name: str) -> None:
        _ = core.patch_namespaced_pod_status(
            f"{name}-worker-0", namespace, patch, _content_type="application/merge-patch+json", _preload_content=False
        ).data

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, names))


def steps(custom: client.CustomObjectsApi, namespace: str) -> dict[str, int | None]:
    items = custom.list_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs")["items"]
    return {j["metadata"]["name"]: ((j.get("status") or {}).get("progress") or {}).get("step") for j in items}


def wait_for(what: str, predicate, timeout: float) -> bool:
    deadline, last = time.monotonic() + timeout, 0.0
    while time.monotonic() < deadline:
        done, total = predicate()
        if done >= total:
            return True
        if time.monotonic() - last >= 10:
            say(f"  {what}: {done}/{total}")
            last = time.monotonic()
        time.sleep(1)
    say(f"  {what}: TIMED OUT after {timeout:.0f}s")
    return False


def run_party(
    cluster: BenchCluster, admin: client.ApiClient, label: str, src: Path | None, a: argparse.Namespace, log_dir: Path
) -> dict[str, Any]:
    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    namespace = f"progress-{label}"
    create_namespace(core, namespace)
    trainer = AdvancingTrainer()
    party = Party(
        "operator",
        cluster,
        namespace,
        log_dir,
        extra_args=("--progress-interval-seconds", str(a.scrape_seconds)),
        operator_src=src,
    )
    party.start()
    names = [f"p{i:04d}" for i in range(a.jobs)]
    out: dict[str, Any] = {"tree": label}
    try:
        say(f"{label}: {a.jobs} jobs with a metrics port")
        with ThreadPoolExecutor(THREADS) as pool:
            list(
                pool.map(
                    lambda n: custom.create_namespaced_custom_object(
                        "ddpjob.dev", "v1alpha1", namespace, "ddpjobs", progress_job(n, trainer.port)
                    ),
                    names,
                )
            )

        def running() -> tuple[int, int]:
            pods = core.list_namespaced_pod(namespace).items
            return sum(1 for p in pods if p.status.phase == "Running"), len(names)

        out["all_running"] = wait_for("pods Running", running, a.timeout)
        point_at_the_trainer(core, namespace, names)

        def reporting() -> tuple[int, int]:
            return sum(1 for s in steps(custom, namespace).values() if s is not None), len(names)

        out["all_reporting"] = wait_for("jobs showing a step", reporting, a.timeout)
        say(f"  {a.settle:.0f}s of steady running before the window (progress writes back off with running time)")
        time.sleep(a.settle)
        before, t0 = parse_counts(cluster.apiserver_metrics())["operator"], time.monotonic()
        stale: list[float] = []
        while time.monotonic() - t0 < a.window:
            time.sleep(10)
            now_step = trainer.step()
            stale += [(now_step - s) / STEPS_PER_SECOND for s in steps(custom, namespace).values() if s is not None]
        after, t1 = parse_counts(cluster.apiserver_metrics())["operator"], time.monotonic()
        out["window_seconds"] = round(t1 - t0, 1)
        out["writes_per_second"] = round((after.writes - before.writes) / (t1 - t0), 2)
        out["step_staleness_seconds"] = {k: round(v, 1) for k, v in summarize(stale).items() if k != "count"}
        out["cpu_seconds"] = round(party.usage().cpu_seconds, 1)
        say(f"{label}: {out['writes_per_second']} writes/s, STEP staleness {out['step_staleness_seconds']}")
    finally:
        try:  # while the operator runs: it frees its pods' tracking finalizers
            delete_namespace(core, namespace)
        except (ApiException, RuntimeError) as exc:
            say(f"  {namespace} not deleted: {exc}")
        party.stop()
        trainer.server.shutdown()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--before", default="af53123", help="the earlier tree: before progress writes backed off")
    p.add_argument("--scrape-seconds", type=float, default=10)
    p.add_argument("--window", type=float, default=120)
    p.add_argument("--settle", type=float, default=240, help="seconds every job reports before the window")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", default=str(RESULTS / "progress_writes.json"))
    a = p.parse_args()
    cluster = BenchCluster(Path(tempfile.mkdtemp(prefix="ddpjob-bench-")), a.jobs // 8 + 2, 8)
    log_dir = Path(tempfile.mkdtemp(prefix="ddpjob-bench-logs-"))
    say(f"party logs in {log_dir}")
    report: dict[str, Any] = {
        "benchmark": "progress_writes",
        "machine": describe_machine(),
        "jobs": a.jobs,
        "scrape_seconds": a.scrape_seconds,
        "steps_per_second": STEPS_PER_SECOND,
        "settle_seconds": a.settle,
        "window_seconds": a.window,
    }
    try:
        cluster.up()
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(cluster.admin_kubeconfig), client_configuration=cfg)
        cfg.connection_pool_maxsize = THREADS * 2
        admin = client.ApiClient(cfg)
        with operator_src_at(a.before) as src:
            report["before"] = {"commit": short(a.before), **run_party(cluster, admin, "before", src, a, log_dir)}
        report["after"] = run_party(cluster, admin, "after", None, a, log_dir)
        if report["before"].get("writes_per_second"):
            report["writes_ratio_after_vs_before"] = round(
                report["after"]["writes_per_second"] / report["before"]["writes_per_second"], 3
            )
    finally:
        RESULTS.mkdir(exist_ok=True)
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
        say(f"wrote {a.out}")
        cluster.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
