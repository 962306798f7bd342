"""The local control plane is real: scheduling against GPU capacity, garbage collection, CEL validation, and a
clean shutdown. These run against the processes hack/cluster.sh starts."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from support.cluster import BIN, CLUSTER_SH, wait_until


def _pod(name: str, gpus: int) -> str:
    return textwrap.dedent(f"""
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}}}
        spec:
          restartPolicy: Never
          containers:
          - name: c
            image: example.invalid/trainer:1
            resources:
              limits: {{nvidia.com/gpu: "{gpus}"}}
    """)


def test_simulated_gpu_nodes_are_ready_with_capacity(cluster):
    nodes = json.loads(cluster.kubectl("get", "nodes", "-l", "type=kwok", "-o", "json").stdout)["items"]
    assert len(nodes) >= 1
    for node in nodes:
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", node["metadata"]["name"]
        assert int(node["status"]["allocatable"]["nvidia.com/gpu"]) >= 8


def test_gpu_pod_fits_a_node_and_an_oversized_one_stays_pending(cluster, namespace):
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=_pod("fits", 8))
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=_pod("too-big", 9))

    def phase(name):
        return cluster.kubectl("-n", namespace, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout

    wait_until(lambda: phase("fits") == "Running", timeout=60, what="8-GPU pod Running")

    def unschedulable():
        pod = json.loads(cluster.kubectl("-n", namespace, "get", "pod", "too-big", "-o", "json").stdout)
        conds = {c["type"]: c for c in pod["status"].get("conditions", [])}
        return conds.get("PodScheduled", {}).get("reason") == "Unschedulable" and pod["status"]["phase"] == "Pending"

    wait_until(unschedulable, timeout=60, what="9-GPU pod Unschedulable")
    assert "Insufficient nvidia.com/gpu" in cluster.kubectl(
        "-n", namespace, "get", "pod", "too-big", "-o", "jsonpath={.status.conditions[0].message}").stdout


def test_owned_configmap_is_garbage_collected(cluster, namespace):
    cluster.kubectl("-n", namespace, "create", "configmap", "owner")
    uid = cluster.kubectl("-n", namespace, "get", "configmap", "owner", "-o", "jsonpath={.metadata.uid}").stdout
    owned = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "owned", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]},
    }
    cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(owned))
    cluster.kubectl("-n", namespace, "delete", "configmap", "owner")
    wait_until(lambda: cluster.kubectl("-n", namespace, "get", "configmap", "owned", check=False).returncode != 0,
               timeout=60, what="owned ConfigMap garbage-collected")


CEL_CRD = textwrap.dedent("""
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata: {name: widgets.celcheck.ddpjob.dev}
    spec:
      group: celcheck.ddpjob.dev
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget}
      versions:
      - name: v1
        served: true
        storage: true
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                x-kubernetes-validations:
                - rule: self.min <= self.max
                  message: spec.min must be at most spec.max
                properties:
                  min: {type: integer}
                  max: {type: integer}
""")


def test_crd_cel_rule_rejects_with_its_message(cluster, namespace):
    cluster.kubectl("apply", "-f", "-", input=CEL_CRD)
    cluster.kubectl("wait", "--for=condition=Established", "crd/widgets.celcheck.ddpjob.dev", "--timeout=30s")
    bad = "apiVersion: celcheck.ddpjob.dev/v1\nkind: Widget\nmetadata: {name: w}\nspec: {min: 3, max: 1}\n"
    good = bad.replace("min: 3", "min: 1")

    def apply(doc):
        return cluster.kubectl("-n", namespace, "apply", "-f", "-", input=doc, check=False)

    # A freshly established CRD can take a moment before its validation is served everywhere.
    res = wait_until(lambda: (r := apply(bad)).returncode != 0 and r, timeout=20, what="CEL rejection")
    assert "spec.min must be at most spec.max" in res.stderr
    assert apply(good).returncode == 0


def test_cluster_down_leaves_no_process(tmp_path):
    """A second, throw-away cluster on other ports: up, then down, and every pid it recorded is gone. Its ports
    are below Linux's ephemeral range (32768-60999): one there was taken once by some client's connection, and
    etcd could not bind it."""
    env = {**os.environ, "CLUSTER_DIR": str(tmp_path / "c"), "NODES": "1", "ETCD_PORT": "13790",
           "ETCD_PEER_PORT": "13800", "APISERVER_PORT": "16443", "KCM_PORT": "30257", "SCHED_PORT": "30259",
           "KWOK_PORT": "30247"}
    env.pop("KUBECONFIG", None)
    subprocess.run(["bash", str(CLUSTER_SH), "up"], env=env, check=True, timeout=180)
    pids = [int((tmp_path / "c" / "pids" / f).read_text()) for f in os.listdir(tmp_path / "c" / "pids")]
    assert len(pids) == 5
    for pid in pids:
        os.kill(pid, 0)  # alive
    subprocess.run(["bash", str(CLUSTER_SH), "down"], env=env, check=True, timeout=60)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not (tmp_path / "c").exists()
    assert BIN.exists()
