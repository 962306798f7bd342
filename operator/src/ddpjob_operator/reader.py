"""Reads one job's world fresh from the API server (quorum reads, no cache): the job, its pods, their nodes,
whether its Service exists."""

from __future__ import annotations

from datetime import datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from . import api
from .kube import REQUEST_TIMEOUT, body, status_of
from .plan import Observed


class ClusterReader:
    def __init__(self, api_client: client.ApiClient):
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.networking = client.NetworkingV1Api(api_client)

    def read(self, namespace: str, name: str, now: datetime) -> Observed | None:
        """None when the job is gone (or being deleted: the garbage collector owns its children then)."""
        try:
            job = self.custom.get_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, name,
                                                           _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if status_of(exc) == 404:
                return None
            raise
        if job["metadata"].get("deletionTimestamp"):
            return None
        pods = body(self.core.list_namespaced_pod(
            namespace, label_selector=api.selector(name), _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT))["items"]
        # Only pods this job controls: a user's pod that borrows the label is not ours to count or delete.
        uid = job["metadata"]["uid"]
        pods = [p for p in pods if any(o.get("uid") == uid and o.get("controller")
                                       for o in p["metadata"].get("ownerReferences") or [])]
        nodes = self._nodes({p["spec"].get("nodeName") for p in pods} - {None, ""})
        wants_policy = bool((job.get("spec") or {}).get("networkPolicy"))
        return Observed(job=job, pods=pods, nodes=nodes, service_exists=self._service_exists(namespace, name),
                        now=now, network_policy_exists=not wants_policy or self._policy_exists(namespace, name))

    def _nodes(self, names: set[str]) -> dict[str, dict]:
        nodes = {}
        for name in sorted(names):
            try:
                nodes[name] = body(self.core.read_node(name, _preload_content=False,
                                                       _request_timeout=REQUEST_TIMEOUT))
            except ApiException as exc:
                if status_of(exc) != 404:
                    raise
        return nodes

    def _policy_exists(self, namespace: str, name: str) -> bool:
        return _exists(self.networking.read_namespaced_network_policy, namespace, name)

    def _service_exists(self, namespace: str, name: str) -> bool:
        return _exists(self.core.read_namespaced_service, namespace, name)


def _exists(read, namespace: str, name: str) -> bool:
    """A namespaced child is there (404 means no; any other error is the caller's to retry)."""
    try:
        read(name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        return True
    except ApiException as exc:
        if status_of(exc) == 404:
            return False
        raise
