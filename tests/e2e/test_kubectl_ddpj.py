"""`kubectl ddpj` (operator/src/ddpjob_operator/cli) against the local cluster and real torchrun groups on the
local node: `run` creates a job and shows it live in a real terminal (tmux, read back with capture-pane), a worker
process is killed mid-run and the group recreated from its checkpoint (the e2e kill scenario), `logs -f` follows
both attempts, `history` lists the restart, `watch` exits with the
job's outcome, and `why` names what holds a job back. Bad input ends with a message and exit code 2."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from ddpjob_operator import api
from ddpjob_operator.cli.logs import Follower
from kubernetes import client, config

from conftest import job_status, pods
from ddpjob_localnode.recovery import find_worker_process
from support import localnode
from support.cluster import wait_until
from support.identity import make_identity
from test_local_jobs import JOB_TIMEOUT, assert_resumed_and_finished

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / ".venv" / "bin" / "kubectl-ddpj"
LOCAL = ["--node-selector", "ddpjob.dev/local-node=true", "--toleration", "ddpjob.dev/local-node"]


def kubectl_ddpj(cluster, *words, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """The plugin as kubectl runs it: `kubectl ddpj ...` finds kubectl-ddpj on PATH."""
    env = {**os.environ, "PATH": f"{PLUGIN.parent}:{os.environ['PATH']}", "KUBECONFIG": str(cluster.kubeconfig)}
    return subprocess.run([str(ROOT / ".cache" / "bin" / "kubectl"), "ddpj", *words],
                          capture_output=True, text=True, timeout=timeout, env=env, **kw)


def ddpj(cluster, namespace, *args, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """`kubectl ddpj SUBCOMMAND -n NAMESPACE ...`."""
    return kubectl_ddpj(cluster, args[0], "-n", namespace, *args[1:], timeout=timeout, **kw)


# The run must still be training when the live view has shown an ETA (two progress scrapes) and worker 1 is killed:
# 400 steps once ended 15 s after the job was made, on an idle machine, and the kill found no process to kill.
CLI_STEPS = 2000


def digits_args(name: str, namespace: str, steps: int, strategy: str = "Recreate") -> list[str]:
    return ["run", name, "--image", "ghcr.io/ddpjob/ddp-trainer:0.1.0", "-m", "ddp_trainer", "--replicas", "2",
            "--restart-strategy", strategy, "--rendezvous-port", str(30000 + os.getpid() % 2000), *LOCAL, "--",
            "--workload=digits", f"--train.steps={steps}", "--train.batch-size-per-rank=32",
            f"--checkpoint.dir=/tmp/ddpj-cli/{namespace}/{name}", "--checkpoint.every-steps=20",
            "--log.every-steps=10"]


class Tmux:
    """A real terminal: a detached tmux session of 160 x 20, read back with capture-pane."""

    def __init__(self, name: str, command: str, env: dict[str, str]):
        self.name = name
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "160", "-y", "20",
                        f"env {exports} {command}; echo EXIT=$?; sleep 600"], check=True)

    def screen(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name], capture_output=True, text=True,
                              check=True).stdout

    def showing(self, pattern: str) -> str | None:
        screen = self.screen()
        return screen if re.search(pattern, screen) else None

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is needed for the terminal view")
def test_run_watch_logs_and_history_follow_a_job_through_a_restart(cluster, operator, namespace, tmp_path):
    name = "cli"
    env = {"PATH": f"{PLUGIN.parent}:{ROOT / '.cache' / 'bin'}:/usr/bin:/bin", "KUBECONFIG": str(cluster.kubeconfig),
           "TERM": "xterm-256color", "COLUMNS": "160"}
    args = digits_args(name, namespace, CLI_STEPS)
    run = " ".join(["kubectl", "ddpj", args[0], "-n", namespace, *args[1:]])
    term = Tmux(f"ddpj-{namespace}", run, env)
    logs = None
    try:
        wait_until(lambda: job_status(cluster, namespace, name), timeout=60, what="the job run created")
        log_file = open(tmp_path / "logs.txt", "w")
        logs = subprocess.Popen([str(PLUGIN), "logs", name, "-f", "-n", namespace], stdout=log_file,
                                stderr=subprocess.STDOUT, env={**os.environ, **env})
        # The live view once the operator has an ETA: bar, step/total, percent, ETA.
        first = wait_until(lambda: term.showing(r"ETA \d"), timeout=JOB_TIMEOUT,
                           interval=0.5, what="an ETA on the live view")
        assert "━" in first and re.search(rf"step \d+/{CLI_STEPS}\s+\d+%", first), first
        step = job_status(cluster, namespace, name)["progress"]["step"]
        victim = wait_until(lambda: find_worker_process(localnode.CLUSTER_DIR, pods(cluster, namespace, name), "1"),
                            timeout=60, what="worker 1's trainer process")
        os.kill(victim.pid, signal.SIGKILL)
        restarted = wait_until(lambda: term.showing("last restart:"), timeout=JOB_TIMEOUT,
                               interval=0.5, what="the restart line on the live view")
        assert "cli-worker-1" in restarted and "group recreated" in restarted, restarted
        print(f"\nthe live view during the restart:\n{restarted}")
        end = wait_until(lambda: term.showing("EXIT="), timeout=JOB_TIMEOUT, interval=1,
                         what="run to end with the job")
        assert "EXIT=0" in end and "Succeeded" in end and "recovered in" in end, end
        assert end != first, "the view changed as the job went on"
        logs.wait(timeout=60)  # -f ends once the job has ended and its streams are done
        log_file.close()
    finally:
        term.close()
        if logs and logs.poll() is None:
            logs.kill()
    status = job_status(cluster, namespace, name)
    assert status["phase"] == "Succeeded" and status["attempt"] == 1 and status["progress"]["percent"] == 100
    # The killed process is the trainer's failure, charged once; the new attempt resumed from a checkpoint, not
    # from step 0, and trained to the end (the e2e kill scenario: this run is it, seen through the CLI).
    assert_resumed_and_finished(cluster, namespace, status, CLI_STEPS, job=name)

    text = (tmp_path / "logs.txt").read_text()
    seen = set(re.findall(r"^\[a(\d) w(\d) r(\d)\] ", text, re.M))
    assert {("0", "0", "0"), ("0", "1", "1"), ("1", "0", "0"), ("1", "1", "1")} <= seen, sorted(seen)
    assert re.search(rf"^\[a1 w0 r0\] .*step={CLI_STEPS}/{CLI_STEPS}", text, re.M), "the new attempt's lines, to the end"
    assert step > 0

    watched = ddpj(cluster, namespace, "watch", name)
    assert watched.returncode == 0 and "Succeeded" in watched.stdout, watched

    history = ddpj(cluster, namespace, "history", name)
    assert history.returncode == 0, history
    row = next(line for line in history.stdout.splitlines() if "GroupRecreated" in line)
    assert "cli-worker-1" in row and re.search(r"\d+\.\ds", row), history.stdout
    print(f"\nkubectl ddpj history {name}:\n{history.stdout}")

    got = cluster.kubectl("-n", namespace, "get", "ddpj", name).stdout
    assert "PROGRESS" in got and "100%" in got, got


def test_watch_exits_non_zero_for_a_failed_job_and_why_says_the_budget_is_spent(cluster, operator, namespace):
    made = ddpj(cluster, namespace, "run", "bad", "--image", "ghcr.io/ddpjob/ddp-trainer:0.1.0", "--script",
                "/no/such/train.py", "--backoff-limit", "0", *LOCAL, "--rendezvous-port",
                str(30000 + (os.getpid() + 7) % 2000), timeout=JOB_TIMEOUT)
    assert made.returncode == 1, made  # run watches it to the end: Failed
    assert "Failed" in made.stdout, made
    watched = ddpj(cluster, namespace, "watch", "bad")
    assert watched.returncode == 1 and "Failed" in watched.stdout, watched
    why = ddpj(cluster, namespace, "why", "bad")
    assert why.returncode == 0 and "restart budget is spent" in why.stdout and "backoffLimit 0" in why.stdout, why


def test_why_names_the_gpus_a_job_cannot_get(cluster, operator, namespace):
    made = ddpj(cluster, namespace, "run", "big", "--image", "ghcr.io/ddpjob/ddp-trainer:0.1.0", "-m", "ddp_trainer",
                "--gpus", "64", "--no-watch")
    assert made.returncode == 0, made

    def answered():
        out = ddpj(cluster, namespace, "why", "big").stdout
        return out if "nvidia.com/gpu" in out and "scheduler" in out else None

    out = wait_until(answered, timeout=120, interval=1, what="why to name the short GPUs")
    assert "not enough nvidia.com/gpu" in out and "nvidia.com/gpu=64" in out, out


def test_run_dry_run_yaml_passes_a_server_side_dry_run(cluster, crds, namespace):
    printed = ddpj(cluster, namespace, "run", "dry", "--image", "img:1", "-m", "ddp_trainer", "--replicas", "3",
                   "--min-replicas", "2", "--max-replicas", "4", "--gpus", "8", "--queue", "team-a", "--dry-run",
                   "-o", "yaml", "--", "--workload=gpt")
    assert printed.returncode == 0, printed
    applied = cluster.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-", input=printed.stdout,
                              check=False)
    assert applied.returncode == 0 and "created (server dry run)" in applied.stdout, applied
    assert cluster.kubectl("-n", namespace, "get", "ddpj", "dry", check=False).returncode != 0, "nothing created"


def test_namespace_before_or_after_the_subcommand_and_run_with_a_python_command(cluster, crds, namespace):
    """`kubectl ddpj -n NS watch JOB` and `kubectl ddpj watch JOB -n NS` (kubectl's flags anywhere on the line), and
    `run NAME --image I -- python -m train ARGS` (the command after --, as `kubectl run` takes it) writes the
    trainer's command as -m does, in a job the API server takes. No operator: the job's phase is written here."""
    printed = kubectl_ddpj(cluster, "-n", namespace, "run", "py", "--image", "img:1", "--dry-run", "-o", "yaml", "--",
                           "python", "-m", "train", "--lr", "3e-4")
    assert printed.returncode == 0, printed
    applied = cluster.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-", input=printed.stdout,
                              check=False)
    assert applied.returncode == 0 and "created (server dry run)" in applied.stdout, applied
    trainer = yaml.safe_load(printed.stdout)["spec"]["template"]["spec"]["containers"][0]
    assert trainer["command"] == ["python", "-m", "ddp_trainer.torchrun"], trainer
    assert trainer["args"] == ["--module", "train", "--lr", "3e-4"], trainer

    made = kubectl_ddpj(cluster, "-n", namespace, "run", "py", "--image", "img:1", "--no-watch", "--", "python",
                        "-m", "train", "--lr", "3e-4")
    assert made.returncode == 0 and f"created in namespace {namespace}" in made.stdout, made
    cluster.kubectl("-n", namespace, "patch", "ddpj", "py", "--subresource=status", "--type=merge", "-p",
                    json.dumps({"status": {"phase": "Succeeded"}}))
    for words in (["-n", namespace, "watch", "py"], ["watch", "py", "-n", namespace],
                  [f"--namespace={namespace}", "watch", "py"], ["watch", "py", f"-n{namespace}"]):
        watched = kubectl_ddpj(cluster, *words)
        assert watched.returncode == 0 and "Succeeded" in watched.stdout, (words, watched)
    elsewhere = kubectl_ddpj(cluster, "watch", "py")  # the context's namespace: the -n above was read
    assert elsewhere.returncode == 2 and 'ddpjob "py" not found' in elsewhere.stderr, elsewhere


def test_bad_input_gets_a_clear_message_and_exit_code_2(cluster, crds, namespace, tmp_path):
    unknown = ddpj(cluster, namespace, "watch", "nope")
    assert unknown.returncode == 2 and f'ddpjob "nope" not found in namespace "{namespace}"' in unknown.stderr
    bad_flags = ddpj(cluster, namespace, "run", "x", "--image", "i", "-m", "m", "--replicas", "5",
                     "--max-replicas", "4")
    assert bad_flags.returncode == 2 and "--replicas 5 must be within" in bad_flags.stderr, bad_flags


def test_a_user_without_access_to_the_namespace_is_told_so(cluster, crds, namespace, tmp_path):
    kubeconfig = make_identity(cluster, "ddpj-nobody", tmp_path)
    cluster.kubectl("delete", "clusterrolebinding", "ddpj-nobody")  # a user the API server knows, with no rights
    denied = ddpj(cluster, namespace, "history", "any", "--kubeconfig", str(kubeconfig))
    assert denied.returncode == 2, denied
    assert f'no access to ddpjob "any" in namespace "{namespace}"' in denied.stderr and "forbidden" in denied.stderr


class _Recording:
    """The real CoreV1Api, with a note of which pods the caller has asked about (nothing is answered for it)."""

    def __init__(self, core):
        self._core, self.asked = core, []

    def __getattr__(self, name):
        method = getattr(self._core, name)
        if name not in ("read_namespaced_pod", "read_namespaced_pod_log"):
            return method

        def call(pod, *args, **kw):
            self.asked.append((name, pod))
            return method(pod, *args, **kw)
        return call


def test_logs_follow_begun_before_a_pod_is_bound_streams_it_once_it_runs(cluster, crds, local_node, namespace):
    """The API server answers a log request for a pod with no node yet with an empty 200, not an error: a follow
    that read then would end at once and miss the whole pod (seen in `make test`: a restarted attempt's worker 1
    never showed in `logs -f`). Here the pod is held unbound by a scheduling gate while the follow starts, and
    is let go once the follow has asked about it; its line must come through. No operator runs: the job is
    suspended and the pod is made by hand, so nothing else touches either."""
    name = "held"
    job = {"apiVersion": f"{api.GROUP}/{api.VERSION}", "kind": "DDPJob", "metadata": {"name": name},
           "spec": {"replicas": 1, "runPolicy": {"suspend": True}, "template": {"spec": {"containers": [
               {"name": api.TRAINER_CONTAINER, "image": "busybox:1.36", "command": ["true"]}]}}}}
    localnode.apply(cluster, namespace, job)
    pod = localnode.local_pod(f"{name}-worker-0", ["sh", "-c", "echo hello from the held pod"],
                              schedulingGates=[{"name": "ddpjob.dev/test-hold"}])
    pod["metadata"]["labels"] = {api.LABEL_JOB_NAME: name, api.LABEL_ATTEMPT: "0", api.LABEL_REPLICA_INDEX: "0"}
    pod["spec"]["containers"][0]["name"] = api.TRAINER_CONTAINER
    localnode.apply(cluster, namespace, pod)

    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = _Recording(client.CoreV1Api(api_client))
    lines: list[str] = []
    follower = Follower(core, client.CustomObjectsApi(api_client), namespace, name, follow=True, out=lines.append)
    runner = threading.Thread(target=follower.run, daemon=True)
    runner.start()
    wait_until(lambda: core.asked, timeout=30, what="the follow to ask about the held pod")
    cluster.kubectl("-n", namespace, "patch", "pod", pod["metadata"]["name"], "--type=json",
                    "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]')
    localnode.wait_phase(cluster, namespace, pod["metadata"]["name"], ("Succeeded", "Failed"))
    cluster.kubectl("-n", namespace, "patch", "ddpj", name, "--subresource=status", "--type=merge",
                    "-p", '{"status": {"phase": "Succeeded"}}')
    runner.join(timeout=60)
    assert not runner.is_alive(), "the follow ends once the job has ended and its streams are done"
    assert lines == ["[a0 w0 r?] hello from the held pod"], lines
