"""Admission by Kueue: a real Kueue manager (built from sigs.k8s.io/kueue v0.19.2, hack/kueue.sh) beside the local
control plane, the real scheduler, kwok GPU nodes, and an operator that found Kueue's API at its start.

Each test has a namespace, a ClusterQueue and a ResourceFlavor of its own. The flavor's node label is the test's
pool, kwok nodes that only this test made, so the pods can only land there because the admission said so, and
how much runs is decided by the quota alone."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
from kubernetes import client

from support import kueue as kueue_support
from support.cluster import delete_namespace, wait_until
from support.kueue import QUEUE_LABEL, condition, is_queued
from support.nodes import NodePool
from support.operator import QUEUE_LABEL_POLICY, ROOT, OperatorProcess

from ddpjob_manifests import ddpjob
from namespaced_kubectl import Kube

from ddpjob_operator import api
from ddpjob_operator.admission.kueue import DEACTIVATED_BY

NS_PREFIX = "t-kq-"
ADMIT_WITHIN = 60  # seconds: Kueue's admission cycle, then a reconcile and the scheduler; generous under load
# Kueue's waitForPodsReady for this suite: an admitted job whose pods do not all run by then is evicted.
PODS_READY_TIMEOUT = "20s"


@pytest.fixture(scope="module")
def kueue(cluster):
    kueue_support.start(cluster, PODS_READY_TIMEOUT)


@pytest.fixture(scope="module")
def kq_operator(cluster, crds, kueue, tmp_path_factory):
    """Started after Kueue's API exists: the operator looks for it once, at start."""
    # --verbose: kopf's debug lines say when it starts watching a namespace (the `ns` fixture waits for that), and
    # which watch stalled if one does. This suite has a dozen small jobs: the lines cost little here.
    op = OperatorProcess(cluster.kubeconfig, [f"{NS_PREFIX}*"], tmp_path_factory.mktemp("kq") / "operator.log",
                         verbose=True)
    op.start()
    wait_until(lambda: "Kueue found" in op.log(), timeout=30, what="the operator to find Kueue")
    yield op
    op.stop()


@pytest.fixture
def ns(cluster, kq_operator, request):
    name = f"{NS_PREFIX}{request.node.name[5:25].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    wait_until(lambda: cluster.kubectl("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
               timeout=30, what=f"default ServiceAccount in {name}")
    # kopf learns of a new namespace from its watch and then starts a watch of each kind in it: a job applied before
    # that is seen only then. Once, on CI, the first job of this suite was not seen in 60 s (kopf had dropped the
    # namespace, created as the operator started: controller/kopf_namespaces.py). The test starts once the operator
    # watches its namespace, and a namespace never watched fails here by name.
    watching = f"Starting the watch-stream for {api.PLURAL}.{api.VERSION}.{api.GROUP} in '{name}'"
    wait_until(lambda: watching in kq_operator.log(), timeout=120, what=f"the operator to watch DDPJobs in {name}")
    log_offset = len(kq_operator.log())
    yield name
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        own = [line for line in kq_operator.log()[log_offset:].splitlines()
               if "level=debug" not in line or "logger=ddpjob" in line or "watch-stream" in line]
        print("----- operator log (kopf's per-event debug lines left out) -----\n" + "\n".join(own)[-20000:])
        print(cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", name, "-o", "yaml", check=False).stdout[-8000:])
    if os.environ.get("KEEP_NAMESPACE") == "1":  # debugging: look at what the test left
        return
    cluster.kubectl("-n", name, "delete", "ddpjobs", "--all", "--wait=true", "--timeout=30s", check=False)
    delete_namespace(cluster, name)
    kueue_support.delete_queues(cluster, name)


@pytest.fixture
def kube(cluster, ns) -> Kube:
    return Kube(cluster, ns)


@pytest.fixture
def nodes(kube_api, ns):
    """nodes(n, **labels) -> names: kwok nodes of this test's pool (label pool=<namespace>), 8 GPUs each."""
    pool = NodePool(client.CoreV1Api(kube_api), ns)
    yield pool
    pool.delete()


def queue(kube: Kube, ns: str, gpus: int, node_labels: dict[str, str] | None = None,
          preemption: dict | None = None) -> None:
    """A ResourceFlavor (the pool's nodes), a ClusterQueue of `gpus` GPUs of it, and LocalQueue `q` in ns."""
    kueue_support.queue(kube.cluster, ns, ns, {"nvidia.com/gpu": gpus}, {"pool": ns, **(node_labels or {})},
                        preemption)


def queued_job(name: str, replicas: int = 2, **spec) -> dict:
    job = ddpjob(name, replicas=replicas, gpus=8, **spec)
    job["metadata"]["labels"] = {QUEUE_LABEL: "q"}
    return job


def workloads(kube: Kube, job: str) -> list[dict]:
    items = json.loads(kube("get", "workloads.kueue.x-k8s.io", "-o", "json").stdout)["items"]
    return [w for w in items if w["metadata"].get("labels", {}).get("ddpjob.dev/job-name") == job]


def finish(kube: Kube, job: str, replicas: int = 2) -> None:
    """The simulated trainer ends well: every pod of the group exits 0."""
    for index in range(replicas):
        kube.succeed_pod(f"{job}-worker-{index}")
    kube.wait_phase(job, "Succeeded")


def test_a_quota_for_one_job_runs_one_and_queues_two_with_no_pods_until_it_finishes(kube, ns, nodes):
    nodes(6)  # room for all three: only the quota (16 GPUs, one 2 x 8 job) holds two of them back
    queue(kube, ns, gpus=16)
    kube.apply(queued_job("first"))
    kube.wait_phase("first", "Running", timeout=ADMIT_WITHIN)
    for name in ("second", "third"):
        kube.apply(queued_job(name))
    for name in ("second", "third"):
        status = kube.wait_status(name, is_queued, timeout=ADMIT_WITHIN, what="Pending, Queued")
        assert kube.pods(name) == [], f"{name} has pods before its admission"
        queued = condition(status, "Queued")
        assert queued.get("status") == "True" and "LocalQueue q" in queued["message"], status
        assert status["queue"] == "q"
        assert "Queued" in {e["reason"] for e in kube.events(name)}
    (first_wl,) = workloads(kube, "first")
    assert first_wl["metadata"]["ownerReferences"][0]["kind"] == "DDPJob"
    assert first_wl["spec"]["podSets"][0]["count"] == 2
    wait_until(lambda: condition(workloads(kube, "first")[0], "PodsReady").get("status") == "True", timeout=30,
               what="first's Workload PodsReady")

    finish(kube, "first")
    wait_until(lambda: condition(workloads(kube, "first")[0], "Finished").get("status") == "True", timeout=30,
               what="first's Workload Finished")
    # The quota holds one of the two waiting jobs: whichever Kueue takes next (two Workloads created within the
    # same second tie on their creation time), it runs, and the other still waits with no pods.
    running = wait_until(lambda: [n for n in ("second", "third") if kube.status(n).get("phase") == "Running"],
                         timeout=ADMIT_WITHIN, what="the next job Running")
    (nxt,) = running
    (other,) = {"second", "third"} - {nxt}
    status = kube.status(nxt)
    assert status["restarts"] == 0 and status["platformRestarts"] == 0
    assert "Admitted" in {e["reason"] for e in kube.events(nxt)}
    assert is_queued(kube.status(other)) and kube.pods(other) == []


def test_an_elastic_job_is_admitted_and_runs_at_what_the_quota_holds(kube, ns, nodes):
    nodes(4)  # room for 4 pods; the quota holds 3
    queue(kube, ns, gpus=24)
    kube.apply(queued_job("elastic", replicas=4, nprocPerNode=8, elastic={"minReplicas": 2, "maxReplicas": 4}))
    status = kube.wait_phase("elastic", "Running", timeout=ADMIT_WITHIN)
    assert (status["replicas"], status["sizeText"], status["worldSize"]) == (3, "3/4", 24), status
    assert len(kube.pods("elastic")) == 3
    (wl,) = workloads(kube, "elastic")
    assert wl["spec"]["podSets"][0]["count"] == 4 and wl["spec"]["podSets"][0]["minCount"] == 2
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 3
    env = {e["name"]: e.get("value") for e in kube.pods("elastic")[0]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "3", env


def test_the_flavors_node_labels_place_the_pods_on_its_nodes_only(kube, ns, nodes):
    mine = nodes(2, flavor="a")
    nodes(2, flavor="b")
    queue(kube, ns, gpus=32, node_labels={"flavor": "a"})
    kube.apply(queued_job("placed"))
    pods = kube.running_pods("placed", 0, 2, timeout=ADMIT_WITHIN)
    for pod in pods:
        assert pod["spec"]["nodeSelector"] == {"pool": ns, "flavor": "a"}, pod["spec"].get("nodeSelector")
        assert pod["spec"]["nodeName"] in mine


def preemption_queue(kube: Kube, ns: str) -> str:
    """The test's queue with preemption by priority, and a PriorityClass above the default: its name."""
    queue(kube, ns, gpus=16, preemption={"withinClusterQueue": "LowerPriority"})
    high_class = f"{ns}-high"
    kube.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high_class},
                "value": 1000})
    return high_class


def preempt(kube: Kube, low: str, high_class: str) -> dict:
    """A 2 x 8 job "high" of `high_class` takes the quota: `low` is evicted by preemption and Queued."""
    high = queued_job("high")
    high["spec"]["template"]["spec"]["priorityClassName"] = high_class
    kube.apply(high)
    return kube.wait_status(low, lambda s: is_queued(s) and "Preempted" in condition(s, "Queued")["message"],
                            timeout=ADMIT_WITHIN, what=f"{low} evicted by preemption, Queued")


def test_a_higher_priority_job_evicts_a_lower_one_which_queues_again_without_spending_its_budget(
        kube, ns, nodes, cluster):
    nodes(4)
    high_class = preemption_queue(kube, ns)
    try:
        kube.apply(queued_job("low"))
        kube.running_pods("low", 0, 2, timeout=ADMIT_WITHIN)
        status = preempt(kube, "low", high_class)
        assert status["restarts"] == 0 and status["platformRestarts"] == 0, status
        assert "Evicted" in {e["reason"] for e in kube.events("low")}
        kube.running_pods("high", 0, 2, timeout=ADMIT_WITHIN)
        wait_until(lambda: not kube.pods("low"), timeout=30, what="low's pods gone")
        finish(kube, "high")
        status = kube.wait_phase("low", "Running", timeout=ADMIT_WITHIN)
        assert status["attempt"] == 1 and status["restarts"] == 0 and status["platformRestarts"] == 0, status
    finally:
        cluster.kubectl("delete", "priorityclass", high_class, check=False)


def test_pods_that_cannot_start_are_evicted_by_wait_for_pods_ready_and_requeued_without_spending_budget(
        kube, ns, nodes):
    nodes(2)
    queue(kube, ns, gpus=16)
    job = queued_job("stuck")
    job["spec"]["template"]["spec"]["nodeSelector"] = {"no-such-node": "true"}  # admitted, never scheduled
    kube.apply(job)
    status = kube.wait_status(
        "stuck", lambda s: is_queued(s) and "PodsReadyTimeout" in condition(s, "Queued")["message"],
        timeout=ADMIT_WITHIN + 30, what="evicted for PodsReadyTimeout, Queued")
    assert status["restarts"] == 0 and status["platformRestarts"] == 0, status
    wait_until(lambda: not kube.pods("stuck") or kube.status("stuck").get("attempt", 0) >= 1, timeout=30,
               what="the stuck group stopped")
    # Requeued: Kueue admits it again after its backoff, and the operator creates the next attempt's pods.
    kube.wait_status("stuck", lambda s: s.get("attempt", 0) >= 1 and condition(s, "Queued").get("status") == "False",
                     timeout=ADMIT_WITHIN, what="admitted again")


def test_the_kueue_examples_are_accepted_by_kueue_and_the_api_server(cluster, kueue, crds):
    """examples/kueue as docs/kueue.md applies it: Kueue's own webhooks and schemas validate it (server dry run)."""
    for manifest in ("queues.yaml", "job.yaml"):
        done = cluster.kubectl("apply", "--dry-run=server", "-f", str(ROOT / "examples" / "kueue" / manifest),
                               check=False)
        assert done.returncode == 0, done.stdout + done.stderr


# --- issue 27: quota held by nothing running, and the queue label ----------------------------------------------
def test_a_preempted_job_re_admitted_onto_nodes_that_cannot_run_it_is_evicted_by_wait_for_pods_ready(
        kube, ns, nodes, cluster):
    """After a preemption the Workload waits with PodsReady WaitForStart, as Kueue's own integrations write it, so
    its next admission is timed out too. Before, it said WaitForRecovery, which Kueue times out only with
    recoveryTimeout set (off by default): re-admitted where it cannot run, the job held its quota for ever."""
    pool = nodes(4)  # names of this test's nodes
    high_class = preemption_queue(kube, ns)
    try:
        kube.apply(queued_job("low"))
        kube.running_pods("low", 0, 2, timeout=ADMIT_WITHIN)
        wait_until(lambda: condition(workloads(kube, "low")[0], "PodsReady").get("status") == "True", timeout=30,
                   what="low's Workload PodsReady")
        preempt(kube, "low", high_class)
        kube.running_pods("high", 0, 2, timeout=ADMIT_WITHIN)
        wait_until(lambda: not kube.pods("low"), timeout=30, what="low's pods gone")
        reason = condition(workloads(kube, "low")[0], "PodsReady").get("reason")
        assert reason == "WaitForStart", workloads(kube, "low")[0]["status"]
        for node in pool:
            cluster.kubectl("taint", "node", node, "ddpjob.dev/test-full=true:NoSchedule")
        finish(kube, "high")  # the quota is free again: low is admitted onto nodes that cannot take it
        status = kube.wait_status(
            "low", lambda s: is_queued(s) and "PodsReadyTimeout" in condition(s, "Queued")["message"],
            timeout=ADMIT_WITHIN + 60, what="low re-admitted, then evicted for PodsReadyTimeout")
        assert status["restarts"] == 0 and status["platformRestarts"] == 0, status
    finally:
        cluster.kubectl("delete", "priorityclass", high_class, check=False)


def test_suspending_an_admitted_job_gives_its_quota_to_a_queued_one(kube, ns, nodes):
    nodes(4)
    queue(kube, ns, gpus=16)
    kube.apply(queued_job("first"))
    kube.wait_phase("first", "Running", timeout=ADMIT_WITHIN)
    kube.apply(queued_job("second"))
    kube.wait_status("second", is_queued, timeout=ADMIT_WITHIN, what="second Queued behind first's quota")
    kube("patch", "ddpj", "first", "--type=merge", "-p", json.dumps({"spec": {"runPolicy": {"suspend": True}}}))
    kube.wait_phase("first", "Suspended")
    kube.wait_phase("second", "Running", timeout=ADMIT_WITHIN)
    (wl,) = workloads(kube, "first")
    assert wl["spec"].get("active") is False and not (wl.get("status") or {}).get("admission"), wl
    assert wl["metadata"]["annotations"].get(DEACTIVATED_BY) == "true", "the operator marks its own deactivation"
    # Resumed, it queues again as a new job would, behind the quota the second job now holds.
    kube("patch", "ddpj", "first", "--type=merge", "-p", json.dumps({"spec": {"runPolicy": {"suspend": False}}}))
    kube.wait_status("first", is_queued, timeout=ADMIT_WITHIN, what="first Queued again after its resume")
    wait_until(lambda: workloads(kube, "first")[0]["spec"].get("active") is True, timeout=30,
               what="first's Workload active again")
    assert DEACTIVATED_BY not in (workloads(kube, "first")[0]["metadata"].get("annotations") or {})
    assert kube.pods("first") == []
    finish(kube, "second")
    kube.wait_phase("first", "Running", timeout=ADMIT_WITHIN)


def test_a_workload_an_admin_deactivated_stays_inactive(kube, ns, nodes):
    """Issue 35 item 9: the operator reactivated any inactive Workload, undoing an admin's (or Kueue's own
    waitForPodsReady) deactivation. Now the job is queued, says why, and its Workload stays inactive."""
    nodes(2)
    queue(kube, ns, gpus=16)
    kube.apply(queued_job("job"))
    kube.wait_phase("job", "Running", timeout=ADMIT_WITHIN)
    (wl,) = workloads(kube, "job")
    kube("patch", "workloads.kueue.x-k8s.io", wl["metadata"]["name"], "--type=merge", "-p",
         json.dumps({"spec": {"active": False}}))
    status = kube.wait_status("job", lambda s: is_queued(s) and "does not undo" in condition(s, "Queued")["message"],
                              timeout=ADMIT_WITHIN, what="job queued, saying its Workload stays inactive")
    assert "set its spec.active to true" in condition(status, "Queued")["message"]
    wait_until(lambda: not kube.pods("job"), timeout=60, what="the job's pods stopped")
    assert workloads(kube, "job")[0]["spec"].get("active") is False, "never reactivated by the operator"


def test_the_queue_label_cannot_change_while_a_job_is_admitted_or_has_pods(kube, ns, nodes):
    nodes(4)
    queue(kube, ns, gpus=16)
    kube.apply(queued_job("governed"))
    kube.wait_phase("governed", "Running", timeout=ADMIT_WITHIN)
    done = kube("label", "ddpj", "governed", f"{QUEUE_LABEL}-", check=False)
    assert done.returncode != 0 and "cannot change" in done.stderr and "suspend it first" in done.stderr, done.stderr
    free = ddpjob("free", replicas=1, gpus=8)
    kube.apply(free)
    kube.wait_phase("free", "Running", timeout=ADMIT_WITHIN)
    done = kube("label", "ddpj", "free", f"{QUEUE_LABEL}=q", check=False)
    assert done.returncode != 0 and "cannot change" in done.stderr, done.stderr
    # Suspended, the label may change.
    kube("patch", "ddpj", "free", "--type=merge", "-p", json.dumps({"spec": {"runPolicy": {"suspend": True}}}))
    kube.wait_phase("free", "Suspended")
    wait_until(lambda: not kube.pods("free"), timeout=30, what="free's pods gone")
    kube("label", "ddpj", "free", f"{QUEUE_LABEL}=q")


@pytest.fixture
def without_the_policy(cluster):
    """A cluster where the chart's ValidatingAdmissionPolicy is not installed: every binding of one removed
    meanwhile, the local cluster's and any a chart test's release left (each release names its own)."""
    bindings = cluster.kubectl("get", "validatingadmissionpolicybindings", "-o", "name").stdout.split()
    for binding in (b for b in bindings if b.endswith("queue-label")):
        cluster.kubectl("delete", binding, "--ignore-not-found")
    yield
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(QUEUE_LABEL_POLICY))


def label_once_the_policy_is_gone(kube: Kube, job: str, change: str) -> None:
    """The API server drops a deleted binding from its policy cache a moment later: the first label commands
    can still meet it."""
    wait_until(lambda: kube("label", "ddpj", job, change, check=False).returncode == 0, timeout=30,
               what=f"kubectl label ddpj {job} {change} accepted without the policy")


def held(kube: Kube, job: str):
    return kube.wait_status(job, lambda s: condition(s, "QueueLabelHeld").get("status") == "True", timeout=30,
                            what=f"{job}'s QueueLabelHeld condition")


def test_without_the_policy_a_label_change_on_an_active_job_is_held(kube, ns, nodes, without_the_policy):
    nodes(4)
    queue(kube, ns, gpus=16)
    kube.apply(queued_job("governed"))
    kube.running_pods("governed", 0, 2, timeout=ADMIT_WITHIN)
    governed_uids = {p["metadata"]["uid"] for p in kube.pods("governed")}
    label_once_the_policy_is_gone(kube, "governed", f"{QUEUE_LABEL}-")
    status = held(kube, "governed")
    assert status["phase"] == "Running" and status["queue"] == "q", status
    assert "QueueLabelHeld" in {e["reason"] for e in kube.events("governed")}
    assert {p["metadata"]["uid"] for p in kube.pods("governed")} == governed_uids
    (wl,) = workloads(kube, "governed")
    # Still governed: when it ends, its Workload finishes and gives the quota back.
    finish(kube, "governed")
    wait_until(lambda: condition(workloads(kube, "governed")[0], "Finished").get("status") == "True", timeout=30,
               what="the Workload of the job whose label was removed Finished")

    kube.apply(ddpjob("free", replicas=1, gpus=8))
    kube.running_pods("free", 0, 1, timeout=ADMIT_WITHIN)
    free_uids = {p["metadata"]["uid"] for p in kube.pods("free")}
    label_once_the_policy_is_gone(kube, "free", f"{QUEUE_LABEL}=q")
    status = held(kube, "free")
    assert status["phase"] == "Running" and not status.get("queue"), status
    assert {p["metadata"]["uid"] for p in kube.pods("free")} == free_uids, "a label added to a running job stopped it"
    assert workloads(kube, "free") == []


def test_a_replica_group_replaced_alone_stays_under_the_admission(kube, ns, nodes):
    """TorchFT: the lost group's replacement is built under the Workload's admission (the flavor's node label), the
    admitted count is not exceeded, the Workload is the same one and stays admitted, and the Lighthouse (no GPU, no
    queue label) is made only once the job is admitted."""
    nodes(3)
    queue(kube, ns, gpus=16)
    kube.apply(queued_job("ft", faultTolerance={"mode": "TorchFT"}))
    kube.wait_phase("ft", "Running", timeout=ADMIT_WITHIN)
    (before_wl,) = workloads(kube, "ft")
    workers = {p["metadata"]["labels"]["ddpjob.dev/replica-index"]: p["metadata"]["uid"] for p in kube.pods("ft")
               if p["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"}
    assert len(workers) == 2
    kube.fail_pod("ft-worker-1", exit_code=137, message="killed")

    def replaced():
        current = [p for p in kube.pods("ft") if p["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"
                   and not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"]
        ones = [p for p in current if p["metadata"]["labels"]["ddpjob.dev/replica-index"] == "1"
                and p["metadata"]["uid"] != workers["1"]]
        return ones[0] if ones and len(current) == 2 else None

    new = wait_until(replaced, timeout=ADMIT_WITHIN, what="the replacement running")
    assert new["spec"]["nodeSelector"]["pool"] == ns, "the admission's flavor, as for the others"
    status = kube.wait_status("ft", lambda s: "replacing" not in s and s.get("phase") == "Running", timeout=60,
                              what="the replacement taken in")
    assert status["attempt"] == 0 and status["recoveries"][-1]["how"] == "ReplicaGroupReplaced", status
    (after_wl,) = workloads(kube, "ft")
    assert after_wl["metadata"]["uid"] == before_wl["metadata"]["uid"]
    assert condition(after_wl["status"], "Admitted").get("status") == "True", after_wl["status"]
    assert [p["metadata"]["uid"] for p in kube.pods("ft")
            if p["metadata"]["labels"].get("ddpjob.dev/replica-index") == "0"] == [workers["0"]]


def test_kubectl_ddpj_why_names_the_queue_its_position_and_the_job_holding_the_quota(kube, ns, nodes):
    """The plugin as a user runs it (`kubectl ddpj why`), against the real Kueue: a job queued behind another's
    quota is told apart from one the scheduler cannot place."""
    nodes(4)
    queue(kube, ns, gpus=16)
    kube.apply(queued_job("first"))
    kube.wait_phase("first", "Running", timeout=ADMIT_WITHIN)
    kube.apply(queued_job("second"))
    kube.wait_status("second", is_queued, timeout=ADMIT_WITHIN, what="Pending, Queued")
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
           "KUBECONFIG": str(kube.cluster.kubeconfig)}
    out = subprocess.run([str(ROOT / ".cache" / "bin" / "kubectl"), "ddpj", "why", "second", "-n", ns],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out
    assert "Kueue has not admitted it: it waits in LocalQueue q for quota" in out.stdout, out.stdout
    assert f"holding quota: {ns}/" in out.stdout and "first" in out.stdout, out.stdout
    assert "position 1 in LocalQueue q" in out.stdout, out.stdout


def test_a_rendezvous_edit_of_a_running_in_place_job_keeps_its_workload_and_its_pods(kube, ns, nodes):
    """Issue 54, defect 1: the pod set's hash covered the operator's injected env, so a legal edit of a running job
    (or an operator upgrade) replaced its admitted Workload and stopped its pods. Now only what Kueue admits on
    counts: the edit is taken in (observedGeneration) and the Workload and every pod stay."""
    nodes(2)
    queue(kube, ns, gpus=16)
    kube.apply(queued_job("ip", runPolicy={"restartStrategy": "InPlace"}))
    kube.wait_phase("ip", "Running", timeout=ADMIT_WITHIN)
    (before_wl,) = workloads(kube, "ip")
    pods_before = sorted(p["metadata"]["uid"] for p in kube.pods("ip"))
    kube("patch", "ddpjob", "ip", "--type=merge", "-p", json.dumps({"spec": {"rendezvous": {"joinTimeoutSeconds": 900}}}))
    generation = json.loads(kube("get", "ddpjob", "ip", "-o", "json").stdout)["metadata"]["generation"]
    status = kube.wait_status("ip", lambda s: s.get("observedGeneration") == generation, timeout=60,
                              what="the edit planned on")
    assert (status["phase"], status["attempt"]) == ("Running", 0), status
    (after_wl,) = workloads(kube, "ip")
    assert after_wl["metadata"]["uid"] == before_wl["metadata"]["uid"], "the admitted Workload was replaced"
    assert condition(after_wl["status"], "Admitted").get("status") == "True", after_wl["status"]
    assert sorted(p["metadata"]["uid"] for p in kube.pods("ip")
                  if not p["metadata"].get("deletionTimestamp")) == pods_before
