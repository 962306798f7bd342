"""Manifest builders: the Service, the worker pod and torchrun's environment (README contract table)."""

from __future__ import annotations

import pytest

from ddpjob_operator import api
from ddpjob_operator.workers.builders import JobRef, build_service, build_worker_pod
from ddpjob_operator.workers.rendezvous import merge_env, rendezvous_env
from ddpjob_operator.state.spec import parse_spec

from job_builders import make_job

REF = JobRef("j", "ns", "uid-7")


def env_of(pod: dict, container: int = 0) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][container]["env"]}


def pod_for(job: dict, index: int = 0, attempt: int = 0, restarts: int = 0) -> dict:
    return build_worker_pod(REF, parse_spec(job["spec"]), index=index, attempt=attempt, restarts=restarts)


def test_service_is_headless_publishes_not_ready_and_is_owned():
    svc = build_service(REF, parse_spec(make_job("j").build()["spec"]))
    assert svc["metadata"]["name"] == "j"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["ports"] == [{"name": "rendezvous", "port": 29400, "targetPort": 29400, "protocol": "TCP"}]
    assert svc["metadata"]["ownerReferences"] == [{"apiVersion": "ddpjob.dev/v1alpha1", "kind": "DDPJob",
                                                   "name": "j", "uid": "uid-7", "controller": True,
                                                   "blockOwnerDeletion": True}]


def test_worker_pod_names_labels_and_dns():
    pod = pod_for(make_job("j").replicas(2).build(), index=1, attempt=3)
    assert pod["metadata"]["name"] == "j-worker-1"
    assert pod["metadata"]["labels"] == {
        "app.kubernetes.io/name": "ddpjob", "app.kubernetes.io/instance": "j",
        "app.kubernetes.io/component": "worker", "app.kubernetes.io/managed-by": "ddpjob-operator",
        "ddpjob.dev/job-name": "j", "ddpjob.dev/replica-index": "1", "ddpjob.dev/restart-attempt": "3",
        "ddpjob.dev/replicas": "2"}
    assert pod["spec"]["hostname"] == "j-worker-1"
    assert pod["spec"]["subdomain"] == "j"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod["metadata"]["ownerReferences"][0]["controller"] is True


def test_operator_labels_win_over_template_labels():
    job = make_job("j").build()
    job["spec"]["template"]["metadata"] = {"labels": {"ddpjob.dev/job-name": "other", "team": "ml"}}
    labels = pod_for(job)["metadata"]["labels"]
    assert labels["ddpjob.dev/job-name"] == "j"
    assert labels["team"] == "ml"


def test_rendezvous_env_exact_for_worker_0_and_1():
    spec = parse_spec(make_job("j").replicas(2).gpus(4).build()["spec"])
    env0 = {e["name"]: e.get("value") for e in rendezvous_env(job="j", namespace="ns", job_uid="u", spec=spec,
                                                               index=0, attempt=2, restarts=1)}
    assert env0 == {
        "PET_NNODES": "2", "PET_NPROC_PER_NODE": "4", "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "j-worker-0.j.ns.svc:29400", "PET_RDZV_ID": "u-2",
        "PET_RDZV_CONF": "is_host=true,join_timeout=600,last_call_timeout=30", "PET_MAX_RESTARTS": "0",
        "PET_NODE_RANK": "0", "MASTER_ADDR": "j-worker-0.j.ns.svc", "MASTER_PORT": "29400",
        "TORCHELASTIC_ERROR_FILE": "/dev/termination-log", "DDPJOB_NAME": "j", "DDPJOB_NAMESPACE": "ns",
        "DDPJOB_ATTEMPT": "2", "DDPJOB_REPLICA_INDEX": "0", "DDPJOB_RESTARTS": "1",
        "DDPJOB_COLLECTIVE_TIMEOUT_SECONDS": "300", "POD_IP": None}
    env1 = {e["name"]: e.get("value") for e in rendezvous_env(job="j", namespace="ns", job_uid="u", spec=spec,
                                                               index=1, attempt=2, restarts=1)}
    assert env1["PET_RDZV_CONF"].startswith("is_host=false,")
    assert env1["PET_NODE_RANK"] == "1"


@pytest.mark.parametrize("name, job, want_nnodes, want_nproc, want_max_restarts", [
    ("fixed", make_job("j").replicas(3), "3", "1", "0"),
    ("elastic: the attempt's size", make_job("j").replicas(3).elastic(2, 4, max_restarts=2), "3", "1", "2"),
    ("auto from gpusPerReplica", make_job("j").gpus(8), "1", "8", "0"),
    ("auto from template limit", make_job("j").container(resources={"limits": {"nvidia.com/gpu": "2"}}), "1", "2", "0"),
    ("explicit nproc", make_job("j").gpus(8).nproc(2), "1", "2", "0"),
    ("nproc as string", make_job("j").nproc("3"), "1", "3", "0"),
    ("auto without gpus", make_job("j").gpus(0), "1", "1", "0"),
])
def test_nnodes_and_nproc(name, job, want_nnodes, want_nproc, want_max_restarts):
    env = env_of(pod_for(job.build()))
    assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_MAX_RESTARTS"]) == \
        (want_nnodes, want_nproc, want_max_restarts), name


def test_rendezvous_id_changes_per_attempt():
    job = make_job("j").build()
    assert env_of(pod_for(job, attempt=0))["PET_RDZV_ID"] != env_of(pod_for(job, attempt=1))["PET_RDZV_ID"]


@pytest.mark.parametrize("name, job, want_limits, want_requests", [
    ("gpusPerReplica sets request = limit", make_job("j").gpus(4), {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "4"}),
    ("template limit mirrored", make_job("j").container(resources={"limits": {"nvidia.com/gpu": 2, "cpu": "1"}}),
     {"nvidia.com/gpu": 2, "cpu": "1"}, {"nvidia.com/gpu": "2"}),
    ("gpusPerReplica overrides template",
     make_job("j").gpus(1).container(resources={"limits": {"nvidia.com/gpu": "8"}}),
     {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"}),
    ("zero gpus drops them", make_job("j").gpus(0).container(resources={"limits": {"nvidia.com/gpu": "8"}}),
     None, None),
])
def test_gpu_resources(name, job, want_limits, want_requests):
    resources = pod_for(job.build())["spec"]["containers"][0].get("resources", {})
    assert resources.get("limits") == want_limits, name
    assert resources.get("requests") == want_requests, name


def test_env_goes_into_trainer_container_not_the_first():
    job = make_job("j").build()
    job["spec"]["template"]["spec"]["containers"] = [{"name": "sidecar", "image": "s"},
                                                     {"name": "trainer", "image": "t"}]
    pod = pod_for(job)
    assert "env" not in pod["spec"]["containers"][0]
    assert env_of(pod, 1)["PET_NNODES"] == "1"


def test_user_env_kept_nccl_defaults_overridable_owned_names_replaced():
    user = [{"name": "LR", "value": "0.1"}, {"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "1"},
            {"name": "PET_NNODES", "value": "99"}]
    merged = merge_env(user, [{"name": "PET_NNODES", "value": "2"}])
    names = [e["name"] for e in merged]
    assert names.count("PET_NNODES") == 1 and names.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 1
    values = {e["name"]: e["value"] for e in merged}
    assert values["LR"] == "0.1"
    assert values["PET_NNODES"] == "2"
    assert values["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert values["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"


def test_rendezvous_port_exposed_on_trainer_once():
    job = make_job("j").container(ports=[{"name": "metrics", "containerPort": 9400}]).build()
    ports = pod_for(job)["spec"]["containers"][0]["ports"]
    assert ports == [{"name": "metrics", "containerPort": 9400},
                     {"name": "rendezvous", "containerPort": 29400, "protocol": "TCP"}]


def test_builder_does_not_mutate_the_job():
    job = make_job("j").gpus(2).build()
    before = repr(job)
    pod_for(job)
    assert repr(job) == before


def test_selector_and_names():
    assert api.selector("j") == "ddpjob.dev/job-name=j"
    assert api.worker_name("j", 3) == "j-worker-3"


def test_the_tests_teardown_frees_the_finalizer_the_builders_put_on_pods():
    from support.cluster import TRACKING_FINALIZER
    pod = build_worker_pod(JobRef("a", "ns", "uid"), parse_spec({"replicas": 1, "template": {"spec": {
        "containers": [{"name": "trainer", "image": "x"}]}}}), index=0, attempt=0, restarts=0)
    assert pod["metadata"]["finalizers"] == [TRACKING_FINALIZER]


SHM = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4Gi"}}
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}
CHECKPOINTS = {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}}
OWN_SHM = {"name": "shm", "emptyDir": {"medium": "Memory"}}


@pytest.mark.parametrize("name, job, want_volumes, want_mounts", [
    ("default: 4Gi in memory", make_job("j"), [SHM], [SHM_MOUNT]),
    ("sized from spec.shmSize", make_job("j").shm_size("16Gi"),
     [{**SHM, "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}], [SHM_MOUNT]),
    ("shmSize 0 adds none", make_job("j").shm_size("0"), [], []),
    ("shmSize 0Gi adds none", make_job("j").shm_size("0Gi"), [], []),
    ("next to the template's volumes",
     make_job("j").pod_spec(volumes=[CHECKPOINTS]).container(
         volumeMounts=[{"name": "checkpoints", "mountPath": "/ckpt"}]),
     [CHECKPOINTS, SHM], [{"name": "checkpoints", "mountPath": "/ckpt"}, SHM_MOUNT]),
    ("template mounts its own /dev/shm: not added twice",
     make_job("j").pod_spec(volumes=[OWN_SHM]).container(volumeMounts=[{"name": "shm", "mountPath": "/dev/shm/"}]),
     [OWN_SHM], [{"name": "shm", "mountPath": "/dev/shm/"}]),
    ("template has a volume named dshm: not added twice",
     make_job("j").pod_spec(volumes=[{"name": "dshm", "emptyDir": {}}]),
     [{"name": "dshm", "emptyDir": {}}], []),
])
def test_shared_memory_volume(name, job, want_volumes, want_mounts):
    pod = pod_for(job.build())
    assert pod["spec"].get("volumes", []) == want_volumes, name
    assert pod["spec"]["containers"][0].get("volumeMounts", []) == want_mounts, name


def test_shared_memory_goes_to_the_trainer_container_only():
    job = make_job("j").build()
    job["spec"]["template"]["spec"]["containers"] = [{"name": "sidecar", "image": "s"},
                                                     {"name": "trainer", "image": "t"}]
    pod = pod_for(job)
    assert "volumeMounts" not in pod["spec"]["containers"][0]
    assert pod["spec"]["containers"][1]["volumeMounts"] == [SHM_MOUNT]


@pytest.mark.parametrize("name, job, want_grace, want_shutdown, want_collective", [
    ("default grace: long enough for a checkpoint", make_job("j"), 120, "110", "300"),
    ("the template's grace wins", make_job("j").pod_spec(terminationGracePeriodSeconds=45), 45, "35", "300"),
    ("a grace longer than the collective timeout raises it",
     make_job("j").pod_spec(terminationGracePeriodSeconds=900), 900, "890", "900"),
    ("zero grace: torchrun still waits a second", make_job("j").pod_spec(terminationGracePeriodSeconds=0), 0, "1",
     "300"),
])
def test_grace_period_and_the_shutdown_chain(name, job, want_grace, want_shutdown, want_collective):
    """kubelet grace -> torchrun's TORCH_ELASTIC_SHUTDOWN_TIMEOUT (inside it) -> the trainer's save, which the
    waiting ranks sit out within DDPJOB_COLLECTIVE_TIMEOUT_SECONDS."""
    pod = pod_for(job.build())
    env = env_of(pod)
    assert pod["spec"]["terminationGracePeriodSeconds"] == want_grace, name
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == want_shutdown, name
    assert env["DDPJOB_COLLECTIVE_TIMEOUT_SECONDS"] == want_collective, name
    assert int(env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"]) < max(want_grace, 2), "torchrun must end before the kubelet"


DEFAULT_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "110",
               "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_ENABLE_MONITORING": "1"}


@pytest.mark.parametrize("name, user_env, want", [
    ("defaults when the template sets nothing", [], DEFAULT_ENV),
    ("async error handling overridden", [{"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "1"}],
     {**DEFAULT_ENV, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}),
    ("torchrun's shutdown window overridden", [{"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": "60"}],
     {**DEFAULT_ENV, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "60"}),
    ("the socket interface is the user's", [{"name": "NCCL_SOCKET_IFNAME", "value": "eth1"}],
     {**DEFAULT_ENV, "NCCL_SOCKET_IFNAME": "eth1"}),
])
def test_nccl_defaults_and_template_overrides(name, user_env, want):
    env_list = pod_for(make_job("j").container(env=user_env).build())["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env_list]
    assert len(names) == len(set(names)), f"{name}: a variable twice"
    env = {e["name"]: e.get("value") for e in env_list}
    assert {k: env.get(k) for k in want} == want, name
    if "NCCL_SOCKET_IFNAME" not in want:
        assert "NCCL_SOCKET_IFNAME" not in env, "NCCL picks the interface unless the user does"


@pytest.mark.parametrize("name, ports, own_probe, want", [
    ("a metrics port gets the kubelet's readiness probe on it", [{"name": "metrics", "containerPort": 9400}], None,
     {"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 10, "timeoutSeconds": 5,
      "failureThreshold": 3}),
    ("no metrics port: no probe", [], None, None),
    ("the template's own probe wins", [{"name": "metrics", "containerPort": 9400}], {"tcpSocket": {"port": 9400}},
     {"tcpSocket": {"port": 9400}}),
])
def test_readiness_probe_on_the_metrics_port(name, ports, own_probe, want):
    job = make_job("a").replicas(1).build()
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    trainer["ports"] = ports
    if own_probe is not None:
        trainer["readinessProbe"] = own_probe
    pod = build_worker_pod(JobRef("a", "ns", "uid-1"), parse_spec(job["spec"]), index=0, attempt=0, restarts=0)
    assert pod["spec"]["containers"][0].get("readinessProbe") == want, name
