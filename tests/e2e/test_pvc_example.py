"""examples/gpu-pvc.yaml's local variant resumes across a restart. The local node cannot mount a claim: it gives
every volume that is not a hostPath a folder of the pod's own (pod-lifetime, like emptyDir), so a new attempt
would find no checkpoint. The local variant is therefore the example's pod (fsGroup, requests and limits, shmSize,
the grace period, checkpoints under /checkpoints/$(DDPJOB_NAMESPACE)/$(DDPJOB_NAME)) with the claim swapped for
the hostPath that examples/digits.yaml says is the local-mode stand-in, and the digits workload on CPU. What is
checked: checkpoints land in that volume's folder on the node, a killed trainer process restarts the group once,
and the new attempt resumes from a checkpoint that was on the volume and finishes."""

from __future__ import annotations

import copy
import os
import random
import signal
import time
from pathlib import Path

import yaml
from conftest import apply_job, pods
from support import localnode
from support.cluster import RENDEZVOUS_PORTS, wait_until
from test_local_jobs import JOB_TIMEOUT, run_to_end, worker0_log

from ddpjob_localnode.recovery import RecoveryClock, find_worker_process, parse_trainer_log

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gpu-pvc.yaml"
DIGITS = ROOT / "examples" / "digits.yaml"
STEPS = 300


def local_variant(namespace: str) -> tuple[dict, Path]:
    """The example's DDPJob made to run on the local node; returns it and the checkpoint folder on the node."""
    job = copy.deepcopy(next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "DDPJob"))
    digits = yaml.safe_load(DIGITS.read_text())["spec"]["template"]["spec"]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    spec.update(replicas=2, gpusPerReplica=0, nprocPerNode=2, shmSize="256Mi")
    spec["runPolicy"] = {"backoffLimit": 3, "restartBackoffSeconds": 0}
    spec["rendezvous"] = {"port": random.choice(RENDEZVOUS_PORTS)}  # the machine is shared (conftest.py)
    pod["nodeSelector"], pod["tolerations"] = digits["nodeSelector"], digits["tolerations"]
    host = f"/e2e-pvc/{namespace}"
    [volume] = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    volume.pop("persistentVolumeClaim")
    volume["hostPath"] = {"path": host, "type": "DirectoryOrCreate"}
    container = pod["containers"][0]
    container["command"] = digits["containers"][0]["command"]
    swap = {"--workload": "digits", "--train.steps": str(STEPS)}
    args = [f"{a.split('=')[0]}={swap[a.split('=')[0]]}" if a.split("=")[0] in swap else a for a in container["args"]]
    args = [a for a in args if not a.startswith("--checkpoint.every-seconds")]
    container["args"] = [*args, "--checkpoint.every-steps=20", "--log.every-steps=10"]
    container["resources"] = {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    folder = localnode.CLUSTER_DIR / "local-node" / "hostpath" / host.lstrip("/") / namespace / job["metadata"]["name"]
    return job, folder


def checkpoint_steps(folder: Path) -> set[int]:
    return {int(p.name[5:14]) for p in folder.glob("step-*.pt")}


def test_the_pvc_examples_local_variant_resumes_from_its_volume_after_a_trainer_is_killed(cluster, operator, namespace):
    job, folder = local_variant(namespace)
    name = job["metadata"]["name"]
    apply_job(cluster, namespace, job)
    wait_until(
        lambda: any(s >= 40 for s in checkpoint_steps(folder)),
        timeout=JOB_TIMEOUT,
        interval=0.5,
        what=f"a checkpoint at step >= 40 in {folder}",
    )
    on_volume = checkpoint_steps(folder)
    step = max(parse_trainer_log(worker0_log(cluster, namespace, name)).steps or [0])
    victim = find_worker_process(localnode.CLUSTER_DIR, pods(cluster, namespace, name), replica="1")
    assert victim, f"no trainer worker process found under {name}-worker-1"
    clock = RecoveryClock()
    os.kill(victim.pid, signal.SIGKILL)
    clock.kill(time.time(), step, restarts=0)
    status = run_to_end(cluster, namespace, job=name, clock=clock)
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1, status
    trainer = parse_trainer_log(worker0_log(cluster, namespace, name))
    assert trainer.resumed_step is not None and 0 < trainer.resumed_step < STEPS, trainer
    # It resumed from the volume: a step checkpointed there before the kill, or a later one written there.
    assert trainer.resumed_step >= max(on_volume), (trainer.resumed_step, on_volume)
    # The volume keeps the newest 3 (--checkpoint.keep): the one resumed from may be pruned by the end, so check
    # it is a periodic checkpoint's step, no older than those seen on the volume, and no later than the kill.
    assert trainer.resumed_step % 20 == 0 and trainer.resumed_step <= step + 20, (trainer.resumed_step, step)
    assert max(checkpoint_steps(folder)) == STEPS, checkpoint_steps(folder)
    assert trainer.steps and trainer.steps[0] > trainer.resumed_step and trainer.steps[-1] == STEPS, trainer.steps
    print(
        "\nlocal recovery (pvc example, local variant): "
        + ", ".join(f"{k} {v:.2f}s" for k, v in clock.breakdown(trainer))
    )
