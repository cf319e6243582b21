"""SENSE intents: terminals named by URN, a `dnc` connection, service profiles edited by path, and the
QoS classes mapped onto the book's guaranteed and elastic reservations.

A terminal is a DTN of this network, named `urn:ogf:network:DOMAIN:DTN` (DOMAIN: `--domain`, DNS
style). An intent is either a `dnc` service (`{"service": "dnc", "data": {"connections": [...]}}`)
or a stored service profile (`service_profile_uuid`) whose template the intent's `edit` queries
change path by path (`data.connections[0].bandwidth.capacity`), as the Rucio-SENSE DMM sends it.
Either way it resolves to one `Connection`: two terminals, optionally one IPv6 prefix each (the
prefixes the SENSE address pools handed out: the reservation's flows match them), a QoS class and
a capacity in Mbit/s (SENSE's unit), and a schedule.

QoS classes (docs/sense.md), with `line` the slower of the two DTNs' NICs:

| class | the book's reservation |
| --- | --- |
| guaranteedCapped | guaranteed: `capacity` booked, the meter at `capacity` |
| softCapped | elastic: floor `capacity` (booked), ceiling `line`, the caller's priority |
| bestEffort | elastic: floor 1 Mbit/s, ceiling `capacity`, priority 1 (the lowest) |
| anyAvailable | elastic: floor 1 Mbit/s, ceiling `line`, priority 1; `capacity` ignored |

Everything here is pure and checks every field before anything is booked: a malformed intent is
`InvalidArgument` naming the field (`data.connections[0].terminals[1].uri: ...`), an unknown
terminal `NotFound`.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from sdn_app.core import validation
from sdn_app.core.errors import InvalidArgument, NotFound
from sdn_app.core.reservation import Terms
from sdn_app.core.topology import Topology
from sdn_app.core.units import MAX_BANDWIDTH, parse_duration, parse_time
from sdn_app.core.validation import shown

MBPS = 10**6  # SENSE writes capacities in Mbit/s
QOS_CLASSES = ("guaranteedCapped", "softCapped", "bestEffort", "anyAvailable")
ELASTIC_FLOOR = MBPS  # what bestEffort and anyAvailable book: 1 Mbit/s
BEST_EFFORT_PRIORITY = 1  # bestEffort and anyAvailable share spare capacity at the lowest weight
MAX_ALIAS = 256
MAX_QUERIES = 32
MAX_OPTIONS = 64
MAX_VALUE = 1024  # characters of one edited value
MAX_PATH = 256  # characters of one edit path
MAX_EDIT_ENTRIES = 64  # editable paths a profile lists
MAX_DEPTH = 32  # lists and objects nested in an intent or a profile's template
_PATH_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[\d{1,4}\])*)")
_INDEX = re.compile(r"\[(\d{1,4})\]")


class Urns:
    """The URNs of one network: `urn:ogf:network:DOMAIN` (the root) and `...:DOMAIN:DTN` (terminals)."""

    def __init__(self, domain: str, topology: Topology):
        self.domain = domain
        self.topology = topology
        self.root = f"urn:ogf:network:{domain}"

    def of(self, dtn: str) -> str:
        """The URN of DTN `dtn`."""
        return f"{self.root}:{dtn}"

    def dtn(self, uri: str, field: str = "uri") -> str:
        """The DTN a terminal URN names (exactly `urn:ogf:network:DOMAIN:DTN`); `InvalidArgument` for
        something that is no such URN, `NotFound` for a DTN this network does not have."""
        if not isinstance(uri, str) or not uri:
            raise InvalidArgument(f"{field}: a terminal URN like {self.of('DTN')}, got {shown(uri)}")
        if len(uri) > 512:
            raise InvalidArgument(f"{field}: {len(uri)} characters; a terminal URN has at most 512")
        prefix = self.root + ":"
        if not uri.lower().startswith(prefix.lower()):
            raise NotFound(f"{field}: {shown(uri)} is not in this network ({self.root}); terminals are "
                           f"{self.of('DTN')}")
        name = uri[len(prefix):]
        if name not in self.topology.dtns:
            known = ", ".join(sorted(self.topology.dtns)[:8])
            raise NotFound(f"{field}: {shown(uri)}: {shown(name)} is not a DTN of this network (DTNs: {known}"
                           f"{', ...' if len(self.topology.dtns) > 8 else ''})")
        return name

    def under(self, uri: str) -> str | None:
        """The DTN whose URN `uri` is or lies under (`URN:...`); None when it names none."""
        prefix = self.root.lower() + ":"
        if not uri.lower().startswith(prefix):
            return None
        rest = uri[len(prefix):]
        for dtn in sorted(self.topology.dtns, key=len, reverse=True):
            if rest == dtn or rest.startswith(dtn + ":"):
                return dtn
        return None


@dataclass(frozen=True)
class Terminal:
    """One end of a connection: a DTN, its URN, and the IPv6 prefix its traffic uses (None: the
    DTN's own IPv4 address)."""

    uri: str
    dtn: str
    prefix: str | None = None
    vlan_tag: str = ""  # as the intent gave it; tsdn has no VLANs and ignores it

    def as_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "dtn": self.dtn, "prefix": self.prefix, "vlan_tag": self.vlan_tag}


@dataclass(frozen=True)
class Connection:
    """What an intent asks for: `capacity` bits/s of class `qos_class` from `src` to `dst` in
    [start, end) (`end` inf: until cancelled)."""

    name: str
    src: Terminal
    dst: Terminal
    qos_class: str
    capacity: int  # bits/s; 0 for anyAvailable without a capacity
    start: float
    end: float

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "src": self.src.as_json(), "dst": self.dst.as_json(), "qos_class": self.qos_class,
                "capacity": self.capacity, "start": self.start, "end": None if math.isinf(self.end) else self.end}

    def same_traffic(self, other: Connection) -> bool:
        """Whether `other` is between the same terminals with the same prefixes."""
        return (self.src.dtn, self.dst.dtn, self.src.prefix, self.dst.prefix) == \
            (other.src.dtn, other.dst.dtn, other.src.prefix, other.dst.prefix)


@dataclass(frozen=True)
class Booking:
    """What the book is asked for a connection: the bandwidth booked (an elastic one's floor) and
    the terms (ceiling: elastic up to it; priority 0: the caller's own)."""

    bandwidth: int
    ceiling: int
    priority: int

    def terms(self, hold: bool = False) -> Terms:
        return Terms(hold=hold, ceiling=self.ceiling, priority=self.priority)


def line_rate(topology: Topology, connection: Connection) -> int:
    """The slower of the two DTNs' NICs (what `softCapped` and `anyAvailable` may reach)."""
    return min(topology.dtn(connection.src.dtn).nic_speed, topology.dtn(connection.dst.dtn).nic_speed)


def booking_for(connection: Connection, topology: Topology) -> Booking:
    """The QoS class mapped onto a guaranteed or an elastic reservation (the module's table)."""
    line = line_rate(topology, connection)
    capacity = connection.capacity
    if connection.qos_class == "guaranteedCapped":
        return Booking(capacity, 0, 0)
    if connection.qos_class == "softCapped":
        # beyond the NICs nothing is left to share: the book refuses what the DTNs cannot carry
        return Booking(capacity, line, 0) if capacity < line else Booking(capacity, 0, 0)
    if connection.qos_class == "bestEffort":
        floor = min(ELASTIC_FLOOR, capacity)
        return Booking(floor, capacity, BEST_EFFORT_PRIORITY) if capacity > floor else \
            Booking(floor, 0, BEST_EFFORT_PRIORITY)
    return Booking(ELASTIC_FLOOR, line, BEST_EFFORT_PRIORITY) if line > ELASTIC_FLOOR else \
        Booking(line, 0, BEST_EFFORT_PRIORITY)


def elastic_for(connection: Connection, topology: Topology) -> bool:
    """Whether the connection's class books an elastic reservation."""
    return booking_for(connection, topology).ceiling > 0


# -- reading intents -----------------------------------------------------------------------


def _object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{field}: expected a JSON object, got {shown(value)}")
    return value


def _list(value: Any, field: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgument(f"{field}: expected a JSON list, got {shown(value)}")
    if len(value) > limit:
        raise InvalidArgument(f"{field}: {len(value)} entries; at most {limit}")
    return value


def _string(value: Any, field: str, limit: int = MAX_VALUE, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidArgument(f"{field}: expected text, got {shown(value)}")
    text = value if isinstance(value, str) else str(value)
    if required and not text.strip():
        raise InvalidArgument(f"{field}: required")
    if len(text) > limit:
        raise InvalidArgument(f"{field}: {len(text)} characters; at most {limit}")
    return text


@dataclass(frozen=True)
class Query:
    """One of an intent's `queries`: what it `asks` and its `options`."""

    ask: str
    options: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class Intent:
    """An intent as sent: a dnc `data` or a profile to edit, its queries, its alias."""

    data: Mapping[str, Any] | None  # the dnc service's data (None: from the profile)
    profile: str  # a service profile's uuid or name ("": none)
    queries: tuple[Query, ...]
    alias: str

    def as_json(self) -> dict[str, Any]:
        """The intent as tsdn keeps it (what it read of it, nothing else)."""
        out: dict[str, Any] = {"alias": self.alias,
                               "queries": [{"ask": q.ask, "options": [dict(o) for o in q.options]}
                                           for q in self.queries]}
        if self.data is not None:
            out["service"] = "dnc"
            out["data"] = copy.deepcopy(dict(self.data))
        if self.profile:
            out["service_profile_uuid"] = self.profile
        return out


def check_depth(value: Any, field: str, limit: int = MAX_DEPTH) -> None:
    """Refuse JSON nested deeper than `limit` lists and objects (what is kept of it is copied and
    written back, recursively)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                raise InvalidArgument(f"{field}: lists and objects nested more than {limit} deep")
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))


def read_intent(body: Any) -> Intent:
    """An intent's JSON body, checked for shape (the connection is read by `resolve`)."""
    body = _object(body, "intent")
    check_depth(body, "intent")
    profile = body.get("service_profile_uuid", body.get("profileID"))
    profile = _string(profile, "service_profile_uuid", 128) if profile is not None else ""
    data = body.get("data")
    if data is not None and profile:
        raise InvalidArgument("intent: give either data (a dnc service) or service_profile_uuid (a profile to "
                              "edit), not both")
    if data is None and not profile:
        raise InvalidArgument("intent: give data (a dnc service: {\"service\": \"dnc\", \"data\": {\"connections\": "
                              "[...]}}) or a service_profile_uuid with edit queries")
    if data is not None:
        service = body.get("service", "dnc")
        if service != "dnc":
            raise InvalidArgument(f"service: {shown(service)}: tsdn provides the dnc service (data network "
                                  "connections) only")
        data = _object(data, "data")
    alias = _string(body.get("alias"), "alias", MAX_ALIAS)
    queries = []
    for i, raw in enumerate(_list(body.get("queries", []), "queries", MAX_QUERIES)):
        raw = _object(raw, f"queries[{i}]")
        ask = _string(raw.get("ask"), f"queries[{i}].ask", 64, required=True)
        options = _list(raw.get("options", []), f"queries[{i}].options", MAX_OPTIONS)
        queries.append(Query(ask, tuple(_object(o, f"queries[{i}].options[{j}]") for j, o in enumerate(options))))
    return Intent(data, profile, tuple(queries), alias)


@dataclass(frozen=True)
class EditRule:
    """A path a profile lets intents edit, and the values it accepts (`valid`: a regular expression
    the whole value must match; empty: any)."""

    path: str
    valid: str = ""
    description: str = ""


def read_edit_rules(value: Any, field: str = "edit") -> tuple[EditRule, ...]:
    """A profile's `edit` list: [{"path": ..., "valid": ..., "description": ...}]."""
    rules = []
    for i, raw in enumerate(_list(value if value is not None else [], field, MAX_EDIT_ENTRIES)):
        raw = _object(raw, f"{field}[{i}]")
        path = _string(raw.get("path"), f"{field}[{i}].path", MAX_PATH, required=True)
        edit_path(path, f"{field}[{i}].path")
        valid = _string(raw.get("valid"), f"{field}[{i}].valid", 256)
        if valid:
            try:
                re.compile(valid)
            except re.error as error:
                raise InvalidArgument(f"{field}[{i}].valid: {shown(valid)} is not a regular expression: "
                                      f"{error}") from None
        rules.append(EditRule(path, valid, _string(raw.get("description"), f"{field}[{i}].description", 1024)))
    return tuple(rules)


def edit_path(path: str, field: str) -> list[str | int]:
    """`data.connections[0].bandwidth.capacity` as keys and list indices."""
    if len(path) > MAX_PATH:
        raise InvalidArgument(f"{field}: {len(path)} characters; at most {MAX_PATH}")
    steps: list[str | int] = []
    for part in path.split("."):
        match = _PATH_PART.fullmatch(part)
        if match is None:
            raise InvalidArgument(f"{field}: {shown(path)} is not a path like data.connections[0].bandwidth.capacity")
        steps.append(match[1])
        steps.extend(int(i) for i in _INDEX.findall(match[2]))
    return steps


def apply_edits(template: Mapping[str, Any], queries: Sequence[Query], rules: Sequence[EditRule],
                editable: bool, profile: str) -> dict[str, Any]:
    """A copy of a profile's `template` with every `edit` query applied in order. A profile that
    is not `editable` accepts edits only at the paths its `rules` list (each value matching the
    rule's `valid`); an editable one at any path under `data` or `alias`."""
    result = copy.deepcopy(dict(template))
    allowed = {rule.path: rule for rule in rules}
    for i, query in enumerate(queries):
        if query.ask != "edit":
            continue
        for j, option in enumerate(query.options):
            for path, value in option.items():
                field = f"queries[{i}].options[{j}]"
                steps = edit_path(path, f"{field}: path")
                if isinstance(value, dict | list):
                    raise InvalidArgument(f"{field}: {path}: expected a single value, got {shown(value)}")
                text = _string(value, f"{field}: {path}")
                rule = allowed.get(path)
                if not editable and rule is None:
                    paths = ", ".join(sorted(allowed)) or "none"
                    raise InvalidArgument(f"{field}: {path}: profile {profile} lets intents edit only {paths}")
                if editable and steps[0] not in ("data", "alias"):
                    raise InvalidArgument(f"{field}: {path}: only paths under data (or alias) can be edited")
                if rule is not None and rule.valid and re.fullmatch(rule.valid, text) is None:
                    raise InvalidArgument(f"{field}: {path}: {shown(text)} does not match {shown(rule.valid)}, the "
                                          f"values profile {profile} accepts there")
                _set(result, steps, value, f"{field}: {path}")
    return result


def _set(root: dict[str, Any], steps: list[str | int], value: Any, field: str) -> None:
    """Set the value at `steps` in `root`; missing keys become objects, list indices must exist."""
    node: Any = root
    for here, step in enumerate(steps):
        last = here == len(steps) - 1
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                have = len(node) if isinstance(node, list) else "no list"
                raise InvalidArgument(f"{field}: index [{step}] is not in the template ({have} entries)")
            if last:
                node[step] = value
            else:
                node = node[step]
            continue
        if not isinstance(node, dict):
            raise InvalidArgument(f"{field}: {step} is under something that is not an object in the template")
        if last:
            node[step] = value
        else:
            node = node.setdefault(step, {} if not isinstance(steps[here + 1], int) else [])


def resolve(data: Any, urns: Urns, now: float) -> Connection:
    """The one connection of a dnc `data`: checked field by field."""
    data = _object(data, "data")
    connections = _list(data.get("connections"), "data.connections", 16)
    if len(connections) != 1:
        raise InvalidArgument(f"data.connections: {len(connections)} connections; tsdn makes one connection per "
                              "instance (two terminals): create one instance per connection")
    raw = _object(connections[0], "data.connections[0]")
    where = "data.connections[0]"
    for unsupported in ("path_tprofile",):
        if raw.get(unsupported):
            raise InvalidArgument(f"{where}.{unsupported}: not supported by tsdn (routes follow tsdn's own path "
                                  "policy); leave it out")
    name = _string(raw.get("name"), f"{where}.name", 128) or "Connection 1"
    terminals = _list(raw.get("terminals"), f"{where}.terminals", 8)
    if len(terminals) != 2:
        raise InvalidArgument(f"{where}.terminals: {len(terminals)} terminals; a connection joins exactly two "
                              "(source first, then destination)")
    ends = [_terminal(t, f"{where}.terminals[{i}]", urns) for i, t in enumerate(terminals)]
    if ends[0].dtn == ends[1].dtn:
        raise InvalidArgument(f"{where}.terminals: both terminals are {ends[0].dtn}; a connection joins two DTNs")
    if (ends[0].prefix is None) != (ends[1].prefix is None):
        missing = 1 if ends[1].prefix is None else 0
        raise InvalidArgument(f"{where}.terminals[{missing}].ipv6_prefix_list: required when the other terminal "
                              "has one; give both terminals a prefix, or neither")
    if ends[0].prefix is not None and ends[1].prefix is not None:
        validation.prefix_pair(ends[0].prefix, ends[1].prefix)
    qos_class, capacity = _bandwidth(raw.get("bandwidth"), f"{where}.bandwidth")
    start, end = _schedule(raw.get("schedule"), f"{where}.schedule", now)
    return Connection(name, ends[0], ends[1], qos_class, capacity, start, end)


def _terminal(value: Any, field: str, urns: Urns) -> Terminal:
    raw = _object(value, field)
    uri = _string(raw.get("uri"), f"{field}.uri", 512, required=True)
    dtn = urns.dtn(uri, f"{field}.uri")
    prefix = None
    listed = _string(raw.get("ipv6_prefix_list"), f"{field}.ipv6_prefix_list", 512).strip()
    if listed:
        prefixes = [p.strip() for p in listed.split(",") if p.strip()]
        if len(prefixes) != 1:
            raise InvalidArgument(f"{field}.ipv6_prefix_list: {len(prefixes)} prefixes; tsdn matches one prefix "
                                  "per terminal (the /64 allocated for the rule)")
        prefix = validation.ipv6_prefix(prefixes[0], f"{field}.ipv6_prefix_list")
    if raw.get("ipv4_prefix_list"):
        raise InvalidArgument(f"{field}.ipv4_prefix_list: not supported: without IPv6 prefixes the connection "
                              "carries the DTNs' own IPv4 addresses; leave it out")
    vlan = _string(raw.get("vlan_tag"), f"{field}.vlan_tag", 64)
    return Terminal(uri, dtn, prefix, vlan)


def _bandwidth(value: Any, field: str) -> tuple[str, int]:
    if value is None:
        return "anyAvailable", 0
    raw = _object(value, field)
    qos_class = _string(raw.get("qos_class"), f"{field}.qos_class", 32) or "guaranteedCapped"
    if qos_class not in QOS_CLASSES:
        raise InvalidArgument(f"{field}.qos_class: {shown(qos_class)} is not one of {', '.join(QOS_CLASSES)}")
    given = raw.get("capacity")
    if given is None or given == "":
        if qos_class == "anyAvailable":
            return qos_class, 0
        raise InvalidArgument(f"{field}.capacity: required for {qos_class} (Mbit/s, e.g. \"40000\" for 40 Gbit/s)")
    return qos_class, capacity_bps(given, f"{field}.capacity")


def capacity_bps(value: Any, field: str) -> int:
    """A SENSE capacity (Mbit/s: "40000" is 40 Gbit/s; a number or its text) in bits/s."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidArgument(f"{field}: Mbit/s as a number, e.g. \"40000\" for 40 Gbit/s; got {shown(value)}")
    text = str(value).strip()
    if len(text) > 32:
        raise InvalidArgument(f"{field}: {shown(text)} is too long to be a capacity")
    try:
        mbps = Decimal(text)
    except InvalidOperation:
        raise InvalidArgument(f"{field}: {shown(value)} is not a number of Mbit/s (e.g. \"40000\" for 40 Gbit/s)") \
            from None
    if not mbps.is_finite() or mbps <= 0:
        raise InvalidArgument(f"{field}: {shown(value)}: a capacity is a positive number of Mbit/s")
    bps = int(mbps * MBPS)
    if bps < 1 or bps > MAX_BANDWIDTH:
        raise InvalidArgument(f"{field}: {shown(value)} Mbit/s is outside 0.000001 to {MAX_BANDWIDTH // MBPS} Mbit/s")
    return bps


def _schedule(value: Any, field: str, now: float) -> tuple[float, float]:
    if value is None:
        return now, math.inf
    raw = _object(value, field)
    start_text = raw.get("start")
    start = now if start_text in (None, "") else parse_time(_string(start_text, f"{field}.start", 64), now,
                                                             f"{field}.start")
    start = max(start, now)
    end_text, duration = raw.get("end"), raw.get("duration")
    if end_text not in (None, "") and duration not in (None, ""):
        raise InvalidArgument(f"{field}: give end or duration, not both")
    if end_text not in (None, ""):
        end = parse_time(_string(end_text, f"{field}.end", 64), start, f"{field}.end")
    elif duration not in (None, ""):
        end = start + parse_duration(_string(duration, f"{field}.duration", 64), f"{field}.duration")
    else:
        end = math.inf
    if end <= start:
        raise InvalidArgument(f"{field}.end: before its start")
    return start, end
