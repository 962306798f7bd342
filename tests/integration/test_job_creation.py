"""A valid DDPJob gets its headless Service and N GPU pods with the exact env, scheduled on the simulated GPU
nodes; `kubectl get ddpj` shows the columns; deleting the job cascades."""

from __future__ import annotations

import json

from support.cluster import wait_until

from ddpjob_manifests import ddpjob


def env_of(pod: dict) -> dict:
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_job_gets_service_and_gpu_pods_with_exact_env(kube, operator):
    namespace = kube.ns
    kube.apply(ddpjob("train", replicas=2, gpus=8))
    pods = sorted(kube.running_pods("train", attempt=0, n=2), key=lambda p: p["metadata"]["name"])
    status = kube.wait_phase("train", "Running")
    uid = kube.job("train")["metadata"]["uid"]

    svc = kube.get("service", "train")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["ports"][0]["port"] == 29400

    assert [p["metadata"]["name"] for p in pods] == ["train-worker-0", "train-worker-1"]
    nodes = set()
    for index, pod in enumerate(pods):
        assert pod["spec"]["nodeName"].startswith("gpu-node-")
        nodes.add(pod["spec"]["nodeName"])
        trainer = pod["spec"]["containers"][0]
        assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert trainer["resources"]["requests"]["nvidia.com/gpu"] == "8"
        assert pod["spec"]["hostname"] == f"train-worker-{index}" and pod["spec"]["subdomain"] == "train"
        assert pod["metadata"]["labels"]["ddpjob.dev/restart-attempt"] == "0"
        assert pod["metadata"]["ownerReferences"][0]["uid"] == uid
        host = f"train-worker-0.train.{namespace}.svc"
        assert env_of(pod) == {
            "LR": "0.1",
            "PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"{host}:29400", "PET_RDZV_ID": f"{uid}-0",
            "PET_RDZV_CONF": f"is_host={'true' if index == 0 else 'false'},join_timeout=600,last_call_timeout=30",
            "PET_MAX_RESTARTS": "0", "PET_NODE_RANK": str(index), "MASTER_ADDR": host, "MASTER_PORT": "29400",
            "TORCHELASTIC_ERROR_FILE": "/dev/termination-log", "DDPJOB_NAME": "train",
            "DDPJOB_NAMESPACE": namespace, "DDPJOB_ATTEMPT": "0", "DDPJOB_REPLICA_INDEX": str(index),
            "DDPJOB_RESTARTS": "0", "DDPJOB_COLLECTIVE_TIMEOUT_SECONDS": "300",
            "POD_IP": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
            "TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_ON_TIMEOUT": "1",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_ENABLE_MONITORING": "1",
            "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "110"}
    assert len(nodes) == 2, "8 GPUs each: the two pods cannot share a node"
    assert (status["worldSize"], status["readyText"], status["restarts"], status["attempt"]) == (16, "2/2", 0, 0)
    assert status["selector"] == "ddpjob.dev/job-name=train"
    assert [c["type"] for c in status["conditions"] if c["status"] == "True"] == ["Running"]

    events = kube.events("train")
    assert "Running" in {e["reason"] for e in events}
    # Pods that run within the settle time are announced with the Running event; slower ones get their own.
    assert any(e["reason"] == "CreatedPods" or e["message"].startswith("created 2 pods for attempt 0") for e in events)

    # A quiet local mode: no endpoint controllers, so a healthy job's namespace shows no warning (the loopback pod
    # IPs used to draw FailedToUpdateEndpointSlices on every job).
    assert kube.get("endpointslices")["items"] == []
    assert [e["reason"] for e in kube.get("events")["items"] if e["type"] == "Warning"] == []

    job = kube.job("train")
    assert not job["metadata"].get("finalizers"), "no finalizer may strand a job while the operator is down"
    assert not any("kopf" in k for k in (job["metadata"].get("annotations") or {}))
    assert operator.metric("ddpjob_pods_created_total") == 2
    assert operator.metric("ddpjob_jobs_created_total") == 1
    assert operator.process.metric("ddpjob_jobs", phase="Running") >= 1  # a gauge over the shared operator
    assert operator.metric("ddpjob_time_to_all_running_seconds_count") == 1


def test_kubectl_get_shows_the_columns(kube, operator):
    kube.apply(ddpjob("cols", replicas=2, gpus=1))
    kube.wait_phase("cols", "Running")
    lines = kube("get", "ddpj").stdout.splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "SIZE", "READY", "PROGRESS", "RESTARTS", "DISRUPTIONS", "WORLDSIZE",
                                "REASON", "AGE"]
    # No trainer reports here (simulated pods), so PROGRESS is empty and the row has one field fewer.
    assert lines[1].split()[:8] == ["cols", "Running", "2/2", "2/2", "0", "0", "2", "AllPodsRunning"]
    wide = kube("get", "ddpj", "-o", "wide").stdout.splitlines()[0].split()
    assert wide[-4:] == ["STEP", "ATTEMPT", "QUEUE", "PLACEMENT"]


def test_scale_subresource_reads_replicas_and_selector(kube, operator):
    kube.apply(ddpjob("sc", replicas=2, gpus=1))
    kube.wait_phase("sc", "Running")
    raw = kube.cluster.kubectl("get", "--raw",
                               f"/apis/ddpjob.dev/v1alpha1/namespaces/{kube.ns}/ddpjobs/sc/scale").stdout
    scale = json.loads(raw)
    assert scale["spec"]["replicas"] == 2
    assert scale["status"] == {"replicas": 2, "selector": "ddpjob.dev/job-name=sc"}


def test_deleting_the_job_cascades_to_pods_and_service(kube, operator):
    kube.apply(ddpjob("gone", replicas=2, gpus=1))
    kube.running_pods("gone", attempt=0, n=2)
    kube("delete", "ddpjob", "gone", "--wait=true", "--timeout=30s")
    wait_until(lambda: not kube.pods("gone") and kube.get("service", "gone") is None, timeout=60,
               what="pods and Service garbage-collected")


def test_pods_of_a_job_deleted_while_the_operator_is_down_go_when_it_returns(kube, operator):
    kube.apply(ddpjob("orphan", replicas=1, gpus=1))
    kube.running_pods("orphan", attempt=0, n=1)
    operator.kill()
    kube("delete", "ddpjob", "orphan", "--wait=true", "--timeout=30s")
    # The job goes at once (it has no finalizer); its pod waits, Terminating, for the operator to free it.
    wait_until(lambda: all(p["metadata"].get("deletionTimestamp") for p in kube.pods("orphan")), timeout=60,
               what="pod marked for deletion by the garbage collector")
    assert [p["metadata"]["finalizers"] for p in kube.pods("orphan")] == [["ddpjob.dev/pod-tracking"]]
    operator.start()
    wait_until(lambda: not kube.pods("orphan"), timeout=60, what="pod removed once the operator is back")


def test_a_resource_quantity_the_api_cannot_decode_is_refused_at_apply_and_nothing_is_made(kube, operator):
    # Found by the fuzz suite: a limit that is no quantity. The API server answers a pod made of it with 400 (not
    # 422), and before the CRD checked quantities the job failed only once the operator tried (InvalidPodTemplate),
    # or its reconcile kept failing on the quantity. Now `kubectl apply` refuses it, naming the field.
    job = ddpjob("lots", replicas=1)
    del job["spec"]["gpusPerReplica"]  # the template's limit is then mirrored into the request, as written
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "lots"}}
    res = kube("apply", "-f", "-", input=json.dumps(job), check=False)
    assert res.returncode != 0, res.stdout
    assert 'resources.limits[nvidia.com/gpu]: Invalid value: "lots": must be a non-negative Kubernetes quantity' \
        in res.stderr, res.stderr
    assert kube.get("ddpj", "lots") is None
    assert kube.pods("lots") == []


def test_template_that_makes_an_invalid_pod_fails_the_job_with_the_servers_message(kube, operator):
    job = ddpjob("badpod", replicas=1, gpus=1)
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Sometimes"
    kube.apply(job)
    status = kube.wait_phase("badpod", "Failed", timeout=30)
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidPodTemplate"
    assert failed["message"].startswith("pod badpod-worker-0 was rejected by the API server: ")
    assert 'Unsupported value: "Sometimes"' in failed["message"]
    assert kube.pods("badpod") == []
    assert "InvalidPodTemplate" in {e["reason"] for e in kube.events("badpod")}


def test_a_refused_pod_is_retried_and_the_job_says_why(kube, operator):
    """Quota refuses one of the two pods (403): the job does not fail; it says why in a condition, its REASON and a
    Warning event, and creates the pod once the quota allows it."""
    kube.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "one-pod"},
                "spec": {"hard": {"pods": "1"}}})
    wait_until(lambda: ((kube.get("resourcequota", "one-pod") or {}).get("status") or {}).get("hard"),
               timeout=60, what="the quota's status")
    kube.apply(ddpjob("quota", replicas=2, gpus=1))

    def refused(status):
        return next((c for c in status.get("conditions") or []
                     if c["type"] == "PodsCreated" and c["status"] == "False"), None)

    status = kube.wait_status("quota", refused, timeout=60, what="PodsCreated=False")
    condition = refused(status)
    assert condition["reason"] == "FailedCreate" and "exceeded quota" in condition["message"], condition
    assert (status["phase"], status["reason"]) == ("Pending", "FailedCreate")
    assert "FailedCreate" in {e["reason"] for e in kube.events("quota")}
    assert len(kube.pods("quota")) == 1

    kube("delete", "resourcequota", "one-pod")
    kube.running_pods("quota", attempt=0, n=2, timeout=60)
    status = kube.wait_status("quota", lambda s: s.get("phase") == "Running" and not refused(s), timeout=60,
                              what="Running with every pod created")
    created = next(c for c in status["conditions"] if c["type"] == "PodsCreated")
    assert created["status"] == "True" and status["restarts"] == 0
