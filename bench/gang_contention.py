"""Contention: many 4 x 8-GPU jobs submitted at once to a throw-away kwok cluster with room for a fraction of them,
the same operator in three modes, one after the other in one run: gang scheduling on; off (--gang-scheduling=off,
pod by pod, as on a cluster with neither the PodGroup API nor Kueue) with the placement timeout
(runPolicy.placementTimeoutSeconds = --placement-timeout); and off with the timeout out of reach (a day: the
behaviour before it existed, the baseline of issue 22).

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
from ddpjob_operator.api import LABEL_JOB_NAME
from latency_stats import percentile
from machine import describe_machine
from progress_lines import say
from scale_run import Party, create_namespace, ddpjob, delete_namespace, succeed_pod

POD_GPUS = 8
PODS_PER_JOB = 4


def job_manifest(name: str, placement_timeout: int | None = None) -> dict:
    """The scale benchmark's DDPJob at 4 x 8 GPUs; a failure ends it (nothing here fails a pod on purpose)."""
    job = ddpjob(name, PODS_PER_JOB, gpus=POD_GPUS)
    job["spec"]["runPolicy"]["backoffLimit"] = 0
    if placement_timeout is not None:
        job["spec"]["runPolicy"]["placementTimeoutSeconds"] = placement_timeout
    return job


NO_TIMEOUT = 86400  # "before": a partly placed group holds its GPUs until the rendezvous gives up (kwok: for ever)
FLAG = -1  # placementTimeoutSeconds from --placement-timeout
MODES: dict[str, tuple[str, int | None]] = {  # name: (--gang-scheduling, placementTimeoutSeconds; None: default)
    "gang_on": ("auto", None),
    "gang_off": ("off", FLAG),
    "gang_off_no_timeout": ("off", NO_TIMEOUT),
}


def clean_up(core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str) -> None:
    """The jobs first, while the operator runs (it releases their pods' tracking finalizers), then the namespace:
    a namespace deletion that takes the pods first makes the operator count each as a failure."""
    custom.delete_collection_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs")
    delete_namespace(core, namespace)


def run_mode(cluster: BenchCluster, api: client.ApiClient, mode: str, a: argparse.Namespace, log_dir: Path) -> dict:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    gang, timeout = MODES[mode]
    placement_timeout = a.placement_timeout if timeout == FLAG else timeout
    namespace = f"bench-{mode.replace('_', '-')}"
    create_namespace(core, namespace)
    operator = Party("operator", cluster, namespace, log_dir, extra_args=("--gang-scheduling", gang))
    operator.start()
    names = [f"c{i:02d}" for i in range(a.jobs)]
    started = time.monotonic()
    for name in names:
        custom.create_namespaced_custom_object(
            "ddpjob.dev", "v1alpha1", namespace, "ddpjobs", job_manifest(name, placement_timeout)
        )
    limit = a.timeout_seconds if placement_timeout != NO_TIMEOUT else min(a.timeout_seconds, a.deadlock_seconds)
    all_running_at: dict[str, float] = {}
    done: set[str] = set()
    idle_gpu_seconds = 0.0
    timeline: list[tuple[float, int, int]] = []  # (seconds, GPUs held by groups that cannot run, GPUs training)
    last = time.monotonic()
    next_line = started + 10
    while len(done) < len(names) and time.monotonic() - started < limit:
        pods = core.list_namespaced_pod(namespace).items
        now = time.monotonic()
        by_job: dict[str, list] = {}
        for pod in pods:
            if pod.metadata.deletion_timestamp is None:
                by_job.setdefault(pod.metadata.labels.get(LABEL_JOB_NAME, ""), []).append(pod)
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
                        succeed_pod(core, namespace, pod.metadata.name)
                    done.add(job)
            elif len(bound) < PODS_PER_JOB:  # a partial group: its GPUs wait for pods that have no room
                held_idle += POD_GPUS * len(bound)
        idle_gpu_seconds += held_idle * (now - last)
        last = now
        timeline.append((round(now - started, 2), held_idle, training))
        if now >= next_line:
            say(
                f"{mode}: {len(done)}/{len(names)} jobs ran, {held_idle} GPUs held by groups that cannot run, "
                f"{training} training, {now - started:.0f}s"
            )
            next_line = now + 10
        time.sleep(a.poll_seconds)
    elapsed = time.monotonic() - started
    clean_up(core, custom, namespace)
    operator.stop()
    return {
        "gang": gang,
        "placement_timeout_seconds": placement_timeout,
        "jobs": len(names),
        "jobs_ran": len(done),
        "all_ran": len(done) == len(names),
        "seconds_until_all_ran": round(elapsed, 1) if len(done) == len(names) else None,
        "seconds_observed": round(elapsed, 1),
        "idle_gpu_seconds": round(idle_gpu_seconds, 1),
        "timeline": timeline,
    }


def _status(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    return custom.get_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs", name).get("status") or {}


def _wait_size(custom, namespace: str, name: str, size: int, timeout: float = 180) -> float:
    """Seconds until the job is Running with `size` pods."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        status = _status(custom, namespace, name)
        if status.get("phase") == "Running" and status.get("replicas") == size:
            return time.monotonic() - started
        time.sleep(0.2)
    raise RuntimeError(f"{name} not Running at {size} pods after {timeout}s: {_status(custom, namespace, name)}")


OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


def _set_node(core: client.CoreV1Api, name: str, up: bool) -> None:
    """Down: kwok stops running the node and it reports NotReady (a dead kubelet), and the admin taints it
    out-of-service, so the operator may force-delete its pods at once (docs/reliability.md: without the taint it
    waits --unreachable-force-delete-seconds). Up: the taint goes and kwok runs it again."""
    taints = [t for t in (core.read_node(name).spec.taints or []) if t.key != OUT_OF_SERVICE["key"]]
    body = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints] + ([] if up else [OUT_OF_SERVICE])
    core.patch_node(
        name, {"metadata": {"annotations": {"kwok.x-k8s.io/node": "fake" if up else None}}, "spec": {"taints": body}}
    )
    if not up:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletStopped",
            "message": "bench: node down",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        core.patch_node_status(name, {"status": {"conditions": [ready]}})


def run_elastic(cluster: BenchCluster, api: client.ApiClient, a: argparse.Namespace, log_dir: Path) -> dict:
    """One elastic 2..4 job on 4 free nodes (blockers fill the rest): a node under it goes down (shrink to 3),
    comes back (grow to 4), --elastic-trials times. Measured: node change -> Running at the new size."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = "bench-elastic"
    create_namespace(core, namespace)
    operator = Party("operator", cluster, namespace, log_dir, extra_args=("--gang-scheduling", "auto"))
    operator.start()
    nodes = sorted(n.metadata.name for n in core.list_node().items)
    for i, node in enumerate(nodes[4:]):
        core.create_namespaced_pod(
            namespace,
            {
                "metadata": {"name": f"blocker-{i}"},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(POD_GPUS)}}}
                    ],
                },
            },
        )
    job = job_manifest("el")
    job["spec"]["elastic"] = {"minReplicas": 2, "maxReplicas": 4}
    job["spec"]["runPolicy"]["backoffLimit"] = 100
    custom.create_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs", job)
    _wait_size(custom, namespace, "el", 4)
    samples: dict[str, list[float]] = {"shrink": [], "grow": []}
    for trial in range(a.elastic_trials):
        pods = core.list_namespaced_pod(namespace, label_selector="ddpjob.dev/job-name=el").items
        victim = sorted(p.spec.node_name for p in pods if p.spec.node_name and p.status.phase == "Running")[-1]
        _set_node(core, victim, up=False)
        samples["shrink"].append(round(_wait_size(custom, namespace, "el", 3), 2))
        _set_node(core, victim, up=True)
        samples["grow"].append(round(_wait_size(custom, namespace, "el", 4), 2))
        say(
            f"elastic trial {trial + 1}/{a.elastic_trials}: node lost -> 3 pods in {samples['shrink'][-1]}s, "
            f"node back -> 4 pods in {samples['grow'][-1]}s"
        )
    status = _status(custom, namespace, "el")
    clean_up(core, custom, namespace)
    operator.stop()

    return {
        "trials": a.elastic_trials,
        "node_lost_grace_seconds": 30,
        "samples": samples,
        "shrink_p50": percentile(sorted(samples["shrink"]), 50),
        "shrink_p95": percentile(sorted(samples["shrink"]), 95),
        "grow_p50": percentile(sorted(samples["grow"]), 50),
        "grow_p95": percentile(sorted(samples["grow"]), 95),
        "restarts_counted": status.get("restarts"),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--jobs", type=int, default=12)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--run-seconds", type=float, default=10)
    p.add_argument("--poll-seconds", type=float, default=0.5)
    p.add_argument("--timeout-seconds", type=float, default=600)
    p.add_argument("--deadlock-seconds", type=float, default=180, help="how long the no-timeout mode is watched")
    p.add_argument("--placement-timeout", type=int, default=30, help="runPolicy.placementTimeoutSeconds, pod by pod")
    p.add_argument("--cluster-dir", default=None)
    p.add_argument("--elastic-trials", type=int, default=5)
    a = p.parse_args()
    cluster = BenchCluster(Path(a.cluster_dir or tempfile.mkdtemp(prefix="ddpjob-gang-")), a.nodes, POD_GPUS)
    cluster.up()
    log_dir = Path(tempfile.mkdtemp(prefix="ddpjob-gang-logs-"))
    try:
        api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        modes = [run_mode(cluster, api, mode, a, log_dir) for mode in MODES]
        try:
            elastic = run_elastic(cluster, api, a, log_dir) if a.elastic_trials else None
        except RuntimeError as exc:  # the placement modes' figures are kept
            elastic = {"error": str(exc)[:2000]}
    finally:
        cluster.down()
    on, off, before = modes
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
            "deadlock_seconds": a.deadlock_seconds,
            "room_for_jobs": a.nodes // PODS_PER_JOB,
        },
        "gang_on": on,
        "gang_off": off,
        "gang_off_no_timeout": before,
        "idle_gpu_seconds_ratio_after_vs_before": (
            round(off["idle_gpu_seconds"] / before["idle_gpu_seconds"], 3) if before["idle_gpu_seconds"] else None
        ),
        "time_ratio_on_vs_off": (
            round(on["seconds_until_all_ran"] / off["seconds_until_all_ran"], 3)
            if on["all_ran"] and off["all_ran"]
            else None
        ),
        "elastic": elastic,
        "logs": str(log_dir),
    }
    a.out.write_text(json.dumps(result, indent=1))
    say(
        f"gang on: {on['jobs_ran']}/{on['jobs']} ran in {on['seconds_observed']}s, idle GPU-s {on['idle_gpu_seconds']};"
        f" gang off: {off['jobs_ran']}/{off['jobs']} ran in {off['seconds_observed']}s, idle GPU-s "
        f"{off['idle_gpu_seconds']}; gang off without the placement timeout: {before['jobs_ran']}/{before['jobs']} ran"
        f" in {before['seconds_observed']}s, idle GPU-s {before['idle_gpu_seconds']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
