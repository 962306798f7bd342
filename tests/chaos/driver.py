"""Drives a workload: creates the jobs (staggered), injects each job's next fault once all pods of its current
attempt run, succeeds its pods once its faults are spent, and waits for every job to end. It reads the
recorder's watch cache, so it costs no API calls while waiting, and it tolerates an apiserver that is down
(an action that fails is simply tried again)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

import urllib3

import faults as f
from recorder import TERMINAL, InvariantRecorder
from workload import JobScript

GROUP, VERSION, PLURAL = "ddpjob.dev", "v1alpha1", "ddpjobs"
LOST_FAULT_RETRY_SECONDS = 30.0


@dataclass
class JobRun:
    script: JobScript
    created: bool = False
    injected: int = 0
    attempt: int = 0  # the attempt whose pods we wait for
    succeeded_pods: set[str] = field(default_factory=set)
    done: bool = False
    node_lost_pending: bool = False
    tried_attempt: int = -1  # the attempt a fault was last sent to, and when: its answer may be lost
    tried_at: float = 0.0
    blip_attempt: int | None = None  # the attempt a node blip left running: nothing may restart it


class WorkloadDriver:
    def __init__(self, api: client.ApiClient, namespace: str, recorder: InvariantRecorder, scripts: list[JobScript],
                 seed: int, create_over_seconds: float = 10.0, finish_when=lambda: True):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.ns = namespace
        self.rec = recorder
        self.runs = {s.name: JobRun(s) for s in scripts}
        self.rng = random.Random(seed ^ 0x5EED)
        self.create_at = {s.name: i * create_over_seconds / max(1, len(scripts)) for i, s in enumerate(scripts)}
        self.faults_injected: dict[str, int] = {}
        self.finish_when = finish_when  # jobs whose faults are spent succeed only once this says so
        self.api_errors = 0
        self.last_api_error = ""
        self.node_down_since: float | None = None
        self.node_down_kind = ""

    def run(self, timeout: float) -> None:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            elapsed = time.monotonic() - started
            pending = [r for r in self.runs.values() if not r.done]
            if not pending:
                return
            for step in [lambda run=run: self._step(run, elapsed) for run in pending] + [self._node_lost_step]:
                try:
                    step()
                except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:  # apiserver down: retry
                    self.api_errors += 1
                    self.last_api_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            time.sleep(0.2)
        stuck = {r.script.name: (self.rec.job(r.script.name).status.get("phase") if self.rec.job(r.script.name)
                                 else None) for r in self.runs.values() if not r.done}
        for name, phase in stuck.items():
            self.rec.violation(f"job {name} did not reach its terminal phase in {timeout:.0f}s (phase {phase}; "
                               f"last API error: {self.last_api_error or 'none'})")

    # --- one job --------------------------------------------------------------------------------------------
    def _step(self, run: JobRun, elapsed: float) -> None:
        script = run.script
        if not run.created:
            if elapsed >= self.create_at[script.name]:
                self._create(script)
                run.created = True
            return
        view = self.rec.job(script.name)
        if view is None:
            return
        if view.status.get("phase") in TERMINAL:
            run.done = True
            return
        if run.blip_attempt is not None and view.status.get("attempt", 0) > run.blip_attempt:
            self.rec.violation(f"job {script.name} restarted after a node blip within the node-lost grace "
                               f"(attempt {run.blip_attempt} -> {view.status.get('attempt')})")
            run.blip_attempt = None
        if run.node_lost_pending:
            return
        if run.injected < len(script.faults) and view.status.get("attempt", 0) > run.attempt:
            # The injection's answer was lost (apiserver outage) but the fault landed: the operator already
            # moved the group to a new attempt. Count it, or the driver waits for an attempt that has passed.
            self._count(script.faults[run.injected], run)
            return
        if run.injected < len(script.faults):
            pods = self.rec.running_pods(script.name, run.attempt)
            # A fault lands as soon as the attempt's pods run, whatever the operator has written so far: the pods'
            # tracking finalizer makes a pod deleted before the launch is recorded count all the same.
            if len(pods) < script.replicas or view.status.get("attempt") != run.attempt:
                return
            fault = script.faults[run.injected]
            if fault.kind in f.NODE_FAULTS:
                run.node_lost_pending = True
                return
            # One fault per attempt: a request whose answer was lost in an outage may still have landed, and a
            # second fault in the same attempt would merge into one group restart. Retry only if it did not land.
            if run.tried_attempt == run.attempt and time.monotonic() - run.tried_at < LOST_FAULT_RETRY_SECONDS:
                return
            run.tried_attempt, run.tried_at = run.attempt, time.monotonic()
            victim = self.rng.choice(pods)["metadata"]["name"]
            f.inject(self.core, self.ns, victim, fault)
            self._count(fault, run)
            return
        if script.outcome().phase == "Failed":
            return  # the last fault ends it; wait
        if not self.finish_when():
            return
        pods = self.rec.running_pods(script.name, run.attempt)
        # Once some pods are marked Succeeded they no longer count as running; an outage in the middle of this loop
        # must not leave the rest waiting for a full set that can never come back.
        if len(pods) < script.replicas and not run.succeeded_pods:
            return
        for pod in pods:
            name = pod["metadata"]["name"]
            if pod["metadata"]["uid"] not in run.succeeded_pods:
                f.succeed(self.core, self.ns, name)
                run.succeeded_pods.add(pod["metadata"]["uid"])

    @staticmethod
    def _ended_by(script: JobScript, used: int) -> bool:
        prefix = JobScript(script.name, script.replicas, script.policy, script.backoff_limit, script.faults[:used])
        return prefix.outcome().phase == "Failed"

    def _count(self, fault: f.Fault, run: JobRun) -> None:
        run.injected += 1
        self.faults_injected[fault.label()] = self.faults_injected.get(fault.label(), 0) + 1
        if fault.kind != f.NODE_BLIP and not self._ended_by(run.script, run.injected):  # a blip restarts nothing
            run.attempt += 1

    def _create(self, script: JobScript) -> None:
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, script.manifest())
        except ApiException as exc:
            if exc.status != 409:  # created by an earlier try whose answer was lost
                raise

    # --- node faults: every pinned job that is ready sees the spare node go at once ------------------------
    def _node_lost_step(self) -> None:
        """A blip: the node NotReady for BLIP_SECONDS, then back (within the node-lost grace: nothing restarts).
        Node lost: down until every job on it has moved to a new attempt (or ended), then back."""
        waiting = [r for r in self.runs.values() if r.node_lost_pending]
        if not waiting:
            return
        node = waiting[0].script.node
        # Once the node is down for good the fault is counted (injected moved past it): remember what is under way.
        kind = self.node_down_kind if self.node_down_since is not None else waiting[0].script.faults[
            waiting[0].injected].kind
        expecting = [r for r in self.runs.values() if r.script.node == node and not r.done
                     and r.injected < len(r.script.faults) and r.script.faults[r.injected].kind == kind]
        if self.node_down_since is None:
            if len(waiting) < len(expecting):
                return  # wait until every pinned job runs, so one node failure hits them all
            f.take_node_down(self.core, node)
            self.node_down_since, self.node_down_kind = time.monotonic(), kind
            for run in waiting:
                run.blip_attempt = run.attempt if kind == f.NODE_BLIP else None
                if kind == f.NODE_LOST:
                    self._count(f.Fault(f.NODE_LOST), run)
            return
        if kind == f.NODE_BLIP:
            if time.monotonic() - self.node_down_since < f.BLIP_SECONDS:
                return
            f.bring_node_up(self.core, node)
            if not f.node_ready(self.core, node):
                return  # kwok reports it Ready again on its next heartbeat
            for run in waiting:
                self._count(f.Fault(f.NODE_BLIP), run)
                run.node_lost_pending = False
            self.node_down_since = None
            return
        moved_on = all((self.rec.job(r.script.name).status.get("attempt", 0) >= r.attempt)
                       or self.rec.job(r.script.name).status.get("phase") in TERMINAL for r in waiting)
        if moved_on:
            f.bring_node_up(self.core, node)
            for run in waiting:
                run.node_lost_pending = False
            self.node_down_since = None

    # --- figures --------------------------------------------------------------------------------------------
    @property
    def total_faults(self) -> int:
        return sum(self.faults_injected.values())

    def check_outcomes(self) -> None:
        """Every job ended in the phase, with the reason and restart count, that its script says."""
        for run in self.runs.values():
            want = run.script.outcome()
            view = self.rec.job(run.script.name)
            status = view.status if view else {}
            got_reason = "Succeeded" if status.get("phase") == "Succeeded" else next(
                (c.get("reason") for c in status.get("conditions") or [] if c.get("type") == "Failed"), None)
            got = (status.get("phase"), got_reason, status.get("restarts"), status.get("platformRestarts", 0))
            if got != (want.phase, want.reason, want.restarts, want.platform_restarts):
                faults = ", ".join(x.label() for x in run.script.faults)
                self.rec.violation(
                    f"job {run.script.name} ({run.script.policy}, backoffLimit {run.script.backoff_limit}, "
                    f"faults [{faults}], injected {run.injected}): want {want.phase}/{want.reason}/restarts "
                    f"{want.restarts}/platform {want.platform_restarts}, got {got[0]}/{got[1]}/restarts {got[2]}"
                    f"/platform {got[3]}")
