"""The operator's torchft env contract, read in one place (ddp_trainer.fault_tolerance): what turns the mode on,
what each name sets, and a bad value's message naming the variable."""

from datetime import timedelta

import pytest

from ddp_trainer.config import Config, ConfigError
from ddp_trainer.fault_tolerance import ReplicaGroupEnv, check_even_split
from ddp_trainer.progress_log import (
    HEALED,
    LIGHTHOUSE_MOVED,
    PROGRESS,
    Identity,
    healed_line,
    lighthouse_moved_line,
    progress_line,
)

BASE = {
    "TORCHFT_LIGHTHOUSE": "http://job-lighthouse.job.ns.svc:29510",
    "REPLICA_GROUP_ID": "1",
    "NUM_REPLICA_GROUPS": "3",
}


@pytest.mark.parametrize(
    "name, environ",
    [
        ("unset", {}),
        ("empty", {"TORCHFT_LIGHTHOUSE": ""}),
        ("the other names alone", {"REPLICA_GROUP_ID": "0", "NUM_REPLICA_GROUPS": "2"}),
    ],
)
def test_without_a_lighthouse_the_mode_is_off(name, environ):
    assert ReplicaGroupEnv.from_environ(environ) is None


def test_every_name_sets_its_field():
    got = ReplicaGroupEnv.from_environ(
        {
            **BASE,
            "TORCHFT_MIN_REPLICAS": "2",
            "TORCHFT_TIMEOUT_SEC": "7",
            "TORCHFT_QUORUM_TIMEOUT_SEC": "8",
            "TORCHFT_CONNECT_TIMEOUT_SEC": "9",
        }
    )
    assert got == ReplicaGroupEnv(
        lighthouse="http://job-lighthouse.job.ns.svc:29510",
        replica_group=1,
        num_replica_groups=3,
        min_replicas=2,
        timeout=timedelta(seconds=7),
        quorum_timeout=timedelta(seconds=8),
        connect_timeout=timedelta(seconds=9),
    )


def test_defaults_are_torchfts():
    got = ReplicaGroupEnv.from_environ(BASE)
    assert got is not None and got.min_replicas == 1
    assert got.timeout == got.quorum_timeout == got.connect_timeout == timedelta(seconds=60)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"REPLICA_GROUP_ID": None}, "REPLICA_GROUP_ID must be set when TORCHFT_LIGHTHOUSE is"),
        ({"NUM_REPLICA_GROUPS": None}, "NUM_REPLICA_GROUPS must be set when TORCHFT_LIGHTHOUSE is"),
        ({"REPLICA_GROUP_ID": "3"}, "REPLICA_GROUP_ID=3 must be below NUM_REPLICA_GROUPS=3"),
        ({"REPLICA_GROUP_ID": "-1"}, "REPLICA_GROUP_ID must be >= 0, got -1"),
        ({"NUM_REPLICA_GROUPS": "two"}, "NUM_REPLICA_GROUPS must be a whole number, got 'two'"),
        ({"TORCHFT_MIN_REPLICAS": "4"}, "TORCHFT_MIN_REPLICAS=4 is more than NUM_REPLICA_GROUPS=3"),
        ({"TORCHFT_MIN_REPLICAS": "0"}, "TORCHFT_MIN_REPLICAS must be >= 1, got 0"),
        # torchft's Manager reads these itself with int(): a fraction would crash it later, in its constructor.
        ({"TORCHFT_TIMEOUT_SEC": "2.5"}, "TORCHFT_TIMEOUT_SEC must be a whole number, got '2.5'"),
        ({"TORCHFT_QUORUM_TIMEOUT_SEC": "0"}, "TORCHFT_QUORUM_TIMEOUT_SEC must be >= 1, got 0"),
        ({"TORCHFT_CONNECT_TIMEOUT_SEC": "soon"}, "TORCHFT_CONNECT_TIMEOUT_SEC must be a whole number, got 'soon'"),
    ],
)
def test_bad_values_name_the_variable(change, message):
    environ = {k: v for k, v in {**BASE, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as e:
        ReplicaGroupEnv.from_environ(environ)
    assert message in str(e.value)


@pytest.mark.parametrize("fixed, group_world, ok", [(0, 2, True), (96, 2, True), (96, 1, True), (64, 2, False)])
def test_the_global_batch_splits_evenly_over_all_groups_ranks(fixed, group_world, ok):
    cfg = Config()
    cfg.train.global_batch_size = fixed
    replicas = ReplicaGroupEnv.from_environ(BASE)
    assert replicas is not None
    if ok:
        check_even_split(cfg, group_world, replicas)
    else:
        with pytest.raises(ConfigError, match="must divide evenly over 6 ranks"):
            check_even_split(cfg, group_world, replicas)


def test_log_lines_name_the_group_before_the_rank():
    who = Identity("j", "0", 0, replica_group=1)
    line = progress_line(who, 10, 20, 0, 1.0, 1e-3, 5.0)
    assert line.startswith("[job=j attempt=0 group=1 rank=0] ")  # `rank=N]` stays last: kubectl ddpj logs reads it
    m = PROGRESS.search(line)
    assert m and m["group"] == "1" and m["rank"] == "0" and m["step"] == "10"
    healed = HEALED.search(healed_line(who, 0, 120, 3840, 0.5))
    assert healed and (healed["peer"], healed["step"], healed["samples"], healed["group"]) == ("0", "120", "3840", "1")
    moved = LIGHTHOUSE_MOVED.search(lighthouse_moved_line(who, "j-lighthouse.j.ns.svc", ["10.0.0.5"], ["10.0.0.9"], 1))
    assert moved and (moved["group"], moved["host"], moved["old"], moved["new"], moved["n"]) == (
        "1",
        "j-lighthouse.j.ns.svc",
        "10.0.0.5",
        "10.0.0.9",
        "1",
    )
    plain = PROGRESS.search(progress_line(Identity("j", "0", 3), 10, 20, 0, 1.0, 1e-3, 5.0))
    assert plain and plain["group"] is None and plain["rank"] == "3"


@pytest.mark.parametrize("pod_ip, want_host", [("10.2.3.4", "10.2.3.4"), ("fd00::7", "[fd00::7]"), ("", None)])
def test_peers_are_told_the_pods_ip_not_its_host_name(pod_ip, want_host):
    """A pod's short host name resolves in that pod alone, and torchrun's standalone store says localhost: across
    pods only the pod's IP reaches its Manager, its group's store and its heal server."""
    from ddp_trainer.replica_groups import advertised

    ft = ReplicaGroupEnv.from_environ({**BASE, "POD_IP": pod_ip})
    got = advertised(ft)
    if want_host is None:
        assert got == {}
        return
    assert (got["hostname"], got["store_addr"]) == (want_host, pod_ip)
    assert got["checkpoint_transport"].address().startswith(f"http://{want_host}:")
    got["checkpoint_transport"].shutdown()


@pytest.mark.parametrize("pod_ip, want_host", [("10.2.3.4", "10.2.3.4"), ("fd00::7", "[fd00::7]")])
def test_the_process_groups_reconfigure_handle_names_the_pods_ip(pod_ip, want_host):
    """torchft's process group tells the other groups where its store is with `socket.gethostname()`, which no
    other pod resolves (found on the real nodes: no step was ever committed). It must say the pod's IP."""
    import json
    import socket

    import torch

    from ddp_trainer.replica_groups import process_group

    pg = process_group(ReplicaGroupEnv.from_environ({**BASE, "POD_IP": pod_ip}), torch.device("cpu"))
    store = json.loads(pg.get_reconfigure_handle())["store"]
    address, prefix = store.split("/", 1)  # the first build's keys' prefix (test_replica_group_handles.py)
    host, port = address.rsplit(":", 1)
    assert host == want_host and host != socket.gethostname() and int(port) > 0 and prefix == "g0", store
