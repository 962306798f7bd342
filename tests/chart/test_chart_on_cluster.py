"""The rendered chart against the real local control plane: a server-side dry-run of every manifest with every
feature on (both RBAC modes), and a real `helm install` into a namespace that enforces Pod Security "restricted".
prometheus-operator's kinds are served by minimal stand-in CRDs (fixtures/monitoring-crds.yaml); their content
is checked by promtool and a real Prometheus in the other tests."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from support.chart_tools import ALL_FEATURES, CHART, helm, render, set_flags

# kwok's simulated nodes are GPU nodes with this taint; the operator pod tolerates it here to be scheduled.
TOLERATE_KWOK = {"tolerations[0].key": "nvidia.com/gpu", "tolerations[0].operator": "Exists",
                 "tolerations[0].effect": "NoSchedule"}


@pytest.mark.parametrize("single_namespace", [False, True], ids=["cluster-wide", "single-namespace"])
def test_server_side_dry_run_of_every_manifest(cluster, chart_crds, namespace, single_namespace):
    values = {**ALL_FEATURES, "singleNamespace": str(single_namespace).lower(),
              "fullnameOverride": f"dry-{uuid.uuid4().hex[:6]}"}
    docs = render(values, namespace=namespace, include_crds=True)
    manifest = yaml.safe_dump_all(docs)
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=manifest, check=False)
    assert result.returncode == 0, result.stderr
    applied = result.stdout.splitlines()
    assert len(applied) == len(docs), result.stdout
    assert all("(server dry run)" in line for line in applied), result.stdout


def test_dry_run_rejects_a_broken_manifest(cluster, chart_crds, namespace):
    # The dry-run is a real check: the API server refuses what it would refuse for real.
    docs = render(namespace=namespace)
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    deploy["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "lots"
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(deploy), check=False)
    assert result.returncode != 0
    assert "quantities must match the regular expression" in result.stderr


def test_helm_install_under_pod_security_restricted(cluster, chart_crds, namespace):
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                    "pod-security.kubernetes.io/enforce-version=latest")
    fullname = f"inst-{uuid.uuid4().hex[:6]}"
    values = {**ALL_FEATURES, **TOLERATE_KWOK, "fullnameOverride": fullname}
    try:
        result = helm("install", "ddpjob", str(CHART), "--namespace", namespace, *set_flags(values),
                      "--wait", "--timeout", "90s", kubeconfig=cluster.kubeconfig, check=False, timeout=150)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "STATUS: deployed" in result.stdout
        # NOTES.txt is rendered for the user.
        assert f"kubectl -n {namespace} logs deploy/{fullname}" in result.stdout
        pods = json.loads(cluster.kubectl("-n", namespace, "get", "pods", "-o", "json").stdout)["items"]
        roles = sorted(p["metadata"]["labels"]["ddpjob.dev/operator-role"] for p in pods)
        assert roles == ["primary", "standby"], roles
        assert all(p["status"]["phase"] == "Running" for p in pods), [p["status"] for p in pods]
        peering = json.loads(cluster.kubectl("get", "clusterkopfpeering", fullname, "-o", "json").stdout)
        assert peering["metadata"]["labels"]["app.kubernetes.io/instance"] == "ddpjob"
        for kind in ("servicemonitor", "podmonitor", "prometheusrule", "configmap", "networkpolicy"):
            listed = cluster.kubectl("-n", namespace, "get", kind, "-l", "app.kubernetes.io/instance=ddpjob",
                                     "-o", "name").stdout.split()
            assert listed, f"no {kind} installed"
    finally:
        helm("uninstall", "ddpjob", "--namespace", namespace, "--wait", "--no-hooks", kubeconfig=cluster.kubeconfig,
             check=False)  # the uninstall hook is test_uninstall_hook.py's
    gone = cluster.kubectl("get", "clusterrole", fullname, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_restricted_namespace_refuses_a_pod_that_is_not_restricted(cluster, chart_crds, namespace):
    # Proves the namespace label above is enforced, so the install test's admission means something.
    cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    result = cluster.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-", input=json.dumps(pod),
                             check=False)
    assert result.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in result.stderr
