"""A model of the cluster around the real planner (docs/simulation.md).

The decision code runs unchanged: every `reconcile` event builds an Observed from the model and calls
`planner.plan_reconcile`, then applies its Plan as controller/applier.py does (deletions, finalizer releases,
Workloads, creations, then the status write with its resourceVersion precondition, then events). Everything else
is a model: the API objects, the kubelets and nodes, the trainer processes and their torchrun agents, the scrape
that reads the agents' counters late or not at all, Kueue, the clock, and the operator process itself (killed
between two writes, restarted with nothing in memory).

An event is a plain tuple, so a failing sequence prints as a table row and replays exactly. Every fault records an
incident with its class in `World.truth`, the ground truth the invariants hold the operator's accounting to."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ddpjob_operator import api
from ddpjob_operator.admission import kueue
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.recovery import replica_groups
from ddpjob_operator.state.plan import Observed, Plan, PodRefusal, View
from ddpjob_operator.timefmt import format_time, parse_time

START = datetime(2026, 6, 1, 8, 0, 0, tzinfo=UTC)
NS, JOB, JOB_UID = "sim", "j", "job-uid"
QUEUE = "team"
FLAVORS = {"gpu": {"nodeLabels": {"pool": "gpu"}, "tolerations": []}}
TRAINER, PLATFORM = "Trainer", "Platform"
NODE_MONITOR_GRACE = 40  # kube-controller-manager's node-monitor-grace-period: a silent node's NotReady after it
MODES = ("Recreate", "InPlace", "TorchFT", "TorchFT+InPlace")


@dataclass(frozen=True)
class Config:
    """One simulated job and cluster."""

    mode: str = "InPlace"
    replicas: int = 3
    backoff_limit: int = 1
    platform_limit: int = 20
    kueue: bool = False
    spare_nodes: int = 2

    @property
    def in_place(self) -> bool:
        return self.mode in ("InPlace", "TorchFT+InPlace")

    @property
    def torchft(self) -> bool:
        return self.mode.startswith("TorchFT")

    def job(self) -> dict[str, Any]:
        run: dict[str, Any] = {
            "backoffLimit": self.backoff_limit,
            "platformFailureLimit": self.platform_limit,
            "healthyResetSeconds": 0,  # the truth counts every incident of the run: no reset to model
            "restartBackoffSeconds": 0,
        }
        spec: dict[str, Any] = {
            "replicas": self.replicas,
            "gpusPerReplica": 1,
            "restartPolicy": "OnFailure",
            "runPolicy": run,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "example.invalid/trainer:1"}]}},
        }
        if self.in_place:
            run["restartStrategy"] = "InPlace"
        if self.torchft:
            spec["faultTolerance"] = {"mode": "TorchFT"}
        meta: dict[str, Any] = {
            "name": JOB,
            "namespace": NS,
            "uid": JOB_UID,
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": format_time(START),
        }
        if self.kueue:
            meta["labels"] = {kueue.QUEUE_LABEL: QUEUE}
        return {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": meta, "spec": spec}


@dataclass
class Incident:
    kind: str  # the event that caused it
    klass: str  # TRAINER or PLATFORM
    at: datetime


@dataclass
class Truth:
    incidents: list[Incident] = field(default_factory=list)
    force_deleted_on_ready: list[str] = field(default_factory=list)
    deleted_current: list[str] = field(default_factory=list)  # pods of the live attempt the plan deleted
    workloads_replaced_while_running: list[str] = field(default_factory=list)
    agent_gave_up: list[str] = field(default_factory=list)  # a pod ended by torchrun's own limit
    plans: int = 0
    ended_at: datetime | None = None  # when the job's status first showed it terminal
    passes_since_end: int = 0

    def count(self, klass: str) -> int:
        return sum(1 for i in self.incidents if i.klass == klass)


class World:
    def __init__(self, config: Config, settings: PlannerSettings = PlannerSettings()):
        self.config = config
        self.settings = settings
        self.now = START
        self.job: dict[str, Any] | None = config.job()
        self.pods: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        for i in range(config.replicas + config.spare_nodes + 1):
            self._set_node(f"node-{i}", ready=True, since=START - timedelta(hours=1))
        self.agents: dict[str, int] = {}  # pod uid -> its torchrun agent's in-place restart count (the truth)
        self.silent: set[str] = set()  # pod uids whose agent does not answer (its node died or rebooted)
        self.reads: dict[str, int] = {}  # what the operator process has read of the agents (lost on restart)
        self.workloads: dict[str, dict[str, Any]] = {}
        self.refuse_creates = False
        self.refusal: PodRefusal | None = None
        self.crash_after: int | None = None  # the next pass dies after this many writes
        self.conflict = False  # the next pass's status write meets a 409
        self.events: list[tuple[str, str, str]] = []
        self.truth = Truth()
        self.uids = itertools.count(1)
        self.rv = itertools.count(2)
        self.history: list[tuple[Any, ...]] = []

    # --- model helpers ------------------------------------------------------------------------------------------
    def _set_node(self, name: str, ready: bool, since: datetime) -> None:
        self.nodes[name] = {
            "metadata": {"name": name, "labels": {"pool": "gpu"}},
            "status": {
                "allocatable": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                "lastTransitionTime": format_time(since)}],
            },
        }

    def node_ready(self, name: str | None) -> bool:
        node = self.nodes.get(name or "")
        return node is not None and node["status"]["conditions"][0]["status"] == "True"

    @property
    def status(self) -> dict[str, Any]:
        return (self.job or {}).get("status") or {}

    def attempt(self) -> int:
        return int(self.status.get("attempt", 0))

    def workers(self) -> list[dict[str, Any]]:
        return [p for p in self.pods.values() if not replica_groups.is_lighthouse(p)]

    def current(self) -> dict[int, dict[str, Any]]:
        """The live (not deleted, not ended) pod of each index of the attempt, as a user would count them."""
        replaced = set((self.status.get("replacing") or {}).values()) | set(self.status.get("retiredUids") or [])
        out: dict[int, dict[str, Any]] = {}
        for pod in self.workers():
            labels = pod["metadata"]["labels"]
            if labels.get(api.LABEL_ATTEMPT) != str(self.attempt()) or pod["metadata"].get("deletionTimestamp"):
                continue
            if pod["metadata"]["uid"] in replaced or pod["status"].get("phase") in ("Failed", "Succeeded"):
                continue
            out.setdefault(int(labels[api.LABEL_REPLICA_INDEX]), pod)
        return out

    def running(self) -> dict[int, dict[str, Any]]:
        return {i: p for i, p in self.current().items() if p["status"].get("phase") == "Running"}

    def alive(self) -> dict[int, dict[str, Any]]:
        """Running pods whose processes still run (not on a dead node, not killed with it)."""
        return {i: p for i, p in self.running().items() if p["metadata"]["uid"] not in self.silent}

    def incident(self, kind: str, klass: str) -> None:
        self.truth.incidents.append(Incident(kind, klass, self.now))

    def _terminate(self, pod: dict[str, Any], code: int, reason: str = "Error", message: str = "") -> None:
        pod["status"] = {
            **pod["status"],
            "phase": "Failed",
            "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": code, "reason": reason, "message": message, "finishedAt": format_time(self.now)}}}],
        }
        self.silent.add(pod["metadata"]["uid"])

    def _restart_in_place(self, pods: list[dict[str, Any]], times: int = 1) -> None:
        """torchrun's agents restart their workers: each counts it, and one past its limit gives up (the pod ends
        with the record ddp_trainer.torchrun writes)."""
        for pod in pods:
            uid = pod["metadata"]["uid"]
            self.agents[uid] = self.agents.get(uid, 0) + times
            limit = _env(pod, "PET_MAX_RESTARTS")
            if limit is not None and self.agents[uid] > int(limit):
                self.truth.agent_gave_up.append(pod["metadata"]["name"])
                record = '{"message": "max restarts reached", "ddpjobInPlaceRestarts": %d}' % int(limit)
                self._terminate(pod, 1, message=record)

    # --- world events -------------------------------------------------------------------------------------------
    def apply(self, event: tuple[Any, ...]) -> None:
        self.history.append(event)
        name, *args = event
        getattr(self, f"ev_{name}")(*args)

    def ev_tick(self, seconds: float) -> None:
        """Time passes; the kubelets and the scheduler do their part."""
        self.now += timedelta(seconds=seconds)
        self._kubelets()

    def _kubelets(self) -> None:
        for name, node in list(self.nodes.items()):
            since = node.get("rebooting")
            if since and (self.now - parse_time(since)).total_seconds() >= NODE_MONITOR_GRACE:
                self._set_node(name, ready=False, since=self.now)
        used = {p["spec"].get("nodeName") for p in self.pods.values() if p["status"].get("phase") in ("Pending", "Running")}
        for pod in sorted(self.pods.values(), key=lambda p: p["metadata"]["name"]):
            meta, node = pod["metadata"], pod["spec"].get("nodeName")
            if meta.get("deletionTimestamp"):
                gone = not meta.get("finalizers") and (meta.get("force") or not node or not self.node_ready(node))
                # On a Ready node the kubelet stops the containers and the object goes once nothing holds it.
                if gone or (not meta.get("finalizers") and self.node_ready(node)):
                    del self.pods[meta["name"]]
                continue
            if pod["status"].get("phase") == "Pending" and not node:
                free = [n for n in sorted(self.nodes) if self.node_ready(n) and n not in used]
                if free:
                    pod["spec"]["nodeName"] = free[0]
                    used.add(free[0])
            elif pod["status"].get("phase") == "Pending" and self.node_ready(node):
                pod["status"] = {"phase": "Running", "podIP": f"10.0.0.{meta['uid']}"}
                self.agents.setdefault(meta["uid"], 0)

    def ev_reconcile(self) -> None:
        if self.job is None:
            return
        obs = self.observe()
        plan = plan_reconcile(obs, self.settings)
        self.truth.plans += 1
        if self.status.get("phase") in ("Succeeded", "Failed"):
            self.truth.ended_at = self.truth.ended_at or self.now
            self.truth.passes_since_end += 1
        self._check_plan(obs, plan)
        self._apply_plan(obs, plan)

    def ev_scrape(self, mask: int) -> None:
        """The operator reads the agents of the running pods; `mask` says which answered (a bit an index)."""
        for index, pod in self.running().items():
            uid = pod["metadata"]["uid"]
            if uid not in self.silent and mask >> index & 1:
                self.reads[uid] = self.agents.get(uid, 0)

    def ev_crash(self, index: int, code: int) -> None:
        """A trainer process of pod `index` exits with `code` (137: killed, OOM or not)."""
        pod = self.alive().get(index)
        if pod is None:
            return
        self.incident(f"crash {code}", TRAINER)
        if self.config.mode == "InPlace":
            self._restart_in_place(list(self.alive().values()))  # every agent: their collectives failed too
        elif self.config.mode == "TorchFT+InPlace":
            self._restart_in_place([pod])  # a group of its own: the others train on
        else:
            self._terminate(pod, code, "OOMKilled" if code == 137 else "Error")

    def ev_crash_all(self, code: int) -> None:
        """Every trainer fails at once (a bad batch, a full disk): one incident."""
        running = list(self.alive().values())
        if not running:
            return
        # One incident; under TorchFT+InPlace every group restarts in place on its own, a recovery each: an incident
        # of each group (docs/simulation.md).
        for _ in running if self.config.mode == "TorchFT+InPlace" else running[:1]:
            self.incident(f"crash_all {code}", TRAINER)
        if self.config.in_place:
            self._restart_in_place(running)
        else:
            for pod in running:
                self._terminate(pod, code)

    def ev_never_starts(self, index: int) -> None:
        """A container that never starts (a bad image): its pod fails at once."""
        pod = self.current().get(index)
        if pod is None or pod["status"].get("phase") != "Pending" or not pod["spec"].get("nodeName"):
            return
        self.incident("never_starts", TRAINER)
        self._terminate(pod, 128, "StartError")

    def _lose(self, pod: dict[str, Any], survivors_restart: int) -> None:
        """A pod's processes are gone: under InPlace the survivors' agents restart their workers at once (their
        collectives fail), some more than once while the group re-forms without it."""
        was_alive = pod["metadata"]["uid"] not in self.silent
        self.silent.add(pod["metadata"]["uid"])
        if self.config.mode == "InPlace" and was_alive:
            others = [p for p in self.alive().values() if p is not pod]
            self._restart_in_place(others, survivors_restart)

    def ev_delete_pod(self, index: int, survivors_restart: int = 1, evict: bool = False) -> None:
        """`kubectl delete pod` (or an eviction: DisruptionTarget first) of the attempt's pod `index`."""
        pod = self.current().get(index)
        if pod is None:
            return
        self.incident("evict" if evict else "delete_pod", PLATFORM)
        if evict:
            pod["status"].setdefault("conditions", []).append(
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "x"})
        pod["metadata"]["deletionTimestamp"] = format_time(self.now + timedelta(seconds=30))
        pod["metadata"]["deletionGracePeriodSeconds"] = 30
        if pod["status"].get("phase") == "Running":
            self._lose(pod, survivors_restart)

    def ev_node_lost(self, index: int, survivors_restart: int = 1) -> None:
        """The node of pod `index` stops at once: NotReady from now on (its kubelet gone)."""
        pod = self.alive().get(index)
        if pod is None:
            return
        self.incident("node_lost", PLATFORM)
        self._set_node(pod["spec"]["nodeName"], ready=False, since=self.now)
        self._lose(pod, survivors_restart)

    def ev_node_reboot(self, index: int, survivors_restart: int = 1) -> None:
        """The node of pod `index` reboots: its processes die with resets (the survivors restart in place now) and
        its agent falls silent, but the API still shows the node Ready until the node monitor's grace ends; the
        `node_monitor` event then marks it NotReady."""
        pod = self.alive().get(index)
        if pod is None:
            return
        self.incident("node_reboot", PLATFORM)
        self.nodes[pod["spec"]["nodeName"]]["rebooting"] = format_time(self.now)
        self._lose(pod, survivors_restart)

    def ev_node_monitor(self) -> None:
        """The node monitor's grace ended for the rebooting nodes: NotReady."""
        for name, node in list(self.nodes.items()):
            if node.get("rebooting"):
                self._set_node(name, ready=False, since=self.now)

    def ev_refuse_creates(self, on: bool) -> None:
        """A ResourceQuota that refuses new pods (403), or none."""
        self.refuse_creates = on

    def ev_operator_restart(self) -> None:
        """The operator process is killed and started again: nothing it had read survives."""
        self.reads = {}

    def ev_crash_during_next_pass(self, writes: int) -> None:
        self.crash_after = writes

    def ev_conflict_next_pass(self) -> None:
        self.conflict = True

    def ev_patch_join_timeout(self, seconds: int) -> None:
        """A legal edit of a running job: the rendezvous' join timeout (an env the operator injects, nothing Kueue
        admits on)."""
        if self.job is None:
            return
        self.job["spec"].setdefault("rendezvous", {})["joinTimeoutSeconds"] = seconds
        self._bump(spec=True)

    def ev_kueue_admit(self) -> None:
        for wl in self.workloads.values():
            if wl["metadata"].get("deletionTimestamp") or (wl.get("status") or {}).get("admission"):
                continue
            count = wl["spec"]["podSets"][0]["count"]
            wl["status"] = {
                **(wl.get("status") or {}),
                "admission": {"clusterQueue": "cq", "podSetAssignments": [
                    {"name": kueue.POD_SET, "count": count, "flavors": {"nvidia.com/gpu": "gpu"}}]},
                "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                               {"type": "Admitted", "status": "True", "reason": "Admitted"}],
            }
            wl["metadata"]["resourceVersion"] = str(next(self.rv))

    def ev_kueue_evict(self) -> None:
        for wl in self.workloads.values():
            if (wl.get("status") or {}).get("admission"):
                wl["status"]["conditions"] = [*wl["status"]["conditions"], {
                    "type": "Evicted", "status": "True", "reason": "Preempted", "message": "preempted"}]
                wl["metadata"]["resourceVersion"] = str(next(self.rv))
                self.incident("kueue_evict", PLATFORM)

    def ev_succeed(self) -> None:
        """Worker 0 finishes the training, and its peers with it."""
        running = self.alive()
        if len(running) < int(self.status.get("replicas", 0)) or self.status.get("phase") != "Running":
            return
        for pod in running.values():
            pod["status"] = {"phase": "Succeeded", "containerStatuses": [{"name": "trainer", "state": {"terminated": {
                "exitCode": 0, "reason": "Completed", "finishedAt": format_time(self.now)}}}]}

    # --- the operator ------------------------------------------------------------------------------------------
    def observe(self) -> Observed:
        assert self.job is not None
        workers, lighthouses = replica_groups.split(copy.deepcopy(list(self.pods.values())))
        attempt = str(self.attempt())
        live = {p["metadata"]["uid"] for p in workers if p["metadata"]["labels"].get(api.LABEL_ATTEMPT) == attempt}
        view = None
        if self.config.kueue:
            view = View(workloads=copy.deepcopy(list(self.workloads.values())), flavors=FLAVORS)
        extra: dict[str, Any] = {}
        if "agents_silent" in Observed.__dataclass_fields__:  # absent on the code before the fixes (docs/simulation.md)
            extra["agents_silent"] = frozenset(uid for uid in live if uid in self.silent)
        return Observed(
            job=copy.deepcopy(self.job),
            pods=workers,
            nodes=copy.deepcopy(self.nodes),
            service_exists=True,
            now=self.now,
            agent_restarts={uid: n for uid, n in self.reads.items() if uid in live},
            lighthouses=lighthouses,
            refusal=self.refusal,
            owners_live=True,
            kueue=view,
            **extra,
        )

    def _check_plan(self, obs: Observed, plan: Plan) -> None:
        for name in plan.force_delete_pods:
            pod = self.pods.get(name)
            if pod is not None and self.node_ready(pod["spec"].get("nodeName")):
                self.truth.force_deleted_on_ready.append(name)
        status = plan.status if plan.status is not None else self.status
        if status.get("phase") in ("Succeeded", "Failed"):
            return
        keep = set((status.get("replacing") or {}).values()) | set(status.get("retiredUids") or [])
        for name in plan.delete_pods:
            pod = self.pods.get(name)
            if pod is None or replica_groups.is_lighthouse(pod):
                continue
            ended = pod["status"].get("phase") in ("Failed", "Succeeded")
            same = pod["metadata"]["labels"].get(api.LABEL_ATTEMPT) == str(status.get("attempt", 0))
            if same and not ended and pod["metadata"]["uid"] not in keep:
                self.truth.deleted_current.append(name)
        if self.status.get("phase") == "Running":
            for name in plan.delete_workloads:
                wl = self.workloads.get(name)
                if wl is not None and (wl.get("status") or {}).get("admission") and not _evicted(wl):
                    self.truth.workloads_replaced_while_running.append(name)

    def _apply_plan(self, obs: Observed, plan: Plan) -> None:
        writes = itertools.count()

        def alive() -> bool:
            if self.crash_after is not None and next(writes) >= self.crash_after:
                return False
            return True

        try:
            for name in plan.delete_pods + plan.force_delete_pods:
                pod = self.pods.get(name)
                if not alive():
                    raise _Killed
                if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                    pod["metadata"]["deletionTimestamp"] = format_time(self.now + timedelta(seconds=30))
                    pod["metadata"]["deletionGracePeriodSeconds"] = 30
                if pod is not None and name in plan.force_delete_pods:
                    pod["metadata"]["force"] = True
            for name in plan.release_pods:
                if not alive():
                    raise _Killed
                if name in self.pods:
                    self.pods[name]["metadata"]["finalizers"] = []
            for name in plan.delete_workloads:
                if not alive():
                    raise _Killed
                self.workloads.pop(name, None)
            if plan.workload_write is not None and plan.workload_write.name in self.workloads:
                if not alive():
                    raise _Killed
                wl = self.workloads[plan.workload_write.name]
                wl["status"] = copy.deepcopy(plan.workload_write.status)
            if plan.create_workload is not None and plan.create_workload["metadata"]["name"] not in self.workloads:
                if not alive():
                    raise _Killed
                wl = copy.deepcopy(plan.create_workload)
                wl["metadata"]["resourceVersion"] = str(next(self.rv))
                self.workloads[wl["metadata"]["name"]] = wl
            refused = False
            for pod in plan.create_pods:
                if not alive():
                    raise _Killed
                name = pod["metadata"]["name"]
                if name in self.pods:
                    continue  # 409 AlreadyExists: the applier reads it as created
                if self.refuse_creates and not replica_groups.is_lighthouse(pod):
                    labels = pod["metadata"]["labels"]
                    self.refusal = PodRefusal(
                        pod=name, code=403, message="exceeded quota: team-quota",
                        attempt=int(labels[api.LABEL_ATTEMPT]), generation=int(self.job["metadata"]["generation"]),
                        at=self.now)
                    refused = True
                    continue
                made = copy.deepcopy(pod)
                made["metadata"].update({"uid": str(next(self.uids)), "creationTimestamp": format_time(self.now),
                                         "namespace": NS})
                made.setdefault("status", {})["phase"] = "Pending"
                self.pods[name] = made
            if refused or plan.defer_status:
                return
            if plan.status is not None:
                if not alive():
                    raise _Killed
                if self.conflict:
                    self.conflict = False
                    return  # 409: the pass is run again on fresh state
                assert self.job is not None
                self.job["status"] = copy.deepcopy(plan.status)
                self._bump()
            self.events += [(e.type, e.reason, e.message) for e in plan.events]
            if plan.delete_job:
                self.job = None
        except _Killed:
            self.ev_operator_restart()
        finally:
            self.crash_after = None

    def _bump(self, spec: bool = False) -> None:
        assert self.job is not None
        meta = self.job["metadata"]
        meta["resourceVersion"] = str(next(self.rv))
        if spec:
            meta["generation"] = int(meta["generation"]) + 1


class _Killed(Exception):
    """The operator process died between two writes."""


def _env(pod: dict[str, Any], name: str) -> str | None:
    for container in pod["spec"].get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == name:
                return env.get("value")
    return None


def _evicted(workload: dict[str, Any]) -> bool:
    return any(c.get("type") == "Evicted" and c.get("status") == "True"
               for c in (workload.get("status") or {}).get("conditions") or [])


def replay(config: Config, events: list[tuple[Any, ...]]) -> World:
    world = World(config)
    for event in events:
        world.apply(event)
    return world

