"""The real nodes themselves (issue 36, items 1 and 2): kubelets of the control plane's release on containerd 2.x,
pods that run there and reach each other across the two nodes, contained networking, cluster DNS and Services, the kubelet's own OOM kill
and container restarts, and a teardown that leaves nothing on the machine."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import struct
from pathlib import Path

from support.cluster import ROOT, wait_until
from support.realnode import NODES, apply, get, left_on_machine, pod_on, realnode, wait_running

KUBE_VERSION = re.search(r"k8s.io/kubernetes (v[0-9.]+)", (ROOT / "hack/tools/kubelet/go.mod").read_text())[1]


def uplink_gateway() -> str:
    """This machine's default gateway (/proc/net/route), the address a pod must have no route to."""
    for line in Path("/proc/net/route").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<L", int(fields[2], 16)))
    return "192.0.2.1"  # no default route here at all: any address off the pod and service ranges will do


def test_two_kubelets_of_the_control_planes_release_on_containerd_2_are_ready(cluster, real_nodes):
    for index, name in enumerate(real_nodes):
        node = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == KUBE_VERSION
        assert info["containerRuntimeVersion"].startswith("containerd://2."), info
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", ready
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] == f"10.244.{index}.1", "the node's host-only address, on its own bridge"
        assert {"key": "ddpjob.dev/real-node", "value": "true", "effect": "NoSchedule"} in node["spec"]["taints"]
        # The node's cgroup root weighs as one busy process per CPU against whatever else runs on this machine.
        shares = Path(f"/sys/fs/cgroup/cpu/ddpjob-realnode-{index}/cpu.shares")
        assert int(shares.read_text()) == 1024 * len(os.sched_getaffinity(0)), shares  # nproc


def test_pods_reach_each_other_across_the_nodes_and_nothing_routes_off_the_machine(cluster, namespace, real_nodes):
    apply(cluster, namespace, pod_on(real_nodes[1], "server", ["python3", "-m", "http.server", "8000"]))
    apply(cluster, namespace, pod_on(real_nodes[0], "client", ["sleep", "3600"]))
    server, client = wait_running(cluster, namespace, "server"), wait_running(cluster, namespace, "client")
    assert ipaddress.ip_address(server["status"]["podIP"]) in ipaddress.ip_network("10.244.1.0/24")
    assert ipaddress.ip_address(client["status"]["podIP"]) in ipaddress.ip_network("10.244.0.0/24")
    probe = f"""
import socket, urllib.request
print("status", urllib.request.urlopen("http://{server['status']['podIP']}:8000/", timeout=10).status)
routes = [l.split() for l in open("/proc/net/route").read().splitlines()[1:]]
print("default", any(r[1] == "00000000" for r in routes))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("{uplink_gateway()}", 53))  # sends nothing: only looks up a route
    print("uplink", "reachable")
except OSError as err:
    print("uplink", err.errno)
"""
    out = wait_until(lambda: (r := cluster.kubectl("-n", namespace, "exec", "client", "--", "python3", "-c", probe,
                                                   check=False)).returncode == 0 and r.stdout,
                     timeout=60, what="the client's probe")
    said = dict(line.split(" ", 1) for line in out.splitlines())
    assert said["status"] == "200", out
    assert said["default"] == "False", "a pod has routes to the pod and service ranges only"
    assert said["uplink"] == "101", f"a UDP connect() to the uplink's gateway must find no route (ENETUNREACH): {out}"
    # No NAT: the server saw the client's own pod address.
    log = cluster.kubectl("-n", namespace, "logs", "server").stdout
    assert client["status"]["podIP"] in log, log


def test_cluster_dns_services_and_the_api_server_from_a_pod(cluster, namespace, real_nodes):
    """What the trainer and the operator need from a pod: a headless Service's pod names (CoreDNS), a ClusterIP
    Service (kube-proxy), the API server as the `kubernetes` Service with the pod's own token; and no name off the
    cluster resolves (nothing is forwarded off the machine)."""
    server = pod_on(real_nodes[1], "web-0", ["python3", "-m", "http.server", "8000"])
    server["metadata"]["labels"] = {"app": "web"}
    server["spec"].update({"hostname": "web-0", "subdomain": "web"})
    apply(cluster, namespace, server)
    for name, spec in (("web", {"clusterIP": "None", "ports": [{"port": 8000}]}),
                       ("web-ip", {"ports": [{"port": 80, "targetPort": 8000}]})):
        apply(cluster, namespace, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                                   "spec": {"selector": {"app": "web"}, **spec}})
    apply(cluster, namespace, pod_on(real_nodes[0], "client", ["sleep", "3600"]))
    web = wait_running(cluster, namespace, "web-0")
    wait_running(cluster, namespace, "client")
    probe = f"""
import os, socket, ssl, urllib.request
print("pod", socket.gethostbyname("web-0.web.{namespace}.svc.cluster.local"))
print("headless", urllib.request.urlopen("http://web-0.web:8000/", timeout=5).status)
print("service", urllib.request.urlopen("http://web-ip/", timeout=5).status)
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
url = "https://%s:%s/version" % (os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
request = urllib.request.Request(url, headers={{"Authorization": "Bearer " + open(sa + "/token").read()}})
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
print("api", urllib.request.urlopen(request, context=ctx, timeout=5).status)
try:
    socket.gethostbyname("example.com")
    print("outside", "resolved")
except OSError as err:
    print("outside", err.errno)
"""
    # The EndpointSlices and kube-proxy's rules follow the pod within seconds: retry until they have.
    out = wait_until(lambda: (r := cluster.kubectl("-n", namespace, "exec", "client", "--", "python3", "-c", probe,
                                                   check=False)).returncode == 0 and r.stdout,
                     timeout=60, interval=1, what="the client's probe of DNS, Services and the API")
    said = dict(line.split(" ", 1) for line in out.splitlines())
    assert said["pod"] == web["status"]["podIP"], out
    assert (said["headless"], said["service"], said["api"]) == ("200", "200", "200"), out
    assert said["outside"] != "resolved", out


def test_a_memory_limit_exceeded_is_the_kubelets_oom_kill(cluster, namespace, real_nodes):
    apply(cluster, namespace, pod_on(
        real_nodes[1], "hog", ["python3", "-c", "b = bytearray(300 * 2**20); print(len(b))"], restartPolicy="Never",
        container={"resources": {"limits": {"memory": "64Mi", "cpu": "500m"}}}))

    def terminated():
        statuses = get(cluster, namespace, "pod", "hog").get("status", {}).get("containerStatuses") or []
        return statuses and statuses[0]["state"].get("terminated")
    state = wait_until(terminated, timeout=120, interval=0.5, what="the hog's container to end")
    assert (state["reason"], state["exitCode"]) == ("OOMKilled", 137), state


def test_the_kubelet_restarts_a_failed_container_in_its_pod(cluster, namespace, real_nodes):
    apply(cluster, namespace, pod_on(real_nodes[0], "flaky", ["sh", "-c", "sleep 1; exit 3"]))

    def restarted():
        statuses = get(cluster, namespace, "pod", "flaky").get("status", {}).get("containerStatuses") or []
        return statuses and statuses[0]["restartCount"] >= 1 and statuses[0]
    status = wait_until(restarted, timeout=120, interval=0.5, what="a container restart by the kubelet")
    assert status["lastState"]["terminated"]["exitCode"] == 3, status


def test_the_nodes_keep_no_image_that_no_tag_names(real_nodes):
    """`hack/images.sh load` prunes what a rebuilt image leaves behind: the old one stays in containerd under the
    CRI's own image-ID name, and each trainer rebuild left GBs on every node (this machine's disk ran out once)."""
    for i in range(len(NODES)):
        listed = json.loads(realnode("crictl", str(i), "images", "-o", "json").stdout)["images"]
        untagged = [image["id"] for image in listed if not image.get("repoTags")]
        assert not untagged, f"realnode-{i} keeps images no tag names: {untagged}"
        assert {t.rsplit(":", 1)[0] for image in listed for t in image["repoTags"]} >= {"localhost/ddpjob/pause"}


def test_down_leaves_no_process_container_mount_namespace_bridge_rule_or_cgroup(cluster, namespace, real_nodes):
    for index, node in enumerate(real_nodes):
        apply(cluster, namespace, pod_on(node, f"sleeper-{index}", ["sleep", "3600"]))
    for index in range(len(real_nodes)):
        wait_running(cluster, namespace, f"sleeper-{index}")
    assert left_on_machine(), "with two nodes running, `left` must see them (else this test proves nothing)"
    # What a shim killed by a crash before this `down` leaves in containerd's shim directory: a socket no one
    # listens on (a killed run left four, and the next `down` kept them).
    crashed_shim = Path("/run/containerd/s") / ("0" * 64)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(crashed_shim))
    assert str(crashed_shim) in left_on_machine()
    down = realnode("down", check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert left_on_machine() == []
    assert not any(name in NODES for name in
                   cluster.kubectl("get", "nodes", "-o", "name").stdout.replace("node/", "").split())
