"""`helm uninstall` while a job runs leaves no pod held by the tracking finalizer (templates/uninstall-hook.yaml).

The chart is installed and the operator runs out of the cluster as the chart's ServiceAccount (its token, its
exact RBAC). During `helm uninstall` the pre-delete hook Job's pod is created; kwok's nodes run no containers, so
this test plays that pod's kubelet: it runs the pod's own command (`ddpjob-operator release-pods ...`, the image's
entry point) with the ServiceAccount's token, then reports the pod Succeeded. helm then removes the release."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from support import job_lifecycle
import operator_as_service_account as operator_sa
from support.chart_tools import ROOT, helm
from support.cluster import wait_until

HOOK_LABEL = "app.kubernetes.io/component=uninstall-hook"


def hook_pod(cluster, namespace: str) -> dict | None:
    items = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-l", HOOK_LABEL, "-o", "json").stdout)["items"]
    return items[0] if items else None


def test_helm_uninstall_suspends_running_jobs_and_leaves_no_pod_held(cluster, chart_crds, tmp_path):
    run = operator_sa.start(cluster, tmp_path, single_namespace=True)
    ns, name = run.watch_namespace, job_lifecycle.JOB_NAME
    try:
        cluster.kubectl("-n", ns, "apply", "-f", "-", input=yaml.safe_dump(job_lifecycle.job_manifest(name, 2)))
        wait_until(lambda: job_lifecycle.running(job_lifecycle.pods_of(cluster, ns, name, 0), 2), timeout=90,
                   what="2 Running pods")
        uninstall = subprocess.Popen(
            [str(ROOT / ".cache" / "bin" / "helm"), "uninstall", operator_sa.RELEASE, "--namespace",
             run.release_namespace, "--wait", "--timeout", "180s", "--kubeconfig", str(cluster.kubeconfig)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            pod = wait_until(lambda: hook_pod(cluster, run.release_namespace), timeout=60, what="the hook's pod")
            container = pod["spec"]["containers"][0]
            assert container["args"][:2] == ["release-pods", f"--namespace={ns}"], container["args"]
            # The image's entry point is `ddpjob-operator` (operator/Dockerfile): the same program, run here.
            done = subprocess.run([sys.executable, "-m", "ddpjob_operator", *container["args"]],
                                  env={"KUBECONFIG": str(run.kubeconfig), "PATH": "/usr/bin:/bin"},
                                  capture_output=True, text=True, timeout=200, cwd=ROOT)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "suspended 1 DDPJobs" in done.stdout, done.stdout
            patch = {"status": {"phase": "Succeeded", "containerStatuses": [{
                "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                            "startedAt": "2026-01-01T00:00:00Z",
                                                            "finishedAt": "2026-01-01T00:01:00Z"}}}]}}
            cluster.kubectl("-n", run.release_namespace, "patch", "pod", pod["metadata"]["name"],
                            "--subresource=status", "--type=merge", "-p", json.dumps(patch))
            out, _ = uninstall.communicate(timeout=200)
        finally:
            if uninstall.poll() is None:
                uninstall.kill()
        assert uninstall.returncode == 0, out
        assert "uninstalled" in out
        job = job_lifecycle.get_json(cluster, ns, "ddpjob", name)
        assert job["spec"]["runPolicy"]["suspend"] is True
        assert (job["status"]["phase"], job["status"]["restarts"]) == ("Suspended", 0)
        # The running operator stopped and freed them itself: nothing was left for the hook to force.
        assert "did not stop" not in done.stdout
        wait_until(lambda: not job_lifecycle.get_json(cluster, ns, "pods")["items"], timeout=60,
                   what="no worker pod left")
    finally:
        operator_sa.stop(run)
        helm("uninstall", operator_sa.RELEASE, "--namespace", run.release_namespace, "--no-hooks", check=False,
             kubeconfig=cluster.kubeconfig)
