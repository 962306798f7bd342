"""faultTolerance.mode: TorchFT, torchft replica groups (pure).

Each worker pod is one replica group: its own torchrun group inside the pod (standalone, so no pod hosts a
rendezvous another pod needs), kept in step with the other groups by torchft's Manager, which asks the job's
Lighthouse for a quorum every step. A group that dies drops out of the quorum after the Lighthouse's heartbeat
timeout and the others train on; its pod is replaced alone, and the newcomer heals from a live peer (weights and
optimizer over the network, no checkpoint read).

The Lighthouse is one pod per job, `<job>-lighthouse`, reached through the job's headless Service (which selects
it too) at `<job>-lighthouse.<job>.<ns>.svc:<port>`. It runs from the trainer's image, which carries torchft
(`torchft_lighthouse`). It lives while the job may run: created with the workers, after Kueue's admission, and
deleted when the job is suspended or ends. One that ended is deleted and made again; the groups' Managers reach
the new one at their next quorum. It has no tracking finalizer: its end is no failure to count."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import api
from ..state import conditions as c
from ..state.plan import Observed, Plan
from ..state.spec import JobSpec, trainer_container
from ..state.status import JobStatus
from ..timefmt import parse_time
from . import failures, pod_rejection, termination
from .failures import Failure

COMPONENT = "lighthouse"
PORT_NAME = "lighthouse"
DEGRADED = "Degraded"
# A small CPU process (the quorum's membership and heartbeats), but torchft's `torchft_lighthouse` entry point is
# Python and imports torch first: about 620 MiB resident on the local node, measured. The bundled image's
# `ddp-lighthouse` (ddp_trainer/lighthouse.py) loads the Lighthouse's Rust extension alone: 12 MB, started in 0.02 s
# instead of 2.5 CPU-s. An image without it (a trainer of one's own with torchft) runs torchft's script, which the
# limit still has to hold.
# The CPU limit: one core starts torchft's script in about 2.5 s and is far more than the Lighthouse's own loop
# needs; namespaces with a LimitRange or quota that wants limits take the pod as it is.
# spec.faultTolerance.lighthouse.resources replaces them all (state/spec.py).
LIGHTHOUSE_RESOURCES = {"requests": {"cpu": "100m", "memory": "768Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
# Pod Security `restricted` for the Lighthouse's container, whatever the namespace enforces: it needs no privilege,
# no capability and no file of the image's user. runAsUser: the trainer's image may run as root (a user's own
# image), and runAsNonRoot alone would then keep the container from starting; 65532 is the distroless `nonroot`.
# Container-level settings win over the pod securityContext copied from the workers' template.
LIGHTHOUSE_USER = 65532
LIGHTHOUSE_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": LIGHTHOUSE_USER,
    "seccompProfile": {"type": "RuntimeDefault"},
}
LIGHTHOUSE_COMMAND = [
    "/bin/sh",
    "-c",
    'command -v ddp-lighthouse >/dev/null 2>&1 && exec ddp-lighthouse "$@"; exec torchft_lighthouse "$@"',
    "lighthouse",  # $0; the Lighthouse's options follow as $@ (args)
]


def lighthouse_name(job: str) -> str:
    return f"{job}-lighthouse"


def lighthouse_address(job: str, namespace: str, port: int) -> str:
    """What TORCHFT_LIGHTHOUSE holds: the pod's stable DNS name under the job's headless Service."""
    return f"http://{lighthouse_name(job)}.{job}.{namespace}.svc:{port}"


def min_replicas(spec: JobSpec) -> int:
    """The fewest groups that may train: elastic.minReplicas when set, else 1 (any survivor trains on)."""
    return spec.elastic.min_replicas if spec.elastic is not None else 1


def is_lighthouse(pod: dict[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get(api.LABEL_COMPONENT) == COMPONENT


def split(pods: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(workers, lighthouses) of one job's pods."""
    lighthouses = [p for p in pods if is_lighthouse(p)]
    return [p for p in pods if not is_lighthouse(p)], lighthouses


def replica_group_env(spec: JobSpec, *, job: str, namespace: str, index: int, size: int | None) -> dict[str, str]:
    """What torchft's Manager and the trainer read, for replica group `index` of `size`."""
    ft = spec.fault_tolerance
    return {
        "TORCHFT_LIGHTHOUSE": lighthouse_address(job, namespace, ft.lighthouse_port),
        "REPLICA_GROUP_ID": str(index),
        "NUM_REPLICA_GROUPS": str(size if size is not None else spec.replicas),
        "TORCHFT_MIN_REPLICAS": str(min_replicas(spec)),
        "TORCHFT_TIMEOUT_SEC": str(ft.timeout_seconds),
        "TORCHFT_QUORUM_TIMEOUT_SEC": str(ft.quorum_timeout_seconds),
        "TORCHFT_CONNECT_TIMEOUT_SEC": str(ft.timeout_seconds),
    }


def lighthouse_args(spec: JobSpec) -> list[str]:
    ft = spec.fault_tolerance
    return [
        # The pod's own address, not [::]: on the local node every pod shares the machine's network.
        f"--bind=$(POD_IP):{ft.lighthouse_port}",
        f"--min_replicas={min_replicas(spec)}",
        f"--join_timeout_ms={ft.join_timeout_ms}",
        f"--quorum_tick_ms={ft.quorum_tick_ms}",
        f"--heartbeat_timeout_ms={ft.heartbeat_timeout_ms}",
    ]


def build_lighthouse_pod(
    job_name: str, namespace: str, spec: JobSpec, labels: dict[str, str], owner: dict[str, Any]
) -> dict[str, Any]:
    """The job's Lighthouse: the trainer's image, node selection and pull secrets, none of its GPUs."""
    pod_spec = (spec.template.get("spec") or {}) if spec.template else {}
    trainer = trainer_container(pod_spec.get("containers", [])) or {}
    kept = {
        k: copy.deepcopy(pod_spec[k])
        for k in ("nodeSelector", "tolerations", "imagePullSecrets", "priorityClassName", "securityContext")
        if k in pod_spec
    }
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": trainer.get("image", ""),
        "command": LIGHTHOUSE_COMMAND,
        "args": lighthouse_args(spec),
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            # torchft's Lighthouse logs at info several lines a step, each naming every group (faultTolerance.
            # lighthouse.logLevel; the groups log each quorum change themselves).
            {"name": "RUST_LOG", "value": spec.fault_tolerance.lighthouse_log_level},
        ],
        "ports": [{"name": PORT_NAME, "containerPort": spec.fault_tolerance.lighthouse_port, "protocol": "TCP"}],
        "resources": copy.deepcopy(spec.fault_tolerance.lighthouse_resources or LIGHTHOUSE_RESOURCES),
        "securityContext": copy.deepcopy(LIGHTHOUSE_SECURITY_CONTEXT),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if "imagePullPolicy" in trainer:
        container["imagePullPolicy"] = trainer["imagePullPolicy"]
    ft = spec.fault_tolerance
    if ft.lighthouse_node_selector is not None:
        kept["nodeSelector"] = copy.deepcopy(ft.lighthouse_node_selector)
    if ft.lighthouse_tolerations is not None:
        kept["tolerations"] = copy.deepcopy(ft.lighthouse_tolerations)
    name = lighthouse_name(job_name)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, api.LABEL_COMPONENT: COMPONENT},
            "ownerReferences": [owner],
        },
        "spec": {
            **kept,
            "restartPolicy": "Never",
            "hostname": name,
            "subdomain": job_name,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            "affinity": away_from_workers(job_name),
        },
    }


def away_from_workers(job_name: str) -> dict[str, Any]:
    """The Lighthouse prefers a node without this job's workers: a lost worker node then costs one replica group,
    not the quorum every group needs. Preferred only: on a cluster where every node holds a worker it still runs."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {api.LABEL_JOB_NAME: job_name, api.LABEL_COMPONENT: "worker"}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


@dataclass(frozen=True)
class LighthousePlan:
    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    force_delete: list[str] = field(default_factory=list)
    # On a lost node that may still run it: (name, seconds until a force-delete may be safe, why).
    held: list[tuple[str, float, str]] = field(default_factory=list)


def plan_lighthouse(
    wanted: bool,
    lighthouses: list[dict[str, Any]],
    build: Callable[[], dict[str, Any]],
    lost: Callable[[dict], bool],
    may_force: Callable[[dict], tuple[bool, float, str]] | None = None,
) -> LighthousePlan:
    """Exactly one live Lighthouse while `wanted`, none otherwise. `build()` makes the manifest; `lost(pod)`: its
    node is gone or NotReady past the node grace. One that ended is deleted and its successor comes once it is gone
    (its name is the DNS name the groups know). One on a lost node is force-deleted once `may_force(pod)` says
    nothing can still run it (termination.force_delete_rule, the workers' rule: the node gone or tainted
    out-of-service, or NotReady for unreachable_force_delete_seconds); until then it is deleted and held: its
    process may still answer the groups that reach it, and a second Lighthouse under its name would make a second
    quorum. (True, 0, "") for every pod without `may_force`."""
    live = [p for p in lighthouses if not p["metadata"].get("deletionTimestamp")]
    if not wanted:
        return LighthousePlan(delete=[p["metadata"]["name"] for p in live])
    stranded = [p for p in lighthouses if lost(p)]
    if stranded:
        force, delete, held = [], [], []
        for pod in stranded:
            name = pod["metadata"]["name"]
            safe, left, why = may_force(pod) if may_force is not None else (True, 0.0, "")
            if safe:
                force.append(name)
                continue
            held.append((name, left, why))
            if not pod["metadata"].get("deletionTimestamp"):
                delete.append(name)
        return LighthousePlan(force_delete=force, delete=delete, held=held)
    ended = [p for p in live if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
    if ended:
        return LighthousePlan(delete=[p["metadata"]["name"] for p in ended])
    if lighthouses:
        return LighthousePlan()  # running, starting, or the old one still going away
    return LighthousePlan(create=[build()])


def _lost(obs: Observed, grace_seconds: float) -> Callable[[dict], bool]:
    return lambda pod: failures.node_lost(pod, obs.nodes, obs.now, grace_seconds)


def _may_force(obs: Observed, unreachable_seconds: float) -> Callable[[dict], tuple[bool, float, str]]:
    """termination.force_delete_rule for a Lighthouse found on a lost node: (safe now, seconds left, the wait said)."""

    def judge(pod: dict[str, Any]) -> tuple[bool, float, str]:
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        safe, left, _ = termination.force_delete_rule(pod, obs.nodes.get(node_name), obs.now, unreachable_seconds)
        down = unreachable_seconds - left
        why = (
            f"the Lighthouse pod {pod['metadata']['name']} is on node {node_name}, NotReady for {down:.0f}s: deleted; "
            f"force-deleted once the node is gone or tainted {termination.OUT_OF_SERVICE_TAINT}, or after "
            f"{unreachable_seconds:g}s NotReady (its process may still run there)"
        )
        return safe is True, left, why

    return judge


def reconnects_to_a_new_lighthouse(status: JobStatus) -> bool:
    """Whether this attempt's replica groups go on with a Lighthouse made again: the bundled trainer's do (a refused
    quorum call is asked again on a new connection; a connection to an address the Lighthouse's name no longer
    gives, one gone silent with its node, is shut down; a quorum its process group was not built for is built
    again: docs/trainer.md, "When the Lighthouse is replaced"). Told by what it declares, the capability
    api.LIGHTHOUSE_RECONNECT (status.progress.lighthouseReconnect, this attempt's), not by a series every TorchFT
    trainer may serve. A trainer that does not declare it, or none read yet: no."""
    progress = status.get("progress") or {}
    return progress.get("attempt") == status.get("attempt") and progress.get("lighthouseReconnect") is True


def lighthouse_failures(obs: Observed, spec: JobSpec, status: JobStatus, grace_seconds: float) -> list[Failure]:
    """The Running job's Lighthouse is gone: a failure of the whole group, recreated from the newest checkpoint with
    a new Lighthouse, unless its groups reconnect to a new one (reconnects_to_a_new_lighthouse): those train on with
    the one lighthouse_step makes again, and nothing fails. Others cannot: one that ended or was deleted refuses
    their quorum calls until their quorum timeout, and one on a lost node goes silent and holds them to it (measured,
    docs/fault-tolerance.md), so their group is recreated."""
    if not spec.fault_tolerance.torchft or status.get("phase") != c.RUNNING or reconnects_to_a_new_lighthouse(status):
        return []
    lost = _lost(obs, grace_seconds)
    for pod in obs.lighthouses:
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase")
        if lost(pod):
            message = f"the job's Lighthouse {name} lost its node: no replica group can form a quorum"
            return [Failure(pod=name, kind=failures.NODE_LOST, reason="LighthouseLost", at=obs.now, message=message)]
        if phase in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
            why = "was deleted" if pod["metadata"].get("deletionTimestamp") else f"ended ({phase})"
            message = f"the job's Lighthouse {name} {why}: no replica group can form a quorum"
            return [Failure(pod=name, kind=failures.DELETED, reason="LighthouseEnded", at=obs.now, message=message)]
    return []


def lighthouse_step(
    obs: Observed,
    spec: JobSpec,
    status: JobStatus,
    plan: Plan,
    build: Callable[[], dict[str, Any]],
    grace_seconds: float,
    unreachable_force_delete_seconds: float = termination.DEFAULT_UNREACHABLE_FORCE_DELETE_SECONDS,
) -> None:
    """The planner's Lighthouse step, after the others: it lives while the job's workers may run (it is made with
    the first workers, so after Kueue's admission), and goes when the job is suspended or ends. A Lighthouse on a
    lost node is force-deleted by the workers' rule (plan_lighthouse; PlannerSettings'
    unreachable_force_delete_seconds)."""
    phase = status.get("phase")
    written = ((obs.job.get("status") or {}).get("phase"), phase)
    stopping = [c.is_terminal(p) or p == c.SUSPENDED for p in written]
    if spec.fault_tolerance.torchft and any(stopping) and not all(stopping):
        # The job ends (or is suspended) in this pass: its Lighthouse goes once that status is written. Deleted
        # first, a failed write left a Running job whose Lighthouse was gone, and the next pass failed it (found by
        # the simulation, tests/sim).
        return
    wanted = (
        spec.fault_tolerance.torchft
        and not c.is_terminal(phase)
        and phase != c.SUSPENDED
        and bool(plan.create_pods or obs.pods)
    )
    decided = plan_lighthouse(
        wanted, obs.lighthouses, build, _lost(obs, grace_seconds), _may_force(obs, unreachable_force_delete_seconds)
    )
    for name, left, said in decided.held:
        plan.requeue(left)  # the force-delete may be safe by then
        if name in decided.delete:  # said once, with the deletion that starts the wait
            plan.event("Warning", "LighthouseLost", said)
    held = {name for name, _, _ in decided.held}
    if decided.create and _held_back(obs, status, plan):
        decided = dataclasses.replace(decided, create=[])
    plan.create_pods[:0] = decided.create  # before the workers: their Managers ask it for a quorum first thing
    plan.delete_pods += [name for name in decided.delete if name not in plan.delete_pods]
    plan.force_delete_pods += [name for name in decided.force_delete if name not in plan.force_delete_pods]
    if decided.create and obs.pods:
        name = lighthouse_name(obs.job["metadata"]["name"])
        plan.event("Normal", "LighthouseCreated", f"created the Lighthouse pod {name} again")
    follows = wanted and phase == c.RUNNING and reconnects_to_a_new_lighthouse(status)
    for name in decided.force_delete:
        plan.event(
            "Warning",
            "LighthouseLost",
            f"the Lighthouse pod {name} is on a lost node: force-deleted, made again"
            + ("; the replica groups follow its name to the new one and train on" if follows else ""),
        )
    if follows:
        ended = [
            p for p in obs.lighthouses if p["metadata"]["name"] in decided.delete and p["metadata"]["name"] not in held
        ]
        for pod in ended:
            why = (pod.get("status") or {}).get("phase")
            plan.event(
                "Warning",
                "LighthouseEnded",
                f"the Lighthouse pod {pod['metadata']['name']} ended ({why}): made again; the replica groups ask the "
                "new one for their quorum and train on",
            )


def _held_back(obs: Observed, status: JobStatus, plan: Plan) -> bool:
    """The API server refused the Lighthouse's creation (Pod Security, a quota, a webhook): as for a refused worker
    (pod_rejection.py), PodsCreated=False with its words, a Warning event once per change, and the next try
    RETRY_SECONDS after the refusal instead of at once, for ever. An invalid one (400, 422) has failed the job
    already, in the planner's refusal step. True while the creation waits."""
    refusal = pod_rejection.current_refusal(obs, status)
    if refusal is None or refusal.pod != lighthouse_name(obs.job["metadata"]["name"]):
        return False
    # The workers' step marks PodsCreated True once every worker exists; the Lighthouse is one of the job's pods too:
    # its refusal, as the last pass wrote it, stands (same transition time, no second event).
    written = c.find_condition((obs.job.get("status") or {}).get("conditions") or [], pod_rejection.CREATED_CONDITION)
    if written is not None and written.get("status") == "False":
        status["conditions"] = [
            copy.deepcopy(written) if x.get("type") == pod_rejection.CREATED_CONDITION else x
            for x in status.get("conditions") or []
        ]
    wait = pod_rejection.plan_retry(obs, status, refusal, plan)
    if wait > 0:
        plan.requeue(wait)
        return True
    return False


def rejoined(spec: JobSpec, status: JobStatus, scraped: dict[str, Any] | None, has_metrics: bool) -> bool:
    """TorchFT: the replaced groups are back in the quorum, so the recovery is over. A running replacement is not
    enough: it still starts its process and heals from a peer. Worker 0's own count says when (a scrape read after
    the failure); a trainer that serves no metrics port, or no ddp_trainer_replica_groups on it, has only its pods'
    word."""
    if not spec.fault_tolerance.torchft or not has_metrics:
        return True
    scraped = scraped or {}
    if scraped and "replicaGroups" not in scraped:
        return True  # a trainer of its own (report()) that does not count the groups: its pods' word, then
    entries = status.get("recoveries") or []
    failed_at = parse_time(entries[-1].get("time")) if entries else None
    read_at = parse_time(scraped.get("updateTime"))
    if read_at is None or (failed_at is not None and read_at <= failed_at):
        return False
    return int(scraped.get("replicaGroups", 0)) >= status["replicas"]


def show_degraded(status: JobStatus, spec: JobSpec, running: int, now: datetime) -> None:
    """SIZE says how many groups train now (not those being replaced, until they are back in the quorum); Degraded
    is True while fewer than desired do (and only appears once a group was missing)."""
    if not spec.fault_tolerance.torchft:
        return
    replicas = status["replicas"]
    running = min(running, replicas - len(status.get("replacing") or {}))
    conditions = status.get("conditions") or []
    if running < replicas:
        message = (
            f"{running} of {replicas} replica groups train; the missing ones are being replaced and heal from a peer"
        )
        status["conditions"] = c.set_condition(conditions, DEGRADED, "True", "ReplicaGroupsMissing", message, now)
    else:
        message = f"all {replicas} replica groups train"
        status["conditions"] = c.clear_condition(conditions, DEGRADED, "AllReplicaGroups", message, now)
    status["sizeText"] = f"{running}/{status.get('desiredReplicas', replicas)}"
