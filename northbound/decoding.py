"""Requests whose bytes are not a message: INVALID_ARGUMENT naming the type, one warning, no traceback.

gRPC's asyncio server deserializes a request after every interceptor has run and before the
servicer has a context; a deserializer that raises (truncated bytes, an over-long varint, a
proto3 string that is not UTF-8) ends the call as UNKNOWN "Unexpected DecodeError" with a
traceback in the log, and no interceptor or servicer ever sees it. So the `RequestDecoding`
interceptor gives every handler a deserializer that does not raise: it returns an `Undecodable`
marker instead, and the handler's behavior, wrapped, refuses a marker (the request of a unary
call, or any message of a client stream) with INVALID_ARGUMENT before the servicer runs.

It covers every method of every service on the server (tsdn's, gRPC health and reflection),
however they were registered. Put it last among the server's interceptors, so that it wraps the
registered handler itself (the same object on every call: wrapped once per method) and the
interceptors before it see a handler of the same kind (async generator, coroutine or plain
function) with the tolerant deserializer. A servicer reading a client stream with
`context.read()` rather than its request iterator would get the marker itself (none does).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

log = logging.getLogger(__name__)
_PREFIX = re.compile(r"^Error parsing message(?: with type '[^']*')?:?\s*")  # protobuf's, redundant with ours


class Undecodable:
    """What the tolerant deserializer returns for bytes that are not a request message."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message  # the status message: "request: not a valid <type> (<why>)"


def _type_name(deserializer: Callable[[bytes], Any]) -> str:
    """The full name of the message type `deserializer` parses (`X.FromString`), or a description."""
    descriptor = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", None) or "request message"


def tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """`deserializer`, returning an `Undecodable` rather than raising for bytes it cannot parse."""
    def deserialize(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except (DecodeError, ValueError) as error:  # ValueError: UnicodeDecodeError, non-protobuf deserializers
            why = _PREFIX.sub("", str(error)) or type(error).__name__
            return Undecodable(f"request: not a valid {_type_name(deserializer)} ({why})")
    return deserialize


def _peer(context: Any) -> str:
    try:
        return context.peer() or "an unknown peer"
    except Exception:  # the call may be gone already; the warning is still worth having
        return "an unknown peer"


def _warn(method: str, context: Any, refused: Undecodable) -> None:
    log.warning("%s from %s: %s; answered INVALID_ARGUMENT", method, _peer(context), refused.message)


def _guarded(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """`handler` with the tolerant deserializer, its behavior refusing an `Undecodable` request."""
    behavior = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    streamed = handler.request_streaming

    async def refuse(refused: Undecodable, context: grpc.aio.ServicerContext) -> None:
        _warn(method, context, refused)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.message)

    def refuse_sync(refused: Undecodable, context: grpc.ServicerContext) -> None:
        _warn(method, context, refused)
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused.message)  # raises

    async def checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, Undecodable):
                await refuse(request, context)
            yield request

    def checked_sync(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in requests:
            if isinstance(request, Undecodable):
                refuse_sync(request, context)
            yield request

    async def prepared(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if streamed:
            return checked(request, context)
        if isinstance(request, Undecodable):
            await refuse(request, context)
        return request

    def prepared_sync(request: Any, context: grpc.ServicerContext) -> Any:
        if streamed:
            return checked_sync(request, context)
        if isinstance(request, Undecodable):
            refuse_sync(request, context)
        return request

    wrapped: Callable[..., Any]
    if inspect.isasyncgenfunction(behavior):
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            messages = behavior(await prepared(request, context), context)
            try:
                async for message in messages:
                    yield message
            finally:
                await messages.aclose()  # its clean-up (unsubscribing) runs now, not at garbage collection
    elif inspect.iscoroutinefunction(behavior):
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            return await behavior(await prepared(request, context), context)
    elif handler.response_streaming:  # a plain function returning an iterator (run in the thread pool)
        def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            yield from behavior(prepared_sync(request, context), context)
    else:
        def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
            return behavior(prepared_sync(request, context), context)

    make = {(False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler}[(streamed, handler.response_streaming)]
    return make(wrapped, request_deserializer=tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer)


class RequestDecoding(grpc.aio.ServerInterceptor):
    """Every request that is not a valid message is answered INVALID_ARGUMENT (see the module)."""

    def __init__(self) -> None:
        self._guarded: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
            self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:  # unknown method, or raw bytes wanted
            return handler
        method = handler_call_details.method
        held = self._guarded.get(method)  # only methods that have a handler: as many as the server serves
        if held is None or held[0] is not handler:
            held = (handler, _guarded(handler, method))
            self._guarded[method] = held
        return held[1]
