"""Deleting things never hangs (docs/reliability.md): a namespace with running jobs, with the operator up or down;
`kubectl delete ddpj --all`; a job deleted and re-created under its name while the operator restarts; and what
the operator must not take as its own: a Service of the job's name, a finalizer in the pod template.

The bounds here are generous (a loaded 2-core CI machine); the figures themselves are measured by
bench/namespace_deletion.py."""

from __future__ import annotations

import json
import random
import signal
import time

from ddpjob_operator.controller.applier import PlanApplier
from ddpjob_operator.controller.expectations import Expectations
from support.cluster import wait_until
from support.operator import OperatorProcess

from ddpjob_manifests import ddpjob
from namespaced_kubectl import Kube

JOBS = 20
GONE_WITHIN_SECONDS = 90
# No GPUs (20 x 2 pods would not fit the shared kwok nodes' 32), so they tolerate the GPU nodes' taint to land.
TOLERATE_GPU_NODES = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def small_job(name: str) -> dict:
    job = ddpjob(name, replicas=2, gpus=0)
    job["spec"]["template"]["spec"]["tolerations"] = TOLERATE_GPU_NODES
    return job


def running_jobs(kube, n: int, prefix: str = "j") -> list[str]:
    names = [f"{prefix}{i:02d}" for i in range(n)]
    kube("apply", "-f", "-", input="\n---\n".join(json.dumps(small_job(name)) for name in names))
    wait_until(lambda: all(kube.status(name).get("phase") == "Running" for name in names), timeout=120,
               interval=1, what=f"{n} jobs Running")
    return names


def namespace_gone(cluster, namespace: str) -> bool:
    return cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0


def no_restart_logged(log: str, namespace: str) -> bool:
    return not any(namespace in line and "restarting the group" in line for line in log.splitlines())


def deleted_by_the_operator(log: str, namespace: str, what: str, names: list[str]) -> list[str]:
    """`names` the operator's log does not show it deleting (`what`: pod or PodGroup)."""
    lines = [line for line in log.splitlines() if f"job={namespace}/" in line]
    if what == "pod":
        done = {line.rsplit(" pod=", 1)[1].split()[0] for line in lines if 'msg="deleted pod"' in line}
    else:
        done = {line.split(f'msg="deleted {what} ', 1)[1].split('"')[0] for line in lines
                if f'msg="deleted {what} ' in line}
    return [n for n in names if n not in done]


def test_deleting_a_namespace_with_running_jobs_releases_every_pod_and_counts_no_failure(
        cluster, kube, operator):
    names = running_jobs(kube, JOBS)
    pods = [p["metadata"]["name"] for name in names for p in kube.pods(name)]
    podgroups = [g["metadata"]["name"] for g in json.loads(kube("get", "podgroups.scheduling.k8s.io", "-o", "json")
                                                           .stdout)["items"]]
    assert len(pods) == 2 * JOBS and len(podgroups) == JOBS, "the shared cluster gang-schedules each job"
    started = time.monotonic()
    cluster.kubectl("delete", "namespace", kube.ns, "--wait=false")
    wait_until(lambda: namespace_gone(cluster, kube.ns), timeout=GONE_WITHIN_SECONDS, interval=0.5,
               what=f"namespace {kube.ns} gone")
    took = time.monotonic() - started
    assert operator.metric("ddpjob_group_restarts_total", reason="Deleted") == 0
    assert operator.metric("ddpjob_jobs_failed_total") == 0
    assert no_restart_logged(operator.log(), kube.ns)
    assert "unable to create new content" not in operator.log()
    # Deleted by the operator as soon as it saw the namespace go, not 5 s later by the namespace controller, whose
    # next look comes 8 s later whenever a finalizer (the pods' or the PodGroups') still holds something.
    assert deleted_by_the_operator(operator.log(), kube.ns, "pod", pods) == []
    assert deleted_by_the_operator(operator.log(), kube.ns, "PodGroup", podgroups) == []
    print(f"namespace with {JOBS} running 2-pod jobs deleted in {took:.1f}s")


def test_a_namespace_deleted_on_a_cluster_without_gang_scheduling_goes_the_same_way(
        cluster, namespace, tmp_path):
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False,
                         env={"DDPJOB_GANG_SCHEDULING": "off"}).start()
    kube = Kube(cluster, namespace)
    try:
        names = running_jobs(kube, 3)
        pods = [p["metadata"]["name"] for name in names for p in kube.pods(name)]
        assert json.loads(kube("get", "podgroups.scheduling.k8s.io", "-o", "json").stdout)["items"] == []
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        wait_until(lambda: namespace_gone(cluster, namespace), timeout=GONE_WITHIN_SECONDS, interval=0.5,
                   what=f"namespace {namespace} gone")
        assert deleted_by_the_operator(op.log(), namespace, "pod", pods) == []
        assert no_restart_logged(op.log(), namespace)
    finally:
        op.stop()


def test_a_namespace_deleted_while_the_operator_is_down_goes_once_it_is_back(cluster, kube, operator):
    running_jobs(kube, JOBS)
    operator.kill(signal.SIGKILL)
    cluster.kubectl("delete", "namespace", kube.ns, "--wait=false")
    # The namespace controller deletes the pods; their tracking finalizers hold them until the operator is back.
    wait_until(lambda: all(p["metadata"].get("deletionTimestamp") for p in kube.pods("j00")) and kube.pods("j00"),
               timeout=60, what="the namespace's pods being deleted")
    operator.start()
    wait_until(lambda: namespace_gone(cluster, kube.ns), timeout=GONE_WITHIN_SECONDS, interval=0.5,
               what=f"namespace {kube.ns} gone after the operator came back")
    assert operator.metric("ddpjob_group_restarts_total", reason="Deleted") == 0
    assert no_restart_logged(operator.log(), kube.ns)


def test_delete_all_jobs_frees_every_pod(kube, operator):
    running_jobs(kube, JOBS)
    kube("delete", "ddpj", "--all", "--wait=false")
    wait_until(lambda: not json.loads(kube("get", "pods", "-o", "json").stdout)["items"],
               timeout=GONE_WITHIN_SECONDS, interval=0.5, what="every pod of the deleted jobs gone")
    assert operator.metric("ddpjob_group_restarts_total", reason="Deleted") == 0


def test_delete_and_recreate_under_the_same_name_runs_each_new_job_with_its_own_pods(kube, operator):
    rng = random.Random(20)
    for cycle in range(20):
        kube.apply(small_job("rc"))
        uid = wait_until(lambda: (kube.job("rc") or {}).get("metadata", {}).get("uid"), what="job created")

        def own_running():
            pods = [p for p in kube.pods("rc")
                    if p["metadata"]["ownerReferences"][0]["uid"] == uid and p["status"].get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")]
            return len(pods) == 2 and kube.status("rc").get("phase") == "Running"

        wait_until(own_running, timeout=60, interval=0.3, what=f"cycle {cycle}: the new job running its own pods")
        if cycle % 5 == 4:  # now and then the operator dies around the deletion
            operator.kill(signal.SIGKILL)
        kube("delete", "ddpj", "rc", "--wait=false")
        time.sleep(rng.random() * 1.0)  # re-created at once, or a moment later: every order the cache can see
        if not operator.process.alive():
            operator.start()
    wait_until(lambda: not kube.pods("rc"), timeout=60, what="no pod left, none stuck Terminating")
    assert operator.metric("ddpjob_jobs_failed_total") == 0


def test_a_service_of_the_jobs_name_that_it_does_not_own_blocks_it_and_says_so(kube, operator):
    kube.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
                "spec": {"clusterIP": "None", "selector": {"app": "someone-else"}, "ports": [{"port": 80}]}})
    kube.apply(small_job("svc"))
    status = kube.wait_status("svc", lambda s: s.get("reason") == "ServiceConflict", what="ServiceConflict")
    created = next(c for c in status["conditions"] if c["type"] == "PodsCreated")
    assert (created["status"], created["reason"]) == ("False", "ServiceConflict")
    assert f"Service {kube.ns}/svc exists and is not this job's" in created["message"]
    assert kube.pods("svc") == []
    assert "ServiceConflict" in {e["reason"] for e in kube.events("svc")}
    kube("delete", "service", "svc")
    kube.running_pods("svc", attempt=0, n=2, timeout=60)
    kube.wait_phase("svc", "Running")
    owner = kube.get("service", "svc")["metadata"]["ownerReferences"][0]
    assert owner["uid"] == kube.job("svc")["metadata"]["uid"]


def test_a_pod_template_with_finalizers_is_refused_at_apply(kube, operator):
    job = ddpjob("fin", replicas=1, gpus=0)
    job["spec"]["template"]["metadata"] = {"finalizers": ["example.com/keep"]}
    res = kube("apply", "-f", "-", input=json.dumps(job), check=False)
    assert res.returncode != 0
    assert "spec.template.metadata.finalizers would be copied onto every worker pod" in res.stderr


HOLD = "tests.ddpjob.dev/hold"  # a finalizer of the test's own: the deletion shows while the object stays


def test_a_deleted_pods_owners_are_read_live_from_the_api_server(cluster, crds, kube_api, namespace):
    """What lets the operator judge a pod deleted by someone else at once (failures.deletion_to_settle): a read of
    the job and its namespace says whether either is being deleted. No operator watches this namespace."""
    applier = PlanApplier(kube_api, Expectations(time.monotonic))
    kube = Kube(cluster, namespace)

    def held_job(name: str) -> str:
        job = small_job(name)
        job["metadata"]["finalizers"] = [HOLD]
        kube("apply", "-f", "-", input=json.dumps(job))
        return json.loads(kube("get", "ddpjob", name, "-o", "json").stdout)["metadata"]["uid"]

    def release(name: str) -> None:
        kube("patch", "ddpjob", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)

    uid = held_job("live")
    try:
        assert applier.owners_live((namespace, "live"), uid)
        # The name now belongs to another job (deleted and created again): not this pod's.
        assert not applier.owners_live((namespace, "live"), "0b5e2f1c-0000-4000-8000-000000000000")
        kube("delete", "ddpjob", "live", "--wait=false")
        assert not applier.owners_live((namespace, "live"), uid), "the job is being deleted"
    finally:
        release("live")
    wait_until(lambda: kube("get", "ddpjob", "live", check=False).returncode != 0, timeout=30, what="job gone")
    assert not applier.owners_live((namespace, "live"), uid), "the job is gone"

    uid = held_job("in-ns")
    try:
        assert applier.owners_live((namespace, "in-ns"), uid)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        # The job's finalizer holds the namespace in Terminating; the job itself may or may not be marked yet.
        assert not applier.owners_live((namespace, "in-ns"), uid), "the namespace is being deleted"
    finally:
        release("in-ns")
