"""A small OpenFlow table simulator for flow plans (test support; the shape of Faucet's fakeoftable).

`FlowTables(topology)` keeps the tables of every switch (table 0, and the steer table the
label design's classifiers go to with their metadata). `apply(step)` applies a `plans.Step` the
way an OpenFlow 1.3 switch would, and stricter where a plan bug would otherwise hide:
- ADD_FLOW of a key already present, MODIFY_FLOW or DELETE_FLOW of a missing key, ADD_GROUP
  or ADD_METER of a taken id, MODIFY/DELETE of a missing meter or group raise `TableError`
  (a switch would overwrite, ignore or answer an error; a plan should never ask);
- a flow that uses a group or meter the switch does not have raises (OFPBAC_BAD_OUT_GROUP,
  OFPMMFC_UNKNOWN_METER); ports must be declared ports of the switch (or IN_PORT);
- deleting a group or meter removes the flows that use it, as OpenFlow does;
- a dpid that does not match the topology's raises.

`trace(packet, switch, in_port, down_links)` follows a packet (IPv4, ARP, or IPv6 with its next
header and ICMPv6 type; a flow's IPv6 fields match the packet's addresses under their prefixes,
its other fields exactly, the VLAN tag of a path label as `Packet.vlan`): through the
tables (goto-table with write-metadata), the highest-priority matching flow (a tie between two matching flows
raises: OpenFlow leaves it undefined), its meter (recorded, not enforced), then its output or
fast-failover group (the first bucket whose watch port is live), with their label pushes,
rewrites and pops. A frame delivered to a DTN still carrying a label is dropped. A port is live when a link or
a DTN is attached and the link is not down. Outputs to a DTN's access port deliver the packet
there; into a down link, it is lost; to a port with nothing attached, or with no flow matching
(table-miss), it is dropped. Output to the packet's own in-port without IN_PORT is dropped, as
on a real switch. A packet that reaches a (switch, in-port) it already visited, or crosses more
than `ttl` switches, is in a loop.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from sdn_app.core.plans import (
    ETH_TYPE_IPV4,
    ETH_TYPE_IPV6,
    ICMPV6_NEIGHBOR_SOLICITATION,
    IN_PORT,
    IP_PROTO_ICMPV6,
    UNTAGGED,
    FlowPlan,
    FlowSpec,
    GroupSpec,
    MeterSpec,
    Step,
    StepKind,
    plan_steps,
)
from sdn_app.core.topology import Topology

DELIVERED, DROPPED, LOST, LOOP = "delivered", "dropped", "lost", "loop"


class TableError(AssertionError):
    """A step a plan should never produce (or the switch would refuse)."""


@dataclass(frozen=True)
class Packet:
    """The header fields flows may match: IPv4 (or ARP) addresses, or IPv6 ones with the next
    header (`ip_proto`) and, for ICMPv6, its type."""

    ipv4_src: str | None = None
    ipv4_dst: str | None = None
    eth_type: int = ETH_TYPE_IPV4
    ipv6_src: str | None = None
    ipv6_dst: str | None = None
    ip_proto: int | None = None
    icmpv6_type: int | None = None
    vlan: int | None = None  # the VLAN id of its 802.1Q tag (a path label); None: untagged


def ipv6_packet(src: str, dst: str, ip_proto: int = 6, icmpv6_type: int | None = None) -> Packet:
    """An IPv6 packet from address `src` to address `dst` (TCP unless told otherwise)."""
    return Packet(eth_type=ETH_TYPE_IPV6, ipv6_src=src, ipv6_dst=dst, ip_proto=ip_proto, icmpv6_type=icmpv6_type)


def solicitation(src: str, target: str) -> Packet:
    """The IPv6 neighbour solicitation `src` multicasts for `target`: to its solicited-node address."""
    low24 = int(ipaddress.IPv6Address(target)) & 0xFFFFFF
    group = ipaddress.IPv6Address(int(ipaddress.IPv6Address("ff02::1:ff00:0")) | low24)
    return ipv6_packet(src, str(group), IP_PROTO_ICMPV6, ICMPV6_NEIGHBOR_SOLICITATION)


@dataclass(frozen=True)
class Trace:
    """Where a packet went: `outcome` (delivered, dropped, lost, loop), the DTN it reached,
    the switches it crossed in order (repeats included), the meters it passed and why it stopped."""

    outcome: str
    dtn: str | None
    switches: tuple[str, ...]
    meters: tuple[MeterSpec, ...]
    reason: str


@dataclass
class SwitchTable:
    """One switch's flow table (table 0), groups and meters."""

    name: str
    dpid: int
    ports: frozenset[int]
    flows: dict[tuple, FlowSpec] = field(default_factory=dict)
    groups: dict[int, GroupSpec] = field(default_factory=dict)
    meters: dict[int, MeterSpec] = field(default_factory=dict)

    def lookup(self, packet: Packet, in_port: int, table_id: int = 0, metadata: int = 0) -> FlowSpec | None:
        """The highest-priority flow of table `table_id` matching `packet` arriving on `in_port`
        with the pipeline's `metadata`, or None."""
        hits = [f for f in self.flows.values() if f.table_id == table_id and _matches(f, packet, in_port, metadata)]
        if not hits:
            return None
        top = max(f.priority for f in hits)
        best = [f for f in hits if f.priority == top]
        if len(best) > 1:
            raise TableError(f"{self.name}: {len(best)} flows of priority {top} match {packet} on port {in_port}")
        return best[0]


def _within(address: str | None, network: str | None) -> bool:
    """Whether a packet's IPv6 `address` falls in a flow's `network` (None: a wildcard)."""
    if network is None:
        return True
    return address is not None and ipaddress.IPv6Address(address) in ipaddress.IPv6Network(network)


def _matches(flow: FlowSpec, packet: Packet, in_port: int, metadata: int = 0) -> bool:
    m = flow.match
    if m.vlan_vid is not None and m.vlan_vid != (packet.vlan if packet.vlan is not None else UNTAGGED):
        return False
    if m.metadata is not None and m.metadata != metadata:
        return False
    if m.eth_type is None:
        return m.in_port is None or m.in_port == in_port
    return ((m.in_port is None or m.in_port == in_port) and m.eth_type == packet.eth_type
            and (m.ipv4_src is None or m.ipv4_src == packet.ipv4_src)
            and (m.ipv4_dst is None or m.ipv4_dst == packet.ipv4_dst)
            and (m.ip_proto is None or m.ip_proto == packet.ip_proto)
            and (m.icmpv6_type is None or m.icmpv6_type == packet.icmpv6_type)
            and _within(packet.ipv6_src, m.ipv6_src) and _within(packet.ipv6_dst, m.ipv6_dst))


class FlowTables:
    """Every switch's tables for `topology`; apply steps, then trace packets."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.tables = {name: SwitchTable(name, s.dpid, frozenset(s.ports)) for name, s in topology.switches.items()}
        # (switch, port) -> ("switch", peer, peer_port, link) or ("dtn", name)
        self.wiring: dict[tuple[str, int], tuple] = {}
        for link_name, (forward, _) in topology.link_directions.items():
            self.wiring[(forward.src, forward.src_port)] = ("switch", forward.dst, forward.dst_port, link_name)
            self.wiring[(forward.dst, forward.dst_port)] = ("switch", forward.src, forward.src_port, link_name)
        for dtn in topology.dtns.values():
            self.wiring[(dtn.switch, dtn.port)] = ("dtn", dtn.name)

    # -- applying steps ---------------------------------------------------------------------

    def apply(self, step: Step) -> None:
        """Apply one step (a barrier changes nothing in a sequential simulator)."""
        if step.kind is StepKind.BARRIER:
            return
        spec = step.spec
        assert spec is not None
        table = self.tables.get(spec.switch)
        if table is None:
            raise TableError(f"no switch {spec.switch!r}")
        if spec.dpid != table.dpid:
            raise TableError(f"{spec.switch}: dpid {spec.dpid:#x} in the spec, {table.dpid:#x} in the topology")
        handler = getattr(self, f"_{step.kind.value}")
        handler(table, spec)

    def apply_all(self, steps: Iterable[Step]) -> None:
        """Apply `steps` in order."""
        for step in steps:
            self.apply(step)

    def install(self, plan: FlowPlan) -> None:
        """Apply `plan_steps(None, plan)`."""
        self.apply_all(plan_steps(None, plan))

    def remove(self, plan: FlowPlan) -> None:
        """Apply `plan_steps(plan, None)`."""
        self.apply_all(plan_steps(plan, None))

    def _check_port(self, table: SwitchTable, port: int, what: str) -> None:
        if port != IN_PORT and port not in table.ports:
            raise TableError(f"{table.name}: {what} {port} is not a port of the switch")

    def _check_flow(self, table: SwitchTable, flow: FlowSpec) -> None:
        if flow.match.in_port is not None:
            self._check_port(table, flow.match.in_port, "in_port")
        if flow.output is not None:
            self._check_port(table, flow.output, "output")
        if flow.group_id is not None and flow.group_id not in table.groups:
            raise TableError(f"{table.name}: flow {flow.describe()} uses missing group {flow.group_id}")
        if flow.meter_id is not None and flow.meter_id not in table.meters:
            raise TableError(f"{table.name}: flow {flow.describe()} uses missing meter {flow.meter_id}")

    def _add_flow(self, table: SwitchTable, flow: FlowSpec) -> None:
        if flow.key in table.flows:
            raise TableError(f"add of a flow already present: {flow.describe()}")
        self._check_flow(table, flow)
        table.flows[flow.key] = flow

    def _modify_flow(self, table: SwitchTable, flow: FlowSpec) -> None:
        if flow.key not in table.flows:
            raise TableError(f"modify of a missing flow: {flow.describe()}")
        self._check_flow(table, flow)
        table.flows[flow.key] = flow

    def _delete_flow(self, table: SwitchTable, flow: FlowSpec) -> None:
        present = table.flows.get(flow.key)
        if present is None or present.cookie != flow.cookie:
            raise TableError(f"delete of a missing flow: {flow.describe()}")
        del table.flows[flow.key]

    def _add_group(self, table: SwitchTable, group: GroupSpec) -> None:
        if group.group_id in table.groups:
            raise TableError(f"{table.name}: group {group.group_id} exists")
        if group.type != "ff" or not group.buckets:
            raise TableError(f"{table.name}: only fast-failover groups with buckets: {group.describe()}")
        for bucket in group.buckets:
            self._check_port(table, bucket[0], "watch port")
            self._check_port(table, bucket[1], "bucket output")
        table.groups[group.group_id] = group

    def _delete_group(self, table: SwitchTable, group: GroupSpec) -> None:
        if table.groups.get(group.group_id) != group:
            raise TableError(f"delete of a missing group: {group.describe()}")
        del table.groups[group.group_id]
        for key in [k for k, f in table.flows.items() if f.group_id == group.group_id]:
            del table.flows[key]

    def _add_meter(self, table: SwitchTable, meter: MeterSpec) -> None:
        if meter.meter_id in table.meters:
            raise TableError(f"{table.name}: meter {meter.meter_id} exists")
        if meter.rate_bps <= 0 or meter.burst_bits <= 0:
            raise TableError(f"bad meter {meter.describe()}")
        table.meters[meter.meter_id] = meter

    def _modify_meter(self, table: SwitchTable, meter: MeterSpec) -> None:
        if meter.meter_id not in table.meters:
            raise TableError(f"modify of a missing meter: {meter.describe()}")
        table.meters[meter.meter_id] = meter

    def _delete_meter(self, table: SwitchTable, meter: MeterSpec) -> None:
        if table.meters.get(meter.meter_id) != meter:
            raise TableError(f"delete of a missing meter: {meter.describe()}")
        del table.meters[meter.meter_id]
        for key in [k for k, f in table.flows.items() if f.meter_id == meter.meter_id]:
            del table.flows[key]

    # -- state ------------------------------------------------------------------------------

    def snapshot(self) -> frozenset:
        """Every flow, group and meter on every switch (comparable between simulators)."""
        out: set = set()
        for table in self.tables.values():
            out.update(table.flows.values())
            out.update(table.groups.values())
            out.update(table.meters.values())
        return frozenset(out)

    def is_empty(self) -> bool:
        """Whether no switch holds any flow, group or meter."""
        return not self.snapshot()

    def entry_count(self, switch: str) -> int:
        """Flows, groups and meters on `switch`."""
        t = self.tables[switch]
        return len(t.flows) + len(t.groups) + len(t.meters)

    # -- packets ----------------------------------------------------------------------------

    def live(self, switch: str, port: int, down_links: frozenset[str]) -> bool:
        """Whether `port` of `switch` is up: something is attached and its link is not down."""
        peer = self.wiring.get((switch, port))
        if peer is None:
            return False
        return peer[0] == "dtn" or peer[3] not in down_links

    def trace(self, packet: Packet, switch: str, in_port: int, down_links: Iterable[str] = (),
              ttl: int = 64) -> Trace:
        """Follow `packet` entering `switch` on `in_port` until it leaves on a DTN port or stops."""
        down = frozenset(down_links)
        for link in down:
            if link not in self.topology.links:
                raise KeyError(f"no link {link!r}")
        crossed: list[str] = []
        meters: list[MeterSpec] = []
        seen: set[tuple[str, int]] = set()

        def stop(outcome: str, reason: str, dtn: str | None = None) -> Trace:
            return Trace(outcome, dtn, tuple(crossed), tuple(meters), reason)

        while True:
            if (switch, in_port) in seen or len(crossed) >= ttl:
                return stop(LOOP, f"back at {switch} port {in_port}")
            seen.add((switch, in_port))
            crossed.append(switch)
            table = self.tables[switch]
            table_id, metadata = 0, 0
            while True:
                flow = table.lookup(packet, in_port, table_id, metadata)
                if flow is None:
                    return stop(DROPPED, f"table miss at {switch} port {in_port} (table {table_id})")
                if flow.meter_id is not None:
                    meters.append(table.meters[flow.meter_id])
                if flow.goto_table is None:
                    break
                if flow.goto_table <= table_id:
                    raise TableError(f"{flow.describe()}: goto to table {flow.goto_table} from table {table_id}")
                table_id, metadata = flow.goto_table, flow.write_metadata or 0
            packet = _relabelled(packet, flow.push_label, flow.set_label, flow.pop_label)
            if flow.group_id is not None:
                group = table.groups[flow.group_id]
                bucket = next((b for b in group.buckets if self.live(switch, b[0], down)), None)
                if bucket is None:
                    return stop(DROPPED, f"no live bucket in {group.describe()}")
                out = bucket[1]
                if len(bucket) > 2:
                    packet = _relabelled(packet, bucket[2])
            else:
                assert flow.output is not None
                out = flow.output
            if out == IN_PORT:
                out = in_port
            elif out == in_port:
                return stop(DROPPED, f"{switch}: output to the in-port {in_port} without IN_PORT")
            peer = self.wiring.get((switch, out))
            if peer is None:
                return stop(DROPPED, f"{switch}: nothing on port {out}")
            if peer[0] == "dtn":
                if packet.vlan is not None:  # a DTN's stack drops a frame tagged for a VLAN it is not on
                    return stop(DROPPED, f"{switch}: sent to dtn {peer[1]} still labelled {packet.vlan}")
                return stop(DELIVERED, f"out {switch} port {out}", dtn=peer[1])
            if peer[3] in down:
                return stop(LOST, f"{switch}: sent into down link {peer[3]}")
            switch, in_port = peer[1], peer[2]


def _relabelled(packet: Packet, push: int | None = None, set_: int | None = None, pop: bool = False) -> Packet:
    """`packet` after a label push (one tag only: a second would be a plan bug), set or pop."""
    if push is not None:
        if packet.vlan is not None:
            raise TableError(f"pushing label {push} on a packet already labelled {packet.vlan}")
        return replace(packet, vlan=push)
    if set_ is not None or pop:
        if packet.vlan is None:
            raise TableError("changing the label of an untagged packet")
        return replace(packet, vlan=None if pop else set_)
    return packet


def send_from(tables: FlowTables, src_dtn: str, packet: Packet, down: Iterable[str] = ()) -> Trace:
    """Trace `packet` sent by DTN `src_dtn` on its access port."""
    src = tables.topology.dtns[src_dtn]
    return tables.trace(packet, src.switch, src.port, down)


def dtn_packet(topology: Topology, src_dtn: str, dst_dtn: str, eth_type: int = ETH_TYPE_IPV4) -> Packet:
    """An IPv4 packet (or, with eth_type 0x0806, an ARP packet) from DTN `src_dtn` to DTN `dst_dtn`."""
    return Packet(topology.dtns[src_dtn].ipv4, topology.dtns[dst_dtn].ipv4, eth_type)


def send(tables: FlowTables, src_dtn: str, dst_dtn: str, down: Iterable[str] = (),
         eth_type: int = ETH_TYPE_IPV4) -> Trace:
    """Trace a packet `src_dtn` -> `dst_dtn` sent by `src_dtn` on its access port."""
    src = tables.topology.dtns[src_dtn]
    return tables.trace(dtn_packet(tables.topology, src_dtn, dst_dtn, eth_type), src.switch, src.port, down)


def delivered(tables: FlowTables, src_dtn: str, dst_dtn: str, down: Iterable[str] = (),
              eth_type: int = ETH_TYPE_IPV4) -> tuple[str | None, tuple[str, ...]]:
    """(the DTN a packet from `src_dtn` to `dst_dtn` reaches or None, the switches it crossed)."""
    t = send(tables, src_dtn, dst_dtn, down, eth_type)
    return (t.dtn if t.outcome == DELIVERED else None), t.switches
