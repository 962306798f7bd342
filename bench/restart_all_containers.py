"""KEP-5532 on the real nodes: should a recovery let the kubelet restart all of a pod's containers in place
(container `restartPolicyRules`, action `RestartAllContainers`, beta and on by default in v1.36) instead of the
operator recreating the pod?

One pod on realnode-1 runs a small Python process that exits with a chosen code when told to (a file appears).
Two ways back, each timed from the exit's cause to the new container running, alternated for --rounds rounds:
- in place: the container carries a RestartAllContainers rule for the exit codes given; the kubelet restarts it in
  the same pod (same uid, node, IP and volumes);
- recreated: what the operator does for a lost pod today: the pod ends Failed, is deleted, and a new one is made
  through the scheduler onto the same node.
It also records what the restarted pod says of the exit (lastState), so the operator's failure classes can be
weighed, and which nodes declare the feature (the scheduler's NodeDeclaredFeatures filter places a pod with such a
rule only there).

    PYTHONPATH=tests .venv/bin/python bench/restart_all_containers.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from support import cluster as local_cluster  # type: ignore[import-not-found]
from support.cluster import wait_until  # type: ignore[import-not-found]
from support.realnode import pod_on, realnode  # type: ignore[import-not-found]

from machine import describe_machine
from progress_lines import say

ROOT = Path(__file__).resolve().parents[1]
NODE = "realnode-1"
FEATURE = "RestartAllContainersOnContainerExits"
# Exits with the code written to /tmp/exit once that file appears.
EXITER = [
    "python",
    "-c",
    "import os, time\nwhile not os.path.exists('/tmp/exit'): time.sleep(0.02)\nos._exit(int(open('/tmp/exit').read()))",
]


def exiter_pod(name: str, in_place_codes: list[int] | None) -> dict:
    container: dict = {"command": EXITER}
    if in_place_codes:
        container["restartPolicy"] = "Never"
        container["restartPolicyRules"] = [
            {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": in_place_codes}}
        ]
    return pod_on(
        NODE,
        name,
        EXITER,
        container=container,
        restartPolicy="Never",
        volumes=[{"name": "shm", "emptyDir": {"medium": "Memory"}}],
    )


class Pods:
    def __init__(self, c, ns: str) -> None:
        self.c, self.ns = c, ns

    def get(self, name: str) -> dict | None:
        out = self.c.kubectl("-n", self.ns, "get", "pod", name, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def create(self, manifest: dict) -> None:
        self.c.kubectl("-n", self.ns, "create", "-f", "-", input=json.dumps(manifest))

    def delete(self, name: str, force: bool = False) -> None:
        extra = ["--grace-period=0", "--force"] if force else []
        self.c.kubectl("-n", self.ns, "delete", "pod", name, "--wait=true", *extra)

    def running(self, name: str, restarts: int = 0) -> dict | None:
        pod = self.get(name)
        for status in (pod or {}).get("status", {}).get("containerStatuses", []):
            if "running" in status.get("state", {}) and status.get("restartCount", 0) >= restarts:
                return pod
        return None

    def wait_running(self, name: str, restarts: int = 0) -> dict:
        return wait_until(
            lambda: self.running(name, restarts),
            timeout=120,
            interval=0.05,
            what=f"{name} running (restarts >= {restarts})",
        )

    def exit_with(self, name: str, code: int) -> float:
        """Make the pod's process exit with code; returns the moment it was told to."""
        t0 = time.monotonic()
        self.c.kubectl("-n", self.ns, "exec", name, "--", "sh", "-c", f"printf {code} > /tmp/exit")
        return t0


def in_place(pods: Pods, code: int) -> tuple[float, dict]:
    pods.create(exiter_pod("in-place", [code]))
    uid = pods.wait_running("in-place")["metadata"]["uid"]
    t0 = pods.exit_with("in-place", code)
    pod = pods.wait_running("in-place", restarts=1)
    seconds = time.monotonic() - t0
    assert pod["metadata"]["uid"] == uid, "the pod was replaced, not restarted in place"
    last = pod["status"]["containerStatuses"][0].get("lastState", {}).get("terminated", {})
    pods.delete("in-place", force=True)
    return seconds, last


def recreated(pods: Pods, code: int) -> float:
    manifest = exiter_pod("recreated", None)
    pods.create(manifest)
    pods.wait_running("recreated")
    t0 = pods.exit_with("recreated", code)
    wait_until(
        lambda: (pods.get("recreated") or {}).get("status", {}).get("phase") == "Failed",
        timeout=60,
        interval=0.05,
        what="the pod Failed",
    )
    pods.delete("recreated")
    pods.create(manifest)
    pods.wait_running("recreated")
    seconds = time.monotonic() - t0
    pods.delete("recreated", force=True)
    return seconds


def declared(c) -> dict[str, bool]:
    nodes = json.loads(c.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {n["metadata"]["name"]: FEATURE in (n["status"].get("declaredFeatures") or []) for n in nodes}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--code", type=int, default=3, help="the exit code the process ends with")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "restart_all_containers.json")
    args = parser.parse_args()
    for step in (
        ["bash", str(ROOT / "hack" / "build-tools.sh"), "node"],
        ["bash", str(ROOT / "hack" / "install-node-packages.sh")],
        ["bash", str(ROOT / "hack" / "images.sh"), "base"],
    ):
        subprocess.run(step, check=True)
    c = local_cluster.up()
    up = realnode("up", "2", check=False)
    assert up.returncode == 0, up.stdout + up.stderr
    subprocess.run(["bash", str(ROOT / "hack" / "images.sh"), "load"], check=True)
    ns = f"bench-restartall-{uuid.uuid4().hex[:5]}"
    c.kubectl("create", "namespace", ns)
    pods = Pods(c, ns)
    times: dict[str, list[float]] = {"in place": [], "recreated": []}
    last: dict = {}
    try:
        for r in range(args.rounds):
            seconds, last = in_place(pods, args.code)
            times["in place"].append(seconds)
            times["recreated"].append(recreated(pods, args.code))
            say(
                f"round {r + 1}/{args.rounds}: in place {times['in place'][-1]:.2f} s, "
                f"recreated {times['recreated'][-1]:.2f} s"
            )
        features = declared(c)
    finally:
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        realnode("down", check=False)
    medians = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "machine": describe_machine(),
        "node": NODE,
        "rounds": args.rounds,
        "exit_code": args.code,
        "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "median_seconds": {k: round(v, 2) for k, v in medians.items()},
        "in_place_vs_recreated": round(medians["in place"] / medians["recreated"], 2),
        "last_state_after_in_place": last,
        "exit_code_kept": last.get("exitCode") == args.code,
        "nodes_declaring_the_feature": features,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    say(
        f"in place {medians['in place']:.2f} s vs recreated {medians['recreated']:.2f} s "
        f"({result['in_place_vs_recreated']}x); the restarted pod says exit {last.get('exitCode')} "
        f"({last.get('reason')}) for a process that exited {args.code}; results in {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
