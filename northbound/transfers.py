"""tsdn.v1.TransferService, and the messages of transfers, jobs and rate reports.

The servicer runs `TransferDesk` methods on the `CoreWorker` thread; the desk is ticked by the
worker and publishes its transfer events and job offers on its own hub.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator

from northbound import convert
from northbound.convert import rate_out
from northbound.proto.tsdn.v1 import agent_pb2 as agent_pb
from northbound.proto.tsdn.v1 import transfer_pb2 as pb
from northbound.proto.tsdn.v1 import transfer_pb2_grpc as pb_grpc
from northbound.servicers import _Base, rpc
from sdn_app.core import validation
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.reservation import Principal
from sdn_app.core.transfers import (
    MAX_FILES,
    SIDES,
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
_ROLES = {JobRole.RECEIVE: agent_pb.RECEIVE, JobRole.SEND: agent_pb.SEND, JobRole.STOP: agent_pb.STOP,
          JobRole.PACE: agent_pb.PACE}


def role_in(value: int) -> JobRole:
    """The core's side of a `TransferRole` (RECEIVE or SEND: the roles a report may have)."""
    for role, number in _ROLES.items():
        if number == value and role in SIDES:
            return role
    raise InvalidArgument("role: RECEIVE or SEND")


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
    rest by the desk (a deadline in the past too: it knows the time)."""
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
    deadline = convert.timestamp_in(request.deadline, "deadline") if request.HasField("deadline") else None
    return TransferSpec(
        src=request.src_dtn, dst=request.dst_dtn, deadline=deadline,  # with a deadline 0 (the desk says why not)
        bandwidth=convert.bandwidth_in(request.bandwidth_bps) if deadline is None or request.bandwidth_bps else 0,
        size=request.size_bytes if which == "size_bytes" else None,
        files=files, destination=request.destination,
        streams=request.streams or 1, engine=request.engine or "builtin", policy=convert.policy_in(request.policy),
        pace=convert.bandwidth_in(request.pace_bps, "pace_bps") if request.pace_bps else None,
        ceiling=convert.bandwidth_in(request.ceiling_bps, "ceiling_bps") if request.ceiling_bps else 0,
        priority=request.priority)


def state_out(state: TransferState | None) -> int:
    """The enum value of a transfer state (UNSPECIFIED for None)."""
    return pb.TransferState.Value(f"TRANSFER_{state.value}") if state is not None else 0


def transfer_out(transfer: Transfer, scale: float, path: tuple[str, ...] = ()) -> pb.Transfer:
    """The message of a transfer whose rates were measured at emulation `scale`; `path`: the
    switches its reservation crosses now."""
    spec = transfer.spec
    message = pb.Transfer(
        name=transfer.name, owner=transfer.owner, src_dtn=spec.src, dst_dtn=spec.dst,
        bandwidth_bps=transfer.bandwidth,
        files=spec.files, destination=spec.destination, streams=spec.streams, engine=spec.engine,
        state=state_out(transfer.state), reason=transfer.reason,
        reservation=f"reservations/{transfer.reservation_id}",
        create_time=convert.timestamp_out(transfer.created), update_time=convert.timestamp_out(transfer.updated),
        path=path)
    if spec.size is not None:
        message.size_bytes = spec.size
    if spec.pace is not None:
        message.pace_bps = spec.pace
    if spec.deadline is not None:
        message.deadline.CopyFrom(convert.timestamp_out(spec.deadline))
    if transfer.projected_finish is not None:
        message.projected_finish_time.CopyFrom(convert.timestamp_out(transfer.projected_finish))
    message.schedule.extend(convert.schedule_out(transfer.schedule))
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

