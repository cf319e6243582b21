"""Translation between the northbound protos and the core's plain data; no decisions here.

Every incoming field is checked on the way in, and a bad one becomes `InvalidArgument`
naming the field, before the core sees the request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from northbound.proto.tsdn.v1 import agent_pb2 as agent_pb
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb
from sdn_app.core import decisions, validation
from sdn_app.core.decisions import Decision
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.paths import Path, PathRequest
from sdn_app.core.reports import MAX_STREAMS_REPORTED, Pinning, RateReport, StreamRate
from sdn_app.core.reservation import Event, HistoryEntry, PathChoice, Reservation, ScheduleStep, State, Terms
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import LinkDirection
from sdn_app.core.units import MAX_BANDWIDTH

_POLICIES = {pb.PATH_POLICY_UNSPECIFIED: "shortest", pb.SHORTEST: "shortest", pb.WIDEST: "widest"}
_POLICY_ENUM = {"shortest": pb.SHORTEST, "widest": pb.WIDEST}
MAX_NAMES = 64  # include/exclude entries per request
_MAX_EPOCH = 253_402_300_799  # 9999-12-31T23:59:59Z, the end of Timestamp's range


def timestamp_in(ts: Timestamp, field: str) -> float:
    """Epoch seconds of a Timestamp, checked against the proto's valid range."""
    if not 0 <= ts.nanos < 1_000_000_000 or not 0 <= ts.seconds <= _MAX_EPOCH:
        raise InvalidArgument(f"{field}: not a valid time (seconds {ts.seconds}, nanos {ts.nanos})")
    return ts.seconds + ts.nanos / 1e9


def timestamp_out(epoch: float) -> Timestamp:
    """A Timestamp of epoch seconds."""
    seconds = math.floor(epoch)
    nanos = round((epoch - seconds) * 1e9)
    if nanos >= 1_000_000_000:
        seconds, nanos = seconds + 1, nanos - 1_000_000_000
    return Timestamp(seconds=seconds, nanos=nanos)


def duration_in(d: Duration, field: str) -> float:
    """Seconds of a positive Duration."""
    if not 0 <= d.nanos < 1_000_000_000 or d.seconds < 0 or (d.seconds == 0 and d.nanos == 0):
        raise InvalidArgument(f"{field}: must be a positive duration")
    if d.seconds > _MAX_EPOCH:
        raise InvalidArgument(f"{field}: longer than any window can be")
    return d.seconds + d.nanos / 1e9


def bandwidth_in(value: int, field: str = "bandwidth_bps") -> int:
    """A bandwidth in bits/s, checked to be positive and plausible."""
    if value <= 0:
        raise InvalidArgument(f"{field}: must be greater than zero")
    if value > MAX_BANDWIDTH:
        raise InvalidArgument(f"{field}: {value} bit/s is more than any network carries (at most {MAX_BANDWIDTH})")
    return value


def _names(values, field: str) -> tuple[str, ...]:
    return validation.texts(values, field, MAX_NAMES, validation.MAX_NAME)


def name_in(value: str, field: str = "name", required: bool = False) -> str:
    """A name (DTN, object name, owner): at most `validation.MAX_NAME` characters."""
    return validation.text(value, field, validation.MAX_NAME, required)


def max_hops_in(message, field: str = "max_hops") -> int | None:
    """The optional `max_hops` of a message: 0 to `validation.MAX_HOPS`, or None when unset."""
    if not message.HasField("max_hops"):
        return None
    return validation.whole(message.max_hops, field, 0, validation.MAX_HOPS)


def policy_in(value: int) -> str:
    """The core policy name of a PathPolicy value."""
    try:
        return _POLICIES[value]
    except KeyError:
        raise InvalidArgument(f"policy: unknown value {value}") from None


def window_in(message, now: float) -> tuple[float, float]:
    """(start, end) from a message with start_time and a `window_end` oneof of end_time/duration."""
    start = timestamp_in(message.start_time, "start_time") if message.HasField("start_time") else now
    which = message.WhichOneof("window_end")
    if which == "end_time":
        end = timestamp_in(message.end_time, "end_time")
    elif which == "duration":
        end = start + duration_in(message.duration, "duration")
    else:
        end = math.inf
    if end <= start:
        raise InvalidArgument("end_time: must be after start_time")
    if math.isfinite(end) and end > _MAX_EPOCH:
        raise InvalidArgument("end_time: the window would end after 9999-12-31T23:59:59Z, the latest time the API "
                              "can express; leave the end out for a window until released")
    return start, end


def prefixes_in(message: pb.CreateReservationRequest) -> tuple[str, str] | tuple[None, None]:
    """The canonical `src_prefix` and `dst_prefix` of a CreateReservationRequest (both or neither;
    `validation.prefix_pair`), (None, None) when both are empty."""
    return validation.prefix_pair(message.src_prefix or None, message.dst_prefix or None)


def path_request_in(message, bandwidth: int, now: float, protect: bool = False,
                    prefixes: tuple[str, str] | tuple[None, None] = (None, None)) -> PathRequest:
    """A `PathRequest` from CreateReservationRequest or QueryAvailabilityRequest fields, with the
    traffic's IPv6 `prefixes` (`prefixes_in`) when given."""
    name_in(message.source_dtn, "source_dtn", required=True)
    name_in(message.destination_dtn, "destination_dtn", required=True)
    start, end = window_in(message, now)
    return PathRequest(
        src=message.source_dtn, dst=message.destination_dtn, bandwidth=bandwidth, start=start, end=end,
        policy=policy_in(message.policy), include=_names(message.include, "include"),
        exclude=_names(message.exclude, "exclude"), max_hops=max_hops_in(message), protect=protect,
        src_prefix=prefixes[0], dst_prefix=prefixes[1],
    )


def path_choice_in(message: pb.PathConstraints) -> PathChoice:
    """A core `PathChoice` from PathConstraints."""
    return PathChoice(policy=policy_in(message.policy), include=_names(message.include, "path.include"),
                      exclude=_names(message.exclude, "path.exclude"),
                      max_hops=max_hops_in(message, "path.max_hops"))


def state_in(value: int) -> State | None:
    """A core `State` from the enum (None for UNSPECIFIED)."""
    if value == pb.RESERVATION_STATE_UNSPECIFIED:
        return None
    try:
        return State(pb.ReservationState.Name(value))
    except ValueError:
        raise InvalidArgument(f"state: unknown value {value}") from None


def state_out(state: State | None) -> int:
    """The enum value of a core `State`."""
    return pb.RESERVATION_STATE_UNSPECIFIED if state is None else pb.ReservationState.Value(state.value)


def path_out(path: Path) -> pb.Path:
    """A proto Path."""
    message = pb.Path(
        route=[path.src, *path.switches, path.dst],
        hops=[pb.Hop(switch=h.switch, in_port=h.in_port, out_port=h.out_port) for h in path.hops],
        links=list(path.links), hop_count=path.hop_count, free_bps=max(path.free_bps, 0),
        bottleneck=path.bottleneck,
    )
    if path.latency_ms is not None:
        message.latency_ms = path.latency_ms
    return message


def reservation_out(r: Reservation, history: list[HistoryEntry] | None = None) -> pb.Reservation:
    """A proto Reservation (with its `history` of changes when given: GetReservation)."""
    q = r.request
    message = pb.Reservation(
        name=r.name, id=r.id, owner=r.owner, source_dtn=q.src, destination_dtn=q.dst, bandwidth_bps=q.bandwidth,
        start_time=timestamp_out(q.start), policy=_POLICY_ENUM[q.policy], include=list(q.include),
        exclude=list(q.exclude), protect=q.protect, labels=dict(r.labels), request_id=r.request_id,
        state=state_out(r.state), state_reason=r.reason, create_time=timestamp_out(r.created),
        update_time=timestamp_out(r.updated),
    )
    if not math.isinf(q.end):
        message.end_time.CopyFrom(timestamp_out(q.end))
    if q.max_hops is not None:
        message.max_hops = q.max_hops
    if q.src_prefix is not None and q.dst_prefix is not None:
        message.src_prefix, message.dst_prefix = q.src_prefix, q.dst_prefix
    if q.src_vlan is not None:
        message.src_vlan = q.src_vlan
    if q.dst_vlan is not None:
        message.dst_vlan = q.dst_vlan
    if r.route is not None:
        message.path.CopyFrom(path_out(r.route.primary))
        if r.route.backup is not None:
            message.backup_path.CopyFrom(path_out(r.route.backup))
    if r.state is State.HELD:
        message.hold_expire_time.CopyFrom(timestamp_out(r.hold_until))
    message.provision = r.provisioned
    message.priority = r.priority
    message.ceiling_bps = r.ceiling
    message.share_bps = r.meter_bps
    message.schedule.extend(schedule_out(r.schedule))
    for entry in history or ():
        item = pb.ReservationHistory(time=timestamp_out(entry.time), state=state_out(entry.state),
                                     reason=entry.reason)
        if (decision := entry.decision) is not None:
            item.decision.CopyFrom(decision_out(decision))
        message.history.append(item)
    return message


def schedule_out(steps: Iterable[ScheduleStep]) -> list[pb.ScheduleStep]:
    """The proto steps of a schedule."""
    return [pb.ScheduleStep(start_time=timestamp_out(s.start), end_time=timestamp_out(s.end), bandwidth_bps=s.bandwidth)
            for s in steps]


def terms_in(request: pb.CreateReservationRequest) -> Terms:
    """The booking terms of a CreateReservationRequest (hold, provision, priority, ceiling)."""
    ceiling = bandwidth_in(request.ceiling_bps, "ceiling_bps") if request.ceiling_bps else 0
    return Terms(hold=request.hold, provision=not request.manual_provision, priority=request.priority,
                 ceiling=ceiling)


def event_out(event: Event) -> pb.ReservationEvent:
    """A proto ReservationEvent."""
    message = pb.ReservationEvent(
        sequence=event.sequence, time=timestamp_out(event.time), previous_state=state_out(event.previous),
        state=state_out(event.reservation.state), reason=event.reason, reservation=reservation_out(event.reservation),
    )
    if (decision := event.decision) is not None:
        message.decision.CopyFrom(decision_out(decision))
    return message


# -- decisions (out on the server, in on the clients: the demo runner, `tsdn path show`) -------------

_KIND_ENUM = {kind: pb.DecisionKind.Value(f"DECISION_{kind.name}") for kind in decisions.Kind}
_KINDS = {value: kind for kind, value in _KIND_ENUM.items()}
_WHY_ENUM = {why: pb.NotMovedReason.Value(f"NOT_MOVED_{why.name}") for why in decisions.Why}
_WHYS = {value: why for why, value in _WHY_ENUM.items()}
_PROTECTION_ENUM = {decisions.Protection.NONE: pb.PROTECTION_UNSPECIFIED,
                    decisions.Protection.STAYS: pb.PROTECTION_STAYS,
                    decisions.Protection.FAILS_OVER: pb.PROTECTION_FAILS_OVER}
_PROTECTIONS = {value: protection for protection, value in _PROTECTION_ENUM.items()}


def _measured_out(m: decisions.Measured) -> pb.MeasuredDirection:
    return pb.MeasuredDirection(direction=m.direction, link=m.link, capacity_bps=max(m.capacity_bps, 0),
                                measured_bps=m.measured_bps, unowned_bps=m.unowned_bps, reverse=m.reverse)


def _measured_in(m: pb.MeasuredDirection) -> decisions.Measured:
    return decisions.Measured(m.direction, m.link, m.capacity_bps, m.measured_bps, m.unowned_bps, m.reverse)


def _taken_out(p: decisions.PathTaken) -> pb.PathTaken:
    return pb.PathTaken(route=list(p.route), links=list(p.links))


def _taken_in(p: pb.PathTaken) -> decisions.PathTaken:
    return decisions.PathTaken(tuple(p.route), tuple(p.links))


def decision_out(d: Decision) -> pb.Decision:
    """A proto Decision, with its derived verdict and cause."""
    message = pb.Decision(kind=_KIND_ENUM[d.kind], why=_WHY_ENUM[d.why] if d.why is not None else 0,
                          displaced=[pb.Displacement(reservation=m.reservation, to=_taken_out(m.to))
                                     for m in d.displaced],
                          relieves=d.relieves, barred_links=list(d.barred), refusal=d.refusal, link=d.link,
                          link_up=d.link_up, note=d.note, trigger=d.trigger,
                          protection=_PROTECTION_ENUM[d.protection], verdict=d.verdict or "", cause=d.cause or "",
                          shares=[pb.ShareChange(reservation=c.reservation, before_bps=c.before_bps,
                                                 after_bps=c.after_bps, floor_bps=c.floor_bps,
                                                 ceiling_bps=c.ceiling_bps, priority=c.priority) for c in d.shares])
    if d.evidence is not None:
        e = d.evidence
        evidence = message.evidence
        evidence.achieved_bps, evidence.booked_bps, evidence.reports = e.achieved_bps, e.booked_bps, e.reports
        evidence.congested.extend(_measured_out(m) for m in e.congested)
        if e.busiest is not None:
            evidence.busiest.CopyFrom(_measured_out(e.busiest))
        evidence.unmeasured.extend(e.unmeasured)
        for field, value in (("retransmits", e.retransmits), ("rtt_ms", e.rtt_ms),
                             ("sender_cpu_percent", e.sender_cpu_percent)):
            if value is not None:
                setattr(evidence, field, value)
    if d.to is not None:
        message.to.CopyFrom(_taken_out(d.to))
    if d.on is not None:
        message.on.CopyFrom(_taken_out(d.on))
    if d.headroom_bps is not None:
        message.headroom_bps = max(d.headroom_bps, 0)
    if d.hold is not None:
        h = d.hold
        message.hold.CopyFrom(pb.Hold(moved_ago_seconds=h.moved_ago_s, hold_down_seconds=h.hold_down_s,
                                      moves=h.moves, window_seconds=h.window_s, budget=h.budget))
    return message


def decision_in(message: pb.Decision) -> Decision | None:
    """The core `Decision` of a proto one (None when unset or of a kind this client does not know)."""
    kind = _KINDS.get(message.kind)
    if kind is None:
        return None
    evidence = None
    if message.HasField("evidence"):
        e = message.evidence
        evidence = decisions.Evidence(
            e.achieved_bps, e.booked_bps, e.reports, tuple(_measured_in(m) for m in e.congested),
            _measured_in(e.busiest) if e.HasField("busiest") else None, tuple(e.unmeasured),
            e.retransmits if e.HasField("retransmits") else None, e.rtt_ms if e.HasField("rtt_ms") else None,
            e.sender_cpu_percent if e.HasField("sender_cpu_percent") else None)
    hold = None
    if message.HasField("hold"):
        h = message.hold
        hold = decisions.Hold(h.moved_ago_seconds, h.hold_down_seconds, h.moves, h.window_seconds, h.budget)
    return Decision(
        kind, _WHYS.get(message.why), evidence, _taken_in(message.to) if message.HasField("to") else None,
        message.headroom_bps if message.HasField("headroom_bps") else None,
        tuple(decisions.Displacement(m.reservation, _taken_in(m.to)) for m in message.displaced), message.relieves,
        hold, tuple(message.barred_links), message.refusal, message.link, message.link_up, message.note,
        message.trigger, _PROTECTIONS.get(message.protection, decisions.Protection.NONE),
        _taken_in(message.on) if message.HasField("on") else None,
        tuple(decisions.ShareChange(c.reservation, c.before_bps, c.after_bps, c.floor_bps, c.ceiling_bps, c.priority)
              for c in message.shares))


def _direction_out(book: ReservationBook, d: LinkDirection) -> topo_pb.LinkDirection:
    return topo_pb.LinkDirection(id=d.id, capacity_bps=d.capacity, booked_bps=book.booked_now(d.id))


def topology_out(book: ReservationBook) -> topo_pb.Topology:
    """The topology with bandwidth booked now; runs on the core's thread."""
    topology = book.topology
    message = topo_pb.Topology(name=topology.name, description=topology.spec.description,
                               time=timestamp_out(book.clock.now()))
    for s in topology.spec.switches:
        site = topology.site_of(s.name)
        message.switches.append(
            topo_pb.Switch(name=s.name, dpid=s.dpid, ports=s.ports, site=site.name if site else ""))
    for link in topology.spec.links:
        forward, backward = topology.link_directions[link.label]
        entry = topo_pb.Link(name=link.label, a_switch=link.a, a_port=link.a_port, b_switch=link.b,
                             b_port=link.b_port, kind=link.kind, a_to_b=_direction_out(book, forward),
                             b_to_a=_direction_out(book, backward))
        if link.latency_ms is not None:
            entry.latency_ms = link.latency_ms
        message.links.append(entry)
    for dtn in topology.spec.dtns:
        up, down = topology.access(dtn.name)
        message.dtns.append(topo_pb.Dtn(name=dtn.name, switch=dtn.switch, port=dtn.port, ipv4=dtn.ipv4, mac=dtn.mac,
                                        nic_speed_bps=dtn.nic_speed, numa_node=dtn.numa_node,
                                        uplink=_direction_out(book, up), downlink=_direction_out(book, down)))
    for site in topology.spec.sites:
        entry = topo_pb.Site(name=site.name, kind=site.kind, switches=site.switches)
        if site.lat is not None and site.lon is not None:
            entry.lat, entry.lon = site.lat, site.lon
        message.sites.append(entry)
    return message


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
