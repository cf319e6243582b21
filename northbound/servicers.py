"""gRPC servicers: authenticate, translate, hand to the core's worker, translate back.

No decisions here: every call runs `ReservationBook` methods on the `CoreWorker` thread.
Core errors become status codes with the core's message.
"""

from __future__ import annotations

import hashlib
import logging
import queue
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any, TypeVar

import grpc

from northbound import convert
from northbound.auth import Authenticator
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import bandwidth_pb2_grpc as pb_grpc
from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb
from northbound.proto.tsdn.v1 import topology_pb2_grpc as topo_grpc
from sdn_app.core.errors import InvalidArgument, TsdnError
from sdn_app.core.reservations import Event, Principal, ReservationBook
from sdn_app.worker import CoreWorker, EventHub, Subscription

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])
WATCH_POLL_SECONDS = 0.5


def _status(error: TsdnError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN)


def rpc(method: F) -> F:
    """Authenticate the caller, pass the principal in, turn core errors into status codes."""
    @wraps(method)
    def handler(self: _Base, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            principal = self.auth.authenticate(context.invocation_metadata())
            return method(self, request, context, principal)
        except TsdnError as error:
            context.abort(_status(error), str(error))
        except TimeoutError:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the controller core did not answer in time; retry")
        except Exception as error:  # a bug: say so as INTERNAL, never as an anonymous UNKNOWN
            if not self.worker.running:
                context.abort(grpc.StatusCode.UNAVAILABLE, "the controller is shutting down")
            log.exception("internal error in %s", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}")
    return handler  # type: ignore[return-value]


class _Base:
    def __init__(self, worker: CoreWorker, auth: Authenticator):
        self.worker = worker
        self.auth = auth

    def stream(self, context: grpc.ServicerContext, hub: EventHub,
               subscribe: Callable[[Principal], tuple[Subscription, Any]], first: Callable[[Any], Iterator[Any]],
               event_out: Callable[[Any], Any], ends: Callable[[Any], bool] = lambda _: False) -> Iterator[Any]:
        """A server stream: authenticate, `subscribe` on the worker thread (so its snapshot and
        the subscription see exactly the same events), yield `first(snapshot)`, then
        `event_out(event)` for each event (None: skip it) until the caller cancels, the server
        stops, or an event `ends` the stream; a `first` that returns True ends it after the snapshot."""
        try:
            principal = self.auth.authenticate(context.invocation_metadata())
            subscription, snapshot = self.worker.call(lambda: subscribe(principal))
        except TsdnError as error:
            context.abort(_status(error), str(error))
        context.add_callback(lambda: hub.unsubscribe(subscription))
        try:
            if (yield from first(snapshot)):
                return
            closed = False
            while context.is_active():
                try:
                    event = subscription.events.get(timeout=WATCH_POLL_SECONDS)
                except queue.Empty:
                    if subscription.overflowed:  # its queue was full: there was no room for the wake-up
                        break
                    continue
                if event is None:
                    closed = True
                    break
                message = event_out(event)
                if message is not None:
                    yield message
                if ends(event):
                    return
        finally:
            hub.unsubscribe(subscription)
        if subscription.overflowed:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          "this watcher fell too far behind; watch again (with include_existing) to resynchronize")
        # Closed while the caller still listens: the server is stopping (the worker stops only after it).
        if (closed and context.is_active()) or not self.worker.running:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the controller is shutting down; watch again after restart")

    @property
    def book(self) -> ReservationBook:
        return self.worker.book


class BandwidthServicer(_Base, pb_grpc.BandwidthServiceServicer):
    """tsdn.v1.BandwidthService."""

    @rpc
    def CreateReservation(self, request: pb.CreateReservationRequest, context, principal: Principal):
        bandwidth = convert.bandwidth_in(request.bandwidth_bps)

        def create() -> pb.Reservation:
            path_request = convert.path_request_in(request, bandwidth, self.book.clock.now(), request.protect)
            reservation = self.book.create(principal, path_request, dict(request.labels), request.request_id,
                                           request.validate_only, _fingerprint(request))
            return convert.reservation_out(reservation)
        return self.worker.call(create)

    @rpc
    def GetReservation(self, request: pb.GetReservationRequest, context, principal: Principal):
        return self.worker.call(lambda: convert.reservation_out(self.book.get(principal, request.name)))

    @rpc
    def ListReservations(self, request: pb.ListReservationsRequest, context, principal: Principal):
        state = convert.state_in(request.state)

        def listing() -> pb.ListReservationsResponse:
            page, token = self.book.list(principal, state, request.dtn, request.owner, request.page_size,
                                         request.page_token)
            return pb.ListReservationsResponse(reservations=[convert.reservation_out(r) for r in page],
                                               next_page_token=token)
        return self.worker.call(listing)

    @rpc
    def ModifyReservation(self, request: pb.ModifyReservationRequest, context, principal: Principal):
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
        return self.worker.call(lambda: convert.reservation_out(
            self.book.modify(principal, request.name, bandwidth, end, request.validate_only, path)))

    @rpc
    def DeleteReservation(self, request: pb.DeleteReservationRequest, context, principal: Principal):
        return self.worker.call(lambda: convert.reservation_out(self.book.release(principal, request.name)))

    @rpc
    def QueryAvailability(self, request: pb.QueryAvailabilityRequest, context, principal: Principal):
        max_paths = request.max_paths or 3

        def query() -> pb.QueryAvailabilityResponse:
            path_request = convert.path_request_in(request, 1, self.book.clock.now())
            found = self.book.availability(principal, path_request, max_paths)
            return pb.QueryAvailabilityResponse(max_bandwidth_bps=found.max_bandwidth,
                                                paths=[convert.path_out(p) for p in found.paths], reason=found.reason)
        return self.worker.call(query)

    def WatchReservations(self, request: pb.WatchReservationsRequest, context) -> Iterator[pb.ReservationEvent]:
        def first(existing: list) -> Iterator[pb.ReservationEvent]:
            for reservation in existing:
                yield pb.ReservationEvent(state=convert.state_out(reservation.state), reason="snapshot",
                                          reservation=convert.reservation_out(reservation))
        return self.stream(context, self.worker.hub, lambda principal: self._subscribe(principal, request),
                           first, convert.event_out)

    def _subscribe(self, principal: Principal, request: pb.WatchReservationsRequest):
        """On the worker thread: the snapshot and the subscription see exactly the same events."""
        existing = self.book.snapshot(principal, request.name)  # always: it checks the caller may watch at all
        wanted = existing[0].id if request.name else None

        def accept(event: Event) -> bool:
            owner_ok = principal.may_see(event.reservation.owner)
            return owner_ok and (wanted is None or event.reservation.id == wanted)
        return self.worker.hub.subscribe(accept), existing if request.include_existing else []


class TopologyServicer(_Base, topo_grpc.TopologyServiceServicer):
    """tsdn.v1.TopologyService; `fabric` (None: no switches controlled) answers for link state."""

    def __init__(self, worker: CoreWorker, auth: Authenticator, fabric: Any = None):
        super().__init__(worker, auth)
        self.fabric = fabric

    @rpc
    def GetTopology(self, request: topo_pb.GetTopologyRequest, context, principal: Principal):
        return self.worker.call(lambda: convert.topology_out(self.book))

    @rpc
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


def _fingerprint(request: pb.CreateReservationRequest) -> str:
    """What a retry must repeat exactly: the request as sent, less its request_id and validate_only."""
    if not request.request_id:
        return ""
    sent = pb.CreateReservationRequest()
    sent.CopyFrom(request)
    sent.ClearField("request_id")
    sent.ClearField("validate_only")
    return hashlib.sha256(sent.SerializeToString(deterministic=True)).hexdigest()[:32]
