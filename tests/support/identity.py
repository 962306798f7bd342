"""A client identity of its own for a process under test, and the API server's count of what it sent.

The identity is a client certificate signed by the local cluster's CA (bound to cluster-admin); one FlowSchema
matches its GET and LIST requests, so `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}` counts
exactly its reads, from the API server itself, as the benchmark does. No client is wrapped or mocked."""

from __future__ import annotations

import json
import ssl
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from support.cluster import Cluster

DISPATCHED = "apiserver_flowcontrol_dispatched_requests_total"


def make_identity(cluster: Cluster, user: str, out_dir: Path) -> Path:
    """A kubeconfig for `user`, a cluster-admin, and a FlowSchema `<user>-reads` matching its get/list."""
    pki = cluster.kubeconfig.parent / "pki"
    key, crt = out_dir / f"{user}.key", out_dir / f"{user}.crt"
    with tempfile.TemporaryDirectory() as tmp:
        csr = Path(tmp) / "req.csr"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "req", "-new", "-key", str(key), "-subj", f"/CN={user}", "-out", str(csr)],
                       check=True, capture_output=True)
        subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey",
                        str(pki / "ca.key"), "-CAcreateserial", "-days", "1", "-out", str(crt)],
                       check=True, capture_output=True)
    config = json.loads(cluster.kubectl("config", "view", "--raw", "-o", "json").stdout)
    server = config["clusters"][0]["cluster"]["server"]
    kubeconfig = out_dir / f"{user}.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": user}}]}))
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": user},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": {"name": f"{user}-reads"},
         "spec": {"matchingPrecedence": 600, "priorityLevelConfiguration": {"name": "global-default"},
                  "distinguisherMethod": {"type": "ByUser"},
                  "rules": [{"subjects": [{"kind": "User", "user": {"name": user}}],
                             "resourceRules": [{"verbs": ["get", "list"], "apiGroups": ["*"], "resources": ["*"],
                                                "clusterScope": True, "namespaces": ["*"]}]}]}}]}))
    return kubeconfig


def reads_of(cluster: Cluster, user: str) -> float:
    """GET and LIST requests the API server has dispatched for `user` since it started."""
    pki = cluster.kubeconfig.parent / "pki"
    config = json.loads(cluster.kubectl("config", "view", "--raw", "-o", "json").stdout)
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with urllib.request.urlopen(config["clusters"][0]["cluster"]["server"] + "/metrics", context=context,
                                timeout=30) as response:
        text = response.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == DISPATCHED and sample.labels.get("flow_schema") == f"{user}-reads")
