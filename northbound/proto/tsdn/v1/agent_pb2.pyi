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
AGENT_STATE_UNSPECIFIED: AgentState
ONLINE: AgentState
LOST: AgentState

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
    __slots__ = ("nics", "rdma_devices", "cpus", "numa_nodes", "agent_version", "hostname")
    NICS_FIELD_NUMBER: _ClassVar[int]
    RDMA_DEVICES_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODES_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    nics: _containers.RepeatedCompositeFieldContainer[AgentNic]
    rdma_devices: _containers.RepeatedCompositeFieldContainer[AgentRdmaDevice]
    cpus: _containers.RepeatedScalarFieldContainer[int]
    numa_nodes: _containers.RepeatedCompositeFieldContainer[NumaNode]
    agent_version: str
    hostname: str
    def __init__(self, nics: _Optional[_Iterable[_Union[AgentNic, _Mapping]]] = ..., rdma_devices: _Optional[_Iterable[_Union[AgentRdmaDevice, _Mapping]]] = ..., cpus: _Optional[_Iterable[int]] = ..., numa_nodes: _Optional[_Iterable[_Union[NumaNode, _Mapping]]] = ..., agent_version: _Optional[str] = ..., hostname: _Optional[str] = ...) -> None: ...

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
