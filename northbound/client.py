"""A typed Python client of the tsdn northbound API, for services and the `tsdn` CLI.

    with TsdnClient("127.0.0.1:50051", token=token) as tsdn:
        r = tsdn.create_reservation("caltech-a-dtn1", "starlight-dtn1", 400 * 10**9, duration=3600)
        ...
        tsdn.delete_reservation(r.name)

Every call has a deadline. Calls are retried with exponential backoff while the controller is
UNAVAILABLE (restarting, say); CreateReservation is retried with the same `request_id`, so a
retry never books twice. Given several controllers (`"h1:50051,h2:50051,h3:50051"`), a call
that finds one unavailable (or that one did not answer within the deadline) tries the next,
and one answered by a follower goes to the leader the follower names. Failures raise `ApiError`
with the status code and the server's message.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf.duration_pb2 import Duration

from northbound.convert import timestamp_out
from northbound.proto.tsdn.v1 import agent_pb2 as agent_pb
from northbound.proto.tsdn.v1 import agent_pb2_grpc as agent_grpc
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import bandwidth_pb2_grpc as pb_grpc
from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb
from northbound.proto.tsdn.v1 import topology_pb2_grpc as topo_grpc
from northbound.proto.tsdn.v1 import transfer_pb2 as transfer_pb
from northbound.proto.tsdn.v1 import transfer_pb2_grpc as transfer_grpc

T = TypeVar("T")
POLICIES = {"shortest": pb.SHORTEST, "widest": pb.WIDEST}
STATES = {name: value for name, value in pb.ReservationState.items() if value}


# gRPC's reconnect backoff grows to 120 s by default: after a controller restart, agents and
# watchers would come back up to two minutes late. 5 s keeps them close behind a restart.
CHANNEL_OPTIONS = (("grpc.max_reconnect_backoff_ms", 5000), ("grpc.initial_reconnect_backoff_ms", 500))


MAX_REDIRECTS = 3  # leaders named in a row before a call gives up (elections in between)
LEADER_TRAILER = "tsdn-leader"  # a follower's UNAVAILABLE names the leader's address here


class _Stubs:
    """The stubs of the four services over one channel."""

    def __init__(self, channel: grpc.Channel):
        self.bandwidth = pb_grpc.BandwidthServiceStub(channel)
        self.topology = topo_grpc.TopologyServiceStub(channel)
        self.agents = agent_grpc.AgentServiceStub(channel)
        self.transfers = transfer_grpc.TransferServiceStub(channel)


def _leader_named(error: grpc.RpcError) -> str:
    """The leader's address a follower put in its answer ('' when none)."""
    try:
        trailers = error.trailing_metadata() or ()  # type: ignore[attr-defined]
    except Exception:  # not a call (a channel that never connected)
        return ""
    for key, value in trailers:
        if key == LEADER_TRAILER:
            return value if isinstance(value, str) else value.decode()
    return ""


class ApiError(Exception):
    """A call the controller refused or could not answer."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class TsdnClient:
    """Connection to one controller's northbound API."""

    def __init__(self, target: str = "127.0.0.1:50051", token: str | None = None, *, timeout: float = 10.0,
                 retries: int = 5, backoff: float = 0.2, tls_ca: bytes | None = None,
                 tls_cert: bytes | None = None, tls_key: bytes | None = None):
        """Connect to `target` (`HOST:PORT`, or several comma-separated: the controllers of one
        deployment, tried in turn; a follower's answer naming the leader is followed); TLS when
        `tls_ca` is given (with a client certificate when `tls_cert`)."""
        self.targets = [t.strip() for t in target.split(",") if t.strip()]
        if not self.targets:
            raise ValueError(f"no controller address in {target!r}")
        self._tls = (tls_ca, tls_cert, tls_key)
        self._connections: dict[str, tuple[grpc.Channel, _Stubs]] = {}
        self.target = self.targets[0]
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def __enter__(self) -> TsdnClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection."""
        for channel, _ in self._connections.values():
            channel.close()
        self._connections.clear()

    def _stubs(self) -> _Stubs:
        """The stubs of the controller in use, connecting to it the first time."""
        connection = self._connections.get(self.target)
        if connection is None:
            tls_ca, tls_cert, tls_key = self._tls
            if tls_ca is None and tls_cert is None:
                channel = grpc.insecure_channel(self.target, options=CHANNEL_OPTIONS)
            else:
                credentials = grpc.ssl_channel_credentials(root_certificates=tls_ca, private_key=tls_key,
                                                           certificate_chain=tls_cert)
                channel = grpc.secure_channel(self.target, credentials, options=CHANNEL_OPTIONS)
            connection = self._connections[self.target] = (channel, _Stubs(channel))
        return connection[1]

    def _unavailable(self, error: grpc.RpcError) -> bool:
        """After UNAVAILABLE from the controller in use: move to the leader it names (True: try
        there at once), else to the next address given (False: wait before trying)."""
        leader = _leader_named(error)
        if leader and leader != self.target and (leader in self.targets or len(self.targets) == 1):
            self.target = leader
            return True
        # A leader outside the addresses given may be unreachable from here (an agent in a Mininet
        # host reaches the controllers by unix: sockets): the next address given is tried at once.
        self.target = self.targets[(self.targets.index(self.target) + 1) % len(self.targets)] \
            if self.target in self.targets else self.targets[0]
        return bool(leader)

    def _call(self, pick: Callable[[_Stubs], Callable[..., T]], request: Any, timeout: float | None = None) -> T:
        attempt = redirects = 0
        while True:
            try:
                return pick(self._stubs())(request, timeout=timeout or self.timeout, metadata=self._metadata)
            except grpc.RpcError as error:
                code = error.code()
                if code is grpc.StatusCode.DEADLINE_EXCEEDED and len(self.targets) > 1 and attempt < self.retries:
                    # A controller that takes connections but answers nothing (frozen, cut off): the next one.
                    self._unavailable(error)
                    attempt += 1
                    continue
                if code is not grpc.StatusCode.UNAVAILABLE:
                    raise ApiError(code, error.details() or code.name) from None
                if self._unavailable(error) and redirects < MAX_REDIRECTS:
                    redirects += 1
                    continue
                if attempt >= self.retries:
                    raise ApiError(code, error.details() or code.name) from None
                time.sleep(self.backoff * (2**attempt) * random.uniform(0.5, 1.0))
                attempt += 1

    # -- BandwidthService ----------------------------------------------------------------

    def create_reservation(self, src: str, dst: str, bandwidth_bps: int, *, start: float | None = None,
                           end: float | None = None, duration: float | None = None, policy: str = "shortest",
                           include: Sequence[str] = (), exclude: Sequence[str] = (), max_hops: int | None = None,
                           protect: bool = False, labels: Mapping[str, str] | None = None,
                           request_id: str | None = None, validate_only: bool = False, hold: bool = False,
                           manual_provision: bool = False, priority: int = 0,
                           ceiling_bps: int = 0, src_prefix: str = "", dst_prefix: str = "") -> pb.Reservation:
        """Reserve bandwidth from DTN `src` to DTN `dst` (times in epoch seconds; no end: until released).

        `hold`: two phases, HELD until `commit_reservation`; `manual_provision`: no flows until
        `provision_reservation`; `priority`: 0 for the caller's own; `ceiling_bps`: elastic, with
        `bandwidth_bps` its floor; `src_prefix` and `dst_prefix` (both or neither, IPv6 networks
        like "2001:db8:1:2::/64"): the traffic reserved is the IPv6 between them, not the DTNs'
        IPv4. `request_id` defaults to a fresh UUID that every retry of this call reuses.
        """
        request = reservation_request(
            src, dst, bandwidth_bps, start=start, end=end, duration=duration, policy=policy, include=include,
            exclude=exclude, max_hops=max_hops, protect=protect, labels=labels, request_id=request_id,
            validate_only=validate_only, hold=hold, manual_provision=manual_provision, priority=priority,
            ceiling_bps=ceiling_bps, src_prefix=src_prefix, dst_prefix=dst_prefix)
        return self._call(lambda s: s.bandwidth.CreateReservation, request)

    def create_reservations(self, requests: Sequence[pb.CreateReservationRequest], *, all_or_nothing: bool = False,
                            validate_only: bool = False, no_wait: bool = False,
                            wait_timeout: float | None = None) -> pb.CreateReservationsResponse:
        """A campaign: up to 1,000 requests (`reservation_request` builds them) in one call, each
        admitted or refused on its own (or, `all_or_nothing`, every one or none); the answer has
        one result per request, in order. It comes once every admitted reservation's flows are
        confirmed or refused, or after `wait_timeout` seconds (default 30, at most 300), or at
        once with `no_wait`. A request without a request_id is given a fresh UUID, which the
        retries of this call reuse: a retry never books twice."""
        batch = pb.CreateReservationsRequest(all_or_nothing=all_or_nothing, validate_only=validate_only,
                                             no_wait=no_wait)
        for request in requests:
            added = batch.requests.add()
            added.CopyFrom(request)
            if not added.request_id:
                added.request_id = str(uuid.uuid4())
        if wait_timeout is not None:
            seconds = math.floor(wait_timeout)
            batch.wait_timeout.CopyFrom(Duration(seconds=seconds, nanos=round((wait_timeout - seconds) * 1e9)))
        waits = 0.0 if no_wait else 30.0 if wait_timeout is None else wait_timeout
        return self._call(lambda s: s.bandwidth.CreateReservations, batch, timeout=self.timeout + waits)

    def get_reservation(self, name: str) -> pb.Reservation:
        """The reservation `reservations/{id}`."""
        return self._call(lambda s: s.bandwidth.GetReservation, pb.GetReservationRequest(name=_name(name)))

    def list_reservations(self, state: str | None = None, dtn: str = "", owner: str = "",
                          page_size: int = 0) -> Iterator[pb.Reservation]:
        """Every reservation the caller may see (newest first), fetching page after page."""
        token = ""
        while True:
            page = self._call(lambda s: s.bandwidth.ListReservations, pb.ListReservationsRequest(
                state=STATES[state] if state else 0, dtn=dtn, owner=owner, page_size=page_size, page_token=token))
            yield from page.reservations
            token = page.next_page_token
            if not token:
                return

    def modify_reservation(self, name: str, bandwidth_bps: int | None = None, end: float | None = None,
                           validate_only: bool = False, move: bool = False, policy: str = "shortest",
                           include: Sequence[str] = (), exclude: Sequence[str] = (),
                           max_hops: int | None = None, priority: int | None = None,
                           ceiling_bps: int | None = None) -> pb.Reservation:
        """Change bandwidth, end time (`math.inf`: until released), priority, an elastic one's
        ceiling and/or `move` to a new path computed with `policy`, `include`, `exclude` and `max_hops`."""
        request = pb.ModifyReservationRequest(name=_name(name), validate_only=validate_only, priority=priority,
                                              ceiling_bps=ceiling_bps)
        if move:
            request.path.CopyFrom(pb.PathConstraints(policy=POLICIES[policy], include=include, exclude=exclude,
                                                     max_hops=max_hops))
        if bandwidth_bps is not None:
            request.bandwidth_bps = bandwidth_bps
        if end is not None:
            if math.isinf(end):
                request.until_released = True
            else:
                request.end_time.CopyFrom(timestamp_out(end))
        return self._call(lambda s: s.bandwidth.ModifyReservation, request)

    def commit_reservation(self, name: str) -> pb.Reservation:
        """Commit a HELD reservation."""
        return self._call(lambda s: s.bandwidth.CommitReservation, pb.ReservationRequest(name=_name(name)))

    def abort_reservation(self, name: str) -> pb.Reservation:
        """Abort a HELD reservation, freeing its booking."""
        return self._call(lambda s: s.bandwidth.AbortReservation, pb.ReservationRequest(name=_name(name)))

    def provision_reservation(self, name: str) -> pb.Reservation:
        """Want a reservation's flows (now in its window, else at its start)."""
        return self._call(lambda s: s.bandwidth.ProvisionReservation, pb.ReservationRequest(name=_name(name)))

    def unprovision_reservation(self, name: str) -> pb.Reservation:
        """Remove a reservation's flows and keep its booking (NSI's release)."""
        return self._call(lambda s: s.bandwidth.UnprovisionReservation, pb.ReservationRequest(name=_name(name)))

    def delete_reservation(self, name: str) -> pb.Reservation:
        """Release a reservation; returns it in its final state."""
        return self._call(lambda s: s.bandwidth.DeleteReservation, pb.DeleteReservationRequest(name=_name(name)))

    def query_availability(self, src: str, dst: str, *, start: float | None = None, end: float | None = None,
                           duration: float | None = None, policy: str = "widest", include: Sequence[str] = (),
                           exclude: Sequence[str] = (), max_hops: int | None = None,
                           max_paths: int = 3, size_bytes: int = 0) -> pb.QueryAvailabilityResponse:
        """Largest bookable bandwidth between two DTNs in a window, and candidate paths; with
        `size_bytes`, also by when that many bytes could get there, and the schedule."""
        request = pb.QueryAvailabilityRequest(source_dtn=src, destination_dtn=dst, policy=POLICIES[policy],
                                              include=list(include), exclude=list(exclude), max_paths=max_paths,
                                              size_bytes=size_bytes)
        _set_window(request, start, end, duration)
        if max_hops is not None:
            request.max_hops = max_hops
        return self._call(lambda s: s.bandwidth.QueryAvailability, request)

    def watch(self, name: str = "", include_existing: bool = False,
              timeout: float | None = None) -> Iterator[pb.ReservationEvent]:
        """Stream reservation events until the server ends it, `timeout` passes, or the caller stops."""
        request = pb.WatchReservationsRequest(name=_name(name) if name else "", include_existing=include_existing)
        yield from self._stream(lambda s: s.bandwidth.WatchReservations, request, timeout)

    def _stream(self, pick: Callable[[_Stubs], Callable[..., Any]], request: Any, timeout: float | None) -> Iterator:
        """The messages of a server stream; ends quietly when cancelled, ApiError on other errors
        (after UNAVAILABLE, the next stream goes to the leader named or the next address)."""
        for redirect in range(MAX_REDIRECTS + 1):
            stream = pick(self._stubs())(request, timeout=timeout, metadata=self._metadata)
            received = False
            try:
                for message in stream:
                    received = True
                    yield message
                return
            except grpc.RpcError as error:
                code = error.code()
                if code is grpc.StatusCode.CANCELLED:
                    return
                if code is grpc.StatusCode.UNAVAILABLE and self._unavailable(error) and not received \
                        and redirect < MAX_REDIRECTS:
                    continue  # a follower named the leader before anything was streamed: open it there
                raise ApiError(code, error.details() or code.name) from None
            finally:
                stream.cancel()

    # -- TopologyService -----------------------------------------------------------------

    def get_topology(self) -> topo_pb.Topology:
        """The controller's topology with bandwidth booked now."""
        return self._call(lambda s: s.topology.GetTopology, topo_pb.GetTopologyRequest())

    def get_topology_status(self) -> topo_pb.TopologyStatus:
        """The real network against the topology: switch connections, link states, wiring mismatches."""
        return self._call(lambda s: s.topology.GetTopologyStatus, topo_pb.GetTopologyStatusRequest())

    # -- AgentService --------------------------------------------------------------------

    def register_agent(self, dtn: str, facts: agent_pb.HostFacts) -> agent_pb.Agent:
        """Register this host as the agent of DTN `dtn` (again: replaces its facts)."""
        return self._call(lambda s: s.agents.RegisterAgent, agent_pb.RegisterAgentRequest(dtn=dtn, facts=facts))

    def heartbeat(self, dtn: str) -> agent_pb.Agent:
        """Tell the controller the agent of `dtn` is alive (NOT_FOUND: register again)."""
        return self._call(lambda s: s.agents.Heartbeat, agent_pb.HeartbeatRequest(dtn=dtn))

    def list_agents(self) -> list[agent_pb.Agent]:
        """Every agent the controller knows, by DTN."""
        return list(self._call(lambda s: s.agents.ListAgents, agent_pb.ListAgentsRequest()).agents)

    def get_agent(self, name: str) -> agent_pb.Agent:
        """The agent `agents/{dtn}` (or of DTN `name`)."""
        return self._call(lambda s: s.agents.GetAgent, agent_pb.GetAgentRequest(name=name))

    def watch_agents(self, include_existing: bool = False,
                     timeout: float | None = None) -> Iterator[agent_pb.AgentEvent]:
        """Stream agent events until the server ends it, `timeout` passes, or the caller stops."""
        request = agent_pb.WatchAgentsRequest(include_existing=include_existing)
        yield from self._stream(lambda s: s.agents.WatchAgents, request, timeout)

    def take_jobs(self, dtn: str, timeout: float | None = None) -> Iterator[agent_pb.TransferJob]:
        """Stream the transfer jobs for DTN `dtn` (pending ones first) until the caller stops."""
        yield from self._stream(lambda s: s.agents.TakeJobs, agent_pb.TakeJobsRequest(dtn=dtn), timeout)

    def report_transfer(self, report: agent_pb.TransferReport) -> agent_pb.ReportTransferResponse:
        """One side's news of a transfer (listening, a rate, its end); the answer says whether to stop."""
        return self._call(lambda s: s.agents.ReportTransfer, report)

    # -- TransferService -----------------------------------------------------------------

    def start_transfer(self, src: str, dst: str, bandwidth_bps: int, *, size: int | None = None,
                       files: Sequence[str] = (), destination: str = "", streams: int = 1,
                       engine: str = "builtin", policy: str = "shortest",
                       request_id: str | None = None, pace: int | None = None,
                       deadline: float | None = None, ceiling_bps: int = 0,
                       priority: int = 0) -> transfer_pb.Transfer:
        """Book a path and start a transfer of `size` bytes (memory-to-memory) or of `files`
        (absolute paths on `src`) into `destination` (a directory on `dst`); `pace` (bit/s, below
        `bandwidth_bps`) holds the sender under its booking, as a slow disk would. With a
        `deadline` (epoch seconds; `bandwidth_bps` 0, `size` given) the controller schedules the
        bandwidth so that the bytes arrive by then. With `ceiling_bps` it is elastic: `bandwidth_bps`
        is its floor and it shares spare capacity up to the ceiling by `priority` (0: the caller's)."""
        request = transfer_pb.StartTransferRequest(
            src_dtn=src, dst_dtn=dst, bandwidth_bps=bandwidth_bps, destination=destination, streams=streams,
            engine=engine, policy=POLICIES[policy], request_id=request_id or str(uuid.uuid4()), pace_bps=pace or 0,
            ceiling_bps=ceiling_bps, priority=priority)
        if deadline is not None:
            request.deadline.CopyFrom(timestamp_out(deadline))
        if size is not None:
            request.size_bytes = size
        if files:
            request.files.paths.extend(files)
        return self._call(lambda s: s.transfers.StartTransfer, request)

    def get_transfer(self, name: str) -> transfer_pb.Transfer:
        """The transfer `transfers/{id}`."""
        return self._call(lambda s: s.transfers.GetTransfer, transfer_pb.GetTransferRequest(name=_transfer(name)))

    def list_transfers(self) -> list[transfer_pb.Transfer]:
        """The transfers the caller may see, newest first."""
        return list(self._call(lambda s: s.transfers.ListTransfers, transfer_pb.ListTransfersRequest()).transfers)

    def cancel_transfer(self, name: str) -> transfer_pb.Transfer:
        """Stop a transfer and release its path."""
        return self._call(lambda s: s.transfers.CancelTransfer, transfer_pb.CancelTransferRequest(name=_transfer(name)))

    def watch_transfer(self, name: str, timeout: float | None = None) -> Iterator[transfer_pb.TransferEvent]:
        """A snapshot, then the transfer's changes and rates, until it ends (or `timeout` passes)."""
        request = transfer_pb.WatchTransferRequest(name=_transfer(name))
        yield from self._stream(lambda s: s.transfers.WatchTransfer, request, timeout)


def reservation_request(src: str, dst: str, bandwidth_bps: int, *, start: float | None = None,
                        end: float | None = None, duration: float | None = None, policy: str = "shortest",
                        include: Sequence[str] = (), exclude: Sequence[str] = (), max_hops: int | None = None,
                        protect: bool = False, labels: Mapping[str, str] | None = None, request_id: str | None = None,
                        validate_only: bool = False, hold: bool = False, manual_provision: bool = False,
                        priority: int = 0, ceiling_bps: int = 0, src_prefix: str = "",
                        dst_prefix: str = "") -> pb.CreateReservationRequest:
    """The CreateReservationRequest of `TsdnClient.create_reservation`'s arguments (also one
    request of a `create_reservations` batch); `request_id` defaults to a fresh UUID."""
    request = pb.CreateReservationRequest(
        source_dtn=src, destination_dtn=dst, bandwidth_bps=bandwidth_bps, policy=POLICIES[policy],
        include=list(include), exclude=list(exclude), protect=protect, labels=dict(labels or {}),
        request_id=request_id or str(uuid.uuid4()), validate_only=validate_only, hold=hold,
        manual_provision=manual_provision, priority=priority, ceiling_bps=ceiling_bps,
        src_prefix=src_prefix, dst_prefix=dst_prefix,
    )
    _set_window(request, start, end, duration)
    if max_hops is not None:
        request.max_hops = max_hops
    return request


def _name(name: str) -> str:
    return name if name.startswith("reservations/") else f"reservations/{name}"


def _transfer(name: str) -> str:
    return name if name.startswith("transfers/") else f"transfers/{name}"


def _set_window(request: Any, start: float | None, end: float | None, duration: float | None) -> None:
    if end is not None and duration is not None:
        raise ValueError("give end or duration, not both")
    if start is not None:
        request.start_time.CopyFrom(timestamp_out(start))
    if end is not None and not math.isinf(end):
        request.end_time.CopyFrom(timestamp_out(end))
    elif duration is not None:
        seconds = math.floor(duration)
        request.duration.CopyFrom(Duration(seconds=seconds, nanos=round((duration - seconds) * 1e9)))
