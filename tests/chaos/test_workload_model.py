"""The chaos suite's own model of how a job must end: the README's restart rules, table-driven. Pure."""

from __future__ import annotations

import pytest

from faults import API_EVICTION, DELETION, EXIT_CODE, KUBELET_EVICTION, NODE_BLIP, NODE_LOST, Fault
from workload import JobScript, Outcome, build_workload

E1, E3, E137, EVICT, DEL, NODE = (Fault(EXIT_CODE, 1), Fault(EXIT_CODE, 3), Fault(EXIT_CODE, 137),
                                  Fault(KUBELET_EVICTION), Fault(DELETION), Fault(NODE_LOST))

CASES = [
    ("no faults succeeds", "OnFailure", 3, [], Outcome("Succeeded", "Succeeded", 0, 0)),
    ("OnFailure restarts on any failure", "OnFailure", 3, [E1, EVICT, DEL],
     Outcome("Succeeded", "Succeeded", 1, 3, 2)),
    ("OnFailure budget exhausted", "OnFailure", 1, [E137, E1], Outcome("Failed", "BackoffLimitExceeded", 1, 2)),
    ("the platform's failures never spend backoffLimit", "OnFailure", 0, [DEL, EVICT, NODE, Fault(API_EVICTION)],
     Outcome("Succeeded", "Succeeded", 0, 4, 4)),
    ("backoffLimit 0 fails at the trainer's first", "OnFailure", 0, [DEL, E1],
     Outcome("Failed", "BackoffLimitExceeded", 0, 2, 1)),
    ("platformFailureLimit reached", "OnFailure", 3, [EVICT] * 21,
     Outcome("Failed", "PlatformFailureLimitExceeded", 0, 21, 20)),
    ("ExitCode: 1-127 is permanent", "ExitCode", 3, [E3], Outcome("Failed", "PermanentExitCode", 0, 1)),
    ("ExitCode: 128+ and infra retry", "ExitCode", 3, [E137, EVICT, NODE], Outcome("Succeeded", "Succeeded", 1, 3, 2)),
    ("ExitCode: signals spend the budget", "ExitCode", 1, [E137, Fault(API_EVICTION), E137],
     Outcome("Failed", "BackoffLimitExceeded", 1, 3, 1)),
    ("Never fails on the first failure", "Never", 3, [EVICT, E1], Outcome("Failed", "PodFailed", 0, 1)),
    ("a node NotReady within the grace costs nothing, even under Never", "Never", 0,
     [Fault(NODE_BLIP), Fault(NODE_BLIP)], Outcome("Succeeded", "Succeeded", 0, 2, 0)),
    ("a blip, then the node lost", "OnFailure", 0, [Fault(NODE_BLIP), NODE], Outcome("Succeeded", "Succeeded", 0, 2, 1)),
]


@pytest.mark.parametrize("name,policy,limit,faults,want", CASES, ids=[c[0] for c in CASES])
def test_outcome(name, policy, limit, faults, want):
    assert JobScript("j", 1, policy, limit, faults).outcome() == want


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_workload_holds_exactly_the_faults_asked_for_and_all_are_injected(seed):
    scripts = build_workload(seed, jobs=50, faults=100, node_lost_jobs=3, spare_node="n")
    assert sum(s.outcome().faults_used for s in scripts) == sum(len(s.faults) for s in scripts) == 100
    assert build_workload(seed, jobs=50, faults=100, node_lost_jobs=3, spare_node="n") == scripts, "seeded"
    assert {s.outcome().phase for s in scripts} == {"Succeeded", "Failed"}
