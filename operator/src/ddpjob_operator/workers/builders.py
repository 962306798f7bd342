"""Manifests the operator creates: the headless Service and the worker pods. Pure functions of the job."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .. import api
from ..placement import gang
from ..recovery import replica_groups
from ..state.spec import JobSpec, trainer_container
from .rendezvous import merge_env, overridable_defaults, rendezvous_env


@dataclass(frozen=True)
class JobRef:
    name: str
    namespace: str
    uid: str


def owner_reference(job: JobRef) -> dict[str, Any]:
    # controller + blockOwnerDeletion: deleting the job cascades to its pods and Service through the garbage
    # collector. The job itself carries no finalizer, so it is never stranded while the operator is down.
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_labels(job: str) -> dict[str, str]:
    return {
        api.LABEL_NAME: "ddpjob",
        api.LABEL_INSTANCE: job,
        api.LABEL_MANAGED_BY: api.MANAGED_BY,
        api.LABEL_JOB_NAME: job,
    }


def child_metadata(job: JobRef) -> dict[str, Any]:
    """Metadata of a per-job child (Service, NetworkPolicy): named like the job, labelled, owned by it."""
    return {
        "name": job.name,
        "namespace": job.namespace,
        "labels": job_labels(job.name),
        "ownerReferences": [owner_reference(job)],
    }


def worker_selector(job: str) -> dict[str, str]:
    return {api.LABEL_JOB_NAME: job, api.LABEL_COMPONENT: "worker"}


def build_service(job: JobRef, spec: JobSpec) -> dict[str, Any]:
    ports = [
        {
            "name": api.RENDEZVOUS_PORT_NAME,
            "port": spec.rendezvous.port,
            "targetPort": spec.rendezvous.port,
            "protocol": "TCP",
        }
    ]
    selector = worker_selector(job.name)
    if spec.fault_tolerance.torchft:
        # The Lighthouse's DNS name is its hostname under this Service, so the Service selects it too.
        selector = {api.LABEL_JOB_NAME: job.name}
        port = spec.fault_tolerance.lighthouse_port
        ports.append({"name": replica_groups.PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(job),
        "spec": {
            "clusterIP": "None",
            # Workers resolve worker-0 before it is Ready: the rendezvous is what makes them ready.
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": ports,
        },
    }


# The trainer serves metrics on 9400 + local rank (README); scrapes (the operator's progress reads, Prometheus)
# may come from anywhere, everything else only from the job's own workers.
TRAINER_METRICS_PORTS = (9400, 9463)


def build_network_policy(job: JobRef) -> dict[str, Any]:
    """spec.networkPolicy: only the job's own workers reach its workers (rendezvous and collectives use ports
    chosen at run time, so the rule is by peer, not by port), plus metrics scrapes."""
    workers = worker_selector(job.name)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": child_metadata(job),
        "spec": {
            "podSelector": {"matchLabels": workers},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": workers}}]},
                {
                    "ports": [
                        {"protocol": "TCP", "port": TRAINER_METRICS_PORTS[0], "endPort": TRAINER_METRICS_PORTS[1]},
                        {"protocol": "TCP", "port": api.AGENT_METRICS_PORT},  # InPlace: the agents' restart counts
                    ]
                },
            ],
        },
    }


def build_podgroup(job: JobRef, name: str, size: int, attempt: int) -> dict[str, Any]:
    return gang.build_podgroup(owner_reference(job), job_labels(job.name), job.namespace, name, size, attempt)


def build_lighthouse_pod(job: JobRef, spec: JobSpec) -> dict[str, Any]:
    return replica_groups.build_lighthouse_pod(
        job.name, job.namespace, spec, job_labels(job.name), owner_reference(job)
    )


def worker_labels(job: str, index: int, attempt: int) -> dict[str, str]:
    return {
        **job_labels(job),
        api.LABEL_COMPONENT: "worker",
        api.LABEL_REPLICA_INDEX: str(index),
        api.LABEL_ATTEMPT: str(attempt),
    }


def build_worker_pod(
    job: JobRef,
    spec: JobSpec,
    *,
    index: int,
    attempt: int,
    restarts: int,
    size: int | None = None,
    podgroup: str | None = None,
    name: str | None = None,
    host_pod: str | None = None,
) -> dict[str, Any]:
    """`name`: the pod's name and hostname (pod_names.py), `<job>-worker-<index>` by default; `host_pod`: the
    hostname of the group's pod 0, the rendezvous endpoint (this pod's own name for pod 0)."""
    template = copy.deepcopy(spec.template)
    meta = template.get("metadata") or {}
    pod_spec = template.get("spec") or {}
    name = name or api.worker_name(job.name, index)
    if index == 0:
        host_pod = name
    pod_spec["restartPolicy"] = "Never"
    pod_spec["hostname"] = name
    pod_spec["subdomain"] = job.name
    # Trainers need no API access; a user who wants it says so in the template.
    pod_spec.setdefault("automountServiceAccountToken", False)
    # SIGTERM -> torchrun -> every rank stops at its next step -> rank 0 saves: this is the time that chain gets.
    pod_spec["terminationGracePeriodSeconds"] = spec.grace_seconds
    if podgroup is not None:
        pod_spec["schedulingGroup"] = {"podGroupName": podgroup}
    container = trainer_container(pod_spec.get("containers", []))
    if container is not None:
        _shape_trainer(
            container, job, spec, index=index, attempt=attempt, restarts=restarts, size=size, host_pod=host_pod
        )
        _add_shared_memory(pod_spec, container, spec.shm_size)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            # The operator's labels win over the template's: they are how pods are found and counted.
            "labels": {
                **(meta.get("labels") or {}),
                **worker_labels(job.name, index, attempt),
                api.LABEL_REPLICAS: str(size if size is not None else spec.replicas),
            },
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(job)],
            "finalizers": [
                *(f for f in meta.get("finalizers") or [] if f != api.TRACKING_FINALIZER),
                api.TRACKING_FINALIZER,
            ],
        },
        "spec": pod_spec,
    }


def _shape_trainer(
    container: dict,
    job: JobRef,
    spec: JobSpec,
    *,
    index: int,
    attempt: int,
    restarts: int,
    size: int | None,
    host_pod: str | None,
):
    owned = rendezvous_env(
        job=job.name,
        namespace=job.namespace,
        job_uid=job.uid,
        spec=spec,
        index=index,
        attempt=attempt,
        restarts=restarts,
        size=size,
        host_pod=host_pod,
    )
    container["env"] = merge_env(container.get("env") or [], owned, overridable_defaults(spec))
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    resources = container.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    requests = resources.setdefault("requests", {})
    if spec.gpus_per_replica is not None:
        if spec.gpus_per_replica > 0:
            limits[api.GPU_RESOURCE] = requests[api.GPU_RESOURCE] = str(spec.gpus_per_replica)
        else:
            limits.pop(api.GPU_RESOURCE, None)
            requests.pop(api.GPU_RESOURCE, None)
    elif api.GPU_RESOURCE in limits:
        # Extended resources must have request == limit; mirroring avoids a rejected pod.
        requests[api.GPU_RESOURCE] = str(limits[api.GPU_RESOURCE])
    for key in ("limits", "requests"):
        if not resources[key]:
            del resources[key]
    ports = container.setdefault("ports", [])
    if not any(
        p.get("name") == api.RENDEZVOUS_PORT_NAME or p.get("containerPort") == spec.rendezvous.port for p in ports
    ):
        ports.append({"name": api.RENDEZVOUS_PORT_NAME, "containerPort": spec.rendezvous.port, "protocol": "TCP"})
    if any(p.get("name") == api.METRICS_PORT_NAME for p in ports) and "readinessProbe" not in container:
        container["readinessProbe"] = copy.deepcopy(METRICS_READINESS_PROBE)


# The kubelet asks the trainer's metrics port from the node: a stopped or deadlocked rank 0 stops answering, and the
# container turns not ready. Hang detection reads that as the evidence the operator's own silence is not
# (no_progress.py): a worker 0 the operator cannot reach but the kubelet can is alive. A template's own probe wins.
METRICS_READINESS_PROBE = {
    "httpGet": {"path": "/metrics", "port": api.METRICS_PORT_NAME},
    "periodSeconds": 10,
    "timeoutSeconds": 5,
    "failureThreshold": 3,
}


def _add_shared_memory(pod_spec: dict, container: dict, size: str) -> None:
    """A memory-backed /dev/shm of `size` for the trainer, unless the template brings its own (a mount at
    /dev/shm, or a volume of the same name) or the size is 0."""
    if _is_zero(size):
        return
    volumes = pod_spec.setdefault("volumes", [])
    mounts = container.get("volumeMounts") or []
    if any(v.get("name") == api.SHM_VOLUME for v in volumes) or any(
        (m.get("mountPath") or "").rstrip("/") == api.SHM_MOUNT_PATH for m in mounts
    ):
        return
    volumes.append({"name": api.SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}})
    container["volumeMounts"] = [*mounts, {"name": api.SHM_VOLUME, "mountPath": api.SHM_MOUNT_PATH}]


def _is_zero(quantity: str) -> bool:
    number = quantity.strip().rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    try:
        return float(number) == 0
    except ValueError:
        return False
