"""DDPJobs of the trainer image on the two real nodes (issue 36, item 5): the image built from
trainer_image/Dockerfile, one torchrun node per real node, the group formed through the headless Service's DNS
(CoreDNS), checkpoints on a hostPath both nodes see (they share this machine's disk), and what only a kubelet
decides: its OOM kill of a trainer over its memory limit, classed and explained."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from ddpjob_localnode.recovery import KILL_TRAINER_WORKERS as KILL_WORKERS
from ddpjob_localnode.recovery import parse_trainer_log
from support.cluster import ROOT, wait_until
from support.operator import OperatorProcess, install_crds
from support.orphan import REAPED, SIGTERM_SEEN, WORKER
from support.realnode import IMAGES_SH, TOLERATE, apply, get, pod_on, realnode, wait_running

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
                    "labelSelector": {"matchLabels": {"ddpjob.dev/job-name": name,
                                                      "app.kubernetes.io/component": "worker"}},
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
    # limits.cpu 1 on a 2-core node: one intra-op thread, read from the container's cgroup quota, not torch's 2.
    assert " threads=1 " in log, log[-2000:]
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


def wait_groups_training(cluster, namespace: str, name: str, step: int) -> None:
    """TorchFT: every replica group in the quorum and worker 0 at `step`. A group trains alone while its peers'
    pods still start, so worker 0's step alone does not say that the other group is there to lose."""
    def training():
        status = status_of(cluster, namespace, name)
        progress = status.get("progress", {})
        return (status.get("phase") == "Running" and progress.get("replicaGroups") == 2
                and progress.get("step", 0) >= step)
    wait_until(training, timeout=JOB_TIMEOUT, interval=1, what=f"{name}: both replica groups training at step {step}")


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
    # 2,000 steps and the kill once the operator itself has read a step: on an idle machine the trainer logged step
    # 60 before the operator's first scrape (every 2 s), and the recovery had no step to count from.
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(digits_job(trainer_image, "recreate",
                                                                                     steps=2000)))
    wait_until(lambda: status_of(cluster, namespace, "recreate").get("progress", {}).get("step", 0) >= 60,
               timeout=JOB_TIMEOUT, interval=0.5, what="recreate's step 60 in status.progress")
    cluster.kubectl("-n", namespace, "exec", "recreate-worker-1", "--", "python", "-c", KILL_WORKERS)
    status = finished(cluster, namespace, "recreate")
    assert status["phase"] == "Succeeded", status
    assert status["attempt"] >= 1 and status["restarts"] == 1, status
    (entry,) = status["recoveries"]
    # Recreated with at most a checkpoint interval (20 steps) to do again: the operator's last scrape of the step
    # (it lags the log by its 2 s interval) against the trainer's newest checkpoint.
    assert entry["how"] == "GroupRecreated" and entry["exitCode"] == 137 and entry["reason"] != "OOMKilled", entry
    assert entry["step"] > 0 and entry["stepsLost"] <= 20, entry


def on_node(node: str, *args: str) -> str:
    """crictl against a real node's own containerd: what runs there, whatever the API server says."""
    return realnode("crictl", node.rsplit("-", 1)[1], *args).stdout


def test_kubectl_delete_ddpj_lands_the_sigterm_checkpoint_in_the_grace_period_and_leaves_nothing_on_the_nodes(
        cluster, namespace, real_nodes, trainer_image, operator):
    """No periodic checkpoint (`--checkpoint.every-steps=0`): the only one the job can leave is the trainer's own on
    SIGTERM, which the kubelet sends when `kubectl delete ddpj` takes the pods away. A checkpoint in place is one
    whose save finished (it is renamed only then), so it landed before the kubelet's SIGKILL at the end of the
    grace period. Then each node's containerd runs nothing of the job's, and after its garbage collection holds no
    container or sandbox of it either."""
    job = digits_job(trainer_image, "bye", steps=100_000)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--checkpoint.every-steps=20")] = "--checkpoint.every-steps=0"
    checkpoints = Path(job["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"]) / namespace / "bye"
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job))
    wait_step(cluster, namespace, "bye", 60)
    assert not any(checkpoints.glob("step-*")), "no checkpoint before the delete (else this test proves nothing)"
    cluster.kubectl("-n", namespace, "delete", "ddpj", "bye", "--wait=true", "--timeout=120s")
    wait_until(lambda: not uids(cluster, namespace, "bye") and not cluster.kubectl(
        "-n", namespace, "get", "pods", "-l", "ddpjob.dev/job-name=bye", "-o", "name").stdout.strip(),
        timeout=120, interval=1, what="the job's pods gone")
    saved = sorted(int(p.name.split("-")[1].split(".")[0]) for p in checkpoints.glob("step-*"))
    assert saved and saved[-1] >= 60, f"a SIGTERM checkpoint at step >= 60 in {checkpoints}: {saved}"
    label = f"io.kubernetes.pod.namespace={namespace}"
    for node in real_nodes:
        assert not on_node(node, "ps", "-q", "--label", label).strip(), f"a container of the job still runs on {node}"
    wait_until(lambda: all(not on_node(node, "ps", "-a", "-q", "--label", label).strip()
                           and not on_node(node, "pods", "-q", "--label", label).strip() for node in real_nodes),
               timeout=180, interval=3, what="the kubelets' garbage collection of the job's containers and sandboxes")


def node_of(cluster, namespace: str, pod: str) -> str:
    """The node a pod is bound to; empty while it is not made or not placed."""
    out = cluster.kubectl("-n", namespace, "get", "pod", pod, "-o", "jsonpath={.spec.nodeName}", check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def index_of(node: str) -> str:
    return node.rsplit("-", 1)[1]


@contextlib.contextmanager
def lost_kubelet(lost: str, paused: str):
    """`lost`'s kubelet stopped (its containers run on), with every container of `paused` held by the cgroup
    freezer from just before it: a pause of the test's, not a fault. The jobs' survivors there take no step, so no
    job runs out of steps while the lost node turns NotReady (30 s or more; how long decides a loaded machine, not
    the product) and each job's steps can be few. The caller resumes `paused` once the recoveries are recorded;
    on the way out both nodes are back, also when the test fails."""
    frozen = realnode("freeze", index_of(paused), check=False)
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    try:
        stopped = realnode("stop", index_of(lost), check=False)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        yield
    finally:
        thawed = realnode("thaw", index_of(paused), check=False)
        started = realnode("start", index_of(lost), check=False)
    assert thawed.returncode == 0, thawed.stdout + thawed.stderr
    assert started.returncode == 0, started.stdout + started.stderr


def thaw(node: str) -> None:
    thawed = realnode("thaw", index_of(node), check=False)
    assert thawed.returncode == 0, thawed.stdout + thawed.stderr


def test_a_stopped_kubelet_recreate_and_in_place_each_recover_as_documented(
        cluster, namespace, real_nodes, trainer_image, operator):
    """A lost node as the node lifecycle controller sees it: one kubelet stops (its containers go on running under
    containerd, as on a node that lost its kubelet or its network), the node turns NotReady after the
    controller-manager's grace, and two jobs, one per restart strategy, lose their pod there at once.
    docs/fault-tolerance.md: Recreate makes a new attempt at the size the nodes hold (elastic 1..2: one pod);
    InPlace replaces the lost pod alone: worker 0 (the rendezvous host) stays in the same pod while the
    replacement waits for room (one pod per node). The lost pod's container, which no kubelet stops, may train on
    beside it meanwhile: only the kubelet was stopped, not the network. The kubelet returns, both jobs end
    Succeeded, and the kubelet stops what the deleted pods left running on its node. The other node's pods are
    paused until the recoveries are recorded (lost_kubelet)."""
    def job(name: str, strategy: str) -> dict:
        manifest = digits_job(trainer_image, name, steps=1000)
        manifest["spec"]["runPolicy"] = {"restartStrategy": strategy, "backoffLimit": 3, "restartBackoffSeconds": 0}
        manifest["spec"]["elastic"] = {"minReplicas": 1, "maxReplicas": 2}
        return manifest

    # InPlace's worker 1 decides the node to stop: its worker 0 hosts the rendezvous, whose loss is a recreation.
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job("inplace", "InPlace")))
    wait_until(lambda: node_of(cluster, namespace, "inplace-worker-1") and node_of(
        cluster, namespace, "inplace-worker-0"), timeout=JOB_TIMEOUT, interval=1, what="inplace's pods placed")
    lost = node_of(cluster, namespace, "inplace-worker-1")
    kept = node_of(cluster, namespace, "inplace-worker-0")
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(job("recreate", "Recreate")))
    for name in ("inplace", "recreate"):
        wait_step(cluster, namespace, name, 30)
    before = {name: uids(cluster, namespace, name) for name in ("inplace", "recreate")}
    lost_pods = {name: next(pod for pod in before[name] if pod.startswith(f"{name}-worker")
                            and node_of(cluster, namespace, pod) == lost) for name in before}
    assert lost_pods["inplace"] == "inplace-worker-1"

    with lost_kubelet(lost, paused=kept):
        # Recreate's new attempt cannot run before the kept node resumes: its old pod there must end first.
        seen = {name: wait_until(lambda name=name: (s := status_of(cluster, namespace, name)).get("recoveries") and s,
                                 timeout=JOB_TIMEOUT, interval=1, what=f"{name} recovering from the lost node")
                for name in before}
        for name, status in seen.items():
            entry = status["recoveries"][0]
            assert (entry["kind"], entry["pod"]) == ("NodeLost", lost_pods[name]), (name, entry)
        assert seen["recreate"]["recoveries"][0]["how"] == "GroupRecreated"
        assert seen["inplace"]["recoveries"][0]["how"] == "PodReplaced" and seen["inplace"]["attempt"] == 0
        thaw(kept)
        wait_until(lambda: (s := status_of(cluster, namespace, "recreate")).get("replicas") == 1
                   and s.get("attempt", 0) >= 1 and s.get("phase") == "Running", timeout=JOB_TIMEOUT, interval=1,
                   what="recreate's new attempt running at the one pod the nodes hold")
        # The survivor goes on in the same pod while the replacement waits for room.
        assert uids(cluster, namespace, "inplace")["inplace-worker-0"] == before["inplace"]["inplace-worker-0"]
    for name in before:
        status = finished(cluster, namespace, name)
        assert status["phase"] == "Succeeded", (name, status)
        assert status["restarts"] == 0 and status["platformRestarts"] >= 1, (name, status)
    # Back, the kubelet stops what its deleted pods left running on the node.
    label = f"io.kubernetes.pod.namespace={namespace}"
    wait_until(lambda: not on_node(lost, "ps", "-q", "--label", label).strip(), timeout=180, interval=3,
               what=f"nothing of the namespace's left running on {lost}")


def test_torchft_replica_groups_train_across_the_real_nodes_and_a_killed_group_is_replaced_alone(
        cluster, namespace, real_nodes, trainer_image, operator):
    """faultTolerance TorchFT: one replica group per real node and the job's Lighthouse, the groups' process group
    formed across pods by the addresses they advertise (the pod's IP: a bare host name resolves in its own pod
    only, and this suite found every group waiting on the others' stores for it). A group whose trainer is killed
    is replaced alone while the other trains on, and the job ends Succeeded in attempt 0."""
    manifest = digits_job(trainer_image, "ft", steps=600)
    manifest["spec"]["faultTolerance"] = {"mode": "TorchFT", "lighthouse": {"heartbeatTimeoutMilliseconds": 1000,
                                                                            "tolerations": TOLERATE}}
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))
    wait_groups_training(cluster, namespace, "ft", 60)
    before = uids(cluster, namespace, "ft")
    killed = cluster.kubectl("-n", namespace, "exec", "ft-worker-1", "--", "python", "-c", KILL_WORKERS)
    assert killed.stdout.strip(), "no trainer worker process found in ft-worker-1"
    status = finished(cluster, namespace, "ft")
    assert status["phase"] == "Succeeded", status
    assert status["attempt"] == 0, status
    assert [r["how"] for r in status["recoveries"]] == ["ReplicaGroupReplaced"], status["recoveries"]
    assert uids(cluster, namespace, "ft")["ft-worker-0"] == before["ft-worker-0"], "the survivor was never replaced"


def test_torchft_a_stopped_kubelet_costs_the_job_only_the_group_on_that_node(
        cluster, namespace, real_nodes, trainer_image, operator):
    """TorchFT under a lost node: one replica group per real node, the Lighthouse pinned to the node that stays
    (faultTolerance.lighthouse.nodeSelector; a lost Lighthouse recreates the group, as docs/fault-tolerance.md
    says and the recovery bench measures). The other node's kubelet stops and the node turns NotReady: the group
    there is replaced alone (NodeLost, ReplicaGroupReplaced, attempt 0) and its replacement waits for room, while
    the survivor trains on: the job never leaves Running and its step advances with the node still down. The
    kubelet returns and the job ends Succeeded, the loss counted as the platform's, not the job's. The kept node's
    pods are paused until the loss is recorded (lost_kubelet)."""
    kept, lost = real_nodes
    manifest = digits_job(trainer_image, "ftnode", steps=1000)
    manifest["spec"]["runPolicy"] = {"backoffLimit": 3, "restartBackoffSeconds": 0}
    manifest["spec"]["faultTolerance"] = {"mode": "TorchFT", "lighthouse": {
        "heartbeatTimeoutMilliseconds": 1000, "nodeSelector": {"kubernetes.io/hostname": kept},
        "tolerations": TOLERATE}}
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(manifest))
    wait_groups_training(cluster, namespace, "ftnode", 40)
    before = uids(cluster, namespace, "ftnode")
    assert node_of(cluster, namespace, "ftnode-lighthouse") == kept
    victim = next(pod for pod in before if pod.startswith("ftnode-worker") and node_of(cluster, namespace, pod) == lost)

    with lost_kubelet(lost, paused=kept):
        def replaced():
            status = status_of(cluster, namespace, "ftnode")
            assert status.get("phase") == "Running" and status.get("attempt") == 0, status
            return status.get("recoveries") and status
        seen = wait_until(replaced, timeout=JOB_TIMEOUT, interval=1, what="the lost group replaced")
        entry = seen["recoveries"][0]
        assert (entry["kind"], entry["pod"], entry["how"]) == ("NodeLost", victim, "ReplicaGroupReplaced"), entry
        step = seen.get("progress", {}).get("step", 0)
        thaw(kept)

        def trains_on():
            status = status_of(cluster, namespace, "ftnode")
            assert status.get("phase") in ("Running", "Succeeded") and status.get("attempt") == 0, status
            return status.get("progress", {}).get("step", 0) >= step + 30 or status.get("phase") == "Succeeded"
        wait_until(trains_on, timeout=JOB_TIMEOUT, interval=1, what="the survivor training on with the node down")
        assert node_of(cluster, namespace, "ftnode-lighthouse") == kept
        assert cluster.kubectl("get", "node", lost, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')]"
                               ".status}").stdout != "True", "the node was still down while the survivor trained"
    status = finished(cluster, namespace, "ftnode")
    assert status["phase"] == "Succeeded" and status["attempt"] == 0, status
    assert status["restarts"] == 0 and status["platformRestarts"] >= 1, status
    assert {r["how"] for r in status["recoveries"]} == {"ReplicaGroupReplaced"}, status["recoveries"]


def test_the_images_entrypoint_as_pid_1_reaps_an_orphan_and_forwards_sigterm(
        cluster, namespace, real_nodes, trainer_image):
    """The trainer image's entrypoint (`python -m ddp_trainer.torchrun`) is the container's PID 1, so it is its
    init (ddp_trainer/pid1.py): a worker's orphan is reaped, not left a zombie, and a SIGTERM to PID 1 (what the
    kubelet sends) reaches the worker through torchrun."""
    command = ["python", "-m", "ddp_trainer.torchrun", "--standalone", "--nproc-per-node=1", "--no-python",
               "python", "-c", WORKER, "/tmp/orphan-seen"]
    apply(cluster, namespace, pod_on(real_nodes[0], "init", command, restartPolicy="Never",
                                     container={"image": trainer_image, "command": command}))
    wait_running(cluster, namespace, "init", timeout=JOB_TIMEOUT)
    log = wait_until(lambda: (out := cluster.kubectl("-n", namespace, "logs", "init", check=False).stdout)
                     and "orphan " in out and out, timeout=120, interval=1, what="the worker's orphan seen")
    assert f": {REAPED}" in log, log[-2000:]
    pid1 = cluster.kubectl("-n", namespace, "exec", "init", "--", "cat", "/proc/1/cmdline").stdout
    assert "ddp_trainer.torchrun" in pid1, pid1
    cluster.kubectl("-n", namespace, "exec", "init", "--", "python", "-c",
                    "import os, signal; os.kill(1, signal.SIGTERM)")

    def ended():
        pod = get(cluster, namespace, "pod", "init")
        return pod["status"].get("phase") in ("Succeeded", "Failed") and pod
    wait_until(ended, timeout=120, interval=1, what="the pod ended by its SIGTERM")
    log = cluster.kubectl("-n", namespace, "logs", "init").stdout
    assert SIGTERM_SEEN in log, log[-2000:]


# How Triton builds its launcher when torch.compile first runs on a GPU: the system C compiler, against Python.h.
TRITON_BUILD = '''
from triton.runtime.build import compile_module_from_src
SRC = """#include <Python.h>
static struct PyModuleDef probe = {PyModuleDef_HEAD_INIT, "triton_probe", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_triton_probe(void) { return PyModule_Create(&probe); }
"""
print("triton built and loaded", compile_module_from_src(SRC, "triton_probe").__name__)
'''


def test_the_trainer_image_has_the_c_compiler_triton_builds_with(cluster, namespace, real_nodes, trainer_image):
    """torch.compile is on by default on CUDA, and its Triton kernels need a C compiler at run time, which the CUDA
    runtime base lacks: the image installs one. Triton's own build function compiles and loads a module in it."""
    command = ["python", "-c", TRITON_BUILD]
    apply(cluster, namespace, pod_on(real_nodes[1], "cc", command, restartPolicy="Never",
                                     container={"image": trainer_image, "command": command,
                                                "env": [{"name": "TRITON_CACHE_DIR", "value": "/tmp/triton"}]}))

    def ended():
        pod = get(cluster, namespace, "pod", "cc")
        return pod["status"].get("phase") in ("Succeeded", "Failed") and pod
    pod = wait_until(ended, timeout=JOB_TIMEOUT, interval=1, what="the build pod ended")
    log = cluster.kubectl("-n", namespace, "logs", "cc").stdout
    assert pod["status"]["phase"] == "Succeeded" and "triton built and loaded triton_probe" in log, log[-2000:]
