import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetTopologyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LinkDirection(_message.Message):
    __slots__ = ("id", "capacity_bps", "booked_bps")
    ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BPS_FIELD_NUMBER: _ClassVar[int]
    BOOKED_BPS_FIELD_NUMBER: _ClassVar[int]
    id: str
    capacity_bps: int
    booked_bps: int
    def __init__(self, id: _Optional[str] = ..., capacity_bps: _Optional[int] = ..., booked_bps: _Optional[int] = ...) -> None: ...

class Switch(_message.Message):
    __slots__ = ("name", "dpid", "ports", "site")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DPID_FIELD_NUMBER: _ClassVar[int]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    SITE_FIELD_NUMBER: _ClassVar[int]
    name: str
    dpid: int
    ports: _containers.RepeatedScalarFieldContainer[int]
    site: str
    def __init__(self, name: _Optional[str] = ..., dpid: _Optional[int] = ..., ports: _Optional[_Iterable[int]] = ..., site: _Optional[str] = ...) -> None: ...

class Link(_message.Message):
    __slots__ = ("name", "a_switch", "a_port", "b_switch", "b_port", "kind", "latency_ms", "a_to_b", "b_to_a")
    NAME_FIELD_NUMBER: _ClassVar[int]
    A_SWITCH_FIELD_NUMBER: _ClassVar[int]
    A_PORT_FIELD_NUMBER: _ClassVar[int]
    B_SWITCH_FIELD_NUMBER: _ClassVar[int]
    B_PORT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    A_TO_B_FIELD_NUMBER: _ClassVar[int]
    B_TO_A_FIELD_NUMBER: _ClassVar[int]
    name: str
    a_switch: str
    a_port: int
    b_switch: str
    b_port: int
    kind: str
    latency_ms: float
    a_to_b: LinkDirection
    b_to_a: LinkDirection
    def __init__(self, name: _Optional[str] = ..., a_switch: _Optional[str] = ..., a_port: _Optional[int] = ..., b_switch: _Optional[str] = ..., b_port: _Optional[int] = ..., kind: _Optional[str] = ..., latency_ms: _Optional[float] = ..., a_to_b: _Optional[_Union[LinkDirection, _Mapping]] = ..., b_to_a: _Optional[_Union[LinkDirection, _Mapping]] = ...) -> None: ...

class Dtn(_message.Message):
    __slots__ = ("name", "switch", "port", "ipv4", "mac", "nic_speed_bps", "numa_node", "uplink", "downlink")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    IPV4_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    NIC_SPEED_BPS_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_FIELD_NUMBER: _ClassVar[int]
    UPLINK_FIELD_NUMBER: _ClassVar[int]
    DOWNLINK_FIELD_NUMBER: _ClassVar[int]
    name: str
    switch: str
    port: int
    ipv4: str
    mac: str
    nic_speed_bps: int
    numa_node: int
    uplink: LinkDirection
    downlink: LinkDirection
    def __init__(self, name: _Optional[str] = ..., switch: _Optional[str] = ..., port: _Optional[int] = ..., ipv4: _Optional[str] = ..., mac: _Optional[str] = ..., nic_speed_bps: _Optional[int] = ..., numa_node: _Optional[int] = ..., uplink: _Optional[_Union[LinkDirection, _Mapping]] = ..., downlink: _Optional[_Union[LinkDirection, _Mapping]] = ...) -> None: ...

class Site(_message.Message):
    __slots__ = ("name", "kind", "lat", "lon", "switches")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    LAT_FIELD_NUMBER: _ClassVar[int]
    LON_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    lat: float
    lon: float
    switches: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., lat: _Optional[float] = ..., lon: _Optional[float] = ..., switches: _Optional[_Iterable[str]] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("name", "description", "switches", "links", "dtns", "sites", "time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    DTNS_FIELD_NUMBER: _ClassVar[int]
    SITES_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    switches: _containers.RepeatedCompositeFieldContainer[Switch]
    links: _containers.RepeatedCompositeFieldContainer[Link]
    dtns: _containers.RepeatedCompositeFieldContainer[Dtn]
    sites: _containers.RepeatedCompositeFieldContainer[Site]
    time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., switches: _Optional[_Iterable[_Union[Switch, _Mapping]]] = ..., links: _Optional[_Iterable[_Union[Link, _Mapping]]] = ..., dtns: _Optional[_Iterable[_Union[Dtn, _Mapping]]] = ..., sites: _Optional[_Iterable[_Union[Site, _Mapping]]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetTopologyStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SwitchStatus(_message.Message):
    __slots__ = ("name", "dpid", "connected", "connected_since")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DPID_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_SINCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    dpid: int
    connected: bool
    connected_since: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., dpid: _Optional[int] = ..., connected: _Optional[bool] = ..., connected_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LinkStatus(_message.Message):
    __slots__ = ("name", "a", "b", "state", "reason", "lldp_age_a_to_b_s", "lldp_age_b_to_a_s")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[LinkStatus.State]
        UP: _ClassVar[LinkStatus.State]
        DOWN: _ClassVar[LinkStatus.State]
        UNVERIFIED: _ClassVar[LinkStatus.State]
        UNKNOWN: _ClassVar[LinkStatus.State]
    STATE_UNSPECIFIED: LinkStatus.State
    UP: LinkStatus.State
    DOWN: LinkStatus.State
    UNVERIFIED: LinkStatus.State
    UNKNOWN: LinkStatus.State
    NAME_FIELD_NUMBER: _ClassVar[int]
    A_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LLDP_AGE_A_TO_B_S_FIELD_NUMBER: _ClassVar[int]
    LLDP_AGE_B_TO_A_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    a: str
    b: str
    state: LinkStatus.State
    reason: str
    lldp_age_a_to_b_s: float
    lldp_age_b_to_a_s: float
    def __init__(self, name: _Optional[str] = ..., a: _Optional[str] = ..., b: _Optional[str] = ..., state: _Optional[_Union[LinkStatus.State, str]] = ..., reason: _Optional[str] = ..., lldp_age_a_to_b_s: _Optional[float] = ..., lldp_age_b_to_a_s: _Optional[float] = ...) -> None: ...

class WiringMismatch(_message.Message):
    __slots__ = ("at", "expected", "observed", "message", "first_seen", "last_seen")
    AT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    at: str
    expected: str
    observed: str
    message: str
    first_seen: _timestamp_pb2.Timestamp
    last_seen: _timestamp_pb2.Timestamp
    def __init__(self, at: _Optional[str] = ..., expected: _Optional[str] = ..., observed: _Optional[str] = ..., message: _Optional[str] = ..., first_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class TopologyStatus(_message.Message):
    __slots__ = ("topology", "controlled", "note", "switches", "links", "mismatches", "time")
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    CONTROLLED_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    MISMATCHES_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    topology: str
    controlled: bool
    note: str
    switches: _containers.RepeatedCompositeFieldContainer[SwitchStatus]
    links: _containers.RepeatedCompositeFieldContainer[LinkStatus]
    mismatches: _containers.RepeatedCompositeFieldContainer[WiringMismatch]
    time: _timestamp_pb2.Timestamp
    def __init__(self, topology: _Optional[str] = ..., controlled: _Optional[bool] = ..., note: _Optional[str] = ..., switches: _Optional[_Iterable[_Union[SwitchStatus, _Mapping]]] = ..., links: _Optional[_Iterable[_Union[LinkStatus, _Mapping]]] = ..., mismatches: _Optional[_Iterable[_Union[WiringMismatch, _Mapping]]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
