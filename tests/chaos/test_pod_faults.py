"""100 random pod failures across 50 jobs: exit codes (permanent and retryable), kubelet evictions, API
evictions, deletions, and a node going NotReady under several jobs at once: first for a blip within the node-lost
grace (which costs nothing), then for good. Each job ends exactly as its
restartPolicy and backoffLimit say, and the invariants hold throughout."""

from __future__ import annotations

import pytest
from kubernetes import client

import faults
from chaos_run import run_chaos
from operator_chaos import OperatorUnderChaos
from support.cluster import wait_until
from workload import build_workload

pytestmark = pytest.mark.slow

JOBS = 50
FAULTS = 100
NODE_LOST_JOBS = 3


@pytest.fixture
def spare_node(api, namespace):
    core = client.CoreV1Api(api)
    name = f"chaos-spare-{namespace[-5:]}"
    faults.create_spare_node(core, name)
    wait_until(lambda: faults.node_ready(core, name), timeout=60, what=f"node {name} Ready")
    yield name
    faults.delete_node(core, name)


def test_pod_faults_end_each_job_as_its_policy_says(api, namespace, operator_process, spare_node, seed, figures):
    scripts = build_workload(seed, jobs=JOBS, faults=FAULTS, prefix="p", node_lost_jobs=NODE_LOST_JOBS,
                             spare_node=spare_node)
    chaos = OperatorUnderChaos(operator_process, seed, kill=False)
    recorder, driver = run_chaos(api, namespace, chaos, scripts, seed, figures, timeout=300)

    assert recorder.violations == [], "\n".join(recorder.violations[:30])
    assert driver.total_faults == sum(s.outcome().faults_used for s in scripts) >= FAULTS * 0.9
    kinds = {label.split("(")[0] for label in driver.faults_injected}
    assert kinds == {faults.EXIT_CODE, faults.KUBELET_EVICTION, faults.API_EVICTION, faults.DELETION,
                     faults.NODE_LOST, faults.NODE_BLIP}
    outcomes = {(s.outcome().phase, s.outcome().reason) for s in scripts}
    assert ("Succeeded", "Succeeded") in outcomes and ("Failed", "BackoffLimitExceeded") in outcomes
