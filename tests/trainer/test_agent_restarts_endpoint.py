"""The image's entrypoint serves its torchrun agent's in-place restart count (ddpjob_agent_restarts) while torchrun
runs, when the operator sets DDPJOB_AGENT_METRICS_PORT (restartStrategy InPlace): a real torchrun whose worker
fails twice, then runs until told to stop. The operator reads every pod's count, not only worker 0's trainer."""

from __future__ import annotations

import socket
import time
import urllib.request

from ddp_trainer import torchrun as launcher
from prometheus_client.parser import text_string_to_metric_families

from launch import DDP_TORCHRUN, start, stop, trainer_env

from ddpjob_operator import api

# Fails on its first two starts (a counter file), then waits for the test's marker and exits 0.
SCRIPT = """import pathlib, sys, time
count = pathlib.Path(sys.argv[1]); marker = pathlib.Path(sys.argv[2])
n = int(count.read_text()) if count.exists() else 0
count.write_text(str(n + 1))
if n < 2:
    sys.exit(3)
while not marker.exists():
    time.sleep(0.1)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_restarts(port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == launcher.AGENT_RESTARTS_SERIES:
                return int(sample.value)
    return None


def test_the_agent_serves_its_restart_count_while_it_runs(tmp_path):
    script = tmp_path / "flaky.py"
    script.write_text(SCRIPT)
    port = free_port()
    env = trainer_env(**{launcher.AGENT_PORT_ENV: str(port), "POD_IP": "127.0.0.1"})
    cmd = [*DDP_TORCHRUN, "--standalone", "--nproc-per-node=1", "--monitor-interval=0.2", "--max-restarts=5",
           str(script), str(tmp_path / "count"), str(tmp_path / "marker")]
    proc = start(cmd, env=env, log=tmp_path / "torchrun.log")
    try:
        seen = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            value = agent_restarts(port)
            if value is not None and (not seen or seen[-1] != value):
                seen.append(value)
            if value == 2 and (tmp_path / "count").read_text() == "3":
                break
            time.sleep(0.2)
        assert seen and seen[-1] == 2, (seen, (tmp_path / "torchrun.log").read_text()[-3000:])
        assert seen == sorted(seen), seen  # it only grows
        (tmp_path / "marker").write_text("")
        assert proc.wait(timeout=60) == 0
    finally:
        stop(proc)
    assert agent_restarts(port) is None, "the endpoint goes with the agent"


def test_no_port_no_endpoint(tmp_path):
    assert launcher.serve_agent_restarts(tmp_path, {}) is None


def test_the_port_env_is_the_operators():
    assert (launcher.AGENT_PORT_ENV, launcher.AGENT_RESTARTS_SERIES) == (
        api.AGENT_METRICS_PORT_ENV, api.AGENT_RESTARTS_SERIES)
