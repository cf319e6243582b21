import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from northbound.proto.tsdn.v1 import agent_pb2 as _agent_pb2
from northbound.proto.tsdn.v1 import bandwidth_pb2 as _bandwidth_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransferState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSFER_STATE_UNSPECIFIED: _ClassVar[TransferState]
    TRANSFER_RESERVING: _ClassVar[TransferState]
    TRANSFER_STARTING: _ClassVar[TransferState]
    TRANSFER_RUNNING: _ClassVar[TransferState]
    TRANSFER_SUCCEEDED: _ClassVar[TransferState]
    TRANSFER_FAILED: _ClassVar[TransferState]
    TRANSFER_CANCELLED: _ClassVar[TransferState]
TRANSFER_STATE_UNSPECIFIED: TransferState
TRANSFER_RESERVING: TransferState
TRANSFER_STARTING: TransferState
TRANSFER_RUNNING: TransferState
TRANSFER_SUCCEEDED: TransferState
TRANSFER_FAILED: TransferState
TRANSFER_CANCELLED: TransferState

class FileList(_message.Message):
    __slots__ = ("paths",)
    PATHS_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, paths: _Optional[_Iterable[str]] = ...) -> None: ...

class StartTransferRequest(_message.Message):
    __slots__ = ("src_dtn", "dst_dtn", "bandwidth_bps", "size_bytes", "files", "destination", "streams", "engine", "policy", "request_id", "pace_bps", "deadline", "ceiling_bps", "priority")
    SRC_DTN_FIELD_NUMBER: _ClassVar[int]
    DST_DTN_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BPS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PACE_BPS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    CEILING_BPS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    src_dtn: str
    dst_dtn: str
    bandwidth_bps: int
    size_bytes: int
    files: FileList
    destination: str
    streams: int
    engine: str
    policy: _bandwidth_pb2.PathPolicy
    request_id: str
    pace_bps: int
    deadline: _timestamp_pb2.Timestamp
    ceiling_bps: int
    priority: int
    def __init__(self, src_dtn: _Optional[str] = ..., dst_dtn: _Optional[str] = ..., bandwidth_bps: _Optional[int] = ..., size_bytes: _Optional[int] = ..., files: _Optional[_Union[FileList, _Mapping]] = ..., destination: _Optional[str] = ..., streams: _Optional[int] = ..., engine: _Optional[str] = ..., policy: _Optional[_Union[_bandwidth_pb2.PathPolicy, str]] = ..., request_id: _Optional[str] = ..., pace_bps: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ceiling_bps: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class Transfer(_message.Message):
    __slots__ = ("name", "owner", "src_dtn", "dst_dtn", "bandwidth_bps", "size_bytes", "files", "destination", "streams", "engine", "state", "reason", "reservation", "create_time", "update_time", "rate", "receiver_rate", "checksums_verified", "path", "nominal_bps", "pace_bps", "deadline", "projected_finish_time", "schedule")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SRC_DTN_FIELD_NUMBER: _ClassVar[int]
    DST_DTN_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BPS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_RATE_FIELD_NUMBER: _ClassVar[int]
    CHECKSUMS_VERIFIED_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    NOMINAL_BPS_FIELD_NUMBER: _ClassVar[int]
    PACE_BPS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PROJECTED_FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    name: str
    owner: str
    src_dtn: str
    dst_dtn: str
    bandwidth_bps: int
    size_bytes: int
    files: _containers.RepeatedScalarFieldContainer[str]
    destination: str
    streams: int
    engine: str
    state: TransferState
    reason: str
    reservation: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    rate: _agent_pb2.RateReport
    receiver_rate: _agent_pb2.RateReport
    checksums_verified: bool
    path: _containers.RepeatedScalarFieldContainer[str]
    nominal_bps: float
    pace_bps: int
    deadline: _timestamp_pb2.Timestamp
    projected_finish_time: _timestamp_pb2.Timestamp
    schedule: _containers.RepeatedCompositeFieldContainer[_bandwidth_pb2.ScheduleStep]
    def __init__(self, name: _Optional[str] = ..., owner: _Optional[str] = ..., src_dtn: _Optional[str] = ..., dst_dtn: _Optional[str] = ..., bandwidth_bps: _Optional[int] = ..., size_bytes: _Optional[int] = ..., files: _Optional[_Iterable[str]] = ..., destination: _Optional[str] = ..., streams: _Optional[int] = ..., engine: _Optional[str] = ..., state: _Optional[_Union[TransferState, str]] = ..., reason: _Optional[str] = ..., reservation: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., rate: _Optional[_Union[_agent_pb2.RateReport, _Mapping]] = ..., receiver_rate: _Optional[_Union[_agent_pb2.RateReport, _Mapping]] = ..., checksums_verified: _Optional[bool] = ..., path: _Optional[_Iterable[str]] = ..., nominal_bps: _Optional[float] = ..., pace_bps: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., projected_finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., schedule: _Optional[_Iterable[_Union[_bandwidth_pb2.ScheduleStep, _Mapping]]] = ...) -> None: ...

class GetTransferRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTransfersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTransfersResponse(_message.Message):
    __slots__ = ("transfers",)
    TRANSFERS_FIELD_NUMBER: _ClassVar[int]
    transfers: _containers.RepeatedCompositeFieldContainer[Transfer]
    def __init__(self, transfers: _Optional[_Iterable[_Union[Transfer, _Mapping]]] = ...) -> None: ...

class CancelTransferRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchTransferRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class TransferEvent(_message.Message):
    __slots__ = ("previous_state", "state", "reason", "transfer", "time")
    PREVIOUS_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    previous_state: TransferState
    state: TransferState
    reason: str
    transfer: Transfer
    time: _timestamp_pb2.Timestamp
    def __init__(self, previous_state: _Optional[_Union[TransferState, str]] = ..., state: _Optional[_Union[TransferState, str]] = ..., reason: _Optional[str] = ..., transfer: _Optional[_Union[Transfer, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
