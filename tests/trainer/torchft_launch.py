"""Runs torchft replica groups as the operator lays them out, on one machine: a real Lighthouse (the bundled image's
`ddp-lighthouse`, which the operator runs where the image has it; torchft's own `torchft_lighthouse` on request) and
one standalone torchrun per replica group, each with the env the operator gives its pod (ddp_trainer.fault_tolerance
holds the names)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ddp_trainer import fault_tolerance as ft
from launch import DDP_TORCHRUN, ROOT, start, trainer_env



def console_script(name: str) -> Path:
    """The venv's console script, else one on PATH."""
    path = Path(sys.executable).parent / name
    return path if path.exists() else Path(shutil.which(name) or path)


LIGHTHOUSE = console_script("ddp-lighthouse")  # ddp_trainer/lighthouse.py: torchft's Lighthouse without torch
TORCHFT_LIGHTHOUSE = console_script("torchft_lighthouse")  # torchft's own script, which imports torch first


def lighthouse_cmd(
    port: int,
    heartbeat_timeout_ms: int,
    min_replicas: int = 1,
    join_timeout_ms: int = 1000,
    quorum_tick_ms: int = 50,
    ip: str = "127.0.0.1",
    script: Path = LIGHTHOUSE,
) -> list[str]:
    return [
        str(script),
        "--bind",
        f"{ip}:{port}",
        "--min_replicas",
        str(min_replicas),
        "--join_timeout_ms",
        str(join_timeout_ms),
        "--quorum_tick_ms",
        str(quorum_tick_ms),
        "--heartbeat_timeout_ms",
        str(heartbeat_timeout_ms),
    ]


def start_lighthouse(
    port: int, heartbeat_timeout_ms: int, log: Path, ip: str = "127.0.0.1", script: Path = LIGHTHOUSE
) -> subprocess.Popen:
    proc = subprocess.Popen(
        lighthouse_cmd(port, heartbeat_timeout_ms, ip=ip, script=script),
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # its status page answers once it listens
        try:
            urllib.request.urlopen(f"http://{ip}:{port}/", timeout=1).read()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(f"the Lighthouse exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)
    raise AssertionError(f"the Lighthouse did not listen on {port}:\n{log.read_text()[-2000:]}")


def pod_ip(group: int) -> str:
    """A loopback address of the group's own, as each pod has its IP: where it serves metrics, and what it tells its
    peers to reach it by."""
    return f"127.0.0.{group + 1}"


def group_env(
    lighthouse_port: int, group: int, groups: int, job: str, timeout_s: int = 10, lighthouse_host: str = "127.0.0.1"
) -> dict[str, str]:
    return trainer_env(
        **{
            ft.LIGHTHOUSE_ENV: f"http://{lighthouse_host}:{lighthouse_port}",
            ft.REPLICA_GROUP_ENV: str(group),
            ft.NUM_REPLICA_GROUPS_ENV: str(groups),
            ft.MIN_REPLICAS_ENV: "1",
            ft.TIMEOUT_ENV: str(timeout_s),
            ft.QUORUM_TIMEOUT_ENV: "60",
            ft.CONNECT_TIMEOUT_ENV: str(timeout_s),
            # An address of its own per group, as pods have: peers must reach it by what it advertises.
            "POD_IP": pod_ip(group),
            "DDPJOB_NAME": job,
        }
    )


def start_group(env: dict[str, str], log: Path, *trainer_args: str, max_restarts: int = 0) -> subprocess.Popen:
    """One replica group: the image's entrypoint, standalone (nnodes=1), one process; `max_restarts` as the operator
    sets PET_MAX_RESTARTS (0 under Recreate: a failed process ends the pod; under InPlace torchrun restarts it)."""
    cmd = [
        *DDP_TORCHRUN,
        "--standalone",
        "--nproc-per-node=1",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.5",
        "-m",
        "ddp_trainer",
        *trainer_args,
    ]
    return start(cmd, env=env, log=log)


def scrape(port: int, group: int = 0, within: float = 120.0) -> dict[str, float]:
    """name -> value of each sample on a group's trainer endpoint (one rank: labels are the same on every sample).
    The endpoint is a thread of the training process: on a loaded machine one answer can take seconds (a 2 s
    timeout failed a full run), so it is asked again until `within` seconds have passed (0: once)."""
    deadline = time.monotonic() + within
    while True:
        try:
            text = urllib.request.urlopen(f"http://{pod_ip(group)}:{port}/metrics", timeout=10).read().decode()
            return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def scraped_step(port: int, group: int = 0) -> float | None:
    """The step now, or None when the endpoint does not answer at once (the caller polls)."""
    try:
        return scrape(port, group, within=0).get("ddp_trainer_step")
    except OSError:
        return None
