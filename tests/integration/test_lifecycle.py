"""Suspend and resume, scale within [min, max], the active deadline, TTL after finish, and an operator killed
in the middle of a job."""

from __future__ import annotations

import json
import signal

from support.cluster import wait_until

from ddpjob_manifests import ddpjob


def test_suspend_deletes_pods_and_resume_starts_a_fresh_attempt(kube, operator):
    kube.apply(ddpjob("sus", replicas=2, gpus=1))
    kube.running_pods("sus", attempt=0, n=2)
    kube.wait_phase("sus", "Running")
    kube("patch", "ddpjob", "sus", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":true}}}')
    status = kube.wait_phase("sus", "Suspended")
    wait_until(lambda: not kube.pods("sus"), timeout=30, what="pods deleted on suspend")
    assert status["restarts"] == 0
    assert next(c for c in status["conditions"] if c["type"] == "Suspended")["status"] == "True"

    kube("patch", "ddpjob", "sus", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":false}}}')
    kube.running_pods("sus", attempt=1, n=2)
    status = kube.wait_phase("sus", "Running")
    assert (status["restarts"], status["attempt"]) == (0, 1)
    assert next(c for c in status["conditions"] if c["type"] == "Suspended")["status"] == "False"
    assert {"Suspended", "Resumed"} <= {e["reason"] for e in kube.events("sus")}


def test_job_created_suspended_creates_no_pods(kube, operator):
    kube.apply(ddpjob("cold", replicas=1, gpus=1, runPolicy={"suspend": True}))
    kube.wait_phase("cold", "Suspended")
    assert kube.pods("cold") == []


def test_scale_within_elastic_bounds_restarts_without_spending_the_budget(kube, operator):
    kube.apply(ddpjob("el", replicas=2, gpus=1, elastic={"minReplicas": 1, "maxReplicas": 3}))
    kube.running_pods("el", attempt=0, n=2)
    kube.wait_phase("el", "Running")
    kube("scale", "ddpj", "el", "--replicas=3")
    pods = kube.running_pods("el", attempt=1, n=3)
    status = kube.wait_status("el", lambda s: s.get("phase") == "Running" and s.get("replicas") == 3)
    assert (status["restarts"], status["attempt"], status["worldSize"], status["readyText"]) == (0, 1, 3, "3/3")
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "3", "the attempt's size: the operator decides it, torchrun forms at it"
    assert "Rescaled" in {e["reason"] for e in kube.events("el")}
    assert operator.metric("ddpjob_group_restarts_total", reason="Rescaled") == 1

    res = kube("scale", "ddpj", "el", "--replicas=4", check=False)
    assert res.returncode != 0
    assert "spec.replicas must be within [spec.elastic.minReplicas, spec.elastic.maxReplicas]" in res.stderr


def test_active_deadline_fails_the_job(kube, operator):
    kube.apply(ddpjob("dl", replicas=1, gpus=1, runPolicy={"activeDeadlineSeconds": 3}))
    kube.running_pods("dl", attempt=0, n=1)
    status = kube.wait_phase("dl", "Failed", timeout=30)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["reason"], failed["message"]) == ("DeadlineExceeded",
                                                     "job ran longer than activeDeadlineSeconds (3s)")
    wait_until(lambda: not kube.pods("dl"), timeout=30, what="running pod deleted after the deadline")


def test_ttl_deletes_the_finished_job(kube, operator):
    kube.apply(ddpjob("ttl", replicas=1, gpus=1, runPolicy={"ttlSecondsAfterFinished": 2}))
    kube.running_pods("ttl", attempt=0, n=1)
    kube.succeed_pod("ttl-worker-0")
    kube.wait_phase("ttl", "Succeeded")
    wait_until(lambda: kube.job("ttl") is None, timeout=30, what="job deleted after its TTL")


def test_operator_killed_mid_job_and_restarted_makes_no_duplicates(kube, operator):
    kube.apply(ddpjob("kill", replicas=3, gpus=1))
    first = kube.running_pods("kill", attempt=0, n=3)
    kube.wait_phase("kill", "Running")
    operator.kill(signal.SIGKILL)
    operator.start()
    kube.wait_phase("kill", "Running")
    assert {p["metadata"]["uid"] for p in kube.pods("kill")} == {p["metadata"]["uid"] for p in first}

    # Kill it again right after a failure is injected, then check the restart happens exactly once.
    kube.fail_pod("kill-worker-2", exit_code=1)
    operator.kill(signal.SIGKILL)
    operator.start()
    kube.running_pods("kill", attempt=1, n=3)
    status = kube.wait_phase("kill", "Running")
    assert (status["restarts"], status["attempt"]) == (1, 1)
    pods = kube.pods("kill")
    assert len(pods) == 3
    assert sorted(p["metadata"]["name"] for p in pods) == ["kill-worker-0", "kill-worker-1", "kill-worker-2"]


def test_operator_down_during_failure_catches_up_on_start(kube, operator):
    kube.apply(ddpjob("late", replicas=2, gpus=1))
    kube.running_pods("late", attempt=0, n=2)
    kube.wait_phase("late", "Running")
    operator.kill(signal.SIGKILL)
    kube.fail_pod("late-worker-0", exit_code=3)
    operator.start()
    kube.running_pods("late", attempt=1, n=2)
    assert kube.wait_phase("late", "Running")["restarts"] == 1


def test_concurrent_spec_edits_are_retried_not_crashed(kube, operator):
    kube.apply(ddpjob("edit", replicas=2, gpus=1, elastic={"minReplicas": 1, "maxReplicas": 4}))
    kube.running_pods("edit", attempt=0, n=2)
    for replicas in (3, 1, 4, 2):
        kube("scale", "ddpj", "edit", f"--replicas={replicas}")
    kube.wait_status("edit", lambda s: s.get("phase") == "Running" and s.get("replicas") == 2
                     and s.get("readyReplicas") == 2, timeout=60, what="settled at 2 replicas")
    assert len(kube.pods("edit")) == 2
    assert kube.status("edit")["restarts"] == 0
    assert "Traceback" not in operator.log() and "reconcile of" not in operator.log()
    assert json.loads(kube("get", "ddpj", "edit", "-o", "json").stdout)["status"]["observedGeneration"] >= 5
