"""The chart installed into the real local cluster, and the operator run out of the cluster *as the chart's
ServiceAccount*: a kubeconfig carrying a token the API server issued for that ServiceAccount (TokenRequest).
(kubeconfig impersonation, `as:`, is not honoured by the Python kubernetes client that kopf and the operator
use, so a real token is the faithful way to hold exactly the chart's RBAC.)"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from support.chart_tools import CHART, ROOT, helm, set_flags
from support.cluster import Cluster, delete_namespace, wait_until
from support.ports import free_port

RELEASE = "ddpjob"


def create_namespace(cluster: Cluster, name: str) -> str:
    cluster.kubectl("create", "namespace", name)
    return name


def token_kubeconfig(cluster: Cluster, namespace: str, service_account: str, path: Path) -> Path:
    token = cluster.kubectl("-n", namespace, "create", "token", service_account, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = admin["clusters"][0]["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": service_account}}],
    }))
    return path


@dataclass
class OperatorRun:
    cluster: Cluster
    release_namespace: str
    watch_namespace: str
    fullname: str
    kubeconfig: Path
    log: Path
    metrics_port: int = 0
    standby_metrics_port: int = 0  # an HA test's second operator
    proc: subprocess.Popen | None = None

    def kubectl_as_operator(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / ".cache" / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig),
                               *args], capture_output=True, text=True, timeout=60)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def with_log(run: OperatorRun, fn, *args, **kwargs):
    """Call fn; if it fails, the failure carries the operator's log."""
    try:
        return fn(*args, **kwargs)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- operator log (tail) ---\n{run.log_text()[-6000:]}") from exc


def install_chart(cluster: Cluster, release_namespace: str, values: dict[str, str]) -> None:
    helm("install", RELEASE, str(CHART), "--namespace", release_namespace, *set_flags(values),
         kubeconfig=cluster.kubeconfig)


def start(cluster: Cluster, workdir: Path, *, single_namespace: bool, ha: bool = False) -> OperatorRun:
    """Install the chart and start one operator as its ServiceAccount. With ha, the chart's peering is used
    and this process is the primary (the chart's default priority 100)."""
    mode = ("ha-" if ha else "") + ("single" if single_namespace else "cluster")
    suffix = uuid.uuid4().hex[:5]
    release_ns = create_namespace(cluster, f"chart-{mode}-op-{suffix}")
    watch_ns = create_namespace(cluster, f"chart-{mode}-jobs-{suffix}")
    # A unique name per run: the ClusterRole and its binding are cluster-wide and the cluster is shared.
    fullname = f"ddpjob-op-{mode}-{suffix}"
    install_chart(cluster, release_ns, {"fullnameOverride": fullname,
                                        "singleNamespace": str(single_namespace).lower(),
                                        "watchNamespace": watch_ns if single_namespace else "",
                                        "ha.enabled": str(ha).lower()})
    kubeconfig = token_kubeconfig(cluster, release_ns, fullname, workdir / f"{mode}-sa.kubeconfig")
    run = OperatorRun(cluster, release_ns, watch_ns, fullname, kubeconfig, workdir / f"operator-{mode}.log")
    peering = ["--peering", fullname, "--priority", "100"] if ha else []
    run.proc, run.metrics_port = spawn(run, run.log, peering)
    return run


def spawn(run: OperatorRun, log: Path, extra_args: list[str]) -> tuple[subprocess.Popen, int]:
    """One operator process with the run's ServiceAccount token, live (its /healthz answers) on return."""
    metrics_port, liveness_port = free_port(), free_port()
    env = {**os.environ, "KUBECONFIG": str(run.kubeconfig), "PYTHONUNBUFFERED": "1"}
    # Cluster-wide RBAC or not, the process watches only its test namespace: an --all-namespaces operator would
    # also reconcile the jobs of every other test sharing this cluster. The cluster-wide verbs it would use are
    # exercised directly with the same token by the test.
    cmd = [sys.executable, "-m", "ddpjob_operator", "--namespace", run.watch_namespace,
           "--metrics-port", str(metrics_port), "--liveness-port", str(liveness_port), "--resync-seconds", "5",
           *extra_args]
    proc = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True)
    wait_until(lambda: proc.poll() is not None or _healthy(liveness_port), timeout=90,
               what=f"operator liveness on :{liveness_port}")
    assert proc.poll() is None, f"operator exited with {proc.returncode}:\n{log.read_text(errors='replace')}"
    return proc, metrics_port


def terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as rsp:
            return rsp.status == 200
    except OSError:
        return False


def stop(run: OperatorRun) -> None:
    if run.proc is not None:
        terminate(run.proc)
    # Cluster-scoped objects (ClusterRole, binding) do not go away with the namespaces.
    # --no-hooks: the pre-delete hook's pod would wait for ever on these untolerated kwok nodes (the hook itself is
    # tested by test_uninstall_hook.py).
    helm("uninstall", RELEASE, "--namespace", run.release_namespace, "--wait", "--no-hooks", check=False,
         kubeconfig=run.cluster.kubeconfig)
    for ns in (run.watch_namespace, run.release_namespace):
        delete_namespace(run.cluster, ns)
