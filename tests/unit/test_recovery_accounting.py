"""Issue 54's defects as unit rows, each the shortest story that showed it (tests/sim found or keeps them): the
Kueue pod set judged by what Kueue admits on, a peer's loss not charged to the trainer before it shows, a
replacement of a replacement. (Defects 2 and 6: test_replica_groups.py, test_replacement_bookkeeping.py.)"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from job_builders import NOW, ago, make_job, make_node, make_pod, observe, running_pods

from ddpjob_operator.admission import kueue
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.recovery import in_place as in_place_policy
from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers import pod_names
from ddpjob_operator.workers.builders import JobRef, build_worker_pod, owner_reference

SETTINGS = PlannerSettings(node_lost_grace_seconds=30)
FLAVORS = {"h100": {"nodeLabels": {"gpu": "h100"}, "tolerations": []}}


def in_place(job):
    job._run()["restartStrategy"] = "InPlace"
    return job


# --- defect 1: the Workload is judged by what Kueue admits on ---------------------------------------------------
def _admitted_workload(job: dict) -> dict:
    spec = parse_spec(job["spec"])
    ref = JobRef("a", "ns", job["metadata"]["uid"])
    template = build_worker_pod(ref, spec, index=0, attempt=0, restarts=0, size=spec.replicas)
    name = kueue.workload_name("a", job["metadata"]["uid"], spec.replicas, None, template)
    wl = kueue.build_workload(job=job, queue="team", owner=owner_reference(ref), name=name, template=template,
                              count=spec.replicas, min_count=None, priorities={})
    wl["metadata"]["resourceVersion"] = "7"
    wl["status"] = {
        "admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": kueue.POD_SET, "count": spec.replicas, "flavors": {"nvidia.com/gpu": "h100"}}]},
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                       {"type": "Admitted", "status": "True", "reason": "Admitted"}],
    }
    return wl


def _running_under_kueue() -> dict:
    job = in_place(make_job("a").replicas(2).gpus(8).backoff_limit(3)).running().build()
    job["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team"}
    return job


def _plan_governed(job: dict, workloads: list[dict]):
    obs = dataclasses.replace(observe(job, running_pods("a", 2)), gang=False,
                              kueue=kueue.View(workloads=workloads, flavors=FLAVORS))
    return plan_reconcile(obs, SETTINGS)


@pytest.mark.parametrize("name, edit, replaced", [
    ("kubectl patch of spec.rendezvous.joinTimeoutSeconds on a running InPlace job: an injected env, no request",
     lambda j: j["spec"].setdefault("rendezvous", {}).update(joinTimeoutSeconds=900), False),
    ("backoffLimit edited under InPlace (PET_MAX_RESTARTS was derived from it)",
     lambda j: j["spec"]["runPolicy"].update(backoffLimit=5), False),
    ("the TorchFT timeouts edited", lambda j: j["spec"].setdefault("faultTolerance", {}).update(timeoutSeconds=90),
     False),
    ("a node selector: what Kueue admits on changed, the Workload is replaced",
     lambda j: j["spec"]["template"]["spec"].update(nodeSelector={"pool": "b"}), True),
])
def test_an_admitted_workload_survives_edits_kueue_does_not_admit_on(name, edit, replaced):
    job = _running_under_kueue()
    wl = _admitted_workload(job)
    edit(job)
    job["metadata"]["generation"] = 2
    plan = _plan_governed(job, [wl])
    assert bool(plan.delete_workloads) == replaced, name
    assert (plan.create_workload is not None) == replaced, name
    if not replaced:
        assert plan.delete_pods == [] and (plan.status or job["status"])["attempt"] == 0, name


def test_an_operator_upgrade_keeps_a_workload_of_an_earlier_releases_hash():
    """Round 5 changed InPlace's injected env; the Workload of the same job then carried another hash
    (1f7e13f052150af2 -> d74fe56337b271ae) and was deleted, stopping the job. Judged by its own spec, it stays."""
    job = _running_under_kueue()
    wl = _admitted_workload(job)
    wl["metadata"]["annotations"][kueue.POD_SET_HASH] = "1f7e13f052150af2"
    env = wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0].setdefault("env", [])
    env.append({"name": "PET_RDZV_CONF", "value": "join_timeout=600,last_call_timeout=5"})  # the old release's
    plan = _plan_governed(job, [wl])
    assert plan.delete_workloads == [] and plan.create_workload is None


def test_the_hash_ignores_the_operators_env_and_sees_requests():
    job = _running_under_kueue()
    spec = _admitted_workload(job)["spec"]
    base = kueue.pod_set_hash(spec)
    container = spec["podSets"][0]["template"]["spec"]["containers"][0]
    container.setdefault("env", []).append({"name": "DDPJOB_NEW_KNOB", "value": "1"})
    assert kueue.pod_set_hash(spec) == base
    container["resources"]["requests"]["cpu"] = "7"
    assert kueue.pod_set_hash(spec) != base


# --- defect 3: an increase while a peer's agent is silent is held for its loss to show ---------------------------
def _plan_agents(job, pods, counts, silent=frozenset(), now=NOW, nodes=None):
    obs = dataclasses.replace(observe(job.build(), pods, now=now, nodes=nodes), agent_restarts=counts,
                              agents_silent=frozenset(silent), owners_live=True)
    return plan_reconcile(obs, SETTINGS)


def test_a_rebooting_peers_silence_holds_the_survivors_restarts_then_its_loss_is_the_platforms():
    job = in_place(make_job("a").replicas(3).backoff_limit(0)).running()
    pods = running_pods("a", 3)
    counts = {"pod-0-0": 1, "pod-2-0": 1}  # pod 1's node rebooted: its agent does not answer, the API shows it Running
    plan = _plan_agents(job, pods, counts, silent={"pod-1-0"})
    status = plan.status
    assert status.get("restarts", 0) == 0 and status["phase"] == "Running", "held, not the trainer's"
    assert status["inPlace"]["heldSince"] and plan.requeue_after is not None and plan.requeue_after <= 10
    # The node monitor's grace ends: NotReady, then the node grace: lost, the platform's.
    job.obj["status"] = status
    nodes = [make_node("node-0"), make_node("node-1", ready=False, since=31)]
    pods[1]["spec"]["nodeName"] = "node-1"
    later = _plan_agents(job, pods, counts, silent={"pod-1-0"}, now=NOW + timedelta(seconds=70), nodes=nodes)
    assert later.status["restarts"] == 0 and later.status["platformRestarts"] == 1
    assert later.status["replacing"] == {"1": "pod-1-0"}


def test_a_hold_ends_and_charges_the_trainer_when_no_loss_shows():
    job = in_place(make_job("a").replicas(3).backoff_limit(3)).running()
    pods = running_pods("a", 3)
    counts = {"pod-0-0": 1, "pod-2-0": 1}
    first = _plan_agents(job, pods, counts, silent={"pod-1-0"}).status
    job.obj["status"] = first
    past = NOW + in_place_policy.HOLD_MAX + timedelta(seconds=1)
    assert _plan_agents(job, pods, counts, silent={"pod-1-0"}, now=past).status["restarts"] == 1


def test_every_agent_answering_charges_at_once():
    job = in_place(make_job("a").replicas(3).backoff_limit(3)).running()
    plan = _plan_agents(job, running_pods("a", 3), {"pod-0-0": 1, "pod-1-0": 1, "pod-2-0": 1})
    assert plan.status["restarts"] == 1 and "RestartedInPlace" in [e.reason for e in plan.events]


def test_a_pass_that_finds_a_loss_keeps_the_agents_baselines():
    """Defect 6: record() wrote {} when it did not read, so the next read took the whole counts as new."""
    job = in_place(make_job("a").replicas(3).backoff_limit(3)).running(restarts=1)
    job.status(inPlace={"attempt": 0, "restarts": 1, "pods": {"pod-0-0": 1, "pod-1-0": 1, "pod-2-0": 1},
                        "agentTotal": 1})
    pods = running_pods("a", 3)
    pods[1]["metadata"]["deletionTimestamp"] = NOW.isoformat().replace("+00:00", "Z")
    plan = _plan_agents(job, pods, {"pod-0-0": 2, "pod-1-0": 1, "pod-2-0": 2})
    status = plan.status
    assert status["inPlace"]["pods"] == {"pod-0-0": 1, "pod-1-0": 1, "pod-2-0": 1}, "the read before, kept"
    assert (status["restarts"], status["platformRestarts"]) == (1, 1), "the deletion is the platform's, once"


# --- defect 5: replacing a replacement -----------------------------------------------------------------------------
def test_a_free_name_is_never_one_still_held():
    held = {"a-worker-1", "a-worker-1-0"}
    assert pod_names.free_name("a", 1, 0, held) == "a-worker-1-0-2"
    assert pod_names.free_name("a", 1, 0, {*held, "a-worker-1-0-2"}) == "a-worker-1-0-3"
    assert pod_names.free_name("a", 1, 0, set()) == "a-worker-1"


def test_a_replacement_lost_before_it_ran_retires_its_predecessor():
    job = in_place(make_job("a").replicas(3).backoff_limit(3)).running().status(
        platformRestarts=1, replacing={"1": "pod-1-0"})
    first = make_pod("a", 1).terminating(5).build()  # the first lost pod, still Terminating
    second = make_pod("a", 1).build()
    second["metadata"].update({"name": "a-worker-1-0", "uid": "pod-1-second"})
    second["metadata"]["deletionTimestamp"] = NOW.isoformat().replace("+00:00", "Z")
    plan = plan_reconcile(dataclasses.replace(
        observe(job.build(), [make_pod("a", 0).build(), first, second, make_pod("a", 2).build()]),
        owners_live=True), SETTINGS)
    status = plan.status
    assert status["replacing"] == {"1": "pod-1-second"}
    assert "pod-1-0" in status["retiredUids"], "the first lost pod stays retired: never current, never charged again"
    assert status["platformRestarts"] == 2


# --- defect 2, seen over two passes: one group first, then the rest before its replacement ran --------------------
def test_the_last_groups_lost_while_one_is_replaced_are_one_recreation_charged_once():
    job = make_job("a").replicas(4).backoff_limit(1)
    job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT"}
    # Group 0's loss, one pass before the others': charged, its replacement Pending, its recovery open.
    job = job.running(restarts=1).status(replacing={"0": "pod-0-0"}, recoveries=[
        {"id": 1, "time": ago(2), "how": "ReplicaGroupReplaced", "attempt": 0, "pod": "a-worker-0", "kind": "Signal",
         "ranks": 1, "stepsLost": 0}])
    pods = [make_pod("a", 0).pending().build(), *(make_pod("a", i).failed(137, signal=9).build() for i in (1, 2, 3))]
    pods[0]["metadata"]["uid"] = "pod-0-new"
    status = plan_reconcile(observe(job.build(), pods), SETTINGS).status
    assert (status["phase"], status["attempt"], status["restarts"]) == ("Restarting", 1, 1), status


# --- a rebooted node's pod: the kubelet could not locate its container --------------------------------------------
def test_a_container_the_kubelet_could_not_locate_is_the_nodes_loss_not_the_trainers():
    from ddpjob_operator.recovery import failures

    pod = make_pod("a", 1).failed(exit_code=137, reason="ContainerStatusUnknown",
                                  message="The container could not be located when the pod was terminated").build()
    failure = failures.classify_pod_failure(pod, {}, NOW, 30)
    assert (failure.kind, failure.reason) == (failures.NODE_LOST, "ContainerStatusUnknown"), failure
    job = in_place(make_job("a").replicas(3).backoff_limit(0)).running()
    status = plan_reconcile(dataclasses.replace(observe(job.build(), [make_pod("a", 0).build(), pod,
                                                                       make_pod("a", 2).build()]), owners_live=True),
                            SETTINGS).status
    assert (status["phase"], status.get("restarts", 0), status["platformRestarts"]) == ("Running", 0, 1), status
