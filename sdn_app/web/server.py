"""The controller's HTTP side on aiohttp, on the controller's asyncio loop: the live map, /metrics,
and the HTTP APIs mounted beside them (SENSE under /sense/api, ALTO under /alto).

    web = WebServer(live, ("127.0.0.1", 8080), authenticate=..., apis=[SenseApi(ctx), AltoApi(ctx)])
    await web.bind(); live.start(); ...; await web.stop(); live.stop()

Routes of the map (GET and HEAD; nothing here changes anything, no token asked):
- `/`: the page (sdn_app/web/static/index.html; its script and style under `/static/`);
- `/api/snapshot`: JSON: topology with map positions, links with state and measured load per
  direction, live reservations with routes, recent events, the throughput history;
- `/api/events`: server-sent events: `snapshot` first, then `reservation`, `link` and `tick`;
- `/metrics`: Prometheus text format; `/healthz`: `ok`.

Every path under an API's prefix needs a principal: `Authorization: Bearer <token>` (the gRPC
API's tokens), or HTTP Basic whose password is the token (clients that only do Basic, such as
the OpenALTO client); in development mode (no tokens file, loopback only) everyone is `dev`.

Bounds (WebLimits; docs/operations.md lists each): connections open at once, request line and
header sizes, request body size, time to send a body, idle connections, server-sent-event
streams in total and per client, and how far a stream's reader may fall behind (backlog, or a
write blocked longer than `write_timeout`) before it is dropped.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import ipaddress
import json
import logging
import queue
import ssl
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from aiohttp import web

from sdn_app.core.errors import TsdnError, Unauthenticated
from sdn_app.core.reservation import Principal
from sdn_app.web.api import PRINCIPAL, HttpApi, StreamSlots, client_address, http_status
from sdn_app.web.live import CLIENT_BACKLOG, LiveMap
from sdn_app.web.metrics import CONTENT_TYPE as METRICS_TYPE

log = logging.getLogger("tsdn.web")
KEEPALIVE = 15.0  # seconds between SSE comments on a quiet stream
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".ico": "image/x-icon",
                ".png": "image/png"}
NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

Authenticate = Callable[[str | None], Principal]  # an Authorization header's value -> its principal


@dataclass(frozen=True)
class WebLimits:
    """How much the HTTP side takes from its clients (docs/operations.md)."""

    max_connections: int = 512  # open at once; beyond, a new connection gets 503 and is closed
    max_body_bytes: int = 1024 * 1024  # a request body (SENSE intents, ALTO filters); beyond: 413
    body_timeout: float = 10.0  # seconds to receive a request's whole body; beyond: 408
    idle_timeout: float = 15.0  # seconds a connection may send nothing (before or between requests)
    max_header_bytes: int = 8190  # a request line or one header field
    max_headers: int = 64  # header fields in one request
    max_streams: int = 64  # server-sent-event streams open at once, map and APIs together
    max_streams_per_client: int = 8  # ... per principal (APIs) or per address (the map)
    write_timeout: float = 10.0  # seconds a stream's write may block on a client that does not read
    stream_backlog: int = CLIENT_BACKLOG  # messages a map stream may fall behind before it is dropped


class StreamQueue:
    """One map page's backlog: filled by the live map's threads (`put_nowait`, `queue.Full` when
    `maxsize` messages wait), read on the event loop (`get`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, maxsize: int):
        self._loop = loop
        self._maxsize = maxsize
        self._items: deque[Any] = deque()
        self._lock = threading.Lock()
        self._ready = asyncio.Event()

    def put_nowait(self, item: Any) -> None:
        """Queue `item` from any thread."""
        with self._lock:
            if len(self._items) >= self._maxsize:
                raise queue.Full
            self._items.append(item)
        with contextlib.suppress(RuntimeError):  # the loop is closing: nobody reads any more
            self._loop.call_soon_threadsafe(self._ready.set)

    async def get(self, timeout: float) -> Any:
        """The next message; `TimeoutError` when none comes within `timeout` seconds."""
        async with asyncio.timeout(timeout):
            while True:
                with self._lock:
                    if self._items:
                        return self._items.popleft()
                    self._ready.clear()
                await self._ready.wait()


def _static_files() -> dict[str, bytes]:
    """Every file of the static folder, by name (read once: the set is fixed, no path tricks)."""
    folder = resources.files("sdn_app.web") / "static"
    return {entry.name: entry.read_bytes() for entry in folder.iterdir()
            if entry.is_file() and any(entry.name.endswith(ext) for ext in STATIC_TYPES)}


def bearer_header(value: str | None) -> str | None:
    """`Authorization` as the token check wants it: Basic credentials whose password is a token
    become `Bearer <token>`; anything else is passed on unchanged. `Unauthenticated` for Basic
    credentials that are not base64 of `user:password`."""
    if value is None:
        return None
    scheme, _, credentials = value.partition(" ")
    if scheme.lower() != "basic":
        return value
    try:
        user_password = base64.b64decode(credentials.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthenticated("malformed Basic credentials: expected base64 of 'user:token'") from None
    _, sep, token = user_password.partition(":")
    if not sep or not token:
        raise Unauthenticated("malformed Basic credentials: expected base64 of 'user:token'")
    return f"Bearer {token}"


class WebServer:
    """The HTTP side: built and bound by `bind` on the running loop, ended by `stop`."""

    def __init__(self, live: LiveMap, listen: tuple[str, int], *, authenticate: Authenticate,
                 apis: Sequence[HttpApi] = (), ssl_context: ssl.SSLContext | None = None,
                 limits: WebLimits | None = None, loopback_only: bool = False, streams: StreamSlots | None = None,
                 authenticate_certificate: Callable[[str], Principal | None] | None = None):
        """`authenticate_certificate`: a TLS client certificate's subject CN -> its principal (None:
        certificates name nobody; callers send tokens)."""
        self.live = live
        self.loopback_only = loopback_only  # development mode: the APIs answer loopback callers only
        self.listen = listen
        self.authenticate = authenticate
        self.authenticate_certificate = authenticate_certificate
        self.apis = tuple(apis)
        self.ssl_context = ssl_context
        self.limits = limits or WebLimits()
        self.streams = streams or StreamSlots(self.limits.max_streams, self.limits.max_streams_per_client)
        self._static = _static_files()
        self._runner: web.AppRunner | None = None
        self._bound: tuple[str, int] | None = None
        self._stopping: asyncio.Event | None = None

    @property
    def address(self) -> str:
        """`host:port` bound (the port the OS chose for port 0)."""
        host, port = self._bound or self.listen
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def connections(self) -> int:
        """HTTP connections open now."""
        return len(self._runner.server.connections) if self._runner is not None and self._runner.server else 0

    @property
    def scheme(self) -> str:
        """`https` with TLS, else `http`."""
        return "https" if self.ssl_context is not None else "http"

    def application(self) -> web.Application:
        """The aiohttp application: the map's routes and every API's."""
        app = web.Application(client_max_size=self.limits.max_body_bytes, middlewares=[self._api_middleware])
        app.router.add_get("/", self._index)
        app.router.add_get("/index.html", self._index)
        app.router.add_get("/static/{name}", self._static_file)
        app.router.add_get("/api/snapshot", self._snapshot)
        app.router.add_get("/api/events", self._events)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._health)
        for api in self.apis:
            api.add_routes(app)
        return app

    async def bind(self) -> None:
        """Build the application and listen (on the running loop); `OSError` when the address is taken."""
        self._stopping = asyncio.Event()
        limits = self.limits
        runner = web.AppRunner(self.application(), access_log=None, handler_cancellation=True,
                               keepalive_timeout=limits.idle_timeout, max_line_size=limits.max_header_bytes,
                               max_field_size=limits.max_header_bytes, max_headers=limits.max_headers,
                               shutdown_timeout=1.0)
        await runner.setup()
        _cap_connections(runner.server, limits.max_connections)
        site = web.TCPSite(runner, self.listen[0], self.listen[1], ssl_context=self.ssl_context,
                           reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        bound = runner.addresses  # (host, port, ...) per listening socket
        self._bound = (self.listen[0], bound[0][1] if bound else self.listen[1])
        self._runner = runner

    async def stop(self) -> None:
        """End every stream, then stop listening."""
        if self._stopping is not None:
            self._stopping.set()
        for api in self.apis:
            try:
                await api.close()
            except Exception:  # the others must still close, and the socket be let go
                log.exception("HTTP: closing %s failed", api.prefix)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- the APIs' common part: principal, limits, errors ------------------------------------

    def _api_of(self, path: str) -> HttpApi | None:
        for api in self.apis:
            if path == api.prefix or path.startswith(api.prefix + "/"):
                return api
        return None

    def _principal(self, request: web.Request) -> Principal:
        """The caller: by its Authorization header, else by its TLS client certificate's subject CN
        (when the tokens file names that certificate)."""
        header = request.headers.get("Authorization")
        if header is None and self.authenticate_certificate is not None and request.transport is not None:
            certificate = request.transport.get_extra_info("peercert")
            subject = dict(item for rdn in (certificate or {}).get("subject", ()) for item in rdn)
            if (cn := subject.get("commonName")) and (principal := self.authenticate_certificate(cn)) is not None:
                return principal
        return self.authenticate(bearer_header(header))

    @web.middleware
    async def _api_middleware(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        api = self._api_of(request.path)
        if api is None:
            return await handler(request)
        try:
            if self.loopback_only and not _is_loopback(request.remote):
                raise Unauthenticated("development mode (no --tokens): the APIs answer loopback callers only")
            if request.path not in api.public:
                request[PRINCIPAL] = self._principal(request)
            if request.body_exists:
                try:
                    async with asyncio.timeout(self.limits.body_timeout):
                        await request.read()  # kept by aiohttp: handlers read it again at no cost
                except TimeoutError:
                    log.warning("%s %s: body not received within %.0f s; closing", client_address(request),
                                request.path, self.limits.body_timeout)
                    return api.error(408, f"request body not received within {self.limits.body_timeout:g} s")
            return await handler(request)
        except TsdnError as error:
            response = api.error(http_status(error), str(error))
            if isinstance(error, Unauthenticated):
                response.headers["WWW-Authenticate"] = 'Bearer realm="tsdn", Basic realm="tsdn"'
            return response
        except web.HTTPRequestEntityTooLarge:
            return api.error(413, f"request body too large: the limit is {self.limits.max_body_bytes} bytes")
        except web.HTTPException as error:
            if error.status < 400:
                raise
            response = api.error(error.status, error.reason)
            if "Allow" in error.headers:
                response.headers["Allow"] = error.headers["Allow"]
            return response

    # -- the live map ------------------------------------------------------------------------

    async def _index(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def _static_file(self, request: web.Request) -> web.Response:
        return self._file(request.match_info["name"])

    def _file(self, name: str) -> web.Response:
        body = self._static.get(name)
        if body is None:
            return web.Response(status=404, text="not found\n", headers=NO_STORE)
        content_type = STATIC_TYPES[name[name.rfind("."):]]
        return web.Response(body=body, headers={**NO_STORE, "Content-Type": content_type})

    async def _snapshot(self, request: web.Request) -> web.Response:
        body = json.dumps(self.live.snapshot(), allow_nan=False).encode()
        return web.Response(body=body, headers={**NO_STORE, "Content-Type": "application/json"})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.live.metrics.exposition(), headers={**NO_STORE, "Content-Type": METRICS_TYPE})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n", headers=NO_STORE)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        client = request.remote or "?"
        if not self.streams.take(client):
            return web.Response(status=503, text=f"too many event streams open (at most {self.streams.total}, "
                                f"{self.streams.per_client} per address); close a page and retry\n",
                                headers={**NO_STORE, "Retry-After": "5"})
        try:
            return await self._stream_map(request)
        finally:
            self.streams.give_back(client)

    async def _stream_map(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={**NO_STORE, "Content-Type": "text/event-stream",
                                               "X-Accel-Buffering": "no"})
        if request.method == "HEAD":
            await response.prepare(request)
            return response
        messages = StreamQueue(asyncio.get_running_loop(), self.limits.stream_backlog)
        self.live.subscribe(messages)  # before the headers: a client that has them misses no later event
        stopping = self._stopping
        try:
            await response.prepare(request)
            await self._write(response, b"retry: 2000\n\n")
            while stopping is None or not stopping.is_set():
                try:
                    message = await messages.get(KEEPALIVE)
                except TimeoutError:
                    await self._write(response, b": keepalive\n\n")
                    continue
                if message is None:  # the map dropped this page (too slow) or is stopping
                    break
                kind, data = message
                await self._write(response, f"event: {kind}\ndata: {json.dumps(data, allow_nan=False)}\n\n".encode())
        except (ConnectionResetError, TimeoutError) as why:
            log.info("map stream to %s ended: %s", request.remote, why or "write timed out (client not reading)")
        finally:
            self.live.unsubscribe(messages)
        return response

    async def _write(self, response: web.StreamResponse, data: bytes) -> None:
        async with asyncio.timeout(self.limits.write_timeout):
            await response.write(data)


def _is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _cap_connections(server: web.Server, limit: int) -> None:
    """Refuse connections beyond `limit` open at once: 503 and closed."""
    made = server.connection_made

    def connection_made(handler: Any, transport: asyncio.Transport) -> None:
        made(handler, transport)
        if len(server.connections) > limit:
            log.warning("HTTP: %d connections open, the limit is %d: refusing %s", len(server.connections) - 1,
                        limit, transport.get_extra_info("peername"))
            transport.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            transport.close()

    server.connection_made = connection_made  # type: ignore[method-assign]
