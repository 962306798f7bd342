"""All kopf wiring. Indexes keep what a pass reads in memory (watch_cache.py); handlers only enqueue job keys; the
work queue runs level-based reconcile passes.

No handler here needs a finalizer on a DDPJob, and kopf writes nothing to the objects (no progress annotations, no
last-handled-configuration). The safety-net resync is a loop over the cached jobs, not a kopf timer, because kopf
adds a finalizer to every object that has a timer, and a finalizer would strand jobs whenever the operator is
down. (The worker pods do carry our own tracking finalizer: planner.py says why.)"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import kopf

from .. import api, metrics
from ..admission import kueue
from ..config import OperatorConfig
from ..placement import gang
from ..state.status_writes import WriteBudget
from ..tracking.progress import ProgressScraper
from . import kopf_namespaces, relist
from .kube import api_client
from .leadership import Leadership
from .reconciler import Reconciler
from .watch_cache import (
    NETWORK_POLICY,
    SERVICE,
    WatchCache,
    bound_pod,
    child_entry,
    held_on,
    namespace_terminating,
    priority_entry,
    slim_job,
    slim_node,
    slim_pod,
)
from .workqueue import WorkQueue

log = logging.getLogger("ddpjob.handlers")

OURS = {api.LABEL_JOB_NAME: kopf.PRESENT}
KUEUE_OURS: dict[str, Any] = {api.LABEL_JOB_NAME: kopf.PRESENT, api.LABEL_MANAGED_BY: api.MANAGED_BY}
INDEXES = (
    "ddpjob_jobs",
    "ddpjob_pods",
    "ddpjob_pods_by_node",
    "ddpjob_nodes",
    "ddpjob_services",
    "ddpjob_network_policies",
    "ddpjob_priorities",
    "ddpjob_bound_pods",
    "ddpjob_namespaces",
)
GANG_INDEX = "ddpjob_podgroups"  # only where the API server serves PodGroups (config.gang)
# Only where it serves Kueue's Workloads (config.kueue): the jobs' Workloads and ResourceFlavors.
KUEUE_INDEXES = ("ddpjob_workloads", "ddpjob_flavors")


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf deep-copies every object on every event into an "essence" to diff it for on.create/on.update
    handlers. This operator has none (indexes and event handlers only), so the diff is never read: building it was
    a tenth of the operator's CPU at 1,000 jobs."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return None

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


@dataclass
class Runtime:
    config: OperatorConfig
    reconciler: Reconciler | None = None
    queue: WorkQueue | None = None
    cache: WatchCache | None = None
    pods_by_node: Any = None
    node_ready: dict[str, Any] = field(default_factory=dict)
    tasks: list[asyncio.Task] = field(default_factory=list)

    def wake(self, key: tuple[str, str]) -> None:
        if self.queue is not None:
            self.queue.add(key)

    def wake_waiting_for_room(self) -> None:
        """One waiting job at a time, highest priority then oldest first; the reconciler wakes the next when its
        pass is over."""
        if self.queue is not None and self.reconciler is not None:
            first = self.reconciler.room_freed()
            if first is not None:
                self.queue.add(first)


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    relist.install()  # after a relist, what the new list lacks leaves the indexes too (relist.py)
    kopf_namespaces.install()  # every listed namespace that matches is watched, a deleted one until it is gone
    registry = kopf.OperatorRegistry()
    rt = Runtime(config)

    @kopf.on.login(registry=registry)
    def login(**kwargs):
        # A private registry gets no default login handler: use the same $KUBECONFIG/in-cluster config as ours.
        return kopf.login_via_client(**kwargs)

    # --- indexes: kopf fills each by a LIST, then keeps it by a watch, and runs no handler before all are filled.
    # Each is async: kopf runs a plain `def` handler in a thread, a hop per event of every pod in the cluster.
    @kopf.index(api.GROUP, api.VERSION, api.PLURAL, id="ddpjob_jobs", registry=registry)
    async def ddpjob_jobs(body, namespace, name, **_):
        return {(namespace, name): slim_job(body)}

    @kopf.index("", "v1", "pods", labels=OURS, id="ddpjob_pods", registry=registry)
    async def ddpjob_pods(body, namespace, labels, **_):
        return {(namespace, labels[api.LABEL_JOB_NAME]): slim_pod(body)}

    @kopf.index("", "v1", "pods", labels=OURS, id="ddpjob_pods_by_node", registry=registry)
    async def ddpjob_pods_by_node(spec, namespace, labels, **_):
        node = spec.get("nodeName")
        return {node: (namespace, labels[api.LABEL_JOB_NAME])} if node else {}

    @kopf.index("", "v1", "nodes", id="ddpjob_nodes", registry=registry)
    async def ddpjob_nodes(body, name, **_):
        return {name: slim_node(body)}

    @kopf.index("", "v1", "services", labels=OURS, id="ddpjob_services", registry=registry)
    async def ddpjob_services(body, namespace, labels, **_):
        return {(namespace, labels[api.LABEL_JOB_NAME]): child_entry(SERVICE, body)}

    @kopf.index(
        "networking.k8s.io", "v1", "networkpolicies", labels=OURS, id="ddpjob_network_policies", registry=registry
    )
    async def ddpjob_network_policies(body, namespace, labels, **_):
        return {(namespace, labels[api.LABEL_JOB_NAME]): child_entry(NETWORK_POLICY, body)}

    @kopf.index("", "v1", "pods", id="ddpjob_bound_pods", registry=registry)
    async def ddpjob_bound_pods(body, **_):
        """Every pod that holds room on a node (anyone's, bound or nominated): what an elastic job cannot have."""
        held = bound_pod(body)
        return {held_on(body): held} if held is not None else {}

    @kopf.index("", "v1", "namespaces", id="ddpjob_namespaces", registry=registry)
    async def ddpjob_namespaces(body, name, **_):
        """Namespaces being deleted: their jobs' pods are going with them, which is no failure."""
        return {name: True} if namespace_terminating(body) else {}

    @kopf.index("scheduling.k8s.io", "v1", "priorityclasses", id="ddpjob_priorities", registry=registry)
    async def ddpjob_priorities(body, name, **_):
        """PriorityClass values: who looks at freed room first (room_wakeups.py), a Workload's priority (kueue.py)."""
        return {name: priority_entry(body)}

    @kopf.on.event("", "v1", "namespaces", registry=registry)
    async def namespace_event(body, name, **_):
        if rt.queue is not None and rt.cache is not None and namespace_terminating(body):
            for key in rt.cache.job_keys():
                if key[0] == name:
                    rt.queue.add(key)

    if config.gang:

        @kopf.index(gang.GROUP, gang.VERSION, gang.PLURAL, labels=OURS, id=GANG_INDEX, registry=registry)
        async def ddpjob_podgroups(body, namespace, labels, **_):
            return {(namespace, labels[api.LABEL_JOB_NAME]): gang.slim_podgroup(body)}

        @kopf.on.event(gang.GROUP, gang.VERSION, gang.PLURAL, labels=OURS, registry=registry)
        async def podgroup_event(labels, namespace, **_):
            rt.wake((namespace, labels[api.LABEL_JOB_NAME]))

    if config.kueue:

        @kopf.index(
            kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, labels=KUEUE_OURS, id="ddpjob_workloads", registry=registry
        )
        async def ddpjob_workloads(body, namespace, labels, **_):
            return {(namespace, labels[api.LABEL_JOB_NAME]): kueue.slim_workload(body)}

        @kopf.on.event(kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, labels=KUEUE_OURS, registry=registry)
        async def workload_event(labels, namespace, **_):
            rt.wake((namespace, labels[api.LABEL_JOB_NAME]))

        @kopf.index(kueue.GROUP, kueue.VERSION, kueue.FLAVORS, id="ddpjob_flavors", registry=registry)
        async def ddpjob_flavors(body, name, **_):
            return {name: kueue.slim_flavor(body)}

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        # The indexes (kwargs named by their ids) are live objects: empty now, filled by kopf before any handler
        # below runs.
        optional = ((GANG_INDEX,) if config.gang else ()) + (KUEUE_INDEXES if config.kueue else ())
        indexes = {name: kwargs[name] for name in INDEXES + optional}
        settings.posting.enabled = False  # events are ours, posted after the status write
        settings.persistence.finalizer = "ddpjob.dev/kopf-unused"  # never added: no handler needs one
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.reconnect_backoff = 1.0
        settings.networking.request_timeout = 30
        # kopf gives up on a failing request after these delays: about 2.5 minutes rides out an apiserver restart.
        settings.networking.error_backoffs = [1, 1, 2, 3, 5, 8, 13, 21, 34, 55]
        settings.peering.priority = config.priority
        if config.peering:
            settings.peering.name = config.peering
            settings.peering.clusterwide = config.clusterwide
        rt.cache = WatchCache(
            indexes["ddpjob_jobs"],
            indexes["ddpjob_pods"],
            indexes["ddpjob_nodes"],
            [indexes["ddpjob_services"], indexes["ddpjob_network_policies"]],
            bound_pods=indexes["ddpjob_bound_pods"],
            podgroups=indexes.get(GANG_INDEX),
            kueue=tuple(indexes[name] for name in KUEUE_INDEXES) if config.kueue else None,
            namespaces=indexes["ddpjob_namespaces"],
            priorities=indexes["ddpjob_priorities"],
        )
        rt.pods_by_node = indexes["ddpjob_pods_by_node"]
        metrics.watch_cache_sizes({name.removeprefix("ddpjob_"): index for name, index in indexes.items()})
        api = api_client(pool_size=config.workers + 4)
        rt.reconciler = Reconciler(
            api,
            rt.cache,
            config.planner,
            ProgressScraper(config.progress_interval_seconds, on_answer=rt.wake),
        )
        rt.queue = WorkQueue(rt.reconciler.reconcile, workers=config.workers)
        rt.reconciler.wake_later = rt.queue.add_after
        lead = Leadership(
            api if config.peering else None,
            config.identity,
            config.priority,
            config.peering,
            config.namespaces,
            on_lead=lambda: _resync_now(rt),
            fresh=relist.listings_fresh,
        )
        rt.reconciler.leading = lead.leading
        rt.reconciler.budget = WriteBudget(config.status_writes_per_second, time.monotonic)
        rt.queue.start()
        rt.tasks.append(asyncio.create_task(_resync_forever(rt), name="ddpjob-resync"))
        rt.tasks.append(asyncio.create_task(lead.run(), name="ddpjob-leadership"))
        log.info(
            "operator started: namespaces=%s workers=%d resync=%ss",
            ",".join(config.namespaces) or "*",
            config.workers,
            config.resync_seconds,
        )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_):
        for task in rt.tasks:
            task.cancel()
        await asyncio.gather(*rt.tasks, return_exceptions=True)
        if rt.queue:
            await rt.queue.stop()

    # --- wake-ups: every change that can alter a job's plan enqueues its key; the pass reads the cache.
    @kopf.on.event(api.GROUP, api.VERSION, api.PLURAL, registry=registry)
    async def job_event(event, name, namespace, **_):
        if rt.queue is None or rt.reconciler is None:
            return
        key = (namespace, name)
        if event.get("type") == "DELETED":
            rt.queue.forget(key)
            rt.reconciler.forget(key)
        rt.queue.add(key)  # a deleted job's pass frees its pods' tracking finalizers

    @kopf.on.event("", "v1", "pods", labels=OURS, registry=registry)
    @kopf.on.event("", "v1", "services", labels=OURS, registry=registry)
    @kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=OURS, registry=registry)
    async def child_event(labels, namespace, **_):
        if rt.queue is not None:
            rt.queue.add((namespace, labels[api.LABEL_JOB_NAME]))

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def node_event(event, name, **_):
        """A change of a node's readiness, cordon, taints or allocatable matters to the jobs with pods on it, and
        to the elastic jobs waiting for room."""
        if rt.queue is None:
            return
        ready = None if event.get("type") == "DELETED" else slim_node(event.get("object") or {})
        if rt.node_ready.get(name) == ready:
            return
        rt.node_ready[name] = ready
        if ready is None:
            rt.node_ready.pop(name, None)
        if name in rt.pods_by_node:
            for key in set(rt.pods_by_node[name]):
                rt.queue.add(key)
        rt.wake_waiting_for_room()

    @kopf.on.event("", "v1", "pods", registry=registry)
    async def any_pod_event(event, spec, status, **_):
        """A pod that leaves a node (anyone's) gives room back: wake the elastic jobs waiting for it."""
        holds = spec.get("nodeName") or status.get("nominatedNodeName")
        if holds and (event.get("type") == "DELETED" or status.get("phase") in ("Succeeded", "Failed")):
            rt.wake_waiting_for_room()

    @kopf.on.probe(id="queued", registry=registry)
    async def queued(**_):
        return len(rt.queue) if rt.queue is not None else 0

    return registry


def _resync_now(rt: Runtime) -> None:
    assert rt.cache is not None and rt.queue is not None, "started by startup(), after both exist"
    for key in rt.cache.job_keys():
        rt.queue.add(key)


async def _resync_forever(rt: Runtime) -> None:
    """The safety net: every cached job is planned again every resync period, without asking the API server."""
    while True:
        await asyncio.sleep(rt.config.resync_seconds)
        _resync_now(rt)
