"""The agent's loop: every pod bound to this node is run, reported and torn down as a kubelet would, with
local processes in place of containers. One thread owns all pod state and every process start; the watch,
the process waiters and the heartbeat only put work on its queue."""

from __future__ import annotations

import base64
import json
import logging
import queue
import shutil
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from . import machine
from .container_process import ContainerProcess, read_log_text
from .hosts_block import hosts_entries, write_block
from .kubelet_api import serve
from .launch_plan import LaunchError, build_launch_plan
from .layout import Layout, local_nodes
from .loopback_ips import LoopbackAllocator
from .memory_limit import memory_limit
from .node_heartbeat import NodeHeartbeat
from .node_identity import ensure_credentials
from .node_object import NodeResources
from .pod_events import PodEvents
from .pod_status import (
    ContainerResult,
    exit_reason,
    lost_results,
    running_status,
    terminated_status,
    termination_message,
    was_started,
)

log = logging.getLogger("ddpjob_localnode.agent")

HOST_IP = "127.0.0.1"
TERMINAL = ("Succeeded", "Failed")
# The operator's pod labels (ddpjob_operator.api). This package does not import the operator's:
# tests/unit/test_contract.py holds the two equal.
DDPJOB_LABELS = (
    ("job", "ddpjob.dev/job-name"),
    ("attempt", "ddpjob.dev/restart-attempt"),
    ("replica", "ddpjob.dev/replica-index"),
)


def pod_context(pod: dict) -> str:
    """`job=J attempt=A replica=R pod=NS/NAME`, from the DDPJob labels when the pod has them."""
    meta = pod.get("metadata", {})
    labels = meta.get("labels") or {}
    parts = [f"{key}={labels[label]}" for key, label in DDPJOB_LABELS if label in labels]
    return " ".join(parts + [f"pod={meta.get('namespace')}/{meta.get('name')}"])


@dataclass
class LocalPod:
    pod: dict
    pod_ip: str
    pod_dir: Path
    containers: dict[str, ContainerProcess] = field(default_factory=dict)
    kill_at: float | None = None
    gone: bool = False  # the pod object is deleted: nothing to report once the processes are reaped

    @property
    def uid(self) -> str:
        return self.pod["metadata"]["uid"]

    @property
    def deleting(self) -> bool:
        return bool(self.pod["metadata"].get("deletionTimestamp"))


class Agent:
    def __init__(self, layout: Layout, kubelet_port: int, hosts_file: Path, server: str):
        self.layout = layout
        self.kubelet_port = kubelet_port
        self.hosts_file = hosts_file
        self.server = server
        self.queue: queue.Queue = queue.Queue()
        self.pods: dict[str, LocalPod] = {}
        self.finished: set[str] = set()
        self.logs: dict[tuple[str, str, str], ContainerProcess] = {}
        self.ips = LoopbackAllocator(layout.index)
        self.stopping = threading.Event()
        self._memory_checked_at = 0.0

    # --- set-up ---------------------------------------------------------------------------------------------
    def connect(self) -> None:
        creds = ensure_credentials(
            self.layout.node_name,
            self.layout.pki_dir,
            self.layout.state_dir / "pki",
            self.server,
            self.layout.node_kubeconfig,
        )
        self.creds = creds
        self.api = config.new_client_from_config(config_file=str(creds.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.events = PodEvents(self.core, self.layout.node_name)
        nodes, index = local_nodes(), self.layout.index
        # Each of the LOCAL_NODES agents offers its share of the machine (at least one CPU).
        resources = NodeResources(
            max(1, machine.share(machine.cpu_count(), nodes, index)),
            machine.share(machine.memory_bytes(), nodes, index),
            machine.share(machine.gpu_count(), nodes, index),
        )
        # The heartbeat gets its own connection so that a slow pod call never delays a lease renewal.
        self.heartbeat = NodeHeartbeat(
            config.new_client_from_config(config_file=str(creds.kubeconfig)),
            self.layout.node_name,
            resources,
            self.kubelet_port,
        )

    def run(self) -> None:
        self.connect()
        write_block(self.hosts_file, self.layout.node_name, {})
        self.heartbeat.register()
        self.heartbeat.start()
        self.kubelet_server = serve(
            self.kubelet_port, self.creds.serving_cert, self.creds.serving_key, self.creds.ca_cert, self._log_lookup
        )
        threading.Thread(target=self._watch_pods, name="pod-watch", daemon=True).start()
        log.info(
            "local node %s ready: kubelet API on 127.0.0.1:%d, pods run from %s",
            self.layout.node_name,
            self.kubelet_port,
            self.layout.venv_bin,
        )
        (self.layout.state_dir / "ready").write_text(str(self.layout.node_name))
        try:
            self._loop()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        self.heartbeat.stop()
        try:
            self.heartbeat.post_not_ready()
        except Exception as err:  # the apiserver may be gone first (cluster-down): the lease runs out instead
            log.warning("could not mark node %s NotReady: %s", self.layout.node_name, err)
        for local in self.pods.values():
            for proc in local.containers.values():
                proc.kill()
        write_block(self.hosts_file, self.layout.node_name, {})
        (self.layout.state_dir / "ready").unlink(missing_ok=True)
        log.info("local node agent stopped; its processes were killed")

    # --- the loop -------------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                item = self.queue.get(timeout=0.5)
            except queue.Empty:
                item = None
            try:
                if item and item[0] == "pod":
                    self.on_pod(item[1], item[2])
                elif item and item[0] == "exited":
                    self.on_exited(item[1])
                elif item and item[0] == "sync":
                    self.on_sync(item[1])
                self._kill_overdue()
                self._enforce_memory_limits()
            except Exception:  # one bad pod must not stop the node
                log.exception("handling %s failed", item[:2] if item else "tick")

    def _kill_overdue(self) -> None:
        now = time.monotonic()
        for local in self.pods.values():
            if local.kill_at is not None and now >= local.kill_at:
                log.info("%s: grace period over, SIGKILL", pod_context(local.pod))
                for proc in local.containers.values():
                    proc.kill()
                local.kill_at = None

    def _enforce_memory_limits(self) -> None:
        # Each check walks /proc: once a second is enough (a kernel OOM kill is not instantaneous either).
        if time.monotonic() - self._memory_checked_at < 1.0:
            return
        self._memory_checked_at = time.monotonic()
        for local in self.pods.values():
            for proc in local.containers.values():
                if proc.enforce_memory_limit():
                    log.warning(
                        "%s: container %s over its memory limit (%d bytes): killed",
                        pod_context(local.pod),
                        proc.plan.container,
                        proc.memory_limit,
                    )
                    self.events.emit(
                        local.pod,
                        "OOMKilled",
                        f"Container {proc.plan.container} used more than its memory limit and was killed",
                        warning=True,
                    )

    def on_sync(self, uids: set[str]) -> None:
        """After a relist: pods that vanished while the watch was down count as deleted."""
        for uid in [u for u in self.pods if u not in uids]:
            self.on_pod("DELETED", self.pods[uid].pod)

    def on_pod(self, kind: str, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        local = self.pods.get(uid)
        if kind == "DELETED":
            self._forget(pod, local)
            return
        if local is not None:
            local.pod = pod
            if local.deleting and local.kill_at is None and any(p.running for p in local.containers.values()):
                self._terminate(local)
            return
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"].get("deletionTimestamp"):
            self._delete_now(pod)  # not running here: nothing to stop
        elif phase in TERMINAL or uid in self.finished:
            return
        elif was_started(pod):
            self._report_lost(pod)
        else:
            self._start(pod)

    def on_exited(self, uid: str) -> None:
        local = self.pods.get(uid)
        if local is None or any(p.running for p in local.containers.values()):
            return
        results = []
        for proc in local.containers.values():
            code, finished_at = proc.exit_code, proc.finished_at
            assert code is not None and finished_at is not None  # none is running (checked above)
            policy = next(
                (
                    c.get("terminationMessagePolicy")
                    for c in local.pod["spec"]["containers"]
                    if c["name"] == proc.plan.container
                ),
                None,
            )
            message = termination_message(
                _read(proc.plan.termination_log), read_log_text(proc.plan.log_file), code, policy
            )
            results.append(
                ContainerResult(
                    proc.plan.container,
                    code,
                    proc.started_at,
                    finished_at,
                    reason=exit_reason(code, proc.oom_killed),
                    message=message,
                    container_id=proc.container_id,
                )
            )
            log.info("%s: container %s exited with code %d", pod_context(local.pod), proc.plan.container, code)
        del self.pods[uid]
        self.ips.release(uid)
        self._write_hosts()
        if local.gone:
            shutil.rmtree(local.pod_dir, ignore_errors=True)
            return
        self._patch_status(local.pod, terminated_status(local.pod, results, datetime.now(UTC)))
        self.finished.add(uid)
        if local.deleting:
            self._delete_now(local.pod)

    # --- actions --------------------------------------------------------------------------------------------
    def _start(self, pod: dict) -> None:
        uid, meta = pod["metadata"]["uid"], pod["metadata"]
        pod_ip = self.ips.allocate(uid)
        view = json.loads(json.dumps(pod))
        view.setdefault("status", {}).update(
            {"podIP": pod_ip, "podIPs": [{"ip": pod_ip}], "hostIP": HOST_IP, "hostIPs": [{"ip": HOST_IP}]}
        )
        pod_dir = self.layout.pod_dir(meta["namespace"], meta["name"], uid)
        try:
            if pod["spec"].get("initContainers"):
                raise LaunchError("init containers are not supported in local mode")
            plans = [
                build_launch_plan(view, c, pod_dir, self.layout.hostpath_root, self.layout.venv_bin, self._lookup_key)
                for c in pod["spec"]["containers"]
            ]
            limits = {c["name"]: memory_limit(c) for c in pod["spec"]["containers"]}
        except (LaunchError, ValueError) as err:
            self._report_start_error(pod, str(err))
            return
        local = LocalPod(pod, pod_ip, pod_dir)
        self.pods[uid] = local
        self._write_hosts()
        images = ", ".join(sorted({c.get("image", "?") for c in pod["spec"]["containers"]}))
        self.events.emit(
            pod,
            "LocalMode",
            f"Image {images} is not used in local mode: running the command as "
            f"a local process from {self.layout.venv_bin}, pod IP {pod_ip}",
        )
        for plan in plans:
            proc = ContainerProcess(plan, lambda _proc: self.queue.put(("exited", uid)), limits[plan.container])
            local.containers[plan.container] = proc
            self.logs[(meta["namespace"], meta["name"], plan.container)] = proc
            log.info(
                "%s: started container %s as pid %d (ip %s): %s",
                pod_context(pod),
                plan.container,
                proc.proc.pid,
                pod_ip,
                " ".join(plan.argv),
            )
        ids = {name: proc.container_id for name, proc in local.containers.items()}
        self._patch_status(pod, running_status(pod, pod_ip, HOST_IP, datetime.now(UTC), ids))
        self.events.emit(pod, "Started", f"Started {len(plans)} container(s) as local processes")

    def _terminate(self, local: LocalPod) -> None:
        meta = local.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = local.pod["spec"].get("terminationGracePeriodSeconds", 30)
        local.kill_at = time.monotonic() + max(0, grace)
        log.info("%s: deleting, SIGTERM with %ss grace", pod_context(local.pod), grace)
        self.events.emit(local.pod, "Killing", f"Stopping the local processes (grace period {grace}s)")
        for proc in local.containers.values():
            proc.kill() if grace == 0 else proc.terminate()

    def _forget(self, pod: dict, local: LocalPod | None) -> None:
        meta = pod["metadata"]
        pod_dir = self.layout.pod_dir(meta["namespace"], meta["name"], meta["uid"])
        for key in [k for k, proc in self.logs.items() if proc.plan.log_file.is_relative_to(pod_dir)]:
            del self.logs[key]
        self.finished.discard(meta["uid"])
        if local is None:
            shutil.rmtree(pod_dir, ignore_errors=True)
            return
        # Force-deleted while running: no grace left. on_exited cleans up once the tree is gone.
        local.pod, local.gone = pod, True
        for proc in local.containers.values():
            proc.kill()

    def _report_lost(self, pod: dict) -> None:
        now = datetime.now(UTC)
        log.warning("%s: was running before the agent restarted; its processes are gone", pod_context(pod))
        self._patch_status(pod, terminated_status(pod, lost_results(pod, now), now))
        self.events.emit(
            pod,
            "ContainerStatusUnknown",
            "The local node agent restarted and the pod's processes were gone",
            warning=True,
        )
        self.finished.add(pod["metadata"]["uid"])

    def _report_start_error(self, pod: dict, message: str) -> None:
        now = datetime.now(UTC)
        log.warning("%s: cannot start: %s", pod_context(pod), message)
        self.ips.release(pod["metadata"]["uid"])
        results = [ContainerResult(c["name"], 128, now, now, "StartError", message) for c in pod["spec"]["containers"]]
        self._patch_status(pod, terminated_status(pod, results, now))
        self.events.emit(pod, "Failed", message, warning=True)
        self.finished.add(pod["metadata"]["uid"])

    def _delete_now(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self.core.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
                ),
            )
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    def _patch_status(self, pod: dict, body: dict) -> None:
        meta = pod["metadata"]
        for attempt in range(5):
            try:
                self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], body)
                return
            except ApiException as err:
                if err.status == 404:
                    return
                if attempt == 4 or err.status < 500 and err.status != 429:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def _write_hosts(self) -> None:
        entries = hosts_entries([(local.pod_ip, local.pod) for local in self.pods.values()])
        write_block(self.hosts_file, self.layout.node_name, entries)

    def _lookup_key(self, kind: str, namespace: str, name: str, key: str) -> str | None:
        try:
            if kind == "configMap":
                return (self.core.read_namespaced_config_map(name, namespace).data or {}).get(key)
            value = (self.core.read_namespaced_secret(name, namespace).data or {}).get(key)
            return base64.b64decode(value).decode() if value is not None else None
        except ApiException:
            return None

    def _log_lookup(self, namespace: str, name: str, container: str):
        proc = self.logs.get((namespace, name, container))
        if proc is None:
            return None
        return proc.plan.log_file, lambda: proc.running

    # --- the pod watch (its own thread) ---------------------------------------------------------------------
    def _watch_pods(self) -> None:
        selector = f"spec.nodeName={self.layout.node_name}"
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(self.creds.kubeconfig)))
        while not self.stopping.is_set():
            try:
                listed = json.loads(
                    core.list_pod_for_all_namespaces(field_selector=selector, _preload_content=False).data
                )
                for pod in listed["items"]:
                    self.queue.put(("pod", "ADDED", pod))
                self.queue.put(("sync", {p["metadata"]["uid"] for p in listed["items"]}))
                version = listed["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                    core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=version,
                    timeout_seconds=240,
                    allow_watch_bookmarks=False,
                ):
                    if event["type"] == "ERROR":
                        break
                    self.queue.put(("pod", event["type"], event["raw_object"]))
            except Exception as err:  # apiserver restarts, expired resourceVersions: relist
                log.warning("pod watch interrupted (%s); relisting", err)
                time.sleep(1)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
