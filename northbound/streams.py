"""Open server streams: who may hold one, and how many.

Every streaming RPC of the controller (the Watch* calls, TakeJobs, gRPC health Watch and the
reflection stream grpcurl opens) passes the `StreamGate` interceptor of the asyncio server:

- with a tokens file, the caller must present a valid token before anything is held open
  (UNAUTHENTICATED otherwise); in development mode every caller is the admin `dev`;
- the stream takes a slot of `StreamSlots`, within a limit per principal and one in total
  (RESOURCE_EXHAUSTED naming the limit, its value and how many are open), and gives it back
  when it ends, however it ends.

Unary calls pass untouched (they authenticate in their servicer; the health Check stays open
for load balancers).
"""

from __future__ import annotations

import inspect
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from northbound.auth import Authenticator
from sdn_app.core.errors import InvalidArgument, TsdnError, Unauthenticated

DEFAULT_MAX_STREAMS = 2000  # a show: hundreds of agents (one TakeJobs each) and hundreds of watchers
DEFAULT_MAX_STREAMS_PER_PRINCIPAL = 500  # a service watching each of its transfers, or agents sharing a token
MAX_STREAMS_CEILING = 100_000  # beyond this a typo, not a plan: each stream costs memory
# The response header of a tsdn stream once it is admitted and subscribed: a client waiting for the
# headers knows that every later event reaches it (and that it holds a slot).
OPEN_HEADER = ("tsdn-stream", "open")


class StreamLimitReached(TsdnError):
    """A new stream would exceed a limit on open streams."""

    code = "RESOURCE_EXHAUSTED"


@dataclass(frozen=True)
class StreamLimits:
    """How many server streams may be open at once: in total, and per principal."""

    total: int = DEFAULT_MAX_STREAMS
    per_principal: int = DEFAULT_MAX_STREAMS_PER_PRINCIPAL

    def check(self) -> None:
        """InvalidArgument naming the option that is out of range."""
        for option, value in (("--max-streams", self.total), ("--max-streams-per-principal", self.per_principal)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_STREAMS_CEILING:
                raise InvalidArgument(f"{option}: must be a whole number from 1 to {MAX_STREAMS_CEILING}, "
                                      f"got {value!r}")
        if self.per_principal > self.total:
            raise InvalidArgument(f"--max-streams-per-principal {self.per_principal}: more than --max-streams "
                                  f"{self.total}; it can be at most that")


class StreamSlots:
    """The open streams, counted per principal and in total within `limits` (thread-safe)."""

    def __init__(self, limits: StreamLimits):
        limits.check()
        self.limits = limits
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()
        self._total = 0

    @property
    def open(self) -> int:
        """Streams open now."""
        return self._total

    def acquire(self, principal: str) -> None:
        """Take a slot for a stream of `principal`, or StreamLimitReached naming the limit."""
        with self._lock:
            held = self._open[principal]
            if held >= self.limits.per_principal:
                raise StreamLimitReached(
                    f"too many open streams for {principal}: {held} open, the limit per principal is "
                    f"{self.limits.per_principal} (--max-streams-per-principal); end streams no longer read "
                    "(each Watch* or TakeJobs call holds one until it ends or is cancelled)")
            if self._total >= self.limits.total:
                raise StreamLimitReached(
                    f"too many open streams on this controller: {self._total} open, the limit is "
                    f"{self.limits.total} (--max-streams); retry later, or ask its operator to raise the limit")
            self._open[principal] = held + 1
            self._total += 1

    def release(self, principal: str) -> None:
        """Give back a slot taken by `acquire`."""
        with self._lock:
            self._open[principal] -= 1
            if self._open[principal] <= 0:
                del self._open[principal]
            self._total -= 1


def _status(error: TsdnError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, error.code)


def _streaming(handler: grpc.RpcMethodHandler) -> bool:
    return bool(handler.request_streaming or handler.response_streaming)


def _rebuilt(handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]) -> grpc.RpcMethodHandler:
    """A handler of the same kind and (de)serializers as `handler`, running `behavior`."""
    make = (grpc.stream_stream_rpc_method_handler if handler.request_streaming
            else grpc.unary_stream_rpc_method_handler if handler.response_streaming
            else grpc.stream_unary_rpc_method_handler)
    return make(behavior, request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)


def _behavior(handler: grpc.RpcMethodHandler) -> Callable[..., Any]:
    return handler.stream_stream or handler.unary_stream or handler.stream_unary


def _refused(handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def refuse(_request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)
    return _rebuilt(handler, refuse)


def _held(handler: grpc.RpcMethodHandler, principal: str, slots: StreamSlots) -> grpc.RpcMethodHandler:
    """`handler`, holding a slot of `slots` for `principal` from its start to its end."""
    behavior = _behavior(handler)
    if inspect.isasyncgenfunction(behavior):
        async def held_generator(request: Any, context: grpc.aio.ServicerContext) -> None:
            try:
                slots.acquire(principal)
            except StreamLimitReached as error:
                await context.abort(_status(error), str(error))
            try:
                messages = behavior(request, context)
                try:
                    async for message in messages:
                        await context.write(message)
                finally:
                    await messages.aclose()  # its own clean-up (unsubscribing) runs now, not at garbage collection
            finally:
                slots.release(principal)
        return _rebuilt(handler, held_generator)
    if inspect.iscoroutinefunction(behavior):  # the reader/writer style (gRPC's asyncio health Watch)
        async def held_coroutine(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                slots.acquire(principal)
            except StreamLimitReached as error:
                await context.abort(_status(error), str(error))
            try:
                return await behavior(request, context)
            finally:
                slots.release(principal)
        return _rebuilt(handler, held_coroutine)

    def held_sync(request: Any, context: grpc.ServicerContext) -> Any:  # holds a pool thread: streams should be async
        try:
            slots.acquire(principal)
        except StreamLimitReached as error:
            context.abort(_status(error), str(error))
            return
        try:
            yield from behavior(request, context)
        finally:
            slots.release(principal)
    return _rebuilt(handler, held_sync)


class StreamGate(grpc.aio.ServerInterceptor):
    """Authenticates every streaming RPC before it is held open and holds it within `slots`."""

    def __init__(self, auth: Authenticator, slots: StreamSlots):
        self.auth = auth
        self.slots = slots

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or not _streaming(handler):
            return handler
        try:
            principal = self.auth.authenticate(handler_call_details.invocation_metadata)
        except Unauthenticated as error:
            return _refused(handler, grpc.StatusCode.UNAUTHENTICATED,
                            f"{error} (every stream, reflection and health Watch included, needs a token)")
        return _held(handler, principal.name, self.slots)
