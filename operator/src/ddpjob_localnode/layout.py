"""Where the agent finds the project and keeps its state. Everything is derived from the repository root so
the agent works from any checkout."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

LOCAL_NODE_LABEL = "ddpjob.dev/local-node"
DEFAULT_KUBELET_PORT = 20250


def repo_root() -> Path:
    given = os.environ.get("DDPJOB_ROOT")
    if given:
        return Path(given).resolve()
    # operator/src/ddpjob_localnode/layout.py -> the repository root is three folders up from the package.
    return Path(__file__).resolve().parents[3]


def default_node_name() -> str:
    host = socket.gethostname().split(".")[0].lower()
    cleaned = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in host).strip("-")
    return f"local-{cleaned or 'machine'}"


@dataclass(frozen=True)
class Layout:
    root: Path
    node_name: str

    @property
    def cluster_dir(self) -> Path:
        return Path(os.environ.get("CLUSTER_DIR", self.root / ".local-cluster"))

    @property
    def pki_dir(self) -> Path:
        return self.cluster_dir / "pki"

    @property
    def state_dir(self) -> Path:
        return self.cluster_dir / "local-node"

    @property
    def pods_dir(self) -> Path:
        return self.state_dir / "pods"

    @property
    def pid_file(self) -> Path:
        return self.cluster_dir / "pids" / "local-node.pid"

    @property
    def log_file(self) -> Path:
        return self.cluster_dir / "logs" / "local-node.log"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.cluster_dir / "kubeconfig"

    @property
    def node_kubeconfig(self) -> Path:
        return self.state_dir / "node.kubeconfig"

    @property
    def venv_bin(self) -> Path:
        return self.root / ".venv" / "bin"

    def pod_dir(self, namespace: str, name: str, uid: str) -> Path:
        return self.pods_dir / f"{namespace}_{name}_{uid}"
