"""faultTolerance.mode: TorchFT (replica_groups.py, replace_pod.py, rendezvous.py): each pod a replica group of its
own, the job's Lighthouse made and removed with the job's life, a lost group replaced alone (pod 0 and several at
once included) while the job stays Running, Degraded, with the replacement counted against its budget."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from ddpjob_operator import api
from ddpjob_operator.recovery import recoveries, replica_groups
from ddpjob_operator.workers.builders import JobRef, build_lighthouse_pod, build_service, build_worker_pod
from ddpjob_operator.planner import PlannerSettings, plan_reconcile
from ddpjob_operator.state.spec import parse_spec
from ddpjob_operator.workers.rendezvous import TORCHRUN_MAX_RESTARTS

from job_builders import NOW, NS, UID, make_job, make_pod, observe, running_pods

SETTINGS = PlannerSettings(node_lost_grace_seconds=30, terminating_grace_seconds=60)
LIGHTHOUSE = "a-lighthouse"


def torchft(job, **ft):
    job.obj["spec"]["faultTolerance"] = {"mode": "TorchFT", **ft}
    return job


def lighthouse_pod(phase="Running", deleting=False):
    spec = parse_spec(torchft(make_job("a")).build()["spec"])
    pod = build_lighthouse_pod(JobRef("a", NS, UID), spec)
    pod["metadata"]["uid"] = "lh-1"
    pod["status"] = {"phase": phase}
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2026-11-25T09:00:00Z"
    return pod


def plan_with(job, pods, now=NOW):
    return plan_reconcile(observe(job.build(), pods, now=now), SETTINGS)


def env_of(pod) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_each_pod_is_a_standalone_replica_group_that_knows_the_lighthouse():
    spec = parse_spec(torchft(make_job("a").replicas(3).elastic(2, 3)).build()["spec"])
    pod = build_worker_pod(JobRef("a", NS, UID), spec, index=2, attempt=0, restarts=0, size=3)
    env = env_of(pod)
    assert env["TORCHFT_LIGHTHOUSE"] == f"http://a-lighthouse.a.{NS}.svc:29510"
    assert (env["REPLICA_GROUP_ID"], env["NUM_REPLICA_GROUPS"], env["TORCHFT_MIN_REPLICAS"]) == ("2", "3", "2")
    assert (env["PET_NNODES"], env["PET_STANDALONE"], env["PET_MAX_RESTARTS"]) == ("1", "1", "0")
    # No pod hosts a rendezvous another needs: no endpoint, no MASTER_ADDR to wait on.
    assert not {"PET_RDZV_ENDPOINT", "MASTER_ADDR", "PET_NODE_RANK"} & set(env)
    assert env["TORCHFT_TIMEOUT_SEC"] == "60" and env["TORCHFT_QUORUM_TIMEOUT_SEC"] == "900"


def test_without_torchft_no_replica_group_env():
    spec = parse_spec(make_job("a").replicas(2).build()["spec"])
    env = env_of(build_worker_pod(JobRef("a", NS, UID), spec, index=1, attempt=0, restarts=0))
    assert "TORCHFT_LIGHTHOUSE" not in env and env["PET_NNODES"] == "2"


@pytest.mark.parametrize("elastic, want_min", [(None, "1"), ((2, 4), "2")])
def test_the_lighthouse_pod_runs_torchft_lighthouse_from_the_trainer_image(elastic, want_min):
    job = torchft(make_job("a").replicas(4), lighthouse={"heartbeatTimeoutMilliseconds": 700})
    if elastic:
        job.elastic(*elastic)
    job.pod_spec(nodeSelector={"pool": "gpu"})
    pod = build_lighthouse_pod(JobRef("a", NS, UID), parse_spec(job.build()["spec"]))
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "example.invalid/trainer:1" and container["command"] == replica_groups.LIGHTHOUSE_COMMAND
    assert f"--min_replicas={want_min}" in container["args"]
    assert "--heartbeat_timeout_ms=700" in container["args"] and "--bind=$(POD_IP):29510" in container["args"]
    assert api.GPU_RESOURCE not in str(container["resources"])
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (LIGHTHOUSE, "a")
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert pod["metadata"]["labels"][api.LABEL_COMPONENT] == "lighthouse"
    assert "finalizers" not in pod["metadata"]  # its end is no failure to count


def test_the_headless_service_selects_the_lighthouse_and_serves_its_port():
    spec = parse_spec(torchft(make_job("a")).build()["spec"])
    service = build_service(JobRef("a", NS, UID), spec)
    assert service["spec"]["selector"] == {api.LABEL_JOB_NAME: "a"}
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"rendezvous": 29400, "lighthouse": 29510}
    plain = build_service(JobRef("a", NS, UID), parse_spec(make_job("a").build()["spec"]))
    assert plain["spec"]["selector"][api.LABEL_COMPONENT] == "worker"


def test_a_new_job_creates_the_lighthouse_first_with_its_workers():
    plan = plan_with(torchft(make_job("a").replicas(2)), [])
    assert [p["metadata"]["name"] for p in plan.create_pods] == [LIGHTHOUSE, "a-worker-0", "a-worker-1"]


def test_a_lighthouse_is_not_a_worker():
    """It is never counted as a pod of the attempt, nor deleted as a stale one."""
    job = torchft(make_job("a").replicas(2)).running()
    plan = plan_with(job, [*running_pods("a", 2), lighthouse_pod()])
    assert plan.create_pods == [] and plan.delete_pods == []
    assert plan.status is None or plan.status["phase"] == "Running"


@pytest.mark.parametrize("lighthouses, want_create, want_delete", [
    ([], [LIGHTHOUSE], []),  # deleted by someone: made again
    ([lighthouse_pod("Failed")], [], [LIGHTHOUSE]),  # ended: deleted first, its name is the DNS name
    ([lighthouse_pod("Failed", deleting=True)], [], []),  # going: wait for it
    ([lighthouse_pod("Pending")], [], []),
])
def test_the_lighthouse_is_kept_alive_while_the_job_runs(lighthouses, want_create, want_delete):
    job = torchft(make_job("a").replicas(2)).running()
    plan = plan_with(job, [*running_pods("a", 2), *lighthouses])
    assert [p["metadata"]["name"] for p in plan.create_pods] == want_create
    assert plan.delete_pods == want_delete


def test_the_lighthouse_goes_when_the_job_ends_whatever_the_clean_pod_policy():
    job = torchft(make_job("a").replicas(2).clean_pod_policy("None")).running()
    done = [make_pod("a", i).succeeded().build() for i in range(2)]
    plan = plan_with(job, [*done, lighthouse_pod()])
    assert plan.status["phase"] == "Succeeded"
    assert plan.delete_pods == [], "not before the status that ends the job is written"
    job.obj["status"] = plan.status
    assert plan_with(job, [*done, lighthouse_pod()]).delete_pods == [LIGHTHOUSE]


def test_the_lighthouse_goes_when_the_job_is_suspended():
    job = torchft(make_job("a").replicas(2).suspend()).running()
    plan = plan_with(job, [*running_pods("a", 2), lighthouse_pod()])
    assert plan.status["phase"] == "Suspended"
    job.obj["status"] = plan.status
    assert LIGHTHOUSE in plan_with(job, [*running_pods("a", 2), lighthouse_pod()]).delete_pods


@pytest.mark.parametrize("failed, how", [
    ([0], "pod 0 too: it hosts nothing the others need"),
    ([1], "one group"),
    ([0, 2], "several groups at once"),
])
def test_lost_groups_are_replaced_alone_and_the_job_stays_running(failed, how):
    job = torchft(make_job("a").replicas(3).backoff_limit(3)).running()
    job.status(progress={"attempt": 0, "step": 120, "checkpointStep": 100})
    pods = [make_pod("a", i).failed(exit_code=137, signal=9).build() if i in failed else make_pod("a", i).build()
            for i in range(3)]
    plan = plan_with(job, [*pods, lighthouse_pod()])
    status = plan.status
    assert status["phase"] == "Running" and status["attempt"] == 0, how
    assert set(status["replacing"]) == {str(i) for i in failed}
    assert [e.reason for e in plan.events].count("ReplacingReplicaGroup") == len(failed)
    # Counted against a budget, once: groups lost in one pass are one incident (issue 54, defect 2).
    assert status["restarts"] + status.get("platformRestarts", 0) == 1
    (entry,) = status["recoveries"]
    assert (entry["how"], entry["stepsLost"], entry["ranks"]) == (recoveries.REPLICA_GROUP_REPLACED, 0, len(failed))
    assert LIGHTHOUSE not in plan.delete_pods


def test_a_spent_budget_fails_the_job_instead_of_replacing():
    job = torchft(make_job("a").replicas(2).backoff_limit(1)).running(restarts=1)
    pods = [make_pod("a", 0).build(), make_pod("a", 1).failed(exit_code=1).build()]
    plan = plan_with(job, [*pods, lighthouse_pod()])
    assert plan.status["phase"] == "Failed" and "replacing" not in plan.status
    job.obj["status"] = plan.status
    assert LIGHTHOUSE in plan_with(job, [*pods, lighthouse_pod()]).delete_pods


def replacing_job():
    job = torchft(make_job("a").replicas(3)).running(restarts=1)
    return job.status(replacing={"1": "pod-1-0"})


def test_while_a_group_is_replaced_size_shows_the_groups_that_train_and_degraded_is_true():
    old = make_pod("a", 1).failed(exit_code=137).build()
    replacement = make_pod("a", 1).pending().build()
    replacement["metadata"].update(name="a-worker-1-r", uid="pod-1-new")
    plan = plan_with(replacing_job(), [make_pod("a", 0).build(), old, replacement, make_pod("a", 2).build(),
                                       lighthouse_pod()])
    status = plan.status
    assert status["phase"] == "Running" and status["sizeText"] == "2/3"
    degraded = next(c for c in status["conditions"] if c["type"] == replica_groups.DEGRADED)
    assert degraded["status"] == "True" and degraded["reason"] == "ReplicaGroupsMissing"


def test_once_the_replacement_runs_degraded_turns_false_and_the_recovery_closes():
    job = replacing_job()
    job.status(recoveries=[{"time": "2026-11-25T09:59:00Z", "how": "ReplicaGroupReplaced", "attempt": 0,
                            "message": "m", "ranks": 1}],
               conditions=[*job.obj["status"]["conditions"],
                           {"type": "Degraded", "status": "True", "reason": "ReplicaGroupsMissing", "message": "",
                            "lastTransitionTime": "2026-11-25T09:59:00Z"}])
    replacement = make_pod("a", 1).build()
    replacement["metadata"].update(name="a-worker-1-r", uid="pod-1-new")
    plan = plan_with(job, [make_pod("a", 0).build(), replacement, make_pod("a", 2).build(), lighthouse_pod()])
    status = plan.status
    assert "replacing" not in status and status["sizeText"] == "3/3"
    degraded = next(c for c in status["conditions"] if c["type"] == replica_groups.DEGRADED)
    assert degraded["status"] == "False"
    assert "recoverySeconds" in status["recoveries"][-1]
    assert "Recovered" in [e.reason for e in plan.events]


def test_survivors_that_finish_while_a_replacement_waits_end_the_job():
    job = replacing_job()
    # The replacement's recovery is still open: the job's end closes it (it was left open for ever before).
    job.status(recoveries=[{"id": 1, "time": "2026-01-01T11:59:00Z", "how": "ReplicaGroupReplaced", "attempt": 0,
                            "message": "m", "ranks": 1, "stepsLost": 0}])
    pods = [make_pod("a", 0).succeeded().build(), make_pod("a", 2).succeeded().build(), lighthouse_pod()]
    plan = plan_with(job, pods)
    assert plan.status["phase"] == "Succeeded"
    (entry,) = plan.status["recoveries"]
    seconds = (NOW - datetime(2026, 1, 1, 11, 59, tzinfo=timezone.utc)).total_seconds()
    assert (entry["recoverySeconds"], entry["gpuSecondsLost"], entry["endedWithJob"]) == (seconds, seconds, True)
    assert "ranks" not in entry
    recovered = [e.message for e in plan.events if e.reason == "Recovered"]
    assert recovered == [f"ReplicaGroupReplaced recovery #1 of attempt 0 not finished: the job ended {seconds:.1f}s "
                         "after the failure, Succeeded"]


def test_a_job_that_fails_with_a_recovery_open_closes_it():
    job = torchft(make_job("a").replicas(2).backoff_limit(1)).running(restarts=1)
    job.status(replacing={"1": "pod-1-0"},
               recoveries=[{"id": 1, "time": "2026-11-25T09:59:00Z", "how": "ReplicaGroupReplaced", "attempt": 0,
                            "message": "m", "ranks": 1}])
    replacement = make_pod("a", 1).failed(exit_code=1).build()
    replacement["metadata"].update(name="a-worker-1-r", uid="pod-1-new")
    plan = plan_with(job, [make_pod("a", 0).build(), replacement, lighthouse_pod()])
    assert plan.status["phase"] == "Failed"
    assert [e.get("endedWithJob") for e in plan.status["recoveries"]] == [True]


def test_a_group_of_a_job_without_torchft_still_recreates_the_group():
    job = make_job("a").replicas(3).running()
    pods = [make_pod("a", 0).build(), make_pod("a", 1).failed(exit_code=1).build(), make_pod("a", 2).build()]
    plan = plan_with(job, pods)
    assert plan.status["attempt"] == 1 and "replacing" not in plan.status


@pytest.mark.parametrize("lighthouse, want", [({}, "warn"), ({"logLevel": "info"}, "info")])
def test_the_lighthouse_logs_what_goes_wrong_unless_asked_for_more(lighthouse, want):
    """At info torchft's Lighthouse writes several lines a step, each naming every group (8,358 lines in a minute of
    the recovery bench's three groups)."""
    spec = parse_spec(torchft(make_job("a"), lighthouse=lighthouse).build()["spec"])
    pod = build_lighthouse_pod(JobRef("a", NS, UID), spec)
    assert env_of(pod)["RUST_LOG"] == want


def test_spec_parses_the_lighthouse_settings():
    spec = parse_spec(torchft(make_job("a"), lighthouse={"port": 30000, "joinTimeoutMilliseconds": 50},
                              timeoutSeconds=5).build()["spec"])
    ft = spec.fault_tolerance
    assert (ft.torchft, ft.lighthouse_port, ft.join_timeout_ms, ft.timeout_seconds) == (True, 30000, 50, 5)
    assert dataclasses.replace(ft, mode="None").torchft is False


def test_a_lighthouse_on_a_lost_node_is_force_deleted_and_made_again():
    """Every group waits on its name; force-deleted once nothing can still run it, as a worker pod
    (NotReady 400 s, past unreachable_force_delete_seconds: test_lighthouse_node_loss.py has the rule)."""
    from job_builders import make_node

    job = torchft(make_job("a").replicas(2)).running()
    stranded = lighthouse_pod()
    stranded["spec"]["nodeName"] = "node-1"
    nodes = [make_node("node-0"), make_node("node-1", ready=False, since=400)]
    plan = plan_reconcile(observe(job.build(), [*running_pods("a", 2), stranded], nodes=nodes), SETTINGS)
    assert plan.force_delete_pods == [LIGHTHOUSE] and plan.create_pods == []
    assert "LighthouseLost" in [e.reason for e in plan.events]
    # Within the node's grace it is left alone.
    young = [make_node("node-0"), make_node("node-1", ready=False, since=5)]
    plan = plan_reconcile(observe(job.build(), [*running_pods("a", 2), stranded], nodes=young), SETTINGS)
    assert plan.force_delete_pods == [] and plan.delete_pods == []


def with_metrics(pod):
    pod["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 9400}]
    pod["status"]["podIP"] = "10.0.0.1"
    return pod


@pytest.mark.parametrize("scraped, want_done", [
    (None, False),  # no word from worker 0 yet
    ({"step": 90, "replicaGroups": 3, "updateTime": "2026-01-01T11:58:00Z"}, False),  # read before the failure
    ({"step": 130, "replicaGroups": 2, "updateTime": "2026-01-01T11:59:59Z"}, False),  # not back in the quorum
    ({"step": 140, "replicaGroups": 3, "updateTime": "2026-01-01T11:59:59Z"}, True),
    ({"step": 140, "updateTime": "2026-01-01T11:59:59Z"}, True),  # report() alone: no group count, the pods' word
])
def test_a_recovery_ends_when_worker_0_sees_the_replacement_back_in_its_quorum(scraped, want_done):
    """A running replacement is not back yet: it still starts its process and heals from a peer."""
    job = replacing_job()
    job.obj["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 9400}]
    job.status(recoveries=[{"time": "2026-01-01T11:59:00Z", "how": "ReplicaGroupReplaced", "attempt": 0,
                            "message": "m", "ranks": 1}])
    replacement = make_pod("a", 1).build()
    replacement["metadata"].update(name="a-worker-1-r", uid="pod-1-new")
    pods = [with_metrics(make_pod("a", 0).build()), with_metrics(replacement), with_metrics(make_pod("a", 2).build())]
    obs = dataclasses.replace(observe(job.build(), [*pods, lighthouse_pod()]), progress=scraped)
    plan = plan_reconcile(obs, SETTINGS)
    status = plan.status
    assert ("replacing" not in status) is want_done
    assert status["sizeText"] == ("3/3" if want_done else "2/3")
    assert ("recoverySeconds" in status["recoveries"][-1]) is want_done
    if not want_done:
        assert plan.requeue_after is not None and plan.requeue_after <= 2.0  # worker 0 is read again soon


def gone_lighthouse(lighthouse: str):
    """The Lighthouse pod and the nodes for: "lost" (its node NotReady past the grace), "Failed" (its process
    ended), "deleting" (deleted by someone)."""
    from job_builders import make_node

    pod = lighthouse_pod("Failed" if lighthouse == "Failed" else "Running", deleting=lighthouse == "deleting")
    node_list = [make_node("node-0")]
    if lighthouse == "lost":  # NotReady past unreachable_force_delete_seconds too: it may be force-deleted
        pod["spec"]["nodeName"] = "node-1"
        node_list.append(make_node("node-1", ready=False, since=400))
    return pod, node_list


# What the bundled trainer's worker 0 reported in this attempt: the groups in its quorum, and that it follows a
# Lighthouse made again (ddp_trainer_capability{name="lighthouse_reconnect"}; test_lighthouse_reconnect.py).
BUNDLED_PROGRESS = {"attempt": 0, "step": 50, "replicaGroups": 2, "lighthouseReconnect": True,
                    "updateTime": "2026-11-25T09:59:00Z"}


@pytest.mark.parametrize("how, lighthouse, progress", [
    ("its node lost", "lost", None),
    ("its process ended (OOMKilled)", "Failed", None),
    ("deleted by someone", "deleting", None),
    ("ended, a trainer that does not declare it reconnects", "Failed", {**BUNDLED_PROGRESS, "lighthouseReconnect": None}),
    ("ended, the bundled trainer's groups of an earlier attempt", "Failed", {**BUNDLED_PROGRESS, "attempt": -1}),
])
def test_a_running_jobs_lighthouse_gone_recreates_the_group(how, lighthouse, progress):
    """A Lighthouse gone silent (a lost node) holds the groups' quorum call until quorumTimeoutSeconds and their
    processes end; one that ended or was deleted refuses it. Only groups that reconnect (the bundled trainer's, told
    by the capability they declare) find a new one. Otherwise the group restarts from its checkpoint
    with a new Lighthouse instead of hanging."""
    job = torchft(make_job("a").replicas(2).restart_backoff(0)).running()
    if progress is not None:
        job.status(progress={k: v for k, v in progress.items() if v is not None})
    pod, node_list = gone_lighthouse(lighthouse)
    plan = plan_reconcile(observe(job.build(), [*running_pods("a", 2), pod], nodes=node_list), SETTINGS)
    status = plan.status
    assert status["attempt"] == 1 and status["phase"] == "Restarting", how
    assert status["lastFailure"]["pod"] == LIGHTHOUSE and status["platformRestarts"] == 1
    assert status["recoveries"][-1]["how"] == "GroupRecreated"
    assert "Restarting" in [e.reason for e in plan.events]
    assert "LighthouseEnded" not in [e.reason for e in plan.events], "no word of groups training on"


@pytest.mark.parametrize("how, lighthouse, event", [
    ("its node lost: it goes silent", "lost", "LighthouseLost"),
    ("its process ended (OOMKilled)", "Failed", "LighthouseEnded"),
    ("deleted by someone", "deleting", None),
])
def test_the_bundled_trainers_groups_train_on_with_a_lighthouse_made_again(how, lighthouse, event):
    """Issue 35: it recreated the group from its checkpoint. The bundled trainer's groups ask a new Lighthouse for
    their quorum, and follow its name from one gone silent (tests/trainer/test_torchft_lighthouse_replaced.py,
    test_torchft_lighthouse_silent.py): the Lighthouse alone is made again, the job stays in its attempt, and no
    budget is spent. One on a lost node is force-deleted: its name is free for the new one at once."""
    job = torchft(make_job("a").replicas(2).restart_backoff(0)).running()
    job.status(progress=dict(BUNDLED_PROGRESS))
    pod, node_list = gone_lighthouse(lighthouse)
    plan = plan_reconcile(observe(job.build(), [*running_pods("a", 2), pod], nodes=node_list), SETTINGS)
    status = plan.status or job.build()["status"]
    assert (status["phase"], status["attempt"], status.get("platformRestarts", 0)) == ("Running", 0, 0), how
    assert "lastFailure" not in status and not status.get("recoveries")
    reasons = [e.reason for e in plan.events]
    assert "Restarting" not in reasons and plan.create_pods == [], reasons
    assert plan.delete_pods == ([LIGHTHOUSE] if lighthouse == "Failed" else []), "no worker goes with it"
    assert plan.force_delete_pods == ([LIGHTHOUSE] if lighthouse == "lost" else [])
    assert event is None or event in reasons, reasons
    if lighthouse == "lost":
        (said,) = [e.message for e in plan.events if e.reason == "LighthouseLost"]
        assert "follow its name to the new one" in said, said
    # Once it is gone, the new one.
    plan = plan_reconcile(observe(job.build(), running_pods("a", 2), nodes=node_list), SETTINGS)
    assert [p["metadata"]["name"] for p in plan.create_pods] == [LIGHTHOUSE]
    assert "LighthouseCreated" in [e.reason for e in plan.events]
    assert (plan.status or job.build()["status"])["attempt"] == 0


@pytest.mark.parametrize("name, pod0, replacing, want", [
    ("pod 0 on a lost node, being replaced: group 1 is read", "dead-node", {"0": "pod-0-0"}, "10.0.0.11"),
    ("pod 0 being replaced, its node still Ready (Terminating)", "terminating", {"0": "pod-0-0"}, "10.0.0.11"),
    ("pod 0 on a NotReady node, not yet replaced: group 1 is read", "dead-node", None, "10.0.0.11"),
    ("pod 0 live: pod 0", "live", None, "10.0.0.10"),
])
def test_torchft_progress_is_read_from_the_lowest_live_group(name, pod0, replacing, want):
    from job_builders import make_node

    from ddpjob_operator.tracking.progress import metrics_url

    job = torchft(make_job("a").replicas(3)).running()
    if replacing:
        job.status(replacing=replacing)
    pods = [with_metrics(make_pod("a", i).build()) for i in range(3)]
    for i, pod in enumerate(pods):
        pod["status"]["podIP"] = f"10.0.0.1{i}"
    if pod0 == "dead-node":
        pods[0]["spec"]["nodeName"] = "dead"
    elif pod0 == "terminating":
        pods[0]["metadata"]["deletionTimestamp"] = "2026-01-01T11:59:00Z"
    nodes = [make_node("node-0"), make_node("dead", ready=False, since=60)]
    obs = observe(job.build(), pods, nodes)
    assert metrics_url(obs) == f"http://{want}:9400/metrics", name


def test_without_torchft_worker_0_alone_is_read():
    from ddpjob_operator.tracking.progress import metrics_url

    job = make_job("a").replicas(2).running()
    pods = [with_metrics(make_pod("a", i).build()) for i in range(2)]
    pods[0]["status"]["phase"] = "Pending"
    assert metrics_url(observe(job.build(), pods)) is None


def test_the_lighthouse_prefers_a_node_without_the_jobs_workers():
    from ddpjob_operator.workers.builders import build_worker_pod, worker_selector

    spec = parse_spec(torchft(make_job("a").replicas(2)).build()["spec"])
    pod = build_lighthouse_pod(JobRef("a", NS, UID), spec)
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector == worker_selector("a") and term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    worker = build_worker_pod(JobRef("a", NS, UID), spec, index=0, attempt=0, restarts=0, size=2)
    assert selector.items() <= worker["metadata"]["labels"].items(), "it selects the job's workers"
    assert not selector.items() <= pod["metadata"]["labels"].items(), "not itself"


@pytest.mark.parametrize("lighthouse, want_selector, want_tolerations", [
    ({}, {"gpu": "h100"}, [{"key": "gpu", "operator": "Exists"}]),  # the template's
    ({"nodeSelector": {"pool": "cpu"}, "tolerations": []}, {"pool": "cpu"}, []),  # its own: a CPU pool
])
def test_the_lighthouse_can_run_in_a_pool_of_its_own(lighthouse, want_selector, want_tolerations):
    job = torchft(make_job("a").replicas(2), lighthouse=lighthouse)
    job.pod_spec(nodeSelector={"gpu": "h100"}, tolerations=[{"key": "gpu", "operator": "Exists"}])
    pod = build_lighthouse_pod(JobRef("a", NS, UID), parse_spec(job.build()["spec"]))
    assert (pod["spec"]["nodeSelector"], pod["spec"]["tolerations"]) == (want_selector, want_tolerations)


# --- TorchFT with restartStrategy InPlace: a failed process restarts inside its group's pod -------------------------
def in_place(job):
    job._run()["restartStrategy"] = "InPlace"
    return job


def plan_with_agents(job, pods, counts, now=NOW):
    obs = dataclasses.replace(observe(job.build(), pods, now=now), agent_restarts=counts)
    return plan_reconcile(obs, SETTINGS)


@pytest.mark.parametrize("strategy, want_limit, want_agent_port", [
    ("Recreate", "0", False),  # a failed process ends its pod, which is replaced
    ("InPlace", str(TORCHRUN_MAX_RESTARTS), True),  # rendezvous.max_restarts: the operator's count decides
])
def test_under_in_place_a_groups_torchrun_restarts_its_processes_and_serves_its_count(
        strategy, want_limit, want_agent_port):
    job = torchft(make_job("a").replicas(3).backoff_limit(3))
    job._run()["restartStrategy"] = strategy
    spec = parse_spec(job.build()["spec"])
    env = env_of(build_worker_pod(JobRef("a", NS, UID), spec, index=1, attempt=0, restarts=1))
    assert env["PET_MAX_RESTARTS"] == want_limit
    assert (api.AGENT_METRICS_PORT_ENV in env) == want_agent_port
    # A standalone group: no shared rendezvous store, and no peer pod for the trainer's peer watch to wait on.
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in env and "DDP_TRAINER_PEER_TIMEOUT_SECONDS" not in env


@pytest.mark.parametrize("name, seen, counts, want", [
    ("group 1's process restarted once: one restart, no pod replaced", {}, {"pod-0-0": 0, "pod-1-0": 1}, 1),
    # Under InPlace without TorchFT, one peer's loss makes every agent count once: the largest increase. Here each
    # group's agent counts only its own processes' failures: two groups' restarts are two.
    ("groups 0 and 2 each restarted once", {}, {"pod-0-0": 1, "pod-1-0": 0, "pod-2-0": 1}, 2),
    ("group 1 again after a first restart already counted", {"pod-0-0": 0, "pod-1-0": 1},
     {"pod-0-0": 0, "pod-1-0": 2, "pod-2-0": 0}, 2),
])
def test_each_groups_restarts_in_place_are_counted_on_their_own(name, seen, counts, want):
    job = in_place(torchft(make_job("a").replicas(3).backoff_limit(5))).running()
    if seen:
        job.status(restarts=1, inPlace={"attempt": 0, "restarts": 1, "pods": seen, "agentTotal": 1})
    plan = plan_with_agents(job, [*running_pods("a", 3), lighthouse_pod()], counts)
    status = plan.status
    assert (status["phase"], status["restarts"]) == ("Running", want), name
    assert "RestartedInPlace" in [e.reason for e in plan.events], name
    assert plan.create_pods == [] and [p for p in plan.delete_pods if p != LIGHTHOUSE] == [], name
    assert "replacing" not in status, name


def test_restarts_in_place_past_the_budget_fail_the_job():
    job = in_place(torchft(make_job("a").replicas(2).backoff_limit(1))).running(restarts=1)
    job.status(inPlace={"attempt": 0, "restarts": 1, "pods": {"pod-0-0": 0, "pod-1-0": 1}, "agentTotal": 1})
    plan = plan_with_agents(job, [*running_pods("a", 2), lighthouse_pod()], {"pod-0-0": 1, "pod-1-0": 1})
    status = plan.status
    assert (status["phase"], status["reason"], status["restarts"]) == ("Failed", "BackoffLimitExceeded", 2)


def test_a_replaced_group_running_again_opens_no_join_window():
    """Without TorchFT a replacement's join makes the survivors' agents restart once, which is no failure (the join
    window). A replaced replica group joins no other pod's rendezvous: the next restart anyone reports is a failure."""
    job = in_place(replacing_job())
    job.status(recoveries=[{"time": "2026-11-25T09:59:00Z", "how": "ReplicaGroupReplaced", "attempt": 0,
                            "message": "m", "ranks": 1}])
    replacement = make_pod("a", 1).build()
    replacement["metadata"].update(name="a-worker-1-r", uid="pod-1-new")
    plan = plan_with(job, [make_pod("a", 0).build(), replacement, make_pod("a", 2).build(), lighthouse_pod()])
    status = plan.status
    assert "replacing" not in status and "Recovered" in [e.reason for e in plan.events]
    assert "joinUntil" not in (status.get("inPlace") or {})
