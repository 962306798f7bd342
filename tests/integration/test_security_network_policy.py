"""spec.networkPolicy: an optional per-job NetworkPolicy that lets only the job's own worker pods reach its
workers (the rendezvous port among them), plus metrics scrapes. The local cluster has no CNI that enforces
policies, so this checks what the policy says; which pods it selects is checked against real pods."""

from __future__ import annotations

from support.cluster import wait_until

from ddpjob_manifests import ddpjob
from ddpjob_operator.workers.builders import JobRef, build_network_policy


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_policy_admits_only_the_jobs_own_workers_and_metrics_scrapes():
    policy = build_network_policy(JobRef("j", "ns", "uid-1"))
    spec = policy["spec"]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert spec["policyTypes"] == ["Ingress"]
    peers, scrapes = spec["ingress"]
    assert peers == {"from": [{"podSelector": spec["podSelector"]}]}, "any port, but only from the job's workers"
    assert scrapes == {"ports": [{"protocol": "TCP", "port": 9400, "endPort": 9463},  # the trainers' metrics
                                 {"protocol": "TCP", "port": 9399}]}  # InPlace: the agents' restart counts
    own = {"ddpjob.dev/job-name": "j", "app.kubernetes.io/component": "worker"}
    assert selects(spec["podSelector"], own)
    assert not selects(spec["podSelector"], {**own, "ddpjob.dev/job-name": "other"})


def test_job_that_asks_gets_its_policy_and_others_get_none(kube, operator):
    kube.apply(ddpjob("fenced", replicas=2, gpus=1, networkPolicy=True))
    kube.apply(ddpjob("open", replicas=1, gpus=1))
    fenced = kube.running_pods("fenced", attempt=0, n=2)
    other = kube.running_pods("open", attempt=0, n=1)
    policy = wait_until(lambda: kube.get("networkpolicy", "fenced"), timeout=30, what="NetworkPolicy fenced")
    selector = policy["spec"]["podSelector"]
    peers = policy["spec"]["ingress"][0]["from"][0]["podSelector"]
    assert all(selects(selector, p["metadata"]["labels"]) and selects(peers, p["metadata"]["labels"])
               for p in fenced)
    assert not any(selects(peers, p["metadata"]["labels"]) for p in other)
    assert policy["metadata"]["ownerReferences"][0]["name"] == "fenced"
    assert kube.get("networkpolicy", "open") is None
    assert kube.wait_phase("fenced", "Running")["restarts"] == 0


def test_a_deleted_policy_is_put_back(kube, operator):
    kube.apply(ddpjob("refence", replicas=1, gpus=1, networkPolicy=True))
    uid = wait_until(lambda: kube.get("networkpolicy", "refence"), timeout=30, what="policy")["metadata"]["uid"]
    kube("delete", "networkpolicy", "refence")
    wait_until(lambda: (kube.get("networkpolicy", "refence") or {}).get("metadata", {}).get("uid") not in (None, uid),
               timeout=40, what="policy recreated")


def test_a_foreign_policy_of_the_jobs_name_is_not_taken_for_its_own(kube, operator):
    """Someone's NetworkPolicy named like the job, without our label: the job does not run without the isolation
    it asked for; it waits, says why, and runs once the name is free."""
    kube.apply({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "squat"},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}})
    kube.apply(ddpjob("squat", replicas=1, gpus=1, networkPolicy=True))
    status = kube.wait_status("squat", lambda s: s.get("reason") == "NetworkPolicyConflict", timeout=30,
                              what="REASON NetworkPolicyConflict")
    assert status["phase"] == "Pending" and kube.pods("squat") == [], status
    assert "NetworkPolicyConflict" in {e["reason"] for e in kube.events("squat")}
    kube("delete", "networkpolicy", "squat")
    kube.running_pods("squat", attempt=0, n=1, timeout=60)
    policy = wait_until(lambda: kube.get("networkpolicy", "squat"), timeout=30, what="the job's own policy")
    assert policy["metadata"]["ownerReferences"][0]["name"] == "squat"
