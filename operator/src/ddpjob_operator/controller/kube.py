"""The kubernetes client, configured from $KUBECONFIG or the in-cluster service account."""

from __future__ import annotations

import json
import os
from typing import Any

from kubernetes import client, config
from kubernetes.client import rest
from kubernetes.client.exceptions import ApiException

from .. import metrics

REQUEST_TIMEOUT = (5, 20)  # connect, read: a hung apiserver must not hang a worker forever


READS = ("GET", "HEAD", "OPTIONS")


class CountingRESTClient(rest.RESTClientObject):
    """Counts the writes (metrics.API_WRITES): what a paused standby must never send (leadership.py)."""

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in READS:
            metrics.API_WRITES.labels(verb=method.upper()).inc()
        return super().request(method, url, *args, **kwargs)


def api_client(pool_size: int = 8) -> client.ApiClient:
    cfg = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config(client_configuration=cfg)
    else:
        config.load_kube_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    api = client.ApiClient(configuration=cfg)
    api.rest_client.close()
    api.rest_client = CountingRESTClient(cfg)
    return api


def drained(response: Any) -> bytes:
    """Read a response sent with _preload_content=False to its end: only then does its connection go back to the
    pool (an unread one is dropped, and the next request pays a new TLS handshake)."""
    return response.data


def status_of(exc: ApiException) -> int:
    return int(getattr(exc, "status", 0) or 0)


def reason_of(exc: ApiException) -> str:
    try:
        return json.loads(exc.body).get("message", "") or str(exc.reason)
    except (TypeError, ValueError):
        return str(exc.reason)


def serves(api_client_: client.ApiClient, group: str, version: str, plural: str) -> bool:
    """Whether the API server serves `plural` in group/version (one discovery request)."""
    try:
        resources = client.CustomObjectsApi(api_client_).get_api_resources(group, version)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.name == plural for r in (resources.resources or []))
