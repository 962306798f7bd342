"""DDPJobs of the trainer image on the two real nodes (issue 36, item 5): the image built from
trainer_image/Dockerfile, one torchrun node per real node, the group formed through the headless Service's DNS
(CoreDNS), checkpoints on a hostPath both nodes see (they share this machine's disk), and what only a kubelet
decides: its OOM kill of a trainer over its memory limit, classed and explained."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from ddpjob_localnode.recovery import parse_trainer_log
from support.cluster import ROOT, wait_until
from support.operator import OperatorProcess, install_crds
from support.realnode import IMAGES_SH, TOLERATE

JOB_TIMEOUT = 420.0
CHECKPOINTS = Path("/var/lib/ddpjob-realnode-tests")


@pytest.fixture(scope="module")
def trainer_image(real_nodes):
    subprocess.run(["bash", str(IMAGES_SH), "trainer"], check=True)
    subprocess.run(["bash", str(IMAGES_SH), "load"], check=True)
    yield subprocess.run(["bash", str(IMAGES_SH), "trainer-ref"], capture_output=True, text=True,
                         check=True).stdout.strip()
    shutil.rmtree(CHECKPOINTS, ignore_errors=True)


@pytest.fixture
def operator(cluster, namespace, tmp_path):
    install_crds(cluster.kubectl)
    proc = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log").start()
    yield proc
    proc.stop()


def digits_job(image: str, name: str, steps: int = 120, memory: str = "1536Mi") -> dict:
    """examples/digits.yaml on the real nodes: the trainer image's own entrypoint, one pod per node."""
    checkpoints = CHECKPOINTS / uuid.uuid4().hex[:8]
    checkpoints.mkdir(parents=True, exist_ok=True)
    os.chmod(checkpoints, 0o777)  # the image's user (UID 1000) writes there; a hostPath gets no fsGroup
    return {
        "apiVersion": "ddpjob.dev/v1alpha1", "kind": "DDPJob", "metadata": {"name": name},
        "spec": {
            "replicas": 2, "nprocPerNode": 1, "gpusPerReplica": 0, "restartPolicy": "OnFailure",
            "runPolicy": {"backoffLimit": 2, "restartBackoffSeconds": 0},
            "template": {"spec": {
                "nodeSelector": {"ddpjob.dev/real-node": "true"}, "tolerations": TOLERATE,
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"ddpjob.dev/job-name": name}},
                    "topologyKey": "kubernetes.io/hostname"}]}},
                "terminationGracePeriodSeconds": 10,
                "volumes": [{"name": "checkpoints", "hostPath": {"path": str(checkpoints), "type": "Directory"}}],
                "containers": [{
                    "name": "trainer", "image": image, "imagePullPolicy": "Never",
                    "args": ["-m", "ddp_trainer", "--workload=digits", f"--train.steps={steps}",
                             "--train.batch-size-per-rank=32", "--train.lr=0.002",
                             "--checkpoint.dir=/checkpoints/$(DDPJOB_NAMESPACE)/$(DDPJOB_NAME)",
                             "--checkpoint.every-steps=20", "--log.every-steps=10"],
                    "resources": {"limits": {"memory": memory, "cpu": "1"}, "requests": {"cpu": "100m"}},
                    "ports": [{"name": "metrics", "containerPort": 9400}],
                    "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
                }],
            }},
        },
    }


def status_of(cluster, namespace: str, name: str) -> dict:
    out = cluster.kubectl("-n", namespace, "get", "ddpj", name, "-o", "json", check=False)
    return json.loads(out.stdout).get("status", {}) if out.returncode == 0 else {}


def finished(cluster, namespace: str, name: str) -> dict:
    return wait_until(lambda: (s := status_of(cluster, namespace, name)).get("phase") in ("Succeeded", "Failed") and s,
                      timeout=JOB_TIMEOUT, interval=1, what=f"{name} to finish")


def test_a_digits_job_of_the_trainer_image_trains_across_the_two_real_nodes(
        cluster, namespace, real_nodes, trainer_image, operator):
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(digits_job(trainer_image, "digits")))

    def both_running():
        pods = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-l", "ddpjob.dev/job-name=digits",
                                          "-o", "json").stdout)["items"]
        return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods) and pods
    pods = wait_until(both_running, timeout=JOB_TIMEOUT, interval=1, what="both workers Running")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(real_nodes)
    print(cluster.kubectl("-n", namespace, "get", "pods", "-o", "wide").stdout)
    status = finished(cluster, namespace, "digits")
    assert status["phase"] == "Succeeded", status
    log = cluster.kubectl("-n", namespace, "logs", "digits-worker-0").stdout
    assert "world_size=2 backend=gloo" in log, log[-2000:]
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"].startswith("digits-worker-0."), "the rendezvous host is a DNS name (CoreDNS)"


def test_a_trainer_over_its_memory_limit_is_the_kubelets_oom_kill_classed_and_explained(
        cluster, namespace, real_nodes, trainer_image, operator):
    """torch alone takes more than 200 MiB: the kubelet's cgroup kills the trainer, the pod's container says
    OOMKilled with exit 137, and the operator's failure class, event, history and `kubectl ddpj why` say so."""
    job = digits_job(trainer_image, "oom", memory="200Mi")
    job["spec"]["runPolicy"]["backoffLimit"] = 0
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job))
    status = finished(cluster, namespace, "oom")
    assert status["phase"] == "Failed", status
    text = json.dumps(status)
    assert "OOMKilled" in text, status
    events = cluster.kubectl("-n", namespace, "get", "events", "--field-selector", "involvedObject.name=oom").stdout
    assert "OOMKilled" in events, events
    why = subprocess.run([str(ROOT / ".venv" / "bin" / "kubectl-ddpj"), "--kubeconfig", str(cluster.kubeconfig), "-n",
                          namespace, "why", "oom"], capture_output=True, text=True, timeout=60)
    assert "OOMKilled" in why.stdout + why.stderr, why.stdout + why.stderr


IN_PLACE = {"restartStrategy": "InPlace", "backoffLimit": 3, "restartBackoffSeconds": 0}
# Run inside a worker pod (as the image's user): SIGKILL the trainer worker processes, never torchrun's agent.
KILL_WORKERS = """
import os, signal
killed = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if b"ddp_trainer" in argv and b"ddp_trainer.torchrun" not in argv and int(pid) != 1:
        os.kill(int(pid), signal.SIGKILL)
        killed.append(pid)
print(" ".join(killed))
"""


def uids(cluster, namespace: str, name: str) -> dict[str, str]:
    out = cluster.kubectl("-n", namespace, "get", "pods", "-l", f"ddpjob.dev/job-name={name}", "-o", "json")
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in json.loads(out.stdout)["items"]
            if not p["metadata"].get("deletionTimestamp")}


def wait_step(cluster, namespace: str, name: str, step: int) -> None:
    def reached():
        log = cluster.kubectl("-n", namespace, "logs", f"{name}-worker-0", "--timestamps", check=False).stdout
        steps = parse_trainer_log(log).steps
        return steps and steps[-1] >= step
    wait_until(reached, timeout=JOB_TIMEOUT, interval=1, what=f"{name} at step {step}")


def start_in_place(cluster, namespace: str, image: str, name: str) -> dict[str, str]:
    """An InPlace digits job trained to step 60: the uid of each of its pods."""
    job = digits_job(image, name, steps=600)
    job["spec"]["runPolicy"] = IN_PLACE
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job))
    wait_step(cluster, namespace, name, 60)
    return uids(cluster, namespace, name)


def test_in_place_a_killed_trainer_process_restarts_inside_its_pod_and_no_pod_is_recreated(
        cluster, namespace, real_nodes, trainer_image, operator):
    before = start_in_place(cluster, namespace, trainer_image, "inplace")
    killed = cluster.kubectl("-n", namespace, "exec", "inplace-worker-1", "--", "python", "-c", KILL_WORKERS)
    assert killed.stdout.strip(), "no trainer worker process found in inplace-worker-1"
    counted = wait_until(lambda: (s := status_of(cluster, namespace, "inplace")).get("restarts") == 1 and s,
                         timeout=JOB_TIMEOUT, interval=1, what="the in-place restart counted")
    assert counted["attempt"] == 0, "no new attempt: torchrun re-formed the group inside its pods"
    status = finished(cluster, namespace, "inplace")
    assert status["phase"] == "Succeeded", status
    assert uids(cluster, namespace, "inplace") == before, "the same two pods, never deleted or created"
    assert (status["restarts"], status["platformRestarts"], status["attempt"]) == (1, 0, 0), status
    assert [r["how"] for r in status["recoveries"]] == ["InPlace"], status["recoveries"]


def test_in_place_a_deleted_pod_is_replaced_alone_on_a_real_node(
        cluster, namespace, real_nodes, trainer_image, operator):
    before = start_in_place(cluster, namespace, trainer_image, "replace")
    cluster.kubectl("-n", namespace, "delete", "pod", "replace-worker-1", "--wait=false")
    status = finished(cluster, namespace, "replace")
    assert status["phase"] == "Succeeded", status
    after = uids(cluster, namespace, "replace")
    assert after["replace-worker-0"] == before["replace-worker-0"], "the survivor was never replaced"
    assert after["replace-worker-1"] != before["replace-worker-1"]
    assert (status["attempt"], status["platformRestarts"], status["restarts"]) == (0, 1, 0), status
    assert [r["how"] for r in status["recoveries"]] == ["PodReplaced"], status["recoveries"]


def test_recreate_a_killed_container_restarts_the_group_from_its_checkpoint(
        cluster, namespace, real_nodes, trainer_image, operator):
    """Recreate (the default): a trainer killed in one pod fails that pod's container (137, not an OOM kill); the
    operator recreates the group as a new attempt from the newest checkpoint on the shared hostPath."""
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(digits_job(trainer_image, "recreate",
                                                                                     steps=400)))
    wait_step(cluster, namespace, "recreate", 60)
    cluster.kubectl("-n", namespace, "exec", "recreate-worker-1", "--", "python", "-c", KILL_WORKERS)
    status = finished(cluster, namespace, "recreate")
    assert status["phase"] == "Succeeded", status
    assert status["attempt"] >= 1 and status["restarts"] == 1, status
    (entry,) = status["recoveries"]
    # Recreated with at most a checkpoint interval (20 steps) to do again: the operator's last scrape of the step
    # (it lags the log by its 2 s interval) against the trainer's newest checkpoint.
    assert entry["how"] == "GroupRecreated" and entry["exitCode"] == 137 and entry["reason"] != "OOMKilled", entry
    assert entry["step"] > 0 and entry["stepsLost"] <= 20, entry
