"""One scale workload (J DDPJobs x P pods) run by one party on the throw-away cluster: the operator as a real
process, or the baseline client as a real process. Both react to the same trigger (the DDPJobs the admin
submits), so 'apply -> all pods Running' means the same thing for both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench_cluster import BenchCluster
from cluster_watch import NamespaceWatch
from process_usage import ProcessUsage, read_usage
from progress_lines import say
from request_counts import RequestCounts, parse_counts

ROOT = Path(__file__).resolve().parents[1]
SUBMIT_THREADS = 8
OPERATOR_WORKERS = 4  # the operator's default --workers; the baseline gets the same number of threads


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddpjob(name: str, pods: int, gpus: int = 1) -> dict:
    return {
        "apiVersion": "ddpjob.dev/v1alpha1",
        "kind": "DDPJob",
        "metadata": {"name": name},
        "spec": {
            "replicas": pods,
            "gpusPerReplica": gpus,
            "restartPolicy": "OnFailure",
            "runPolicy": {"backoffLimit": 3, "restartBackoffSeconds": 0},
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "trainer", "image": "bench/ddp-trainer:none"}],
                }
            },
        },
    }


def succeed_pod(core: client.CoreV1Api, namespace: str, pod: str) -> None:
    """The simulated trainer exits 0: the pod's status says so, as a kubelet's would (kwok runs nothing)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
    container = {
        "name": "trainer",
        "ready": False,
        "restartCount": 0,
        "image": "bench/ddp-trainer:none",
        "imageID": "",
        "state": {"terminated": terminated},
    }
    core.patch_namespaced_pod_status(
        pod, namespace, {"status": {"phase": "Succeeded", "containerStatuses": [container]}}
    )


@dataclass
class RunResult:
    party: str
    jobs: int
    pods_per_job: int
    latencies: list[float] = field(default_factory=list)  # per job: apply -> all pods Running, seconds
    total_seconds: float = 0.0  # first apply -> last group Running
    groups_running: int = 0
    requests: RequestCounts = RequestCounts(0, 0)
    usage: ProcessUsage | None = None
    timed_out: bool = False
    status_running_seconds: float | None = None  # operator only: first apply -> every job's status says Running
    recovery: dict | None = None  # what after_running measured


class Party:
    """A measured client process (operator or baseline) scoped to one namespace."""

    def __init__(
        self,
        party: str,
        cluster: BenchCluster,
        namespace: str,
        log_dir: Path,
        extra_args: tuple[str, ...] = (),
        operator_src: Path | None = None,
    ):
        self.party, self.cluster, self.namespace = party, cluster, namespace
        self.extra_args = list(extra_args)  # more operator flags (the gang benchmark's --gang-scheduling)
        self.operator_src = operator_src  # another tree's operator/src (a baseline), instead of this one
        self.log_path = log_dir / f"{party}-{namespace}.log"
        self.proc: subprocess.Popen | None = None
        # Ports of its own each run: a leftover process on a fixed port would answer for it.
        self.metrics_port, self.liveness_port = free_port(), free_port()

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig(self.party)), "PYTHONUNBUFFERED": "1"}
        if self.operator_src is not None:
            env["PYTHONPATH"] = f"{self.operator_src.resolve()}:{env.get('PYTHONPATH', '')}"
        if self.party == "operator":
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
                "--workers",
                str(OPERATOR_WORKERS),
                *self.extra_args,
            ]
        else:
            args = [
                sys.executable,
                str(ROOT / "bench" / "baseline_client.py"),
                "--namespace",
                self.namespace,
                "--workers",
                str(OPERATOR_WORKERS),
            ]
        with open(self.log_path, "w") as log:
            self.proc = proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        self._wait_ready(proc)

    def _wait_ready(self, proc: subprocess.Popen, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.party} exited with {proc.returncode}: {self.log_path.read_text()}")
            if self.party == "operator":
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=1):
                        return
                except OSError:
                    pass
            elif "watching" in self.log_path.read_text():
                time.sleep(1)  # the watch request is sent right after the line
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.party} not ready after {timeout}s: {self.log_path.read_text()}")

    def usage(self) -> ProcessUsage:
        assert self.proc is not None, "usage() before start()"
        return read_usage(self.proc.pid)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


def submit(custom: client.CustomObjectsApi, namespace: str, names: list[str], pods: int) -> dict[str, float]:
    applied: dict[str, float] = {}

    def one(name: str) -> None:
        applied[name] = time.monotonic()
        _ = custom.create_namespaced_custom_object(
            "ddpjob.dev", "v1alpha1", namespace, "ddpjobs", ddpjob(name, pods), _preload_content=False
        ).data

    with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
        list(pool.map(one, names))
    return applied


def wait_groups_running(
    watch: NamespaceWatch,
    names: list[str],
    pods: int,
    timeout: float,
    what: str,
    attempt_of: dict[str, int] | None = None,
) -> bool:
    attempt_of = attempt_of or {}
    deadline, last_report = time.monotonic() + timeout, 0.0
    while True:
        done = watch.count_groups_running(names, attempt_of, pods)
        now = time.monotonic()
        if done == len(names):
            return True
        if now - last_report >= 10:
            say(
                f"  {what}: {done}/{len(names)} groups Running ({watch.events} watch events, "
                f"{watch.reconnects} watch reconnects)"
            )
            last_report = now
        if now > deadline:
            say(f"  {what}: TIMED OUT after {timeout:.0f}s with {done}/{len(names)} groups Running")
            return False
        time.sleep(0.5)


def wait_phase(watch: NamespaceWatch, names: list[str], phase: str, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watch.count_phase(names, phase) == len(names):
            return time.monotonic()
        time.sleep(0.5)
    return None


def create_namespace(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespace({"metadata": {"name": namespace}})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except ApiException:
            time.sleep(0.25)
    raise RuntimeError(f"no default ServiceAccount in {namespace} after 60s")


def delete_namespace(core: client.CoreV1Api, namespace: str, timeout: float = 300) -> None:
    """Frees the GPUs before the next run: it returns only once every pod of the namespace is gone."""
    say(f"  deleting namespace {namespace}")
    _ = core.delete_namespace(namespace, _preload_content=False).data
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _ = core.read_namespace(namespace, _preload_content=False).data
        except ApiException as exc:
            if exc.status == 404:
                return
        time.sleep(1)
    raise RuntimeError(f"namespace {namespace} still there after {timeout}s")


def run_workload(
    cluster: BenchCluster,
    admin: client.ApiClient,
    party: str,
    jobs: int,
    pods: int,
    log_dir: Path,
    timeout: float,
    after_running=None,
) -> RunResult:
    """after_running(watch, names, namespace, runner) runs while the party is still up (steady state, recovery and
    cache memory)."""
    namespace = f"{party[:4]}-{jobs}x{pods}"
    core, custom = client.CoreV1Api(admin), client.CustomObjectsApi(admin)
    say(f"{party}: {jobs} DDPJobs x {pods} pods in namespace {namespace}")
    create_namespace(core, namespace)
    runner = Party(party, cluster, namespace, log_dir)
    watch = NamespaceWatch(admin, namespace).start()
    result = RunResult(party, jobs, pods)
    try:
        runner.start()
        before = parse_counts(cluster.apiserver_metrics())[party]
        names = [f"j{i:04d}" for i in range(jobs)]
        first_apply = time.monotonic()
        applied = submit(custom, namespace, names, pods)
        say(f"  submitted {jobs} DDPJobs in {time.monotonic() - first_apply:.1f}s")
        result.timed_out = not wait_groups_running(watch, names, pods, timeout, party)
        if party == "operator":
            left = max(10.0, timeout - (time.monotonic() - first_apply))
            done_at = wait_phase(watch, names, "Running", left)
            result.status_running_seconds = None if done_at is None else done_at - first_apply
        result.requests = parse_counts(cluster.apiserver_metrics())[party] - before
        result.usage = runner.usage()
        ends = {n: watch.all_running_at(n, 0, pods) for n in names}
        result.latencies = sorted(end - applied[n] for n, end in ends.items() if end is not None)
        result.groups_running = len(result.latencies)
        finished = [t for t in ends.values() if t is not None]
        result.total_seconds = (max(finished) - first_apply) if finished else 0.0
        say(
            f"  {party}: {result.groups_running}/{jobs} groups Running, total {result.total_seconds:.1f}s, "
            f"{result.requests.total / jobs:.1f} requests/job ({result.requests.writes / jobs:.1f} writes), "
            f"peak RSS {result.usage.peak_rss_mib:.0f} MiB, CPU {result.usage.cpu_seconds:.1f}s"
        )
        if after_running is not None and not result.timed_out:
            result.recovery = after_running(watch, names, namespace, runner)
    finally:
        watch.stop()
        if party == "operator":
            # Jobs first, while the operator still runs: it frees their pods' tracking finalizers as they go (a
            # namespace deleted under live jobs would first have them restart groups whose pods are going).
            _ = custom.delete_collection_namespaced_custom_object(
                "ddpjob.dev", "v1alpha1", namespace, "ddpjobs", _preload_content=False
            ).data
            delete_namespace(core, namespace)
            runner.stop()
        else:
            runner.stop()
            delete_namespace(core, namespace)
    return result
