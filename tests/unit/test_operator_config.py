"""Command line and environment of the operator."""

from __future__ import annotations

import pytest

from ddpjob_operator.config import parse_args
from ddpjob_operator.logfmt import LogfmtFormatter


def test_defaults_watch_all_namespaces():
    config = parse_args([])
    assert config.clusterwide and config.namespaces == ()
    assert (config.metrics_port, config.liveness_port, config.peering) == (8080, 8081, None)
    assert config.planner.node_lost_grace_seconds == 30


def test_namespaces_and_env_overrides(monkeypatch):
    monkeypatch.setenv("DDPJOB_RESYNC_SECONDS", "2")
    monkeypatch.setenv("DDPJOB_NODE_LOST_GRACE_SECONDS", "5")
    config = parse_args(["--namespace", "a", "-n", "b", "-n", "a", "--priority", "10", "--peering", "ddp"])
    assert config.namespaces == ("a", "b") and not config.clusterwide
    assert (config.resync_seconds, config.planner.node_lost_grace_seconds) == (2.0, 5.0)
    assert (config.priority, config.peering) == (10, "ddp")


@pytest.mark.parametrize("argv, message", [
    (["--namespace", "a", "--all-namespaces"], "not allowed with argument"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--resync-seconds", "0"], "--resync-seconds must be positive"),
])
def test_bad_arguments_are_refused_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_log_lines_name_job_attempt_and_pod():
    import logging
    record = logging.LogRecord("ddpjob.applier", logging.INFO, __file__, 1, "created pod", None, None)
    record.job, record.attempt, record.pod = "ns/a", 2, "a-worker-0"
    line = LogfmtFormatter().format(record)
    assert line.endswith('level=info logger=ddpjob.applier msg="created pod" job=ns/a attempt=2 pod=a-worker-0')


def test_busy_metrics_port_is_a_clear_error(capsys):
    import socket

    from ddpjob_operator.__main__ import main
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["--metrics-port", str(port)]) == 2
    assert f"ddpjob-operator: cannot serve metrics on port {port} (Address already in use); choose another with " \
           "--metrics-port" in capsys.readouterr().err
