"""The demo after hack/demo.sh has brought up the cluster and the local node: install the CRD, start the operator
in the background, run examples/digits.yaml with live progress, kill one trainer worker process midway, and end
with a summary (accuracy, wall time, restarts, time to recover and where it went).

Environment: DEMO_KILL=0 skips the kill; DEMO_NAMESPACE (ddpjob-demo); DEMO_TIMEOUT seconds (420);
DEMO_RESTART_STRATEGY (InPlace: torchrun restarts the killed process inside the running pods; Recreate: a new
attempt of new pods).
DEMO_NODE_LOSS=1 (with LOCAL_NODES=3): the job is elastic 2..3 at 3 pods, one per local node; a third of the way
in, the last node's agent stops, the group continues at 2 from its checkpoint; the agent comes back later and the
group grows back to 3 (the live line's `size` shows it).
On real nodes (hack/demo.sh with KUBELET_NODES=2 sets DEMO_OPERATOR_IMAGE and DEMO_TRAINER_IMAGE): the operator
is installed by Helm from its image, the job runs the trainer image with one pod per node, and the kill is
`kubectl exec` into worker 1. `--uninstall` removes that Helm release."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.text import Text

from ddpjob_localnode.layout import default_node_name
from ddpjob_localnode.recovery import KILL_TRAINER_WORKERS, RecoveryClock, find_worker_process, parse_trainer_log
from ddpjob_operator.cli import view

ROOT = Path(__file__).resolve().parents[1]
QUEUE_LABEL_POLICY = ROOT / "charts" / "ddpjob-operator" / "files" / "queue-label-policy"  # queue_label.py
CLUSTER_DIR = Path(os.environ.get("CLUSTER_DIR", ROOT / ".local-cluster"))
KUBECTL = str(ROOT / ".cache" / "bin" / "kubectl")
NAMESPACE = os.environ.get("DEMO_NAMESPACE", "ddpjob-demo")
EXAMPLE = ROOT / "examples" / "digits.yaml"
# How the killed process is recovered (spec.runPolicy.restartStrategy): in place by default, as it is fastest;
# DEMO_RESTART_STRATEGY=Recreate shows the whole group recreated instead.
STRATEGY = os.environ.get("DEMO_RESTART_STRATEGY", "InPlace")
JOB = "digits"
CONSOLE = Console()
OPERATOR_PID = CLUSTER_DIR / "pids" / "operator.pid"
OPERATOR_LOG = CLUSTER_DIR / "logs" / "operator.log"
CHECKPOINTS = CLUSTER_DIR / "local-node" / "hostpath" / "var" / "lib" / "ddpjob" / "checkpoints"
# Real nodes: the images hack/demo.sh built and loaded, the operator's Helm release, and a hostPath both nodes
# see (they share this machine's disk), writable by the trainer image's user.
OPERATOR_IMAGE = os.environ.get("DEMO_OPERATOR_IMAGE", "")
TRAINER_IMAGE = os.environ.get("DEMO_TRAINER_IMAGE", "")
REAL_NODES = bool(TRAINER_IMAGE)
RELEASE, RELEASE_NAMESPACE = "ddpjob", "ddpjob-system"
REAL_CHECKPOINTS = Path("/var/lib/ddpjob-demo/checkpoints")
ON_REAL_NODES = [{"key": "ddpjob.dev/real-node", "operator": "Exists", "effect": "NoSchedule"}]


def kubectl(*args: str, check: bool = True, input: str | None = None) -> str:
    done = subprocess.run([KUBECTL, *args], capture_output=True, text=True, input=input, timeout=120)
    if check and done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def say(text: str) -> None:
    """A message of the demo's own; above the live panel while one is shown (rich prints it there)."""
    CONSOLE.print(Text(f">> {text}", style="bold"), soft_wrap=True)


def _alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def helm(*args: str) -> None:
    done = subprocess.run([str(ROOT / ".cache" / "bin" / "helm"), *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"helm {' '.join(args)} failed: {done.stderr.strip()}")


def install_operator() -> None:
    """The operator as a user runs it: the chart, its image, in-cluster config and the chart's RBAC."""
    repository, tag = OPERATOR_IMAGE.rsplit(":", 1)
    helm(
        "upgrade",
        "--install",
        RELEASE,
        str(ROOT / "charts" / "ddpjob-operator"),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--wait",
        "--timeout",
        "180s",
        "--set",
        f"image.repository={repository}",
        "--set",
        f"image.tag={tag}",
        "--set",
        "image.pullPolicy=Never",
        "--set-json",
        f"tolerations={json.dumps(ON_REAL_NODES)}",
        "--set-json",
        'nodeSelector={"ddpjob.dev/real-node": "true"}',
        # Progress read every 2 s so the live lines move.
        "--set-json",
        'extraEnv=[{"name": "DDPJOB_PROGRESS_INTERVAL_SECONDS", "value": "2"}]',
    )
    pod = kubectl(
        "-n",
        RELEASE_NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/component=operator",
        "-o",
        "jsonpath={.items[0].metadata.name} on {.items[0].spec.nodeName}",
    )
    say(f"operator installed by Helm: pod {pod} (kubectl -n {RELEASE_NAMESPACE} logs deploy/{RELEASE}-ddpjob-operator)")


def start_operator() -> None:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/ddpjobs.ddpjob.dev")
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(QUEUE_LABEL_POLICY))
    if REAL_NODES:
        install_operator()
        return
    pid = _alive(OPERATOR_PID)
    if pid:
        say(f"operator already running (pid {pid}, log {OPERATOR_LOG})")
        return
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        # Progress is read from worker 0's metrics every 2 s so the live lines move.
        "DDPJOB_PROGRESS_INTERVAL_SECONDS": os.environ.get("DDPJOB_PROGRESS_INTERVAL_SECONDS", "2"),
    }
    OPERATOR_LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(OPERATOR_LOG, "ab") as log:
        # Its own session: it outlives this script; hack/cluster.sh down stops it through the pid file.
        # Scoped to the demo's namespace: other operators (tests) may be running against the same cluster.
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ddpjob_operator",
                "--namespace",
                NAMESPACE,
                "--metrics-port",
                os.environ.get("DEMO_OPERATOR_METRICS_PORT", "18080"),
                "--liveness-port",
                os.environ.get("DEMO_OPERATOR_LIVENESS_PORT", "18081"),
            ],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    OPERATOR_PID.write_text(f"{proc.pid}\n")
    say(f"operator started (pid {proc.pid}, log {OPERATOR_LOG})")


def node_loss_manifest() -> dict:
    """examples/digits.yaml as an elastic 2..3 job, one pod per local node, the same global batch at any size."""
    import yaml  # type: ignore[import-untyped]  # pyyaml ships no stubs; the lock has no types-PyYAML

    job = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    spec = job["spec"]
    spec.update(replicas=3, nprocPerNode=1, elastic={"minReplicas": 2, "maxReplicas": 3})
    container = spec["template"]["spec"]["containers"][0]
    container["args"] = [a for a in container["args"] if not a.startswith("--train.batch-size-per-rank")]
    container["args"].append("--train.global-batch-size=96")
    one_per_node = {
        "labelSelector": {"matchLabels": {"ddpjob.dev/job-name": JOB}},
        "topologyKey": "kubernetes.io/hostname",
    }
    spec["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_per_node]}
    }
    return job


def real_node_manifest() -> dict:
    """examples/digits.yaml on the real nodes: the trainer image, one pod per node, a hostPath both nodes see."""
    import yaml

    job = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    job["spec"]["runPolicy"]["restartStrategy"] = STRATEGY
    pod = job["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"ddpjob.dev/real-node": "true"}
    pod["tolerations"] = ON_REAL_NODES
    workers = {"ddpjob.dev/job-name": JOB, "app.kubernetes.io/component": "worker"}
    pod["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": workers}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    REAL_CHECKPOINTS.mkdir(parents=True, exist_ok=True)
    REAL_CHECKPOINTS.chmod(0o777)  # the image's user (UID 1000) writes there; a hostPath gets no fsGroup
    (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
    volume["hostPath"] = {"path": str(REAL_CHECKPOINTS), "type": "Directory"}
    container = pod["containers"][0]
    container.update(image=TRAINER_IMAGE, imagePullPolicy="Never")
    return job


def kill_worker_1() -> str:
    """SIGKILL worker 1's trainer processes: on real nodes through `kubectl exec`, as a user would reach them; on
    the local node from this machine's /proc. What was killed, or "" when none was found yet."""
    if REAL_NODES:
        pids = kubectl(
            "-n", NAMESPACE, "exec", f"{JOB}-worker-1", "--", "python", "-c", KILL_TRAINER_WORKERS, check=False
        ).strip()
        return f"trainer processes {pids} (kubectl exec)" if pids else ""
    victim = find_worker_process(CLUSTER_DIR, pods(), replica="1")
    if victim is None:
        return ""
    os.kill(victim.pid, signal.SIGKILL)
    return f"trainer process pid {victim.pid} ({victim.describe})"


def local_agent(command: str, index: int) -> None:
    subprocess.run([sys.executable, "-m", "ddpjob_localnode", "--index", str(index), command], check=True, cwd=ROOT)


def out_of_service(index: int, on: bool) -> None:
    """Taint (or untaint) local node `index` out-of-service, the admin's word that nothing runs there any more."""
    taint = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
    kubectl("taint", "nodes", default_node_name(index), taint if on else taint + "-", check=False)


def fresh_job(manifest: dict | None = None) -> None:
    if kubectl("get", "namespace", NAMESPACE, check=False).strip() == "":
        kubectl("create", "namespace", NAMESPACE)
    kubectl("-n", NAMESPACE, "delete", "ddpj", JOB, "--ignore-not-found", "--wait=true", "--timeout=60s")
    deadline = time.monotonic() + 60
    while kubectl("-n", NAMESPACE, "get", "pods", "-l", f"ddpjob.dev/job-name={JOB}", "-o", "name").strip():
        if time.monotonic() > deadline:
            raise SystemExit("old demo pods did not go away")
        time.sleep(0.5)
    # A rerun must train from step 0, not resume the last run's final checkpoint.
    shutil.rmtree((REAL_CHECKPOINTS if REAL_NODES else CHECKPOINTS) / NAMESPACE / JOB, ignore_errors=True)
    if manifest is None and REAL_NODES:
        manifest = real_node_manifest()
    if manifest is None:
        import yaml

        manifest = yaml.safe_load(EXAMPLE.read_text())
        manifest["spec"]["runPolicy"]["restartStrategy"] = STRATEGY
    kubectl("-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(manifest))


def job() -> dict:
    out = kubectl("-n", NAMESPACE, "get", "ddpj", JOB, "-o", "json", check=False)
    return json.loads(out) if out else {"metadata": {"name": JOB}}


def pods() -> list[dict]:
    out = kubectl("-n", NAMESPACE, "get", "pods", "-l", f"ddpjob.dev/job-name={JOB}", "-o", "json")
    return json.loads(out)["items"]


def log_progress() -> dict:
    """The newest progress line of worker 0: fresher than status.progress, which the operator scrapes every
    few seconds."""
    text = kubectl("-n", NAMESPACE, "logs", f"{JOB}-worker-0", "--tail=10", check=False)
    for line in reversed(text.splitlines()):
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        if "step" in fields and "/" in fields["step"] and "loss" in fields:
            return {
                "step": int(fields["step"].split("/")[0]),
                "loss": float(fields["loss"]),
                "samplesPerSecond": float(fields.get("samples/s", "nan")),
            }
    return {}


def shown(job: dict, progress: dict, total_steps: int) -> dict:
    """The figures `kubectl ddpj watch` shows (ddpjob_operator.cli.view), with worker 0's fresher log line for the
    step, loss and rate while it runs."""
    f = view.facts(job)
    if progress:
        f.update(step=progress["step"], loss=f"{progress['loss']:.4f}", rate=progress.get("samplesPerSecond"))
    f["total"] = f["total"] or total_steps
    f["percent"] = min(100, (f["step"] or 0) * 100 // f["total"])
    return f


class Screen:
    """`kubectl ddpj watch`'s live panel in a terminal, with the demo's own messages printed above it; a plain
    line per change when stdout is not a terminal (a CI log)."""

    def __init__(self) -> None:
        self.console = CONSOLE
        self.live = Live(console=self.console, refresh_per_second=4) if self.console.is_terminal else None
        self.last = ""

    def __enter__(self) -> Screen:
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.stop()

    def show(self, f: dict, elapsed: float) -> None:
        if self.live:
            self.live.update(view.panel(f))
            return
        line = view.plain_line(f)
        if line != self.last:
            print(f"[{elapsed:6.1f}s] {line}", flush=True)
            self.last = line


def main() -> int:
    node_loss = os.environ.get("DEMO_NODE_LOSS") == "1"
    kill = os.environ.get("DEMO_KILL", "1") != "0" and not node_loss
    timeout = float(os.environ.get("DEMO_TIMEOUT", "420"))
    total_steps = int(next(a.split("=")[1] for a in EXAMPLE.read_text().split() if a.startswith("--train.steps=")))
    lost_index = int(os.environ.get("LOCAL_NODES", "1")) - 1
    if node_loss and lost_index < 1:
        raise SystemExit("DEMO_NODE_LOSS=1 needs several local nodes: LOCAL_NODES=3 make demo")
    lost_at_step = None
    start_operator()
    if node_loss:
        say(f"applying an elastic 2..3 digits job in namespace {NAMESPACE} (one pod per local node, gloo on CPU)")
        fresh_job(node_loss_manifest())
    else:
        where = "the trainer image, one pod per real node" if REAL_NODES else "gloo on CPU"
        say(f"applying {EXAMPLE.relative_to(ROOT)} in namespace {NAMESPACE} (2 pods x 2 processes, {where})")
        fresh_job()
    t0 = time.time()
    clock = RecoveryClock()
    status: dict = {}
    progress: dict = {}
    screen = Screen().__enter__()
    while time.time() - t0 < timeout:
        current = job()
        status = current.get("status") or {}
        clock.observe(status, pods(), time.time())
        # Worker 0's log while it runs (it restarts from its checkpoint: the step may go back a little), else
        # the last progress seen, so the bar does not jump back to the operator's older scrape at the end.
        progress = (
            (log_progress() if status.get("phase") == "Running" else {}) or progress or (status.get("progress") or {})
        )
        screen.show(shown(current, progress, total_steps), time.time() - t0)
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        step = progress.get("step", 0)
        running = status.get("phase") == "Running"
        if node_loss and lost_at_step is None and step >= total_steps // 3 and running:
            local_agent("stop", lost_index)
            lost_at_step = step
            say(f"stopped local node agent {lost_index} at step {step}: the group goes on with the nodes left")
            # As an admin would once the node is known down (non-graceful node shutdown): the operator then
            # force-deletes the pod there at once instead of after --unreachable-force-delete-seconds.
            out_of_service(lost_index, True)
        elif node_loss and lost_at_step is not None and lost_at_step >= 0 and running and step >= lost_at_step + 100:
            out_of_service(lost_index, False)
            local_agent("start", lost_index)
            lost_at_step = -1
            say(f"local node agent {lost_index} is back at step {step}: the group grows back")
        if kill and clock.killed_at is None and step >= total_steps // 2 and running:
            killed = kill_worker_1()
            if killed:
                clock.kill(time.time(), step, status.get("restarts", 0))
                say(f"killed {killed} of {JOB}-worker-1 at step {step}")
        time.sleep(0.5)
    wall = time.time() - t0
    screen.__exit__()
    return summary(status, clock, wall)


def summary(status: dict, clock: RecoveryClock, wall: float) -> int:
    log = kubectl("-n", NAMESPACE, "logs", f"{JOB}-worker-0", "--timestamps", check=False)
    trainer = parse_trainer_log(log)
    say("summary")
    print(f"  phase            {status.get('phase')}  ({(status.get('conditions') or [{}])[-1].get('message', '')})")
    print(f"  final accuracy   {trainer.accuracy if trainer.accuracy is not None else 'n/a'}")
    print(f"  wall time        {wall:.1f} s (apply to {status.get('phase', 'end')})")
    print(f"  restarts         {status.get('restarts', 0)}")
    if clock.killed_at is not None:
        rows = clock.in_place_breakdown(trainer) if STRATEGY == "InPlace" else clock.breakdown(trainer)
        for name, seconds in rows:
            print(f"  {name:<16} {seconds:6.2f} s")
    if trainer.resumed_step is not None:
        cause = f"killed at step {clock.killed_step}" if clock.killed_at is not None else "the last restart or resize"
        print(f"  resumed from     step {trainer.resumed_step} ({cause})")
    if status.get("desiredReplicas"):
        print(f"  size at the end  {status.get('sizeText')} pods (now/desired)")
    return 0 if status.get("phase") == "Succeeded" else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--uninstall"]:
        helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", "--ignore-not-found")
        sys.exit(0)
    sys.exit(main())
