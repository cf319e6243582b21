"""A typed Python client of the tsdn northbound API, for services and the `tsdn` CLI.

    with TsdnClient("127.0.0.1:50051", token=token) as tsdn:
        r = tsdn.create_reservation("caltech-a-dtn1", "starlight-dtn1", 400 * 10**9, duration=3600)
        ...
        tsdn.delete_reservation(r.name)

Every call has a deadline. Calls are retried with exponential backoff while the controller is
UNAVAILABLE (restarting, say); CreateReservation is retried with the same `request_id`, so a
retry never books twice. Failures raise `ApiError` with the status code and the server's message.
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
        """Connect to `target`; TLS when `tls_ca` is given (with a client certificate when `tls_cert`)."""
        if tls_ca is None and tls_cert is None:
            self._channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        else:
            credentials = grpc.ssl_channel_credentials(root_certificates=tls_ca, private_key=tls_key,
                                                       certificate_chain=tls_cert)
            self._channel = grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._bandwidth = pb_grpc.BandwidthServiceStub(self._channel)
        self._topology = topo_grpc.TopologyServiceStub(self._channel)
        self._agents = agent_grpc.AgentServiceStub(self._channel)
        self._transfers = transfer_grpc.TransferServiceStub(self._channel)

    def __enter__(self) -> TsdnClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        self._channel.close()

    def _call(self, method: Callable[..., T], request: Any) -> T:
        attempt = 0
        while True:
            try:
                return method(request, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as error:
                code = error.code()
                if code is grpc.StatusCode.UNAVAILABLE and attempt < self.retries:
                    time.sleep(self.backoff * (2**attempt) * random.uniform(0.5, 1.0))
                    attempt += 1
                    continue
                raise ApiError(code, error.details() or code.name) from None

    # -- BandwidthService ----------------------------------------------------------------

    def create_reservation(self, src: str, dst: str, bandwidth_bps: int, *, start: float | None = None,
                           end: float | None = None, duration: float | None = None, policy: str = "shortest",
                           include: Sequence[str] = (), exclude: Sequence[str] = (), max_hops: int | None = None,
                           protect: bool = False, labels: Mapping[str, str] | None = None,
                           request_id: str | None = None, validate_only: bool = False) -> pb.Reservation:
        """Reserve bandwidth from DTN `src` to DTN `dst` (times in epoch seconds; no end: until released).

        `request_id` defaults to a fresh UUID that every retry of this call reuses.
        """
        request = pb.CreateReservationRequest(
            source_dtn=src, destination_dtn=dst, bandwidth_bps=bandwidth_bps, policy=POLICIES[policy],
            include=list(include), exclude=list(exclude), protect=protect, labels=dict(labels or {}),
            request_id=request_id or str(uuid.uuid4()), validate_only=validate_only,
        )
        _set_window(request, start, end, duration)
        if max_hops is not None:
            request.max_hops = max_hops
        return self._call(self._bandwidth.CreateReservation, request)

    def get_reservation(self, name: str) -> pb.Reservation:
        """The reservation `reservations/{id}`."""
        return self._call(self._bandwidth.GetReservation, pb.GetReservationRequest(name=_name(name)))

    def list_reservations(self, state: str | None = None, dtn: str = "", owner: str = "",
                          page_size: int = 0) -> Iterator[pb.Reservation]:
        """Every reservation the caller may see (newest first), fetching page after page."""
        token = ""
        while True:
            page = self._call(self._bandwidth.ListReservations, pb.ListReservationsRequest(
                state=STATES[state] if state else 0, dtn=dtn, owner=owner, page_size=page_size, page_token=token))
            yield from page.reservations
            token = page.next_page_token
            if not token:
                return

    def modify_reservation(self, name: str, bandwidth_bps: int | None = None, end: float | None = None,
                           validate_only: bool = False, move: bool = False, policy: str = "shortest",
                           include: Sequence[str] = (), exclude: Sequence[str] = (),
                           max_hops: int | None = None) -> pb.Reservation:
        """Change bandwidth, end time (`math.inf`: until released) and/or `move` to a new path
        computed with `policy`, `include`, `exclude` and `max_hops`."""
        request = pb.ModifyReservationRequest(name=_name(name), validate_only=validate_only)
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
        return self._call(self._bandwidth.ModifyReservation, request)

    def delete_reservation(self, name: str) -> pb.Reservation:
        """Release a reservation; returns it in its final state."""
        return self._call(self._bandwidth.DeleteReservation, pb.DeleteReservationRequest(name=_name(name)))

    def query_availability(self, src: str, dst: str, *, start: float | None = None, end: float | None = None,
                           duration: float | None = None, policy: str = "widest", include: Sequence[str] = (),
                           exclude: Sequence[str] = (), max_hops: int | None = None,
                           max_paths: int = 3) -> pb.QueryAvailabilityResponse:
        """Largest bookable bandwidth between two DTNs in a window, and candidate paths."""
        request = pb.QueryAvailabilityRequest(source_dtn=src, destination_dtn=dst, policy=POLICIES[policy],
                                              include=list(include), exclude=list(exclude), max_paths=max_paths)
        _set_window(request, start, end, duration)
        if max_hops is not None:
            request.max_hops = max_hops
        return self._call(self._bandwidth.QueryAvailability, request)

    def watch(self, name: str = "", include_existing: bool = False,
              timeout: float | None = None) -> Iterator[pb.ReservationEvent]:
        """Stream reservation events until the server ends it, `timeout` passes, or the caller stops."""
        request = pb.WatchReservationsRequest(name=_name(name) if name else "", include_existing=include_existing)
        yield from self._stream(self._bandwidth.WatchReservations, request, timeout)

    def _stream(self, method, request, timeout: float | None) -> Iterator:
        """The messages of a server stream; ends quietly when cancelled, ApiError on other errors."""
        stream = method(request, timeout=timeout, metadata=self._metadata)
        try:
            yield from stream
        except grpc.RpcError as error:
            if error.code() is not grpc.StatusCode.CANCELLED:
                raise ApiError(error.code(), error.details() or error.code().name) from None
        finally:
            stream.cancel()

    # -- TopologyService -----------------------------------------------------------------

    def get_topology(self) -> topo_pb.Topology:
        """The controller's topology with bandwidth booked now."""
        return self._call(self._topology.GetTopology, topo_pb.GetTopologyRequest())

    def get_topology_status(self) -> topo_pb.TopologyStatus:
        """The real network against the topology: switch connections, link states, wiring mismatches."""
        return self._call(self._topology.GetTopologyStatus, topo_pb.GetTopologyStatusRequest())

    # -- AgentService --------------------------------------------------------------------

    def register_agent(self, dtn: str, facts: agent_pb.HostFacts) -> agent_pb.Agent:
        """Register this host as the agent of DTN `dtn` (again: replaces its facts)."""
        return self._call(self._agents.RegisterAgent, agent_pb.RegisterAgentRequest(dtn=dtn, facts=facts))

    def heartbeat(self, dtn: str) -> agent_pb.Agent:
        """Tell the controller the agent of `dtn` is alive (NOT_FOUND: register again)."""
        return self._call(self._agents.Heartbeat, agent_pb.HeartbeatRequest(dtn=dtn))

    def list_agents(self) -> list[agent_pb.Agent]:
        """Every agent the controller knows, by DTN."""
        return list(self._call(self._agents.ListAgents, agent_pb.ListAgentsRequest()).agents)

    def get_agent(self, name: str) -> agent_pb.Agent:
        """The agent `agents/{dtn}` (or of DTN `name`)."""
        return self._call(self._agents.GetAgent, agent_pb.GetAgentRequest(name=name))

    def watch_agents(self, include_existing: bool = False,
                     timeout: float | None = None) -> Iterator[agent_pb.AgentEvent]:
        """Stream agent events until the server ends it, `timeout` passes, or the caller stops."""
        request = agent_pb.WatchAgentsRequest(include_existing=include_existing)
        yield from self._stream(self._agents.WatchAgents, request, timeout)

    def take_jobs(self, dtn: str, timeout: float | None = None) -> Iterator[agent_pb.TransferJob]:
        """Stream the transfer jobs for DTN `dtn` (pending ones first) until the caller stops."""
        yield from self._stream(self._agents.TakeJobs, agent_pb.TakeJobsRequest(dtn=dtn), timeout)

    def report_transfer(self, report: agent_pb.TransferReport) -> agent_pb.ReportTransferResponse:
        """One side's news of a transfer (listening, a rate, its end); the answer says whether to stop."""
        return self._call(self._agents.ReportTransfer, report)

    # -- TransferService -----------------------------------------------------------------

    def start_transfer(self, src: str, dst: str, bandwidth_bps: int, *, size: int | None = None,
                       files: Sequence[str] = (), destination: str = "", streams: int = 1,
                       engine: str = "builtin", policy: str = "shortest",
                       request_id: str | None = None, pace: int | None = None) -> transfer_pb.Transfer:
        """Book a path and start a transfer of `size` bytes (memory-to-memory) or of `files`
        (absolute paths on `src`) into `destination` (a directory on `dst`); `pace` (bit/s, below
        `bandwidth_bps`) holds the sender under its booking, as a slow disk would."""
        request = transfer_pb.StartTransferRequest(
            src_dtn=src, dst_dtn=dst, bandwidth_bps=bandwidth_bps, destination=destination, streams=streams,
            engine=engine, policy=POLICIES[policy], request_id=request_id or str(uuid.uuid4()), pace_bps=pace or 0)
        if size is not None:
            request.size_bytes = size
        if files:
            request.files.paths.extend(files)
        return self._call(self._transfers.StartTransfer, request)

    def get_transfer(self, name: str) -> transfer_pb.Transfer:
        """The transfer `transfers/{id}`."""
        return self._call(self._transfers.GetTransfer, transfer_pb.GetTransferRequest(name=_transfer(name)))

    def list_transfers(self) -> list[transfer_pb.Transfer]:
        """The transfers the caller may see, newest first."""
        return list(self._call(self._transfers.ListTransfers, transfer_pb.ListTransfersRequest()).transfers)

    def cancel_transfer(self, name: str) -> transfer_pb.Transfer:
        """Stop a transfer and release its path."""
        return self._call(self._transfers.CancelTransfer, transfer_pb.CancelTransferRequest(name=_transfer(name)))

    def watch_transfer(self, name: str, timeout: float | None = None) -> Iterator[transfer_pb.TransferEvent]:
        """A snapshot, then the transfer's changes and rates, until it ends (or `timeout` passes)."""
        request = transfer_pb.WatchTransferRequest(name=_transfer(name))
        yield from self._stream(self._transfers.WatchTransfer, request, timeout)


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
