"""One scrape of a worker's `/metrics`, as Prometheus' scraper does it: a total deadline (not per read), a byte
cap, no redirects and no proxy. The endpoint is user code on a pod: a trainer that trickles bytes, answers with
gigabytes or redirects to a link-local metadata address must cost the operator at most one bounded scrape."""

from __future__ import annotations

import http.client
import time
from urllib.parse import urlsplit

DEADLINE_SECONDS = 2.0  # the whole scrape: connect, headers, body
MAX_BYTES = 256 * 1024  # ddp_trainer's page is about 2 KiB
CHUNK = 16 * 1024


class ScrapeError(OSError):
    """The scrape gave nothing usable (too slow, too large, not 200). Never a verdict on the trainer."""


def fetch_metrics(url: str, deadline_seconds: float = DEADLINE_SECONDS, max_bytes: int = MAX_BYTES) -> str:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ScrapeError(f"not a plain http URL: {url}")
    ends = time.monotonic() + deadline_seconds

    def left() -> float:
        remaining = ends - time.monotonic()
        if remaining <= 0:
            raise ScrapeError(f"no complete answer within {deadline_seconds:g}s")
        return remaining

    # http.client never follows a redirect and never reads the *_proxy variables: a direct GET to the pod.
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=left())
    try:
        conn.request("GET", parts.path or "/", headers={"Accept": "text/plain"})
        if conn.sock is not None:
            conn.sock.settimeout(left())
        response = conn.getresponse()
        if response.status != 200:
            raise ScrapeError(f"HTTP {response.status} (redirects are not followed)")
        body = bytearray()
        while True:
            if conn.sock is not None:
                conn.sock.settimeout(left())
            chunk = response.read1(CHUNK)
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                raise ScrapeError(f"answer larger than {max_bytes} bytes")
            left()
        return body.decode("utf-8", "replace")
    except TimeoutError as exc:
        raise ScrapeError(f"no complete answer within {deadline_seconds:g}s") from exc
    finally:
        conn.close()
