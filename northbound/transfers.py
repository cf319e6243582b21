"""tsdn.v1.TransferService, and the messages of transfers, jobs and rate reports.

The servicer runs `TransferDesk` methods on the `CoreWorker` thread; the desk is ticked by the
worker and publishes its transfer events and job offers on its own hub.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator

from dtn_agent.reports import MAX_STREAMS_REPORTED, Pinning, RateReport, StreamRate
from northbound import convert
from northbound.proto.tsdn.v1 import agent_pb2 as agent_pb
from northbound.proto.tsdn.v1 import transfer_pb2 as pb
from northbound.proto.tsdn.v1 import transfer_pb2_grpc as pb_grpc
from northbound.servicers import _Base, rpc
from sdn_app.core import validation
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.reservations import Principal
from sdn_app.core.transfers import (
    MAX_FILES,
    Job,
    JobRole,
    Transfer,
    TransferDesk,
    TransferEvent,
    TransferSpec,
    TransferState,
)
from sdn_app.worker import transfer_topic

ENDED = {pb.TRANSFER_SUCCEEDED, pb.TRANSFER_FAILED, pb.TRANSFER_CANCELLED}
_ROLES = {JobRole.RECEIVE: agent_pb.RECEIVE, JobRole.SEND: agent_pb.SEND, JobRole.STOP: agent_pb.STOP}


def role_in(value: int) -> JobRole:
    """The core's side of a `TransferRole` (RECEIVE or SEND)."""
    for role, number in _ROLES.items():
        if number == value and role is not JobRole.STOP:
            return role
    raise InvalidArgument("role: RECEIVE or SEND")


def rate_in(message: agent_pb.RateReport, transfer: str, what: str = "rate") -> RateReport:
    """The `RateReport` an agent sent, checked by `RateReport.check` (finite numbers within their
    ranges, an end not before the start, bounded lists and texts); errors name `what.field`."""
    validation.entries(message.streams, f"{what}.streams", MAX_STREAMS_REPORTED)
    validation.entries(message.pinning.cpus, f"{what}.pinning.cpus", validation.MAX_LIST)
    streams = tuple(StreamRate(s.stream, s.bits_per_second, s.bytes_total,
                               s.retransmits if s.HasField("retransmits") else None,
                               s.rtt_ms if s.HasField("rtt_ms") else None) for s in message.streams)
    pin = message.pinning
    report = RateReport(
        transfer_id=transfer.removeprefix("transfers/"), engine=message.engine, start=message.start, end=message.end,
        bits_per_second=message.bits_per_second, bytes_total=message.bytes_total,
        streams=streams, retransmits=message.retransmits if message.HasField("retransmits") else None,
        rtt_ms=message.rtt_ms if message.HasField("rtt_ms") else None,
        cpu_percent=message.cpu_percent if message.HasField("cpu_percent") else None,
        pinning=Pinning(tuple(pin.cpus), pin.numa_node if pin.HasField("numa_node") else None,
                        pin.method or "none", pin.note),
        final=message.final)
    report.check(what)
    return report


def rate_out(report: RateReport) -> agent_pb.RateReport:
    """The message of a `RateReport`."""
    message = agent_pb.RateReport(start=report.start, end=report.end, bits_per_second=report.bits_per_second,
                                  bytes_total=report.bytes_total, final=report.final, engine=report.engine,
                                  pinning=agent_pb.Pinning(cpus=report.pinning.cpus, method=report.pinning.method,
                                                           note=report.pinning.note))
    if report.pinning.numa_node is not None:
        message.pinning.numa_node = report.pinning.numa_node
    for field in ("retransmits", "rtt_ms", "cpu_percent"):
        if (value := getattr(report, field)) is not None:
            setattr(message, field, value)
    for s in report.streams:
        entry = agent_pb.StreamRate(stream=s.stream, bits_per_second=s.bits_per_second, bytes_total=s.bytes_total)
        if s.retransmits is not None:
            entry.retransmits = s.retransmits
        if s.rtt_ms is not None:
            entry.rtt_ms = s.rtt_ms
        message.streams.append(entry)
    return message


def job_out(job: Job) -> agent_pb.TransferJob:
    """The message of a job for an agent."""
    spec = job.spec
    message = agent_pb.TransferJob(transfer=job.transfer, role=_ROLES[job.role], engine=spec.engine,
                                   streams=spec.streams, files=spec.files, destination=spec.destination,
                                   peer_host=job.peer_host, peer_port=job.peer_port, reservation=job.reservation)
    if spec.size is not None:
        message.size_bytes = spec.size
    if job.pacing_bps is not None:
        message.pacing_bps = job.pacing_bps
    return message


def spec_in(request: pb.StartTransferRequest) -> TransferSpec:
    """The core's `TransferSpec` of a StartTransferRequest: lengths and sizes checked here, the
    rest by the desk."""
    convert.name_in(request.src_dtn, "src_dtn", required=True)
    convert.name_in(request.dst_dtn, "dst_dtn", required=True)
    convert.name_in(request.engine, "engine")
    validation.text(request.destination, "destination", validation.MAX_PATH)
    which = request.WhichOneof("payload")
    files: tuple[str, ...] = ()
    if which == "size_bytes":
        validation.whole(request.size_bytes, "size_bytes", 0, validation.MAX_COUNT)  # 0: the desk says why
    elif which == "files":
        files = validation.texts(request.files.paths, "files.paths", MAX_FILES, validation.MAX_PATH)
    return TransferSpec(
        src=request.src_dtn, dst=request.dst_dtn, bandwidth=convert.bandwidth_in(request.bandwidth_bps),
        size=request.size_bytes if which == "size_bytes" else None,
        files=files, destination=request.destination,
        streams=request.streams or 1, engine=request.engine or "builtin", policy=convert.policy_in(request.policy),
        pace=convert.bandwidth_in(request.pace_bps, "pace_bps") if request.pace_bps else None)


def state_out(state: TransferState | None) -> int:
    """The enum value of a transfer state (UNSPECIFIED for None)."""
    return pb.TransferState.Value(f"TRANSFER_{state.value}") if state is not None else 0


def transfer_out(transfer: Transfer, scale: float, path: tuple[str, ...] = ()) -> pb.Transfer:
    """The message of a transfer whose rates were measured at emulation `scale`; `path`: the
    switches its reservation crosses now."""
    spec = transfer.spec
    message = pb.Transfer(
        name=transfer.name, owner=transfer.owner, src_dtn=spec.src, dst_dtn=spec.dst, bandwidth_bps=spec.bandwidth,
        files=spec.files, destination=spec.destination, streams=spec.streams, engine=spec.engine,
        state=state_out(transfer.state), reason=transfer.reason,
        reservation=f"reservations/{transfer.reservation_id}",
        create_time=convert.timestamp_out(transfer.created), update_time=convert.timestamp_out(transfer.updated),
        path=path)
    if spec.size is not None:
        message.size_bytes = spec.size
    if spec.pace is not None:
        message.pace_bps = spec.pace
    if transfer.rate is not None:
        message.rate.CopyFrom(rate_out(transfer.rate))
        message.nominal_bps = transfer.rate.bits_per_second / scale
    if transfer.receiver_rate is not None:
        message.receiver_rate.CopyFrom(rate_out(transfer.receiver_rate))
    if transfer.checksums_verified is not None:
        message.checksums_verified = transfer.checksums_verified
    return message


class TransferServicer(_Base, pb_grpc.TransferServiceServicer):
    """tsdn.v1.TransferService over the desk, which the worker owns and ticks."""

    def __init__(self, worker, auth, desk: TransferDesk):
        super().__init__(worker, auth)
        self.desk = desk

    def _out(self, transfer: Transfer) -> pb.Transfer:
        """On the worker thread: the message, with the switches of the reservation's path now."""
        return transfer_out(transfer, self.desk.emulation_scale, self.desk.path(transfer))

    @rpc
    def StartTransfer(self, request: pb.StartTransferRequest, context, principal: Principal):
        spec = spec_in(request)
        return self.worker.call(lambda: self._out(self.desk.start(principal, spec, request.request_id)))

    @rpc
    def GetTransfer(self, request: pb.GetTransferRequest, context, principal: Principal):
        convert.name_in(request.name)
        return self.worker.call(lambda: self._out(self.desk.get(principal, request.name)))

    @rpc
    def ListTransfers(self, request: pb.ListTransfersRequest, context, principal: Principal):
        return self.worker.call(lambda: pb.ListTransfersResponse(
            transfers=[self._out(t) for t in self.desk.list(principal)]))

    @rpc
    def CancelTransfer(self, request: pb.CancelTransferRequest, context, principal: Principal):
        convert.name_in(request.name)
        return self.worker.call(lambda: self._out(self.desk.cancel(principal, request.name)))

    async def WatchTransfer(self, request: pb.WatchTransferRequest, context) -> AsyncIterator[pb.TransferEvent]:
        hub = self.worker.hub_for(self.desk)

        def subscribe(principal: Principal):
            transfer = self.desk.get(principal, request.name)
            wanted = transfer.id
            return (hub.subscribe(lambda e: isinstance(e, TransferEvent) and e.transfer.id == wanted,
                                  transfer_topic(wanted)),
                    self._out(transfer))

        def first(now: pb.Transfer) -> Generator[pb.TransferEvent, None, bool]:
            yield pb.TransferEvent(previous_state=now.state, state=now.state, reason="snapshot", transfer=now)
            return now.state in ENDED  # watched after it ended: the snapshot says how

        def event_out(event: TransferEvent) -> pb.TransferEvent:
            return pb.TransferEvent(previous_state=state_out(event.previous), state=state_out(event.state),
                                    reason=event.reason,
                                    transfer=transfer_out(event.transfer, self.desk.emulation_scale, event.path),
                                    time=convert.timestamp_out(event.time))
        async for message in self.stream(context, hub, subscribe, first, event_out, lambda e: e.state.ended):
            yield message

