"""Failure classes, their budgets and the healthy-stretch reset (failure_class.py), through the planner."""

from datetime import timedelta

import pytest
from job_builders import NOW, ago, make_job, make_node, make_pod, observe

from ddpjob_operator.recovery import failures as f
from ddpjob_operator.recovery.failure_class import PLATFORM, TRAINER, class_of, counts_before
from ddpjob_operator.planner import PlannerSettings, plan_reconcile

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60)


@pytest.mark.parametrize("kind, want", [
    (f.EXIT_CODE, TRAINER), (f.SIGNAL, TRAINER), (f.NO_PROGRESS, TRAINER), (f.UNKNOWN, TRAINER),
    (f.EVICTED, PLATFORM), (f.DELETED, PLATFORM), (f.NODE_LOST, PLATFORM),
])
def test_each_kind_has_its_class(kind, want):
    assert class_of(f.Failure(pod="p", kind=kind)) == want


def job_with(restarts=0, platform=0, backoff=3, platform_limit=20, running_since=600, progress_attempt=None,
             reset=3600):
    job = make_job("a").replicas(2).restart_backoff(0).backoff_limit(backoff).running(attempt=restarts + platform,
                                                                                       restarts=restarts)
    job.obj["spec"]["runPolicy"].update(platformFailureLimit=platform_limit, healthyResetSeconds=reset)
    status = job.obj["status"]
    status["platformRestarts"] = platform
    status["conditions"] = [{"type": "Running", "status": "True", "reason": "AllPodsRunning", "message": "",
                             "lastTransitionTime": ago(running_since)}]
    if progress_attempt is not None:
        status["progress"] = {"step": 10, "attempt": progress_attempt, "advanceTime": ago(5)}
    return job


def failing(kind: str, attempt: int):
    pod = make_pod("a", 1, attempt)
    {"exit": lambda: pod.failed(1), "evicted": pod.evicted, "node": lambda: pod.on_node("dead"),
     "deleted": lambda: pod.terminating(since=5)}[kind]()
    return [make_pod("a", 0, attempt).build(), pod.build()]


NODES = [make_node("node-0"), make_node("dead", ready=False, since=120)]


@pytest.mark.parametrize("name, job, kind, want", [
    ("exit: the trainer's budget", job_with(), "exit", ("Restarting", 1, 0, "Trainer")),
    ("eviction: the platform's", job_with(), "evicted", ("Restarting", 0, 1, "Platform")),
    ("node lost: the platform's", job_with(), "node", ("Restarting", 0, 1, "Platform")),
    ("deleted: the platform's", job_with(), "deleted", ("Restarting", 0, 1, "Platform")),
    ("backoffLimit spent: an eviction still restarts", job_with(restarts=3), "evicted", ("Restarting", 3, 1, "Platform")),
    ("backoffLimit spent: an exit fails", job_with(restarts=3), "exit", ("Failed", 3, 0, "Trainer")),
    ("platform limit spent: fails", job_with(platform=20), "evicted", ("Failed", 0, 20, "Platform")),
    ("healthy stretch: both reset, then this one counts", job_with(restarts=3, platform=7, running_since=3700),
     "exit", ("Restarting", 1, 0, "Trainer")),
    ("healthy stretch with progress of this attempt: reset", job_with(restarts=3, running_since=3700,
                                                                      progress_attempt=3), "exit",
     ("Restarting", 1, 0, "Trainer")),
    ("long Running but no progress read in this attempt: no reset", job_with(restarts=3, running_since=3700,
                                                                            progress_attempt=2), "exit",
     ("Failed", 3, 0, "Trainer")),
    ("reset off (0)", job_with(restarts=3, running_since=99999, reset=0), "exit", ("Failed", 3, 0, "Trainer")),
])
def test_budgets_by_class(name, job, kind, want):
    attempt = job.obj["status"]["attempt"]
    s = plan_reconcile(observe(job.build(), failing(kind, attempt), NODES), SETTINGS).status
    got = (s["phase"], s["restarts"], s.get("platformRestarts", 0), s["lastFailure"]["failureClass"])
    assert got == want, name
    failed = next((c for c in s["conditions"] if c["type"] == "Failed"), None)
    if failed is not None and want[3] == "Platform":
        assert failed["reason"] == "PlatformFailureLimitExceeded"
        assert "platformFailureLimit 20 reached after 20 platform failures" in failed["message"]


def test_the_reset_says_so_in_the_restart_message():
    s = plan_reconcile(observe(job_with(restarts=2, running_since=4000).build(), failing("exit", 2), NODES),
                       SETTINGS).status
    assert "budgets reset: the job ran healthy for over 3600s" in s["conditions"][-1]["message"]


def test_counts_before_only_resets_a_running_attempt():
    status = job_with(restarts=2, running_since=4000).obj["status"]
    assert counts_before({**status, "phase": "Pending"}, NOW, 3600)[1] is False
    assert counts_before(status, NOW, 3600)[1] is True
    assert counts_before(status, NOW - timedelta(seconds=600), 3600)[1] is False


def test_a_peer_that_fails_because_a_node_went_is_the_nodes_failure_not_the_trainers():
    """A node goes NotReady: its pod's peers fail at once (their connections reset), before the node's grace ends.
    The decision waits for the grace, and then the lost node is the cause."""
    job = job_with()
    peer = make_pod("a", 0).failed(1, message="RuntimeError: gloo: Connection reset by peer")
    on_node = make_pod("a", 1).on_node("flaky")
    for since, want in ((5, None), (31, ("Restarting", 0, 1, "NodeLost"))):
        nodes = [make_node("node-0"), make_node("flaky", ready=False, since=since)]
        plan = plan_reconcile(observe(job.build(), [peer.build(), on_node.build()], nodes), SETTINGS)
        if want is None:
            s = plan.status or job.obj["status"]
            assert (s["attempt"], s["restarts"], s.get("platformRestarts", 0)) == (0, 0, 0), "no verdict yet"
            assert plan.requeue_after == 25
        else:
            s = plan.status
            assert (s["phase"], s["restarts"], s["platformRestarts"], s["lastFailure"]["kind"]) == want


def torchft(job):
    job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT"}
    return job


def in_place(job):
    job.obj["spec"].setdefault("runPolicy", {})["restartStrategy"] = "InPlace"
    return job


def replaced_job(mode, backoff=1, last_failure=60, running_since=7200, restarts=1, **extra):
    """Running for `running_since` s, one pod replaced alone `last_failure` s ago (never left Running)."""
    job = mode(make_job("a").replicas(3).restart_backoff(0).backoff_limit(backoff)).running(restarts=restarts)
    status = job.obj["status"]
    status["conditions"][0]["lastTransitionTime"] = ago(running_since)
    if last_failure is not None:
        status["lastFailure"] = {"pod": "a-worker-1", "kind": "ExitCode", "failureClass": "Trainer",
                                 "exitCode": 1, "time": ago(last_failure)}
    status.update(extra)
    return job


@pytest.mark.parametrize("name, job, want", [
    ("TorchFT: a group replaced a minute ago after 2 h Running: the budget is spent, not reset",
     replaced_job(torchft), ("Failed", "BackoffLimitExceeded", 1)),
    ("InPlace: the same", replaced_job(in_place), ("Failed", "BackoffLimitExceeded", 1)),
    ("TorchFT: the last failure over an hour ago: reset, then this one counts",
     replaced_job(torchft, last_failure=3700), ("Running", "", 1)),
    ("TorchFT: a recovery entry (an in-place restart, say) a minute ago also ends the stretch",
     replaced_job(torchft, last_failure=None, recoveries=[{"time": ago(60), "how": "InPlace", "attempt": 0,
                                                            "message": "m"}]), ("Failed", "BackoffLimitExceeded", 1)),
])
def test_a_replacement_ends_the_healthy_stretch(name, job, want):
    pods = [make_pod("a", 0).build(), make_pod("a", 1).failed(1).build(), make_pod("a", 2).build()]
    s = plan_reconcile(observe(job.build(), pods, NODES), SETTINGS).status
    failed = next((c for c in s["conditions"] if c["type"] == "Failed"), {})
    assert (s["phase"], failed.get("reason", ""), s["restarts"]) == want, name


def test_a_replacement_after_a_healthy_stretch_writes_the_reset_as_a_recreation_does():
    job = replaced_job(in_place, backoff=3, restarts=3, last_failure=4000, platformRestarts=5)
    pods = [make_pod("a", 0).build(), make_pod("a", 1).failed(1).build(), make_pod("a", 2).build()]
    plan = plan_reconcile(observe(job.build(), pods, NODES), SETTINGS)
    s = plan.status
    assert (s["phase"], s["restarts"], s["platformRestarts"], list(s["replacing"])) == ("Running", 1, 0, ["1"])
    assert "budgets reset: the job ran healthy for over 3600s" in s["recoveries"][-1]["message"]
