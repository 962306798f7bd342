"""The node's credentials, made the way a kubelet gets them: a client certificate with
CN=system:node:<name>, O=system:nodes signed by the cluster CA (so the Node authorizer and NodeRestriction
limit the agent exactly like a kubelet), and a serving certificate for the kubelet API on 127.0.0.1."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodeCredentials:
    ca_cert: Path
    client_cert: Path
    client_key: Path
    serving_cert: Path
    serving_key: Path
    kubeconfig: Path


def ensure_credentials(node_name: str, pki_dir: Path, out_dir: Path, server: str, kubeconfig: Path) -> NodeCredentials:
    ca_cert, ca_key = pki_dir / "ca.crt", pki_dir / "ca.key"
    if not ca_cert.exists() or not ca_key.exists():
        raise FileNotFoundError(f"cluster CA not found in {pki_dir}: start the cluster first (hack/cluster.sh up)")
    out_dir.mkdir(parents=True, exist_ok=True)
    client = out_dir / "node-client"
    serving = out_dir / "kubelet-serving"
    _sign(ca_cert, ca_key, client, f"/O=system:nodes/CN=system:node:{node_name}", "clientAuth", san=None)
    _sign(ca_cert, ca_key, serving, f"/CN={node_name}", "serverAuth", san=f"IP:127.0.0.1,DNS:{node_name},DNS:localhost")
    kubeconfig.write_text(_kubeconfig(server, ca_cert, client, node_name))
    return NodeCredentials(
        ca_cert,
        client.with_suffix(".crt"),
        client.with_suffix(".key"),
        serving.with_suffix(".crt"),
        serving.with_suffix(".key"),
        kubeconfig,
    )


def _sign(ca_cert: Path, ca_key: Path, base: Path, subject: str, usage: str, san: str | None) -> None:
    crt, key, csr, ext = (base.with_suffix(s) for s in (".crt", ".key", ".csr", ".ext"))
    # A certificate from an earlier cluster (another CA) would be rejected: re-sign unless the CA still verifies it.
    if crt.exists() and key.exists() and _verifies(ca_cert, crt):
        return
    _openssl("genrsa", "-out", str(key), "2048")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    lines = [
        "basicConstraints=CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
    ]
    if san:
        lines.append(f"subjectAltName={san}")
    ext.write_text("\n".join(lines) + "\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_cert),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "3650",
        "-sha256",
        "-extfile",
        str(ext),
        "-out",
        str(crt),
    )
    csr.unlink(missing_ok=True)
    ext.unlink(missing_ok=True)


def _verifies(ca_cert: Path, crt: Path) -> bool:
    return subprocess.run(["openssl", "verify", "-CAfile", str(ca_cert), str(crt)], capture_output=True).returncode == 0


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _kubeconfig(server: str, ca_cert: Path, client: Path, node_name: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: ddpjob-local
  cluster: {{server: "{server}", certificate-authority: "{ca_cert}"}}
users:
- name: system:node:{node_name}
  user: {{client-certificate: "{client.with_suffix(".crt")}", client-key: "{client.with_suffix(".key")}"}}
contexts:
- name: node
  context: {{cluster: ddpjob-local, user: "system:node:{node_name}"}}
current-context: node
"""
