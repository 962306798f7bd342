"""A real Prometheus (Debian's package) on a free loopback port, with its own TSDB in a temp dir."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from support.chart_tools import binary
from support.ports import free_port
from support.cluster import wait_until


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen
    log: Path

    def api(self, path: str, **params: str) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as rsp:
            body = json.load(rsp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict]:
        return self.api("query", query=promql)["result"]

    def metric_names(self) -> set[str]:
        return set(self.api("label/__name__/values"))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)


def scrape_job(name: str, target: str, labels: dict[str, str], honor_labels: bool = False) -> dict:
    return {"job_name": name, "honor_labels": honor_labels, "scrape_interval": "1s", "scrape_timeout": "1s",
            "static_configs": [{"targets": [target], "labels": labels}]}


def start(workdir: Path, scrape_jobs: list[dict], rule_file: dict | None = None) -> Prometheus:
    config: dict = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": scrape_jobs}
    if rule_file is not None:
        (workdir / "rules.yaml").write_text(yaml.safe_dump(rule_file, sort_keys=False))
        config["rule_files"] = [str(workdir / "rules.yaml")]
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    log = workdir / "prometheus.log"
    proc = subprocess.Popen(
        [binary("prometheus"), f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT)
    server = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    wait_until(lambda: proc.poll() is not None or _ready(server.url), timeout=60, what="Prometheus ready")
    assert proc.poll() is None, f"prometheus exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
    return server


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as rsp:
            return rsp.status == 200
    except OSError:
        return False


def wait_for_series(server: Prometheus, promql: str, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    result: list[dict] = []
    while time.monotonic() < deadline:
        result = server.query(promql)
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"no series for {promql!r} after {timeout}s\n{server.log.read_text()[-3000:]}")
