"""status.progress is read from worker 0's `metrics` port. The simulated pod's IP is pointed at a local HTTP
server that speaks the trainer's ddp_trainer_* series."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from support.operator import free_port

from ddpjob_manifests import ddpjob

PAGE = b"""# TYPE ddp_trainer_step gauge
ddp_trainer_step 42
# TYPE ddp_trainer_loss gauge
ddp_trainer_loss 0.5
# TYPE ddp_trainer_samples_per_second gauge
ddp_trainer_samples_per_second 1000
"""


@pytest.fixture
def trainer_metrics():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_progress_is_copied_from_worker_0(kube, operator, trainer_metrics):
    job = ddpjob("prog", replicas=1, gpus=1)
    job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics",
                                                                  "containerPort": trainer_metrics}]
    kube.apply(job)
    kube.running_pods("prog", attempt=0, n=1)
    kube.wait_phase("prog", "Running")
    patch = {"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}
    kube("patch", "pod", "prog-worker-0", "--subresource=status", "--type=merge", "-p", json.dumps(patch))
    status = kube.wait_status("prog", lambda s: (s.get("progress") or {}).get("step") == 42, timeout=30,
                              what="progress.step 42")
    assert (status["progress"]["loss"], status["progress"]["samplesPerSecond"]) == (0.5, 1000.0)
    assert status["progress"]["updateTime"]
    wide = kube("get", "ddpj", "prog", "-o", "wide").stdout.splitlines()[1].split()
    assert wide[-2:] == ["42", "0"]
