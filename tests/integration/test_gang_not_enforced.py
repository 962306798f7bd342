"""The API server serves PodGroups but the scheduler does not enforce them: the shared kube-scheduler is restarted
without its GenericWorkload/GangScheduling gates, so it binds a gang's pods one by one. The operator, which found the
API at its start, must see that from the pods (a gang partly bound while the rest is refused) and stop reporting
`Gang`: the job says PodByPod, with a GangNotEnforced event, and the operator's log says it once.

Marked disrupts_cluster: it restarts the shared scheduler (and puts it back with the gates on)."""

from __future__ import annotations

import os
import subprocess

import pytest
from kubernetes import client

from support.cluster import CLUSTER_SH, wait_until
from support.nodes import NodePool
from support.operator import OperatorProcess

from ddpjob_manifests import ddpjob
from namespaced_kubectl import Kube


def restart_scheduler(gang: bool) -> None:
    env = {**os.environ, "GANG_SCHEDULING": "1" if gang else "0"}
    subprocess.run(["bash", str(CLUSTER_SH), "stop", "kube-scheduler"], check=True, capture_output=True, timeout=60)
    subprocess.run(["bash", str(CLUSTER_SH), "start", "kube-scheduler"], check=True, capture_output=True, timeout=60,
                   env=env)


@pytest.fixture
def scheduler_without_gangs(cluster, crds):
    restart_scheduler(gang=False)
    try:
        yield
    finally:
        restart_scheduler(gang=True)


@pytest.mark.disrupts_cluster
def test_a_scheduler_that_binds_a_gang_pod_by_pod_is_seen_and_the_job_says_pod_by_pod(
        cluster, kube_api, scheduler_without_gangs, namespace, tmp_path):
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False)
    op.start()
    pool = NodePool(client.CoreV1Api(kube_api), namespace)
    try:
        assert "gang scheduling on" in op.log()  # the API is served: the operator starts with PodGroups
        pool(1)  # room for one of the gang's two 8-GPU pods
        kube = Kube(cluster, namespace)
        job = ddpjob("gang", replicas=2, gpus=8)
        job["spec"]["template"]["spec"]["nodeSelector"] = {"pool": namespace}
        kube.apply(job)
        status = kube.wait_status("gang", lambda s: s.get("placement") == "PodByPod", timeout=120,
                                  what="placement PodByPod once the partial binding is seen")
        assert "GangNotEnforced" in {e["reason"] for e in kube.events("gang")}, status
        assert [p for p in kube.pods("gang") if p["spec"].get("nodeName")], "one pod should be bound"
        wait_until(lambda: "does not enforce gang scheduling" in op.log(), timeout=30, what="the operator's warning")
    finally:
        op.stop()
        pool.delete()
