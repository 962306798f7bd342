"""The real local control planes for tests, started once per session by hack/cluster.sh, or taken from $KUBECONFIG
when one is given. Never a mock.

There are two, each a whole control plane with its own directory and ports, so that `make test` runs two suites
against them at once (tests/conftest.py's lanes) and an outage one suite makes reaches only its own lane. The first
is the one `make demo` uses, and the one the local node agents join."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ddpjob_operator.api import TRACKING_FINALIZER

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "bin"
CLUSTER_SH = ROOT / "hack" / "cluster.sh"

# What hack/cluster.sh, hack/kueue.sh and hack/realnode.sh read to work on the second control plane instead of the
# first (their defaults). Ports below the kernel's ephemeral range (32768-60999), as the first's are, so no outgoing
# connection holds one while a component restarts; the simulated pods get their own loopback range. None is among
# RENDEZVOUS_PORTS: Kueue's health port was 31081 there, and a job that drew it failed its rendezvous, EADDRINUSE.
SECOND = {
    "CLUSTER_DIR": str(ROOT / ".local-cluster-2"), "ETCD_PORT": "24790", "ETCD_PEER_PORT": "24800",
    "APISERVER_PORT": "27443", "KCM_PORT": "21257", "SCHED_PORT": "21259", "KWOK_PORT": "21247",
    "KWOK_CIDR": "127.245.0.0/16", "KUEUE_WEBHOOK_PORT": "29543", "KUEUE_METRICS_PORT": "28180",
    "KUEUE_HEALTH_PORT": "28181",
}
# The ports the suites draw a job's rendezvous.port from (torchrun's c10d store binds *:<port> on this machine, which
# every suite shares): no control plane's or add-on's port lies in it.
RENDEZVOUS_PORTS = range(30000, 32001)


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    started_here: bool
    env: Mapping[str, str] = field(default_factory=dict)  # for the hack/ scripts: which control plane

    def script_env(self, **extra: str) -> dict[str, str]:
        """The environment a hack/ script (cluster.sh, kueue.sh) runs in for this cluster."""
        return {**os.environ, **self.env, **extra}

    def get_json(self, path: str, **query: str) -> dict | None:
        """GET an API path (`/api/v1/namespaces/ns/pods`, query as keywords: labelSelector=...), as `kubectl get -o
        json` prints it, or None when the server answers an error or cannot be reached. For the polls that run every
        half second while a job trains: a kubectl process costs about 0.1 CPU-s to start, on a machine that make test
        keeps busy, and this goes over a connection kept open."""
        text = self.get_text(path, **query)
        return None if text is None else json.loads(text)

    def get_text(self, path: str, **query: str) -> str | None:
        """GET an API path's body as text (a pod's log: `/api/v1/namespaces/ns/pods/name/log`), None on an error."""
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        api = api_client(self.kubeconfig)
        try:
            request = api.param_serialize("GET", path, query_params=list(query.items()), auth_settings=["BearerToken"])
            response = api.call_api(*request, _request_timeout=60)
            body = response.read()
        except (ApiException, HTTPError, OSError):
            return None
        return body.decode() if 200 <= response.status < 300 else None

    def sh(self, *args: str, env: Mapping[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
        """hack/cluster.sh ARGS on this cluster (stop or start a component, status), with env's settings added."""
        return subprocess.run(["bash", str(CLUSTER_SH), *args], env=self.script_env(**(env or {})), **kwargs)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input, capture_output=True, text=True, check=check, timeout=timeout,
        )


@functools.cache
def api_client(kubeconfig: Path):
    """A kubernetes client for a kubeconfig, one per file for the session (the `kube_api` fixture's, and the
    connection `Cluster.get_json` reads over)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(configuration=cfg)


def up(env: Mapping[str, str] | None = None) -> Cluster:
    """The first control plane, or with env=SECOND the second. A $KUBECONFIG given stands for both."""
    given = os.environ.get("KUBECONFIG")
    if given:
        return Cluster(Path(given), started_here=False)
    cluster = Cluster(Path((env or {}).get("CLUSTER_DIR", ROOT / ".local-cluster")) / "kubeconfig",
                      started_here=True, env=dict(env or {}))
    cluster.sh("up", check=True)
    return cluster


def down(cluster: Cluster) -> None:
    cluster.sh("down", check=True)


def wait_until(predicate, timeout: float = 30, interval: float = 0.25, what: str = "condition"):
    """Poll predicate() until it returns a truthy value, and return that value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")




def release_tracking_finalizers(cluster: Cluster, namespace: str) -> int:
    """Free the worker pods the operator can no longer free (it was stopped first), as a user does after
    uninstalling it (docs/operator.md). Returns how many pods were freed."""
    import json
    listed = cluster.kubectl("-n", namespace, "get", "pods", "-o", "json", check=False)
    if listed.returncode != 0:
        return 0
    freed = 0
    for pod in json.loads(listed.stdout)["items"]:
        finalizers = pod["metadata"].get("finalizers") or []
        if TRACKING_FINALIZER not in finalizers:
            continue
        patch = [{"op": "test", "path": f"/metadata/finalizers/{finalizers.index(TRACKING_FINALIZER)}",
                  "value": TRACKING_FINALIZER},
                 {"op": "remove", "path": f"/metadata/finalizers/{finalizers.index(TRACKING_FINALIZER)}"}]
        done = cluster.kubectl("-n", namespace, "patch", "pod", pod["metadata"]["name"], "--type=json",
                               "-p", json.dumps(patch), check=False)
        freed += done.returncode == 0
    return freed


def delete_namespace(cluster: Cluster, namespace: str) -> None:
    """A test namespace goes as a user's would: its DDPJobs first (a running operator then frees their pods), any
    pod still held by the tracking finalizer freed by hand (the test's operator may be stopped already), then the
    namespace. Without the second step a stopped operator's pods would hold their GPUs on the shared nodes."""
    cluster.kubectl("-n", namespace, "delete", "ddpjobs.ddpjob.dev", "--all", "--wait=false", check=False)
    release_tracking_finalizers(cluster, namespace)
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
