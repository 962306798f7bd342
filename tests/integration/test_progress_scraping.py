"""status.progress is read from worker 0's `metrics` port. The simulated pod's IP is pointed at a local HTTP
server that speaks the trainer's ddp_trainer_* series."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from support.cluster import wait_until
from support.ports import free_port

from ddpjob_manifests import ddpjob

PAGE = b"""# TYPE ddp_trainer_step gauge
ddp_trainer_step 42
# TYPE ddp_trainer_loss gauge
ddp_trainer_loss 0.5
# TYPE ddp_trainer_samples_per_second gauge
ddp_trainer_samples_per_second 1000
"""


class FrozenTrainer:
    """worker 0's metrics page at a step that never moves, until told to go silent."""

    def __init__(self):
        self.silent = threading.Event()
        self.page = PAGE
        trainer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if trainer.silent.is_set():
                    self.close_connection = True
                    return  # no answer at all, as a stopped process gives
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(trainer.page)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]


@pytest.fixture
def trainer():
    trainer = FrozenTrainer()
    yield trainer
    trainer.server.shutdown()


@pytest.fixture
def trainer_metrics(trainer):
    return trainer.port


def running_against(kube, name: str, port: int) -> None:
    """A Running one-pod job whose worker 0 (a simulated pod) is pointed at the local metrics page on `port`."""
    job = ddpjob(name, replicas=1, gpus=1)
    job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": port}]
    kube.apply(job)
    kube.running_pods(name, attempt=0, n=1)
    kube.wait_phase(name, "Running")
    patch = {"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}
    kube("patch", "pod", f"{name}-worker-0", "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def test_progress_is_copied_from_worker_0(kube, operator, trainer_metrics):
    running_against(kube, "prog", trainer_metrics)
    status = kube.wait_status("prog", lambda s: (s.get("progress") or {}).get("step") == 42, timeout=30,
                              what="progress.step 42")
    assert (status["progress"]["loss"], status["progress"]["samplesPerSecond"]) == (0.5, 1000.0)
    assert status["progress"]["updateTime"]
    wide = kube("get", "ddpj", "prog", "-o", "wide").stdout.splitlines()[1].split()
    assert wide[-3:] == ["42", "0", "Gang"]


def page(step: str, loss: str) -> bytes:
    return PAGE.replace(b"ddp_trainer_step 42", f"ddp_trainer_step {step}".encode()).replace(
        b"ddp_trainer_loss 0.5", f"ddp_trainer_loss {loss}".encode())


def test_a_nan_loss_then_a_finite_one_never_freezes_the_status(kube, operator, trainer):
    """JSON has no NaN: a status carrying one is refused (400), and every later write of the job would be too."""
    trainer.page = page("50", "NaN")
    running_against(kube, "nan", trainer.port)
    status = kube.wait_status("nan", lambda s: (s.get("progress") or {}).get("step") == 50, timeout=30,
                              what="progress.step 50 with a NaN loss")
    assert status["progress"].get("lossNonFinite") == "NaN" and "loss" not in status["progress"], status
    wait_until(lambda: "LossNotFinite" in {e["reason"] for e in kube.events("nan")}, timeout=30,
               what="a LossNotFinite event")
    trainer.page = page("55", "-Inf")
    kube.wait_status("nan", lambda s: (s.get("progress") or {}).get("lossNonFinite") == "-Inf", timeout=30,
                     what="lossNonFinite -Inf at step 55")
    trainer.page = page("60", "0.25")
    status = kube.wait_status("nan", lambda s: (s.get("progress") or {}).get("step") == 60, timeout=30,
                              what="progress.step 60 with a finite loss")
    assert status["progress"]["loss"] == 0.25 and "lossNonFinite" not in status["progress"], status
    # Other status keeps moving too: a pod's exit still ends the job.
    kube.succeed_pod("nan-worker-0")
    kube.wait_phase("nan", "Succeeded")


def hung_job(kube, name: str, port: int, deadline: int = 10) -> None:
    job = ddpjob(name, replicas=2, gpus=1, runPolicy={"progressDeadlineSeconds": deadline, "backoffLimit": 3})
    job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": port}]
    kube.apply(job)
    kube.running_pods(name, attempt=0, n=2)
    patch = {"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}
    kube("patch", "pod", f"{name}-worker-0", "--subresource=status", "--type=merge", "-p", json.dumps(patch))
    kube.wait_status(name, lambda s: (s.get("progress") or {}).get("step") == 42, timeout=30, what="first report")


def test_a_step_that_stops_advancing_restarts_the_group_with_reason_no_progress(kube, operator):
    trainer = FrozenTrainer()
    try:
        hung_job(kube, "stuck", trainer.port)
        status = kube.wait_status("stuck", lambda s: s.get("restarts") == 1, timeout=60, what="a NoProgress restart")
    finally:
        trainer.server.shutdown()
    assert status["lastFailure"]["kind"] == "NoProgress"
    assert status["lastFailure"]["pod"] == "stuck-worker-0"
    assert status["lastFailure"]["message"].startswith("step 42 has not advanced for ")
    assert "(progressDeadlineSeconds 10)" in status["lastFailure"]["message"]
    restarting = [e for e in kube.events("stuck") if e["reason"] == "Restarting"]
    assert restarting and "made no training progress" in restarting[0]["message"]
    assert operator.metric("ddpjob_group_restarts_total", reason="NoProgress") == 1


def test_a_worker_0_that_goes_silent_after_reporting_is_a_hang_too(kube, operator):
    """Silent, and its kubelet reports the trainer not ready (its readiness probe on the metrics port fails, as a
    stopped process's does): a hang. test_progress_unknown.py has the ready case, which is not."""
    trainer = FrozenTrainer()
    try:
        hung_job(kube, "quiet", trainer.port)
        trainer.silent.set()
        not_ready = {"status": {"containerStatuses": [{
            "name": "trainer", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}
        kube("patch", "pod", "quiet-worker-0", "--subresource=status", "--type=merge", "-p", json.dumps(not_ready))
        status = kube.wait_status("quiet", lambda s: s.get("restarts") == 1, timeout=60, what="a NoProgress restart")
    finally:
        trainer.server.shutdown()
    assert status["lastFailure"]["kind"] == "NoProgress"
    assert "has not answered its metrics port" in status["lastFailure"]["message"]
    assert "its kubelet reports the trainer not ready" in status["lastFailure"]["message"]


def test_a_metrics_port_that_never_answers_is_not_a_hang(kube, operator):
    job = ddpjob("mute", replicas=1, gpus=1, runPolicy={"progressDeadlineSeconds": 10})
    job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": free_port()}]
    kube.apply(job)
    kube.running_pods("mute", attempt=0, n=1)
    kube.wait_phase("mute", "Running")
    passes = "ddpjob_reconcile_duration_seconds_count"
    start, before = time.monotonic(), operator.process.metric(passes)
    # Positive signal: the operator kept planning the job (its progress requeues, every 2 s here) until well past
    # the 10 s deadline; only then is "no restart" a verdict.
    wait_until(lambda: time.monotonic() - start > 16 and operator.process.metric(passes) >= before + 8, timeout=90,
               what="8 more passes and the deadline long gone")
    assert kube.status("mute")["restarts"] == 0
