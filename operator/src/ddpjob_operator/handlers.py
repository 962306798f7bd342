"""All kopf wiring. Handlers only enqueue job keys; the work queue runs level-based reconcile passes.

Only on.event handlers are registered: they need no finalizer and kopf writes nothing to the objects (no
progress annotations, no last-handled-configuration). The safety-net resync is a single loop that lists the
jobs, not a kopf timer, because kopf adds a finalizer to every object that has a timer, and a finalizer
would strand jobs whenever the operator is down."""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from dataclasses import dataclass, field

import kopf
from kubernetes import client

from . import api
from .config import OperatorConfig
from .kube import REQUEST_TIMEOUT, api_client, body
from .progress import ProgressScraper
from .reconciler import Reconciler
from .workqueue import WorkQueue

log = logging.getLogger("ddpjob.handlers")


@dataclass
class Runtime:
    config: OperatorConfig
    reconciler: Reconciler | None = None
    queue: WorkQueue | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)


def build_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    rt = Runtime(config)

    @kopf.on.login(registry=registry)
    def login(**kwargs):
        # A private registry gets no default login handler: use the same $KUBECONFIG/in-cluster config as ours.
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_):
        settings.posting.enabled = False  # events are ours, posted after the status write
        settings.persistence.finalizer = "ddpjob.dev/kopf-unused"  # never added: no handler needs one
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
        rt.reconciler = Reconciler(api_client(pool_size=config.workers + 4), config.planner,
                                   ProgressScraper(config.progress_interval_seconds))
        rt.queue = WorkQueue(rt.reconciler.reconcile, workers=config.workers)
        rt.queue.start()
        rt.tasks.append(asyncio.create_task(_resync_forever(rt), name="ddpjob-resync"))
        log.info("operator started: namespaces=%s workers=%d resync=%ss", ",".join(config.namespaces) or "*",
                 config.workers, config.resync_seconds)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_):
        for task in rt.tasks:
            task.cancel()
        await asyncio.gather(*rt.tasks, return_exceptions=True)
        if rt.queue:
            await rt.queue.stop()

    @kopf.on.event(api.GROUP, api.VERSION, api.PLURAL, registry=registry)
    async def job_event(event: dict, name: str, namespace: str, **_):
        if rt.queue is None:
            return
        key = (namespace, name)
        if event.get("type") == "DELETED":
            rt.queue.forget(key)
            rt.reconciler.forget(key)
            return
        rt.queue.add(key)

    @kopf.on.event("", "v1", "pods", labels={api.LABEL_JOB_NAME: kopf.PRESENT}, registry=registry)
    async def pod_event(labels: dict, namespace: str, **_):
        if rt.queue is not None:
            rt.queue.add((namespace, labels[api.LABEL_JOB_NAME]))

    @kopf.on.probe(id="queued", registry=registry)
    async def queued(**_):
        return len(rt.queue) if rt.queue is not None else 0

    return registry


async def _resync_forever(rt: Runtime) -> None:
    custom = client.CustomObjectsApi(api_client(pool_size=2))
    while True:
        try:
            for namespace, name in await asyncio.to_thread(_list_jobs, custom, rt.config.namespaces):
                rt.queue.add((namespace, name))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the apiserver may be down; the next round tries again
            log.warning("resync could not list jobs: %s", exc)
        await asyncio.sleep(rt.config.resync_seconds)


def _list_jobs(custom: client.CustomObjectsApi, namespaces: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every job in scope. Namespace globs (kopf accepts `team-*`) are listed cluster-wide and filtered here."""
    globbed = any(ch in ns for ns in namespaces for ch in "*?[")
    if namespaces and not globbed:
        items = []
        for ns in namespaces:
            items += body(custom.list_namespaced_custom_object(
                api.GROUP, api.VERSION, ns, api.PLURAL, _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT))["items"]
    else:
        items = body(custom.list_cluster_custom_object(api.GROUP, api.VERSION, api.PLURAL, _preload_content=False,
                                                       _request_timeout=REQUEST_TIMEOUT))["items"]
    keys = [(j["metadata"]["namespace"], j["metadata"]["name"]) for j in items]
    if globbed:
        keys = [k for k in keys if any(fnmatch.fnmatchcase(k[0], ns) for ns in namespaces)]
    return keys
