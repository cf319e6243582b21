import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_STATE_UNSPECIFIED: _ClassVar[AgentState]
    ONLINE: _ClassVar[AgentState]
    LOST: _ClassVar[AgentState]

class TransferRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSFER_ROLE_UNSPECIFIED: _ClassVar[TransferRole]
    RECEIVE: _ClassVar[TransferRole]
    SEND: _ClassVar[TransferRole]
    STOP: _ClassVar[TransferRole]
    PACE: _ClassVar[TransferRole]
AGENT_STATE_UNSPECIFIED: AgentState
ONLINE: AgentState
LOST: AgentState
TRANSFER_ROLE_UNSPECIFIED: TransferRole
RECEIVE: TransferRole
SEND: TransferRole
STOP: TransferRole
PACE: TransferRole

class AgentNic(_message.Message):
    __slots__ = ("name", "speed_bps", "mtu", "numa_node", "local_cpus", "pcie_usable_bps", "capacity_bps", "limit", "warnings")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEED_BPS_FIELD_NUMBER: _ClassVar[int]
    MTU_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_CPUS_FIELD_NUMBER: _ClassVar[int]
    PCIE_USABLE_BPS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BPS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    speed_bps: int
    mtu: int
    numa_node: int
    local_cpus: _containers.RepeatedScalarFieldContainer[int]
    pcie_usable_bps: int
    capacity_bps: int
    limit: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., speed_bps: _Optional[int] = ..., mtu: _Optional[int] = ..., numa_node: _Optional[int] = ..., local_cpus: _Optional[_Iterable[int]] = ..., pcie_usable_bps: _Optional[int] = ..., capacity_bps: _Optional[int] = ..., limit: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class AgentRdmaDevice(_message.Message):
    __slots__ = ("name", "netdevs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NETDEVS_FIELD_NUMBER: _ClassVar[int]
    name: str
    netdevs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., netdevs: _Optional[_Iterable[str]] = ...) -> None: ...

class NumaNode(_message.Message):
    __slots__ = ("node", "cpus")
    NODE_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    node: int
    cpus: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node: _Optional[int] = ..., cpus: _Optional[_Iterable[int]] = ...) -> None: ...

class HostFacts(_message.Message):
    __slots__ = ("nics", "rdma_devices", "cpus", "numa_nodes", "agent_version", "hostname", "data_nic")
    NICS_FIELD_NUMBER: _ClassVar[int]
    RDMA_DEVICES_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODES_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    DATA_NIC_FIELD_NUMBER: _ClassVar[int]
    nics: _containers.RepeatedCompositeFieldContainer[AgentNic]
    rdma_devices: _containers.RepeatedCompositeFieldContainer[AgentRdmaDevice]
    cpus: _containers.RepeatedScalarFieldContainer[int]
    numa_nodes: _containers.RepeatedCompositeFieldContainer[NumaNode]
    agent_version: str
    hostname: str
    data_nic: str
    def __init__(self, nics: _Optional[_Iterable[_Union[AgentNic, _Mapping]]] = ..., rdma_devices: _Optional[_Iterable[_Union[AgentRdmaDevice, _Mapping]]] = ..., cpus: _Optional[_Iterable[int]] = ..., numa_nodes: _Optional[_Iterable[_Union[NumaNode, _Mapping]]] = ..., agent_version: _Optional[str] = ..., hostname: _Optional[str] = ..., data_nic: _Optional[str] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("name", "dtn", "state", "state_reason", "registered_time", "last_heartbeat_time", "facts", "principal")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_TIME_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtn: str
    state: AgentState
    state_reason: str
    registered_time: _timestamp_pb2.Timestamp
    last_heartbeat_time: _timestamp_pb2.Timestamp
    facts: HostFacts
    principal: str
    def __init__(self, name: _Optional[str] = ..., dtn: _Optional[str] = ..., state: _Optional[_Union[AgentState, str]] = ..., state_reason: _Optional[str] = ..., registered_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_heartbeat_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., facts: _Optional[_Union[HostFacts, _Mapping]] = ..., principal: _Optional[str] = ...) -> None: ...

class RegisterAgentRequest(_message.Message):
    __slots__ = ("dtn", "facts")
    DTN_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    dtn: str
    facts: HostFacts
    def __init__(self, dtn: _Optional[str] = ..., facts: _Optional[_Union[HostFacts, _Mapping]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("dtn",)
    DTN_FIELD_NUMBER: _ClassVar[int]
    dtn: str
    def __init__(self, dtn: _Optional[str] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[Agent]
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, _Mapping]]] = ...) -> None: ...

class GetAgentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchAgentsRequest(_message.Message):
    __slots__ = ("include_existing",)
    INCLUDE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    include_existing: bool
    def __init__(self, include_existing: _Optional[bool] = ...) -> None: ...

class AgentEvent(_message.Message):
    __slots__ = ("previous_state", "state", "reason", "agent", "time")
    PREVIOUS_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    previous_state: AgentState
    state: AgentState
    reason: str
    agent: Agent
    time: _timestamp_pb2.Timestamp
    def __init__(self, previous_state: _Optional[_Union[AgentState, str]] = ..., state: _Optional[_Union[AgentState, str]] = ..., reason: _Optional[str] = ..., agent: _Optional[_Union[Agent, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TakeJobsRequest(_message.Message):
    __slots__ = ("dtn",)
    DTN_FIELD_NUMBER: _ClassVar[int]
    dtn: str
    def __init__(self, dtn: _Optional[str] = ...) -> None: ...

class TransferJob(_message.Message):
    __slots__ = ("transfer", "role", "engine", "streams", "size_bytes", "files", "destination", "peer_host", "peer_port", "pacing_bps", "reservation")
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PEER_HOST_FIELD_NUMBER: _ClassVar[int]
    PEER_PORT_FIELD_NUMBER: _ClassVar[int]
    PACING_BPS_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    transfer: str
    role: TransferRole
    engine: str
    streams: int
    size_bytes: int
    files: _containers.RepeatedScalarFieldContainer[str]
    destination: str
    peer_host: str
    peer_port: int
    pacing_bps: int
    reservation: str
    def __init__(self, transfer: _Optional[str] = ..., role: _Optional[_Union[TransferRole, str]] = ..., engine: _Optional[str] = ..., streams: _Optional[int] = ..., size_bytes: _Optional[int] = ..., files: _Optional[_Iterable[str]] = ..., destination: _Optional[str] = ..., peer_host: _Optional[str] = ..., peer_port: _Optional[int] = ..., pacing_bps: _Optional[int] = ..., reservation: _Optional[str] = ...) -> None: ...

class StreamRate(_message.Message):
    __slots__ = ("stream", "bits_per_second", "bytes_total", "retransmits", "rtt_ms")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    BITS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RETRANSMITS_FIELD_NUMBER: _ClassVar[int]
    RTT_MS_FIELD_NUMBER: _ClassVar[int]
    stream: int
    bits_per_second: float
    bytes_total: int
    retransmits: int
    rtt_ms: float
    def __init__(self, stream: _Optional[int] = ..., bits_per_second: _Optional[float] = ..., bytes_total: _Optional[int] = ..., retransmits: _Optional[int] = ..., rtt_ms: _Optional[float] = ...) -> None: ...

class Pinning(_message.Message):
    __slots__ = ("cpus", "numa_node", "method", "note")
    CPUS_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    cpus: _containers.RepeatedScalarFieldContainer[int]
    numa_node: int
    method: str
    note: str
    def __init__(self, cpus: _Optional[_Iterable[int]] = ..., numa_node: _Optional[int] = ..., method: _Optional[str] = ..., note: _Optional[str] = ...) -> None: ...

class RateReport(_message.Message):
    __slots__ = ("start", "end", "bits_per_second", "bytes_total", "streams", "retransmits", "rtt_ms", "cpu_percent", "pinning", "final", "engine")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    BITS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    RETRANSMITS_FIELD_NUMBER: _ClassVar[int]
    RTT_MS_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    PINNING_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    start: float
    end: float
    bits_per_second: float
    bytes_total: int
    streams: _containers.RepeatedCompositeFieldContainer[StreamRate]
    retransmits: int
    rtt_ms: float
    cpu_percent: float
    pinning: Pinning
    final: bool
    engine: str
    def __init__(self, start: _Optional[float] = ..., end: _Optional[float] = ..., bits_per_second: _Optional[float] = ..., bytes_total: _Optional[int] = ..., streams: _Optional[_Iterable[_Union[StreamRate, _Mapping]]] = ..., retransmits: _Optional[int] = ..., rtt_ms: _Optional[float] = ..., cpu_percent: _Optional[float] = ..., pinning: _Optional[_Union[Pinning, _Mapping]] = ..., final: _Optional[bool] = ..., engine: _Optional[str] = ...) -> None: ...

class TransferOutcome(_message.Message):
    __slots__ = ("ok", "error", "checksums_verified", "files")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CHECKSUMS_VERIFIED_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error: str
    checksums_verified: bool
    files: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ok: _Optional[bool] = ..., error: _Optional[str] = ..., checksums_verified: _Optional[bool] = ..., files: _Optional[_Iterable[str]] = ...) -> None: ...

class TransferReport(_message.Message):
    __slots__ = ("transfer", "dtn", "role", "listening_port", "rate", "outcome", "final", "listening_host")
    TRANSFER_FIELD_NUMBER: _ClassVar[int]
    DTN_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LISTENING_PORT_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    LISTENING_HOST_FIELD_NUMBER: _ClassVar[int]
    transfer: str
    dtn: str
    role: TransferRole
    listening_port: int
    rate: RateReport
    outcome: TransferOutcome
    final: RateReport
    listening_host: str
    def __init__(self, transfer: _Optional[str] = ..., dtn: _Optional[str] = ..., role: _Optional[_Union[TransferRole, str]] = ..., listening_port: _Optional[int] = ..., rate: _Optional[_Union[RateReport, _Mapping]] = ..., outcome: _Optional[_Union[TransferOutcome, _Mapping]] = ..., final: _Optional[_Union[RateReport, _Mapping]] = ..., listening_host: _Optional[str] = ...) -> None: ...

class ReportTransferResponse(_message.Message):
    __slots__ = ("stop", "reason")
    STOP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    stop: bool
    reason: str
    def __init__(self, stop: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...
