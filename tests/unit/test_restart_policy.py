"""The restart decision for every policy x failure kind, the budget, and the backoff."""

from __future__ import annotations

import pytest

from ddpjob_operator.recovery import failures as f
from ddpjob_operator.recovery.restart_policy import FAIL, RESTART, RestartBudget, backoff_seconds, decide_restart

EXIT1 = f.Failure("j-worker-1", f.EXIT_CODE, exit_code=1, reason="Error", message="ValueError: bad lr")
EXIT127 = f.Failure("j-worker-1", f.EXIT_CODE, exit_code=127, reason="Error")
EXIT137 = f.Failure("j-worker-0", f.SIGNAL, exit_code=137, reason="OOMKilled")
SIGNALLED = f.Failure("j-worker-0", f.SIGNAL, exit_code=143)
EVICTED = f.Failure("j-worker-0", f.EVICTED, reason="Evicted")
DELETED = f.Failure("j-worker-0", f.DELETED, reason="Terminating")
NODE_LOST = f.Failure("j-worker-0", f.NODE_LOST, reason="NodeNotReady", message="node n is not Ready")
UNKNOWN = f.Failure("j-worker-0", f.UNKNOWN)

FRESH = RestartBudget(limit=3, used=0)
SPENT = RestartBudget(limit=3, used=3)

CASES = [
    # policy, failure, budget, action, reason
    ("OnFailure", EXIT1, FRESH, RESTART, "ExitCode"),
    ("OnFailure", EXIT137, FRESH, RESTART, "Signal"),
    ("OnFailure", EVICTED, FRESH, RESTART, "Evicted"),
    ("OnFailure", DELETED, FRESH, RESTART, "Deleted"),
    ("OnFailure", NODE_LOST, FRESH, RESTART, "NodeLost"),
    ("OnFailure", UNKNOWN, FRESH, RESTART, "Unknown"),
    ("OnFailure", EXIT1, SPENT, FAIL, "BackoffLimitExceeded"),
    ("OnFailure", NODE_LOST, SPENT, FAIL, "BackoffLimitExceeded"),
    ("ExitCode", EXIT1, FRESH, FAIL, "PermanentExitCode"),
    ("ExitCode", EXIT127, FRESH, FAIL, "PermanentExitCode"),
    ("ExitCode", EXIT137, FRESH, RESTART, "Signal"),
    ("ExitCode", SIGNALLED, FRESH, RESTART, "Signal"),
    ("ExitCode", EVICTED, FRESH, RESTART, "Evicted"),
    ("ExitCode", DELETED, FRESH, RESTART, "Deleted"),
    ("ExitCode", NODE_LOST, FRESH, RESTART, "NodeLost"),
    ("ExitCode", EXIT137, SPENT, FAIL, "BackoffLimitExceeded"),  # kubeflow #2045: ExitCode spends the budget
    ("ExitCode", EXIT1, SPENT, FAIL, "PermanentExitCode"),
    ("Never", EXIT1, FRESH, FAIL, "PodFailed"),
    ("Never", EXIT137, FRESH, FAIL, "PodFailed"),
    ("Never", EVICTED, FRESH, FAIL, "PodFailed"),
    ("Never", NODE_LOST, FRESH, FAIL, "PodFailed"),
    ("OnFailure", EXIT1, RestartBudget(limit=0, used=0), FAIL, "BackoffLimitExceeded"),
]


@pytest.mark.parametrize("policy, failure, budget, action, reason", CASES,
                         ids=[f"{c[0]}-{c[1].kind}{c[1].exit_code or ''}-{c[2].used}of{c[2].limit}" for c in CASES])
def test_decide_restart(policy, failure, budget, action, reason):
    decision = decide_restart(policy, failure, budget)
    assert (decision.action, decision.reason) == (action, reason)


@pytest.mark.parametrize("policy, failure, budget, want", [
    ("OnFailure", EXIT1, SPENT,
     "pod j-worker-1 exited with code 1 (Error): ValueError: bad lr; backoffLimit 3 reached after 3 restarts"),
    ("ExitCode", EXIT1, FRESH,
     "pod j-worker-1 exited with code 1 (Error): ValueError: bad lr; exit codes 1-127 are permanent under "
     "restartPolicy ExitCode"),
    ("Never", EVICTED, FRESH, "pod j-worker-0 was evicted (Evicted); restartPolicy is Never"),
    ("OnFailure", NODE_LOST, RestartBudget(3, 1),
     "pod j-worker-0 lost its node (NodeNotReady): node n is not Ready; restarting the group (2/3)"),
    ("OnFailure", EXIT137, FRESH, "pod j-worker-0 was killed by a signal (exit code 137) (OOMKilled); "
     "restarting the group (1/3)"),
])
def test_decision_messages_name_the_root_cause(policy, failure, budget, want):
    assert decide_restart(policy, failure, budget).message == want


@pytest.mark.parametrize("base, restarts, want", [
    (5, 0, 0), (5, 1, 5), (5, 2, 10), (5, 3, 20), (5, 10, 300), (0, 4, 0), (1, 100, 300),
])
def test_backoff_is_exponential_and_capped(base, restarts, want):
    assert backoff_seconds(base, restarts) == want


def test_budget():
    assert not RestartBudget(3, 2).exhausted
    assert RestartBudget(3, 3).exhausted
