"""After a relist the operator's caches hold exactly what the API server holds (relist.py).

The operator is frozen (SIGSTOP), the API server restarted (its watch connections end), a pod and a node
deleted and etcd's history compacted: when the operator thaws, its watches cannot resume from their old resourceVersion
(410 Gone) and kopf lists again. Without the relist layer the deleted pod and node stay in its indexes for good: the job keeps counting a
pod that does not exist, and the node's room is still offered.

Marked disrupts_cluster: it restarts the shared apiserver, so it runs after every other test."""

from __future__ import annotations

import json
import urllib.request

import pytest
from kubernetes import client, config

from support.cluster import Cluster, wait_until
from support.nodes import create_spare_node, delete_node, node_schedulable
from support.operator import OperatorProcess

from ddpjob_manifests import ddpjob
from namespaced_kubectl import Kube


def compact_etcd(cluster: Cluster) -> None:
    """Compact etcd's history to now (its JSON gateway), so no watch can resume from before this moment."""
    etcd = f"http://127.0.0.1:{cluster.env.get('ETCD_PORT', '23790')}"

    def post(path: str, body: dict) -> dict:
        request = urllib.request.Request(f"{etcd}{path}", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    revision = post("/v3/kv/range", {"key": "AA=="})["header"]["revision"]
    post("/v3/kv/compaction", {"revision": revision, "physical": True})


def start_control_plane(cluster: Cluster) -> None:
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        # A no-op for a component that runs; the others have been seen to exit after an apiserver restart.
        cluster.sh("start", component, check=True, capture_output=True, timeout=180)


def restart_apiserver(cluster: Cluster) -> None:
    """A fresh API server: every watch connection ends, and its watch cache starts now, so an older resourceVersion
    must come from etcd, where compact_etcd(cluster) removes it: the watch gets 410 Gone and kopf lists again."""
    cluster.sh("stop", "kube-apiserver", check=True, capture_output=True, timeout=60)
    start_control_plane(cluster)


@pytest.mark.disrupts_cluster
def test_objects_deleted_while_the_watch_was_down_leave_the_cache(cluster, crds, namespace, tmp_path):
    start_control_plane(cluster)
    core = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    node = f"ghost-{namespace[-5:]}"
    create_spare_node(core, node)
    # Placed on it before it is Ready, the pods would be lost with it (NodeNotReady) and the attempt would move on.
    wait_until(lambda: node_schedulable(core, node), timeout=60, what=f"node {node} Ready, without the not-ready taint")
    op = OperatorProcess(cluster.kubeconfig, [namespace], tmp_path / "operator.log", verbose=False)
    op.start()
    kube = Kube(cluster, namespace)
    try:
        kube.apply(ddpjob("gh", replicas=2, gpus=1))
        kube.running_pods("gh", attempt=0, n=2)
        kube.wait_phase("gh", "Running")
        nodes_before = op.metric("ddpjob_watch_cache_objects", kind="nodes")

        op.freeze()
        try:
            restart_apiserver(cluster)  # the frozen operator's watch connections end here, before anything is deleted
            # Gone for good while the operator cannot see it: no finalizer left, no grace.
            kube("patch", "pod", "gh-worker-1", "--type=json",
                 "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
            kube("delete", "pod", "gh-worker-1", "--grace-period=0", "--force", "--wait=true")
            delete_node(core, node)
            compact_etcd(cluster)
        finally:
            op.thaw()

        # The missing pod is seen (a failure of the running attempt: the group restarts) ...
        def restarted():
            start_control_plane(cluster)  # the scheduler loses its lease in the outage and exits; bring it back
            s = kube.status("gh")
            return s.get("attempt", 0) >= 1 and s.get("phase") == "Running" and s

        status = wait_until(restarted, timeout=120, interval=1, what="the group restarted without the deleted pod")
        assert status["lastFailure"]["reason"] == "PodMissing"
        # ... and the deleted node left the cache.
        wait_until(lambda: op.metric("ddpjob_watch_cache_objects", kind="nodes") == nodes_before - 1, timeout=60,
                   what="the deleted node gone from the cache")
        assert "deleted while the watch was down, dropped from the cache" in op.log()
    finally:
        op.stop()
        start_control_plane(cluster)
        print(f"----- operator log -----\n{op.log()[-20000:]}")  # shown when the test fails
        scheduler_log = cluster.kubeconfig.parent / "logs" / "kube-scheduler.log"
        if scheduler_log.exists():
            print(f"----- kube-scheduler log -----\n{scheduler_log.read_text()[-8000:]}")
        if node in cluster.kubectl("get", "nodes", "-o", "name", check=False).stdout:
            delete_node(core, node)
