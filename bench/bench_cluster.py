"""A throw-away control plane for the scale benchmark, on its own directory and ports so the shared test cluster
is never touched, plus one client identity per measured party (operator, baseline) whose requests the API
server counts separately through API Priority and Fairness FlowSchemas."""

from __future__ import annotations

import os
import ssl
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from progress_lines import say

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".cache" / "bin"
CLUSTER_SH = ROOT / "hack" / "cluster.sh"

# Far from the shared cluster's defaults (23790, 26443, 2025x), so both can run side by side.
PORTS = {
    "ETCD_PORT": "43790",
    "ETCD_PEER_PORT": "43800",
    "APISERVER_PORT": "46443",
    "KCM_PORT": "40257",
    "SCHED_PORT": "40259",
    "KWOK_PORT": "40247",
}

# The two parties whose API requests are compared. Each is a user of its own (a client certificate signed by the
# cluster's CA), bound to cluster-admin, so nothing differs between them but the code that issues requests.
PARTIES = ("operator", "baseline")
WRITE_VERBS = ["create", "update", "patch", "delete", "deletecollection"]


def user_name(party: str) -> str:
    return f"ddpjob-bench-{party}"


def flow_schema_name(party: str, kind: str) -> str:
    return f"ddpjob-bench-{party}-{kind}"


@dataclass(frozen=True)
class BenchCluster:
    dir: Path
    nodes: int
    gpus_per_node: int

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            **PORTS,
            "CLUSTER_DIR": str(self.dir),
            "NODES": str(self.nodes),
            "GPUS_PER_NODE": str(self.gpus_per_node),
        }

    @property
    def admin_kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    def kubeconfig(self, party: str) -> Path:
        return self.dir / f"{party}.kubeconfig"

    def up(self) -> None:
        say(f"starting a throw-away cluster in {self.dir} ({self.nodes} kwok nodes x {self.gpus_per_node} GPUs)")
        healthy = subprocess.run(["bash", str(CLUSTER_SH), "status"], env=self.env, capture_output=True).returncode == 0
        if not healthy:  # a reused one (--cluster-dir) already has its nodes: re-applying 250 of them takes minutes
            subprocess.run(["bash", str(CLUSTER_SH), "up"], env=self.env, check=True)
        for party in PARTIES:
            self._make_identity(party)
        self.kubectl_apply(_counting_manifests())
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/ddpjobs.ddpjob.dev")

    def down(self) -> None:
        say(f"tearing down the throw-away cluster in {self.dir}")
        subprocess.run(["bash", str(CLUSTER_SH), "down"], env=self.env, check=False)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        done = subprocess.run(
            [str(BIN / "kubectl"), "--kubeconfig", str(self.admin_kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def kubectl_apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", input=manifest)

    def apiserver_metrics(self) -> str:
        """The API server's own /metrics page, read as the admin."""
        pki = self.dir / "pki"
        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        url = f"https://127.0.0.1:{PORTS['APISERVER_PORT']}/metrics"
        with urllib.request.urlopen(url, context=context, timeout=30) as response:
            return response.read().decode()

    def _make_identity(self, party: str) -> None:
        pki = self.dir / "pki"
        key, crt = pki / f"{party}.key", pki / f"{party}.crt"
        if not crt.exists():
            with tempfile.TemporaryDirectory() as tmp:
                csr = Path(tmp) / "req.csr"
                subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
                subprocess.run(
                    ["openssl", "req", "-new", "-key", str(key), "-subj", f"/CN={user_name(party)}", "-out", str(csr)],
                    check=True,
                    capture_output=True,
                )
                subprocess.run(
                    [
                        "openssl",
                        "x509",
                        "-req",
                        "-in",
                        str(csr),
                        "-CA",
                        str(pki / "ca.crt"),
                        "-CAkey",
                        str(pki / "ca.key"),
                        "-CAcreateserial",
                        "-days",
                        "2",
                        "-out",
                        str(crt),
                    ],
                    check=True,
                    capture_output=True,
                )
        server = f"https://127.0.0.1:{PORTS['APISERVER_PORT']}"
        self.kubeconfig(party).write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster: {{server: "{server}", certificate-authority: "{pki / "ca.crt"}"}}
users:
- name: {party}
  user: {{client-certificate: "{crt}", client-key: "{key}"}}
contexts:
- name: bench
  context: {{cluster: bench, user: {party}}}
current-context: bench
""")


def _counting_manifests() -> str:
    """cluster-admin for each party, one priority level, and two FlowSchemas per party: its writes (matched
    first) and everything else it sends. apiserver_flowcontrol_dispatched_requests_total{flow_schema} then
    counts each party's requests, from the API server itself."""
    docs = [
        """apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: ddpjob-bench}
spec:
  type: Limited
  limited:
    # Large enough that neither party is ever queued by APF: the benchmark measures the clients, not APF.
    nominalConcurrencyShares: 200
    lendablePercent: 0
    limitResponse: {type: Queue, queuing: {queues: 64, handSize: 8, queueLengthLimit: 200}}
"""
    ]
    for precedence, party in ((500, "operator"), (510, "baseline")):
        user = user_name(party)
        docs.append(f"""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {user}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]
""")
        for offset, kind, verbs in ((0, "writes", WRITE_VERBS), (1, "reads", ["*"])):
            non_resource = "\n    nonResourceRules: [{verbs: ['*'], nonResourceURLs: ['*']}]" if kind == "reads" else ""
            everything = "apiGroups: ['*'], resources: ['*'], clusterScope: true, namespaces: ['*']"
            docs.append(f"""apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: {flow_schema_name(party, kind)}}}
spec:
  matchingPrecedence: {precedence + offset}
  priorityLevelConfiguration: {{name: ddpjob-bench}}
  distinguisherMethod: {{type: ByUser}}
  rules:
  - subjects: [{{kind: User, user: {{name: {user}}}}}]
    resourceRules: [{{verbs: {verbs}, {everything}}}]{non_resource}
""")
    return "---\n".join(docs)
