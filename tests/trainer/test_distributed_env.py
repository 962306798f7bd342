"""What the trainer reads from torchrun's and the operator's env, and where it serves metrics."""

import socket
from datetime import timedelta

import pytest

from ddp_trainer.distributed_env import DistEnv, collective_timeout
from ddp_trainer.metrics import TrainerMetrics, metrics_address, serve

TORCHRUN_ENV = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "w-0.j.ns.svc", "MASTER_PORT": "29400", "TORCHELASTIC_RESTART_COUNT": "2"}


def test_rank_and_world_size_come_from_torchrun():
    env = DistEnv.from_environ(TORCHRUN_ENV)
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size, env.restart_count) == (3, 4, 1, 2, 2)


def test_outside_torchrun_says_how_to_start():
    with pytest.raises(RuntimeError) as e:
        DistEnv.from_environ({"RANK": "0"})
    assert "not started by torchrun: WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT missing" in str(e.value)
    assert "torchrun --nproc-per-node N -m ddp_trainer" in str(e.value)


@pytest.mark.parametrize("value, want", [(None, 600), ("30", 30), ("2.5", 2.5)])
def test_collective_timeout(value, want):
    env = {} if value is None else {"DDPJOB_COLLECTIVE_TIMEOUT_SECONDS": value}
    assert collective_timeout(env) == timedelta(seconds=want)


@pytest.mark.parametrize("value, message", [
    ("soon", "DDPJOB_COLLECTIVE_TIMEOUT_SECONDS must be a number of seconds, got 'soon'"),
    ("0", "DDPJOB_COLLECTIVE_TIMEOUT_SECONDS must be > 0, got '0'"),
])
def test_bad_collective_timeout(value, message):
    with pytest.raises(RuntimeError, match=message):
        collective_timeout({"DDPJOB_COLLECTIVE_TIMEOUT_SECONDS": value})


def test_metrics_address_is_pod_ip_and_base_port_plus_local_rank():
    assert metrics_address(9400, 1, {"POD_IP": "10.1.2.3"}) == ("10.1.2.3", 9401)
    assert metrics_address(9400, 0, {}) == ("0.0.0.0", 9400)
    assert metrics_address(0, 3, {"POD_IP": "10.1.2.3"}) is None


def test_a_taken_port_disables_metrics_with_a_warning_not_the_run():
    warnings = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert serve(TrainerMetrics("j", 0), ("127.0.0.1", port), warnings.append) is False
    assert warnings[0].startswith(f"metrics endpoint disabled: cannot listen on 127.0.0.1:{port}:")
