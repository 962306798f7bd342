"""A scrape is bounded as a whole (metrics_fetch.py), and one hostile endpoint cannot delay another job's scrape
(progress.ProgressScraper). Real HTTP servers on the loopback address; no cluster."""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ddpjob_operator.tracking.metrics_fetch import ScrapeError, fetch_metrics
from ddpjob_operator.tracking.progress import ProgressScraper

PAGE = b"# TYPE ddp_trainer_step gauge\nddp_trainer_step 42\nddp_trainer_loss 0.5\n"


class Handler(BaseHTTPRequestHandler):
    mode = "ok"
    stop = threading.Event()

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        if self.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        if self.mode == "ok":
            self.wfile.write(PAGE)
        elif self.mode == "huge":
            for _ in range(1000):
                self.wfile.write(b"#" * 8192 + b"\n")
        elif self.mode == "trickle":  # one byte at a time, for as long as the client listens
            try:
                while not self.stop.is_set():
                    self.wfile.write(b"#")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass


@pytest.fixture
def serve():
    servers = []

    def start(mode: str) -> str:
        handler = type(f"Handler_{mode}", (Handler,), {"mode": mode})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/metrics"

    yield start
    Handler.stop.set()
    for server in servers:
        server.shutdown()
    Handler.stop.clear()


def test_a_healthy_page_is_read(serve):
    assert fetch_metrics(serve("ok")) == PAGE.decode()


@pytest.mark.parametrize("mode, words", [
    ("redirect", "HTTP 302 (redirects are not followed)"),
    ("huge", "answer larger than"),
    ("trickle", "no complete answer within 0.5s"),
])
def test_a_hostile_endpoint_costs_one_bounded_scrape(serve, mode, words):
    with pytest.raises(ScrapeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        fetch_metrics(serve(mode), deadline_seconds=0.5)


def test_a_trickling_endpoint_does_not_delay_another_jobs_scrape(serve):
    """Job A's worker trickles; job B's answers. B's progress arrives while A's scrape is still held, and A's
    scrape ends by itself (its deadline): without a total deadline it would hold its thread for good."""
    trickle, healthy = serve("trickle"), serve("ok")
    answered: list[tuple[str, str]] = []

    async def run() -> None:
        scraper = ProgressScraper(interval_seconds=10, timeout_seconds=5, concurrency=2,
                                  on_answer=lambda key: answered.append(key))
        slow = asyncio.create_task(scraper._scrape(("ns", "a"), trickle, {}, 0))
        await asyncio.sleep(0.3)  # A's scrape is in flight, trickling
        await asyncio.wait_for(scraper._scrape(("ns", "b"), healthy, {}, 0), timeout=30)
        assert answered == [("ns", "b")] and not slow.done(), "B answered while A's scrape was still held"
        await asyncio.wait_for(slow, timeout=30)  # and A's ends on its own deadline, with nothing recorded
        assert answered == [("ns", "b")]
        assert scraper._latest[("ns", "b")][1]["step"] == 42

    asyncio.run(run())
