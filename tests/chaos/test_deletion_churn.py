"""Deletions in the fault mix (docs/reliability.md, "Deleting things never hangs"). While 20 jobs take pod faults
and the operator is killed at random moments, a churn thread (seeded) keeps:
- deleting a job and re-creating it under the same name at once or a moment later, each new one having to run
  with pods of its own;
- creating side namespaces with running jobs and deleting the whole namespace.
The usual invariants hold for the main workload (no orphan, no duplicate, no lost failure: each job ends as its
policy says), and a new one for everything: no pod stays Terminating longer than TERMINATING_BOUND_SECONDS, and
every deleted namespace is gone within it."""

from __future__ import annotations

import random
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from chaos_run import run_chaos
from driver import GROUP, PLURAL, VERSION
from operator_chaos import OperatorUnderChaos
from support.operator import OperatorProcess
from workload import build_workload

pytestmark = pytest.mark.slow

JOBS = 20
FAULTS = 30
CHURN_CYCLES = 8
SIDE_NAMESPACES = 3
SIDE_JOBS = 4
TERMINATING_BOUND_SECONDS = 90  # generous for a loaded 2-core machine with operator kills; the aim is seconds


def side_job(name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DDPJob", "metadata": {"name": name},
            "spec": {"replicas": 2, "gpusPerReplica": 0, "runPolicy": {"restartBackoffSeconds": 0},
                     "template": {"spec": {
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                         "containers": [{"name": "trainer", "image": "example.invalid/trainer:1"}]}}}}


class DeletionChurn(threading.Thread):
    def __init__(self, api: client.ApiClient, namespace: str, seed: int):
        super().__init__(daemon=True, name="deletion-churn")
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.ns = namespace
        self.rng = random.Random(seed ^ 0xDE1E7E)
        self.violations: list[str] = []
        self.cycles = self.namespaces_deleted = 0
        self.first_terminating: dict[str, float] = {}  # pod uid -> when first seen Terminating
        self.namespaces = [f"{namespace}-side{i}" for i in range(SIDE_NAMESPACES)]

    # --- the invariant, checked every few seconds over every namespace involved -------------------------------
    def check_terminating(self) -> None:
        now = time.monotonic()
        for ns in [self.ns, *self.namespaces]:
            try:
                pods = self.core.list_namespaced_pod(ns).items
            except ApiException:
                continue  # the API server may be down, or the namespace gone
            for pod in pods:
                if pod.metadata.deletion_timestamp is None:
                    continue
                since = self.first_terminating.setdefault(pod.metadata.uid, now)
                if now - since > TERMINATING_BOUND_SECONDS:
                    self.violations.append(f"pod {ns}/{pod.metadata.name} Terminating for over "
                                           f"{TERMINATING_BOUND_SECONDS}s (finalizers {pod.metadata.finalizers})")
                    self.first_terminating[pod.metadata.uid] = float("inf")  # report once

    def wait(self, predicate, timeout: float, what: str) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_terminating()
            try:
                if predicate():
                    return True
            except ApiException:
                pass
            time.sleep(1)
        self.violations.append(f"timed out after {timeout:.0f}s: {what}")
        return False

    def own_pods_running(self, ns: str, name: str, uid: str) -> bool:
        pods = self.core.list_namespaced_pod(ns, label_selector=f"ddpjob.dev/job-name={name}").items
        return sum(1 for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
                   and p.metadata.owner_references[0].uid == uid) == 2

    # --- the churn ------------------------------------------------------------------------------------------
    def recreate_cycle(self) -> None:
        name = "churn"
        job = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, side_job(name))
        uid = job["metadata"]["uid"]
        self.wait(lambda: self.own_pods_running(self.ns, name, uid), 120,
                  f"cycle {self.cycles}: re-created job {name} running its own pods")
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)
        time.sleep(self.rng.random() * 1.5)  # re-created at once or a moment later
        self.cycles += 1

    def namespace_cycle(self, ns: str) -> None:
        self.core.create_namespace({"metadata": {"name": ns}})
        self.wait(lambda: self.core.read_namespaced_service_account("default", ns), 60, f"{ns} ready")
        for i in range(SIDE_JOBS):
            self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, side_job(f"s{i}"))
        self.wait(lambda: sum(p.status.phase == "Running" for p in self.core.list_namespaced_pod(ns).items)
                  == 2 * SIDE_JOBS, 120, f"{ns}: side jobs running")
        self.core.delete_namespace(ns)

        def gone() -> bool:
            try:
                self.core.read_namespace(ns)
            except ApiException as exc:
                return exc.status == 404
            return False
        if self.wait(gone, TERMINATING_BOUND_SECONDS, f"namespace {ns} gone after its deletion"):
            self.namespaces_deleted += 1

    def run(self) -> None:
        work = [self.recreate_cycle] * CHURN_CYCLES + [
            (lambda ns=ns: self.namespace_cycle(ns)) for ns in self.namespaces]
        self.rng.shuffle(work)
        for step in work:
            try:
                step()
            except ApiException as exc:
                self.violations.append(f"churn step failed: {exc.status} {exc.reason}")
        self.wait(lambda: not self.core.list_namespaced_pod(self.ns, label_selector="ddpjob.dev/job-name=churn")
                  .items, 120, "the last churn job's pods gone")


@pytest.fixture
def glob_operator(cluster, crds, namespace, tmp_path):
    """The operator for the main namespace and its side namespaces (a glob, as users run it)."""
    op = OperatorProcess(cluster.kubeconfig, [f"{namespace}*"], tmp_path / "operator.log",
                         env={"DDPJOB_RESYNC_SECONDS": "15"}, verbose=False)
    yield op
    op.stop()


def test_deletions_and_recreations_amid_faults_leave_nothing_stuck(api, namespace, glob_operator, seed, figures):
    scripts = build_workload(seed, jobs=JOBS, faults=FAULTS, prefix="d")
    chaos = OperatorUnderChaos(glob_operator, seed, kill=True, min_kills=2)
    churn = DeletionChurn(api, namespace, seed)
    recorder, driver = run_chaos(api, namespace, chaos, scripts, seed, figures, timeout=420, during=churn)
    figures.detail += (f"; {churn.cycles} delete+recreate cycles, {churn.namespaces_deleted} namespaces deleted, "
                       f"{len(churn.first_terminating)} pods seen Terminating")
    if recorder.violations or churn.violations:
        print(f"----- operator log -----\n{glob_operator.log()[-20000:]}")
    assert recorder.violations == [], "\n".join(recorder.violations[:30])
    assert churn.violations == [], "\n".join(churn.violations[:30])
    assert (churn.cycles, churn.namespaces_deleted) == (CHURN_CYCLES, SIDE_NAMESPACES)
