"""ddp_trainer.report, the progress API for users' own loops: what it serves is what the operator reads (the real
report(), the real endpoint, the operator's real parser), its port rule is the harness's, and nothing it meets
(a taken port, a bad setting, an odd loss) stops the training run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import warnings

import pytest
import torch
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ddp_trainer import metrics, report
from ddp_trainer.config import MetricsConfig, env_name
from ddp_trainer.report import ProgressReporter
from ddpjob_operator.tracking.progress import parse_progress
from support.ports import free_port, free_port_block


def scrape(address: tuple[str, int]) -> str:
    return urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=5).read().decode()


def samples(text: str) -> dict[str, float]:
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def shared(monkeypatch):
    """A fresh process-wide reporter for report()/serve(), on a free port, closed afterwards."""
    port = free_port()
    monkeypatch.setattr(report, "_shared", None)
    for name, value in {metrics.PORT_ENV: str(port), "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "2",
                        "POD_IP": "127.0.0.1", "DDPJOB_NAME": "user-loop"}.items():
        monkeypatch.setenv(name, value)
    yield port
    if report._shared is not None:
        report._shared.close()


def test_report_is_what_the_operators_progress_scrape_reads(shared):
    report.report(step=1, loss=2.0, samples=64)
    time.sleep(1.1)  # the samples rate needs a window of at least a second
    report.report(step=7, loss=0.25, samples=7 * 64, total_steps=100)
    text = scrape(("127.0.0.1", shared))
    progress = parse_progress(text)
    assert progress["step"] == 7 and progress["loss"] == 0.25 and progress["totalSteps"] == 100
    assert 0 < progress["samplesPerSecond"] <= 6 * 64 / 1.1
    got = samples(text)
    assert got["ddp_trainer_run_samples"] == 7 * 64
    assert got["ddp_trainer_samples_total"] == 6 * 64  # a counter from this process's first report
    assert got["ddp_trainer_world_size"] == 2
    assert got["ddp_trainer_torchrun_restarts"] == 0
    assert 'ddp_trainer_step{attempt="0",ddpjob="user-loop",rank="0"} 7.0' in text  # the harness's labels


def test_a_loss_tensor_is_read_at_scrape_time_without_its_graph(shared):
    w = torch.tensor(3.0, requires_grad=True)
    loss = w * 2
    report.report(step=1, loss=loss)
    kept = report._shared.loss
    assert isinstance(kept, torch.Tensor) and kept.grad_fn is None
    assert parse_progress(scrape(("127.0.0.1", shared)))["loss"] == 6.0


def test_serve_starts_the_endpoint_before_the_first_report(shared):
    assert report.serve() is True
    assert report.serve() is True  # once; later calls say whether it listens
    text = scrape(("127.0.0.1", shared))
    # nothing reported yet, so no step or loss to read; torchrun's restart count is known from the start
    assert parse_progress(text) == {"inPlaceRestarts": 0}
    assert samples(text)["ddp_trainer_world_size"] == 2


def test_it_serves_only_names_the_harness_serves():
    harness = metrics.TrainerMetrics("j", 0)
    harness.step.set(1)
    reporter = ProgressReporter(port=0, environ={})
    reporter.report(step=1, loss=1.0, samples=1, total_steps=10)
    reporter.samples_per_second = 1.0
    served = set(samples(generate_latest(reporter.registry).decode()))
    assert served == {"ddp_trainer_step", "ddp_trainer_loss", "ddp_trainer_samples_per_second",
                      "ddp_trainer_samples_total", "ddp_trainer_run_samples", "ddp_trainer_world_size",
                      "ddp_trainer_total_steps", "ddp_trainer_torchrun_restarts"}
    assert served <= set(samples(generate_latest(harness.registry).decode()))


def test_its_port_settings_are_the_harness_flags():
    assert MetricsConfig().port == metrics.DEFAULT_PORT
    assert env_name("metrics", "port") == metrics.PORT_ENV


@pytest.mark.parametrize("name, port, environ, want", [
    ("default: 9400 + local rank 0 on every address", None, {}, ("0.0.0.0", 9400)),
    ("torchrun's local rank", None, {"LOCAL_RANK": "3"}, ("0.0.0.0", 9403)),
    ("the pod's IP", None, {"POD_IP": "10.1.2.3", "LOCAL_RANK": "1"}, ("10.1.2.3", 9401)),
    ("env override", None, {metrics.PORT_ENV: "9500", "LOCAL_RANK": "2"}, ("0.0.0.0", 9502)),
    ("the argument wins over env", 9600, {metrics.PORT_ENV: "9500", "LOCAL_RANK": "1"}, ("0.0.0.0", 9601)),
    ("0 turns it off", None, {metrics.PORT_ENV: "0"}, None),
    ("0 as the argument", 0, {metrics.PORT_ENV: "9500"}, None),
])
def test_port_rule(name, port, environ, want):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ProgressReporter(port, environ).endpoint_address() == want, name


@pytest.mark.parametrize("environ, message", [
    ({metrics.PORT_ENV: "metrics"}, f"{metrics.PORT_ENV} must be a port number, got 'metrics'"),
    ({metrics.PORT_ENV: "-1"}, f"{metrics.PORT_ENV} must be a port number, got '-1'"),
    ({"LOCAL_RANK": "zero"}, "LOCAL_RANK must be a number, got 'zero'"),
    ({metrics.PORT_ENV: "65535", "LOCAL_RANK": "1"}, "port 65535 + LOCAL_RANK 1 is outside 1..65535"),
])
def test_bad_port_settings_warn_and_training_goes_on(environ, message):
    reporter = ProgressReporter(environ=environ)
    with pytest.warns(RuntimeWarning) as caught:
        reporter.report(step=1, loss=1.0)
        reporter.report(step=2, loss=1.0)
    assert [str(w.message) for w in caught] == [
        f"ddp_trainer.report: no progress endpoint: {message}; training goes on"]
    assert reporter.step == 2 and reporter.serve() is False


def test_a_port_in_use_warns_once_and_does_not_raise():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        reporter = ProgressReporter(port, {"POD_IP": "127.0.0.1"})
        with pytest.warns(RuntimeWarning) as caught:
            for step in range(1, 101):
                reporter.report(step=step, loss=0.5, samples=step * 8)
    assert len(caught) == 1
    assert str(caught[0].message).startswith(
        f"ddp_trainer.report: no progress endpoint: cannot listen on 127.0.0.1:{port}: [Errno 98]")
    assert str(caught[0].message).endswith("; training goes on")
    assert reporter.step == 100 and reporter.samples == 800 and reporter.address is None


def test_a_second_rank_on_the_same_machine_serves_on_its_own_port():
    base = free_port_block(2)
    ranks = [ProgressReporter(base, {"POD_IP": "127.0.0.1", "LOCAL_RANK": str(r), "RANK": str(r)}) for r in (0, 1)]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for r in ranks:
                r.report(step=5)
        assert [r.address for r in ranks] == [("127.0.0.1", base), ("127.0.0.1", base + 1)]
        assert 'rank="1"' in scrape(ranks[1].address)
    finally:
        for r in ranks:
            r.close()


@pytest.mark.parametrize("name, calls, want", [
    ("no rate before a second has passed", [(0.0, 0), (0.5, 100)], None),
    ("samples over the window", [(0.0, 0), (0.5, 100), (1.0, 200)], 200.0),
    ("the window restarts after each rate", [(0.0, 0), (1.0, 100), (1.5, 200), (3.0, 700)], 300.0),
    ("the last rate stays between windows", [(0.0, 0), (2.0, 400), (2.5, 500)], 200.0),
    ("a counter that went back starts a new window", [(0.0, 1000), (1.0, 2000), (1.5, 10), (2.5, 110)], 100.0),
    ("back, but not below the window's start", [(0.0, 0), (1.0, 1000), (1.2, 3000), (1.5, 1500), (2.5, 1600)], 100.0),
    ("calls without samples leave it alone", [(0.0, 0), (1.0, None), (2.0, 100)], 50.0),
])
def test_samples_per_second(name, calls, want):
    clock = FakeClock()
    reporter = ProgressReporter(port=0, environ={}, clock=clock)
    for step, (t, n) in enumerate(calls, 1):
        clock.now = 1000.0 + t
        reporter.report(step=step, samples=n)
    assert reporter.samples_per_second == want, name


def test_a_loss_that_is_not_a_number_is_left_out_of_the_scrape():
    reporter = ProgressReporter(port=0, environ={})
    reporter.report(step=3, loss=torch.ones(2))  # e.g. per-sample losses: one value is expected
    assert parse_progress(generate_latest(reporter.registry).decode()) == {"step": 3, "inPlaceRestarts": 0}


def test_importing_it_leaves_torch_and_the_harness_alone():
    code = ("import sys, ddp_trainer.report; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ddp_trainer')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # final_step: the termination record's format (json and a path, no torch)
    assert out.strip() == ("['ddp_trainer', 'ddp_trainer.final_step', 'ddp_trainer.metrics', "
                           "'ddp_trainer.progress_log', 'ddp_trainer.report']")


@pytest.mark.parametrize("rank, want", [("0", {"finished": {"step": 3000}}), ("1", None)])
def test_rank_0s_last_report_is_left_in_the_termination_record(tmp_path, rank, want):
    """Issue 35: a user's loop with one report() a step ended Succeeded showing STEP 2941, the last scrape."""
    import json
    import sys

    from ddp_trainer.final_step import TERMINATION_LOG_ENV

    record = tmp_path / "termination-log"
    script = "from ddp_trainer.report import report\nfor s in (2998, 2999, 3000):\n    report(step=s, loss=0.5)\n"
    env = {**os.environ, "RANK": rank, "DDP_TRAINER_METRICS_PORT": "0", TERMINATION_LOG_ENV: str(record)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    assert (json.loads(record.read_text()) if record.exists() else None) == want
