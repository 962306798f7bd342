"""A real Prometheus scrapes the running operator (as the chart's ServiceAccount, after a job went through a
restart) and a running 1-process trainer, evaluates the chart's rules, and answers PromQL. Every metric name
the dashboard and the alerts read must exist in that scrape: a renamed metric fails here."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import prometheus_server
from support.chart_tools import ROOT, dashboard, rule_groups
from support.ports import free_port
from promql_names import dashboard_metric_names, rule_metric_names
from support.cluster import wait_until

TRAINER_JOB = "scrape-probe"


def trainer_step(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as rsp:
            text = rsp.read().decode()
    except OSError:
        return 0.0
    found = re.search(r"^ddp_trainer_step\{[^}]*\} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


@dataclass
class Trainer:
    proc: subprocess.Popen
    port: int
    log: Path

    def wait_for_progress(self) -> None:
        wait_until(lambda: self.proc.poll() is not None or trainer_step(self.port) > 0, timeout=180,
                   what="trainer metrics with progress")
        assert self.proc.poll() is None, f"trainer exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """torchrun with one CPU process, long enough to be scraped; stopped by the test, not by finishing. Not
    waited for here: it starts (torch import) while the operator's job runs."""
    work = tmp_path_factory.mktemp("trainer")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_TRAINER_", "DDPJOB_", "PET_"))}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", DDPJOB_NAME=TRAINER_JOB,
               DDPJOB_ATTEMPT="0", POD_IP="127.0.0.1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m", "ddp_trainer",
           "--workload", "digits", "--train.steps", "1000000", "--metrics.port", str(port),
           "--checkpoint.dir", str(work / "ckpt"), "--checkpoint.every-steps", "50", "--log.every-steps", "1000"]
    log = work / "trainer.log"
    proc = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT,
                            start_new_session=True)
    try:
        yield Trainer(proc, port, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def prometheus(trainer, cluster_wide_operator, cluster_wide_job, tmp_path_factory):
    run = cluster_wide_operator
    trainer.wait_for_progress()
    jobs = [
        # What the chart's ServiceMonitor and PodMonitor produce: namespace and pod target labels; the trainer
        # names its DDPJob in `ddpjob`, beside the scrape config's own `job`.
        prometheus_server.scrape_job("ddpjob-operator-metrics", f"127.0.0.1:{run.metrics_port}",
                                     {"namespace": run.release_namespace, "pod": f"{run.fullname}-0"}),
        prometheus_server.scrape_job("ddpjob-trainers", f"127.0.0.1:{trainer.port}",
                                     {"namespace": run.watch_namespace, "pod": f"{TRAINER_JOB}-worker-0"}),
    ]
    server = prometheus_server.start(tmp_path_factory.mktemp("prometheus"), jobs, rule_file=rule_groups())
    yield server
    server.stop()


def test_both_targets_are_up(prometheus):
    up = prometheus_server.wait_for_series(prometheus, "count(up == 1) == 2")
    assert up, up
    jobs = {s["metric"]["job"] for s in prometheus.query("up == 1")}
    assert jobs == {"ddpjob-operator-metrics", "ddpjob-trainers"}, jobs


def test_operator_series_show_the_job_and_its_restart(prometheus):
    succeeded = prometheus_server.wait_for_series(prometheus, 'ddpjob_jobs{phase="Succeeded"} >= 1')
    assert succeeded[0]["metric"]["job"] == "ddpjob-operator-metrics"
    restarts = prometheus_server.wait_for_series(prometheus, "sum(ddpjob_group_restarts_total) >= 1")
    assert float(restarts[0]["value"][1]) >= 1
    # The group restart of the job cluster_wide_job drove: failure seen -> new attempt all Running.
    recovered = prometheus_server.wait_for_series(prometheus, "ddpjob_recovery_duration_seconds_count >= 1")
    assert float(recovered[0]["value"][1]) >= 1


def test_trainer_series_carry_the_ddpjob_name_and_rank(prometheus, cluster_wide_operator):
    step = prometheus_server.wait_for_series(prometheus, f'ddp_trainer_step{{ddpjob="{TRAINER_JOB}"}} > 0')
    labels = step[0]["metric"]
    assert labels["rank"] == "0" and labels["job"] == "ddpjob-trainers"  # the scrape config's, untouched
    assert labels["namespace"] == cluster_wide_operator.watch_namespace
    phases = prometheus_server.wait_for_series(
        prometheus, f'ddpjob:trainer_step_phase_seconds:mean5m{{ddpjob="{TRAINER_JOB}"}}', timeout=60)
    assert {s["metric"]["phase"] for s in phases} == {"data", "forward_backward", "optimizer"}


def test_rules_load_and_evaluate_without_errors(prometheus):
    groups = prometheus.api("rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert {r["name"] for r in rules if r["type"] == "alerting"} == {
        "DDPJobFailed", "DDPJobRestartStorm", "DDPJobNoTrainingProgress", "DDPJobStragglerRank"}
    wait_until(lambda: all(r.get("lastEvaluation", "").startswith("20") for r in
                           (r for g in prometheus.api("rules")["groups"] for r in g["rules"])),
               timeout=30, what="every rule evaluated")
    bad = [(r["name"], r.get("lastError")) for g in prometheus.api("rules")["groups"] for r in g["rules"]
           if r.get("health") != "ok"]
    assert not bad, bad
    # A healthy, progressing trainer and an operator without failures must not fire anything.
    firing = [a for a in prometheus.api("alerts")["alerts"] if a["state"] == "firing"]
    assert not firing, firing


def test_every_dashboard_and_alert_metric_exists_in_the_real_scrape(prometheus):
    prometheus_server.wait_for_series(prometheus, "ddp_trainer_step_phase_seconds_bucket")
    scraped = prometheus.metric_names()
    used = dashboard_metric_names(dashboard()) | rule_metric_names(rule_groups())
    assert len(used) >= 15, used
    missing = sorted(used - scraped)
    assert not missing, f"metrics read by the dashboard/alerts but not scraped: {missing}"


def test_a_renamed_metric_would_be_caught(prometheus):
    scraped = prometheus.metric_names()
    renamed = {"groups": [{"name": "g", "rules": [{"alert": "X", "expr": "increase(ddpjob_job_failed_total[5m]) > 0"}]}]}
    assert rule_metric_names(renamed) - scraped == {"ddpjob_job_failed_total"}
