"""Hang detection that is never the operator's fault (no_progress.py): worker 0 of a job stops answering the
operator while its kubelet reports the trainer ready: ProgressUnknown, no restart. Only when the kubelet reports
it not ready too (its readiness probe on the metrics port fails) is it a hang.

kwok's pods run nothing, so this test plays worker 0's metrics server (a real HTTP server on the loopback
address, the pod's IP patched to it) and its kubelet (the container's ready flag), as kwok plays the rest."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ddpjob_manifests import ddpjob


class Metrics(BaseHTTPRequestHandler):
    step = 0

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).step += 1
        body = f"ddp_trainer_step {self.step}\nddp_trainer_loss 0.5\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)


def patch_worker0(kube, job: str, ip: str | None = None, ready: bool | None = None) -> None:
    status: dict = {}
    if ip is not None:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    if ready is not None:
        status["containerStatuses"] = [{"name": "trainer", "ready": ready, "restartCount": 0, "image": "x",
                                        "imageID": "", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]
    kube("patch", "pod", f"{job}-worker-0", "--subresource=status", "--type=merge", "-p",
         json.dumps({"status": status}))


def test_silence_with_a_live_trainer_is_progress_unknown_and_a_dead_one_is_a_hang(kube, operator):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        job = ddpjob("pu", replicas=1, gpus=1, runPolicy={"progressDeadlineSeconds": 10})
        job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": port}]
        kube.apply(job)
        kube.running_pods("pu", attempt=0, n=1)
        kube.wait_phase("pu", "Running")
        patch_worker0(kube, "pu", ip="127.0.0.1", ready=True)
        kube.wait_status("pu", lambda s: (s.get("progress") or {}).get("step", 0) >= 2, timeout=60,
                         what="progress read from worker 0")
    finally:
        server.shutdown()
        server.server_close()  # the operator is now cut off from worker 0: connection refused
    status = kube.wait_status("pu", lambda s: any(c["type"] == "ProgressUnknown" and c["status"] == "True"
                                                  for c in s.get("conditions") or []),
                              timeout=90, what="ProgressUnknown")
    assert (status["phase"], status["restarts"], status["attempt"]) == ("Running", 0, 0), "not a hang"
    unknown = next(c for c in status["conditions"] if c["type"] == "ProgressUnknown")
    assert "its kubelet reports the trainer ready" in unknown["message"]
    assert "ProgressUnknown" in {e["reason"] for e in kube.events("pu")}

    patch_worker0(kube, "pu", ready=False)  # the kubelet's probe fails too: now it is a hang
    status = kube.wait_status("pu", lambda s: s.get("attempt", 0) >= 1, timeout=60, what="restart for NoProgress")
    assert (status["lastFailure"]["kind"], status["restarts"]) == ("NoProgress", 1)
    assert "its kubelet reports the trainer not ready" in status["lastFailure"]["message"]
