"""The operator reads from watch caches: no GET or LIST per pass once they are warm, a pod deleted at any moment
after its creation counts as exactly one failure, and a restarted operator (cold cache) adopts the pods it finds."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import client, watch

from support.cluster import wait_until
from support.identity import make_identity, reads_of
from support.operator import OperatorProcess

from ddpjob_manifests import ddpjob

USER = "ddpjob-it-operator"


def reconcile_passes(op: OperatorProcess) -> float:
    return op.metric("ddpjob_reconcile_duration_seconds_count")


def test_a_warm_operator_makes_no_get_or_list(cluster, crds, namespace, tmp_path, kube_api):
    if not (cluster.kubeconfig.parent / "pki" / "ca.key").exists():
        pytest.skip("needs the local cluster's CA to give the operator an identity of its own")
    kubeconfig = make_identity(cluster, USER, tmp_path)
    op = OperatorProcess(kubeconfig, [namespace], tmp_path / "operator.log", verbose=False).start()
    try:
        apply = ["-n", namespace, "apply", "-f", "-"]
        for name in ("wa", "wb"):
            cluster.kubectl(*apply, input=json.dumps(ddpjob(name, replicas=2, gpus=1)))
        for name in ("wa", "wb"):
            wait_until(lambda n=name: json.loads(cluster.kubectl("-n", namespace, "get", "ddpjob", n, "-o",
                                                                 "json").stdout).get("status", {}).get("phase")
                       == "Running", timeout=60, what=f"{name} Running")
        before_reads, before_passes = reads_of(cluster, USER), reconcile_passes(op)
        # Wake both jobs through their pods (label changes) and let the resync (2 s here) come round a few times.
        core = client.CoreV1Api(kube_api)
        for name in ("wa", "wb"):
            core.patch_namespaced_pod(f"{name}-worker-0", namespace, {"metadata": {"labels": {"poke": "1"}}})
        wait_until(lambda: reconcile_passes(op) >= before_passes + 8, timeout=60, what="8 more reconcile passes")
        assert reads_of(cluster, USER) - before_reads == 0, "a warm pass must read the cache, not the API server"
    finally:
        op.stop()


@pytest.mark.parametrize("delay_ms", [0, 50, 500])
def test_a_pod_deleted_right_after_creation_counts_exactly_one_restart(kube, operator, kube_api, delay_ms):
    name = f"del{delay_ms}"
    core = client.CoreV1Api(kube_api)
    deleted: list[str] = []

    def delete_on_sight():
        w = watch.Watch()
        for event in w.stream(core.list_namespaced_pod, kube.ns, label_selector=f"ddpjob.dev/job-name={name}",
                              timeout_seconds=60):
            pod = event["object"]
            if event["type"] == "ADDED" and pod.metadata.name == f"{name}-worker-1" and \
                    pod.metadata.labels.get("ddpjob.dev/restart-attempt") == "0":
                time.sleep(delay_ms / 1000)
                core.delete_namespaced_pod(pod.metadata.name, kube.ns)
                deleted.append(pod.metadata.uid)
                w.stop()

    watcher = threading.Thread(target=delete_on_sight, daemon=True)
    watcher.start()
    time.sleep(0.5)  # the watch is open before the job exists
    kube.apply(ddpjob(name, replicas=2, gpus=1))
    watcher.join(timeout=70)
    assert deleted, "the pod was never seen"
    pods = kube.running_pods(name, attempt=1, n=2)
    for pod in pods:
        kube.succeed_pod(pod["metadata"]["name"])
    status = kube.wait_phase(name, "Succeeded")
    # Terminal: nothing can be counted after this, so the count is final.
    # A deleted pod is the platform's failure: platformRestarts, not the trainer's backoffLimit.
    assert (status["restarts"], status["platformRestarts"], status["attempt"]) == (0, 1, 1), status
    assert status["lastFailure"]["pod"] == f"{name}-worker-1"
    assert status["lastFailure"]["kind"] == "Deleted"
    assert not [p for p in kube.pods(name) if p["metadata"]["uid"] in deleted], "the deleted pod is gone"


def test_a_restarted_operator_adopts_the_pods_it_finds_and_creates_nothing_twice(kube, operator):
    kube.apply(ddpjob("adopt", replicas=3, gpus=1))
    # Kill it as soon as the pods exist: the status write that follows their creation may not have happened.
    wait_until(lambda: len(kube.pods("adopt")) == 3, timeout=60, interval=0.05, what="3 pods created")
    operator.kill()
    uids = {p["metadata"]["uid"] for p in kube.pods("adopt")}
    operator.start()
    status = kube.wait_phase("adopt", "Running")
    assert (status["attempt"], status["restarts"], status["launchedAttempt"]) == (0, 0, 0)
    assert {p["metadata"]["uid"] for p in kube.pods("adopt")} == uids, "the same three pods, none created again"
    assert operator.metric("ddpjob_pods_created_total") == 0, "the restarted operator created no pod"


def test_a_deleted_job_frees_its_pods(kube, operator):
    kube.apply(ddpjob("gone", replicas=2, gpus=1))
    kube.running_pods("gone", attempt=0, n=2)
    assert all(p["metadata"]["finalizers"] == ["ddpjob.dev/pod-tracking"] for p in kube.pods("gone"))
    kube("delete", "ddpjob", "gone", "--wait=false")
    wait_until(lambda: kube.pods("gone") == [], timeout=60, what="pods of the deleted job removed")
