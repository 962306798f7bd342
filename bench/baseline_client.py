"""The baseline: a bare client that does only what must be done for a DDPJob to run, with the operator's
parallelism and the operator's own manifests. It watches DDPJobs (one watch, like the operator's) and, for each
new one, creates its headless Service and its pods: no reads, no status, no events, no retries.

    python bench/baseline_client.py --namespace NS --workers 4     (KUBECONFIG: the baseline's identity)"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers.builders import JobRef, build_service, build_worker_pod

TIMEOUT = (5, 30)


def create_group(core: client.CoreV1Api, job: dict) -> None:
    meta = job["metadata"]
    ref = JobRef(meta["name"], meta["namespace"], meta["uid"])
    spec = parse_spec(job["spec"])
    _create(core.create_namespaced_service, ref.namespace, build_service(ref, spec))
    for index in range(spec.replicas):
        pod = build_worker_pod(ref, spec, index=index, attempt=0, restarts=0)
        # The bare client counts no failure, so it has nothing to track: the same pod without the operator's
        # finalizer (which nobody would release).
        pod["metadata"].pop("finalizers", None)
        _create(core.create_namespaced_pod, ref.namespace, pod)


def _create(create: Callable[..., Any], namespace: str, body: dict) -> None:
    try:
        # The body is read, not decoded into models: the connection goes back to the pool.
        _ = create(namespace, body, _request_timeout=TIMEOUT, _preload_content=False).data
    except ApiException as exc:
        if exc.status != 409:
            print(f"baseline: create failed: {exc.status} {exc.reason}", file=sys.stderr, flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--namespace", required=True)
    p.add_argument("--workers", type=int, default=4)
    a = p.parse_args()
    cfg = client.Configuration()
    config.load_kube_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = a.workers + 2
    api = client.ApiClient(cfg)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    todo: queue.Queue = queue.Queue()

    def work() -> None:
        while True:
            create_group(core, todo.get())

    for _ in range(a.workers):
        threading.Thread(target=work, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("baseline: watching", a.namespace, flush=True)
    response = custom.list_namespaced_custom_object(
        "ddpjob.dev", "v1alpha1", a.namespace, "ddpjobs", watch=True, _preload_content=False, timeout_seconds=3600
    )
    for line in iter_resp_lines(response):
        event = json.loads(line)
        if event["type"] == "ADDED":
            todo.put(event["object"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
