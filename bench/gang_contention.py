"""Contention: many 4 x 8-GPU jobs submitted at once to a throw-away kwok cluster with room for a fraction of them,
the same operator with gang scheduling on and off (--gang-scheduling=off), one mode after the other in one run.

A job "runs" for --run-seconds once all its pods are Running; then this benchmark marks its pods Succeeded and
the job ends. Measured per mode, from one poll of the namespace every --poll-seconds:
- GPU-seconds held by pods whose group could not run: bound to a node while fewer than all the job's pods are;
- the time until every job has run (or how many had when --timeout-seconds ran out: a deadlock never ends);
- GPUs held idle over time (the plot).

Usage: bench/gang_contention.py --out bench/results/gang_contention.json [--jobs 12 --nodes 8]"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config

from bench_cluster import BenchCluster
from machine import describe_machine
from progress_lines import say
from scale_run import Party, create_namespace, delete_namespace

POD_GPUS = 8
PODS_PER_JOB = 4


def job_manifest(name: str) -> dict:
    return {
        "apiVersion": "ddpjob.dev/v1alpha1",
        "kind": "DDPJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": PODS_PER_JOB,
            "gpusPerReplica": POD_GPUS,
            "runPolicy": {"restartBackoffSeconds": 0, "backoffLimit": 0},
            "template": {"spec": {"containers": [{"name": "trainer", "image": "example.invalid/trainer:1"}]}},
        },
    }


class GangParty(Party):
    """The operator with a chosen --gang-scheduling."""

    def __init__(self, gang: str, *args):
        super().__init__(*args)
        self.gang = gang

    def start(self) -> None:
        import os
        import subprocess

        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig(self.party)), "PYTHONUNBUFFERED": "1"}
        args = [
            sys.executable,
            "-m",
            "ddpjob_operator",
            "--namespace",
            self.namespace,
            "--metrics-port",
            str(self.metrics_port),
            "--liveness-port",
            str(self.liveness_port),
            "--gang-scheduling",
            self.gang,
        ]
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=Path.cwd())
        self._wait_ready(self.proc)


def run_mode(cluster: BenchCluster, api: client.ApiClient, gang: str, a: argparse.Namespace, log_dir: Path) -> dict:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"bench-gang-{gang}"
    create_namespace(core, namespace)
    operator = GangParty(gang, "operator", cluster, namespace, log_dir)
    operator.start()
    names = [f"c{i:02d}" for i in range(a.jobs)]
    started = time.monotonic()
    for name in names:
        custom.create_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs", job_manifest(name))
    all_running_at: dict[str, float] = {}
    done: set[str] = set()
    idle_gpu_seconds = 0.0
    timeline: list[tuple[float, int, int]] = []  # (seconds, GPUs held by groups that cannot run, GPUs training)
    last = time.monotonic()
    next_line = started + 10
    while len(done) < len(names) and time.monotonic() - started < a.timeout_seconds:
        pods = core.list_namespaced_pod(namespace).items
        now = time.monotonic()
        by_job: dict[str, list] = {}
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                by_job.setdefault(pod.metadata.labels.get("ddpjob.dev/job-name", ""), []).append(pod)
        held_idle = training = 0
        for job, members in by_job.items():
            if job in done:
                continue
            bound = [p for p in members if p.spec.node_name and p.status.phase in ("Pending", "Running")]
            running = [p for p in members if p.status.phase == "Running"]
            if len(running) == PODS_PER_JOB:
                training += POD_GPUS * PODS_PER_JOB
                all_running_at.setdefault(job, now)
                if now - all_running_at[job] >= a.run_seconds:
                    for pod in running:  # the job ran: its pods succeed
                        core.patch_namespaced_pod_status(
                            pod.metadata.name,
                            namespace,
                            {
                                "status": {
                                    "phase": "Succeeded",
                                    "containerStatuses": [
                                        {
                                            "name": "trainer",
                                            "ready": False,
                                            "restartCount": 0,
                                            "image": "x",
                                            "imageID": "",
                                            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                                        }
                                    ],
                                }
                            },
                        )
                    done.add(job)
            elif len(bound) < PODS_PER_JOB:  # a partial group: its GPUs wait for pods that have no room
                held_idle += POD_GPUS * len(bound)
        idle_gpu_seconds += held_idle * (now - last)
        last = now
        timeline.append((round(now - started, 2), held_idle, training))
        if now >= next_line:
            say(
                f"gang {gang}: {len(done)}/{len(names)} jobs ran, {held_idle} GPUs held by groups that cannot run, "
                f"{training} training, {now - started:.0f}s"
            )
            next_line = now + 10
        time.sleep(a.poll_seconds)
    elapsed = time.monotonic() - started
    delete_namespace(core, namespace)  # while the operator runs: it releases its pods' tracking finalizers
    operator.stop()
    return {
        "gang": gang,
        "jobs": len(names),
        "jobs_ran": len(done),
        "all_ran": len(done) == len(names),
        "seconds_until_all_ran": round(elapsed, 1) if len(done) == len(names) else None,
        "seconds_observed": round(elapsed, 1),
        "idle_gpu_seconds": round(idle_gpu_seconds, 1),
        "timeline": timeline,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--jobs", type=int, default=12)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--run-seconds", type=float, default=10)
    p.add_argument("--poll-seconds", type=float, default=0.5)
    p.add_argument("--timeout-seconds", type=float, default=300)
    p.add_argument("--cluster-dir", default=None)
    a = p.parse_args()
    cluster = BenchCluster(Path(a.cluster_dir or tempfile.mkdtemp(prefix="ddpjob-gang-")), a.nodes, POD_GPUS)
    cluster.up()
    log_dir = Path(tempfile.mkdtemp(prefix="ddpjob-gang-logs-"))
    try:
        api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        modes = [run_mode(cluster, api, gang, a, log_dir) for gang in ("auto", "off")]
    finally:
        cluster.down()
    on, off = modes
    result = {
        "machine": describe_machine(),
        "setup": {
            "jobs": a.jobs,
            "pods_per_job": PODS_PER_JOB,
            "gpus_per_pod": POD_GPUS,
            "nodes": a.nodes,
            "gpus_per_node": POD_GPUS,
            "run_seconds": a.run_seconds,
            "timeout_seconds": a.timeout_seconds,
            "room_for_jobs": a.nodes // PODS_PER_JOB,
        },
        "gang_on": on,
        "gang_off": off,
        "time_ratio_on_vs_off": (
            round(on["seconds_until_all_ran"] / off["seconds_until_all_ran"], 3)
            if on["all_ran"] and off["all_ran"]
            else None
        ),
        "logs": str(log_dir),
    }
    a.out.write_text(json.dumps(result, indent=1))
    say(
        f"gang on: {on['jobs_ran']}/{on['jobs']} ran in {on['seconds_observed']}s, idle GPU-s {on['idle_gpu_seconds']};"
        f" gang off: {off['jobs_ran']}/{off['jobs']} ran in {off['seconds_observed']}s, idle GPU-s "
        f"{off['idle_gpu_seconds']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
