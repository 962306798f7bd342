"""The chart installed into the real local cluster, and the operator run out of the cluster *as the chart's
ServiceAccount*: a kubeconfig carrying a token the API server issued for that ServiceAccount (TokenRequest).
(kubeconfig impersonation, `as:`, is not honoured by the Python kubernetes client that kopf and the operator
use, so a real token is the faithful way to hold exactly the chart's RBAC.)"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from chart_tools import CHART, ROOT, helm, set_flags
from support.cluster import Cluster, wait_until

RELEASE = "ddpjob"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    metrics_port: int
    log: Path
    proc: subprocess.Popen

    def kubectl_as_operator(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(ROOT / ".cache" / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig),
                               *args], capture_output=True, text=True, timeout=60)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def install_chart(cluster: Cluster, release_namespace: str, values: dict[str, str]) -> None:
    helm("install", RELEASE, str(CHART), "--namespace", release_namespace, *set_flags(values),
         kubeconfig=cluster.kubeconfig)


def start(cluster: Cluster, workdir: Path, *, single_namespace: bool) -> OperatorRun:
    mode = "single" if single_namespace else "cluster"
    suffix = uuid.uuid4().hex[:5]
    release_ns = create_namespace(cluster, f"chart-{mode}-op-{suffix}")
    watch_ns = create_namespace(cluster, f"chart-{mode}-jobs-{suffix}")
    # A unique name per run: the ClusterRole and its binding are cluster-wide and the cluster is shared.
    fullname = f"ddpjob-op-{mode}-{suffix}"
    install_chart(cluster, release_ns, {"fullnameOverride": fullname,
                                        "singleNamespace": str(single_namespace).lower(),
                                        "watchNamespace": watch_ns if single_namespace else ""})
    kubeconfig = token_kubeconfig(cluster, release_ns, fullname, workdir / f"{mode}-sa.kubeconfig")
    metrics_port, liveness_port = free_port(), free_port()
    log = workdir / f"operator-{mode}.log"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
    # Cluster-wide RBAC, but the process watches only its test namespace: an --all-namespaces operator would
    # also reconcile the jobs of every other test sharing this cluster. The cluster-wide verbs it would use are
    # exercised directly with the same token by the test.
    cmd = [sys.executable, "-m", "ddpjob_operator", "--namespace", watch_ns, "--metrics-port", str(metrics_port),
           "--liveness-port", str(liveness_port), "--resync-seconds", "5"]
    proc = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True)
    run = OperatorRun(cluster, release_ns, watch_ns, fullname, kubeconfig, metrics_port, log, proc)
    wait_until(lambda: proc.poll() is not None or _healthy(liveness_port), timeout=60,
               what=f"operator liveness on :{liveness_port}")
    assert proc.poll() is None, f"operator exited with {proc.returncode}:\n{run.log_text()}"
    return run


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as rsp:
            return rsp.status == 200
    except OSError:
        return False


def stop(run: OperatorRun) -> None:
    if run.proc.poll() is None:
        os.killpg(run.proc.pid, signal.SIGTERM)
        try:
            run.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait(timeout=5)
    # Cluster-scoped objects (ClusterRole, binding) do not go away with the namespaces.
    helm("uninstall", RELEASE, "--namespace", run.release_namespace, "--wait", check=False,
         kubeconfig=run.cluster.kubeconfig)
    for ns in (run.watch_namespace, run.release_namespace):
        run.cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
