import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReservationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESERVATION_STATE_UNSPECIFIED: _ClassVar[ReservationState]
    SCHEDULED: _ClassVar[ReservationState]
    PROVISIONING: _ClassVar[ReservationState]
    ACTIVE: _ClassVar[ReservationState]
    MOVING: _ClassVar[ReservationState]
    DEGRADED: _ClassVar[ReservationState]
    RELEASED: _ClassVar[ReservationState]
    EXPIRED: _ClassVar[ReservationState]
    FAILED: _ClassVar[ReservationState]
    HELD: _ClassVar[ReservationState]
    RESERVED: _ClassVar[ReservationState]

class PathPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PATH_POLICY_UNSPECIFIED: _ClassVar[PathPolicy]
    SHORTEST: _ClassVar[PathPolicy]
    WIDEST: _ClassVar[PathPolicy]

class DecisionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_KIND_UNSPECIFIED: _ClassVar[DecisionKind]
    DECISION_MOVED: _ClassVar[DecisionKind]
    DECISION_REARRANGED: _ClassVar[DecisionKind]
    DECISION_RELIEVED: _ClassVar[DecisionKind]
    DECISION_DISPLACED: _ClassVar[DecisionKind]
    DECISION_NOT_MOVED: _ClassVar[DecisionKind]
    DECISION_LINK: _ClassVar[DecisionKind]
    DECISION_DEGRADED: _ClassVar[DecisionKind]
    DECISION_REROUTED: _ClassVar[DecisionKind]
    DECISION_SHARED: _ClassVar[DecisionKind]
    DECISION_ADMITTED: _ClassVar[DecisionKind]

class NotMovedReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NOT_MOVED_REASON_UNSPECIFIED: _ClassVar[NotMovedReason]
    NOT_MOVED_HOSTS: _ClassVar[NotMovedReason]
    NOT_MOVED_HELD: _ClassVar[NotMovedReason]
    NOT_MOVED_BUDGET: _ClassVar[NotMovedReason]
    NOT_MOVED_NO_ROOM: _ClassVar[NotMovedReason]
    NOT_MOVED_UNMEASURED: _ClassVar[NotMovedReason]
    NOT_MOVED_ACCESS: _ClassVar[NotMovedReason]

class Protection(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTECTION_UNSPECIFIED: _ClassVar[Protection]
    PROTECTION_STAYS: _ClassVar[Protection]
    PROTECTION_FAILS_OVER: _ClassVar[Protection]
RESERVATION_STATE_UNSPECIFIED: ReservationState
SCHEDULED: ReservationState
PROVISIONING: ReservationState
ACTIVE: ReservationState
MOVING: ReservationState
DEGRADED: ReservationState
RELEASED: ReservationState
EXPIRED: ReservationState
FAILED: ReservationState
HELD: ReservationState
RESERVED: ReservationState
PATH_POLICY_UNSPECIFIED: PathPolicy
SHORTEST: PathPolicy
WIDEST: PathPolicy
DECISION_KIND_UNSPECIFIED: DecisionKind
DECISION_MOVED: DecisionKind
DECISION_REARRANGED: DecisionKind
DECISION_RELIEVED: DecisionKind
DECISION_DISPLACED: DecisionKind
DECISION_NOT_MOVED: DecisionKind
DECISION_LINK: DecisionKind
DECISION_DEGRADED: DecisionKind
DECISION_REROUTED: DecisionKind
DECISION_SHARED: DecisionKind
DECISION_ADMITTED: DecisionKind
NOT_MOVED_REASON_UNSPECIFIED: NotMovedReason
NOT_MOVED_HOSTS: NotMovedReason
NOT_MOVED_HELD: NotMovedReason
NOT_MOVED_BUDGET: NotMovedReason
NOT_MOVED_NO_ROOM: NotMovedReason
NOT_MOVED_UNMEASURED: NotMovedReason
NOT_MOVED_ACCESS: NotMovedReason
PROTECTION_UNSPECIFIED: Protection
PROTECTION_STAYS: Protection
PROTECTION_FAILS_OVER: Protection

class Hop(_message.Message):
    __slots__ = ("switch", "in_port", "out_port")
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    IN_PORT_FIELD_NUMBER: _ClassVar[int]
    OUT_PORT_FIELD_NUMBER: _ClassVar[int]
    switch: str
    in_port: int
    out_port: int
    def __init__(self, switch: _Optional[str] = ..., in_port: _Optional[int] = ..., out_port: _Optional[int] = ...) -> None: ...

class Path(_message.Message):
    __slots__ = ("route", "hops", "links", "hop_count", "latency_ms", "free_bps", "bottleneck")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    HOP_COUNT_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    FREE_BPS_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_FIELD_NUMBER: _ClassVar[int]
    route: _containers.RepeatedScalarFieldContainer[str]
    hops: _containers.RepeatedCompositeFieldContainer[Hop]
    links: _containers.RepeatedScalarFieldContainer[str]
    hop_count: int
    latency_ms: float
    free_bps: int
    bottleneck: str
    def __init__(self, route: _Optional[_Iterable[str]] = ..., hops: _Optional[_Iterable[_Union[Hop, _Mapping]]] = ..., links: _Optional[_Iterable[str]] = ..., hop_count: _Optional[int] = ..., latency_ms: _Optional[float] = ..., free_bps: _Optional[int] = ..., bottleneck: _Optional[str] = ...) -> None: ...

class Reservation(_message.Message):
    __slots__ = ("name", "id", "owner", "source_dtn", "destination_dtn", "bandwidth_bps", "start_time", "end_time", "policy", "include", "exclude", "max_hops", "protect", "labels", "request_id", "state", "state_reason", "path", "backup_path", "create_time", "update_time", "history", "hold_expire_time", "provision", "priority", "ceiling_bps", "share_bps", "schedule", "src_prefix", "dst_prefix", "src_vlan", "dst_vlan")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SOURCE_DTN_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_DTN_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BPS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    MAX_HOPS_FIELD_NUMBER: _ClassVar[int]
    PROTECT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BACKUP_PATH_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    HOLD_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    PROVISION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CEILING_BPS_FIELD_NUMBER: _ClassVar[int]
    SHARE_BPS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    SRC_PREFIX_FIELD_NUMBER: _ClassVar[int]
    DST_PREFIX_FIELD_NUMBER: _ClassVar[int]
    SRC_VLAN_FIELD_NUMBER: _ClassVar[int]
    DST_VLAN_FIELD_NUMBER: _ClassVar[int]
    name: str
    id: str
    owner: str
    source_dtn: str
    destination_dtn: str
    bandwidth_bps: int
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    policy: PathPolicy
    include: _containers.RepeatedScalarFieldContainer[str]
    exclude: _containers.RepeatedScalarFieldContainer[str]
    max_hops: int
    protect: bool
    labels: _containers.ScalarMap[str, str]
    request_id: str
    state: ReservationState
    state_reason: str
    path: Path
    backup_path: Path
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    history: _containers.RepeatedCompositeFieldContainer[ReservationHistory]
    hold_expire_time: _timestamp_pb2.Timestamp
    provision: bool
    priority: int
    ceiling_bps: int
    share_bps: int
    schedule: _containers.RepeatedCompositeFieldContainer[ScheduleStep]
    src_prefix: str
    dst_prefix: str
    src_vlan: int
    dst_vlan: int
    def __init__(self, name: _Optional[str] = ..., id: _Optional[str] = ..., owner: _Optional[str] = ..., source_dtn: _Optional[str] = ..., destination_dtn: _Optional[str] = ..., bandwidth_bps: _Optional[int] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., policy: _Optional[_Union[PathPolicy, str]] = ..., include: _Optional[_Iterable[str]] = ..., exclude: _Optional[_Iterable[str]] = ..., max_hops: _Optional[int] = ..., protect: _Optional[bool] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., state: _Optional[_Union[ReservationState, str]] = ..., state_reason: _Optional[str] = ..., path: _Optional[_Union[Path, _Mapping]] = ..., backup_path: _Optional[_Union[Path, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., history: _Optional[_Iterable[_Union[ReservationHistory, _Mapping]]] = ..., hold_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., provision: _Optional[bool] = ..., priority: _Optional[int] = ..., ceiling_bps: _Optional[int] = ..., share_bps: _Optional[int] = ..., schedule: _Optional[_Iterable[_Union[ScheduleStep, _Mapping]]] = ..., src_prefix: _Optional[str] = ..., dst_prefix: _Optional[str] = ..., src_vlan: _Optional[int] = ..., dst_vlan: _Optional[int] = ...) -> None: ...

class ScheduleStep(_message.Message):
    __slots__ = ("start_time", "end_time", "bandwidth_bps")
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BPS_FIELD_NUMBER: _ClassVar[int]
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    bandwidth_bps: int
    def __init__(self, start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., bandwidth_bps: _Optional[int] = ...) -> None: ...

class ReservationRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ReservationHistory(_message.Message):
    __slots__ = ("time", "state", "reason", "decision")
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    state: ReservationState
    reason: str
    decision: Decision
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[ReservationState, str]] = ..., reason: _Optional[str] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("kind", "why", "evidence", "to", "headroom_bps", "displaced", "relieves", "hold", "barred_links", "refusal", "link", "link_up", "note", "trigger", "protection", "on", "verdict", "cause", "shares")
    KIND_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_BPS_FIELD_NUMBER: _ClassVar[int]
    DISPLACED_FIELD_NUMBER: _ClassVar[int]
    RELIEVES_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    BARRED_LINKS_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    LINK_UP_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    PROTECTION_FIELD_NUMBER: _ClassVar[int]
    ON_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    SHARES_FIELD_NUMBER: _ClassVar[int]
    kind: DecisionKind
    why: NotMovedReason
    evidence: Evidence
    to: PathTaken
    headroom_bps: int
    displaced: _containers.RepeatedCompositeFieldContainer[Displacement]
    relieves: str
    hold: Hold
    barred_links: _containers.RepeatedScalarFieldContainer[str]
    refusal: str
    link: str
    link_up: bool
    note: str
    trigger: str
    protection: Protection
    on: PathTaken
    verdict: str
    cause: str
    shares: _containers.RepeatedCompositeFieldContainer[ShareChange]
    def __init__(self, kind: _Optional[_Union[DecisionKind, str]] = ..., why: _Optional[_Union[NotMovedReason, str]] = ..., evidence: _Optional[_Union[Evidence, _Mapping]] = ..., to: _Optional[_Union[PathTaken, _Mapping]] = ..., headroom_bps: _Optional[int] = ..., displaced: _Optional[_Iterable[_Union[Displacement, _Mapping]]] = ..., relieves: _Optional[str] = ..., hold: _Optional[_Union[Hold, _Mapping]] = ..., barred_links: _Optional[_Iterable[str]] = ..., refusal: _Optional[str] = ..., link: _Optional[str] = ..., link_up: _Optional[bool] = ..., note: _Optional[str] = ..., trigger: _Optional[str] = ..., protection: _Optional[_Union[Protection, str]] = ..., on: _Optional[_Union[PathTaken, _Mapping]] = ..., verdict: _Optional[str] = ..., cause: _Optional[str] = ..., shares: _Optional[_Iterable[_Union[ShareChange, _Mapping]]] = ...) -> None: ...

class ShareChange(_message.Message):
    __slots__ = ("reservation", "before_bps", "after_bps", "floor_bps", "ceiling_bps", "priority")
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    BEFORE_BPS_FIELD_NUMBER: _ClassVar[int]
    AFTER_BPS_FIELD_NUMBER: _ClassVar[int]
    FLOOR_BPS_FIELD_NUMBER: _ClassVar[int]
    CEILING_BPS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    reservation: str
    before_bps: int
    after_bps: int
    floor_bps: int
    ceiling_bps: int
    priority: int
    def __init__(self, reservation: _Optional[str] = ..., before_bps: _Optional[int] = ..., after_bps: _Optional[int] = ..., floor_bps: _Optional[int] = ..., ceiling_bps: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class Evidence(_message.Message):
    __slots__ = ("achieved_bps", "booked_bps", "reports", "congested", "busiest", "unmeasured", "retransmits", "rtt_ms", "sender_cpu_percent")
    ACHIEVED_BPS_FIELD_NUMBER: _ClassVar[int]
    BOOKED_BPS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    CONGESTED_FIELD_NUMBER: _ClassVar[int]
    BUSIEST_FIELD_NUMBER: _ClassVar[int]
    UNMEASURED_FIELD_NUMBER: _ClassVar[int]
    RETRANSMITS_FIELD_NUMBER: _ClassVar[int]
    RTT_MS_FIELD_NUMBER: _ClassVar[int]
    SENDER_CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    achieved_bps: float
    booked_bps: int
    reports: int
    congested: _containers.RepeatedCompositeFieldContainer[MeasuredDirection]
    busiest: MeasuredDirection
    unmeasured: _containers.RepeatedScalarFieldContainer[str]
    retransmits: int
    rtt_ms: float
    sender_cpu_percent: float
    def __init__(self, achieved_bps: _Optional[float] = ..., booked_bps: _Optional[int] = ..., reports: _Optional[int] = ..., congested: _Optional[_Iterable[_Union[MeasuredDirection, _Mapping]]] = ..., busiest: _Optional[_Union[MeasuredDirection, _Mapping]] = ..., unmeasured: _Optional[_Iterable[str]] = ..., retransmits: _Optional[int] = ..., rtt_ms: _Optional[float] = ..., sender_cpu_percent: _Optional[float] = ...) -> None: ...

class MeasuredDirection(_message.Message):
    __slots__ = ("direction", "link", "capacity_bps", "measured_bps", "unowned_bps", "reverse")
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BPS_FIELD_NUMBER: _ClassVar[int]
    MEASURED_BPS_FIELD_NUMBER: _ClassVar[int]
    UNOWNED_BPS_FIELD_NUMBER: _ClassVar[int]
    REVERSE_FIELD_NUMBER: _ClassVar[int]
    direction: str
    link: str
    capacity_bps: int
    measured_bps: float
    unowned_bps: float
    reverse: bool
    def __init__(self, direction: _Optional[str] = ..., link: _Optional[str] = ..., capacity_bps: _Optional[int] = ..., measured_bps: _Optional[float] = ..., unowned_bps: _Optional[float] = ..., reverse: _Optional[bool] = ...) -> None: ...

class PathTaken(_message.Message):
    __slots__ = ("route", "links")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    route: _containers.RepeatedScalarFieldContainer[str]
    links: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, route: _Optional[_Iterable[str]] = ..., links: _Optional[_Iterable[str]] = ...) -> None: ...

class Displacement(_message.Message):
    __slots__ = ("reservation", "to")
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    reservation: str
    to: PathTaken
    def __init__(self, reservation: _Optional[str] = ..., to: _Optional[_Union[PathTaken, _Mapping]] = ...) -> None: ...

class Hold(_message.Message):
    __slots__ = ("moved_ago_seconds", "hold_down_seconds", "moves", "window_seconds", "budget")
    MOVED_AGO_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HOLD_DOWN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    moved_ago_seconds: float
    hold_down_seconds: float
    moves: int
    window_seconds: float
    budget: int
    def __init__(self, moved_ago_seconds: _Optional[float] = ..., hold_down_seconds: _Optional[float] = ..., moves: _Optional[int] = ..., window_seconds: _Optional[float] = ..., budget: _Optional[int] = ...) -> None: ...

class CreateReservationRequest(_message.Message):
    __slots__ = ("source_dtn", "destination_dtn", "bandwidth_bps", "start_time", "end_time", "duration", "policy", "include", "exclude", "max_hops", "protect", "labels", "request_id", "validate_only", "hold", "manual_provision", "priority", "ceiling_bps", "src_prefix", "dst_prefix")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SOURCE_DTN_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_DTN_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BPS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    MAX_HOPS_FIELD_NUMBER: _ClassVar[int]
    PROTECT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    MANUAL_PROVISION_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CEILING_BPS_FIELD_NUMBER: _ClassVar[int]
    SRC_PREFIX_FIELD_NUMBER: _ClassVar[int]
    DST_PREFIX_FIELD_NUMBER: _ClassVar[int]
    source_dtn: str
    destination_dtn: str
    bandwidth_bps: int
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    policy: PathPolicy
    include: _containers.RepeatedScalarFieldContainer[str]
    exclude: _containers.RepeatedScalarFieldContainer[str]
    max_hops: int
    protect: bool
    labels: _containers.ScalarMap[str, str]
    request_id: str
    validate_only: bool
    hold: bool
    manual_provision: bool
    priority: int
    ceiling_bps: int
    src_prefix: str
    dst_prefix: str
    def __init__(self, source_dtn: _Optional[str] = ..., destination_dtn: _Optional[str] = ..., bandwidth_bps: _Optional[int] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., policy: _Optional[_Union[PathPolicy, str]] = ..., include: _Optional[_Iterable[str]] = ..., exclude: _Optional[_Iterable[str]] = ..., max_hops: _Optional[int] = ..., protect: _Optional[bool] = ..., labels: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., validate_only: _Optional[bool] = ..., hold: _Optional[bool] = ..., manual_provision: _Optional[bool] = ..., priority: _Optional[int] = ..., ceiling_bps: _Optional[int] = ..., src_prefix: _Optional[str] = ..., dst_prefix: _Optional[str] = ...) -> None: ...

class CreateReservationsRequest(_message.Message):
    __slots__ = ("requests", "all_or_nothing", "validate_only", "no_wait", "wait_timeout")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ALL_OR_NOTHING_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    NO_WAIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[CreateReservationRequest]
    all_or_nothing: bool
    validate_only: bool
    no_wait: bool
    wait_timeout: _duration_pb2.Duration
    def __init__(self, requests: _Optional[_Iterable[_Union[CreateReservationRequest, _Mapping]]] = ..., all_or_nothing: _Optional[bool] = ..., validate_only: _Optional[bool] = ..., no_wait: _Optional[bool] = ..., wait_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ItemError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ItemResult(_message.Message):
    __slots__ = ("reservation", "error")
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    reservation: Reservation
    error: ItemError
    def __init__(self, reservation: _Optional[_Union[Reservation, _Mapping]] = ..., error: _Optional[_Union[ItemError, _Mapping]] = ...) -> None: ...

class CreateReservationsResponse(_message.Message):
    __slots__ = ("results", "admitted", "refused", "installing")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    INSTALLING_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ItemResult]
    admitted: int
    refused: int
    installing: int
    def __init__(self, results: _Optional[_Iterable[_Union[ItemResult, _Mapping]]] = ..., admitted: _Optional[int] = ..., refused: _Optional[int] = ..., installing: _Optional[int] = ...) -> None: ...

class GetReservationRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListReservationsRequest(_message.Message):
    __slots__ = ("state", "dtn", "owner", "page_size", "page_token")
    STATE_FIELD_NUMBER: _ClassVar[int]
    DTN_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    state: ReservationState
    dtn: str
    owner: str
    page_size: int
    page_token: str
    def __init__(self, state: _Optional[_Union[ReservationState, str]] = ..., dtn: _Optional[str] = ..., owner: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListReservationsResponse(_message.Message):
    __slots__ = ("reservations", "next_page_token")
    RESERVATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    reservations: _containers.RepeatedCompositeFieldContainer[Reservation]
    next_page_token: str
    def __init__(self, reservations: _Optional[_Iterable[_Union[Reservation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ModifyReservationRequest(_message.Message):
    __slots__ = ("name", "bandwidth_bps", "end_time", "until_released", "validate_only", "path", "priority", "ceiling_bps")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BPS_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    UNTIL_RELEASED_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CEILING_BPS_FIELD_NUMBER: _ClassVar[int]
    name: str
    bandwidth_bps: int
    end_time: _timestamp_pb2.Timestamp
    until_released: bool
    validate_only: bool
    path: PathConstraints
    priority: int
    ceiling_bps: int
    def __init__(self, name: _Optional[str] = ..., bandwidth_bps: _Optional[int] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until_released: _Optional[bool] = ..., validate_only: _Optional[bool] = ..., path: _Optional[_Union[PathConstraints, _Mapping]] = ..., priority: _Optional[int] = ..., ceiling_bps: _Optional[int] = ...) -> None: ...

class PathConstraints(_message.Message):
    __slots__ = ("policy", "include", "exclude", "max_hops")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    MAX_HOPS_FIELD_NUMBER: _ClassVar[int]
    policy: PathPolicy
    include: _containers.RepeatedScalarFieldContainer[str]
    exclude: _containers.RepeatedScalarFieldContainer[str]
    max_hops: int
    def __init__(self, policy: _Optional[_Union[PathPolicy, str]] = ..., include: _Optional[_Iterable[str]] = ..., exclude: _Optional[_Iterable[str]] = ..., max_hops: _Optional[int] = ...) -> None: ...

class DeleteReservationRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class QueryAvailabilityRequest(_message.Message):
    __slots__ = ("source_dtn", "destination_dtn", "start_time", "end_time", "duration", "policy", "include", "exclude", "max_hops", "max_paths", "size_bytes")
    SOURCE_DTN_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_DTN_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    MAX_HOPS_FIELD_NUMBER: _ClassVar[int]
    MAX_PATHS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    source_dtn: str
    destination_dtn: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    policy: PathPolicy
    include: _containers.RepeatedScalarFieldContainer[str]
    exclude: _containers.RepeatedScalarFieldContainer[str]
    max_hops: int
    max_paths: int
    size_bytes: int
    def __init__(self, source_dtn: _Optional[str] = ..., destination_dtn: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., policy: _Optional[_Union[PathPolicy, str]] = ..., include: _Optional[_Iterable[str]] = ..., exclude: _Optional[_Iterable[str]] = ..., max_hops: _Optional[int] = ..., max_paths: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class QueryAvailabilityResponse(_message.Message):
    __slots__ = ("max_bandwidth_bps", "paths", "reason", "earliest_finish_time", "schedule")
    MAX_BANDWIDTH_BPS_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    max_bandwidth_bps: int
    paths: _containers.RepeatedCompositeFieldContainer[Path]
    reason: str
    earliest_finish_time: _timestamp_pb2.Timestamp
    schedule: _containers.RepeatedCompositeFieldContainer[ScheduleStep]
    def __init__(self, max_bandwidth_bps: _Optional[int] = ..., paths: _Optional[_Iterable[_Union[Path, _Mapping]]] = ..., reason: _Optional[str] = ..., earliest_finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., schedule: _Optional[_Iterable[_Union[ScheduleStep, _Mapping]]] = ...) -> None: ...

class WatchReservationsRequest(_message.Message):
    __slots__ = ("name", "include_existing")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    name: str
    include_existing: bool
    def __init__(self, name: _Optional[str] = ..., include_existing: _Optional[bool] = ...) -> None: ...

class ReservationEvent(_message.Message):
    __slots__ = ("sequence", "time", "previous_state", "state", "reason", "reservation", "decision")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    time: _timestamp_pb2.Timestamp
    previous_state: ReservationState
    state: ReservationState
    reason: str
    reservation: Reservation
    decision: Decision
    def __init__(self, sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., previous_state: _Optional[_Union[ReservationState, str]] = ..., state: _Optional[_Union[ReservationState, str]] = ..., reason: _Optional[str] = ..., reservation: _Optional[_Union[Reservation, _Mapping]] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...
