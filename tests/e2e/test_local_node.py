"""The local node agent against the real control plane, with plain pods (no operator): registration, status,
env/volumes/DNS, logs through the apiserver, deletion and agent restarts."""

from __future__ import annotations

import json

from support import localnode
from support.cluster import wait_until


def test_node_is_registered_ready_with_this_machines_capacity(cluster, local_node):
    node = json.loads(cluster.kubectl("get", "node", local_node, "-o", "json").stdout)
    assert node["metadata"]["labels"][localnode.LABEL] == "true"
    assert {"key": localnode.LABEL, "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
    capacity = node["status"]["capacity"]
    assert capacity["nvidia.com/gpu"] == "0"
    assert int(capacity["cpu"]) >= 1
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
    lease = json.loads(cluster.kubectl("-n", "kube-node-lease", "get", "lease", local_node, "-o", "json").stdout)
    assert lease["spec"]["holderIdentity"] == local_node


def test_failed_pod_reports_exit_code_termination_message_event_and_logs(cluster, local_node, namespace):
    pod = localnode.local_pod("fails", ["sh", "-c", "echo hello from $(POD); echo root cause > /dev/termination-log;"
                                        " exit 3"],
                              container={"env": [{"name": "POD", "valueFrom": {"fieldRef": {
                                  "fieldPath": "metadata.name"}}}]})
    localnode.apply(cluster, namespace, pod)
    done = localnode.wait_phase(cluster, namespace, "fails", ("Failed", "Succeeded"))
    state = localnode.terminated(done)
    assert (done["status"]["phase"], state["exitCode"], state["reason"]) == ("Failed", 3, "Error")
    assert state["message"].strip() == "root cause"
    assert done["status"]["podIP"].startswith("127.0.")
    reasons = {e["reason"]: e["message"] for e in localnode.pod_events(cluster, namespace, "fails")}
    assert "is not used in local mode" in reasons["LocalMode"]
    logs = cluster.kubectl("-n", namespace, "logs", "fails")
    assert logs.stdout == "hello from fails\n"


def test_fallback_to_logs_on_error_reports_the_log_tail(cluster, local_node, namespace):
    pod = localnode.local_pod("tail", ["sh", "-c", "echo line one; echo the real error >&2; exit 2"],
                              container={"terminationMessagePolicy": "FallbackToLogsOnError"})
    localnode.apply(cluster, namespace, pod)
    state = localnode.terminated(localnode.wait_phase(cluster, namespace, "tail", ("Failed",)))
    assert "the real error" in state["message"] and "line one" in state["message"]


def test_pod_gets_its_ip_dns_name_env_and_volumes(cluster, local_node, namespace):
    script = ("import os, socket, pathlib;"
              "ip = socket.gethostbyname(os.environ['ME']);"
              "assert ip == os.environ['POD_IP'], (ip, os.environ['POD_IP']);"
              "pathlib.Path(os.environ['OUT'], 'note').write_text(os.environ['POD_IP']);"
              # A port of its own choosing on its own IP (a fixed one may be bound on 0.0.0.0 by another job).
              "s = socket.socket(); s.bind((ip, 0)); print('bound', s.getsockname()[0])")
    pod = localnode.local_pod("env", ["python", "-c", script], hostname="env", subdomain="svc1",
                              volumes=[{"name": "out", "hostPath": {"path": f"/tmp/{namespace}"}}],
                              container={"env": [
                                  {"name": "ME", "value": f"env.svc1.{namespace}.svc.cluster.local"},
                                  {"name": "OUT", "value": "/out"},
                                  {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                                  "volumeMounts": [{"name": "out", "mountPath": "/out"}]})
    localnode.apply(cluster, namespace, pod)
    done = localnode.wait_phase(cluster, namespace, "env", ("Failed", "Succeeded"))
    logs = cluster.kubectl("-n", namespace, "logs", "env").stdout
    assert done["status"]["phase"] == "Succeeded", (logs, localnode.terminated(done))
    assert logs.strip() == f"bound {done['status']['podIP']}"
    note = localnode.CLUSTER_DIR / "local-node" / "hostpath" / "tmp" / namespace / "note"
    assert note.read_text() == done["status"]["podIP"]


def test_pod_without_command_fails_with_a_message_that_says_why(cluster, local_node, namespace):
    pod = localnode.local_pod("nocmd", [])
    del pod["spec"]["containers"][0]["command"]
    localnode.apply(cluster, namespace, pod)
    state = localnode.terminated(localnode.wait_phase(cluster, namespace, "nocmd", ("Failed",)))
    assert state["reason"] == "StartError"
    assert "local mode runs processes, not images" in state["message"]


def test_delete_sends_sigterm_then_removes_the_pod(cluster, local_node, namespace):
    marker = localnode.CLUSTER_DIR / "local-node" / "hostpath" / "tmp" / namespace / "term"
    pod = localnode.local_pod("graceful", ["sh", "-c", "trap 'echo got TERM > /m/term; exit 0' TERM; "
                                           "echo up; while true; do sleep 0.1; done"],
                              volumes=[{"name": "m", "hostPath": {"path": f"/tmp/{namespace}"}}],
                              container={"volumeMounts": [{"name": "m", "mountPath": "/m"}]})
    localnode.apply(cluster, namespace, pod)
    localnode.wait_phase(cluster, namespace, "graceful", ("Running",))
    wait_until(lambda: "up" in cluster.kubectl("-n", namespace, "logs", "graceful").stdout, timeout=20,
               what="process output")
    cluster.kubectl("-n", namespace, "delete", "pod", "graceful", "--wait=true", timeout=60)
    assert marker.read_text().strip() == "got TERM"


def test_delete_kills_a_process_that_ignores_sigterm_after_the_grace_period(cluster, local_node, namespace):
    pod = localnode.local_pod("stubborn", ["sh", "-c", "trap '' TERM; echo up; while true; do sleep 0.1; done"],
                              terminationGracePeriodSeconds=2)
    localnode.apply(cluster, namespace, pod)
    localnode.wait_phase(cluster, namespace, "stubborn", ("Running",))
    wait_until(lambda: "up" in cluster.kubectl("-n", namespace, "logs", "stubborn").stdout, timeout=20,
               what="process output")
    cluster.kubectl("-n", namespace, "delete", "pod", "stubborn", "--wait=false")
    wait_until(lambda: localnode.get_pod(cluster, namespace, "stubborn") is None, timeout=20,
               what="pod deleted after SIGKILL")


def test_logs_follow_streams_until_the_container_exits(cluster, local_node, namespace):
    pod = localnode.local_pod("follow", ["sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 0.5; done"])
    localnode.apply(cluster, namespace, pod)
    localnode.wait_phase(cluster, namespace, "follow", ("Running", "Succeeded"))
    out = cluster.kubectl("-n", namespace, "logs", "-f", "follow", timeout=30).stdout
    assert out.splitlines() == ["tick 1", "tick 2", "tick 3"]
    tail = cluster.kubectl("-n", namespace, "logs", "--tail=1", "follow").stdout
    assert tail == "tick 3\n"


def test_container_over_its_memory_limit_is_oom_killed(cluster, local_node, namespace):
    pod = localnode.local_pod("hog", ["python", "-c", "import time; x = bytearray(300 * 2**20); time.sleep(60)"],
                              container={"resources": {"limits": {"memory": "100Mi"}}})
    localnode.apply(cluster, namespace, pod)
    state = localnode.terminated(localnode.wait_phase(cluster, namespace, "hog", ("Failed", "Succeeded"), timeout=60))
    assert (state["reason"], state["exitCode"]) == ("OOMKilled", 137)


def test_pods_of_a_crashed_agent_die_and_are_marked_failed_when_it_returns(cluster, local_node, namespace):
    pod = localnode.local_pod("orphan", ["sh", "-c", "echo up; sleep 300"])
    localnode.apply(cluster, namespace, pod)
    running = localnode.wait_phase(cluster, namespace, "orphan", ("Running",))
    shim_pid = int(running["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
    localnode.kill_agent()
    wait_until(lambda: localnode._gone(shim_pid), timeout=10, what="the pod's processes to die with the agent")
    localnode.start(cluster)
    done = localnode.wait_phase(cluster, namespace, "orphan", ("Failed",), timeout=30)
    state = localnode.terminated(done)
    assert (state["reason"], state["exitCode"]) == ("ContainerStatusUnknown", 137)
