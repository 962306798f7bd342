"""Pod Security `restricted`, enforced by the API server's built-in PodSecurity admission (hack/cluster.sh leaves
it on): the job's Lighthouse passes it by default, and so do the pods of examples/restricted.yaml. Before, a TorchFT
job in such a namespace never got its Lighthouse, and the operator asked again at once, for ever (issue 54,
defect 4)."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
import yaml

from support.cluster import wait_until

from ddpjob_operator import api
from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers.builders import JobRef, build_lighthouse_pod, build_worker_pod

from ddpjob_manifests import ddpjob

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "restricted.yaml"
ENFORCE = "pod-security.kubernetes.io/enforce=restricted"


@pytest.fixture
def restricted(cluster, op_namespace):
    cluster.kubectl("label", "namespace", op_namespace, ENFORCE)
    return op_namespace


def example_job() -> dict:
    return next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d.get("kind") == api.KIND)


def dry_run(kube, pod: dict):
    pod = copy.deepcopy(pod)
    pod["metadata"]["namespace"] = kube.ns
    pod["metadata"].pop("ownerReferences", None)  # its owner is not there: the dry run asks about the pod alone
    return kube("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)


def test_the_namespace_refuses_a_pod_that_is_not_restricted(kube, restricted):
    """The control: the API server does enforce it here."""
    job = ddpjob("plain", replicas=1, gpus=1)
    pod = build_worker_pod(JobRef("plain", kube.ns, "uid"), parse_spec(job["spec"]), index=0, attempt=0,
                           restarts=0)
    res = dry_run(kube, pod)
    assert res.returncode != 0 and 'violates PodSecurity "restricted:latest"' in res.stderr, res.stderr


def test_the_restricted_examples_pods_pass_restricted(kube, restricted):
    job = example_job()
    ref, spec = JobRef(job["metadata"]["name"], kube.ns, "uid"), parse_spec(job["spec"])
    for pod in (build_worker_pod(ref, spec, index=0, attempt=0, restarts=0), build_lighthouse_pod(ref, spec)):
        res = dry_run(kube, pod)
        assert res.returncode == 0, f"{pod['metadata']['name']}: {res.stderr}"


def restricted_torchft_job(name: str) -> dict:
    job = ddpjob(name, replicas=2, gpus=1, faultTolerance={"mode": "TorchFT"})
    template = job["spec"]["template"]["spec"]
    template["securityContext"] = {"runAsNonRoot": True, "runAsUser": 1000,
                                   "seccompProfile": {"type": "RuntimeDefault"}}
    template["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False,
                                                    "capabilities": {"drop": ["ALL"]}}
    return job


def test_a_torchft_job_in_a_restricted_namespace_gets_its_lighthouse(kube, operator, restricted):
    kube.apply(restricted_torchft_job("ft"))
    lighthouse = wait_until(lambda: kube.get("pod", "ft-lighthouse"), timeout=60, what="the Lighthouse pod created")
    container = lighthouse["spec"]["containers"][0]
    assert container["securityContext"]["runAsNonRoot"] is True and container["resources"]["limits"]["cpu"]
    kube.running_pods("ft", attempt=0, n=2)
    status = kube.wait_phase("ft", "Running")
    created = [x for x in status.get("conditions") or [] if x["type"] == "PodsCreated"]
    assert all(x["status"] == "True" for x in created), created
    assert "FailedCreate" not in {e["reason"] for e in kube.events("ft")}


def refuse_lighthouses(cluster, namespace: str, name: str):
    """A ValidatingAdmissionPolicy (the API server's own, no webhook) that refuses, as Forbidden, every Lighthouse
    pod created in `namespace`: a refusal that may pass later, as a quota's or a webhook's."""
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name},
              "spec": {"failurePolicy": "Fail",
                       "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                               "operations": ["CREATE"], "resources": ["pods"]}]},
                       "validations": [{"expression": "!has(object.metadata.labels) || !('app.kubernetes.io/component'"
                                                      " in object.metadata.labels) || object.metadata.labels["
                                                      "'app.kubernetes.io/component'] != 'lighthouse'",
                                        "message": "no Lighthouse here (test policy)", "reason": "Forbidden"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": {"matchLabels": {
                            "kubernetes.io/metadata.name": namespace}}}}}
    for obj in (policy, binding):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def test_a_refused_lighthouse_is_shown_in_status_and_an_event_and_retried_not_hot_looped(cluster, kube, operator):
    name = f"deny-lighthouse-{kube.ns[-5:]}"
    refuse_lighthouses(cluster, kube.ns, name)
    try:
        # The policy takes a moment to reach the API server's admission: wait until it refuses.
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "probe", "labels": {"app.kubernetes.io/component": "lighthouse"}},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/x:1"}]}}
        wait_until(lambda: kube("create", "--dry-run=server", "-f", "-", input=json.dumps(probe),
                                check=False).returncode != 0, timeout=30, what="the policy enforced")
        kube.apply(restricted_torchft_job("refused"))

        def shown(status):
            created = [x for x in status.get("conditions") or [] if x["type"] == "PodsCreated"]
            return created and created[0]["status"] == "False"

        status = kube.wait_status("refused", shown, timeout=60, what="PodsCreated=False")
        (created,) = [x for x in status["conditions"] if x["type"] == "PodsCreated"]
        assert created["reason"] == "FailedCreate"
        assert "pod refused-lighthouse was rejected by the API server" in created["message"], created
        assert "no Lighthouse here (test policy)" in created["message"] and "(HTTP 403); retrying" in created["message"]
        wait_until(lambda: any(e["reason"] == "FailedCreate" and e["type"] == "Warning"
                               for e in kube.events("refused")), timeout=30, what="the FailedCreate event")
        # Retried every RETRY_SECONDS (10 s), not at once: over 12 s at most a few tries, not hundreds.
        before = operator.process.metric("ddpjob_reconcile_duration_seconds_count")
        time.sleep(12)
        passes = operator.process.metric("ddpjob_reconcile_duration_seconds_count") - before
        assert passes < 30, f"{passes} passes in 12 s: the refusal is hot-looped"
        assert kube.get("pod", "refused-lighthouse") is None
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found", check=False)
    lighthouse = wait_until(lambda: kube.get("pod", "refused-lighthouse"), timeout=60,
                            what="the Lighthouse created once the refusal passes")
    assert lighthouse["metadata"]["labels"]["app.kubernetes.io/component"] == "lighthouse"
