"""examples/user-loop.yaml through the real builders: the operator's worker pod, then the local node's launch
plan, run the repository's examples/user-loop/train.py with arguments it accepts, checkpoints on the shared
hostPath, and a `metrics` port where report() listens."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from ddp_trainer import metrics
from ddpjob_localnode.launch_plan import build_launch_plan
from ddpjob_operator import api
from ddpjob_operator.workers.builders import JobRef, build_worker_pod
from ddpjob_operator.state.spec import parse_spec, trainer_container

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples" / "user-loop.yaml"
SCRIPT = ROOT / "examples" / "user-loop" / "train.py"


def launch_plan(tmp_path: Path):
    job = yaml.safe_load(MANIFEST.read_text())
    pod = build_worker_pod(JobRef(job["metadata"]["name"], "team-a", "uid-1"), parse_spec(job["spec"]),
                           index=0, attempt=0, restarts=0)
    pod["metadata"]["uid"] = "pod-uid"
    pod["status"] = {"podIP": "127.0.1.9"}
    container = trainer_container(pod["spec"]["containers"])
    plan = build_launch_plan(pod, container, tmp_path / "pod", tmp_path / "hostpath", ROOT / ".venv" / "bin")
    return container, plan


def test_local_mode_runs_the_repositorys_script_under_torchrun(tmp_path):
    _, plan = launch_plan(tmp_path)
    assert plan.argv[0] == "torchrun"
    assert Path(plan.argv[1]).resolve() == SCRIPT.resolve() and SCRIPT.is_file()
    assert plan.env["POD_IP"] == "127.0.1.9"  # report() listens on the pod's own address


def test_the_script_accepts_the_manifests_arguments_and_checkpoints_on_the_hostpath(tmp_path):
    _, plan = launch_plan(tmp_path)
    spec = importlib.util.spec_from_file_location("user_loop_train", SCRIPT)
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    args = train.parse_args(plan.argv[2:])
    assert args.steps == 2000 and args.global_batch % 2 == 0  # 2 pods x 1 process
    assert args.checkpoint_dir == str(tmp_path / "hostpath" / "var/lib/ddpjob/checkpoints/team-a/user-loop")


def test_it_declares_the_metrics_port_report_listens_on_and_a_progress_deadline(tmp_path):
    container, _ = launch_plan(tmp_path)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[api.METRICS_PORT_NAME] == metrics.DEFAULT_PORT  # local rank 0 of worker 0: what the operator reads
    assert parse_spec(yaml.safe_load(MANIFEST.read_text())["spec"]).run_policy.progress_deadline_seconds == 60
