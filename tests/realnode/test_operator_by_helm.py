"""The operator installed by Helm and running as pods on the real nodes (issue 36, item 4): the image built from
operator/Dockerfile, the chart's two operators (a primary that leads, a standby that waits), in-cluster config with
the chart's ServiceAccount and RBAC, a read-only root filesystem and a non-root user, a DDPJob carried through a
restart by it, and its metrics scraped by a real Prometheus."""

from __future__ import annotations

import json
import subprocess

import pytest

from support import prometheus_server
from support.chart_tools import CHART, helm
from support.job_lifecycle import drive_through_restart
from support.cluster import wait_until
from support.realnode import IMAGES_SH, TOLERATE

# leadership.py says which role each operator took in the chart's kopf peering.
LEADING, STANDING_BY = "leading the peering", "standing by in the peering"


def operator_pods(cluster, namespace: str) -> dict[str, dict]:
    """role -> pod of the chart's operators."""
    out = cluster.kubectl("-n", namespace, "get", "pods", "-l", "app.kubernetes.io/component=operator", "-o", "json")
    return {p["metadata"]["labels"]["ddpjob.dev/operator-role"]: p for p in json.loads(out.stdout)["items"]}


@pytest.fixture
def installed(cluster, namespace, real_nodes):
    ref = subprocess.run(["bash", str(IMAGES_SH), "operator-ref"], capture_output=True, text=True,
                         check=True).stdout.strip()
    repository, tag = ref.rsplit(":", 1)
    helm("install", "ddpjob", str(CHART), "--namespace", namespace, "--kubeconfig", str(cluster.kubeconfig),
         "--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
         "--set", "ha.enabled=true", "--set", "singleNamespace=true",
         "--set-json", f"tolerations={json.dumps(TOLERATE)}",
         "--set-json", 'nodeSelector={"ddpjob.dev/real-node": "true"}')

    def both_running():
        pods = operator_pods(cluster, namespace)
        return set(pods) == {"primary", "standby"} and all(
            p["status"].get("phase") == "Running" and all(c.get("ready") for c in p["status"].get("containerStatuses", []))
            for p in pods.values()) and pods
    pods = wait_until(both_running, timeout=180, interval=1, what="the chart's primary and standby operators Running")
    yield pods
    helm("uninstall", "ddpjob", "--namespace", namespace, "--kubeconfig", str(cluster.kubeconfig), "--wait",
         timeout=180)


def test_helm_installs_the_operator_image_as_pods_on_the_real_nodes(cluster, namespace, real_nodes, installed):
    for role, pod in installed.items():
        assert pod["spec"]["nodeName"] in real_nodes, (role, pod["spec"]["nodeName"])
        assert pod["status"]["containerStatuses"][0]["imageID"], "the image the kubelet ran, from its containerd"
        probe = cluster.kubectl("-n", namespace, "exec", pod["metadata"]["name"], "--", "python", "-c",
                                "import os\nprint(os.getuid(), os.getgid())\n"
                                "try:\n    open('/probe', 'w')\n    print('writable')\n"
                                "except OSError as err:\n    print('read-only', err.errno)", check=False)
        assert probe.returncode == 0, probe.stderr
        uid_gid, root_fs = probe.stdout.splitlines()
        assert uid_gid == "65532 65532", f"{role}: the chart's non-root user"
        assert root_fs == "read-only 30", f"{role}: the root filesystem must be read-only (EROFS): {root_fs}"


def test_the_primary_leads_a_job_through_a_restart_in_cluster_and_the_standby_waits(
        cluster, namespace, real_nodes, installed):
    job = drive_through_restart(cluster, namespace, timeout=120)
    assert job["status"]["restarts"] == 1, job["status"]

    def log(role: str) -> str:
        return cluster.kubectl("-n", namespace, "logs", installed[role]["metadata"]["name"]).stdout
    primary, standby = log("primary"), log("standby")
    # No kubeconfig anywhere in the pod: the only way it reached the API is in-cluster config with its token.
    container = installed["primary"]["spec"]["containers"][0]
    assert not any(e["name"] == "KUBECONFIG" for e in container.get("env", [])), container.get("env")
    assert installed["primary"]["spec"]["serviceAccountName"] == "ddpjob-ddpjob-operator"
    assert f"job={namespace}/" in primary, "the primary reconciled the job"
    assert LEADING in primary and STANDING_BY not in primary.split(LEADING)[-1], "the primary leads"
    assert STANDING_BY in standby and LEADING not in standby, "the standby stands by"
    assert f"job={namespace}/" not in standby, "the standby touched nothing"


def test_a_real_prometheus_scrapes_the_operator_pod(cluster, namespace, real_nodes, installed, tmp_path):
    pod_ip = installed["primary"]["status"]["podIP"]
    drive_through_restart(cluster, namespace, name="scraped", timeout=120)
    server = prometheus_server.start(tmp_path, [prometheus_server.scrape_job(
        "operator", f"{pod_ip}:8080", {"namespace": namespace})])
    try:
        prometheus_server.wait_for_series(server, 'up{job="operator"} == 1')
        prometheus_server.wait_for_series(server, 'ddpjob_jobs{phase="Succeeded"} >= 1')
        prometheus_server.wait_for_series(server, "sum(ddpjob_group_restarts_total) >= 1")
    finally:
        server.stop()
