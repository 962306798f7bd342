"""Capacity that comes and goes (issue 21): an elastic 2..4 job (8 GPUs a pod) on 4 kwok nodes x 8 GPUs; every
--toggle-seconds a higher-priority filler pod (another tenant) arrives on one node, preempting the job's pod there,
and leaves again. Measured over --seconds, for this tree and for a baseline tree (the operator before the
settling rules: no cooldown memory, no grace), one after the other on one throw-away cluster:
- group restarts (attempts), and the sizes the job went through;
- the fraction of wall time the job was Running (all pods of its attempt running: kwok runs no trainer, so this is
  the time a real group would spend at a step that advances, less its resume cost).

Usage: bench/capacity_oscillation.py --out bench/results/capacity_oscillation.json [--baseline-commit C]"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from bench_cluster import BenchCluster
from machine import describe_machine
from progress_lines import say
from scale_run import Party, create_namespace, ddpjob, delete_namespace
from worktree import operator_src_at, short

POD_GPUS = 8
NODES = 4
# The last commit before "Elastic sizes that settle" (e0edcad): failure classes in, no cooldown, no grace.
BASELINE_COMMIT = "e0edcad^"
PRIORITY_CLASS = "bench-filler"


def filler(node: str) -> dict:
    return {
        "metadata": {"name": "filler"},
        "spec": {
            "priorityClassName": PRIORITY_CLASS,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(POD_GPUS)}}}],
        },
    }


def run(
    cluster: BenchCluster, api: client.ApiClient, name: str, src: Path | None, a: argparse.Namespace, logs: Path
) -> dict:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"bench-osc-{name.replace('_', '-')}"
    create_namespace(core, namespace)
    operator = Party("operator", cluster, namespace, logs, operator_src=src)
    operator.start()
    job = ddpjob("osc", NODES, POD_GPUS)
    job["spec"]["elastic"] = {"minReplicas": 2, "maxReplicas": NODES}
    job["spec"]["runPolicy"]["backoffLimit"] = 1000
    job["spec"]["runPolicy"]["platformFailureLimit"] = 1000
    custom.create_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs", job)

    def status() -> dict:
        return (
            custom.get_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs", "osc").get("status")
            or {}
        )

    deadline = time.monotonic() + 120
    while not (status().get("phase") == "Running" and status().get("replicas") == NODES):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: the job did not run at {NODES}: {status()}")
        time.sleep(0.5)
    first = status()["attempt"]
    node = sorted(n.metadata.name for n in core.list_node().items)[-1]
    sizes: list[int] = []
    timeline: list[tuple[float, int, bool]] = []  # (seconds, pods of the attempt, Running)
    started = time.monotonic()
    toggles = 0
    next_line = started + 30
    while (elapsed := time.monotonic() - started) < a.seconds:
        if elapsed >= toggles * a.toggle_seconds:
            try:
                if toggles % 2 == 0:
                    core.create_namespaced_pod(namespace, filler(node))
                else:
                    core.delete_namespaced_pod("filler", namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status not in (404, 409):
                    raise
            toggles += 1
        s = status()
        timeline.append((round(elapsed, 1), int(s.get("replicas", 0)), s.get("phase") == "Running"))
        if not sizes or sizes[-1] != s.get("replicas"):
            sizes.append(int(s.get("replicas", 0)))
        if time.monotonic() >= next_line:
            say(f"{name}: {elapsed:.0f}s, attempt {s.get('attempt', 0) - first} since start, size {s.get('replicas')}")
            next_line += 30
        time.sleep(a.poll_seconds)
    final = status()
    custom.delete_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs", "osc")
    delete_namespace(core, namespace)
    operator.stop()
    running = sum(1 for _, _, r in timeline if r) / max(1, len(timeline))
    return {
        "restarts": final.get("attempt", 0) - first,
        "sizes": sizes,
        "running_fraction": round(running, 3),
        "trainer_restarts": final.get("restarts"),
        "platform_restarts": final.get("platformRestarts"),
        "timeline": timeline,
    }


def measure_both(a: argparse.Namespace, baseline_src: Path) -> dict:
    """The baseline operator, then this tree's, on one throw-away cluster."""
    cluster = BenchCluster(Path(a.cluster_dir or tempfile.mkdtemp(prefix="ddpjob-osc-")), NODES, POD_GPUS)
    cluster.up()
    logs = Path(tempfile.mkdtemp(prefix="ddpjob-osc-logs-"))
    results: dict = {"logs": str(logs)}
    try:
        api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        client.SchedulingV1Api(api).create_priority_class(
            {"metadata": {"name": PRIORITY_CLASS}, "value": 1000, "description": "bench: the filler tenant"}
        )
        for name, tree_src in (("baseline", baseline_src), ("this_tree", None)):
            say(f"capacity oscillation, {name}: {a.seconds:.0f}s, a filler every {a.toggle_seconds:.0f}s")
            results[name] = run(cluster, api, name, tree_src, a, logs)
            say(f"{name}: {results[name]['restarts']} restarts, Running {results[name]['running_fraction']:.0%}")
    finally:
        cluster.down()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seconds", type=float, default=300)
    p.add_argument("--toggle-seconds", type=float, default=20)
    p.add_argument("--poll-seconds", type=float, default=1.0)
    p.add_argument("--baseline-commit", default=BASELINE_COMMIT)
    p.add_argument("--cluster-dir", default=None)
    a = p.parse_args()
    with operator_src_at(a.baseline_commit) as src:
        results = measure_both(a, src)
    before, after = results["baseline"], results["this_tree"]
    doc = {
        "machine": describe_machine(),
        "setup": {
            "nodes": NODES,
            "gpus_per_node": POD_GPUS,
            "elastic": "2..4 pods x 8 GPUs",
            "seconds": a.seconds,
            "toggle_seconds": a.toggle_seconds,
            "resize_cooldown_seconds": 300,
            "baseline_commit": short(a.baseline_commit),
        },
        "baseline": before,
        "this_tree": after,
        "restart_bound": 1 + int(a.seconds // 300),
        "restarts_ratio": round(after["restarts"] / before["restarts"], 3) if before["restarts"] else None,
        "logs": results["logs"],
    }
    a.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
