"""The part of the kubelet API the apiserver calls for `kubectl logs`: GET /containerLogs/{ns}/{pod}/{container}
with follow, tailLines, timestamps and limitBytes, over HTTPS. Only clients with a certificate from the
cluster CA get in (the apiserver uses its kubelet-client certificate)."""

from __future__ import annotations

import logging
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

log = logging.getLogger("ddpjob_localnode.kubelet_api")

# (namespace, pod, container) -> (log file, still running?) or None when unknown.
LogLookup = Callable[[str, str, str], "tuple[Path, Callable[[], bool]] | None"]


def format_line(raw: str, timestamps: bool) -> str:
    parts = raw.split(" ", 3)
    if len(parts) != 4:
        return raw
    return f"{parts[0]} {parts[3]}" if timestamps else parts[3]


def tail_lines(lines: list[str], count: int | None) -> list[str]:
    if count is None or count < 0:
        return lines
    return lines[-count:] if count else []


class _Handler(BaseHTTPRequestHandler):
    server_version = "ddpjob-localnode"
    lookup: LogLookup

    def log_message(self, fmt, *args):  # route the stdlib's access log into ours
        log.debug("kubelet api: " + fmt, *args)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/healthz":
            return self._reply(200, "ok")
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._reply(404, f"local node serves only /containerLogs and /healthz, not {url.path}")
        found = self.lookup(parts[1], parts[2], parts[3])
        if not found:
            return self._reply(404, f"container {parts[3]!r} of pod {parts[1]}/{parts[2]} is not on this node")
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        self._stream(found[0], found[1], query)

    def _stream(self, path: Path, running: Callable[[], bool], query: dict[str, str]) -> None:
        follow = query.get("follow") == "true"
        timestamps = query.get("timestamps") == "true"
        tail = int(query["tailLines"]) if "tailLines" in query else None
        limit = int(query["limitBytes"]) if "limitBytes" in query else None
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        sent = 0
        with open(path, "rb") if path.exists() else open("/dev/null", "rb") as f:
            first = [line.decode(errors="replace").rstrip("\n") for line in f.readlines()]
            pending = ""
            for raw in tail_lines(first, tail):
                sent += self._write(format_line(raw, timestamps) + "\n", limit, sent)
            while follow and (limit is None or sent < limit):
                chunk = f.readline().decode(errors="replace")
                if not chunk:
                    if not running():
                        break
                    time.sleep(0.2)
                    continue
                pending += chunk
                if pending.endswith("\n"):
                    sent += self._write(format_line(pending.rstrip("\n"), timestamps) + "\n", limit, sent)
                    pending = ""

    def _write(self, text: str, limit: int | None, sent: int) -> int:
        data = text.encode()
        if limit is not None:
            data = data[: max(0, limit - sent)]
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            raise SystemExit from None  # the client went away; ends this handler's thread quietly
        return len(data)

    def _reply(self, code: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """Into the agent's log, not a traceback on stderr (the stdlib's default): a client that hangs up mid-request
        (`kubectl logs -f` stopped, the apiserver's proxy closing) is routine."""
        exc = sys.exception()
        if isinstance(exc, ConnectionError | ssl.SSLError | TimeoutError):
            log.debug("kubelet api: %s went away: %r", client_address, exc)
        else:
            log.warning("kubelet api: a request from %s failed", client_address, exc_info=exc)


def serve(port: int, cert: Path, key: Path, ca: Path, lookup: LogLookup) -> ThreadingHTTPServer:
    handler = type("KubeletHandler", (_Handler,), {"lookup": staticmethod(lookup)})
    server = _Server(("127.0.0.1", port), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    context.load_verify_locations(str(ca))
    context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name="kubelet-api", daemon=True).start()
    return server
