"""`python -m ddpjob_localnode run|start|stop|status`: run the local node agent in the foreground, or in the
background with its pid in .local-cluster/pids/local-node.pid and its log in .local-cluster/logs/local-node.log.

Several agents can share the machine (LOCAL_NODES=N): agent i (`--index i`, 0..N-1) is node local-<host>-<i>
(the first one keeps local-<host>), with its own files (local-node-<i>.pid, ...), kubelet port (20250 + i),
loopback block and 1/N of the CPUs, memory and GPUs. `--all` runs start, stop or status for every one of them."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .layout import DEFAULT_KUBELET_PORT, Layout, default_node_name, local_nodes, repo_root


def _layout(args) -> Layout:
    return Layout(root=repo_root(), node_name=args.node_name, index=args.index)


def _alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
        # A killed agent can linger as a zombie until something reaps it; it runs nothing any more.
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return pid
    except (OSError, ValueError, IndexError):
        return None


def cmd_run(args) -> int:
    from .agent import Agent

    layout = _layout(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    agent = Agent(layout, args.kubelet_port, Path(args.hosts_file), args.server)

    def stop(signum, _frame):
        logging.getLogger("ddpjob_localnode").info("signal %d: stopping", signum)
        agent.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    agent.run()
    return 0


def cmd_start(args) -> int:
    """Start in the background (idempotent) and wait until the node is registered and serving."""
    layout = _layout(args)
    pid = _alive(layout.pid_file)
    if pid:
        print(f"local node agent already running (pid {pid})")
        return 0
    for folder in (layout.pid_file.parent, layout.log_file.parent, layout.state_dir):
        folder.mkdir(parents=True, exist_ok=True)
    ready = layout.state_dir / "ready"
    ready.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "ddpjob_localnode",
        "--node-name",
        args.node_name,
        "--index",
        str(args.index),
        "--kubelet-port",
        str(args.kubelet_port),
        "--hosts-file",
        args.hosts_file,
        "--server",
        args.server,
        "run",
    ]
    with open(layout.log_file, "ab") as out:
        # A new session: the agent outlives the shell or test that started it; the pid file is how it is stopped.
        proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True)
    layout.pid_file.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        if ready.exists():
            print(f"local node agent running (pid {proc.pid}, node {args.node_name}, log {layout.log_file})")
            return 0
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    print(f"local node agent did not become ready; see {layout.log_file}", file=sys.stderr)
    return 1


def cmd_stop(args) -> int:
    layout = _layout(args)
    pid = _alive(layout.pid_file)
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if _alive(layout.pid_file) is None:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    layout.pid_file.unlink(missing_ok=True)
    print("local node agent stopped" if pid else "local node agent was not running")
    return 0


def cmd_status(args) -> int:
    pid = _alive(_layout(args).pid_file)
    print(f"local node agent: running (pid {pid})" if pid else "local node agent: stopped")
    return 0 if pid else 1


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ddpjob_localnode", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--index", type=int, default=int(os.environ.get("LOCAL_NODE_INDEX", "0")))
    parser.add_argument("--all", action="store_true", help="every agent 0..LOCAL_NODES-1 (start, stop, status)")
    parser.add_argument("--node-name", default=None, help="default: local-<host>, local-<host>-<index> after 0")
    parser.add_argument("--kubelet-port", type=int, default=None, help="default: 20250 + index")
    parser.add_argument("--hosts-file", default=os.environ.get("LOCAL_NODE_HOSTS_FILE", "/etc/hosts"))
    parser.add_argument("--server", default=f"https://127.0.0.1:{os.environ.get('APISERVER_PORT', '26443')}")
    parser.add_argument("--wait", type=float, default=60, help="seconds `start` waits for the node to be ready")
    parser.add_argument("command", choices=["run", "start", "stop", "status"])
    args = parser.parse_args(argv)
    if args.all and args.command == "run":
        parser.error("--all starts agents in the background: use start")
    return args


def for_index(args: argparse.Namespace, index: int) -> argparse.Namespace:
    """args for agent `index`, with its name and port defaulted from the index."""
    one = argparse.Namespace(**vars(args))
    one.index = index
    if args.node_name is None or args.all:
        one.node_name = os.environ.get("LOCAL_NODE_NAME") if index == 0 and not args.all else None
        one.node_name = one.node_name or default_node_name(index)
    base = int(os.environ.get("LOCAL_NODE_KUBELET_PORT", DEFAULT_KUBELET_PORT))
    one.kubelet_port = args.kubelet_port if args.kubelet_port is not None and not args.all else base + index
    return one


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    command = {"run": cmd_run, "start": cmd_start, "stop": cmd_stop, "status": cmd_status}[args.command]
    indexes = range(local_nodes()) if args.all else [args.index]
    codes = [command(for_index(args, index)) for index in indexes]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
