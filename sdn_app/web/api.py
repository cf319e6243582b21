"""What an HTTP API served beside the live map (SENSE under /sense/api, ALTO under /alto) is given,
and what it gives the server.

The server (sdn_app/web/server.py) owns the listening socket, TLS, the limits and the bearer
tokens. For every request under an API's `prefix` it authenticates the caller first (the
principal is then `request[PRINCIPAL]`; paths in `public` skip that), and turns what a handler
raises into the API's own error body through `error`:

- a core error (`sdn_app.core.errors`): its HTTP status (`HTTP_STATUS`) and its message;
- an aiohttp `HTTPException` (413 for a body over the limit, 405, 404 for no route...): its status.

So a handler just raises `InvalidArgument("intent: ...")` and the caller sees the protocol's
error format with status 400, and nothing was changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from aiohttp import web

from sdn_app.core.clock import Clock
from sdn_app.core.errors import TsdnError, Unavailable
from sdn_app.core.reservation import Principal
from sdn_app.core.topology import Topology

PRINCIPAL = web.RequestKey("principal", Principal)  # request[PRINCIPAL]: the authenticated caller
CORE_TIMEOUT = 30.0  # seconds a call may wait for the core's thread
EVENT_BATCH = 500  # events handed over at once by an EventFollower
log = logging.getLogger("tsdn.web")
D = TypeVar("D")
T = TypeVar("T")

HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "FAILED_PRECONDITION": 409,
    "RESOURCE_EXHAUSTED": 409,  # no capacity: the request conflicts with what is booked
    "UNAVAILABLE": 503,
    "UNKNOWN": 500,
}


def http_status(error: TsdnError) -> int:
    """The HTTP status a core error becomes."""
    return HTTP_STATUS.get(error.code, 500)


class StreamSlots:
    """Counts the server-sent-event streams open, in total and per client; refuses beyond the limits."""

    def __init__(self, total: int, per_client: int):
        self.total = total
        self.per_client = per_client
        self._open: dict[str, int] = {}

    def take(self, client: str) -> bool:
        """Take a slot for `client` (False: none free)."""
        if sum(self._open.values()) >= self.total or self._open.get(client, 0) >= self.per_client:
            return False
        self._open[client] = self._open.get(client, 0) + 1
        return True

    def give_back(self, client: str) -> None:
        """Free a slot `client` took."""
        left = self._open.get(client, 0) - 1
        if left > 0:
            self._open[client] = left
        else:
            self._open.pop(client, None)

    @property
    def open(self) -> int:
        """Streams open now."""
        return sum(self._open.values())


@dataclass(frozen=True)
class ApiContext:
    """What an HTTP API reads and calls: the core only through `worker` (`await
    worker.call_async(fn)` runs `fn` on the core's thread; `worker.book` is the ReservationBook,
    `worker.hub` its event hub), the switches' measured loads through `loads()` (direction id ->
    DirectionLoad; empty without switches), and the domain name from `--domain`."""

    worker: Any
    topology: Topology
    domain: str
    clock: Clock
    loads: Callable[[], dict[str, Any]]
    streams: StreamSlots  # server-sent-event streams, shared with the map: take one per stream, give it back
    wall_clock: Callable[[], float]
    # An Authorization header's value -> its principal (the tokens file's check; `Unauthenticated`
    # otherwise): for token endpoints such as SENSE's /sense/api/auth/token
    authenticate: Callable[[str | None], Principal]


class CoreDesk(Generic[D]):
    """A protocol's desk in the core (`SenseDesk`, `NsiDesk`, ...): made by `make(book)` on the
    core's thread at the first call, and used only there."""

    def __init__(self, worker: Any, make: Callable[[Any], D]):
        self.worker = worker
        self._make = make
        self._desk: D | None = None

    async def call(self, fn: Callable[[D], T]) -> T:
        """`fn(desk)` on the core's thread; `Unavailable` when the controller is stopping or its core
        does not answer within `CORE_TIMEOUT`."""
        def job() -> T:
            if self._desk is None:
                self._desk = self._make(self.worker.book)
            return fn(self._desk)
        if not self.worker.running:
            raise Unavailable("the controller is stopping; retry once it is back")
        try:
            return await self.worker.call_async(job, timeout=CORE_TIMEOUT)
        except TimeoutError:
            raise Unavailable(f"the controller's core did not answer within {CORE_TIMEOUT:g} s; retry") from None


class EventFollower:
    """The book's events that `accept` lets through, in batches, for a task on the event loop: made
    (and subscribed) on the loop, so nothing published after it is missed; `run(handle)` until the
    hub closes. A subscription that fell behind is renewed, saying that `what` missed events."""

    def __init__(self, hub: Any, accept: Callable[[Any], bool], what: str):
        self.hub = hub
        self.accept = accept
        self.what = what
        self.subscription = self._subscribe()

    def _subscribe(self) -> Any:
        subscription = self.hub.subscribe(self.accept)
        subscription.wake_on(asyncio.get_running_loop())
        return subscription

    async def run(self, handle: Callable[[list[Any]], Awaitable[None]]) -> None:
        """`await handle(events)` for each batch, until the hub closes."""
        while True:
            while (event := await self.subscription.next_async()) is not None:
                events = [event]
                with contextlib.suppress(queue.Empty):
                    while len(events) < EVENT_BATCH:
                        events.append(self.subscription.events.get_nowait())
                await handle([e for e in events if e is not None])
            self.hub.unsubscribe(self.subscription)
            if not self.subscription.overflowed:
                return  # closed: the controller is stopping
            log.warning("%s fell behind the book's events; some were missed", self.what)
            self.subscription = self._subscribe()

    def close(self) -> None:
        """Stop following (the running `run` returns)."""
        self.hub.unsubscribe(self.subscription)


class HttpApi(Protocol):
    """One API mounted under `prefix` on the controller's HTTP side."""

    prefix: str  # e.g. "/sense/api": every path under it is this API's
    public: frozenset[str]  # paths (exact) served without a token, e.g. a token endpoint

    def add_routes(self, app: web.Application) -> None:
        """Register the API's handlers on `app` (every path under `prefix`)."""

    def error(self, status: int, message: str) -> web.Response:
        """The protocol's error body for `status` with `message`."""

    async def close(self) -> None:
        """End open streams and background tasks (the server is stopping)."""


def client_address(request: web.Request) -> str:
    """The peer's address, for logs."""
    peer: Any = request.transport.get_extra_info("peername") if request.transport else None
    return f"{peer[0]}:{peer[1]}" if peer else "?"
