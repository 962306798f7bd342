"""The local node agent for tests: started once against the shared cluster (python -m ddpjob_localnode start),
stopped by its pid file, and a few builders and waits for pods that run on it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from .cluster import ROOT, Cluster, wait_until

CLUSTER_DIR = Path(os.environ.get("CLUSTER_DIR", ROOT / ".local-cluster"))
PID_FILE = CLUSTER_DIR / "pids" / "local-node.pid"
LOG_FILE = CLUSTER_DIR / "logs" / "local-node.log"
LABEL = "ddpjob.dev/local-node"


def node_name(index: int = 0) -> str:
    out = subprocess.run([sys.executable, "-c", "from ddpjob_localnode.layout import default_node_name as n;"
                          f"print(n({index}))"], capture_output=True, text=True, check=True)
    return os.environ.get("LOCAL_NODE_NAME", out.stdout.strip()) if index == 0 else out.stdout.strip()


def start_extra(cluster: Cluster, index: int, nodes: int) -> str:
    """Agent `index` of `nodes` sharing this machine (LOCAL_NODES); its node name once it is Ready."""
    env = {**os.environ, "LOCAL_NODES": str(nodes)}
    subprocess.run([sys.executable, "-m", "ddpjob_localnode", "--index", str(index), "start"], check=True, cwd=ROOT,
                   timeout=90, env=env)
    name = node_name(index)
    wait_until(lambda: node_ready(cluster, name) == "True", timeout=60, what=f"local node {name} Ready")
    return name


def stop_extra(index: int) -> None:
    """A graceful stop: the agent marks its node NotReady and kills its pods' processes."""
    subprocess.run([sys.executable, "-m", "ddpjob_localnode", "--index", str(index), "stop"], check=True, cwd=ROOT,
                   timeout=30)


def freeze(index: int = 0) -> list[int]:
    """A silent loss, as a node's power or network goes: agent `index` (0: the first) and every process of its pods are stopped
    (SIGSTOP). The agent posts nothing more (the node goes NotReady at the node monitor's grace) and the pods'
    kernel still acknowledges, so no peer is reset. (Killing the agent instead would kill its pods: each container's
    init dies with it.) Its pods' names leave the machine's /etc/hosts at once, where the local node stands in for
    the cluster's DNS, which no node serves alone. The stopped processes, the agent first, for thaw()."""
    from ddpjob_localnode.hosts_block import write_block
    from ddpjob_localnode.recovery import descendants

    agent = int((PID_FILE if index == 0 else CLUSTER_DIR / "pids" / f"local-node-{index}.pid").read_text().strip())
    os.kill(agent, signal.SIGSTOP)
    frozen = [agent, *(pid for pid in descendants(agent) if _signal(pid, signal.SIGSTOP))]
    write_block(Path(os.environ.get("LOCAL_NODE_HOSTS_FILE", "/etc/hosts")), node_name(index), {})
    return frozen


def thaw(frozen: list[int]) -> None:
    """The frozen node's agent and pods' processes ended (SIGKILL), as a node that comes back runs nothing of what
    it ran. Its agent is started again by the caller, if at all."""
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    # Gone before anyone starts the agent again: a dying agent still found by its pid file is taken for running.
    for pid in frozen:
        wait_until(lambda pid=pid: _gone(pid), timeout=30, what=f"frozen pid {pid} to end")


def _signal(pid: int, signum: int) -> bool:
    try:
        os.kill(pid, signum)
        return True
    except ProcessLookupError:
        return False


def agent_pid() -> int | None:
    try:
        pid = int(PID_FILE.read_text().strip())
    except (OSError, ValueError):
        return None
    return None if _gone(pid) else pid


def start(cluster: Cluster) -> bool:
    """Start the agent unless it runs; True when this call started it. Waits for the node to be Ready."""
    if agent_pid():
        wait_ready(cluster)
        return False
    subprocess.run([sys.executable, "-m", "ddpjob_localnode", "start"], check=True, cwd=ROOT, timeout=90)
    wait_ready(cluster)
    return True


def stop() -> None:
    subprocess.run([sys.executable, "-m", "ddpjob_localnode", "stop"], check=True, cwd=ROOT, timeout=30)


def kill_agent() -> int:
    """SIGKILL, as a crash would: nothing gets to clean up."""
    pid = agent_pid()
    assert pid, "the local node agent is not running"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: _gone(pid), timeout=10, what=f"agent pid {pid} to exit")
    return pid


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A killed child of ours stays a zombie until reaped; it no longer runs anything.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def node_ready(cluster: Cluster, name: str | None = None) -> str:
    out = cluster.kubectl("get", "node", name or node_name(), "-o",
                          "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}", check=False)
    return out.stdout.strip()


def wait_ready(cluster: Cluster, timeout: float = 60) -> None:
    wait_until(lambda: node_ready(cluster) == "True", timeout=timeout, what="local node Ready")


def local_pod(name: str, command: list[str], **spec) -> dict:
    """A plain pod that lands on the local node: it selects and tolerates the node's label and taint."""
    container = {"name": "main", "image": "busybox:1.36", "command": command}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "nodeSelector": {LABEL: "true"},
                 "tolerations": [{"key": LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                 "containers": [container], **spec},
    }


def apply(cluster: Cluster, namespace: str, manifest: dict) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))


def get_pod(cluster: Cluster, namespace: str, name: str) -> dict | None:
    out = cluster.kubectl("-n", namespace, "get", "pod", name, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def wait_phase(cluster: Cluster, namespace: str, name: str, phases: tuple[str, ...], timeout: float = 60) -> dict:
    def reached():
        pod = get_pod(cluster, namespace, name)
        return pod if pod and pod.get("status", {}).get("phase") in phases else None
    return wait_until(reached, timeout=timeout, interval=0.3, what=f"pod {name} in {phases}")


def terminated(pod: dict, container: str = "main") -> dict:
    for status in pod["status"].get("containerStatuses") or []:
        if status["name"] == container:
            return status["state"].get("terminated") or {}
    return {}


def pod_events(cluster: Cluster, namespace: str, name: str) -> list[dict]:
    out = cluster.kubectl("-n", namespace, "get", "events", "--field-selector", f"involvedObject.name={name}",
                          "-o", "json")
    return json.loads(out.stdout)["items"]


def agent_log_since(offset: int) -> str:
    with open(LOG_FILE, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def agent_log_size() -> int:
    return LOG_FILE.stat().st_size if LOG_FILE.exists() else 0

