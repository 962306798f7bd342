"""Recovery by fault and restart strategy, real torchrun groups (digits, gloo on CPU): kill -9 of one trainer
process, kubectl delete of one pod, and one node lost, each under Recreate, InPlace and TorchFT (faultTolerance.mode:
torchft replica groups), all in one run on the same nodes; and the kill under TorchFT+InPlace (restartStrategy
InPlace: the killed group's torchrun starts its process again in the pod, where TorchFT replaces the pod). Two kinds
of node (--nodes):

- local (the default): three local node agents (hack/localnode) on the shared local cluster. The job is elastic
  2..3 at 3 pods. A node is lost by stopping its agent, which marks the node NotReady and kills its processes.
- real: the two real nodes (hack/realnode.sh: kubelets with containerd), the trainer image. The job is elastic
  1..2 at 2 pods. A node is lost by freezing its pods (cgroup freezer) and stopping its kubelet: a node gone
  silent, as on a power or network loss. (The kubelet alone stopped leaves its containers training in the group,
  unnoticed until it returns: tests/realnode shows that case.) kill -9 goes through `kubectl exec`.

One pod per node, one process each; the fault always hits replica 1 (not pod 0, the rendezvous host). For each
run, read from worker 0's log (kubectl logs --timestamps, its step lines):
- stall: from the fault to worker 0's first step line of the group that trains after it (training again);
- back: from the fault to worker 0 back at that step (after redoing the steps lost since the checkpoint);
- steps lost: that step minus the step the group resumed from (0 when nobody resumed);
- pods recreated: pods of the job created after the fault, by the time it is back;
- rank-seconds lost: the ranks of the group before the fault (3 or 2) x back (a GPU each on a GPU cluster; a rank
  that could train and does not, until it is back at its pre-failure step), and its ratio to Recreate's.

TorchFT's survivors never restart, so for it:
- stall: worker 0's longest gap between step lines from the fault until it has trained 20 steps past it, less its
  usual gap before it (the time the survivors stood still while the Lighthouse dropped the dead group, or in a
  collective with a silent one);
- back: the fault to the end of that gap, or to worker 0's first step line past the fault step if later
  (survivors lose no step);
- heal: the fault to the replacement group's `healed from live peer` line (its rank is lost until then; a lost
  node's replacement may find no room until the node returns: then its rank counts as lost for `back`);
- rank-seconds lost: the survivors x stall + 1 x heal; if the group restarted from a checkpoint instead (a trainer
  that does not follow a new Lighthouse, replica_groups.lighthouse_failures), all ranks x back as for Recreate.
- `--faults freeze`: replica 1's node goes silent: on the local nodes its agent and its processes are frozen
  (tests/support/localnode.freeze: no reset reaches a peer, and the node goes NotReady at the node monitor's grace),
  as the real nodes' "node" does.
- `--faults lighthouse` (TorchFT only): the node the Lighthouse runs on goes silent as in "freeze", a worker's node
  too (every node holds one); the steps are read from the lowest replica not on it. Its Recreate base is "freeze"
  when the run has it, else "node".
- `--faults lighthouse-pod` (TorchFT only): the Lighthouse's pod deleted. No group is lost: every group stalls until
  it has a quorum with the new Lighthouse, so rank-seconds are all ranks x stall (all ranks x back if the group
  restarted from a checkpoint instead), compared with Recreate's deleted pod.

    PYTHONPATH=tests python bench/recovery_modes.py [--nodes local|real] [--out FILE] [--steps 900]"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml  # type: ignore[import-untyped]  # pyyaml ships no stubs; the lock has no types-PyYAML

# The test suites' cluster, local node and operator helpers (tests/support), on PYTHONPATH as pytest.ini puts them.
from support import cluster as local_cluster  # type: ignore[import-not-found]
from support import localnode
from support.cluster import wait_until  # type: ignore[import-not-found]
from support.operator import OperatorProcess, install_crds  # type: ignore[import-not-found]
from support.realnode import IMAGES_SH, TOLERATE, realnode  # type: ignore[import-not-found]
from support.realnode import NODES as REAL_NODES

from ddp_trainer.progress_log import HEALED, PROGRESS, RESUMED, STARTED
from ddpjob_localnode.recovery import KILL_TRAINER_WORKERS, find_worker_process, parse_time
from machine import describe_machine
from progress_lines import say

ROOT = Path(__file__).resolve().parents[1]

FAULTS = ("kill", "delete", "node")
SILENT = ("freeze", "lighthouse")  # the faults whose node goes silent (frozen), not stopped
MODES = ("Recreate", "InPlace", "TorchFT", "TorchFT+InPlace")
# TorchFT+InPlace differs from TorchFT only where a process fails while its pod lives: its group's torchrun starts the
# process again in the pod. Every other fault replaces the group's pod in both, so it runs only for these.
IN_PLACE_FAULTS = ("kill",)


def torchft(mode: str) -> bool:
    return mode.startswith("TorchFT")


JOB = "rec"
LAST_CALL: int | None = None  # --last-call: rendezvous.lastCallTimeoutSeconds for every run (unset: the operator's)
PEER_TIMEOUT: int | None = None  # --peer-timeout: DDP_TRAINER_PEER_TIMEOUT_SECONDS in the template
COLD_WORKERS = False  # --cold-workers: DDP_TRAINER_WARM_WORKERS=0 in the template
LOGS: Path | None = None  # --logs: keep each run's pod logs and events there
REAL_CHECKPOINTS = Path("/var/lib/ddpjob-bench-recovery")  # a hostPath both real nodes see (they share this disk)


class LocalNodes:
    """Three local node agents; a lost node is its agent stopped (node NotReady, its processes killed)."""

    kind = "local"
    count = 3

    def __init__(self) -> None:
        self.agent_started = False

    def up(self, c) -> list[str]:
        self.agent_started = localnode.start(c)
        return [localnode.node_name(0)] + [localnode.start_extra(c, i, nodes=3) for i in (1, 2)]

    def down(self, c) -> None:
        for i in (1, 2):
            localnode.stop_extra(i)
        if self.agent_started:
            localnode.stop()

    def dress(self, job: dict) -> None:
        """examples/digits.yaml already lands on the local nodes."""

    def kill(self, c, ns: str, pod: dict) -> None:
        victim = find_worker_process(localnode.CLUSTER_DIR, pods(c, ns), replica="1")
        assert victim, "no trainer process of replica 1"
        os.kill(victim.pid, signal.SIGKILL)

    def stop(self, index: int) -> None:
        localnode.stop() if index == 0 else localnode.stop_extra(index)

    def start(self, c, index: int) -> None:
        localnode.start(c) if index == 0 else localnode.start_extra(c, index, nodes=3)

    def freeze(self, index: int) -> None:
        self.frozen = localnode.freeze(index)

    def thaw(self, c, index: int) -> None:
        localnode.thaw(self.frozen)
        self.start(c, index)


class RealNodes:
    """The two real nodes (hack/realnode.sh) and the trainer image; a lost node is its kubelet stopped."""

    kind = "real"
    count = 2
    image = ""

    def up(self, c) -> list[str]:
        for step in (
            ["bash", str(ROOT / "hack" / "build-tools.sh"), "node"],
            ["bash", str(ROOT / "hack" / "install-node-packages.sh")],
            ["bash", str(IMAGES_SH), "trainer"],
        ):
            subprocess.run(step, check=True)
        up = realnode("up", str(len(REAL_NODES)), check=False)
        assert up.returncode == 0, up.stdout + up.stderr
        subprocess.run(["bash", str(IMAGES_SH), "load"], check=True)
        self.image = subprocess.run(
            ["bash", str(IMAGES_SH), "trainer-ref"], capture_output=True, text=True, check=True
        ).stdout.strip()
        REAL_CHECKPOINTS.mkdir(parents=True, exist_ok=True)
        REAL_CHECKPOINTS.chmod(0o777)  # the image's user (UID 1000) writes there; a hostPath gets no fsGroup
        return list(REAL_NODES)

    def down(self, c) -> None:
        down = realnode("down", check=False)
        assert down.returncode == 0, down.stdout + down.stderr

    def dress(self, job: dict) -> None:
        pod = job["spec"]["template"]["spec"]
        pod["nodeSelector"] = {"ddpjob.dev/real-node": "true"}
        pod["tolerations"] = TOLERATE
        (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
        volume["hostPath"] = {"path": str(REAL_CHECKPOINTS), "type": "Directory"}
        container = pod["containers"][0]
        container.update(image=self.image, imagePullPolicy="Never")
        container["resources"] = {"limits": {"memory": "1536Mi", "cpu": "1"}, "requests": {"cpu": "100m"}}

    def kill(self, c, ns: str, pod: dict) -> None:
        killed = c.kubectl(
            "-n", ns, "exec", pod["metadata"]["name"], "--", "python", "-c", KILL_TRAINER_WORKERS, check=False
        ).stdout.strip()
        assert killed, f"no trainer worker process found in {pod['metadata']['name']}"

    def stop(self, index: int) -> None:
        """The node goes silent: its pods freeze (no reset reaches a peer, as on a power or network loss) and its
        kubelet stops. With the kubelet alone stopped its containers would train on in the group, unnoticed."""
        for word in ("freeze", "stop"):
            done = realnode(word, str(index), check=False)
            assert done.returncode == 0, done.stdout + done.stderr

    def start(self, c, index: int) -> None:
        for word in ("thaw", "start"):
            done = realnode(word, str(index), check=False)
            assert done.returncode == 0, done.stdout + done.stderr

    def freeze(self, index: int) -> None:
        self.stop(index)  # a real node's loss is silent already

    def thaw(self, c, index: int) -> None:
        self.start(c, index)


NODES: LocalNodes | RealNodes = LocalNodes()


def manifest(mode: str, steps: int) -> dict:
    job = yaml.safe_load((ROOT / "examples" / "digits.yaml").read_text())
    job["metadata"]["name"] = JOB
    spec = job["spec"]
    n = NODES.count
    spec.update(replicas=n, nprocPerNode=1, elastic={"minReplicas": n - 1, "maxReplicas": n})
    strategy = "InPlace" if mode.endswith("InPlace") else "Recreate"
    spec["runPolicy"].update(restartStrategy=strategy, backoffLimit=5, restartBackoffSeconds=0)
    if torchft(mode):
        spec["faultTolerance"] = {"mode": "TorchFT", "lighthouse": {"heartbeatTimeoutMilliseconds": 1000}}
    spec["rendezvous"] = {"port": random.randint(30000, 32000)}
    if LAST_CALL is not None:
        spec["rendezvous"]["lastCallTimeoutSeconds"] = LAST_CALL
    container = spec["template"]["spec"]["containers"][0]
    if PEER_TIMEOUT is not None:
        container.setdefault("env", []).append({"name": "DDP_TRAINER_PEER_TIMEOUT_SECONDS", "value": str(PEER_TIMEOUT)})
    if COLD_WORKERS:  # each worker an interpreter of its own, as before the warm fork server (warm_workers.py)
        container.setdefault("env", []).append({"name": "DDP_TRAINER_WARM_WORKERS", "value": "0"})
    args = [
        a
        for a in container["args"]
        if not a.startswith(
            ("--train.batch-size-per-rank", "--train.steps", "--checkpoint.every-steps", "--log.every-steps")
        )
    ]
    container["args"] = [
        *args,
        "--train.global-batch-size=96",
        # TorchFT's survivors never stop: at 900 steps they finished a kill's run before its replacement healed.
        f"--train.steps={steps * 3 if torchft(mode) else steps}",
        "--checkpoint.every-steps=50",
        "--log.every-steps=5",
    ]
    one_per_node = {
        # Workers only: under TorchFT the job's Lighthouse pod carries the job's label too.
        "labelSelector": {"matchLabels": {"ddpjob.dev/job-name": JOB, "app.kubernetes.io/component": "worker"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    spec["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_per_node]}
    }
    NODES.dress(job)
    return job


def lighthouses(c, ns: str) -> list[dict]:
    out = c.kubectl("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=lighthouse", "-o", "json")
    return json.loads(out.stdout)["items"]


def pods(c, ns: str) -> list[dict]:
    out = c.kubectl("-n", ns, "get", "pods", "-l", f"ddpjob.dev/job-name={JOB}", "-o", "json")
    return json.loads(out.stdout)["items"]


def worker0_steps(c, ns: str, index: int = 0) -> tuple[list[tuple[float, int]], list[float], int | None]:
    """(time, step) of every step line of the job's pods 0 (or `index`), the times its trainer processes started,
    and the step it last resumed from."""
    zero = [p for p in pods(c, ns) if p["metadata"]["labels"].get("ddpjob.dev/replica-index") == str(index)]
    steps: list[tuple[float, int]] = []
    starts: list[float] = []
    resumed = None
    for pod in zero:
        text = c.kubectl("-n", ns, "logs", pod["metadata"]["name"], "--timestamps", check=False).stdout
        for line in text.splitlines():
            stamp, _, body = line.partition(" ")
            if m := PROGRESS.match(body):
                steps.append((parse_time(stamp), int(m["step"])))
            elif STARTED.match(body):
                starts.append(parse_time(stamp))
            elif r := RESUMED.match(body):
                resumed = int(r["step"])
    return sorted(steps), sorted(starts), resumed


def after_restart(lines: list[tuple[float, int]], starts: list[float], at: float) -> list[tuple[float, int]]:
    """The step lines of the trainer process that started after the fault (the group that trains again)."""
    began = next((t for t in starts if t > at), None)
    return [] if began is None else [(t, s) for t, s in lines if t > began]


def end_run(c, ns: str, stopped: int | None, frozen: bool = False) -> None:
    """Bring a stopped node back and delete the job, whatever the run measured (its pods' logs and the namespace's
    events kept first, with --logs)."""
    if LOGS is not None:
        keep_logs(c, ns, LOGS / JOB)
    if stopped is not None:
        (NODES.thaw if frozen else NODES.start)(c, stopped)
    c.kubectl("-n", ns, "delete", "ddpj", JOB, "--wait=true", "--timeout=120s", check=False)
    wait_until(lambda: not pods(c, ns), timeout=120, what="the job's pods gone")


def keep_logs(c, ns: str, where: Path) -> None:
    """Every pod's log with timestamps (the current and any earlier container's) and the events, for reading a
    row's timeline afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    for name, pod in {p["metadata"]["name"]: p for p in pods(c, ns) + lighthouses(c, ns)}.items():
        text = c.kubectl("-n", ns, "logs", name, "--timestamps", "--all-containers", check=False).stdout
        (where / f"{name}-{pod['metadata']['uid'][:8]}.log").write_text(text)
    events = c.kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp", "-o", "wide", check=False).stdout
    (where / "events.txt").write_text(events)
    (where / "pods.yaml").write_text(c.kubectl("-n", ns, "get", "pods", "-o", "yaml", check=False).stdout)
    if NODES.kind == "local":
        for agent_log in localnode.LOG_FILE.parent.glob("local-node*.log"):
            (where / agent_log.name).write_text(agent_log.read_text(errors="replace"))


def one_run(c, ns: str, mode: str, fault: str, nodes: list[str], steps: int) -> dict:
    c.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(manifest(mode, steps)))
    wait_until(
        lambda: (worker0_steps(c, ns)[0] or [(0.0, 0)])[-1][1] >= 100, timeout=300, interval=0.5, what="step 100"
    )
    before = {p["metadata"]["uid"] for p in pods(c, ns)}
    victim_pod = next(p for p in pods(c, ns) if p["metadata"]["labels"].get("ddpjob.dev/replica-index") == "1")
    stopped = None
    if fault in ("node", "freeze", "lighthouse"):  # replica 1's node; "lighthouse" (TorchFT): the Lighthouse's
        target = next(p for p in lighthouses(c, ns)) if fault == "lighthouse" else victim_pod
        stopped = nodes.index(target["spec"]["nodeName"])
    # TorchFT's steps are read from the lowest replica on a node that stays (its survivors never restart).
    watched = min(
        int(p["metadata"]["labels"]["ddpjob.dev/replica-index"])
        for p in pods(c, ns)
        if "ddpjob.dev/replica-index" in p["metadata"]["labels"]
        and (not torchft(mode) or stopped is None or p["spec"].get("nodeName") != nodes[stopped])
    )
    at = time.time()
    reached = worker0_steps(c, ns, watched)[0][-1][1]
    if fault == "kill":
        NODES.kill(c, ns, victim_pod)
    elif fault == "delete":
        c.kubectl("-n", ns, "delete", "pod", victim_pod["metadata"]["name"], "--wait=false")
    elif fault == "lighthouse-pod":  # TorchFT: the Lighthouse's pod deleted (as an eviction or a kubectl delete)
        c.kubectl("-n", ns, "delete", "pod", lighthouses(c, ns)[0]["metadata"]["name"], "--wait=false")
    elif stopped is not None:  # SILENT: the node goes silent, as a real node's loss does
        (NODES.freeze if fault in SILENT else NODES.stop)(stopped)
    say(f"{mode} {fault}: fault at step {reached}")

    def first(at_least: int):
        found, starts, _ = worker0_steps(c, ns)
        return next((t for t, s in after_restart(found, starts, at) if s >= at_least), None)

    if torchft(mode):
        return torchft_run(c, ns, mode, fault, nodes, stopped, at, reached, before, watched)
    try:
        advancing = wait_until(lambda: first(0), timeout=400, interval=1.0, what="steps advancing again")
        back = wait_until(lambda: first(reached), timeout=120, interval=1.0, what="back at the step")
        _, _, resumed = worker0_steps(c, ns)
        created = [p for p in pods(c, ns) if p["metadata"]["uid"] not in before]
    finally:
        end_run(c, ns, stopped, frozen=fault in SILENT)
    stall, back_s = advancing - at, back - at
    lost_steps = max(0, reached - resumed) if resumed is not None and resumed <= reached else 0
    row = {
        "mode": mode,
        "fault": fault,
        "fault_step": reached,
        "stall_seconds": round(stall, 2),
        "back_seconds": round(back_s, 2),
        "steps_lost": lost_steps,
        "pods_recreated": len(created),
        "rank_seconds_lost": round(NODES.count * back_s, 1),
    }
    say(f"{mode} {fault}: {row}")
    return row


def healed_at(c, ns: str, before: set[str], at: float) -> float | None:
    """When replica 1 (the lost group) logged after the fault that it healed from a live peer: a pod made after
    the fault, or (TorchFT+InPlace) the same pod, whose torchrun started the process again."""
    for pod in pods(c, ns):
        replaced = pod["metadata"]["uid"] not in before
        if not replaced and pod["metadata"]["labels"].get("ddpjob.dev/replica-index") != "1":
            continue
        text = c.kubectl("-n", ns, "logs", pod["metadata"]["name"], "--timestamps", check=False).stdout
        for line in text.splitlines():
            stamp, _, body = line.partition(" ")
            if HEALED.match(body) and (replaced or parse_time(stamp) > at):
                return parse_time(stamp)
    return None


def lighthouse_replaced(c, ns: str, before: set[str], watched: int = 0) -> float:
    """When worker `watched` has trained 20 steps with a Lighthouse made after the fault (the old one's pod deleted,
    or its node lost)."""
    wait_until(
        lambda: any(
            p["metadata"]["uid"] not in before and (p.get("status") or {}).get("phase") == "Running"
            for p in lighthouses(c, ns)
        ),
        timeout=300,
        interval=0.5,
        what="a new Lighthouse running",
    )
    since, base = time.time(), worker0_steps(c, ns, watched)[0][-1][1]
    return wait_until(
        lambda: next((t for t, s in worker0_steps(c, ns, watched)[0] if t > since and s > base + 20), None),
        timeout=300,
        interval=1.0,
        what="worker 0 training with the new Lighthouse",
    )


def torchft_run(
    c,
    ns: str,
    mode: str,
    fault: str,
    nodes: list[str],
    stopped: int | None,
    at: float,
    reached: int,
    before: set[str],
    watched: int,
) -> dict:
    lighthouse_lost = fault in ("node", "freeze", "lighthouse") and any(
        p["metadata"]["labels"].get("app.kubernetes.io/component") == "lighthouse"
        and p["spec"].get("nodeName") == nodes[stopped or 0]
        and p["metadata"]["uid"] in before
        for p in pods(c, ns)
    )

    def trained_past(steps: int) -> float | None:
        return next((t for t, s in worker0_steps(c, ns, watched)[0] if t > at and s > reached + steps), None)

    try:
        # The survivors train on (or, with a trainer that does not follow a new Lighthouse, the group restarts from
        # a checkpoint); a lost node's replacement has no room until the node returns, so its heal may never come.
        past = wait_until(
            lambda: trained_past(20), timeout=400, interval=1.0, what=f"worker {watched} training past the fault"
        )
        # A lost Lighthouse (its pod, or its node) stalls the groups until they have a quorum with the new one: the
        # stall is looked for until then (a node's processes end seconds after its stop begins).
        until = lighthouse_replaced(c, ns, before, watched) if fault == "lighthouse-pod" or lighthouse_lost else None
        # Before the heal: the survivors may finish the job's steps meanwhile, and its pods go with it.
        created = [p for p in pods(c, ns) if p["metadata"]["uid"] not in before]
        try:  # no group is lost when only the Lighthouse's pod goes, and a lost node's has no room (one per node)
            heal: float | None = (
                None
                if stopped is not None or fault == "lighthouse-pod"
                else wait_until(lambda: healed_at(c, ns, before, at), timeout=90, interval=1.0, what="heal")
            )
        except AssertionError:
            heal = None
        lines, _, resumed = worker0_steps(c, ns, watched)
        # A replacement comes after the survivors' 20 steps: the pods made, seen before or after the heal.
        made = ({p["metadata"]["uid"] for p in created} | {p["metadata"]["uid"] for p in pods(c, ns)}) - before
    finally:
        end_run(c, ns, stopped, frozen=fault in SILENT)
    earlier = [t for t, _ in lines if t <= at]
    usual = statistics.median([b - a for a, b in zip(earlier, earlier[1:], strict=False)] or [0.0])
    back_at = next(t for t, s in lines if t > at and s > reached)
    # The stall is looked for until the watched worker has trained 20 steps past the fault, not only until its first
    # line past it: a silent peer holds the survivors in the next step's collective, which can come after that line
    # (a 60 s gap right after it was missed so, 2026-11-29). A lost Lighthouse (its pod goes some seconds after the
    # delete, or with its node): until the watched worker trained on with the new one. Back once the longest gap is
    # over.
    later = [at] + [t for t, _ in lines if at < t <= max(until or past, past)]
    gaps = list(zip(later, later[1:], strict=False))
    longest = max(gaps, key=lambda g: g[1] - g[0], default=(at, back_at))
    stall = max(0.0, longest[1] - longest[0] - usual)
    back = max(longest[1], back_at) - at
    # The lost group's rank is lost until it heals (or, with no room for it, as long as the others' recovery).
    lost_group = (heal - at) if heal is not None else back
    # The group restarted from a checkpoint: the operator's answer to a lost Lighthouse before the groups followed a
    # new one. The Lighthouse's pod alone deleted: every group stalls (none is lost).
    restarted = resumed is not None
    if restarted:
        rank_seconds = NODES.count * back
    elif fault == "lighthouse-pod":
        rank_seconds = NODES.count * stall
    else:
        rank_seconds = (NODES.count - 1) * stall + 1 * lost_group
    row = {
        "mode": mode,
        "fault": fault,
        "fault_step": reached,
        "watched_replica": watched,
        "stall_seconds": round(stall, 2),
        "back_seconds": round(back, 2),
        "heal_seconds": round(heal - at, 2) if heal is not None else None,
        "lighthouse_lost": lighthouse_lost,
        "group_restarted": restarted,
        "steps_lost": max(0, reached - resumed) if restarted and resumed is not None else 0,
        "pods_recreated": len(made),
        "rank_seconds_lost": round(rank_seconds, 1),
    }
    say(f"{mode} {fault}: {row}")
    return row


def save(out: Path, rows: list[dict]) -> None:
    # The Lighthouse's node goes silent: compared with a silent node under Recreate when the run has one.
    silent = any(r["fault"] == "freeze" and r["mode"] == "Recreate" for r in rows)
    for row in rows:
        fault = {"lighthouse": "freeze" if silent else "node", "lighthouse-pod": "delete"}.get(
            row["fault"], row["fault"]
        )
        base = next((r for r in rows if r["fault"] == fault and r["mode"] == "Recreate" and "error" not in r), None)
        if "error" in row:
            continue
        row["rank_seconds_ratio_to_recreate"] = (
            round(row["rank_seconds_lost"] / base["rank_seconds_lost"], 2) if base else None
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "benchmark": "recovery_modes",
                "machine": describe_machine(),
                "nodes": NODES.kind,
                "job": f"digits, elastic {NODES.count - 1}..{NODES.count} at {NODES.count} pods x 1 process, one "
                f"pod per {NODES.kind} node (TorchFT: {NODES.count} replica groups, 1 s heartbeat timeout)"
                + (", the trainer image" if NODES.kind == "real" else ""),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", choices=("local", "real"), default="local")
    parser.add_argument("--out", type=Path, default=None, help="default: bench/results/recovery_modes[_real].json")
    # On the real nodes a stopped kubelet leaves its containers training until the node is NotReady (30 s) and the
    # group is restarted: the job must still be running then, and there it trains at about 60 steps a second.
    parser.add_argument("--steps", type=int, default=None, help="default: 900 on the local nodes, 6000 on the real")
    # A subset, for a quick look at one row (Recreate always runs: every ratio is to it).
    # "lighthouse" (TorchFT only, with "node" for its Recreate base): stop the node the Lighthouse runs on. Not in
    # the default run: on three nodes that all hold a worker, "node" lost the Lighthouse too in every run so far,
    # and a run of it right after "node" timed out waiting for step 100 (worker 0's log on the restarted node 0).
    # "lighthouse-pod" (TorchFT only, with "delete" for its Recreate base): delete the Lighthouse's pod.
    # "freeze": replica 1's node goes silent (local nodes: its agent and processes frozen), the base of "lighthouse"
    # when the run has it.
    parser.add_argument(
        "--faults", nargs="+", choices=(*FAULTS, "freeze", "lighthouse", "lighthouse-pod"), default=list(FAULTS)
    )
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--last-call", type=int, default=None, help="rendezvous.lastCallTimeoutSeconds")
    parser.add_argument("--peer-timeout", type=int, default=None, help="InPlace's DDP_TRAINER_PEER_TIMEOUT_SECONDS")
    parser.add_argument("--cold-workers", action="store_true", help="DDP_TRAINER_WARM_WORKERS=0: no fork server")
    parser.add_argument("--logs", type=Path, default=None, help="keep each run's pod logs and events under this folder")
    args = parser.parse_args()
    global COLD_WORKERS, JOB, LAST_CALL, LOGS, NODES, PEER_TIMEOUT
    LOGS = args.logs
    LAST_CALL, PEER_TIMEOUT, COLD_WORKERS = args.last_call, args.peer_timeout, args.cold_workers
    NODES = RealNodes() if args.nodes == "real" else LocalNodes()
    steps = args.steps or (6000 if args.nodes == "real" else 900)
    out = args.out or ROOT / "bench" / "results" / f"recovery_modes{'_real' if args.nodes == 'real' else ''}.json"
    modes = [m for m in MODES if m in args.modes or m == "Recreate"]
    c = local_cluster.up()
    install_crds(c.kubectl)
    nodes = NODES.up(c)
    ns = f"bench-recovery-{uuid.uuid4().hex[:5]}"
    c.kubectl("create", "namespace", ns)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"{ns}-operator.log"
    operator = OperatorProcess(c.kubeconfig, [ns], log).start()
    rows = []
    try:
        for fault in args.faults:
            for mode in modes:
                if fault in ("lighthouse", "lighthouse-pod") and mode != "TorchFT":
                    continue  # only TorchFT has a Lighthouse; its row is compared with Recreate's lost node
                if mode == "TorchFT+InPlace" and fault not in IN_PLACE_FAULTS:
                    continue  # the same pod replacement as TorchFT's
                # A job of its own per run, so a checkpoint directory of its own: each run trains from step 0.
                # (With one name, each run resumed where the last had stopped, and a run after a TorchFT one that
                # had finished the steps found nothing left to train and timed out waiting for step 100.)
                JOB = f"rec-{mode.lower().replace('+', '-')}-{fault}"
                try:
                    rows.append(one_run(c, ns, mode, fault, nodes, steps))
                except AssertionError as err:  # a row that never recovered is a finding: say it, run the rest
                    say(f"{mode} {fault}: not measured: {err}")
                    rows.append({"mode": mode, "fault": fault, "error": str(err)})
    finally:
        operator.stop()
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        # Leave the machine as found: a cluster left up holds the ports the test suite's own cluster needs.
        NODES.down(c)
        if c.started_here:
            local_cluster.down(c)
        save(out, rows)  # what was measured, also when a row failed (its error is the traceback above)
    for row in rows:
        if "error" in row:
            print(f"{row['fault']:<7} {row['mode']:<9} not measured: {row['error']}")
            continue
        print(
            f"{row['fault']:<7} {row['mode']:<9} stall {row['stall_seconds']:6.1f} s  back "
            f"{row['back_seconds']:6.1f} s  steps lost {row['steps_lost']:3d}  pods recreated "
            f"{row['pods_recreated']}  rank-s lost "
            f"{row['rank_seconds_lost']:6.1f} ({row['rank_seconds_ratio_to_recreate']}x Recreate)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
