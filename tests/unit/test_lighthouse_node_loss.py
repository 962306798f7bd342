"""A Lighthouse on a lost node is force-deleted only when nothing can still run it, by recovery/termination.py's
rule for worker pods: its node gone or tainted node.kubernetes.io/out-of-service, or NotReady for
unreachable_force_delete_seconds. Before that its containers may still run: a force-delete would free its name for a
second Lighthouse while the first still answers the groups that reach it, two quorums (issue 54, defect 13). Past
the node grace it is deleted (gracefully), and the job's groups fail over as they do for a Lighthouse lost."""

from __future__ import annotations

import pytest

from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.recovery import termination
from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers.builders import JobRef, build_lighthouse_pod

from job_builders import NS, UID, make_job, make_node, observe, running_pods

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60,
                           unreachable_force_delete_seconds=300)
LIGHTHOUSE = "a-lighthouse"
CAN_RECONNECT = {"attempt": 0, "step": 50, "lighthouseReconnect": True, "updateTime": "2026-11-25T09:59:00Z"}


def torchft_job():
    job = make_job("a").replicas(2).restart_backoff(0)
    job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT"}
    return job.running().status(progress=dict(CAN_RECONNECT))


def lighthouse_on(node: str, deleting: bool = False):
    pod = build_lighthouse_pod(JobRef("a", NS, UID), parse_spec(torchft_job().build()["spec"]))
    pod["metadata"]["uid"] = "lh-1"
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-25T09:59:00Z"
    return pod


def tainted(node):
    node["spec"] = {"taints": [{"key": termination.OUT_OF_SERVICE_TAINT, "effect": "NoExecute"}]}
    return node


@pytest.mark.parametrize("name, nodes, deleting, want_force, want_delete", [
    ("NotReady within the node grace: left alone", [make_node("node-1", ready=False, since=5)], False, [], []),
    ("NotReady past the node grace: deleted, not forced (its containers may run)",
     [make_node("node-1", ready=False, since=60)], False, [], [LIGHTHOUSE]),
    ("...and while that deletion waits on the kubelet: still not forced",
     [make_node("node-1", ready=False, since=200)], True, [], []),
    ("NotReady for unreachable_force_delete_seconds: forced", [make_node("node-1", ready=False, since=301)], True,
     [LIGHTHOUSE], []),
    ("NotReady and tainted out-of-service (the admin's word): forced",
     [tainted(make_node("node-1", ready=False, since=60))], False, [LIGHTHOUSE], []),
    ("its node is gone: forced", [], False, [LIGHTHOUSE], []),
])
def test_a_lighthouse_on_a_lost_node_is_force_deleted_only_when_nothing_can_still_run_it(
        name, nodes, deleting, want_force, want_delete):
    pods = [*running_pods("a", 2), lighthouse_on("node-1", deleting)]
    plan = plan_reconcile(observe(torchft_job().build(), pods, nodes=[make_node("node-0"), *nodes]), SETTINGS)
    assert plan.force_delete_pods == want_force, name
    assert plan.delete_pods == want_delete, name
    assert plan.create_pods == [], "its name is the new one's: only once it is gone"


def test_waiting_to_force_delete_says_why_and_wakes_up_when_it_may():
    pods = [*running_pods("a", 2), lighthouse_on("node-1")]
    nodes = [make_node("node-0"), make_node("node-1", ready=False, since=60)]
    plan = plan_reconcile(observe(torchft_job().build(), pods, nodes=nodes), SETTINGS)
    (said,) = [e.message for e in plan.events if e.reason == "LighthouseLost"]
    assert said.startswith("the Lighthouse pod a-lighthouse is on node node-1, NotReady for 60s: deleted; "
                           "force-deleted once the node is gone or tainted node.kubernetes.io/out-of-service, or "
                           "after 300s NotReady (its process may still run there)"), said
    assert plan.requeue_after is not None and plan.requeue_after <= 240


def test_termination_rule_is_the_workers_one():
    node = make_node("node-1", ready=False, since=60)
    pod = lighthouse_on("node-1")
    from job_builders import NOW
    assert termination.force_delete_rule(pod, node, NOW, 300)[0] is False
    assert termination.force_delete_rule(pod, make_node("node-1"), NOW, 300)[0] is None  # Ready: never
    assert termination.force_delete_rule(pod, None, NOW, 300)[0] is True
