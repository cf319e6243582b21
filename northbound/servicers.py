"""gRPC servicers: authenticate, translate, hand to the core's worker, translate back.

No decisions here: every call runs `ReservationBook` methods on the `CoreWorker` thread.
Core errors become status codes with the core's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
from collections import OrderedDict, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from functools import wraps
from typing import Any, TypeVar

import grpc

from northbound import convert
from northbound.auth import Authenticator
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import bandwidth_pb2_grpc as pb_grpc
from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb
from northbound.proto.tsdn.v1 import topology_pb2_grpc as topo_grpc
from northbound.streams import OPEN_HEADER
from sdn_app.core import validation
from sdn_app.core.errors import InvalidArgument, TsdnError
from sdn_app.core.reservation import Event, Principal, Reservation, Role, State
from sdn_app.core.reservations import MAX_BATCH, BatchItem, ReservationBook
from sdn_app.worker import CoreWorker, EventHub, Subscription, owner_topic

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
MAX_STATUS_BYTES = 2000  # x3 when percent-encoded: within the 8 KiB of trailers a client accepts
DEFAULT_WAIT = 30.0  # seconds CreateReservations waits for the switches by default ...
MAX_WAIT = 300.0  # ... and at most
DEADLINE_MARGIN = 0.5  # seconds before the call's deadline when a waiting call answers anyway
_INSTALLING = (State.PROVISIONING, State.MOVING)


def _status(error: TsdnError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN)


def status_message(error: BaseException | str) -> str:
    """The text of an error as a status message, cut to `MAX_STATUS_BYTES` of UTF-8: a longer one
    does not fit the response's trailers (8 KiB by default, percent-encoded), and the caller
    would get a transport error instead of ours."""
    text = str(error)
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) <= MAX_STATUS_BYTES:
        return text
    return encoded[:MAX_STATUS_BYTES].decode("utf-8", errors="ignore") + " ... (message cut)"


def rpc(method: F | None = None, *, on_core: bool = True) -> Any:
    """Authenticate the caller, pass the principal in, turn core errors into status codes.

    The gRPC handler is a coroutine on the server's asyncio loop, holding no thread while it
    waits. The method itself stays a plain function (check the fields, hand work to the core with
    `self.worker.call`): it runs as one job on the core worker's thread, where `worker.call` runs
    at once, so a unary call costs two thread hand-offs (loop, core, loop). A method that must
    not run on the core thread (one that takes the OpenFlow side's lock, or does much work of its
    own beside the core's, like turning a page of 1000 reservations into messages) says
    `@rpc(on_core=False)` and runs in the loop's thread pool. A coroutine method runs on the loop
    itself, awaiting the core (`worker.call_async`) and any wait without holding a thread. Methods
    use `context` only for the call's deadline.
    """
    def decorate(method: F) -> F:
        @wraps(method)
        async def handler(self: _Base, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                principal = self.auth.authenticate(context.invocation_metadata())
                if inspect.iscoroutinefunction(method):
                    return await method(self, request, context, principal)
                if on_core:
                    return await self.worker.call_async(lambda: method(self, request, context, principal))
                return await asyncio.get_running_loop().run_in_executor(None, method, self, request, context,
                                                                        principal)
            except TsdnError as error:
                await context.abort(_status(error), status_message(error))
            except TimeoutError:
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                    "the controller core did not answer in time; retry")
            except Exception as error:  # a bug: say so as INTERNAL, never as an anonymous UNKNOWN
                if not self.worker.running:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "the controller is shutting down")
                log.exception("internal error in %s", method.__name__)
                await context.abort(grpc.StatusCode.INTERNAL,
                                    status_message(f"internal error: {type(error).__name__}: {error}"))
        return handler  # type: ignore[return-value]
    return decorate(method) if method is not None else decorate


class _Converted:
    """The message of each recent event, converted once however many streams it goes to (every
    stream runs on the one asyncio loop thread: no lock)."""

    def __init__(self, size: int = 1024):
        self._size = size
        self._recent: OrderedDict[int, tuple[Any, Any]] = OrderedDict()

    def message(self, event: Any, convert: Callable[[Any], Any]) -> Any:
        """`convert(event)`, or the message it gave for this very event before."""
        held = self._recent.get(id(event))
        if held is not None and held[0] is event:  # the event is held, so its id is not reused meanwhile
            return held[1]
        message = convert(event)
        self._recent[id(event)] = (event, message)
        if len(self._recent) > self._size:
            self._recent.popitem(last=False)
        return message


class _Base:
    def __init__(self, worker: CoreWorker, auth: Authenticator):
        self.worker = worker
        self.auth = auth
        self._converted: defaultdict[Any, _Converted] = defaultdict(_Converted)  # by event_out's code

    async def stream(self, context: grpc.aio.ServicerContext, hub: EventHub,
                     subscribe: Callable[[Principal], tuple[Subscription, Any]],
                     first: Callable[[Any], Iterator[Any]], event_out: Callable[[Any], Any],
                     ends: Callable[[Any], bool] = lambda _: False) -> AsyncIterator[Any]:
        """A server stream on the asyncio loop, holding no thread while it waits: authenticate,
        `subscribe` on the worker thread (so its snapshot and the subscription see exactly the
        same events), send the response headers with `OPEN_HEADER` (the caller knows it is in), yield
        `first(snapshot)`, then `event_out(event)` for each event (None: skip it) until the
        caller cancels, the server stops, or an event `ends` the stream; a `first` that returns
        True ends it after the snapshot. `event_out` depends on the event alone: each event is
        converted once, and the message shared by every stream of the same `event_out` code."""
        try:
            principal = self.auth.authenticate(context.invocation_metadata())
            subscription, snapshot = await self.worker.call_async(
                lambda: subscribe(principal), abandoned=lambda subscribed: hub.unsubscribe(subscribed[0]))
        except Exception as error:
            await self._abort_stream(context, error)
        subscription.wake_on(asyncio.get_running_loop())
        closed = False
        try:
            await context.send_initial_metadata((OPEN_HEADER,))
            snapshot_messages = first(snapshot)
            while True:
                try:
                    message = next(snapshot_messages)
                except StopIteration as done:
                    if done.value:
                        return
                    break
                yield message
            while True:
                event = await subscription.next_async()
                if event is None:
                    closed = not subscription.overflowed
                    break
                message = self._converted[event_out.__code__].message(event, event_out)
                if message is not None:
                    yield message
                if ends(event):
                    return
        except grpc.aio.AbortError:
            raise
        except Exception as error:
            await self._abort_stream(context, error)
        finally:
            hub.unsubscribe(subscription)
        if subscription.overflowed:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "this watcher fell too far behind; "
                                "watch again (with include_existing) to resynchronize")
        # Closed while the caller still listens: the server is stopping (the worker stops only after it).
        if closed or not self.worker.running:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "the controller is shutting down; watch again after restart")

    async def _abort_stream(self, context: grpc.aio.ServicerContext, error: Exception) -> None:
        """End a stream with the status of `error`, as `rpc` does for unary calls."""
        if isinstance(error, TsdnError):
            await context.abort(_status(error), status_message(error))
        if isinstance(error, TimeoutError):
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the controller core did not answer in time; retry")
        if not self.worker.running:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "the controller is shutting down; watch again after restart")
        log.error("internal error in a stream", exc_info=error)
        await context.abort(grpc.StatusCode.INTERNAL,
                            status_message(f"internal error: {type(error).__name__}: {error}"))

    @property
    def book(self) -> ReservationBook:
        return self.worker.book


class BandwidthServicer(_Base, pb_grpc.BandwidthServiceServicer):
    """tsdn.v1.BandwidthService."""

    @rpc
    def CreateReservation(self, request: pb.CreateReservationRequest, context, principal: Principal):
        def create() -> pb.Reservation:
            item = _create_in(request, self.book.clock.now())
            reservation = self.book.create(principal, item.request, item.labels, item.request_id,
                                           request.validate_only, item.fingerprint, item.terms)
            return convert.reservation_out(reservation)
        return self.worker.call(create)

    @rpc
    async def CreateReservations(self, request: pb.CreateReservationsRequest, context, principal: Principal):
        """A batch admitted in one core call (`ReservationBook.create_many`); unless `no_wait`, the
        answer waits, holding no thread, until the admitted reservations leave PROVISIONING and
        MOVING (told by their events, subscribed to in that same core call, so none is missed),
        `wait_timeout` passes or the call's deadline nears; their states are then read in one more
        core call."""
        wait = _wait_in(request, context.time_remaining())
        if not request.requests:
            raise InvalidArgument(f"requests: an empty batch; give 1 to {MAX_BATCH:,} requests")
        if len(request.requests) > MAX_BATCH:
            raise InvalidArgument(f"requests: {len(request.requests):,} in one batch, at most {MAX_BATCH:,}")
        hub = self.worker.hub

        def admit() -> tuple[list[Reservation | TsdnError], Subscription | None]:
            now = self.book.clock.now()
            items = [_batch_item_in(message, index, now) for index, message in enumerate(request.requests)]
            results = self.book.create_many(principal, items, request.all_or_nothing, request.validate_only)
            installing = _installing(results)
            if not installing or wait <= 0:
                return results, None
            # Subscribed before this job ends: the events of these reservations are published after it.
            return results, hub.subscribe(lambda event: event.reservation.id in installing,
                                          owner_topic(principal.name))

        def abandoned(admitted: tuple[list, Subscription | None]) -> None:
            if admitted[1] is not None:
                hub.unsubscribe(admitted[1])
        results, subscription = await self.worker.call_async(admit, abandoned=abandoned)
        if subscription is not None:
            try:
                await _settled(subscription, _installing(results), wait)
            finally:
                hub.unsubscribe(subscription)
            admitted = [r for r in results if isinstance(r, Reservation)]
            now = await self.worker.call_async(lambda: {r.id: self.book.get(principal, r.name) for r in admitted})
            results = [now[r.id] if isinstance(r, Reservation) else r for r in results]
        # A thousand reservations turned into messages in the loop's thread pool, not on the loop.
        return await asyncio.get_running_loop().run_in_executor(None, _batch_out, results)

    @rpc
    def GetReservation(self, request: pb.GetReservationRequest, context, principal: Principal):
        convert.name_in(request.name)

        def get() -> pb.Reservation:
            reservation = self.book.get(principal, request.name)
            return convert.reservation_out(reservation, self.book.history(reservation.id))
        return self.worker.call(get)

    @rpc(on_core=False)  # a page of 1000 turned into messages must not hold up the core thread
    def ListReservations(self, request: pb.ListReservationsRequest, context, principal: Principal):
        state = convert.state_in(request.state)
        convert.name_in(request.dtn, "dtn")
        convert.name_in(request.owner, "owner")
        page, token = self.worker.call(lambda: self.book.list(principal, state, request.dtn, request.owner,
                                                              request.page_size, request.page_token))
        # Reservations are immutable: a page of 1000 is turned into messages here, not on the core's thread.
        return pb.ListReservationsResponse(reservations=[convert.reservation_out(r) for r in page],
                                           next_page_token=token)

    @rpc
    def ModifyReservation(self, request: pb.ModifyReservationRequest, context, principal: Principal):
        convert.name_in(request.name)
        bandwidth = convert.bandwidth_in(request.bandwidth_bps) if request.HasField("bandwidth_bps") else None
        which = request.WhichOneof("new_end")
        if which == "end_time":
            end = convert.timestamp_in(request.end_time, "end_time")
        elif which == "until_released":
            if not request.until_released:
                raise InvalidArgument("until_released: set it to true to remove the end time, or leave it out")
            end = float("inf")
        else:
            end = None
        path = convert.path_choice_in(request.path) if request.HasField("path") else None
        priority = request.priority if request.HasField("priority") else None
        if priority == 0:
            raise InvalidArgument("priority: from 1 up to your own; leave it out to keep the reservation's")
        ceiling = convert.bandwidth_in(request.ceiling_bps, "ceiling_bps") if request.HasField("ceiling_bps") else None
        return self.worker.call(lambda: convert.reservation_out(
            self.book.modify(principal, request.name, bandwidth, end, request.validate_only, path, priority, ceiling)))

    @rpc
    def CommitReservation(self, request: pb.ReservationRequest, context, principal: Principal):
        return self._change(self.book.commit, principal, request.name)

    @rpc
    def AbortReservation(self, request: pb.ReservationRequest, context, principal: Principal):
        return self._change(self.book.abort, principal, request.name)

    @rpc
    def ProvisionReservation(self, request: pb.ReservationRequest, context, principal: Principal):
        return self._change(self.book.provision, principal, request.name)

    @rpc
    def UnprovisionReservation(self, request: pb.ReservationRequest, context, principal: Principal):
        return self._change(self.book.unprovision, principal, request.name)

    @rpc
    def DeleteReservation(self, request: pb.DeleteReservationRequest, context, principal: Principal):
        return self._change(self.book.release, principal, request.name)

    def _change(self, change: Callable[[Principal, str], Reservation], principal: Principal,
                name: str) -> pb.Reservation:
        """`change` (a book method) of the reservation `name`, on the worker thread, as a message."""
        convert.name_in(name)
        return self.worker.call(lambda: convert.reservation_out(change(principal, name)))

    @rpc
    def QueryAvailability(self, request: pb.QueryAvailabilityRequest, context, principal: Principal):
        max_paths = request.max_paths or 3

        validation.whole(request.size_bytes, "size_bytes", 0, validation.MAX_COUNT // 8)

        def query() -> pb.QueryAvailabilityResponse:
            path_request = convert.path_request_in(request, 1, self.book.clock.now())
            found = self.book.availability(principal, path_request, max_paths)
            reply = pb.QueryAvailabilityResponse(max_bandwidth_bps=found.max_bandwidth,
                                                 paths=[convert.path_out(p) for p in found.paths],
                                                 reason=found.reason)
            if request.size_bytes:
                schedule = self.book.earliest_finish(principal, path_request.src, path_request.dst,
                                                     request.size_bytes * 8, path_request.start, path_request.policy)
                reply.earliest_finish_time.CopyFrom(convert.timestamp_out(schedule[-1].end))
                reply.schedule.extend(convert.schedule_out(schedule))
            return reply
        return self.worker.call(query)

    async def WatchReservations(self, request: pb.WatchReservationsRequest,
                                context) -> AsyncIterator[pb.ReservationEvent]:
        def first(existing: list) -> Iterator[pb.ReservationEvent]:
            for reservation in existing:
                yield pb.ReservationEvent(state=convert.state_out(reservation.state), reason="snapshot",
                                          reservation=convert.reservation_out(reservation))
        async for message in self.stream(context, self.worker.hub,
                                         lambda principal: self._subscribe(principal, request), first,
                                         convert.event_out):
            yield message

    def _subscribe(self, principal: Principal, request: pb.WatchReservationsRequest):
        """On the worker thread: the snapshot and the subscription see exactly the same events."""
        existing = self.book.snapshot(principal, request.name)  # always: it checks the caller may watch at all
        wanted = existing[0].id if request.name else None

        def accept(event: Event) -> bool:
            owner_ok = principal.may_see(event.reservation.owner)
            return owner_ok and (wanted is None or event.reservation.id == wanted)
        # Only the events of the owner it may see are offered to it (an admin watching all: every one).
        owner = existing[0].owner if request.name else None if principal.role is Role.ADMIN else principal.name
        topic = owner_topic(owner) if owner is not None else None
        return self.worker.hub.subscribe(accept, topic), existing if request.include_existing else []


class TopologyServicer(_Base, topo_grpc.TopologyServiceServicer):
    """tsdn.v1.TopologyService; `fabric` (None: no switches controlled) answers for link state."""

    def __init__(self, worker: CoreWorker, auth: Authenticator, fabric: Any = None):
        super().__init__(worker, auth)
        self.fabric = fabric

    @rpc
    def GetTopology(self, request: topo_pb.GetTopologyRequest, context, principal: Principal):
        return self.worker.call(lambda: convert.topology_out(self.book))

    @rpc(on_core=False)
    def GetTopologyStatus(self, request: topo_pb.GetTopologyStatusRequest, context, principal: Principal):
        # The snapshot is taken here, so that the core thread never waits on the OpenFlow side's lock.
        snapshot = self.fabric.link_status() if self.fabric is not None else None
        return self.worker.call(lambda: self._status_out(snapshot))

    def _status_out(self, snapshot: Any) -> topo_pb.TopologyStatus:
        """The status message of a `links.NetworkStatus` (None: no switch controlled); on the core's thread."""
        topology = self.book.topology
        wall = self.book.clock.now()
        message = topo_pb.TopologyStatus(topology=topology.name, controlled=snapshot is not None,
                                         time=convert.timestamp_out(wall))
        if snapshot is None:
            message.note = ("this controller controls no switches (started with --no-openflow: ledger only); "
                            "switches and links are not watched")
            for s in topology.spec.switches:
                message.switches.append(topo_pb.SwitchStatus(name=s.name, dpid=s.dpid))
            for link in topology.spec.links:
                message.links.append(topo_pb.LinkStatus(
                    name=link.label, a=f"{link.a}:{link.a_port}", b=f"{link.b}:{link.b_port}",
                    state=topo_pb.LinkStatus.UNKNOWN, reason="not watched: no switch is controlled"))
            return message

        def wall_time(t: float):  # the snapshot's clock (monotonic) as a timestamp
            return convert.timestamp_out(wall - max(0.0, snapshot.now - t))

        for s in snapshot.switches:
            entry = topo_pb.SwitchStatus(name=s.name, dpid=s.dpid, connected=s.connected)
            if s.connected and s.since is not None:
                entry.connected_since.CopyFrom(wall_time(s.since))
            message.switches.append(entry)
        for link in snapshot.links:
            entry = topo_pb.LinkStatus(name=link.name, a=link.a, b=link.b, reason=link.reason,
                                       state=topo_pb.LinkStatus.State.Value(link.state.value))
            if link.lldp_age_ab is not None:
                entry.lldp_age_a_to_b_s = link.lldp_age_ab
            if link.lldp_age_ba is not None:
                entry.lldp_age_b_to_a_s = link.lldp_age_ba
            message.links.append(entry)
        for m in snapshot.mismatches:
            message.mismatches.append(topo_pb.WiringMismatch(
                at=m.at, expected=m.expected, observed=m.observed, message=m.message,
                first_seen=wall_time(m.first_seen), last_seen=wall_time(m.last_seen)))
        return message


def _create_in(request: pb.CreateReservationRequest, now: float) -> BatchItem:
    """The core's form of a CreateReservationRequest, every field checked (`now`: an unset start)."""
    bandwidth = convert.bandwidth_in(request.bandwidth_bps)
    terms = convert.terms_in(request)
    prefixes = convert.prefixes_in(request)
    path_request = convert.path_request_in(request, bandwidth, now, request.protect, prefixes)
    return BatchItem(path_request, dict(request.labels), request.request_id, _fingerprint(request), terms)


def _batch_item_in(request: pb.CreateReservationRequest, index: int, now: float) -> BatchItem:
    """`_create_in` of request `index` of a batch; a malformed one is InvalidArgument naming it."""
    try:
        if request.validate_only:
            raise InvalidArgument("validate_only: set it on the batch (CreateReservationsRequest.validate_only), "
                                  "not on one of its requests")
        return _create_in(request, now)
    except InvalidArgument as error:
        named = f"requests[{index}]" + (f" (request_id {validation.shown(request.request_id)})"
                                        if request.request_id else "")
        raise InvalidArgument(f"{named}: {error}") from None


def _wait_in(request: pb.CreateReservationsRequest, deadline_in: float | None) -> float:
    """Seconds CreateReservations may wait for the switches (0: no_wait): `wait_timeout` (unset:
    `DEFAULT_WAIT`, at most `MAX_WAIT`), ending `DEADLINE_MARGIN` before the call's deadline."""
    wait = DEFAULT_WAIT
    if request.HasField("wait_timeout"):
        wait = convert.duration_in(request.wait_timeout, "wait_timeout")
        if wait > MAX_WAIT:
            raise InvalidArgument(f"wait_timeout: {wait:g} s, at most {MAX_WAIT:g} s")
    if request.no_wait:
        return 0.0
    return wait if deadline_in is None else min(wait, max(0.0, deadline_in - DEADLINE_MARGIN))


async def _settled(subscription: Subscription, installing: set[str], wait: float) -> None:
    """Return once none of `installing` (reservation ids) is PROVISIONING or MOVING, as their events
    on `subscription` tell, or `wait` seconds passed, or the subscription closed."""
    subscription.wake_on(asyncio.get_running_loop())
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(wait):
            while installing:
                event = await subscription.next_async()
                if event is None:  # closed: the controller stops (or the queue overflowed)
                    return
                if event.reservation.state in _INSTALLING:
                    installing.add(event.reservation.id)
                else:
                    installing.discard(event.reservation.id)


def _installing(results: list[Reservation | TsdnError]) -> set[str]:
    """Ids of the reservations admitted (not merely checked: validate_only) still installing."""
    return {r.id for r in results if isinstance(r, Reservation) and r.id and r.state in _INSTALLING}


def _batch_out(results: list[Reservation | TsdnError]) -> pb.CreateReservationsResponse:
    """The answer of CreateReservations: each outcome in order, and the counts."""
    response = pb.CreateReservationsResponse()
    response.installing = len(_installing(results))
    for outcome in results:
        if isinstance(outcome, Reservation):
            response.results.add(reservation=convert.reservation_out(outcome))
            response.admitted += 1
        else:
            response.results.add(error=pb.ItemError(code=outcome.code, message=status_message(outcome)))
            response.refused += 1
    return response


def _fingerprint(request: pb.CreateReservationRequest) -> str:
    """What a retry must repeat exactly: the request as sent, less its request_id and validate_only."""
    if not request.request_id:
        return ""
    sent = pb.CreateReservationRequest()
    sent.CopyFrom(request)
    sent.ClearField("request_id")
    sent.ClearField("validate_only")
    return hashlib.sha256(sent.SerializeToString(deterministic=True)).hexdigest()[:32]
