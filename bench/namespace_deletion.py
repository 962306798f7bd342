"""Deleting things with running jobs (issue 20): a throw-away kwok cluster, N running 2-pod DDPJobs in a
namespace, then `kubectl delete namespace` (and, in a second namespace, `kubectl delete ddpj --all`). Measured:
seconds until the namespace is gone (every pod gone for --all), and the group restarts the operator counted.

The baseline, in the same run: the same namespace deletion with the same pods created by the bare client
(baseline_client.py: no operator, no finalizer), the namespace controller's own floor. An older operator can be
measured too: --operator-src points at another tree's operator/src (a git worktree), put first on PYTHONPATH.

Usage: bench/namespace_deletion.py --out bench/results/namespace_deletion.json [--jobs 100 --nodes 60]"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from bench_cluster import BenchCluster
from machine import describe_machine
from progress_lines import say
from scale_run import Party, create_namespace, ddpjob
from worktree import operator_src_at, short

PODS = 2


def all_running(core: client.CoreV1Api, namespace: str, want: int) -> bool:
    pods = core.list_namespaced_pod(namespace).items
    return sum(1 for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp) == want


def wait(predicate, timeout: float, what: str) -> float | None:
    """Seconds until predicate() holds, None after timeout (logged every 10 s)."""
    started = next_line = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        if time.monotonic() >= next_line:
            say(f"  {what}: waiting, {time.monotonic() - started:.0f}s")
            next_line += 10
        time.sleep(0.25)
    return None


def gone(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        _ = core.read_namespace(namespace, _preload_content=False).data
    except ApiException as exc:
        return exc.status == 404
    return False


def podgroups(api: client.ApiClient, namespace: str) -> list:
    """The namespace's PodGroups; none where the cluster does not serve the gang API."""
    try:
        listed = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "scheduling.k8s.io", "v1alpha2", namespace, "podgroups"
        )
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    return listed["items"]


class Timeline:
    """What the deletion waits on, read while it runs: when the last tracking finalizer went, when the last pod
    went, and each namespace condition the namespace controller wrote (its passes show in them: a pass that still
    finds finalizers waits 8 s for the next, one that finds bare pods retries at once)."""

    def __init__(self, core: client.CoreV1Api, namespace: str, started: float):
        self.core, self.namespace, self.started = core, namespace, started
        self.finalizers_gone: float | None = None
        self.pods_gone: float | None = None
        self.podgroups_gone: float | None = None
        self.conditions: dict[str, float] = {}

    def gone(self) -> bool:
        now = round(time.monotonic() - self.started, 2)
        pods = self.core.list_namespaced_pod(self.namespace).items
        if self.finalizers_gone is None and not any(p.metadata.finalizers for p in pods):
            self.finalizers_gone = now
        if self.pods_gone is None and not pods:
            self.pods_gone = now
        if self.podgroups_gone is None and not podgroups(self.core.api_client, self.namespace):
            self.podgroups_gone = now
        try:
            ns = self.core.read_namespace(self.namespace)
        except ApiException as exc:
            return exc.status == 404
        for cond in (ns.status.conditions or []) if ns.status else []:
            seen = f"{cond.type}={cond.status}: {cond.message}"
            self.conditions.setdefault(seen, now)
        return False

    def as_dict(self) -> dict:
        return {
            "finalizers_gone_s": self.finalizers_gone,
            "pods_gone_s": self.pods_gone,
            "podgroups_gone_s": self.podgroups_gone,
            "namespace_conditions_first_seen_s": self.conditions,
        }


def restarts_counted(party: Party) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{party.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return float("nan")
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "ddpjob_group_restarts_total"
    )


def run_case(
    cluster: BenchCluster,
    api: client.ApiClient,
    party_name: str,
    how: str,
    a,
    log_dir: Path,
    src: Path | None = None,
    label: str = "",
) -> dict:
    """One namespace of a.jobs running jobs, deleted `how` (namespace | jobs), with `party_name` managing it (an
    operator from another tree's operator/src when `src` is given, named `label`)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"bench-del-{label or party_name}-{how}"
    create_namespace(core, namespace)
    party = Party(party_name, cluster, namespace, log_dir, operator_src=src)
    party.start()
    names = [f"d{i:03d}" for i in range(a.jobs)]
    for name in names:
        job = ddpjob(name, PODS)
        custom.create_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs", job)
    running = wait(lambda: all_running(core, namespace, a.jobs * PODS), a.timeout_seconds, f"{party_name}: running")
    if running is None:
        raise RuntimeError(f"{party_name}: {a.jobs} jobs not Running in {a.timeout_seconds}s")
    say(f"{party_name}: {a.jobs} jobs x {PODS} pods Running; deleting ({how})")
    started = time.monotonic()  # the delete call itself counts (a collection delete answers in seconds)
    timeline = Timeline(core, namespace, started)
    if how == "namespace":
        _ = core.delete_namespace(namespace, _preload_content=False).data
        done = wait(timeline.gone, a.timeout_seconds, f"{party_name}: namespace deletion")
    else:
        custom.delete_collection_namespaced_custom_object("ddpjob.dev", "v1alpha1", namespace, "ddpjobs")
        done = wait(lambda: not core.list_namespaced_pod(namespace).items, a.timeout_seconds, f"{party_name}: pods")
    took = None if done is None else time.monotonic() - started
    restarts = restarts_counted(party) if party_name == "operator" else 0.0
    party.stop()
    if not gone(core, namespace):
        # A stuck namespace (the operator was stopped above): free what is left so the next case starts clean.
        for pod in core.list_namespaced_pod(namespace).items:
            if pod.metadata.finalizers:
                core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"finalizers": None}})
        if how != "namespace":
            core.delete_namespace(namespace)
        wait(lambda: gone(core, namespace), 120, "clean-up")
    say(f"{party_name}: {how} deletion " + (f"took {took:.1f}s" if took is not None else "did not finish"))
    return {
        "party": label or party_name,
        "how": how,
        "seconds": None if took is None else round(took, 1),
        "finished": took is not None,
        "restarts_counted": restarts,
        **({"timeline": timeline.as_dict()} if how == "namespace" else {}),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--nodes", type=int, default=60)
    p.add_argument("--timeout-seconds", type=float, default=180)
    p.add_argument("--operator-src", type=Path, default=None, help="another tree's operator/src to measure")
    p.add_argument("--cluster-dir", default=None)
    p.add_argument("--before", default="", help="also measure this commit's operator (a git worktree) in the same run")
    a = p.parse_args()
    if a.operator_src is not None:
        os.environ["PYTHONPATH"] = f"{a.operator_src.resolve()}:{os.environ.get('PYTHONPATH', '')}"
    cluster = BenchCluster(Path(a.cluster_dir or tempfile.mkdtemp(prefix="ddpjob-del-")), a.nodes, 8)
    cluster.up()
    log_dir = Path(tempfile.mkdtemp(prefix="ddpjob-del-logs-"))
    try:
        api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        baseline = run_case(cluster, api, "baseline", "namespace", a, log_dir)
        before = None
        if a.before:
            with operator_src_at(a.before) as src:
                before = run_case(cluster, api, "operator", "namespace", a, log_dir, src, f"before-{short(a.before)}")
        namespace = run_case(cluster, api, "operator", "namespace", a, log_dir)
        jobs = run_case(cluster, api, "operator", "jobs", a, log_dir)
    finally:
        cluster.down()
    ratio = (
        round(namespace["seconds"] / baseline["seconds"], 2) if namespace["finished"] and baseline["seconds"] else None
    )
    result = {
        "machine": describe_machine(),
        "setup": {"jobs": a.jobs, "pods_per_job": PODS, "nodes": a.nodes, "operator_src": str(a.operator_src or "")},
        "baseline_namespace": baseline,
        "operator_namespace": namespace,
        "operator_delete_all_jobs": jobs,
        "namespace_ratio_vs_baseline": ratio,
        **(
            {
                "before_namespace": before,
                "before_ratio_vs_baseline": round(before["seconds"] / baseline["seconds"], 2)
                if before["finished"] and baseline["seconds"]
                else None,
            }
            if before is not None
            else {}
        ),
        "logs": str(log_dir),
    }
    a.out.write_text(json.dumps(result, indent=1))
    say(
        f"namespace deletion with {a.jobs} jobs: operator {namespace['seconds']}s (restarts counted "
        f"{namespace['restarts_counted']}), bare pods {baseline['seconds']}s, ratio {ratio}; "
        f"delete ddpj --all: {jobs['seconds']}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
