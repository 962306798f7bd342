"""Carries out a Plan with the kubernetes client, in the order the Plan documents. Every call is idempotent:
deletions carry a uid precondition (never the pod of a newer attempt that reuses the name), and creations
treat AlreadyExists as done. Each write that succeeds is recorded in the Expectations, so the next pass waits
until the watch cache shows it."""

from __future__ import annotations

import copy
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from .. import api, metrics
from ..admission import kueue
from ..placement import gang
from ..state import owner_refs
from ..state.plan import Observed, Plan
from ..state.status import JobStatus
from ..timefmt import format_time
from .expectations import Expectations
from .kube import REQUEST_TIMEOUT, drained, reason_of, status_of
from .watch_cache import NETWORK_POLICY, SERVICE

log = logging.getLogger("ddpjob.applier")

CREATED, EXISTED, REJECTED = "created", "existed", "rejected"


@dataclass
class ApplyResult:
    status_written: bool = False
    conflict: bool = False
    job_gone: bool = False
    created_pods: int = 0
    # (pod, HTTP status, message) of creations the API server refused, AlreadyExists included when the pod of that
    # name is not this job's.
    rejected: list[tuple[str, int, str]] = field(default_factory=list)
    service_conflict: str | None = None  # a Service of the job's name exists that the job does not control
    network_policy_conflict: str | None = None  # the same for the NetworkPolicy the job asked for


class PlanApplier:
    def __init__(self, api_client: client.ApiClient, expectations: Expectations):
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.networking = client.NetworkingV1Api(api_client)
        self.expect = expectations

    def owners_live(self, key: tuple[str, str], uid: str) -> bool:
        """Read from the API server: the job (this uid) and its namespace both exist and neither is being deleted.
        False on any error, and the pass then waits out the deletion's settle time (failures.py)."""
        ns, name = key
        try:
            job = self.custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, ns, api.PLURAL, name, _request_timeout=REQUEST_TIMEOUT
            )
            namespace = self.core.read_namespace(ns, _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, OSError, HTTPError) as exc:
            log.debug("could not read the job and its namespace: %s", exc, extra={"job": f"{ns}/{name}"})
            return False
        meta = job.get("metadata") or {}
        return (
            meta.get("uid") == uid
            and not meta.get("deletionTimestamp")
            and namespace.metadata.deletion_timestamp is None
            and (namespace.status is None or namespace.status.phase != "Terminating")
        )

    def apply(self, obs: Observed, plan: Plan) -> ApplyResult:
        meta = obs.job["metadata"]
        ns, job = meta["namespace"], meta["name"]
        key = (ns, job)
        result = ApplyResult()
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in obs.pods + obs.lighthouses}
        by_name = {p["metadata"]["name"]: p for p in obs.pods}
        # One after another, in the Plan's order: sending these at once made the chaos suites count an extra failure
        # now and then (a pod of the new attempt deleted right after its creation), not yet understood.
        for pod in plan.delete_pods:
            self._delete_pod(key, pod, uids.get(pod), None)
        for pod in plan.force_delete_pods:
            self._delete_pod(key, pod, uids.get(pod), 0)
        for pod in plan.release_pods:
            self.release_pod(key, by_name[pod])
        foreign = {p["metadata"]["uid"]: p for p in obs.foreign_pods}
        for uid in plan.release_foreign_pods:
            self.release_pod(key, foreign[uid])
        for podgroup in plan.delete_podgroups:
            self._delete_podgroup(key, podgroup)
        self._apply_workloads(key, plan)
        creations: list[Callable[[], tuple[str, str, int, str] | bool | None]] = []
        if plan.create_service is not None:
            call = functools.partial(self.core.create_namespaced_service, ns, plan.create_service)
            owner = meta["uid"]
            read = functools.partial(self.core.read_namespaced_service, job, ns, _request_timeout=REQUEST_TIMEOUT)
            if not self._create_child(key, SERVICE, call, read, owner):
                result.service_conflict = (
                    f"Service {ns}/{job} exists and is not this job's (its controller is not DDPJob uid {owner}); "
                    "delete or rename it"
                )
                return result  # worker DNS would never resolve: no pods
        if plan.create_network_policy is not None:
            call = functools.partial(self.networking.create_namespaced_network_policy, ns, plan.create_network_policy)
            read = functools.partial(
                self.networking.read_namespaced_network_policy, job, ns, _request_timeout=REQUEST_TIMEOUT
            )
            if not self._create_child(key, NETWORK_POLICY, call, read, meta["uid"]):
                result.network_policy_conflict = (
                    f"NetworkPolicy {ns}/{job} exists and is not this job's (its controller is not DDPJob uid "
                    f"{meta['uid']}); delete or rename it: the job runs only with the isolation it asked for"
                )
                return result
        if plan.create_podgroup is not None:  # before its pods: a pod whose PodGroup is missing waits unplaced
            creations.append(functools.partial(self._create_podgroup, key, plan.create_podgroup))
        creations += [functools.partial(self._create_pod, key, pod) for pod in plan.create_pods]
        for outcome in [create() for create in creations]:
            if not isinstance(outcome, tuple):
                continue
            what, pod_name, code, message = outcome
            if what == CREATED:
                result.created_pods += 1
            elif what == REJECTED:
                result.rejected.append((pod_name, code, message))
        if result.rejected:
            return result  # the status must not claim pods that do not exist
        if plan.defer_status:
            return result  # its events go out with the status, in the pass that writes it
        if plan.status is not None:
            written = self.write_status(obs.job, plan.status, result)
            if not written:
                return result
        self.post_events(obs.job, plan, obs.now)
        if plan.delete_job:
            self._delete_job(ns, job, meta["uid"], result)
        return result

    def write_status(self, job: dict, status: JobStatus, result: ApplyResult) -> bool:
        meta = job["metadata"]
        new = copy.deepcopy(job)
        new["status"] = status
        try:
            # PUT with the resourceVersion we read: a concurrent change (a spec edit, another writer) makes this
            # a 409 and the pass is simply re-run on fresh state.
            drained(
                self.custom.replace_namespaced_custom_object_status(
                    api.GROUP,
                    api.VERSION,
                    meta["namespace"],
                    api.PLURAL,
                    meta["name"],
                    new,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            )
        except ApiException as exc:
            if status_of(exc) == 409:  # the cache was behind: the pass re-runs once the watch catches up
                self.expect.wrote_status((meta["namespace"], meta["name"]), meta["resourceVersion"])
                result.conflict = True
                return False
            if status_of(exc) == 404:
                result.job_gone = True
                return False
            raise
        self.expect.wrote_status((meta["namespace"], meta["name"]), meta["resourceVersion"])
        result.status_written = True
        return True

    def post_events(self, job: dict, plan: Plan, now: datetime) -> None:
        meta = job["metadata"]
        for event in plan.events:
            event_body = {
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {
                    "apiVersion": api.API_VERSION,
                    "kind": api.KIND,
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "type": event.type,
                "reason": event.reason,
                "message": event.message[:1024],
                "firstTimestamp": format_time(now),
                "lastTimestamp": format_time(now),
                "count": 1,
                "source": {"component": api.MANAGED_BY},
                "reportingComponent": api.MANAGED_BY,
            }
            try:
                drained(
                    self.core.create_namespaced_event(
                        meta["namespace"], event_body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                    )
                )
            except ApiException as exc:
                # Events are best effort: the status already says the same thing.
                log.warning(
                    "could not post event %s: %s",
                    event.reason,
                    reason_of(exc),
                    extra={"job": f"{meta['namespace']}/{meta['name']}"},
                )

    def _delete_pod(self, key: tuple[str, str], pod: str, uid: str | None, grace: int | None) -> None:
        ns, job = key
        options = client.V1DeleteOptions(
            grace_period_seconds=grace, preconditions=client.V1Preconditions(uid=uid) if uid else None
        )
        try:
            drained(
                self.core.delete_namespaced_pod(
                    pod, ns, body=options, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
            log.info("force-deleted pod" if grace == 0 else "deleted pod", extra={"job": f"{ns}/{job}", "pod": pod})
        except ApiException as exc:
            if status_of(exc) not in (404, 409):  # gone already, or the name now belongs to a newer pod
                raise
            return
        if uid and grace != 0:
            self.expect.deleted_pod(key, uid)

    def free_orphans(self, key: tuple[str, str], pods: list[dict], plan: Plan) -> None:
        """A gone or deleted job's plan (orphans.py), in its order: finalizers first, then the PodGroups, whose
        protection finalizer the controller drops once their pods are gone, then the pods, at their own grace."""
        by_name = {p["metadata"]["name"]: p for p in pods}
        for name in plan.release_pods:
            self.release_pod(key, by_name[name])
        for podgroup in plan.delete_podgroups:
            self._delete_podgroup(key, podgroup)
        for name in plan.delete_pods:
            self._delete_pod(key, name, by_name[name]["metadata"]["uid"], None)

    def release_pod(self, key: tuple[str, str], pod: dict) -> None:
        """Drop the tracking finalizer from the pod as the cache shows it. The JSON patch first tests the uid (never
        a newer pod that reuses the name) and that our entry is where the cache saw it, then removes only it; if
        either changed, the API server refuses (422) and a later pass re-plans from the fresh cache."""
        ns, job = key
        meta = pod["metadata"]
        patch = owner_refs.release_patch(meta["uid"], meta.get("finalizers"))
        if patch is None:
            return
        try:
            drained(
                self.core.patch_namespaced_pod(
                    meta["name"], ns, patch, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
        except ApiException as exc:
            if status_of(exc) not in (404, 409, 422):
                raise
            return
        self.expect.released_pod(key, meta["uid"])
        log.debug("released tracking finalizer", extra={"job": f"{ns}/{job}", "pod": meta["name"]})

    def _create_podgroup(self, key: tuple[str, str], body: dict[str, Any]) -> None:
        call = functools.partial(
            self.custom.create_namespaced_custom_object, gang.GROUP, gang.VERSION, key[0], gang.PLURAL, body
        )
        if self._create(functools.partial(call, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)):
            log.info("created PodGroup", extra={"job": f"{key[0]}/{key[1]}", "podgroup": body["metadata"]["name"]})

    def _delete_podgroup(self, key: tuple[str, str], name: str) -> None:
        self._delete_custom(gang.GROUP, gang.VERSION, key[0], gang.PLURAL, name)
        log.info("deleted PodGroup %s", name, extra={"job": f"{key[0]}/{key[1]}"})

    def _delete_custom(self, group: str, version: str, namespace: str, plural: str, name: str) -> None:
        """Delete a namespaced custom object; already gone is done."""
        try:
            drained(
                self.custom.delete_namespaced_custom_object(
                    group, version, namespace, plural, name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
        except ApiException as exc:
            if status_of(exc) != 404:
                raise

    def _apply_workloads(self, key: tuple[str, str], plan: Plan) -> None:
        """Kueue's Workload of the job (kueue.py): create, delete an earlier shape's, update its status. Each is
        independent of the job's status write; a conflict is left to the next pass, which the watch wakes."""
        fields = {"job": f"{key[0]}/{key[1]}"}
        if plan.create_workload is not None:
            body = plan.create_workload
            call = functools.partial(
                self.custom.create_namespaced_custom_object, kueue.GROUP, kueue.VERSION, key[0], kueue.WORKLOADS, body
            )
            if self._create(functools.partial(call, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)):
                log.info(
                    "created Workload %s (queue %s)", body["metadata"]["name"], body["spec"]["queueName"], extra=fields
                )
        for name in plan.delete_workloads:
            self._delete_custom(kueue.GROUP, kueue.VERSION, key[0], kueue.WORKLOADS, name)
        if plan.workload_active is not None:
            change = plan.workload_active
            # The mark goes on with a deactivation and off with the activation, in the same write, from the
            # resourceVersion the decision read: a Workload changed meanwhile (409) is decided again.
            body = {
                "metadata": {
                    "resourceVersion": change.resource_version or None,
                    "annotations": {kueue.DEACTIVATED_BY: None if change.active else "true"},
                },
                "spec": {"active": change.active},
            }
            try:
                drained(
                    self.custom.patch_namespaced_custom_object(
                        kueue.GROUP,
                        kueue.VERSION,
                        key[0],
                        kueue.WORKLOADS,
                        change.name,
                        body,
                        _preload_content=False,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
                verb = "activated" if change.active else "deactivated"
                log.info("Workload %s %s", change.name, verb, extra=fields)
            except ApiException as exc:
                if status_of(exc) not in (404, 409):
                    raise
        write = plan.workload_write
        if write is None:
            return
        body = {"metadata": {"resourceVersion": write.resource_version}, "status": write.status}
        try:
            drained(
                self.custom.patch_namespaced_custom_object_status(
                    kueue.GROUP,
                    kueue.VERSION,
                    key[0],
                    kueue.WORKLOADS,
                    write.name,
                    body,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            )
        except ApiException as exc:
            if status_of(exc) not in (404, 409):
                raise
            log.debug(
                "Workload %s changed under us (%s); the next pass writes again",
                write.name,
                status_of(exc),
                extra=fields,
            )

    def _delete_job(self, ns: str, name: str, uid: str, result: ApplyResult) -> None:
        options = client.V1DeleteOptions(propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid))
        try:
            self.custom.delete_namespaced_custom_object(
                api.GROUP, api.VERSION, ns, api.PLURAL, name, body=options, _request_timeout=REQUEST_TIMEOUT
            )
            result.job_gone = True
        except ApiException as exc:
            if status_of(exc) not in (404, 409):
                raise

    def _create_child(
        self,
        key: tuple[str, str],
        kind: str,
        call: Callable[..., Any],
        read: Callable[[], Any] | None = None,
        owner: str | None = None,
    ) -> bool:
        """Create a child; False when one of its name exists and `owner` does not control it (read back)."""
        if self._create(functools.partial(call, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)):
            self.expect.created_child(key, kind)
            return True
        if read is None or owner is None:
            return True
        return owner_refs.controlled_by(read().metadata.owner_references, owner)

    def _create_pod(self, key: tuple[str, str], pod: dict[str, Any]) -> tuple[str, str, int, str]:
        """(CREATED | EXISTED | REJECTED, pod, HTTP status, message)."""
        name = pod["metadata"]["name"]
        try:
            created = self._create(
                functools.partial(
                    self.core.create_namespaced_pod,
                    key[0],
                    pod,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            )
        except ApiException as exc:
            return REJECTED, name, status_of(exc), reason_of(exc)
        if created is None:
            return self._existing_pod(key, pod)
        metrics.PODS_CREATED.inc()
        self.expect.created_pod(key, json.loads(created)["metadata"]["uid"])
        log.info(
            "created pod",
            extra={
                "job": f"{key[0]}/{key[1]}",
                "pod": name,
                "attempt": pod["metadata"]["labels"].get(api.LABEL_ATTEMPT, "-"),
            },
        )
        return CREATED, name, 201, ""

    def _existing_pod(self, key: tuple[str, str], pod: dict[str, Any]) -> tuple[str, str, int, str]:
        """A create met AlreadyExists: fine if the pod of that name is ours (the cache was behind), a refusal if
        it is someone else's (it would never run our rank)."""
        name = pod["metadata"]["name"]
        owner = pod["metadata"]["ownerReferences"][0]["uid"]
        try:
            existing = self.core.read_namespaced_pod(name, key[0], _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if status_of(exc) == 404:  # gone since: the next pass creates it
                return EXISTED, name, 409, ""
            raise
        refs = existing.metadata.owner_references
        if owner_refs.controlled_by(refs, owner):
            return EXISTED, name, 409, ""
        holder = owner_refs.describe_controller(refs)
        going = " and is being deleted" if existing.metadata.deletion_timestamp else ""
        return (
            REJECTED,
            name,
            409,
            f"a pod named {name} exists{going} and is not this job's: its controller is {holder}",
        )

    @staticmethod
    def _create(call) -> bytes | None:
        """The API server's answer (raw JSON), or None when the object already exists (a create that already
        happened)."""
        try:
            return drained(call())
        except ApiException as exc:
            if status_of(exc) == 409:
                return None
            raise
