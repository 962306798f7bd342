"""torchrun's environment for one worker of one attempt (README: "Injected env")."""

from __future__ import annotations

from typing import Any

from .. import api
from ..recovery.replica_groups import replica_group_env
from ..state.spec import IN_PLACE, JobSpec

# A finite collective timeout turns a hung rank into a failed pod, which the operator can restart. It must outlast
# a checkpoint: while rank 0 writes one, the other ranks wait in the next collective. A checkpoint that fits the
# pod's grace period (the time the job is given to save on SIGTERM) always fits this, see collective_timeout().
COLLECTIVE_TIMEOUT_SECONDS = 300
# torchrun passes the kubelet's SIGTERM on to its workers and SIGKILLs them after TORCH_ELASTIC_SHUTDOWN_TIMEOUT
# (30 s unless set). It is set to the grace period less this margin, so the ranks get nearly all of the grace to
# save, and torchrun still ends them and exits with its own report before the kubelet's SIGKILL.
SHUTDOWN_MARGIN_SECONDS = 10

# Defaults a user may override in the template's env (the user's explicit value wins). NCCL_SOCKET_IFNAME is left
# out on purpose: NCCL picks the interface itself, and a wrong guess here would break every multi-node job.
OVERRIDABLE_DEFAULTS = {
    # 3 (torch's own default since 2.2): on a failed or timed-out collective the process tears itself down without
    # aborting the communicator (an abort can hang on a broken NIC); the pod fails and the group restarts. Set it
    # here so the behaviour does not depend on the image's torch.
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    # Flight recorder: torch >= 2.7 reads TORCH_FR_*, older images (2.5) the TORCH_NCCL_* names. Torch looks up
    # the new name first, so setting both warns nowhere and works on either side of the rename.
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_FR_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
}


def shutdown_timeout(spec: JobSpec) -> int:
    """torchrun's SIGTERM-to-SIGKILL window for its workers, inside the kubelet's grace period."""
    return max(1, spec.grace_seconds - SHUTDOWN_MARGIN_SECONDS)


def collective_timeout(spec: JobSpec) -> int:
    """At least COLLECTIVE_TIMEOUT_SECONDS, and never shorter than the grace period, the job's declared time to
    write a checkpoint: a longer grace means a bigger checkpoint that the waiting ranks must sit out."""
    return max(COLLECTIVE_TIMEOUT_SECONDS, spec.grace_seconds)


# InPlace: torchrun's agents share one TCPStore with their workers across every group they form, and the keys of a
# group that died (its gloo and NCCL addresses) are still there when the next one forms: ranks then connect to
# ports nobody listens on ("Gloo connectFullMesh failed ... Connection refused"), and prefixing by
# TORCHELASTIC_RESTART_COUNT does not help, since an agent restarted for a peer's sake does not count. torch's own
# opt-out gives each group a store of its own, hosted by its rank 0.
# A node gone silent (no reset reaches its peers) would hold the survivors in a collective until its timeout
# (collective_timeout, 300 s): the bundled trainer's peer watch (ddp_trainer/peer_watch.py) leaves the group after
# this long without the next node's heartbeat, and torchrun forms it again without the node. It must exceed the
# controller-manager's --node-monitor-grace-period (50 s by default), so that the node is NotReady first and the
# survivors' restart is taken for the node's loss (node_grace.py), never the trainer's.
PEER_TIMEOUT_SECONDS = 60
IN_PLACE_DEFAULTS = {
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    "DDP_TRAINER_PEER_TIMEOUT_SECONDS": str(PEER_TIMEOUT_SECONDS),
}


def overridable_defaults(spec: JobSpec) -> dict[str, str]:
    # A TorchFT group is a standalone torchrun of its own: no rendezvous store to share, no peer pod to watch.
    in_place = (
        IN_PLACE_DEFAULTS if spec.run_policy.restart_strategy == IN_PLACE and not spec.fault_tolerance.torchft else {}
    )
    return {**OVERRIDABLE_DEFAULTS, **in_place, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(shutdown_timeout(spec))}


def nnodes(spec: JobSpec, size: int | None = None) -> str:
    """The attempt's size, fixed: the operator decides an elastic job's size per attempt (capacity.py), so
    torchrun forms the group as soon as that many nodes joined, instead of waiting out its last call for more.
    InPlace elastic: minReplicas to that size."""
    size = size if size is not None else spec.replicas
    if spec.elastic is not None and spec.run_policy.restart_strategy == IN_PLACE and spec.elastic.min_replicas < size:
        # InPlace replaces a lost pod alone (replace_pod.py): the survivors form a group without it meanwhile.
        return f"{spec.elastic.min_replicas}:{size}"
    return str(size)


# restartStrategy InPlace re-forms the group in the running pods after a loss, in torchrun's rendezvous: a dead node
# stays a participant until its keep-alive expires (torchrun's default: every 5 s, dead after 3 missed, 15 s), and a
# new round opens only once every participant of the last one has left; then the survivors, at least minReplicas,
# wait the last call for more. Both were most of InPlace's stall on a lost node (bench/recovery_modes.py).
# bench/rendezvous_keepalive.py measured the margins (docs/fault-tolerance.md): a living agent's heartbeat was never
# older than 2.1 s (1 s beats, 8 busy processes beside 3 trainers on 2 cores), and a living agent taken for dead
# while the group trains costs nothing (it only leaves the participants: no re-form, no restart). Every living
# agent waits in the next round before it opens, so a last call of 2 s still took each one in under that load.
# The keep-alive stays 2 s x 3 all the same: with 1 s x 3 (dead after 3 s) a full `make test` once saw a group's
# first rendezvous split (one agent waited 60 s for a peer's rank information that never came, and the whole group
# restarted), where 6 s had never split one in the many runs before. The group's formation, while the pods import
# torch, is the busiest moment for the agents and the one the bench does not measure.
IN_PLACE_KEEP_ALIVE = (2, 3)  # keep_alive_interval seconds, keep_alive_max_attempt: dead after 6 s
LAST_CALL_SECONDS = 30  # torchrun's own default: the wait for late pods once minReplicas have joined...
IN_PLACE_LAST_CALL_SECONDS = 2  # ...and InPlace's after a loss, whose pods are all running when its group re-forms


def last_call_seconds(spec: JobSpec) -> int:
    """The last call of an attempt's first formation (PET_RDZV_CONF): rendezvous.lastCallTimeoutSeconds when set,
    else torchrun's 30 s, whatever the restart strategy. The pods are still starting then (pulling, importing torch)
    and an elastic group that formed without a late one would let its join restart the group, charged to the
    trainer; a group whose pods all joined forms at once and waits nothing."""
    if spec.rendezvous.last_call_timeout_seconds is not None:
        return spec.rendezvous.last_call_timeout_seconds
    return LAST_CALL_SECONDS


def last_call_after_loss_seconds(spec: JobSpec) -> int | None:
    """InPlace: the last call of every later round of an agent (a re-form after a loss, every survivor running, a
    replacement joining later as a membership change), so waiting for one that is not coming is only stall:
    IN_PLACE_LAST_CALL_SECONDS, or the user's lastCallTimeoutSeconds when shorter. torchrun reads one last call for
    all rounds; the image's wrapper (ddp_trainer.torchrun) switches to this one after the first round. An image
    without the wrapper waits the first formation's every time: slower re-forms, never a split first formation.
    None under Recreate, whose every formation is an attempt's first."""
    if spec.run_policy.restart_strategy != IN_PLACE:
        return None
    return min(IN_PLACE_LAST_CALL_SECONDS, last_call_seconds(spec))


# InPlace: torchrun's --max-restarts, fixed when the pod is made, while the job's budgets (backoffLimit,
# platformFailureLimit) start over after each healthy runPolicy.healthyResetSeconds (in_place.py counts them from
# every pod's agent and fails the job once one is spent). Within one budget window an agent sees at most
# backoffLimit + platformFailureLimit + 1 events (one more fails the job), but a pod may live through any number of
# windows: every limit made from the budget binds first, sooner or later (after 24 events with the defaults). So
# the limit is one no agent reaches: every restart starts the workers again (seconds at least), and at one a
# second 2**31 - 1 of them take 68 years; test_torchrun_restart_limit.py checks ten years of windows of a
# generous budget. The operator's count (in_place.py, from every pod's agent and worker 0's metrics) is the only
# decider: an image whose agent and trainer serve no count is not bounded by torchrun either.
TORCHRUN_MAX_RESTARTS = 2**31 - 1


def max_restarts(spec: JobSpec, restarts: int) -> int:
    """torchrun's --max-restarts. InPlace: TORCHRUN_MAX_RESTARTS, whatever the budget left when the pod is made
    (`restarts`): an agent counts every failure of its own workers, a peer pod's loss (an eviction, a deleted pod, a
    lost node) fails them too, and the job's budgets start over after a healthy hour, so any smaller limit would end
    a pod the job's budgets allow. Recreate: elastic.maxRestarts (deprecated), else 0: any failed process ends its
    pod."""
    if spec.run_policy.restart_strategy == IN_PLACE:
        return TORCHRUN_MAX_RESTARTS
    return spec.elastic.max_restarts if spec.elastic else 0


def rendezvous_host(job: str, namespace: str, host_pod: str | None = None) -> str:
    """The DNS name of the group's pod 0: its hostname (pod_names.py: `<job>-worker-0` unless an old pod on a lost
    node still holds that) under the job's headless Service."""
    return f"{host_pod or api.worker_name(job, 0)}.{job}.{namespace}.svc"


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
    host_pod: str | None = None,
) -> list[dict]:
    """The variables the operator owns, in a stable order (a pod's env is compared by tests and humans)."""
    if spec.fault_tolerance.torchft:
        return _replica_group_env(
            job=job, namespace=namespace, spec=spec, index=index, attempt=attempt, restarts=restarts, size=size
        )
    host = rendezvous_host(job, namespace, host_pod)
    port = spec.rendezvous.port
    conf = (
        f"is_host={'true' if index == 0 else 'false'},join_timeout={spec.rendezvous.join_timeout_seconds},"
        f"last_call_timeout={last_call_seconds(spec)}"
    )
    if spec.run_policy.restart_strategy == IN_PLACE:
        conf += f",keep_alive_interval={IN_PLACE_KEEP_ALIVE[0]},keep_alive_max_attempt={IN_PLACE_KEEP_ALIVE[1]}"
    plain = {
        "PET_NNODES": nnodes(spec, size),
        "PET_NPROC_PER_NODE": str(spec.procs_per_pod),
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"{host}:{port}",
        "PET_RDZV_ID": rendezvous_id(job_uid, attempt),
        "PET_RDZV_CONF": conf,
        "PET_MAX_RESTARTS": str(max_restarts(spec, restarts)),
        "PET_NODE_RANK": str(index),
        "MASTER_ADDR": host,
        "MASTER_PORT": str(port),
        **_job_env(job, namespace, spec, index, attempt, restarts),
    }
    after_loss = last_call_after_loss_seconds(spec)
    if after_loss is not None:
        plain[api.RDZV_LAST_CALL_AFTER_LOSS_ENV] = str(after_loss)
    if spec.run_policy.restart_strategy == IN_PLACE:
        plain[api.AGENT_METRICS_PORT_ENV] = str(api.AGENT_METRICS_PORT)  # in_place.py reads every pod's agent
    return _with_pod_ip(plain)


def _job_env(job: str, namespace: str, spec: JobSpec, index: int, attempt: int, restarts: int) -> dict[str, str]:
    return {
        "TORCHELASTIC_ERROR_FILE": api.TERMINATION_LOG,
        "DDPJOB_NAME": job,
        "DDPJOB_NAMESPACE": namespace,
        "DDPJOB_ATTEMPT": str(attempt),
        "DDPJOB_REPLICA_INDEX": str(index),
        "DDPJOB_RESTARTS": str(restarts),
        "DDPJOB_COLLECTIVE_TIMEOUT_SECONDS": str(collective_timeout(spec)),
    }


def _with_pod_ip(plain: dict[str, str]) -> list[dict]:
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain.items()]
    env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return env


def _replica_group_env(
    *, job: str, namespace: str, spec: JobSpec, index: int, attempt: int, restarts: int, size: int | None
) -> list[dict]:
    """TorchFT: each pod is a replica group of its own, a standalone torchrun group (no pod waits on another's
    rendezvous), kept in step with the others by the Lighthouse (replica_groups.py). Under Recreate a failed process
    ends its pod (no torchrun restarts): the pod is replaced alone and heals from a peer. Under InPlace the pod's
    agent starts its processes again (torchrun restarts, the same limit as InPlace's: max_restarts) and they heal
    from a peer, no pod replaced; the operator counts the restarts from every pod's agent (in_place.py)."""
    in_place = spec.run_policy.restart_strategy == IN_PLACE
    plain = {
        "PET_NNODES": "1",
        "PET_NPROC_PER_NODE": str(spec.procs_per_pod),
        "PET_STANDALONE": "1",
        "PET_MAX_RESTARTS": str(max_restarts(spec, restarts)) if in_place else "0",
        **replica_group_env(spec, job=job, namespace=namespace, index=index, size=size),
        **_job_env(job, namespace, spec, index, attempt, restarts),
    }
    if in_place:
        plain[api.AGENT_METRICS_PORT_ENV] = str(api.AGENT_METRICS_PORT)
    return _with_pod_ip(plain)


def merge_env(user_env: list[dict], owned: list[dict], defaults: dict[str, str] | None = None) -> list[dict]:
    """User variables first (minus any the operator owns), then the operator's, then defaults the user left unset
    (OVERRIDABLE_DEFAULTS unless given)."""
    owned_names = {e["name"] for e in owned}
    kept = [e for e in user_env if e.get("name") not in owned_names]
    user_names = {e.get("name") for e in kept}
    wanted = OVERRIDABLE_DEFAULTS if defaults is None else defaults
    defaults_left = [{"name": k, "value": v} for k, v in wanted.items() if k not in user_names]
    return kept + owned + defaults_left
