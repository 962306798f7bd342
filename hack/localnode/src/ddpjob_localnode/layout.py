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
    # hack/localnode/src/ddpjob_localnode/layout.py: the repository root is four folders up from the package.
    return Path(__file__).resolve().parents[4]


def default_node_name(index: int = 0) -> str:
    """local-<host> for the first agent, local-<host>-<index> for the others (LOCAL_NODES > 1)."""
    host = socket.gethostname().split(".")[0].lower()
    cleaned = "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in host).strip("-")
    return f"local-{cleaned or 'machine'}" + (f"-{index}" if index else "")


def local_nodes() -> int:
    """How many agents share this machine (LOCAL_NODES, default 1)."""
    return max(1, int(os.environ.get("LOCAL_NODES", "1")))


@dataclass(frozen=True)
class Layout:
    root: Path
    node_name: str
    index: int = 0  # which of the LOCAL_NODES agents on this machine: its files, ports and addresses

    @property
    def _suffix(self) -> str:
        return f"-{self.index}" if self.index else ""

    @property
    def cluster_dir(self) -> Path:
        return Path(os.environ.get("CLUSTER_DIR", self.root / ".local-cluster"))

    @property
    def pki_dir(self) -> Path:
        return self.cluster_dir / "pki"

    @property
    def state_dir(self) -> Path:
        return self.cluster_dir / f"local-node{self._suffix}"

    @property
    def hostpath_root(self) -> Path:
        """Where hostPath volumes live: one folder for every agent on this machine (they share its disk, as pods
        on real nodes share a network filesystem), so a group that moves between local nodes finds its
        checkpoints."""
        return self.cluster_dir / "local-node" / "hostpath"

    @property
    def pods_dir(self) -> Path:
        return self.state_dir / "pods"

    @property
    def pid_file(self) -> Path:
        return self.cluster_dir / "pids" / f"local-node{self._suffix}.pid"

    @property
    def log_file(self) -> Path:
        return self.cluster_dir / "logs" / f"local-node{self._suffix}.log"

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
