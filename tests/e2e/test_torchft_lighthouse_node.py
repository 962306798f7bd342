"""TorchFT on three local nodes: the node the Lighthouse runs on goes silent (issue 35). Before, a Lighthouse on a
lost node always recreated the group from its checkpoint: the groups' quorum call held on to it until their quorum
timeout. Now the operator force-deletes it and makes it again elsewhere, the surviving group follows the Lighthouse's
name to the new one (lighthouse_watch.py), and the job never leaves Running or its attempt.

The Lighthouse shares its node with a worker, so the loss means something: both pool nodes hold a worker (one per
node), and the Lighthouse goes to one of them. That node's agent is killed and its processes stopped (a silent
loss: no reset reaches the survivor)."""

from __future__ import annotations

import time

from conftest import apply_job, digits_job, job_status, pods
from ddp_trainer.progress_log import LIGHTHOUSE_MOVED
from ddpjob_localnode.recovery import parse_trainer_log
from support import localnode
from support.cluster import wait_until
from test_elastic_local_nodes import three_local_nodes  # noqa: F401 - the fixture
from test_in_place import _events
from test_local_jobs import JOB_TIMEOUT
from test_torchft import JOB, STEPS, TORCHFT, scrape

POOL = "ddpjob.dev/e2e-lighthouse-pool"


def torchft_job_on_the_pool() -> dict:
    job = digits_job(name=JOB, steps=STEPS, every=500, replicas=2, nprocPerNode=1, faultTolerance=TORCHFT)
    spec = job["spec"]["template"]["spec"]
    spec["nodeSelector"] = {POOL: "yes"}  # the Lighthouse takes the template's node selector
    spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"ddpjob.dev/job-name": JOB},
                          "matchExpressions": [{"key": "app.kubernetes.io/component", "operator": "NotIn",
                                                "values": ["lighthouse"]}]},
        "topologyKey": "kubernetes.io/hostname"}]}}  # one worker per node
    return job


def by_name(cluster, namespace: str) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in pods(cluster, namespace, JOB)}


def test_the_lighthouses_node_lost_the_survivor_trains_on_with_a_new_one_in_its_attempt(
        cluster, operator, namespace, three_local_nodes):  # noqa: F811 - the fixture
    pool = three_local_nodes[1:]  # the session's agent 0 stays out of it: other tests' pods run there
    cluster.kubectl("label", "node", *pool, f"{POOL}=yes", "--overwrite")
    frozen: list[int] = []
    try:
        apply_job(cluster, namespace, torchft_job_on_the_pool())
        wait_until(lambda: all(scrape(cluster, namespace, g).get("ddp_trainer_replica_groups") == 2 for g in (0, 1))
                   and (job_status(cluster, namespace, JOB).get("progress") or {}).get("lighthouseReconnect"),
                   timeout=JOB_TIMEOUT, interval=0.5, what="both replica groups training, reported in status")
        first = by_name(cluster, namespace)
        lost_node = first["ft-lighthouse"]["spec"]["nodeName"]
        (lost_group,) = [int(p["metadata"]["labels"]["ddpjob.dev/replica-index"]) for p in first.values()
                         if p["spec"]["nodeName"] == lost_node and "ddpjob.dev/replica-index" in p["metadata"]["labels"]]
        survivor = 1 - lost_group
        survivor_pod = f"ft-worker-{survivor}"
        at_loss = scrape(cluster, namespace, survivor)["ddp_trainer_step"]
        frozen = localnode.freeze(three_local_nodes.index(lost_node))
        lost_at = time.monotonic()

        phases: set[str] = set()

        def trained_on_with_a_new_lighthouse():
            phases.add(job_status(cluster, namespace, JOB).get("phase", ""))
            assert phases == {"Running"}, f"the job left Running over its Lighthouse's node: {phases}"
            now = by_name(cluster, namespace)
            lighthouse = now.get("ft-lighthouse") or {}
            return (lighthouse.get("metadata", {}).get("uid") not in (None, first["ft-lighthouse"]["metadata"]["uid"])
                    and scrape(cluster, namespace, survivor).get("ddp_trainer_step", 0) > at_loss + 20 and now)

        now = wait_until(trained_on_with_a_new_lighthouse, timeout=JOB_TIMEOUT, interval=0.5,
                         what="the survivor training 20 steps on with a new Lighthouse")
        print(f"the survivor trained 20 steps on {time.monotonic() - lost_at:.1f} s after its Lighthouse's node went")
        assert phases == {"Running"}, f"the job left Running over its Lighthouse's node: {phases}"
        assert now["ft-lighthouse"]["spec"]["nodeName"] != lost_node
        assert now[survivor_pod]["metadata"]["uid"] == first[survivor_pod]["metadata"]["uid"], "the survivor's pod went"
        status = job_status(cluster, namespace, JOB)
        assert status["attempt"] == 0 and status["phase"] == "Running", status
        assert all(r["how"] != "GroupRecreated" for r in status.get("recoveries") or []), status["recoveries"]
        log = cluster.kubectl("-n", namespace, "logs", survivor_pod).stdout
        assert parse_trainer_log(log).resumed_step is None, f"the survivor read a checkpoint:\n{log[-2000:]}"
        moved = LIGHTHOUSE_MOVED.search(log)
        assert moved and moved["host"].startswith(f"ft-lighthouse.{JOB}.{namespace}.svc"), log[-2000:]
        reasons = [e["reason"] for e in _events(cluster, namespace, JOB)]
        assert "LighthouseLost" in reasons and "Restarting" not in reasons, reasons
    finally:
        localnode.thaw(frozen)
        cluster.kubectl("label", "node", *pool, f"{POOL}-", check=False)
    cluster.kubectl("-n", namespace, "delete", "ddpj", JOB, "--wait=false")
