import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
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
