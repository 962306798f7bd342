"""The local node's pure translation of a pod into a local process: $(VAR) expansion, downward API, volume
and path mapping, and the pod status it reports."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from ddpjob_localnode.env_expansion import container_env, expand, field_ref
from ddpjob_localnode.hosts_block import hosts_entries, pod_dns_names, render
from ddpjob_localnode.launch_plan import LaunchError, build_launch_plan, rewrite_path
from ddpjob_localnode.loopback_ips import LoopbackAllocator
from ddpjob_localnode.memory_limit import parse_quantity
from ddpjob_localnode.pod_status import lost_results, terminated_status, termination_message, was_started, \
    ContainerResult


@pytest.mark.parametrize("name,text,values,want", [
    ("defined", "$(A)-x", {"A": "1"}, "1-x"),
    ("undefined stays", "$(B)", {"A": "1"}, "$(B)"),
    ("escaped", "$$(A)", {"A": "1"}, "$(A)"),
    ("double dollar", "a$$b", {}, "a$b"),
    ("lone dollar", "cost $5", {}, "cost $5"),
    ("trailing dollar", "x$", {}, "x$"),
    ("unterminated", "$(A", {"A": "1"}, "$(A"),
    ("two", "$(A):$(B)", {"A": "h", "B": "29400"}, "h:29400"),
])
def test_expand(name, text, values, want):
    assert expand(text, values) == want


def make_pod(**spec) -> dict:
    container = {"name": "trainer", "image": "ghcr.io/x/trainer:1", "command": ["torchrun"],
                 "args": ["--ckpt=/ckpt/run", "$(MSG)"],
                 "env": [{"name": "A", "value": "a"}, {"name": "MSG", "value": "hello-$(A)"},
                         {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                         {"name": "JOB", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job']"}}},
                         {"name": "ERR", "value": "/dev/termination-log"},
                         {"name": "DATA", "value": "/data/sets"}],
                 "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}, {"name": "scratch", "mountPath": "/data"}]}
    pod = {"metadata": {"name": "j-worker-0", "namespace": "ns", "uid": "u1", "labels": {"job": "j"}},
           "spec": {"hostname": "j-worker-0", "subdomain": "j", "nodeName": "local-vm",
                    "containers": [container],
                    "volumes": [{"name": "ckpt", "hostPath": {"path": "/var/ckpt"}},
                                {"name": "scratch", "emptyDir": {}}]},
           "status": {"podIP": "127.0.1.5"}}
    pod["spec"].update(spec)
    return pod


def test_launch_plan_maps_env_args_and_volumes(tmp_path):
    pod = make_pod()
    plan = build_launch_plan(pod, pod["spec"]["containers"][0], tmp_path / "pod", tmp_path / "hostpath",
                             Path("/repo/.venv/bin"))
    assert plan.argv == ["torchrun", f"--ckpt={tmp_path}/hostpath/var/ckpt/run", "hello-a"]
    assert plan.env["POD_IP"] == "127.0.1.5"
    assert plan.env["JOB"] == "j"
    assert plan.env["ERR"] == str(plan.termination_log)
    assert plan.env["DATA"] == f"{tmp_path}/pod/volumes/scratch/sets"
    assert plan.env["PATH"].startswith("/repo/.venv/bin:")
    assert plan.env["HOSTNAME"] == "j-worker-0"


def test_a_local_process_runs_one_intra_op_thread_unless_its_pod_says_otherwise(tmp_path):
    """Every local node's processes share this machine's cores: OMP_NUM_THREADS=1, which the pod's env overrides."""
    pod = make_pod()
    plan = build_launch_plan(pod, pod["spec"]["containers"][0], tmp_path / "a", tmp_path / "h", tmp_path)
    assert plan.env["OMP_NUM_THREADS"] == "1"
    pod["spec"]["containers"][0]["env"].append({"name": "OMP_NUM_THREADS", "value": "4"})
    plan = build_launch_plan(pod, pod["spec"]["containers"][0], tmp_path / "b", tmp_path / "h", tmp_path)
    assert plan.env["OMP_NUM_THREADS"] == "4"


def test_launch_plan_without_command_says_why(tmp_path):
    pod = make_pod()
    del pod["spec"]["containers"][0]["command"]
    with pytest.raises(LaunchError, match="local mode runs processes, not images.*set command explicitly"):
        build_launch_plan(pod, pod["spec"]["containers"][0], tmp_path, tmp_path, tmp_path)


def test_launch_plan_unknown_volume_is_an_error(tmp_path):
    pod = make_pod(volumes=[])
    with pytest.raises(LaunchError, match="refers to unknown volume 'ckpt'"):
        build_launch_plan(pod, pod["spec"]["containers"][0], tmp_path, tmp_path, tmp_path)


def test_missing_config_map_key_is_an_error():
    container = {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}
    with pytest.raises(ValueError, match="env X: configMap 'cm' has no key 'k'"):
        container_env({"metadata": {"namespace": "n"}}, container, {}, lambda *a: None)


def test_unsupported_field_path_is_an_error():
    with pytest.raises(ValueError, match="unsupported downward API fieldPath 'spec.foo'"):
        field_ref({}, "spec.foo")


@pytest.mark.parametrize("value,want", [
    ("/ckpt", "/l/c"), ("/ckpt/a", "/l/c/a"), ("/ckptx", "/ckptx"), ("--dir=/ckpt/b", "--dir=/l/c/b"),
    ("/ckpt/deep/x", "/l/deep/x"), ("relative", "relative"),
    ("echo x > /ckpt/f; ls /ckpt", "echo x > /l/c/f; ls /l/c"), ("http://h/ckpt", "http://h/ckpt"),
    ("A=/ckpt:/ckpt/deep", "A=/l/c:/l/deep"), ("'/ckpt/q'", "'/l/c/q'"),
])
def test_rewrite_path_longest_mount_wins(value, want):
    assert rewrite_path(value, {"/ckpt": "/l/c", "/ckpt/deep": "/l/deep"}) == want


def test_loopback_allocator_never_hands_out_an_address_twice():
    ips = LoopbackAllocator()
    a, b = ips.allocate("a"), ips.allocate("b")
    assert a != b and a.startswith("127.0.1.") and ips.allocate("a") == a
    ips.release("a")
    assert ips.allocate("c") not in (a, b)


def test_hosts_block_replaces_only_its_own_block():
    current = "127.0.0.1 localhost\n# BEGIN ddpjob-localnode n\n127.0.1.1 old\n# END ddpjob-localnode n\n::1 x\n"
    out = render(current, "n", {"127.0.1.2": ["a.b.ns.svc", "a.b.ns.svc.cluster.local"]})
    assert out == ("127.0.0.1 localhost\n::1 x\n# BEGIN ddpjob-localnode n\n"
                   "127.0.1.2 a.b.ns.svc a.b.ns.svc.cluster.local\n# END ddpjob-localnode n\n")
    assert render(out, "n", {}) == "127.0.0.1 localhost\n::1 x\n"


def test_hosts_entries_add_the_short_hostname_only_when_unique():
    a, b = make_pod(), make_pod()
    b["metadata"]["namespace"] = "other"
    assert hosts_entries([("127.0.1.1", a)]) == {
        "127.0.1.1": ["j-worker-0.j.ns.svc", "j-worker-0.j.ns.svc.cluster.local", "j-worker-0"]}
    assert hosts_entries([("127.0.1.1", a), ("127.0.1.2", b)])["127.0.1.2"] == [
        "j-worker-0.j.other.svc", "j-worker-0.j.other.svc.cluster.local"]


def test_pod_dns_names():
    assert pod_dns_names(make_pod()) == ["j-worker-0.j.ns.svc", "j-worker-0.j.ns.svc.cluster.local"]
    assert pod_dns_names(make_pod(subdomain=None)) == []


@pytest.mark.parametrize("name,log_file,tail,code,policy,want", [
    ("file wins", "boom", "log", 1, "FallbackToLogsOnError", "boom"),
    ("fallback on error", "", "a\nb", 1, "FallbackToLogsOnError", "a\nb"),
    ("no fallback on success", "", "a", 0, "FallbackToLogsOnError", ""),
    ("no fallback with File policy", "", "a", 1, "File", ""),
])
def test_termination_message(name, log_file, tail, code, policy, want):
    assert termination_message(log_file, tail, code, policy) == want


def test_termination_message_fallback_keeps_the_last_80_lines():
    tail = "\n".join(str(i) for i in range(200))
    assert termination_message("", tail, 2, "FallbackToLogsOnError").splitlines()[0] == "120"


def test_terminated_status_reports_exit_reason_and_phase():
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    pod = make_pod()
    failed = terminated_status(pod, [ContainerResult("trainer", 1, now, now, message="bad")], now)["status"]
    state = failed["containerStatuses"][0]["state"]["terminated"]
    assert (failed["phase"], state["exitCode"], state["reason"], state["message"]) == ("Failed", 1, "Error", "bad")
    ok = terminated_status(pod, [ContainerResult("trainer", 0, now, now)], now)["status"]
    assert ok["phase"] == "Succeeded"
    assert ok["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_lost_pod_is_failed_with_container_status_unknown():
    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    pod = make_pod()
    assert was_started(pod)
    status = terminated_status(pod, lost_results(pod, now), now)["status"]
    terminated = status["containerStatuses"][0]["state"]["terminated"]
    assert (status["phase"], terminated["exitCode"], terminated["reason"]) == ("Failed", 137, "ContainerStatusUnknown")
    assert not was_started({"status": {"phase": "Pending"}})


@pytest.mark.parametrize("text,want", [("100", 100), ("1Ki", 1024), ("512Mi", 512 * 2**20), ("1G", 10**9),
                                       ("1.5Gi", int(1.5 * 2**30))])
def test_parse_quantity(text, want):
    assert parse_quantity(text) == want


def test_parse_quantity_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="unsupported memory quantity '1e9'"):
        parse_quantity("1e9")
