"""The API server itself rejects bad DDPJobs (OpenAPI schema + CEL rules in crds/), each with a message that
says what to fix. No operator needed."""

from __future__ import annotations

import copy
import json

import uuid
from pathlib import Path

import pytest

from namespaced_kubectl import Kube
from ddpjob_manifests import ddpjob


@pytest.fixture(scope="module")
def kube(cluster, crds):
    """One namespace for the whole module: nothing here needs an operator, and most objects are refused."""
    name = f"t-api-validation-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    yield Kube(cluster, name)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def with_spec(**changes) -> dict:
    job = ddpjob("bad", replicas=2)
    for path, value in changes.items():
        target = job["spec"]
        keys = path.split("__")
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return job


def with_env(name: str) -> dict:
    job = ddpjob("bad")
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": name, "value": "x"}]
    return job


def with_metrics_port_on(container: str, deadline: int = 60) -> dict:
    job = with_spec(runPolicy__progressDeadlineSeconds=deadline)
    containers = job["spec"]["template"]["spec"]["containers"]
    containers.append({"name": "sidecar", "image": "example.invalid/sidecar:1"})
    next(c for c in containers if c["name"] == container)["ports"] = [{"name": "metrics", "containerPort": 9400}]
    return job


def with_resources(**resources) -> dict:
    """The trainer container's resources (limits=..., requests=...)."""
    job = with_spec()
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    return job


def with_template(metadata: dict | None = None, **pod_spec) -> dict:
    """The worker template with these metadata and pod spec fields set."""
    job = with_spec()
    template = job["spec"]["template"]
    if metadata is not None:
        template["metadata"] = metadata
    template["spec"].update(pod_spec)
    return job


def with_metrics_port(port: int, network_policy: bool = True) -> dict:
    job = with_spec(networkPolicy=network_policy)
    job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": port}]
    return job


INVALID = [
    ("metrics port the job's NetworkPolicy would block", with_metrics_port(8080),
     "with spec.networkPolicy: true the port named 'metrics' must be within 9400-9463"),
    ("replicas below min of elastic", with_spec(replicas=1, elastic={"minReplicas": 2, "maxReplicas": 4}),
     "spec.replicas must be within [spec.elastic.minReplicas, spec.elastic.maxReplicas]"),
    ("replicas above max of elastic", with_spec(replicas=5, elastic={"minReplicas": 2, "maxReplicas": 4}),
     "spec.replicas must be within [spec.elastic.minReplicas, spec.elastic.maxReplicas]"),
    ("min above max", with_spec(replicas=3, elastic={"minReplicas": 4, "maxReplicas": 2}),
     "spec.elastic.minReplicas must be <= spec.elastic.maxReplicas"),
    ("zero replicas", with_spec(replicas=0), "spec.replicas: Invalid value: 0: spec.replicas in body should be "
                                             "greater than or equal to 1"),
    ("negative gpus", with_spec(gpusPerReplica=-1), "spec.gpusPerReplica in body should be greater than or equal to 0"),
    ("port zero", with_spec(rendezvous={"port": 0}), "spec.rendezvous.port in body should be greater than or equal to 1"),
    ("port too big", with_spec(rendezvous={"port": 70000}),
     "spec.rendezvous.port in body should be less than or equal to 65535"),
    ("nproc word", with_spec(nprocPerNode="many"), 'spec.nprocPerNode must be an integer between 1 and 64, or "auto"'),
    ("nproc zero", with_spec(nprocPerNode=0), 'spec.nprocPerNode must be an integer between 1 and 64, or "auto"'),
    ("restart policy typo", with_spec(restartPolicy="Always"),
     'spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "ExitCode", "Never"'),
    ("clean pod policy typo", with_spec(runPolicy__cleanPodPolicy="Some"),
     'spec.runPolicy.cleanPodPolicy: Unsupported value: "Some"'),
    ("negative backoff limit", with_spec(runPolicy__backoffLimit=-1),
     "spec.runPolicy.backoffLimit in body should be greater than or equal to 0"),
    ("zero deadline", with_spec(runPolicy__activeDeadlineSeconds=0),
     "spec.runPolicy.activeDeadlineSeconds in body should be greater than or equal to 1"),
    ("no containers", with_spec(template={"spec": {"containers": []}}),
     "spec.template.spec.containers in body should have at least 1 items"),
    ("PET_ variable", with_env("PET_NNODES"), "env PET_NNODES is set by the operator"),
    ("MASTER_ADDR", with_env("MASTER_ADDR"), "env MASTER_ADDR is set by the operator"),
    ("WORLD_SIZE", with_env("WORLD_SIZE"), "env WORLD_SIZE is set by the operator"),
    ("RANK", with_env("RANK"), "env RANK is set by the operator"),
    ("DDPJOB_ identity", with_env("DDPJOB_ATTEMPT"), "env DDPJOB_ATTEMPT is set by the operator"),
    ("progress deadline without a metrics port", with_spec(runPolicy__progressDeadlineSeconds=60),
     "spec.runPolicy.progressDeadlineSeconds needs a progress source: add a port named 'metrics' to the trainer "
     "container"),
    ("progress deadline with the metrics port on another container", with_metrics_port_on("sidecar"),
     "spec.runPolicy.progressDeadlineSeconds needs a progress source"),
    ("progress deadline too short", with_spec(runPolicy__progressDeadlineSeconds=5),
     "spec.runPolicy.progressDeadlineSeconds in body should be greater than or equal to 10"),
    ("rendezvous port on a rank's metrics port", with_spec(nprocPerNode=4, rendezvous={"port": 9403}),
     "clashes with the metrics ports of the trainer processes (9400 + local rank, one per process of the pod); "
     "pick a port outside 9400"),
    ("rendezvous port on a metrics port, nproc auto from 8 GPUs", with_spec(rendezvous={"port": 9407}),
     "clashes with the metrics ports of the trainer processes"),
    ("InPlace: rendezvous port on the agents' restart-count port",
     with_spec(runPolicy__restartStrategy="InPlace", rendezvous={"port": 9399}),
     "spec.rendezvous.port 9399 is where each pod's torchrun agent serves its in-place restart count"),
    ("InPlace: a metrics port on the agents' restart-count port",
     with_spec(runPolicy__restartStrategy="InPlace", template={"spec": {"containers": [
         {"name": "trainer", "image": "example.invalid/trainer:1",
          "ports": [{"name": "metrics", "containerPort": 9399}]}]}}),
     "containerPort 9399 is where each pod's torchrun agent serves its in-place restart count under restartStrategy "
     "InPlace; use another port"),
    ("more processes than GPUs", with_spec(gpusPerReplica=2, nprocPerNode=4),
     "(one trainer process per GPU): lower nprocPerNode, raise gpusPerReplica, or set nprocPerNode: auto"),
    ("shm size not a quantity", with_spec(shmSize="lots"),
     "spec.shmSize must be a non-negative Kubernetes quantity such as 4Gi or 512Mi"),
    ("negative shm size", with_spec(shmSize="-1Gi"), "spec.shmSize must be a non-negative Kubernetes quantity"),
    # Found by the spec fuzzer: a limit that is no quantity reached the operator, whose every reconcile of the job
    # then failed (ValueError: Invalid number format: lots) instead of the job being refused.
    ("a GPU limit that is no quantity", with_resources(limits={"nvidia.com/gpu": "lots"}),
     "resources.limits[nvidia.com/gpu]: Invalid value: \"lots\": must be a non-negative Kubernetes quantity such as "
     "2, 500m or 8Gi"),
    ("a negative memory request", with_resources(requests={"memory": "-1Gi"}),
     "resources.requests[memory]: Invalid value: \"-1Gi\": must be a non-negative Kubernetes quantity"),
    ("restart strategy typo", with_spec(runPolicy__restartStrategy="Restart"),
     'spec.runPolicy.restartStrategy: Unsupported value: "Restart": supported values: "Recreate", "InPlace"'),
    ("torchrun's own restarts beside InPlace",
     with_spec(runPolicy__restartStrategy="InPlace", elastic={"minReplicas": 1, "maxReplicas": 2, "maxRestarts": 2}),
     "spec.elastic.maxRestarts cannot be used with spec.runPolicy.restartStrategy: InPlace, whose in-place restarts "
     "count against spec.runPolicy.backoffLimit; remove maxRestarts and set backoffLimit instead"),
    ("TorchFT beside torchrun's own restarts",
     with_spec(faultTolerance={"mode": "TorchFT"}, elastic={"minReplicas": 1, "maxReplicas": 2, "maxRestarts": 2}),
     "spec.elastic.maxRestarts cannot be used with spec.faultTolerance.mode: TorchFT"),
    ("Lighthouse on the rendezvous port",
     with_spec(faultTolerance={"mode": "TorchFT", "lighthouse": {"port": 29400}}),
     "spec.faultTolerance.lighthouse.port must differ from spec.rendezvous.port"),
    ("fault tolerance mode typo", with_spec(faultTolerance={"mode": "torchft"}),
     'spec.faultTolerance.mode: Unsupported value: "torchft": supported values: "None", "TorchFT"'),
    # Issue 54, defect 11: accepted untyped, each made every reconcile of the job raise (no status, no event).
    ("grace period with a unit", with_template(terminationGracePeriodSeconds="30s"),
     "spec.template.spec.terminationGracePeriodSeconds in body must be of type integer"),
    ("a label value that is no string", with_template(metadata={"labels": {"tier": 1}}),
     "spec.template.metadata.labels.tier in body must be of type string"),
    ("labels a list", with_template(metadata={"labels": ["tier=a"]}),
     "spec.template.metadata.labels in body must be of type object"),
    ("an annotation value that is no string", with_template(metadata={"annotations": {"sidecar": True}}),
     "spec.template.metadata.annotations.sidecar in body must be of type string"),
    ("tolerations a string", with_template(tolerations="nvidia.com/gpu"),
     "spec.template.spec.tolerations in body must be of type array"),
    # One toleration where the list goes: kubectl's strict decoding answers first, naming its fields.
    ("tolerations a map", with_template(tolerations={"key": "gpu", "operator": "Exists"}),
     'unknown field "spec.template.spec.tolerations.key"'),
    ("nodeSelector a string", with_template(nodeSelector="pool=gpu"),
     "spec.template.spec.nodeSelector in body must be of type object"),
    ("no template", {"apiVersion": "ddpjob.dev/v1alpha1", "kind": "DDPJob", "metadata": {"name": "bad"},
                     "spec": {"replicas": 1}}, 'spec.template: Required value'),
]


@pytest.mark.parametrize("name, manifest, message", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_spec_is_rejected_with_a_message(kube, crds, name, manifest, message):
    res = kube("create", "-f", "-", input=json.dumps(manifest), check=False)
    assert res.returncode != 0, f"{name}: accepted"
    assert message in res.stderr, f"{name}: {res.stderr}"
    assert kube.job("bad") is None


def test_defaults_are_applied(kube, crds):
    job = ddpjob("ok", replicas=1)
    del job["spec"]["runPolicy"]
    kube("create", "-f", "-", input=json.dumps(job))
    spec = kube.job("ok")["spec"]
    assert spec["nprocPerNode"] == "auto"
    assert spec["restartPolicy"] == "OnFailure"
    assert spec["runPolicy"] == {"backoffLimit": 3, "cleanPodPolicy": "Running", "suspend": False,
                                 "restartBackoffSeconds": 5, "platformFailureLimit": 20, "healthyResetSeconds": 3600,
                                 "placementTimeoutSeconds": 120, "restartStrategy": "Recreate"}
    # lastCallTimeoutSeconds has no server default: unset, the operator picks by restartStrategy (rendezvous.py)
    assert spec["rendezvous"] == {"port": 29400, "joinTimeoutSeconds": 600}
    assert spec["shmSize"] == "4Gi"


@pytest.mark.parametrize("name, manifest", [
    ("rendezvous port just past the metrics ports of 8 processes", with_spec(rendezvous={"port": 9408})),
    ("rendezvous port below the metrics ports", with_spec(rendezvous={"port": 9399})),
    ("fewer processes than GPUs", with_spec(gpusPerReplica=8, nprocPerNode=2)),
    ("CPU job: any process count", with_spec(gpusPerReplica=0, nprocPerNode=4)),
    ("no /dev/shm volume", with_spec(shmSize="0")),
    ("shm size in bytes", with_spec(shmSize=1073741824)),
    ("metrics port 9400 with the NetworkPolicy", with_metrics_port(9400)),
    ("any metrics port without the NetworkPolicy", with_metrics_port(8080, network_policy=False)),
    ("TorchFT with its defaults", with_spec(faultTolerance={"mode": "TorchFT"})),
    ("a metrics port 9399 under Recreate (no agent port)", with_metrics_port(9399, network_policy=False)),
    ("TorchFT with restarts in place", with_spec(faultTolerance={"mode": "TorchFT"}, runPolicy__restartStrategy="InPlace")),
    ("template fields typed as a pod's", with_template(
        metadata={"labels": {"tier": "1"}, "annotations": {"a": "true"}}, terminationGracePeriodSeconds=30,
        tolerations=[{"key": "gpu", "operator": "Exists"}], nodeSelector={"pool": "gpu"})),
    ("resources as a pod takes them", with_resources(limits={"nvidia.com/gpu": 8, "memory": "64Gi", "cpu": "7500m"},
                                                     requests={"cpu": "0.5", "ephemeral-storage": "10G"})),
])
def test_valid_ports_process_counts_and_shm_sizes_are_accepted(kube, crds, name, manifest):
    res = kube("create", "--dry-run=server", "-f", "-", input=json.dumps(manifest), check=False)
    assert res.returncode == 0, f"{name}: {res.stderr}"


@pytest.mark.parametrize("name, patch, message", [
    ("port", {"spec": {"rendezvous": {"port": 29500}}}, "spec.rendezvous.port is immutable"),
    ("restart policy", {"spec": {"restartPolicy": "Never"}}, "spec.restartPolicy is immutable"),
    ("gpus", {"spec": {"gpusPerReplica": 4}}, "spec.gpusPerReplica is immutable"),
    ("fault tolerance mode", {"spec": {"faultTolerance": {"mode": "TorchFT"}}},
     "spec.faultTolerance.mode is immutable; create a new DDPJob to change it"),
    ("template while not suspended", {"spec": {"template": {"spec": {"containers": [
        {"name": "trainer", "image": "example.invalid/other:2"}]}}}},
     "spec.template may only change while the job is suspended"),
])
def test_immutable_fields(kube, crds, name, patch, message):
    job = f"imm-{uuid.uuid4().hex[:5]}"
    kube("create", "-f", "-", input=json.dumps(ddpjob(job, replicas=1)))
    res = kube("patch", "ddpjob", job, "--type=merge", "-p", json.dumps(patch), check=False)
    assert res.returncode != 0, f"{name}: accepted"
    assert message in res.stderr, res.stderr


def test_template_may_change_while_suspended(kube, crds):
    job = ddpjob("susp", replicas=1, runPolicy={"suspend": True})
    kube("create", "-f", "-", input=json.dumps(job))
    new = copy.deepcopy(job["spec"]["template"])
    new["spec"]["containers"][0]["image"] = "example.invalid/other:2"
    kube("patch", "ddpjob", "susp", "--type=merge", "-p", json.dumps({"spec": {"template": new}}))
    assert kube.job("susp")["spec"]["template"]["spec"]["containers"][0]["image"] == "example.invalid/other:2"


def test_progress_deadline_with_a_metrics_port_on_the_trainer_is_accepted(kube, crds):
    res = kube("create", "--dry-run=server", "-f", "-", input=json.dumps(with_metrics_port_on("trainer")),
               check=False)
    assert res.returncode == 0, res.stderr


def test_kubectl_explain_describes_the_spec(kube, crds):
    text = kube("explain", "ddpj.spec.runPolicy").stdout
    assert "Limits and clean-up." in text
    assert "backoffLimit" in text and "Whole-group restarts allowed" in text


@pytest.mark.parametrize("example", ["gpu-2x8.yaml", "elastic-exitcode.yaml", "gpu-pvc.yaml", "digits.yaml",
                                     "user-loop.yaml", "torchft.yaml", "restricted.yaml"])
def test_examples_are_accepted(kube, crds, example):
    path = Path(__file__).resolve().parents[2] / "examples" / example
    res = kube("apply", "--dry-run=server", "-f", str(path), check=False)
    assert res.returncode == 0, res.stderr
