"""`python -m ddpjob_operator release-pods`: what the Helm chart's pre-delete hook runs on `helm uninstall`.

Every worker pod carries the operator's tracking finalizer, and only the operator removes it. Uninstalled while
jobs run, it would leave those pods Terminating for ever once anyone deletes them (a namespace deletion included),
holding their GPUs. So before the operator goes, its jobs are stopped the way a user stops one: every DDPJob is
suspended. The running operator then deletes their pods (SIGTERM: the trainer writes its checkpoint) and frees
them, and creates none; no restart is counted. Whatever pods are still held after `--wait-seconds` (the operator
is not running, say) are deleted and freed here. The DDPJobs stay, Suspended, with their checkpoints: after
installing the operator again, `kubectl patch ddpj NAME --type=merge -p '{"spec":{"runPolicy":{"suspend":false}}}'`
resumes each from its last checkpoint."""

from __future__ import annotations

import argparse
import fnmatch
import logging
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import api
from .controller.kube import REQUEST_TIMEOUT, api_client, drained, status_of
from .logfmt import setup_logging
from .state import owner_refs

log = logging.getLogger("ddpjob.uninstall")
TERMINAL = ("Succeeded", "Failed")


def _ours(pod: Any) -> bool:
    return owner_refs.ddpjob_controlled(pod.metadata.owner_references)


def worker_pods(core: client.CoreV1Api, namespaces: list[str]) -> list[Any]:
    """Every pod a DDPJob controls, in the namespaces given (names or globs; none: all)."""
    selector = api.LABEL_JOB_NAME
    exact = [ns for ns in namespaces if not any(ch in ns for ch in "*?[")]
    if namespaces and len(exact) == len(namespaces):
        listed = [
            pod
            for ns in exact
            for pod in core.list_namespaced_pod(ns, label_selector=selector, _request_timeout=REQUEST_TIMEOUT).items
        ]
    else:
        everywhere = core.list_pod_for_all_namespaces(label_selector=selector, _request_timeout=REQUEST_TIMEOUT)
        listed = [
            p
            for p in everywhere.items
            if not namespaces or any(fnmatch.fnmatchcase(p.metadata.namespace, pattern) for pattern in namespaces)
        ]
    return [p for p in listed if _ours(p)]


def release_pod(core: client.CoreV1Api, pod: Any) -> bool:
    """Delete the pod gracefully and free its tracking finalizer. False when it was already gone."""
    meta = pod.metadata
    try:
        if not meta.deletion_timestamp:
            options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta.uid))
            drained(
                core.delete_namespaced_pod(
                    meta.name, meta.namespace, body=options, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
        patch = owner_refs.release_patch(meta.uid, meta.finalizers)
        if patch is not None:
            drained(
                core.patch_namespaced_pod(
                    meta.name, meta.namespace, patch, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
    except ApiException as exc:
        if status_of(exc) in (404, 409, 422):  # gone, or changed since the list: the next round sees it
            return False
        raise
    return True


def suspend_all(custom: client.CustomObjectsApi, namespaces: list[str]) -> int:
    """Suspend every running DDPJob in scope; the number suspended now."""
    exact = [ns for ns in namespaces if not any(ch in ns for ch in "*?[")]
    if namespaces and len(exact) == len(namespaces):
        jobs = [
            j
            for ns in exact
            for j in custom.list_namespaced_custom_object(
                api.GROUP, api.VERSION, ns, api.PLURAL, _request_timeout=REQUEST_TIMEOUT
            )["items"]
        ]
    else:
        everywhere = custom.list_cluster_custom_object(
            api.GROUP, api.VERSION, api.PLURAL, _request_timeout=REQUEST_TIMEOUT
        )["items"]
        jobs = [
            j
            for j in everywhere
            if not namespaces or any(fnmatch.fnmatchcase(j["metadata"]["namespace"], pat) for pat in namespaces)
        ]
    suspended = 0
    for job in jobs:
        meta, spec = job["metadata"], job.get("spec") or {}
        if (spec.get("runPolicy") or {}).get("suspend") or (job.get("status") or {}).get("phase") in TERMINAL:
            continue
        try:
            custom.patch_namespaced_custom_object(
                api.GROUP,
                api.VERSION,
                meta["namespace"],
                api.PLURAL,
                meta["name"],
                {"spec": {"runPolicy": {"suspend": True}}},
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if status_of(exc) != 404:
                raise
            continue
        suspended += 1
        log.info("suspended for the operator's uninstall", extra={"job": f"{meta['namespace']}/{meta['name']}"})
    return suspended


def held_pods(core: client.CoreV1Api, namespaces: list[str]) -> list[Any]:
    return [p for p in worker_pods(core, namespaces) if owner_refs.tracked(p.metadata.finalizers)]


def release_all(core: client.CoreV1Api, namespaces: list[str], rounds: int = 3) -> int:
    """Delete and free every worker pod still held, listing again until none is left."""
    released = 0
    for _ in range(rounds):
        pending = held_pods(core, namespaces)
        if not pending:
            break
        for pod in pending:
            if release_pod(core, pod):
                released += 1
                labels = pod.metadata.labels or {}
                log.info(
                    "stopped and released pod",
                    extra={
                        "job": f"{pod.metadata.namespace}/{labels.get(api.LABEL_JOB_NAME)}",
                        "attempt": labels.get(api.LABEL_ATTEMPT),
                        "pod": pod.metadata.name,
                    },
                )
    return released


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="ddpjob-operator release-pods",
        description="Before uninstalling the operator: stop every DDPJob's pods (SIGTERM, so trainers checkpoint) "
        "and free their tracking finalizers. The DDPJobs stay.",
    )
    p.add_argument("--namespace", "-n", action="append", default=[], metavar="NS", help="only here (globs allowed)")
    p.add_argument("--all-namespaces", "-A", action="store_true", help="everywhere (default)")
    p.add_argument(
        "--wait-seconds",
        type=float,
        default=120,
        help="how long the running operator gets to stop the suspended jobs' pods before they are freed here",
    )
    args = p.parse_args(argv)
    setup_logging(verbose=False)
    api_client_ = api_client()
    core, custom = client.CoreV1Api(api_client_), client.CustomObjectsApi(api_client_)
    log.info("suspended %d DDPJobs", suspend_all(custom, args.namespace))
    deadline = time.monotonic() + args.wait_seconds
    while held_pods(core, args.namespace) and time.monotonic() < deadline:
        time.sleep(1)
    released = release_all(core, args.namespace)
    if released:
        log.warning(
            "the operator did not stop %d worker pods in %gs: deleted and freed here", released, args.wait_seconds
        )
    log.info("no worker pod is held; the DDPJobs stay, Suspended: resume them once an operator runs again")
    return 0
