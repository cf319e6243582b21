"""Flow plans: what one reservation needs on the switches, as plain data, and how to get there.

`plan_for` turns a reservation (id, two DTNs, a `Route`, a bandwidth) into a `FlowPlan`: the
flow, meter and group specs of every switch it touches. `plan_steps` turns a change from one
plan to the next (install, move, release) into an ordered list of `Step`s, make-before-break,
with barriers at phase boundaries. The OpenFlow adapter encodes specs and steps as OpenFlow 1.3
messages; nothing here imports os-ken (Faucet's `valve_of.py` lesson: one place for the wire
format, decisions elsewhere). `tests/flowtable.py` applies steps to simulated tables and traces
packets through them.

What a plan holds (all in table 0; the adapter installs the table-miss drop, not the plan):
- Flows for both directions of the DTN pair: the booked direction A->B ("forward", priority
  `PRIORITY`) and the reverse B->A ("reverse", priority `REVERSE_PRIORITY`, carrying acks).
  Each matches `in_port` and the direction's traffic, so packets of any other pair or
  reservation, spoofed sources and packets arriving on an unexpected port fall through to
  the table-miss drop (default deny). The traffic is either
  - (a reservation without prefixes) IPv4 from the source DTN's address to the destination
    DTN's (`ipv4_src`, `ipv4_dst`, both exact), with an ARP twin of every flow (eth_type
    0x0806, the same addresses as ARP sender and target, no meter): the DTNs' own ARP
    follows the reserved hops, so it needs no controller; or
  - (a reservation with `src_prefix` and `dst_prefix`, IPv6 networks) IPv6 (eth_type 0x86dd)
    from the direction's source prefix to its destination prefix (`ipv6_src`, `ipv6_dst`,
    both under the prefix's mask; any next header), with a neighbour-solicitation twin of
    every flow: ICMPv6 (`ip_proto` 58) type 135 from the direction's source prefix to the
    solicited-node range ff02::1:ff00:0/104 (`SOLICITED_NODE`), no meter. The answers
    (neighbour advertisements, unicast to the asker) are ordinary traffic of the other
    direction. Such a reservation has no IPv4 or ARP flows: the prefixes are what tells
    its traffic apart, so several reservations between the same two DTNs (one per Rucio
    rule, say) coexist, and so does one without prefixes between them.
  The two priorities differ so that a reservation A->B and another B->A can coexist: the
  booked direction of one wins over the ack direction of the other on the switches they
  share, and their flow keys never collide. What would collide (`clash`): two reservations
  without prefixes for the same ordered pair, and two with prefixes where one's prefix
  overlaps the other's, unless they are the two directions of one DTN pair; the core must
  not hold both at once.
- Meters: on A's switch, applied by the ingress flow of A->B, at the booked rate; on B's
  switch, applied by the ingress flow of B->A, at `reverse_rate(bandwidth)`: 5 % of the
  booking (`REVERSE_PERCENT`), at least 1 Mbit/s (`REVERSE_MIN_BPS`). The reverse direction
  is not booked in the ledger; its meter keeps acks from turning into unbooked bulk traffic.
  Burst: `BURST_MS` (10 ms) of traffic at the rate, at least `MIN_BURST_BITS`. The adapter
  encodes rates in kbit/s (OFPMF_KBPS | OFPMF_BURST, one drop band).
- Cookies: `reservation_cookie(id)` = the 16-bit tag `COOKIE_TAG_VALUE` (0x75D5) in the top
  bits and the low 48 bits of the 128-bit reservation id below. Every tsdn flow is found
  with cookie=`COOKIE_TAG`, cookie_mask=`COOKIE_MASK`; one reservation's with its cookie
  and an all-ones mask. Two ids sharing their low 48 random bits would share a cookie (odds
  about 1 in 3e7 among 4096 live reservations); the core may check for that when it makes ids.

Protection (route.backup not None): end-to-end, working with the controller stopped, for any
single failed link of the primary. Per direction, with primary switches p0 (ingress) .. pn
(egress) and the link-disjoint backup q0 = p0 .. qm = pn:
- p0: the ingress flow outputs to a fast-failover group: bucket 1 watches the primary out-port
  and outputs there, bucket 2 watches the backup out-port and outputs there.
- pi (0 < i < n): the flow for the primary in-port outputs to a fast-failover group: bucket 1
  watches and outputs to the primary out-port; bucket 2 watches the in-port and outputs
  `IN_PORT` (crankback: the packet goes back the way it came).
- crankback flows: at pi (0 < i < n), packets arriving on the primary out-port (sent back from
  downstream) go out the primary in-port, further back; at p0 they go out the backup
  out-port. Plain outputs, no groups.
- pn: plain output to the DTN; the backup's switches q1 .. qm: plain outputs along the backup.
Backup flows never send a packet back and crankback only moves toward p0, where it turns
onto the backup: a packet visits each (switch, in-port) at most once, so with one primary and
one backup link down packets are dropped (a dead group or a dead port), never looped. A
backup may share switches (not links) with the primary: its flows match the backup's own
in-ports there, so the keys differ. The backup's links carry traffic only after a failure.

Ids: meter ids and group ids must be unique per switch across reservations. `IdAllocator` (one,
owned by the core, pure and deterministic) hands them out: a preferred id derived from the
reservation's cookie bits and what the id is for, then the next free one upward (wrapping)
when another reservation holds it. Meters are keyed by (switch, reservation, direction), so a
move reuses the meter (a rate change is a MODIFY_METER); groups are keyed by (switch,
reservation, buckets), so a group whose buckets change gets a new id and the flow using it is
modified to point there (groups are never modified in place: a changed group would reroute
traffic before its downstream is ready). Ids are limited to 1..`DEFAULT_MAX_METER_ID` meters
(OVS refuses meter ids above its max_meters; hardware has a few thousand) and
1..`DEFAULT_MAX_GROUP_ID` groups; the adapter may build the allocator with the limits the
switches report. `plan_for` without an allocator uses a throwaway one: right for one
reservation, not for several sharing switches. After a restart, `IdAllocator.adopt` re-seats
the ids of the plans the core recomputes or stored.

Steps (`plan_steps`), each phase closed by a BARRIER on the switches it touched:
1. add new meters (and modify meters whose rate changed), add new groups;
2. add flows with new keys, except the ingress flows, downstream first: nothing in use yet
   matches a new key, so these change no traffic (in phase 1 when none of them uses a meter or
   group added there);
3. modify flows whose key is in use (same switch, in-port, addresses; new action), except
   the ingress flows, in waves by `stage` (distance from the egress along the flow's
   dependencies), a barrier after each wave: when a flow changes, everything downstream of
   it in the new plan is already in place, so traffic never meets a missing hop even if the
   switches apply a wave's messages in any order;
4. the ingress flows (A's switch for A->B, B's switch for B->A): now traffic takes the new path;
5. delete the old plan's flows the new plan does not have;
6. delete its groups and meters (after their flows: deleting a group or meter removes the
   flows that use it).
The spec's three-barrier order (prepare, ingress, clean up) is kept; the extra barriers split
it where OpenFlow would otherwise be free to reorder dependent messages. Unchanged specs give
no steps; an unchanged plan gives none at all.

Moving while a primary link is down (traffic on crankback and backup) keeps traffic flowing
when the new route and its backup avoid the failed link (tested); a new route whose backup
crosses the failed link can lose traffic mid-move (a shared switch's failover group becomes a
plain backup output into the dead link), so the advisor must exclude down links from both.

Open: the reverse direction's ack bandwidth is not booked in the ledger; one reservation
without prefixes per ordered DTN pair at a time; per-packet consistency during a move (a
version tag pushed at the ingress) is not attempted: packets in flight on the old route when
its last flows are deleted may be lost.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from sdn_app.core import validation
from sdn_app.core.errors import InvalidArgument, NoCapacity
from sdn_app.core.paths import Hop, Path, PathRequest, Route
from sdn_app.core.topology import Topology

IN_PORT = 0xFFFFFFF8  # OFPP_IN_PORT: output the packet back out the port it came in on
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV6 = 0x86DD
IP_PROTO_ICMPV6 = 58
ICMPV6_NEIGHBOR_SOLICITATION = 135
SOLICITED_NODE = "ff02::1:ff00:0/104"  # the solicited-node multicast addresses (RFC 4291)
TABLE_ID = 0
PRIORITY = 1000  # the booked direction A->B
REVERSE_PRIORITY = 900  # the ack direction B->A; below PRIORITY so a booking B->A wins

COOKIE_TAG_VALUE = 0x75D5
COOKIE_TAG = COOKIE_TAG_VALUE << 48
COOKIE_MASK = 0xFFFF << 48
COOKIE_ID_MASK = (1 << 48) - 1
# A shared path's entries (`label_plans`): the tag, then these 32 bits, then the 16-bit label.
# The core never gives a reservation an id whose low 48 bits start so (`is_path_cookie_bits`).
PATH_COOKIE_BITS = 0xFFFF_FFFF_0000
PATH_COOKIE_MASK = 0xFFFF_FFFF_0000

PATH_OWNER = "path-"  # ids owned by a shared path are held by "path-<label>"
UNTAGGED = 0  # `Match.vlan_vid` of a frame that carries no VLAN tag (OpenFlow's OFPVID_NONE)
MAX_LABEL = 4094  # VLAN ids 1..4094 (0 is "no VLAN", 4095 reserved)

REVERSE_PERCENT = 5
REVERSE_MIN_BPS = 1_000_000
BURST_MS = 10
MIN_BURST_BITS = 1_000_000

DEFAULT_MAX_METER_ID = 1024
DEFAULT_MAX_GROUP_ID = 65535
GROUP_TYPE_FF = "ff"

FORWARD = "forward"
REVERSE = "reverse"

# What a flow does in its direction; `plan_steps` handles INGRESS flows in their own phase.
INGRESS = "ingress"  # on the source's switch, matching the source DTN's port (metered)
TRANSIT = "transit"  # along the primary path
EGRESS = "egress"  # on the destination's switch, out to the DTN
CRANKBACK = "crankback"  # packets sent back from downstream after a failure
BACKUP = "backup"  # along the backup path

_RESERVATION_ID = re.compile(r"^[0-9a-f]{32}$")


# --- cookies ---------------------------------------------------------------------------------


def reservation_cookie(reservation_id: str) -> int:
    """Return the 64-bit cookie of the flows of reservation `reservation_id` (32 hex digits).

    >>> hex(reservation_cookie("0123456789abcdef0123456789abcdef"))
    '0x75d5456789abcdef'
    """
    if not isinstance(reservation_id, str) or not _RESERVATION_ID.fullmatch(reservation_id):
        raise InvalidArgument(f"reservation id: {reservation_id!r} is not 32 lowercase hex digits")
    return COOKIE_TAG | (int(reservation_id, 16) & COOKIE_ID_MASK)


def path_cookie(label: int) -> int:
    """The 64-bit cookie of the shared entries of the path with VLAN label `label`."""
    if not 1 <= label <= MAX_LABEL:
        raise ValueError(f"label {label} is not a VLAN id 1..{MAX_LABEL}")
    return COOKIE_TAG | PATH_COOKIE_BITS | label


def is_path_cookie_bits(low48: int) -> bool:
    """Whether 48 cookie bits are those of a path's entries (a reservation id must avoid them)."""
    return low48 & PATH_COOKIE_MASK == PATH_COOKIE_BITS


def is_tsdn_cookie(cookie: int) -> bool:
    """Whether a flow's `cookie` carries the tsdn tag (the flow was installed by tsdn)."""
    return 0 <= cookie < 1 << 64 and cookie & COOKIE_MASK == COOKIE_TAG


def reverse_rate(bandwidth_bps: int) -> int:
    """The meter rate of the unbooked ack direction: 5 % of the booking, at least 1 Mbit/s."""
    return max(bandwidth_bps * REVERSE_PERCENT // 100, REVERSE_MIN_BPS)


def burst_bits(rate_bps: int) -> int:
    """A meter's burst: `BURST_MS` of traffic at `rate_bps`, at least `MIN_BURST_BITS`."""
    return max(rate_bps * BURST_MS // 1000, MIN_BURST_BITS)


# --- specs -----------------------------------------------------------------------------------


def _port(port: int) -> str:
    return "IN_PORT" if port == IN_PORT else str(port)


@dataclass(frozen=True, slots=True, kw_only=True)
class Match:
    """What a flow matches; a field left None is a wildcard.

    For ARP (`eth_type` 0x0806) the two IPv4 addresses match the ARP sender and target
    protocol addresses (OpenFlow's arp_spa and arp_tpa) instead of the IPv4 header. For IPv6
    (`eth_type` 0x86dd) `ipv6_src` and `ipv6_dst` are networks in canonical text
    (`2001:db8:1:2::/64`: the address under the prefix's mask; a /128 is one exact address),
    `ip_proto` the next header and `icmpv6_type` the ICMPv6 type (with `ip_proto` 58).
    """

    in_port: int | None = None
    eth_type: int | None = ETH_TYPE_IPV4  # None: any (a path label's entries carry every kind)
    ipv4_src: str | None = None
    ipv4_dst: str | None = None
    ip_proto: int | None = None
    ipv6_src: str | None = None
    ipv6_dst: str | None = None
    icmpv6_type: int | None = None
    vlan_vid: int | None = None  # `UNTAGGED` (no tag), a VLAN id (a path label), None: any
    metadata: int | None = None  # the pipeline metadata a classifier wrote (exact), None: any

    def describe(self) -> str:
        """`in_port=3 ip 10.0.0.1->10.0.0.4` (or `in_port=3 ipv6 2001:db8:1:1::/64->... icmpv6_type=135`)
        for messages."""
        parts = [] if self.in_port is None else [f"in_port={self.in_port}"]
        if self.vlan_vid is not None:
            parts.append("untagged" if self.vlan_vid == UNTAGGED else f"label={self.vlan_vid}")
        if self.metadata is not None:
            parts.append(f"metadata={self.metadata:#x}")
        if self.eth_type is None:
            return " ".join(parts) or "any"
        if self.eth_type == ETH_TYPE_IPV6:
            parts.append("ipv6")
            if self.ip_proto is not None:
                parts.append(f"ip_proto={self.ip_proto}")
            parts.append(f"{self.ipv6_src or '*'}->{self.ipv6_dst or '*'}")
            if self.icmpv6_type is not None:
                parts.append(f"icmpv6_type={self.icmpv6_type}")
            return " ".join(parts)
        parts.append("ip" if self.eth_type == ETH_TYPE_IPV4 else f"eth_type=0x{self.eth_type:04x}")
        parts.append(f"{self.ipv4_src or '*'}->{self.ipv4_dst or '*'}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSpec:
    """One flow entry: on `switch` (`dpid`), table `table_id`, `priority`, `match`, `cookie`.

    The action is exactly one of `output` (a port, or `IN_PORT`), `group_id` and `goto_table`;
    `meter_id`, when set, is applied first. Before an output the VLAN tag of a path label may be
    changed: `pop_label` removes it, `push_label` pushes a tag with that VLAN id, `set_label`
    rewrites the id. `write_metadata` (with `goto_table`) hands the next table a value to match.
    `role`, `direction` and `stage` describe the flow's place in its plan (for ordering and
    for people); they take no part in equality, since the switch holds none of them.
    """

    switch: str
    dpid: int
    table_id: int = TABLE_ID
    priority: int
    match: Match
    cookie: int
    output: int | None = None
    group_id: int | None = None
    goto_table: int | None = None
    meter_id: int | None = None
    push_label: int | None = None
    set_label: int | None = None
    pop_label: bool = False
    write_metadata: int | None = None
    role: str = field(default=TRANSIT, compare=False)
    direction: str = field(default=FORWARD, compare=False)
    stage: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if sum(a is not None for a in (self.output, self.group_id, self.goto_table)) != 1:
            raise ValueError(f"flow on {self.switch}: give exactly one of output, group_id and goto_table")
        if sum((self.push_label is not None, self.set_label is not None, self.pop_label)) > 1:
            raise ValueError(f"flow on {self.switch}: push, set or pop a label, not several")
        if (self.write_metadata is not None) != (self.goto_table is not None):
            raise ValueError(f"flow on {self.switch}: write_metadata goes with goto_table")

    @property
    def key(self) -> tuple[str, int, int, Match]:
        """What identifies the entry on its switch: (switch, table, priority, match)."""
        return (self.switch, self.table_id, self.priority, self.match)

    def describe(self) -> str:
        """One line for logs and test failures."""
        if self.goto_table is not None:
            action = f"metadata:{self.write_metadata:#x} goto:{self.goto_table}"
        else:
            action = f"output:{_port(self.output)}" if self.output is not None else f"group:{self.group_id}"
        label = (f"push:{self.push_label} " if self.push_label is not None else
                 f"set:{self.set_label} " if self.set_label is not None else "pop " if self.pop_label else "")
        meter = f"meter:{self.meter_id} " if self.meter_id is not None else ""
        table = f"t{self.table_id} " if self.table_id != TABLE_ID else ""
        return f"{self.switch} {table}p{self.priority} {self.match.describe()} => {meter}{label}{action} ({self.role})"


@dataclass(frozen=True, slots=True, kw_only=True)
class MeterSpec:
    """A meter on `switch`: drop above `rate_bps` bits/s (nominal) with a `burst_bits` bucket."""

    switch: str
    dpid: int
    meter_id: int
    rate_bps: int
    burst_bits: int
    direction: str = FORWARD

    @property
    def key(self) -> tuple[str, int]:
        """(switch, meter id)."""
        return (self.switch, self.meter_id)

    def describe(self) -> str:
        """One line for logs and test failures."""
        return f"{self.switch} meter:{self.meter_id} {self.rate_bps} bit/s burst {self.burst_bits} ({self.direction})"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSpec:
    """A fast-failover group on `switch`: the first bucket whose watch port is live forwards.

    `buckets` are (watch_port, output_port) pairs, or (watch_port, output_port, label) when the
    bucket pushes a path label's VLAN tag before its output; output_port may be `IN_PORT`. With
    `retag` the labelled buckets rewrite the VLAN id of the tag the frame already carries (a
    reservation end with a VLAN of its own) instead of pushing one.
    """

    switch: str
    dpid: int
    group_id: int
    type: str = GROUP_TYPE_FF
    buckets: tuple[tuple[int, ...], ...]
    retag: bool = False

    @property
    def key(self) -> tuple[str, int]:
        """(switch, group id)."""
        return (self.switch, self.group_id)

    def describe(self) -> str:
        """One line for logs and test failures."""
        change = "set" if self.retag else "push"
        buckets = ", ".join(f"watch {b[0]} -> {f'{change}:{b[2]} ' if len(b) > 2 else ''}{_port(b[1])}"
                            for b in self.buckets)
        return f"{self.switch} group:{self.group_id} {self.type} [{buckets}]"


Spec = FlowSpec | MeterSpec | GroupSpec


@dataclass(frozen=True, slots=True)
class SwitchPlan:
    """The part of a plan on one switch."""

    flows: tuple[FlowSpec, ...]
    meters: tuple[MeterSpec, ...]
    groups: tuple[GroupSpec, ...]


def _flow_order(flow: FlowSpec) -> tuple:
    m = flow.match
    return (flow.switch, flow.table_id, -flow.priority, m.in_port or 0, m.eth_type or 0, m.ipv4_src or "",
            m.ipv4_dst or "", m.ip_proto or 0, m.ipv6_src or "", m.ipv6_dst or "", m.icmpv6_type or 0,
            -1 if m.vlan_vid is None else m.vlan_vid, -1 if m.metadata is None else m.metadata)


@dataclass(frozen=True)
class FlowPlan:
    """Every flow, meter and group spec of one reservation: plain, hashable, comparable data.

    Specs are kept sorted (by switch, then key), so equal content gives equal plans. Checked
    on creation: flow keys and per-switch meter and group ids are unique, and every meter and
    group a flow uses is in the plan on the same switch, or (a group) among `shared_groups`:
    (switch, group id) of groups a shared path's plan holds (`label_plans`).
    """

    reservation_id: str
    cookie: int
    src_dtn: str
    dst_dtn: str
    flows: tuple[FlowSpec, ...]
    meters: tuple[MeterSpec, ...] = ()
    groups: tuple[GroupSpec, ...] = ()
    shared_groups: frozenset[tuple[str, int]] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "flows", tuple(sorted(self.flows, key=_flow_order)))
        object.__setattr__(self, "meters", tuple(sorted(self.meters, key=lambda m: m.key)))
        object.__setattr__(self, "groups", tuple(sorted(self.groups, key=lambda g: g.key)))
        for what, specs in (("flow", self.flows), ("meter", self.meters), ("group", self.groups)):
            keys = [s.key for s in specs]
            if len(set(keys)) != len(keys):
                dup = next(k for k in keys if keys.count(k) > 1)
                raise ValueError(f"plan of {self.reservation_id}: two {what}s share {dup}")
        meters = {m.key for m in self.meters}
        groups = {g.key for g in self.groups} | self.shared_groups
        for f in self.flows:
            if f.meter_id is not None and (f.switch, f.meter_id) not in meters:
                raise ValueError(f"plan of {self.reservation_id}: flow {f.describe()} uses a meter not in the plan")
            if f.group_id is not None and (f.switch, f.group_id) not in groups:
                raise ValueError(f"plan of {self.reservation_id}: flow {f.describe()} uses a group not in the plan")

    @property
    def switches(self) -> tuple[str, ...]:
        """Names of the switches the plan touches, sorted."""
        return tuple(sorted({s.switch for s in (*self.flows, *self.meters, *self.groups)}))

    def flows_on(self, switch: str) -> tuple[FlowSpec, ...]:
        """The flows on `switch`."""
        return tuple(f for f in self.flows if f.switch == switch)

    def meters_on(self, switch: str) -> tuple[MeterSpec, ...]:
        """The meters on `switch`."""
        return tuple(m for m in self.meters if m.switch == switch)

    def groups_on(self, switch: str) -> tuple[GroupSpec, ...]:
        """The groups on `switch`."""
        return tuple(g for g in self.groups if g.switch == switch)

    def for_switch(self, switch: str) -> SwitchPlan:
        """Flows, meters and groups on `switch`."""
        return SwitchPlan(self.flows_on(switch), self.meters_on(switch), self.groups_on(switch))

    def describe(self) -> str:
        """One line per spec, for logs and test failures."""
        specs: list[Spec] = [*self.meters, *self.groups, *self.flows]
        return "\n".join(s.describe() for s in specs)


# --- ids -------------------------------------------------------------------------------------


def _preferred(owner: str, kind: str, key: object, limit: int) -> int:
    """A stable id in 1..limit from the owner (a reservation's cookie bits, or a shared path's
    name) and what the id is for."""
    seed = owner if owner.startswith(PATH_OWNER) else f"{reservation_cookie(owner) & COOKIE_ID_MASK:012x}"
    digest = hashlib.blake2b(f"{seed}/{kind}/{key!r}".encode(), digest_size=8).digest()
    return 1 + int.from_bytes(digest, "big") % limit


class IdAllocator:
    """Per-switch meter and group ids, unique across reservations; pure and deterministic.

    An id is owned by (reservation, key): key is the direction for a meter and the bucket
    list for a group. Asking again for the same owner returns the same id. A new owner gets
    its preferred id (derived from the cookie) or, when that is taken, the next free one
    upward; `NoCapacity` when the switch has none left. The same allocations in the same
    order give the same ids.
    """

    def __init__(self, max_meter_id: int = DEFAULT_MAX_METER_ID, max_group_id: int = DEFAULT_MAX_GROUP_ID):
        if max_meter_id < 1 or max_group_id < 1:
            raise ValueError("id limits must be positive")
        self.limits = {"meter": max_meter_id, "group": max_group_id}
        self._owner: dict[tuple[str, str, int], tuple[str, object]] = {}
        self._ids: dict[tuple[str, str, str, object], int] = {}
        self._held: dict[str, set[tuple[str, str, int]]] = {}  # reservation -> its (switch, kind, id)s
        self._used: dict[tuple[str, str], int] = {}  # (switch, kind) -> ids held

    def meter_id(self, switch: str, reservation_id: str, direction: str) -> int:
        """The meter id on `switch` of `reservation_id`'s `direction` (forward or reverse)."""
        return self._allocate(switch, "meter", reservation_id, direction)

    def group_id(self, switch: str, reservation_id: str, buckets: tuple[tuple[int, ...], ...]) -> int:
        """The group id on `switch` of `reservation_id`'s group with these `buckets`."""
        return self._allocate(switch, "group", reservation_id, buckets)

    def free(self, switch: str, kind: str) -> int:
        """How many `kind` ("meter" or "group") ids `switch` has left."""
        return self.limits[kind] - self._used.get((switch, kind), 0)

    def _allocate(self, switch: str, kind: str, reservation_id: str, key: object) -> int:
        found = self._ids.get((switch, kind, reservation_id, key))
        if found is not None:
            return found
        limit = self.limits[kind]
        start = _preferred(reservation_id, kind, key, limit)
        for offset in range(limit):
            candidate = (start - 1 + offset) % limit + 1
            if (switch, kind, candidate) not in self._owner:
                self._claim(switch, kind, candidate, reservation_id, key)
                return candidate
        raise NoCapacity(f"switch {switch} has no free {kind} id: all {limit} are in use")

    def _claim(self, switch: str, kind: str, value: int, reservation_id: str, key: object) -> None:
        self._owner[(switch, kind, value)] = (reservation_id, key)
        self._ids[(switch, kind, reservation_id, key)] = value
        self._held.setdefault(reservation_id, set()).add((switch, kind, value))
        self._used[(switch, kind)] = self._used.get((switch, kind), 0) + 1

    def _free(self, switch: str, kind: str, value: int) -> None:
        reservation_id, key = self._owner.pop((switch, kind, value))
        del self._ids[(switch, kind, reservation_id, key)]
        self._used[(switch, kind)] -= 1
        held = self._held[reservation_id]
        held.discard((switch, kind, value))
        if not held:
            del self._held[reservation_id]

    def release(self, reservation_id: str) -> None:
        """Free every id `reservation_id` holds (after its plan was removed)."""
        for where in list(self._held.get(reservation_id, ())):
            self._free(*where)

    def retain(self, plan: FlowPlan) -> None:
        """Free the ids of `plan`'s reservation that `plan` does not use (after a move)."""
        used = {(m.switch, "meter", m.meter_id) for m in plan.meters}
        used |= {(g.switch, "group", g.group_id) for g in plan.groups}
        for where in list(self._held.get(plan.reservation_id, ())):
            if where not in used:
                self._free(*where)

    def adopt(self, plan: FlowPlan) -> None:
        """Record `plan`'s ids as taken (rebuilding after a restart); ValueError on a clash."""
        wanted = [(m.switch, "meter", m.meter_id, m.direction) for m in plan.meters]
        wanted += [(g.switch, "group", g.group_id, g.buckets) for g in plan.groups]
        for switch, kind, value, key in wanted:
            owner = self._owner.get((switch, kind, value))
            held = self._ids.get((switch, kind, plan.reservation_id, key))
            if owner not in (None, (plan.reservation_id, key)) or held not in (None, value):
                raise ValueError(f"{kind} {value} on {switch}: already held by {owner or held}")
        for switch, kind, value, key in wanted:
            self._claim(switch, kind, value, plan.reservation_id, key)


# --- plans -----------------------------------------------------------------------------------


def reversed_hops(hops: Sequence[Hop]) -> tuple[Hop, ...]:
    """The hops of the opposite direction of a path: switches backwards, ports swapped."""
    return tuple(Hop(h.switch, h.out_port, h.in_port) for h in reversed(hops))


class _Builder:
    """Collects one reservation's specs, direction by direction."""

    def __init__(self, topology: Topology, reservation_id: str, cookie: int, ids: IdAllocator):
        self.topology = topology
        self.reservation_id = reservation_id
        self.cookie = cookie
        self.ids = ids
        self.flows: list[FlowSpec] = []
        self.meters: list[MeterSpec] = []
        self.groups: dict[tuple[str, int], GroupSpec] = {}

    def dpid(self, switch: str) -> int:
        return self.topology.switches[switch].dpid

    def group(self, switch: str, buckets: tuple[tuple[int, int], ...]) -> int:
        group_id = self.ids.group_id(switch, self.reservation_id, buckets)
        self.groups[(switch, group_id)] = GroupSpec(switch=switch, dpid=self.dpid(switch), group_id=group_id,
                                                    buckets=buckets)
        return group_id

    def direction(self, direction: str, priority: int, traffic: Match, primary: Sequence[Hop],
                  backup: Sequence[Hop] | None, rate: int) -> None:
        """The flows and the ingress meter of one direction, each flow matching `traffic` on its in-port."""
        def flow(hop_switch: str, in_port: int, role: str, stage: int, **action: int | None) -> None:
            self.flows.append(FlowSpec(
                switch=hop_switch, dpid=self.dpid(hop_switch), priority=priority, cookie=self.cookie,
                match=replace(traffic, in_port=in_port),
                role=role, direction=direction, stage=stage, **action,
            ))

        ingress = primary[0]
        meter_id = self.ids.meter_id(ingress.switch, self.reservation_id, direction)
        self.meters.append(MeterSpec(switch=ingress.switch, dpid=self.dpid(ingress.switch), meter_id=meter_id,
                                     rate_bps=rate, burst_bits=burst_bits(rate), direction=direction))
        n = len(primary) - 1
        if backup is None:
            for i, hop in enumerate(primary):
                role = INGRESS if i == 0 else EGRESS if i == n else TRANSIT
                flow(hop.switch, hop.in_port, role, n - i, output=hop.out_port, meter_id=meter_id if i == 0 else None)
            return
        m = len(backup) - 1
        for j in range(1, m + 1):  # stage: hops left to the egress
            hop = backup[j]
            flow(hop.switch, hop.in_port, EGRESS if j == m else BACKUP, m - j, output=hop.out_port)
        # Crankback: packets sent back from downstream travel toward p0, which turns them onto the backup.
        flow(ingress.switch, ingress.out_port, CRANKBACK, m, output=backup[0].out_port)
        for i in range(1, n):
            flow(primary[i].switch, primary[i].out_port, CRANKBACK, m + i, output=primary[i].in_port)
        flow(primary[n].switch, primary[n].in_port, EGRESS, 0, output=primary[n].out_port)
        after = 0  # stage of the next primary flow downstream
        for i in range(n - 1, 0, -1):
            hop = primary[i]
            stage = max(after, m + i - 1) + 1  # after its downstream and the crankback upstream
            group_id = self.group(hop.switch, ((hop.out_port, hop.out_port), (hop.in_port, IN_PORT)))
            flow(hop.switch, hop.in_port, TRANSIT, stage, group_id=group_id)
            after = stage
        group_id = self.group(ingress.switch, ((ingress.out_port, ingress.out_port),
                                               (backup[0].out_port, backup[0].out_port)))
        flow(ingress.switch, ingress.in_port, INGRESS, max(after, m - 1) + 1, group_id=group_id, meter_id=meter_id)


@dataclass(frozen=True)
class Traffic:
    """What a reservation's flows match and where they go, per direction (`traffic_of`)."""

    primary: tuple[Hop, ...]
    backup: tuple[Hop, ...] | None
    forward: Match  # the booked direction's packets
    reverse: Match  # the acks'
    twin: dict | None  # the fields that turn a flow's match into its address-resolution twin's (None: no twin)


def traffic_of(topology: Topology, src_dtn: str, dst_dtn: str, route: Route | Path, bandwidth_bps: int,
               src_prefix: str | None = None, dst_prefix: str | None = None, *, src_vlan: int | None = None,
               dst_vlan: int | None = None) -> Traffic:
    """The matches and hops of a reservation from `src_dtn` to `dst_dtn` over `route`, checked:
    `InvalidArgument` for a bandwidth that is not a positive whole number, a bad prefix pair or
    VLAN id, prefixes on a VLAN circuit, a route between other ends, or a backup on the same
    switch or sharing a link with the primary.

    With both `src_vlan` and `dst_vlan` (a VLAN circuit) the matches carry no address or
    eth_type (every frame of the ends' VLANs, which the caller matches) and there is no twin;
    the ends then need no addresses in the topology."""
    if isinstance(bandwidth_bps, bool) or not isinstance(bandwidth_bps, int) or bandwidth_bps <= 0:
        raise InvalidArgument(f"bandwidth: must be a positive whole number of bits/s, got {bandwidth_bps!r}")
    src_prefix, dst_prefix = validation.prefix_pair(src_prefix, dst_prefix)
    tags = validation.vlan_id(src_vlan, "src_vlan"), validation.vlan_id(dst_vlan, "dst_vlan")
    circuit = None not in tags
    if circuit and src_prefix is not None:
        raise InvalidArgument("src_prefix: a VLAN circuit (src_vlan and dst_vlan) carries every frame of its "
                              "VLANs; leave the prefixes out")
    if isinstance(route, Path):
        route = Route(route)
    if not circuit:  # the ends are DTNs: their addresses, or the prefixes they hold
        src, dst = topology.dtn(src_dtn), topology.dtn(dst_dtn)
    for path in (route.primary, route.backup):
        if path is not None and (path.src, path.dst) != (src_dtn, dst_dtn):
            raise InvalidArgument(f"route: {path.describe()} does not join {src_dtn} to {dst_dtn}")
    primary = route.primary.hops
    backup = route.backup.hops if route.backup is not None else None
    if route.backup is not None:
        if route.primary.hop_count == 0:
            raise InvalidArgument(f"route: {src_dtn} and {dst_dtn} share switch {primary[0].switch}; "
                                  "there is no link a backup could protect")
        shared = set(route.primary.links) & set(route.backup.links)
        if shared:
            raise InvalidArgument(f"route: the backup shares link(s) {', '.join(sorted(shared))} with the primary")
    twin: dict | None
    if circuit:
        forward = reverse = Match(eth_type=None)
        twin = None
    elif src_prefix is None or dst_prefix is None:
        forward, twin = Match(ipv4_src=src.ipv4, ipv4_dst=dst.ipv4), {"eth_type": ETH_TYPE_ARP}
        reverse = Match(ipv4_src=dst.ipv4, ipv4_dst=src.ipv4)
    else:
        forward = Match(eth_type=ETH_TYPE_IPV6, ipv6_src=src_prefix, ipv6_dst=dst_prefix)
        reverse = Match(eth_type=ETH_TYPE_IPV6, ipv6_src=dst_prefix, ipv6_dst=src_prefix)
        twin = {"ip_proto": IP_PROTO_ICMPV6, "ipv6_dst": SOLICITED_NODE, "icmpv6_type": ICMPV6_NEIGHBOR_SOLICITATION}
    return Traffic(tuple(primary), tuple(backup) if backup is not None else None, forward, reverse, twin)


def plan_for(topology: Topology, reservation_id: str, src_dtn: str, dst_dtn: str, route: Route | Path,
             bandwidth_bps: int, ids: IdAllocator | None = None, *, src_prefix: str | None = None,
             dst_prefix: str | None = None) -> FlowPlan:
    """Return the flow plan of reservation `reservation_id`: `bandwidth_bps` from `src_dtn` to
    `dst_dtn` over `route` (with protection when it has a backup), acks back unbooked.

    Without prefixes the flows match IPv4 between the two DTNs' addresses, with ARP twins.
    With `src_prefix` and `dst_prefix` (IPv6 networks, both or neither) they match IPv6 from
    `src_prefix` to `dst_prefix` (forward) and back (reverse), under the prefixes' masks, with
    twins for the neighbour solicitations of each direction's source prefix to the
    solicited-node range; nothing of IPv4 (the module docstring lists every field matched).

    `ids` allocates meter and group ids; pass the core's one allocator so ids stay unique per
    switch across reservations, and the same one for a move's old and new plans. Raises
    `InvalidArgument` for a malformed id, bandwidth or prefix, a route between other DTNs, or
    a backup that shares a link with the primary.
    """
    cookie = reservation_cookie(reservation_id)
    t = traffic_of(topology, src_dtn, dst_dtn, route, bandwidth_bps, src_prefix, dst_prefix)
    primary, backup, forward, reverse, twin = t.primary, t.backup, t.forward, t.reverse, t.twin
    assert twin is not None  # no VLANs given: a VLAN circuit is the label design's alone
    builder = _Builder(topology, reservation_id, cookie, ids if ids is not None else IdAllocator())
    builder.direction(FORWARD, PRIORITY, forward, primary, backup, bandwidth_bps)
    builder.direction(REVERSE, REVERSE_PRIORITY, reverse, reversed_hops(primary),
                      reversed_hops(backup) if backup is not None else None, reverse_rate(bandwidth_bps))
    # The DTNs' own address resolution (ARP, or IPv6 neighbour solicitations from the direction's
    # source prefix) follows the reserved hops too, so it needs no controller: traffic goes on after
    # a controller crash, and nothing floods. Twins carry no meter (address resolution is a trickle).
    twins = [replace(f, match=replace(f.match, **twin), meter_id=None) for f in builder.flows]
    return FlowPlan(reservation_id, cookie, src_dtn, dst_dtn, (*builder.flows, *twins), tuple(builder.meters),
                    tuple(builder.groups.values()))


def _networks(request: PathRequest) -> tuple[ipaddress.IPv6Network, ipaddress.IPv6Network]:
    assert request.src_prefix is not None and request.dst_prefix is not None
    return ipaddress.IPv6Network(request.src_prefix), ipaddress.IPv6Network(request.dst_prefix)


def clash(new: PathRequest, other: PathRequest) -> str | None:
    """Why the flows of a reservation for `new` would collide on the switches with those of one
    for `other` held at the same time, naming the field of `new` at fault; None when they keep
    apart (prefixes as `validation.prefix_pair` gives them).

    - Neither has prefixes: they collide when they are for the same ordered DTN pair (the
      same IPv4 addresses at the same priority) and treat an end alike (both untagged there,
      or the same VLAN: a classifier at that end would match both). VLAN circuits (both VLANs
      given) with other VLANs than another reservation's at each end keep apart from it.
    - One has prefixes and the other not: never (IPv6 prefixes against IPv4 addresses).
    - Both have prefixes: each end of a reservation holds its prefix at its DTN, facing the
      other end's DTN. Two ends whose prefixes overlap collide (the same packets, or the same
      neighbour solicitations, would match both at one priority, or the flows of one would
      carry the other's packets to another DTN), unless they are the source end of one and the
      destination end of the other, at the same DTN facing the same DTN: the two directions
      of one DTN pair, whose flows differ in priority and lead to the same DTN.
    """
    if new.src_prefix is None or other.src_prefix is None:
        if new.src_prefix is None and other.src_prefix is None and (new.src, new.dst) == (other.src, other.dst) \
                and (new.src_vlan == other.src_vlan or new.dst_vlan == other.dst_vlan):
            return f"{new.src} -> {new.dst}: the same DTN pair without prefixes"
        return None
    ends = (("src_prefix", "source", new.src, new.dst), ("dst_prefix", "destination", new.dst, new.src))
    theirs = (("source", other.src, other.dst), ("destination", other.dst, other.src))
    for (name, role, dtn, peer), prefix in zip(ends, _networks(new), strict=True):
        for (their_role, their_dtn, their_peer), their_prefix in zip(theirs, _networks(other), strict=True):
            if not prefix.overlaps(their_prefix):
                continue
            if (dtn, peer) == (their_dtn, their_peer) and role != their_role:
                continue
            return f"{name}: {prefix} overlaps the {their_role} prefix {their_prefix}"
    return None


# --- steps -----------------------------------------------------------------------------------


class StepKind(StrEnum):
    """What a step asks of a switch."""

    ADD_METER = "add_meter"
    MODIFY_METER = "modify_meter"
    ADD_GROUP = "add_group"
    ADD_FLOW = "add_flow"
    MODIFY_FLOW = "modify_flow"
    DELETE_FLOW = "delete_flow"
    DELETE_GROUP = "delete_group"
    DELETE_METER = "delete_meter"
    BARRIER = "barrier"


@dataclass(frozen=True, slots=True)
class Step:
    """One change on one switch, or a BARRIER on `switches`: wait until each has applied
    everything sent to it before (OFPT_BARRIER_REQUEST/REPLY) before going on.

    `spec` is the entry to add, or its new version (MODIFY_*), or the entry to delete;
    `old` is the version a MODIFY_* replaces. MODIFY_FLOW keeps the flow's key and replaces
    its actions (OFPFC_MODIFY_STRICT); when `old.cookie` differs, encode it as OFPFC_ADD,
    which replaces the entry, cookie included. DELETE_FLOW: OFPFC_DELETE_STRICT on the spec's
    match and priority with its cookie and an all-ones cookie mask, so another reservation's
    entry is never removed. DELETE_GROUP and DELETE_METER come after the flows using them.
    """

    kind: StepKind
    switches: tuple[str, ...]
    spec: Spec | None = None
    old: Spec | None = None

    @property
    def switch(self) -> str:
        """The one switch of a non-barrier step."""
        if self.kind is StepKind.BARRIER:
            raise ValueError("a barrier may span several switches; read `switches`")
        return self.switches[0]

    def describe(self) -> str:
        """One line for logs and test failures."""
        if self.kind is StepKind.BARRIER:
            return f"barrier {', '.join(self.switches)}"
        assert self.spec is not None
        return f"{self.kind.value} {self.spec.describe()}"


def _step(kind: StepKind, spec: Spec, old: Spec | None = None) -> Step:
    return Step(kind, (spec.switch,), spec, old)


def plan_steps(old: FlowPlan | None, new: FlowPlan | None) -> list[Step]:
    """Return the ordered make-before-break steps from plan `old` to plan `new`.

    None for `old` installs `new`; None for `new` removes `old`; both move from one to the
    other (see the module docstring for the six phases). Every phase ends with a BARRIER on
    the switches it touched; empty phases are left out, so equal plans give no steps.
    Raises ValueError when both plans use one group id on one switch for different buckets
    (they were not allocated by one `IdAllocator`).
    """
    old_flows = {f.key: f for f in old.flows} if old else {}
    new_flows = {f.key: f for f in new.flows} if new else {}
    old_meters = {m.key: m for m in old.meters} if old else {}
    new_meters = {m.key: m for m in new.meters} if new else {}
    old_groups = {g.key: g for g in old.groups} if old else {}
    new_groups = {g.key: g for g in new.groups} if new else {}
    for key, group in new_groups.items():
        if key in old_groups and old_groups[key] != group:
            raise ValueError(f"group {key[1]} on {key[0]} has different buckets in the old and new plans; "
                             "allocate both plans' ids with one IdAllocator")

    prepare: list[Step] = [_step(StepKind.ADD_METER, m) for k, m in new_meters.items() if k not in old_meters]
    prepare += [_step(StepKind.MODIFY_METER, m, old_meters[k]) for k, m in new_meters.items()
                if k in old_meters and old_meters[k] != m]
    prepare += [_step(StepKind.ADD_GROUP, g) for k, g in new_groups.items() if k not in old_groups]

    added = [f for k, f in new_flows.items() if k not in old_flows]
    changed = [f for k, f in new_flows.items() if k in old_flows and old_flows[k] != f]
    removed = [f for k, f in old_flows.items() if k not in new_flows]

    downstream_first = sorted((f for f in added if f.role != INGRESS), key=lambda f: f.stage)
    waves: dict[int, list[Step]] = {}
    for f in changed:
        if f.role != INGRESS:
            waves.setdefault(f.stage, []).append(_step(StepKind.MODIFY_FLOW, f, old_flows[f.key]))
    ingress = [_step(StepKind.ADD_FLOW, f) for f in added if f.role == INGRESS]
    ingress += [_step(StepKind.MODIFY_FLOW, f, old_flows[f.key]) for f in changed if f.role == INGRESS]
    cleanup = [_step(StepKind.DELETE_FLOW, f)
               for f in sorted(removed, key=lambda f: (f.role != INGRESS, -f.stage))]
    release = [_step(StepKind.DELETE_GROUP, g) for k, g in old_groups.items() if k not in new_groups]
    release += [_step(StepKind.DELETE_METER, m) for k, m in old_meters.items() if k not in new_meters]

    added_flows = [_step(StepKind.ADD_FLOW, f) for f in downstream_first]
    preparing = {(s.spec.switch, s.kind, getattr(s.spec, "group_id", None) or getattr(s.spec, "meter_id", None))
                 for s in prepare}
    if any((f.switch, StepKind.ADD_GROUP, f.group_id) in preparing
           or (f.switch, StepKind.ADD_METER, f.meter_id) in preparing for f in downstream_first):
        phases = [prepare, added_flows]
    else:  # the new flows use nothing prepared here: one phase, one barrier round less
        phases = [prepare + added_flows]
    phases += [waves[stage] for stage in sorted(waves)]
    phases += [ingress, cleanup, release]
    steps: list[Step] = []
    for phase in phases:
        if phase:
            steps.extend(phase)
            steps.append(Step(StepKind.BARRIER, tuple(sorted({s.switch for s in phase}))))
    return steps
