"""ALTO (RFC 7285) on the controller's HTTP side, with RFC 8895 update streams and RFC 9439
bandwidth metrics: `AltoApi`, mounted under /alto (docs/alto.md).

    GET  /alto/directory                 application/alto-directory+json (the IRD)
    GET  /alto/networkmap                application/alto-networkmap+json
    GET  /alto/costmap/<cost type>       application/alto-costmap+json (one per cost type)
    POST /alto/costmap/filtered          application/alto-costmapfilter+json -> alto-costmap+json
    POST /alto/endpointcost              application/alto-endpointcostparams+json -> alto-endpointcost+json
    POST /alto/updates                   application/alto-updatestreamparams+json -> text/event-stream
    POST /alto/updates/streams/<id>      stream control (application/alto-updatestreamparams+json) -> 204

What is served comes from the pure core (`sdn_app.core.alto`): the network map is fixed by the
topology; the costs are those of the link state measured on the core thread (`AltoView.measure`
through the worker) and computed off the event loop (a thread of the loop's executor), cached
until the state changes. After the reservation book published an event (a reservation booked,
moved, released, a window starting or ending) the state is measured again before the next answer,
so a booking shows in the next answer; otherwise (link states and measured loads move without
events) a request after a second answers the last costs and has the state measured beside it, so
an answer is about a second old at most and no request waits for a periodic measurement.

Update streams: every second, while streams are open, the state is measured and each stream's
resources are compared with what it last sent: a resource that changed gets one message (a JSON
merge patch, RFC 7396, or the whole resource when the client asked for no incremental changes),
at most one per resource per second; nothing is sent when nothing changed (a comment every 15 s
keeps the connection open). Streams are bounded by `ApiContext.streams` (shared with the map's,
in total and per principal); `close` ends them
(a control event saying every resource stopped).

Errors are application/alto-error+json: request problems with the RFC 7285 code, field and
value (400); HTTP-level refusals (401, 403, 404, 405, 406, 413, 415, 503...) with E_SYNTAX
(RFC 7285 has no other code for them) and the reason in `meta.message`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import queue
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from sdn_app.core.alto import (
    ENDPOINT_COST_ID,
    FILTERED_COST_MAP_ID,
    NETWORK_MAP_ID,
    AltoError,
    AltoView,
    Costs,
    Endpoint,
    EndpointRequest,
    FilterRequest,
    Subscription,
    merge_patch,
    parse_endpoint,
    parse_endpoint_request,
    parse_filter,
    parse_update_request,
    resource_ids,
)
from sdn_app.core.errors import Unavailable
from sdn_app.core.reservation import require_role
from sdn_app.web.api import PRINCIPAL, ApiContext, client_address

log = logging.getLogger("tsdn.web.alto")

DIRECTORY = "application/alto-directory+json"
NETWORK_MAP = "application/alto-networkmap+json"
COST_MAP = "application/alto-costmap+json"
COST_MAP_FILTER = "application/alto-costmapfilter+json"
ENDPOINT_COST = "application/alto-endpointcost+json"
ENDPOINT_COST_PARAMS = "application/alto-endpointcostparams+json"
UPDATE_STREAM_PARAMS = "application/alto-updatestreamparams+json"
UPDATE_STREAM_CONTROL = "application/alto-updatestreamcontrol+json"
ERROR = "application/alto-error+json"
MERGE_PATCH = "application/merge-patch+json"
EVENT_STREAM = "text/event-stream"
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

REFRESH = 1.0  # seconds: the most a measured link state is reused without a reservation event
PUSH_INTERVAL = 1.0  # seconds between update rounds of the streams; at most one message per resource a round
KEEPALIVE = 15.0  # seconds between SSE comments on a quiet stream
WRITE_TIMEOUT = 10.0  # seconds a stream write may block on a client that does not read
STREAM_BACKLOG = 256  # messages a stream may fall behind before it is dropped
CORE_TIMEOUT = 10.0  # seconds to wait for the core thread's measurement


def _json_body(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


def _reply(media_type: str, data: Any = None, body: bytes | None = None, status: int = 200) -> web.Response:
    return web.Response(status=status, body=body if body is not None else _json_body(data),
                        headers={**HEADERS, "Content-Type": media_type})


def _error_body(status: int, meta: dict[str, Any]) -> web.Response:
    return _reply(ERROR, {"meta": meta}, status=status)


def accepts(header: str | None, media_type: str) -> bool:
    """Whether an `Accept` header lets `media_type` through (no header: anything is accepted;
    `type/*` and `*/*` count; a `q=0` entry excludes)."""
    if not header or not header.strip():
        return True
    kind = media_type.split("/", 1)[0]
    best: dict[str, float] = {}
    for part in header.split(","):
        item, *params = (p.strip() for p in part.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        best[item.lower()] = max(quality, best.get(item.lower(), 0.0))
    for candidate in (media_type, f"{kind}/*", "*/*"):
        if candidate in best:
            return best[candidate] > 0
    return False


class _Refused(Exception):
    """An HTTP-level refusal answered with an ALTO error body."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def _decode(raw: bytes) -> Any:
    """A request body as JSON; E_SYNTAX saying where it is malformed."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=refuse)
    except UnicodeDecodeError as error:
        raise AltoError("E_SYNTAX", f"the request body is not UTF-8 (byte {error.start})") from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise AltoError("E_SYNTAX", f"malformed JSON at {where}: {error.msg}") from None
    except (ValueError, RecursionError) as error:
        raise AltoError("E_SYNTAX", f"malformed JSON: {error}") from None


class _Feed:
    """The costs of the link state now: measured on the core thread, computed on a thread of the
    loop's executor, reused until a reservation event arrives or `REFRESH` passes."""

    def __init__(self, worker: Any, view: AltoView):
        self.worker = worker
        self.view = view
        self.costs: Costs | None = None
        self.measured_at = -math.inf
        self._subscription: Any = None
        self._lock = asyncio.Lock()
        self._refresh: asyncio.Task | None = None
        self._closed = False

    def _subscribe(self) -> None:
        hub = getattr(self.worker, "hub", None)
        if hub is not None and not self._closed:
            self._subscription = hub.subscribe(lambda event: True)

    def _events_pending(self) -> bool:
        subscription = self._subscription
        return subscription is not None and (subscription.overflowed or not subscription.events.empty())

    def _drain(self) -> None:
        """Forget the events seen so far: the measurement about to be taken includes them."""
        subscription = self._subscription
        if subscription is None:
            self._subscribe()
            return
        while True:
            try:
                event = subscription.events.get_nowait()
            except queue.Empty:
                break
            if event is None:  # the hub closed it (overflow, or the server is stopping)
                self._subscription = None
                break
        if subscription.overflowed or self._subscription is None:
            self._subscribe()

    async def current(self, force: bool = False) -> Costs:
        """The costs now. After a reservation event (or with `force`) the link state is measured
        before answering; when only `REFRESH` passed, the last costs are answered and measured
        again beside it, so a request never waits for that."""
        if self.costs is not None and not force and not self._events_pending():
            if time.monotonic() - self.measured_at >= REFRESH and (self._refresh is None or self._refresh.done()):
                self._refresh = asyncio.get_running_loop().create_task(self._measure(time.monotonic()))
                self._refresh.add_done_callback(_log_failure)
            return self.costs
        return await self._measure(time.monotonic(), force)

    async def _measure(self, asked: float, force: bool = False) -> Costs:
        async with self._lock:
            if (self.costs is not None and not force and self.measured_at >= asked
                    and not self._events_pending()):
                return self.costs  # measured by another request since this one asked
            self._drain()
            started = time.monotonic()
            book = self.worker.book
            view = self.view
            try:
                state = await self.worker.call_async(
                    lambda: view.measure(book.ledger, book.rerouter.watch, book.down_links(), book.clock.now()),
                    timeout=CORE_TIMEOUT)
            except (RuntimeError, TimeoutError) as why:
                raise Unavailable(f"ALTO: the controller's core did not answer ({why or 'timed out'})") from None
            costs = view.cached(state)
            if costs is None:
                costs = await asyncio.get_running_loop().run_in_executor(None, view.costs, state)
            self.costs, self.measured_at = costs, started
            return costs

    def close(self) -> None:
        self._closed = True
        if self._refresh is not None:
            self._refresh.cancel()
        subscription, self._subscription = self._subscription, None
        hub = getattr(self.worker, "hub", None)
        if subscription is not None and hub is not None:
            hub.unsubscribe(subscription)


@dataclass
class _Carried:
    """One resource an update stream carries, and what it last sent of it."""

    subscription: Subscription
    last: dict[str, Any] | None = None
    sent_at: float = -math.inf


@dataclass
class _Stream:
    """One open update stream: its owner, its resources, and the messages waiting to be written."""

    id: str
    owner: str
    control_uri: str
    carried: dict[str, _Carried] = field(default_factory=dict)
    messages: asyncio.Queue[bytes | None] = field(default_factory=lambda: asyncio.Queue(STREAM_BACKLOG))
    ended: bool = False

    def send(self, data: bytes | None) -> bool:
        """Queue a message (None: end the stream); False when the reader fell too far behind."""
        try:
            self.messages.put_nowait(data)
            return True
        except asyncio.QueueFull:
            return False


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("ALTO: measuring the link state failed: %s", task.exception())


def _event(kind: str, data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'), allow_nan=False)}\n\n".encode()


class AltoApi:
    """The ALTO server under /alto (an `HttpApi`)."""

    prefix = "/alto"
    public: frozenset[str] = frozenset()

    def __init__(self, context: ApiContext):
        self.context = context
        self.view = AltoView(context.topology)
        self.kinds = resource_ids(self.view)
        self._feed = _Feed(context.worker, self.view)
        self._network_map_body = _json_body(self.view.network_map.message)
        self._bodies: tuple[Costs | None, dict[str, bytes]] = (None, {})
        self._streams: dict[str, _Stream] = {}
        self._pusher: asyncio.Task | None = None
        self._closing = False

    # -- HttpApi ------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        router = app.router
        router.add_get(f"{self.prefix}/directory", self._directory)
        router.add_get(f"{self.prefix}/networkmap", self._network_map)
        for cost_type in self.view.cost_types.values():
            router.add_get(f"{self.prefix}/costmap/{cost_type.name}", self._cost_map)
        router.add_post(f"{self.prefix}/costmap/filtered", self._filtered)
        router.add_post(f"{self.prefix}/endpointcost", self._endpoint_cost)
        router.add_post(f"{self.prefix}/updates", self._update_stream)
        router.add_post(f"{self.prefix}/updates/streams/{{stream}}", self._stream_control)

    def error(self, status: int, message: str) -> web.Response:
        meta: dict[str, Any] = {"code": "E_SYNTAX", "message": message}
        if status == 400:
            meta["syntax-error"] = message
        return _error_body(status, meta)

    async def close(self) -> None:
        self._closing = True
        if self._pusher is not None:
            self._pusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._pusher
        for stream in list(self._streams.values()):
            self._end(stream, "the controller is stopping")
        self._feed.close()

    # -- plumbing -----------------------------------------------------------------------------

    async def _answer(self, request: web.Request, produces: str | None, handler: Callable,
                      consumes: str | None = None) -> web.StreamResponse:
        """Check the caller, the media types and the body, then run `handler(request, body)`;
        every refusal as an ALTO error. `produces` None: the answer has no body to negotiate."""
        try:
            require_role(request[PRINCIPAL], "read ALTO information")
            if produces is not None and not accepts(request.headers.get("Accept"), produces):
                raise _Refused(406, f"this resource answers {produces} (or {ERROR}), which the request's Accept "
                                    f"({request.headers.get('Accept')!r}) excludes")
            body = None
            if consumes is not None:
                if request.content_type != consumes:
                    given = request.headers.get("Content-Type")
                    sent = repr(given) if given else "a body without Content-Type"
                    raise _Refused(415, f"this resource takes {consumes}, not {sent}", {"Accept-Post": consumes})
                body = _decode(await request.read())
            return await handler(request, body)
        except AltoError as error:
            return _error_body(400, error.meta())
        except _Refused as refused:
            response = self.error(refused.status, str(refused))
            response.headers.update(refused.headers)
            return response

    def _base(self, request: web.Request) -> str:
        return f"{request.scheme}://{request.host}{self.prefix}"

    def _cost_map_body(self, costs: Costs, name: str) -> bytes:
        """A full cost map serialized once per state."""
        held, bodies = self._bodies
        if held is not costs:
            bodies = {}
            self._bodies = (costs, bodies)
        body = bodies.get(name)
        if body is None:
            body = bodies[name] = _json_body(costs.cost_map(self.view.cost_types[name]))
        return body

    # -- resources ----------------------------------------------------------------------------

    async def _directory(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, DIRECTORY, self._serve_directory)

    async def _serve_directory(self, request: web.Request, body: Any) -> web.Response:
        base = self._base(request)
        types = self.view.cost_types
        names = list(types)
        resources: dict[str, Any] = {NETWORK_MAP_ID: {"uri": f"{base}/networkmap", "media-type": NETWORK_MAP}}
        for cost_type in types.values():
            resources[cost_type.resource_id] = {"uri": f"{base}/costmap/{cost_type.name}", "media-type": COST_MAP,
                                                "capabilities": {"cost-type-names": [cost_type.name]},
                                                "uses": [NETWORK_MAP_ID]}
        resources[FILTERED_COST_MAP_ID] = {"uri": f"{base}/costmap/filtered", "media-type": COST_MAP,
                                           "accepts": COST_MAP_FILTER,
                                           "capabilities": {"cost-type-names": names, "cost-constraints": True},
                                           "uses": [NETWORK_MAP_ID]}
        resources[ENDPOINT_COST_ID] = {"uri": f"{base}/endpointcost", "media-type": ENDPOINT_COST,
                                       "accepts": ENDPOINT_COST_PARAMS,
                                       "capabilities": {"cost-type-names": names, "cost-constraints": True}}
        resources["update-stream"] = {
            "uri": f"{base}/updates", "media-type": EVENT_STREAM, "accepts": UPDATE_STREAM_PARAMS,
            "uses": list(self.kinds),
            "capabilities": {"incremental-change-media-types": {rid: MERGE_PATCH for rid in self.kinds},
                             "support-stream-control": True},
        }
        directory = {"meta": {"cost-types": {t.name: t.json(described=True) for t in types.values()},
                              "default-alto-network-map": NETWORK_MAP_ID},
                     "resources": resources}
        return _reply(DIRECTORY, directory)

    async def _network_map(self, request: web.Request) -> web.StreamResponse:
        async def serve(request: web.Request, body: Any) -> web.Response:
            return _reply(NETWORK_MAP, body=self._network_map_body)
        return await self._answer(request, NETWORK_MAP, serve)

    async def _cost_map(self, request: web.Request) -> web.StreamResponse:
        name = request.path.rsplit("/", 1)[1]

        async def serve(request: web.Request, body: Any) -> web.Response:
            return _reply(COST_MAP, body=self._cost_map_body(await self._feed.current(), name))
        return await self._answer(request, COST_MAP, serve)

    async def _filtered(self, request: web.Request) -> web.StreamResponse:
        async def serve(request: web.Request, body: Any) -> web.Response:
            filter_request = parse_filter(body, self.view)
            return _reply(COST_MAP, (await self._feed.current()).filtered(filter_request))
        return await self._answer(request, COST_MAP, serve, COST_MAP_FILTER)

    async def _endpoint_cost(self, request: web.Request) -> web.StreamResponse:
        async def serve(request: web.Request, body: Any) -> web.Response:
            ecs = parse_endpoint_request(body, self.view)
            srcs = ecs.srcs if ecs.srcs is not None else self._caller(request)
            return _reply(ENDPOINT_COST, (await self._feed.current()).endpoint_costs(ecs, srcs))
        return await self._answer(request, ENDPOINT_COST, serve, ENDPOINT_COST_PARAMS)

    @staticmethod
    def _caller(request: web.Request) -> tuple[Endpoint, ...]:
        """The requesting client's own address, the source of an endpoint cost request without
        `srcs` (RFC 7285 section 11.5.1)."""
        remote = (request.remote or "").split("%")[0]
        for kind in ("ipv4", "ipv6"):
            try:
                return (parse_endpoint(f"{kind}:{remote}", "endpoints.srcs"),)
            except AltoError:
                continue
        raise AltoError("E_MISSING_FIELD", "endpoints.srcs: required (the client's own address is unknown)",
                        "endpoints.srcs")

    # -- update streams (RFC 8895) ------------------------------------------------------------

    def _content(self, costs: Costs, subscription: Subscription) -> tuple[str, dict[str, Any]]:
        """A carried resource now: its media type and message."""
        kind = self.kinds[subscription.resource_id]
        if kind == "network-map":
            return NETWORK_MAP, self.view.network_map.message
        if kind == "cost-map":
            name = subscription.resource_id.removeprefix("costmap-")
            return COST_MAP, costs.cost_map(self.view.cost_types[name])
        if kind == "filtered-cost-map":
            assert isinstance(subscription.input, FilterRequest)
            return COST_MAP, costs.filtered(subscription.input)
        assert isinstance(subscription.input, EndpointRequest) and subscription.input.srcs is not None
        return ENDPOINT_COST, costs.endpoint_costs(subscription.input, subscription.input.srcs)

    def _start(self, stream: _Stream, costs: Costs, subscriptions: tuple[Subscription, ...]) -> None:
        """Carry `subscriptions` on `stream`: each resource whole, unless the client holds its tag."""
        now = time.monotonic()
        for subscription in subscriptions:
            media_type, message = self._content(costs, subscription)
            carried = _Carried(subscription, message, now)
            stream.carried[subscription.client_id] = carried
            vtag = message.get("meta", {}).get("vtag", {}).get("tag")
            if subscription.tag is not None and subscription.tag == vtag:
                continue  # the client has this version already
            if not stream.send(_event(f"{media_type},{subscription.client_id}", message)):
                self._end(stream, "the client fell too far behind")
                return

    async def _update_stream(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, EVENT_STREAM, self._open_stream, UPDATE_STREAM_PARAMS)

    async def _open_stream(self, request: web.Request, body: Any) -> web.StreamResponse:
        update = parse_update_request(body, self.view, control=False)
        if self._closing:
            raise _Refused(503, "the controller is stopping")
        owner = request[PRINCIPAL].name
        slots = self.context.streams
        if not slots.take(owner):
            raise _Refused(503, f"too many event streams open (at most {slots.total}, {slots.per_client} per "
                                "principal); close one or retry later", {"Retry-After": "5"})
        try:
            costs = await self._feed.current()
        except BaseException:
            slots.give_back(owner)
            raise
        stream_id = secrets.token_urlsafe(16)
        stream = _Stream(stream_id, owner, f"{self._base(request)}/updates/streams/{stream_id}")
        self._streams[stream_id] = stream
        try:
            response = web.StreamResponse(headers={**HEADERS, "Content-Type": EVENT_STREAM, "X-Accel-Buffering": "no"})
            await response.prepare(request)
            stream.send(_event(UPDATE_STREAM_CONTROL, {"control-uri": stream.control_uri}))
            self._start(stream, costs, update.add)
            self._ensure_pusher()
            log.info("ALTO update stream %s opened by %s (%s): %s", stream_id, stream.owner, client_address(request),
                     ", ".join(f"{s.client_id}={s.resource_id}" for s in update.add))
            await self._write_stream(stream, response)
            return response
        finally:
            stream.ended = True
            self._streams.pop(stream_id, None)
            slots.give_back(owner)

    async def _write_stream(self, stream: _Stream, response: web.StreamResponse) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE):
                        message = await stream.messages.get()
                except TimeoutError:
                    message = b": keepalive\n\n"
                if message is None:
                    return
                async with asyncio.timeout(WRITE_TIMEOUT):
                    await response.write(message)
        except (ConnectionResetError, TimeoutError) as why:
            log.info("ALTO update stream %s ended: %s", stream.id, why or "write timed out (client not reading)")

    def _end(self, stream: _Stream, why: str) -> None:
        """Tell the client every resource stopped, and end the stream."""
        if stream.ended:
            return
        stream.ended = True
        control: dict[str, Any] = {"stopped": list(stream.carried)} if stream.carried else {}
        stopped = _event(UPDATE_STREAM_CONTROL, {**control, "description": why})
        while stream.messages.qsize() > STREAM_BACKLOG - 2:  # room for the last two: a reader this far behind
            stream.messages.get_nowait()                      # loses the rest anyway
        stream.send(stopped)
        stream.send(None)

    async def _stream_control(self, request: web.Request) -> web.StreamResponse:
        async def serve(request: web.Request, body: Any) -> web.Response:
            stream = self._streams.get(request.match_info["stream"])
            if stream is None or stream.ended or stream.owner != request[PRINCIPAL].name:
                raise _Refused(404, "no such update stream open (it ended, or it is not yours)")
            update = parse_update_request(body, self.view, control=True, carried=stream.carried)
            costs = await self._feed.current() if update.add else None
            if stream.ended:  # it ended while the costs were computed
                raise _Refused(404, "no such update stream open (it ended)")
            if update.remove:
                for client_id in update.remove:
                    stream.carried.pop(client_id, None)
                stream.send(_event(UPDATE_STREAM_CONTROL, {"stopped": list(update.remove)}))
            if update.add and costs is not None:
                stream.send(_event(UPDATE_STREAM_CONTROL, {"started": [s.client_id for s in update.add]}))
                self._start(stream, costs, update.add)
            if not stream.carried:
                self._end(stream, "the stream carries no resource any more")
            return web.Response(status=204, headers=HEADERS)
        return await self._answer(request, None, serve, UPDATE_STREAM_PARAMS)

    def _ensure_pusher(self) -> None:
        if self._pusher is None or self._pusher.done():
            self._pusher = asyncio.get_running_loop().create_task(self._push_loop(), name="alto-updates")

    async def _push_loop(self) -> None:
        """Every `PUSH_INTERVAL` while streams are open: measure, and send each changed resource."""
        while self._streams and not self._closing:
            await asyncio.sleep(PUSH_INTERVAL)
            try:
                costs = await self._feed.current(force=True)
            except Unavailable as why:
                log.warning("ALTO update streams: %s", why)
                continue
            now = time.monotonic()
            for stream in list(self._streams.values()):
                if not stream.ended:
                    self._push(stream, costs, now)

    def _push(self, stream: _Stream, costs: Costs, now: float) -> None:
        for client_id, carried in list(stream.carried.items()):
            if now - carried.sent_at < PUSH_INTERVAL * 0.9:
                continue  # sent less than a second ago: the next round sends what changed
            media_type, message = self._content(costs, carried.subscription)
            if carried.subscription.incremental:
                patch = merge_patch(carried.last, message)
                if patch is None:
                    continue
                data = _event(f"{MERGE_PATCH},{client_id}", patch)
            elif message == carried.last:
                continue
            else:
                data = _event(f"{media_type},{client_id}", message)
            carried.last, carried.sent_at = message, now
            if not stream.send(data):
                log.warning("ALTO update stream %s: the client fell %d messages behind; ending it", stream.id,
                            STREAM_BACKLOG)
                self._end(stream, "the client fell too far behind")
                return
