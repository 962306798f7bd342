"""Whether the scheduler really gang-schedules (gang_discovery.py): table-driven on the PodGroup and pods of one
attempt, then through the watch cache (the cluster's latest evidence) and the planner (placement, event)."""

from __future__ import annotations

import pytest

from ddpjob_operator import api
from ddpjob_operator.placement import gang, gang_discovery
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.controller.watch_cache import WatchCache, slim_pod

from job_builders import NOW, UID, ago, make_job, make_node, make_pod

KEY = ("ns", "a")


def podgroup(created: float = 60, verdict: str | None = None, attempt: int = 0) -> dict:
    group = {"metadata": {"name": f"a-{attempt}", "uid": "pg", "creationTimestamp": ago(created),
                          "labels": {api.LABEL_JOB_NAME: "a", api.LABEL_ATTEMPT: str(attempt)},
                          "ownerReferences": [{"uid": UID, "controller": True}]},
             "spec": {}, "status": {"conditions": []}}
    if verdict is not None:
        group["status"]["conditions"] = [{"type": gang.SCHEDULED, "status": verdict, "reason": "x"}]
    return group


def pod(index: int = 0, bound: float | None = 30, attempt: int = 0) -> dict:
    built = make_pod("a", index, attempt).build() if bound is not None else make_pod("a", index, attempt).pending().build()
    if bound is not None:
        built["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ago(bound)}]
    return built


CASES = [
    ("the scheduler placed the gang and said so", podgroup(verdict="True"), [pod()], True),
    ("the scheduler could not place the gang and said so", podgroup(verdict="False"), [pod(bound=None)], True),
    ("a gang scheduler that bound one pod of a gang it refuses still says so", podgroup(verdict="False"),
     [pod(), pod(1, bound=None)], True),
    ("bound long ago, no word on the gang: not enforced", podgroup(), [pod()], False),
    ("part bound, no word: not enforced either", podgroup(), [pod(), pod(1, bound=None)], False),
    ("bound just now: the verdict may still be on its way", podgroup(), [pod(bound=gang_discovery.SILENCE_SECONDS - 1)],
     None),
    ("nothing bound yet", podgroup(), [pod(bound=None), pod(1, bound=None)], None),
    ("a PodGroup re-created under pods already bound is never scheduled again", podgroup(created=10),
     [pod(bound=30)], None),
    ("no PodGroup (pod by pod)", None, [pod()], None),
]


@pytest.mark.parametrize("name, group, pods, want", CASES, ids=[c[0] for c in CASES])
def test_evidence(name, group, pods, want):
    found = gang_discovery.evidence(group, pods, NOW)
    assert (None if found is None else found.enforced) is want
    if found is not None and not found.enforced:
        assert "a-worker-0" in found.message and "PodGroupScheduled" in found.message


def cache(group: dict, pods: list[dict]) -> WatchCache:
    job = make_job("a").running().build()
    job["status"]["placement"] = gang.GANG
    return WatchCache(jobs={KEY: [job]}, pods={KEY: [slim_pod(p) for p in pods]}, nodes={"node-0": [make_node()]},
                      children=[],
                      podgroups={KEY: [group]})


def learned(view: WatchCache):
    """A reconcile pass's first two steps: learn the gang evidence, then observe."""
    view.learn_gang(KEY, NOW)
    return view.observe(KEY, NOW)


def test_the_cache_keeps_the_latest_evidence_and_turns_placement_pod_by_pod():
    view = cache(podgroup(verdict="True"), [pod(0), pod(1)])
    assert learned(view).gang is True
    view.podgroups = {KEY: [podgroup()]}  # a scheduler without the gate (restarted): bound, no word
    obs = learned(view)
    assert obs.gang is False and "does not gang-schedule" in obs.gang_not_enforced
    plan = plan_reconcile(obs, PlannerSettings())
    assert plan.status["placement"] == gang.POD_BY_POD
    assert [e.reason for e in plan.events] == [gang_discovery.NOT_ENFORCED]
    view.podgroups = {KEY: [podgroup(verdict="True")]}  # the scheduler says it again
    assert learned(view).gang is True


def test_observe_is_a_read_only_the_learn_step_changes_the_evidence():
    view = cache(podgroup(), [pod(0), pod(1)])  # bound, no word: evidence that gangs are not enforced
    for _ in range(2):
        assert view.observe(KEY, NOW).gang is True and view.gang_evidence is None
    view.learn_gang(KEY, NOW)
    assert view.gang_evidence is not None and view.observe(KEY, NOW).gang is False


def test_no_evidence_keeps_what_the_api_says():
    view = cache(podgroup(), [pod(bound=None)])
    obs = learned(view)
    assert obs.gang is True and obs.gang_not_enforced == ""
