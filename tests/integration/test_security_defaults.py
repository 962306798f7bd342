"""Security defaults of the pods the operator creates: no service-account token unless the template asks for
one, and the operator's own labels cannot be taken over from the template or by a look-alike pod."""

from __future__ import annotations

import json

from support.cluster import wait_until

from ddpjob_manifests import ddpjob

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def token_volumes(pod: dict) -> list[str]:
    return [v["name"] for v in pod["spec"].get("volumes") or []
            if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources") or [])]


def token_mounts(pod: dict) -> list[str]:
    return [m["mountPath"] for c in pod["spec"]["containers"] for m in c.get("volumeMounts") or []
            if m["mountPath"] == TOKEN_DIR]


def test_trainer_pods_mount_no_service_account_token_by_default(kube, operator):
    kube.apply(ddpjob("notoken", replicas=2, gpus=1))
    pods = kube.running_pods("notoken", attempt=0, n=2)
    for pod in pods:
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert token_volumes(pod) == [] and token_mounts(pod) == [], pod["spec"].get("volumes")


def test_a_template_that_asks_for_the_token_gets_it(kube, operator):
    job = ddpjob("token", replicas=1, gpus=1)
    job["spec"]["template"]["spec"]["automountServiceAccountToken"] = True
    kube.apply(job)
    pod = kube.running_pods("token", attempt=0, n=1)[0]
    assert pod["spec"]["automountServiceAccountToken"] is True
    assert token_volumes(pod) and token_mounts(pod) == [TOKEN_DIR]


HIJACK = {"ddpjob.dev/job-name": "victim", "ddpjob.dev/replica-index": "5", "ddpjob.dev/restart-attempt": "7",
          "app.kubernetes.io/managed-by": "someone-else", "app.kubernetes.io/component": "evil",
          "app.kubernetes.io/instance": "victim", "app.kubernetes.io/name": "other", "team": "research"}


def test_template_labels_cannot_take_over_the_operators_labels(kube, operator):
    kube.apply(ddpjob("victim", replicas=2, gpus=1))
    kube.running_pods("victim", attempt=0, n=2)
    job = ddpjob("hj", replicas=2, gpus=1)
    job["spec"]["template"]["metadata"] = {"labels": HIJACK, "annotations": {"ddpjob.dev/job-name": "victim"}}
    kube.apply(job)
    pods = kube.running_pods("hj", attempt=0, n=2)
    for pod in pods:
        labels = pod["metadata"]["labels"]
        index = pod["metadata"]["name"].rsplit("-", 1)[1]
        assert {k: labels[k] for k in HIJACK} == {
            "ddpjob.dev/job-name": "hj", "ddpjob.dev/replica-index": index, "ddpjob.dev/restart-attempt": "0",
            "app.kubernetes.io/managed-by": "ddpjob-operator", "app.kubernetes.io/component": "worker",
            "app.kubernetes.io/instance": "hj", "app.kubernetes.io/name": "ddpjob", "team": "research"}
        assert pod["metadata"]["annotations"]["ddpjob.dev/job-name"] == "victim"  # annotations select nothing
    kube.wait_phase("hj", "Running")
    victim = kube.wait_phase("victim", "Running")
    assert (victim["restarts"], victim["attempt"], victim["readyReplicas"]) == (0, 0, 2)
    assert sorted(p["metadata"]["name"] for p in kube.pods("victim")) == ["victim-worker-0", "victim-worker-1"]


def test_a_look_alike_pod_is_neither_counted_nor_deleted(kube, operator):
    kube.apply(ddpjob("own", replicas=1, gpus=1))
    kube.running_pods("own", attempt=0, n=1)
    kube.wait_phase("own", "Running")
    stray = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "labels": {
        "ddpjob.dev/job-name": "own", "ddpjob.dev/replica-index": "1", "ddpjob.dev/restart-attempt": "0",
        "app.kubernetes.io/component": "worker"}},
        "spec": {"nodeSelector": {"type": "kwok"}, "containers": [{"name": "trainer", "image": "example.invalid/x:1"}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    kube.apply(stray)
    wait_until(lambda: (kube.get("pod", "stray") or {}).get("status", {}).get("phase") == "Running", timeout=30,
               what="stray pod running")
    kube.fail_pod("stray", exit_code=1, message="not yours")
    # A positive signal that the operator has planned "own" since the failure: a spec change it must acknowledge
    # (observedGeneration), then a few more passes (the 2 s resync) for a lagging pod watch.
    passes = "ddpjob_reconcile_duration_seconds_count"
    before = operator.process.metric(passes)
    kube("patch", "ddpjob", "own", "--type=merge", "-p", json.dumps({"spec": {"runPolicy": {
        "ttlSecondsAfterFinished": 3600}}}))
    generation = kube.job("own")["metadata"]["generation"]
    kube.wait_status("own", lambda s: s.get("observedGeneration") == generation, what="the spec change planned")
    wait_until(lambda: operator.process.metric(passes) >= before + 4, timeout=30, what="4 more passes")
    status = kube.status("own")
    assert (status["phase"], status["restarts"], status["attempt"], status["replicas"]) == ("Running", 0, 0, 1)
    assert kube.get("pod", "stray") is not None
    assert json.dumps(status).count("stray") == 0
