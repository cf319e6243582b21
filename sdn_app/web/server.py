"""The controller's read-only HTTP side: the live map page, its JSON and SSE feeds, /metrics.

    web = WebServer(live_map, ("127.0.0.1", 8080)); web.start(); ...; web.stop()

Routes (GET and HEAD only; nothing here changes anything):
- `/`: the page (sdn_app/web/static/index.html; its script and style under `/static/`);
- `/api/snapshot`: JSON: topology with site coordinates and map positions, links with state
  and measured load per direction, live reservations with routes, recent events, the
  throughput history;
- `/api/events`: server-sent events: `snapshot` first, then `reservation` (each reservation
  event), `link` (a link went down or came up) and `tick` (every second: loads, link states,
  reservations, throughput);
- `/metrics`: Prometheus text format;
- `/healthz`: `ok`.

stdlib `ThreadingHTTPServer`: one thread per connection (an open page holds one for its SSE
stream), all daemon threads.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from sdn_app.web.live import LiveMap
from sdn_app.web.metrics import CONTENT_TYPE as METRICS_TYPE

log = logging.getLogger("tsdn.web")
KEEPALIVE = 15.0  # seconds between SSE comments on a quiet stream
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".ico": "image/x-icon"}


def _static_files() -> dict[str, bytes]:
    """Every file of the static folder, by name (read once: the set is fixed, no path tricks)."""
    folder = resources.files("sdn_app.web") / "static"
    return {entry.name: entry.read_bytes() for entry in folder.iterdir()
            if entry.is_file() and any(entry.name.endswith(ext) for ext in STATIC_TYPES)}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    live: LiveMap
    static: dict[str, bytes]
    stopping: threading.Event


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "tsdn-map"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, data: Any, head: bool) -> None:
        self._send(HTTPStatus.OK, json.dumps(data, allow_nan=False).encode(), "application/json", head)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path in ("/", "/index.html"):
                self._static("index.html", head)
            elif path.startswith("/static/"):
                self._static(path[len("/static/"):], head)
            elif path == "/api/snapshot":
                self._json(self.server.live.snapshot(), head)
            elif path == "/api/events":
                self._events(head)
            elif path == "/metrics":
                self._send(HTTPStatus.OK, self.server.live.metrics.exposition(), METRICS_TYPE, head)
            elif path == "/healthz":
                self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8", head)
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8", head)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _static(self, name: str, head: bool) -> None:
        body = self.server.static.get(name)
        if body is None:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8", head)
            return
        ext = name[name.rfind("."):]
        self._send(HTTPStatus.OK, body, STATIC_TYPES.get(ext, "application/octet-stream"), head)

    def _events(self, head: bool) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()
        self.close_connection = True
        if head:
            return
        live = self.server.live
        client = live.subscribe()
        try:
            self.wfile.write(b"retry: 2000\n\n")
            while not self.server.stopping.is_set():
                try:
                    message = client.get(timeout=KEEPALIVE)
                except queue.Empty:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    continue
                if message is None:
                    return
                kind, data = message
                self.wfile.write(f"event: {kind}\ndata: {json.dumps(data, allow_nan=False)}\n\n".encode())
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        finally:
            live.unsubscribe(client)


class WebServer:
    """The HTTP server on its own thread."""

    def __init__(self, live: LiveMap, listen: tuple[str, int]):
        self.live = live
        self.httpd = _Server(listen, _Handler)
        self.httpd.live = live
        self.httpd.static = _static_files()
        self.httpd.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host}:{port}"

    def start(self) -> None:
        self.live.start()
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.25},
                                        name="tsdn-web", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.httpd.stopping.set()
        self.live.stop()  # wakes every SSE stream
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(2.0)
