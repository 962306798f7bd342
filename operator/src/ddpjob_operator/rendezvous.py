"""torchrun's environment for one worker of one attempt (README: "Injected env")."""

from __future__ import annotations

from typing import Any

from . import api
from .spec import JobSpec

# A finite collective timeout turns a hung rank into a failed pod, which the operator can restart.
COLLECTIVE_TIMEOUT_SECONDS = 300

# Safe NCCL defaults a user may override in the template (the user's explicit value wins).
OVERRIDABLE_DEFAULTS = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    # Flight recorder: torch >= 2.7 reads TORCH_FR_*, older images (2.5) the TORCH_NCCL_* names. Torch looks up
    # the new name first, so setting both warns nowhere and works on either side of the rename.
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_FR_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
}


def nnodes(spec: JobSpec, size: int | None = None) -> str:
    """The attempt's size, fixed: the operator decides an elastic job's size per attempt (capacity.py), so
    torchrun forms the group as soon as that many nodes joined, instead of waiting out its last call for more."""
    return str(size if size is not None else spec.replicas)


def rendezvous_host(job: str, namespace: str) -> str:
    return f"{api.worker_name(job, 0)}.{job}.{namespace}.svc"


def rendezvous_id(job_uid: str, attempt: int) -> str:
    """Unique per attempt, so a new attempt never joins the c10d store of the previous one."""
    return f"{job_uid}-{attempt}"


def rendezvous_env(
    *,
    job: str,
    namespace: str,
    job_uid: str,
    spec: JobSpec,
    index: int,
    attempt: int,
    restarts: int,
    size: int | None = None,
) -> list[dict]:
    """The variables the operator owns, in a stable order (a pod's env is compared by tests and humans)."""
    host = rendezvous_host(job, namespace)
    port = spec.rendezvous.port
    conf = (
        f"is_host={'true' if index == 0 else 'false'},join_timeout={spec.rendezvous.join_timeout_seconds},"
        f"last_call_timeout={spec.rendezvous.last_call_timeout_seconds}"
    )
    plain = {
        "PET_NNODES": nnodes(spec, size),
        "PET_NPROC_PER_NODE": str(spec.procs_per_pod),
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"{host}:{port}",
        "PET_RDZV_ID": rendezvous_id(job_uid, attempt),
        "PET_RDZV_CONF": conf,
        "PET_MAX_RESTARTS": str(spec.elastic.max_restarts if spec.elastic else 0),
        "PET_NODE_RANK": str(index),
        "MASTER_ADDR": host,
        "MASTER_PORT": str(port),
        "TORCHELASTIC_ERROR_FILE": api.TERMINATION_LOG,
        "DDPJOB_NAME": job,
        "DDPJOB_NAMESPACE": namespace,
        "DDPJOB_ATTEMPT": str(attempt),
        "DDPJOB_REPLICA_INDEX": str(index),
        "DDPJOB_RESTARTS": str(restarts),
        "DDPJOB_COLLECTIVE_TIMEOUT_SECONDS": str(COLLECTIVE_TIMEOUT_SECONDS),
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain.items()]
    env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return env


def merge_env(user_env: list[dict], owned: list[dict]) -> list[dict]:
    """User variables first (minus any the operator owns), then the operator's, then defaults the user left unset."""
    owned_names = {e["name"] for e in owned}
    kept = [e for e in user_env if e.get("name") not in owned_names]
    user_names = {e.get("name") for e in kept}
    defaults = [{"name": k, "value": v} for k, v in OVERRIDABLE_DEFAULTS.items() if k not in user_names]
    return kept + owned + defaults
