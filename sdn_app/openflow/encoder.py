"""Plan specs as OpenFlow 1.3 messages: the one place for the wire format (Faucet's `valve_of.py`).

Pure functions: each takes a datapath (anything with os-ken's `ofproto` and `ofproto_parser`
attributes, a connected `os_ken.controller.controller.Datapath` or a stand-in carrying the
real `ofproto_v1_3` modules) and returns message objects; nothing is sent here.

- `encode_step(dp, step, scale)`: the messages of one `plans.Step` (none for a BARRIER;
  the fabric sends `barrier(dp)` itself).
- matches (`match`): in_port, eth_type, then IPv4 (ipv4_src, ipv4_dst exact), ARP (arp_spa,
  arp_tpa exact) or IPv6 (ip_proto, ipv6_src and ipv6_dst under the prefix's mask, as os-ken's
  (address, mask) pairs; a /128 exact, the way a switch reports a full mask; icmpv6_type).
- flows: ADD (`OFPFC_ADD`), MODIFY (`OFPFC_MODIFY_STRICT`, or `OFPFC_ADD` when the cookie
  changes: MODIFY keeps the old cookie), DELETE (`OFPFC_DELETE_STRICT` on match and priority
  with the spec's cookie under an all-ones mask, so another reservation's entry is never hit).
  The meter, when set, is an `OFPInstructionMeter` before the apply-actions instruction.
- meters: kbit/s with a burst (`OFPMF_KBPS | OFPMF_BURST`), one drop band. The emulation
  `scale` multiplies the nominal rate and burst of the plan here, and only here: rate kbit/s =
  rate_bps x scale / 1000 (at least 1), burst kbit = burst_bits x scale / 1000 but at least
  `MIN_BURST_KBITS` (the plan's own minimum, `plans.MIN_BURST_BITS`, unscaled). The floor is
  about packets and TCP windows, which do not shrink with the scale. Seen on ring8 at scale
  0.002 with a 2.5G booking (5 Mbit/s emulated): with the burst scaled too, the ack
  direction got a 2.5 kbit bucket, smaller than one full packet, and iperf3 stalled; with a
  100 kbit floor TCP reached 0.5 Mbit/s (policer drops, RTO backoff); with the 1000 kbit
  floor TCP gets 5.0 Mbit/s and UDP offered at 10 Mbit/s 4.9 Mbit/s. At scale 1 the plan's
  bursts are already at or above the floor.
- groups: fast-failover (`OFPGT_FF`), one bucket per (watch_port, output) pair; the output
  `plans.IN_PORT` becomes `ofproto.OFPP_IN_PORT` (the same number in OpenFlow 1.3).
- the switch's base flows: `table_miss_drop` (priority 0, no instructions: default deny) and
  `arp_to_controller` (priority 1, eth_type 0x0806 to the controller, whole packet).
- `arp_reply`: a packet-out answering an ARP request on the port it came in on.
- LLDP (link verification): `lldp_to_controller` (priority 1, eth_type 0x88cc, cookie 0),
  `lldp_packet_out` with `lldp_frame`, `lldp_origin` reading a frame back, `port_is_up`.
- `describe_error(ofproto, type, code)`: `OFPET_BAD_ACTION/OFPBAC_BAD_OUT_GROUP` for reasons.
- roles (several controllers): `role_request` (MASTER, SLAVE or NOCHANGE with a generation id),
  `role_status` reading the role-status message Open vSwitch sends an OpenFlow 1.3 controller
  that another controller's MASTER claim demoted (ONF extension 1911 of OpenFlow 1.3, the
  OpenFlow 1.4 OFPT_ROLE_STATUS body).
- reading back (reconciliation): `flow_stats_request`, `meter_config_request`,
  `group_desc_request`; `flow_from_stats`, `meter_from_stats`, `group_from_stats` decode the
  replies as specs (`held_meter`: a meter as the switch reports it after the scale and rounding).
- load (the live map and /metrics): `port_stats_request` for every port, `port_counters`
  decoding a reply's entries as `core.utilization.PortCounters` (physical ports only).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from sdn_app.core.plans import (
    COOKIE_MASK,
    COOKIE_TAG,
    ETH_TYPE_IPV6,
    IN_PORT,
    MIN_BURST_BITS,
    UNTAGGED,
    FlowSpec,
    GroupSpec,
    Match,
    MeterSpec,
    Step,
    StepKind,
)
from sdn_app.core.utilization import PortCounters

ETH_TYPE_ARP = 0x0806
ETH_TYPE_8021Q = 0x8100
OFPVID_PRESENT = 0x1000
TABLE_MISS_PRIORITY = 0
ARP_PRIORITY = 1
ALL_ONES_COOKIE = 0xFFFF_FFFF_FFFF_FFFF
MIN_BURST_KBITS = MIN_BURST_BITS // 1000

# Error type -> prefix of its code constants in ofproto_v1_3.
_CODE_PREFIX = {
    "OFPET_HELLO_FAILED": "OFPHFC_",
    "OFPET_BAD_REQUEST": "OFPBRC_",
    "OFPET_BAD_ACTION": "OFPBAC_",
    "OFPET_BAD_INSTRUCTION": "OFPBIC_",
    "OFPET_BAD_MATCH": "OFPBMC_",
    "OFPET_FLOW_MOD_FAILED": "OFPFMFC_",
    "OFPET_GROUP_MOD_FAILED": "OFPGMFC_",
    "OFPET_PORT_MOD_FAILED": "OFPPMFC_",
    "OFPET_TABLE_MOD_FAILED": "OFPTMFC_",
    "OFPET_QUEUE_OP_FAILED": "OFPQOFC_",
    "OFPET_SWITCH_CONFIG_FAILED": "OFPSCFC_",
    "OFPET_ROLE_REQUEST_FAILED": "OFPRRFC_",
    "OFPET_METER_MOD_FAILED": "OFPMMFC_",
    "OFPET_TABLE_FEATURES_FAILED": "OFPTFFC_",
}


# --- units -----------------------------------------------------------------------------------


def scaled_kbits(bits: int, scale: float) -> int:
    """`bits` (nominal, per second or per burst) x `scale`, in kbit, rounded, at least 1.

    >>> scaled_kbits(10_000_000_000, 0.002)
    20000
    >>> scaled_kbits(100, 1.0)
    1
    """
    if scale <= 0:
        raise ValueError(f"emulation scale must be positive, got {scale}")
    return max(1, round(bits * scale / 1000))


# --- flows -----------------------------------------------------------------------------------


def _port(dp: Any, port: int) -> int:
    return dp.ofproto.OFPP_IN_PORT if port == IN_PORT else port


def _masked(network: str) -> str | tuple[str, str]:
    """An IPv6 network's OXM value: the address, under its mask unless it is a /128."""
    net = ipaddress.IPv6Network(network)
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return (str(net.network_address), str(net.netmask))


def match(dp: Any, flow: FlowSpec) -> Any:
    """The `OFPMatch` of `flow` (fields left None are wildcards).

    Built from its fields in OXM order (in_port, metadata, eth_type, vlan_vid, ip_proto, the
    addresses, then icmpv6_type), which skips os-ken's keyword normalization: 2 us instead of 35 us a match, the
    bulk of encoding a flow.
    """
    m = flow.match
    fields: list[tuple[str, Any]] = []
    if m.in_port is not None:
        fields.append(("in_port", m.in_port))
    if m.metadata is not None:
        fields.append(("metadata", m.metadata))
    if m.eth_type is not None:
        fields.append(("eth_type", m.eth_type))
    if m.vlan_vid is not None:
        fields.append(("vlan_vid", _vid(dp, m.vlan_vid)))
    if m.eth_type is None:
        return dp.ofproto_parser.OFPMatch(_ordered_fields=fields)
    if m.ip_proto is not None:
        fields.append(("ip_proto", m.ip_proto))
    source, target = ("arp_spa", "arp_tpa") if m.eth_type == ETH_TYPE_ARP else ("ipv4_src", "ipv4_dst")
    if m.ipv4_src is not None:
        fields.append((source, m.ipv4_src))
    if m.ipv4_dst is not None:
        fields.append((target, m.ipv4_dst))
    if m.ipv6_src is not None:
        fields.append(("ipv6_src", _masked(m.ipv6_src)))
    if m.ipv6_dst is not None:
        fields.append(("ipv6_dst", _masked(m.ipv6_dst)))
    if m.icmpv6_type is not None:
        fields.append(("icmpv6_type", m.icmpv6_type))
    return dp.ofproto_parser.OFPMatch(_ordered_fields=fields)


def _vid(dp: Any, vlan_vid: int) -> int:
    """The OXM vlan_vid of a `Match.vlan_vid`: OFPVID_NONE untagged, else the id with OFPVID_PRESENT."""
    return dp.ofproto.OFPVID_NONE if vlan_vid == UNTAGGED else vlan_vid | dp.ofproto.OFPVID_PRESENT


def label_actions(dp: Any, push: int | None = None, set_: int | None = None, pop: bool = False) -> list[Any]:
    """The actions changing a path label's VLAN tag: push a tag with id `push`, rewrite the id to
    `set_`, or pop the tag (none of them: no action)."""
    parser = dp.ofproto_parser
    if pop:
        return [parser.OFPActionPopVlan()]
    actions = []
    if push is not None:
        actions.append(parser.OFPActionPushVlan(ETH_TYPE_8021Q))
        set_ = push
    if set_ is not None:
        actions.append(parser.OFPActionSetField(vlan_vid=set_ | dp.ofproto.OFPVID_PRESENT))
    return actions


def instructions(dp: Any, flow: FlowSpec) -> list[Any]:
    """Meter (when set), then apply-actions (label change, output to a port or to a group), or
    write-metadata and goto-table."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    out: list[Any] = []
    if flow.meter_id is not None:
        out.append(parser.OFPInstructionMeter(flow.meter_id, ofp.OFPIT_METER))
    if flow.goto_table is not None:
        assert flow.write_metadata is not None
        out.append(parser.OFPInstructionWriteMetadata(flow.write_metadata, ALL_ONES_COOKIE))
        out.append(parser.OFPInstructionGotoTable(flow.goto_table))
        return out
    actions = label_actions(dp, flow.push_label, flow.set_label, flow.pop_label)
    if flow.group_id is not None:
        actions.append(parser.OFPActionGroup(flow.group_id))
    else:
        assert flow.output is not None
        actions.append(parser.OFPActionOutput(_port(dp, flow.output), 0))
    out.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
    return out


def add_flow(dp: Any, flow: FlowSpec) -> Any:
    """OFPFC_ADD of `flow` (replaces an entry with the same match and priority, cookie included)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPFlowMod(dp, cookie=flow.cookie, cookie_mask=0, table_id=flow.table_id,
                             command=ofp.OFPFC_ADD, priority=flow.priority, buffer_id=ofp.OFP_NO_BUFFER,
                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=match(dp, flow), instructions=instructions(dp, flow))


def modify_flow(dp: Any, flow: FlowSpec, old: FlowSpec | None = None) -> Any:
    """OFPFC_MODIFY_STRICT of `flow`'s instructions; OFPFC_ADD when `old` has another cookie."""
    if old is not None and old.cookie != flow.cookie:
        return add_flow(dp, flow)
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPFlowMod(dp, cookie=flow.cookie, cookie_mask=0, table_id=flow.table_id,
                             command=ofp.OFPFC_MODIFY_STRICT, priority=flow.priority,
                             buffer_id=ofp.OFP_NO_BUFFER, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=match(dp, flow), instructions=instructions(dp, flow))


def delete_flow(dp: Any, flow: FlowSpec) -> Any:
    """OFPFC_DELETE_STRICT on `flow`'s match and priority, only with its exact cookie."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPFlowMod(dp, cookie=flow.cookie, cookie_mask=ALL_ONES_COOKIE, table_id=flow.table_id,
                             command=ofp.OFPFC_DELETE_STRICT, priority=flow.priority,
                             buffer_id=ofp.OFP_NO_BUFFER, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=match(dp, flow), instructions=[])


# --- meters and groups -----------------------------------------------------------------------


def _meter(dp: Any, command: int, meter: MeterSpec, scale: float) -> Any:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    band = parser.OFPMeterBandDrop(rate=scaled_kbits(meter.rate_bps, scale),
                                   burst_size=max(scaled_kbits(meter.burst_bits, scale), MIN_BURST_KBITS))
    return parser.OFPMeterMod(dp, command=command, flags=ofp.OFPMF_KBPS | ofp.OFPMF_BURST,
                              meter_id=meter.meter_id, bands=[band])


def add_meter(dp: Any, meter: MeterSpec, scale: float = 1.0) -> Any:
    """OFPMC_ADD: drop above rate x scale (kbit/s), burst x scale (kbit, at least `MIN_BURST_KBITS`)."""
    return _meter(dp, dp.ofproto.OFPMC_ADD, meter, scale)


def modify_meter(dp: Any, meter: MeterSpec, scale: float = 1.0) -> Any:
    """OFPMC_MODIFY of the meter's band to the spec's rate and burst."""
    return _meter(dp, dp.ofproto.OFPMC_MODIFY, meter, scale)


def delete_meter(dp: Any, meter: MeterSpec) -> Any:
    """OFPMC_DELETE of the meter (the switch removes the flows using it)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPMeterMod(dp, command=ofp.OFPMC_DELETE, flags=0, meter_id=meter.meter_id, bands=[])


def add_group(dp: Any, group: GroupSpec) -> Any:
    """OFPGC_ADD of a fast-failover group: bucket i watches its port and outputs to its output,
    after pushing its label (or, with `retag`, rewriting the frame's VLAN id to it)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if group.type != "ff":
        raise ValueError(f"only fast-failover groups are encoded, not {group.describe()}")

    def relabel(bucket: tuple[int, ...]) -> list[Any]:
        if len(bucket) < 3:
            return []
        return label_actions(dp, set_=bucket[2]) if group.retag else label_actions(dp, push=bucket[2])
    buckets = [parser.OFPBucket(weight=0, watch_port=bucket[0], watch_group=ofp.OFPG_ANY,
                                actions=[*relabel(bucket), parser.OFPActionOutput(_port(dp, bucket[1]), 0)])
               for bucket in group.buckets]
    return parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_FF, group_id=group.group_id,
                              buckets=buckets)


def delete_group(dp: Any, group: GroupSpec) -> Any:
    """OFPGC_DELETE of the group (the switch removes the flows using it)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, type_=ofp.OFPGT_FF, group_id=group.group_id,
                              buckets=[])


# --- steps -----------------------------------------------------------------------------------


def encode_step(dp: Any, step: Step, scale: float = 1.0) -> list[Any]:
    """The messages of `step` for `dp` (an empty list for a BARRIER: the fabric sends those)."""
    kind, spec = step.kind, step.spec
    if kind is StepKind.BARRIER:
        return []
    if kind is StepKind.ADD_FLOW:
        assert isinstance(spec, FlowSpec)
        return [add_flow(dp, spec)]
    if kind is StepKind.MODIFY_FLOW:
        assert isinstance(spec, FlowSpec)
        old = step.old if isinstance(step.old, FlowSpec) else None
        return [modify_flow(dp, spec, old)]
    if kind is StepKind.DELETE_FLOW:
        assert isinstance(spec, FlowSpec)
        return [delete_flow(dp, spec)]
    if kind is StepKind.ADD_METER:
        assert isinstance(spec, MeterSpec)
        return [add_meter(dp, spec, scale)]
    if kind is StepKind.MODIFY_METER:
        assert isinstance(spec, MeterSpec)
        return [modify_meter(dp, spec, scale)]
    if kind is StepKind.DELETE_METER:
        assert isinstance(spec, MeterSpec)
        return [delete_meter(dp, spec)]
    if kind is StepKind.ADD_GROUP:
        assert isinstance(spec, GroupSpec)
        return [add_group(dp, spec)]
    if kind is StepKind.DELETE_GROUP:
        assert isinstance(spec, GroupSpec)
        return [delete_group(dp, spec)]
    raise ValueError(f"no encoding for step kind {kind}")


def barrier(dp: Any) -> Any:
    """An OFPBarrierRequest."""
    return dp.ofproto_parser.OFPBarrierRequest(dp)


# --- base flows and ARP ----------------------------------------------------------------------


def table_miss_drop(dp: Any, table_id: int = 0) -> Any:
    """Priority 0, match all, no instructions: whatever no flow claims is dropped (default deny)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPFlowMod(dp, cookie=0, table_id=table_id, command=ofp.OFPFC_ADD,
                             priority=TABLE_MISS_PRIORITY, buffer_id=ofp.OFP_NO_BUFFER,
                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=parser.OFPMatch(), instructions=[])


def _to_controller(dp: Any, eth_type: int, priority: int, table_id: int) -> Any:
    """Cookie 0 (never a reservation's): every frame of `eth_type` goes whole to the controller."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    action = parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
    return parser.OFPFlowMod(dp, cookie=0, table_id=table_id, command=ofp.OFPFC_ADD,
                             priority=priority, buffer_id=ofp.OFP_NO_BUFFER,
                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=parser.OFPMatch(eth_type=eth_type),
                             instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [action])])


def arp_to_controller(dp: Any, table_id: int = 0) -> Any:
    """Priority 1: every ARP packet goes whole to the controller (which answers for DTNs)."""
    return _to_controller(dp, ETH_TYPE_ARP, ARP_PRIORITY, table_id)


def arp_reply(dp: Any, in_port: int, *, asker_mac: str, asker_ip: str, target_mac: str, target_ip: str) -> Any:
    """A packet-out sending `target_ip is-at target_mac` to the asker, out the port it asked on."""
    from os_ken.lib.packet import arp, ethernet, packet

    ofp, parser = dp.ofproto, dp.ofproto_parser
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(ethertype=ETH_TYPE_ARP, dst=asker_mac, src=target_mac))
    pkt.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=target_mac, src_ip=target_ip,
                             dst_mac=asker_mac, dst_ip=asker_ip))
    pkt.serialize()
    return parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=in_port,
                               actions=[parser.OFPActionOutput(ofp.OFPP_IN_PORT, 0)], data=pkt.data)


# --- LLDP (link verification) ----------------------------------------------------------------
#
# tsdn's LLDP frame names where it was sent from: chassis id "dpid:<16 hex digits>" (locally
# assigned subtype, as the Ryu family writes it) and port id the port number as 4 bytes
# (port-component subtype). A switch hands every LLDP frame to the controller (cookie 0: not
# a reservation's flow), whose packet-in says where it arrived.

ETH_TYPE_LLDP = 0x88CC
LLDP_PRIORITY = 1
LLDP_TTL_SECONDS = 120
_CHASSIS_PREFIX = b"dpid:"


def lldp_to_controller(dp: Any, table_id: int = 0) -> Any:
    """Priority 1, cookie 0: every LLDP frame goes whole to the controller (link verification)."""
    return _to_controller(dp, ETH_TYPE_LLDP, LLDP_PRIORITY, table_id)


def lldp_frame(dpid: int, port: int, src_mac: str) -> bytes:
    """The Ethernet frame of tsdn's LLDP announcement of switch `dpid` port `port`.

    >>> lldp_origin(lldp_frame(0x1601, 3, "02:00:00:00:16:01"))
    (5633, 3)
    """
    from os_ken.lib.packet import ethernet, lldp, packet

    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=lldp.LLDP_MAC_NEAREST_BRIDGE, src=src_mac, ethertype=ETH_TYPE_LLDP))
    pkt.add_protocol(lldp.lldp([
        lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED, chassis_id=_CHASSIS_PREFIX + b"%016x" % dpid),
        lldp.PortID(subtype=lldp.PortID.SUB_PORT_COMPONENT, port_id=port.to_bytes(4, "big")),
        lldp.TTL(ttl=LLDP_TTL_SECONDS),
        lldp.End(),
    ]))
    pkt.serialize()
    return bytes(pkt.data)


def lldp_origin(data: bytes) -> tuple[int, int] | None:
    """(dpid, port) that sent the tsdn LLDP frame `data`; None for anything else (other LLDP,
    other protocols, malformed frames)."""
    from os_ken.lib.packet import ethernet, lldp

    try:
        eth, _, rest = ethernet.ethernet.parser(bytes(data))
        if eth.ethertype != ETH_TYPE_LLDP:
            return None
        lldpdu, _, _ = lldp.lldp.parser(bytes(rest))
    except Exception:  # os-ken's parsers raise assorted errors on malformed frames
        return None
    tlvs = getattr(lldpdu, "tlvs", None) or []
    if len(tlvs) < 2:
        return None
    chassis, port = tlvs[0], tlvs[1]
    if not isinstance(chassis, lldp.ChassisID) or chassis.subtype != lldp.ChassisID.SUB_LOCALLY_ASSIGNED:
        return None
    if not isinstance(port, lldp.PortID) or port.subtype != lldp.PortID.SUB_PORT_COMPONENT:
        return None
    chassis_id, port_id = bytes(chassis.chassis_id), bytes(port.port_id)
    hex_dpid = chassis_id.removeprefix(_CHASSIS_PREFIX)
    if hex_dpid == chassis_id or len(hex_dpid) != 16 or len(port_id) != 4:
        return None
    try:
        dpid = int(hex_dpid.decode("ascii"), 16)
    except ValueError:
        return None
    return dpid, int.from_bytes(port_id, "big")


def lldp_packet_out(dp: Any, port: int, src_mac: str) -> Any:
    """A packet-out sending tsdn's LLDP frame for `dp` port `port` out of that port."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                               actions=[parser.OFPActionOutput(port, 0)], data=lldp_frame(dp.id, port, src_mac))


def port_is_up(ofp: Any, port: Any) -> bool:
    """Whether an `OFPPort` (port description or port status) can carry traffic: link not down,
    not administratively down."""
    return not (port.state & ofp.OFPPS_LINK_DOWN) and not (port.config & ofp.OFPPC_PORT_DOWN)


# --- roles -----------------------------------------------------------------------------------

ONF_EXPERIMENTER_ID = 0x4F4E4600
ONFT_ROLE_STATUS = 1911
_ROLE_STATUS_BODY = struct.Struct("!IB3xQ")  # role, reason, pad, generation_id (ofp14_role_status)


def role_request(dp: Any, role: int, generation: int) -> Any:
    """An OFPRoleRequest for `role` (`OFPCR_ROLE_*`) with master election generation `generation`."""
    if not 0 <= generation < 1 << 64:
        raise ValueError(f"generation id {generation} is not a 64-bit unsigned number")
    return dp.ofproto_parser.OFPRoleRequest(dp, role, generation)


def role_status(experimenter: int, exp_type: int, data: bytes) -> tuple[int, int, int] | None:
    """(role, reason, generation) of an experimenter message that is a role status; None otherwise.

    >>> role_status(ONF_EXPERIMENTER_ID, ONFT_ROLE_STATUS, bytes.fromhex("00000003" "00000000" "0000000000000002"))
    (3, 0, 2)
    """
    if experimenter != ONF_EXPERIMENTER_ID or exp_type != ONFT_ROLE_STATUS or len(data) < _ROLE_STATUS_BODY.size:
        return None
    role, reason, generation = _ROLE_STATUS_BODY.unpack_from(bytes(data))
    return role, reason, generation


# --- errors ----------------------------------------------------------------------------------


def describe_error(ofp: Any, type_: int, code: int) -> str:
    """`OFPET_METER_MOD_FAILED/OFPMMFC_UNKNOWN_METER` for an error message's type and code."""
    type_name = next((n for n in _CODE_PREFIX if getattr(ofp, n, None) == type_), None)
    if type_name is None:
        return f"error type {type_} code {code}"
    prefix = _CODE_PREFIX[type_name]
    code_name = next((n for n in sorted(vars(ofp)) if n.startswith(prefix) and getattr(ofp, n) == code), None)
    return f"{type_name}/{code_name or f'code {code}'}"


# --- reading the switch back (reconciliation) ------------------------------------------------
#
# What a switch reports (multipart replies) decoded as plan specs, so that `core.reconcile`
# can compare them with what the reservations want. Entries in a shape tsdn never installs
# decode to specs no plan holds (`NO_OUTPUT`, a meter rate of 0), so reconciliation corrects
# or removes them; a flow whose match cannot be written as a `plans.Match` raises ValueError
# (the caller deletes it as reported: `delete_flow_as_held`).

NO_OUTPUT = -1  # the output of a flow or bucket whose actions are not one output (or one group)
_MATCH_FIELDS = frozenset({"in_port", "eth_type", "ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa", "ip_proto",
                           "ipv6_src", "ipv6_dst", "icmpv6_type"})
_ALL_ONES_128 = (1 << 128) - 1
_MASKABLE = frozenset({"ipv6_src", "ipv6_dst"})  # the only fields tsdn matches under a mask
# The fields of each family of flow tsdn writes (in_port and eth_type aside).
_FAMILY_FIELDS = {0x0800: frozenset({"ipv4_src", "ipv4_dst"}), ETH_TYPE_ARP: frozenset({"arp_spa", "arp_tpa"}),
                  ETH_TYPE_IPV6: frozenset({"ip_proto", "ipv6_src", "ipv6_dst", "icmpv6_type"})}
_GROUP_TYPES = {"OFPGT_ALL": "all", "OFPGT_SELECT": "select", "OFPGT_INDIRECT": "indirect", "OFPGT_FF": "ff"}


def flow_stats_request(dp: Any) -> Any:
    """OFPFlowStatsRequest for every flow with the tsdn cookie tag, in every table."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                      COOKIE_TAG, COOKIE_MASK, parser.OFPMatch())


def meter_config_request(dp: Any) -> Any:
    """OFPMeterConfigStatsRequest for every meter."""
    return dp.ofproto_parser.OFPMeterConfigStatsRequest(dp, 0, dp.ofproto.OFPM_ALL)


def group_desc_request(dp: Any) -> Any:
    """OFPGroupDescStatsRequest (every group)."""
    return dp.ofproto_parser.OFPGroupDescStatsRequest(dp, 0)


def port_stats_request(dp: Any) -> Any:
    """OFPPortStatsRequest for every port (cumulative byte counters, for link load)."""
    return dp.ofproto_parser.OFPPortStatsRequest(dp, 0, dp.ofproto.OFPP_ANY)


def port_counters(ofp: Any, body: Iterable[Any]) -> list[PortCounters]:
    """The byte counters of the physical ports in a port stats reply's entries."""
    return [PortCounters(stats.port_no, stats.tx_bytes, stats.rx_bytes) for stats in body
            if 0 < stats.port_no <= ofp.OFPP_MAX]


def _unscaled(kbits: int, scale: float) -> int:
    return round(kbits * 1000 / scale)


def held_meter(meter: MeterSpec, scale: float = 1.0) -> MeterSpec:
    """`meter` as a switch reports it after `add_meter(dp, meter, scale)`, decoded by
    `meter_from_stats`: rate and burst rounded to whole kbit at the scale, burst floor applied."""
    rate = scaled_kbits(meter.rate_bps, scale)
    burst = max(scaled_kbits(meter.burst_bits, scale), MIN_BURST_KBITS)
    return replace(meter, rate_bps=_unscaled(rate, scale), burst_bits=_unscaled(burst, scale))


def _network(value: str | tuple[str, str], where: str, name: str) -> str:
    """The canonical network text of a reported IPv6 field: an address (a /128) or (address, mask)."""
    address, mask = value if isinstance(value, tuple) else (value, None)
    try:
        length = 128
        if mask is not None:
            hosts = ~int(ipaddress.IPv6Address(mask)) & _ALL_ONES_128
            if hosts & (hosts + 1):
                raise ValueError("not a prefix mask")
            length -= hosts.bit_length()
        return str(ipaddress.IPv6Network(f"{address}/{length}"))
    except ValueError:
        shown = address if mask is None else f"{address} mask {mask}"
        raise ValueError(f"{where} matches {name} {shown}, which is no IPv6 prefix tsdn writes") from None


def _decoded_vid(value: Any, where: str) -> int:
    """A reported vlan_vid as `Match.vlan_vid`: OFPVID_NONE is `UNTAGGED`, else the id."""
    if not isinstance(value, int) or (value != 0 and not value & OFPVID_PRESENT):
        raise ValueError(f"{where} matches vlan_vid {value!r}, which tsdn never matches")
    return UNTAGGED if value == 0 else value & 0xFFF


def _decoded_match(stats: Any, switch: str) -> Match:
    fields = dict(stats.match.items())
    where = f"{switch}: flow cookie {stats.cookie:#x} priority {stats.priority}"
    vlan_vid = _decoded_vid(fields.pop("vlan_vid"), where) if "vlan_vid" in fields else None
    metadata = fields.pop("metadata", None)
    if isinstance(metadata, tuple):
        raise ValueError(f"{where} matches metadata under a mask, which tsdn never uses")
    eth_type = fields.get("eth_type")
    if eth_type is None and (vlan_vid is not None or metadata is not None):
        odd = sorted(set(fields) - {"in_port"})
        if odd:
            raise ValueError(f"{where} matches {', '.join(odd)} without an eth_type, which tsdn never matches")
        return Match(in_port=fields.get("in_port"), eth_type=None, vlan_vid=vlan_vid, metadata=metadata)
    found = _decoded_typed(fields, where, eth_type)
    return replace(found, vlan_vid=vlan_vid, metadata=metadata)


def _decoded_typed(fields: dict, where: str, eth_type: int | None) -> Match:
    allowed = _MATCH_FIELDS if eth_type is None else {"in_port", "eth_type", *_FAMILY_FIELDS.get(eth_type, ())}
    odd = sorted(set(fields) - allowed)
    if odd:
        with_type = "" if eth_type is None else f" with eth_type {eth_type:#06x}"
        raise ValueError(f"{where} matches {', '.join(odd)}, which tsdn never matches{with_type}")
    masked = sorted(k for k, v in fields.items() if isinstance(v, tuple) and k not in _MASKABLE)
    if masked:
        raise ValueError(f"{where} matches {', '.join(masked)} under a mask, which tsdn never uses")
    if eth_type is None:
        raise ValueError(f"{where} matches no eth_type; tsdn flows always do")
    if eth_type == ETH_TYPE_IPV6:
        return Match(in_port=fields.get("in_port"), eth_type=eth_type, ip_proto=fields.get("ip_proto"),
                     ipv6_src=_network(fields["ipv6_src"], where, "ipv6_src") if "ipv6_src" in fields else None,
                     ipv6_dst=_network(fields["ipv6_dst"], where, "ipv6_dst") if "ipv6_dst" in fields else None,
                     icmpv6_type=fields.get("icmpv6_type"))
    source, target = ("arp_spa", "arp_tpa") if eth_type == ETH_TYPE_ARP else ("ipv4_src", "ipv4_dst")
    return Match(in_port=fields.get("in_port"), eth_type=eth_type, ipv4_src=fields.get(source),
                 ipv4_dst=fields.get(target))


@dataclass(frozen=True)
class _Actions:
    """An action list as tsdn writes them: a label change, then one output or group."""

    output: int | None = NO_OUTPUT
    group_id: int | None = None
    push_label: int | None = None
    set_label: int | None = None
    pop_label: bool = False


def _decoded_actions(dp: Any, actions: list[Any]) -> _Actions:
    """What an action list does, in tsdn's terms; output `NO_OUTPUT` for a shape tsdn never writes."""
    parser, ofp = dp.ofproto_parser, dp.ofproto
    actions = list(actions)
    label: dict = {}
    if actions and isinstance(actions[0], parser.OFPActionPopVlan):
        label, actions = {"pop_label": True}, actions[1:]
    elif len(actions) >= 2 and isinstance(actions[0], parser.OFPActionPushVlan) \
            and actions[0].ethertype == ETH_TYPE_8021Q and _set_vid(parser, ofp, actions[1]) is not None:
        label, actions = {"push_label": _set_vid(parser, ofp, actions[1])}, actions[2:]
    elif actions and _set_vid(parser, ofp, actions[0]) is not None:
        label, actions = {"set_label": _set_vid(parser, ofp, actions[0])}, actions[1:]
    if len(actions) == 1 and isinstance(actions[0], parser.OFPActionOutput):
        return _Actions(output=actions[0].port, **label)
    if len(actions) == 1 and isinstance(actions[0], parser.OFPActionGroup):
        return _Actions(output=None, group_id=actions[0].group_id, **label)
    return _Actions()


def _set_vid(parser: Any, ofp: Any, action: Any) -> int | None:
    """The VLAN id a set-field action writes (with OFPVID_PRESENT), None for any other action."""
    if not isinstance(action, parser.OFPActionSetField) or action.key != "vlan_vid":
        return None
    value = action.value
    return value & 0xFFF if isinstance(value, int) and value & ofp.OFPVID_PRESENT else None


def flow_from_stats(dp: Any, stats: Any, switch: str) -> FlowSpec:
    """The `FlowSpec` of a flow entry as `dp` reports it (an `OFPFlowStats`), on `switch`.

    Instructions other than an optional meter and one apply-actions with one output or group
    action decode as output `NO_OUTPUT`. IPv6 addresses decode as networks (`plans.Match`: under
    their mask, or a /128 without one). Raises ValueError naming the field when the match is not
    one tsdn writes (other fields or fields of another eth_type, masks other than an IPv6
    prefix's, no eth_type).
    """
    ofp, parser = dp.ofproto, dp.ofproto_parser
    found = _decoded_match(stats, switch)
    meter_id: int | None = None
    applies: list[Any] = []
    metadata: list[int] = []
    goto: list[int] = []
    odd = False
    for instruction in stats.instructions:
        if isinstance(instruction, parser.OFPInstructionMeter) and meter_id is None:
            meter_id = instruction.meter_id
        elif isinstance(instruction, parser.OFPInstructionActions) and instruction.type == ofp.OFPIT_APPLY_ACTIONS \
                and not applies:
            applies.append(instruction)
        elif isinstance(instruction, parser.OFPInstructionWriteMetadata) and not metadata \
                and instruction.metadata_mask == ALL_ONES_COOKIE:
            metadata.append(instruction.metadata)
        elif isinstance(instruction, parser.OFPInstructionGotoTable) and not goto:
            goto.append(instruction.table_id)
        else:
            odd = True
    common = {"switch": switch, "dpid": dp.id, "table_id": stats.table_id, "priority": stats.priority,
              "match": found, "cookie": stats.cookie}
    if not odd and not applies and metadata and goto:
        return FlowSpec(**common, goto_table=goto[0], write_metadata=metadata[0], meter_id=meter_id)
    actions = _Actions() if odd or metadata or goto or not applies else _decoded_actions(dp, applies[0].actions)
    if actions.output == NO_OUTPUT:
        return FlowSpec(**common, output=NO_OUTPUT)
    return FlowSpec(**common, output=actions.output, group_id=actions.group_id, meter_id=meter_id,
                    push_label=actions.push_label, set_label=actions.set_label, pop_label=actions.pop_label)


def meter_from_stats(dp: Any, stats: Any, switch: str, scale: float = 1.0) -> MeterSpec:
    """The `MeterSpec` of a meter as `dp` reports it (an `OFPMeterConfigStats`), on `switch`.

    Rates and bursts are unscaled back to nominal bits (see `held_meter`). A meter not in
    tsdn's shape (kbit/s with a burst, one drop band) decodes with rate and burst 0.
    """
    ofp, parser = dp.ofproto, dp.ofproto_parser
    bands = list(stats.bands or [])
    if stats.flags == ofp.OFPMF_KBPS | ofp.OFPMF_BURST and len(bands) == 1 \
            and isinstance(bands[0], parser.OFPMeterBandDrop):
        rate, burst = _unscaled(bands[0].rate, scale), _unscaled(bands[0].burst_size, scale)
    else:
        rate = burst = 0
    return MeterSpec(switch=switch, dpid=dp.id, meter_id=stats.meter_id, rate_bps=rate, burst_bits=burst)


def group_from_stats(dp: Any, stats: Any, switch: str) -> GroupSpec:
    """The `GroupSpec` of a group as `dp` reports it (an `OFPGroupDescStats`), on `switch`.

    The type is named as in `GroupSpec` ("ff"; "all", "select", "indirect" for the others); a
    bucket whose actions are not one output has output `NO_OUTPUT`. Buckets that rewrite the
    VLAN id decode as labelled buckets of a `retag` group, when no bucket pushes one.
    """
    ofp = dp.ofproto
    kind = next((name for const, name in _GROUP_TYPES.items() if getattr(ofp, const) == stats.type),
                f"type {stats.type}")
    decoded = [(bucket.watch_port, _decoded_actions(dp, bucket.actions)) for bucket in stats.buckets]
    retag = any(a.set_label is not None for _, a in decoded) and not any(a.push_label is not None for _, a in decoded)
    buckets: list[tuple[int, ...]] = []
    for watch_port, actions in decoded:
        if actions.group_id is not None or actions.output is None or actions.pop_label \
                or (actions.set_label is not None and not retag):
            buckets.append((watch_port, NO_OUTPUT))
        elif actions.push_label is not None or actions.set_label is not None:
            label = actions.push_label if actions.push_label is not None else actions.set_label
            assert label is not None
            buckets.append((watch_port, actions.output, label))
        else:
            buckets.append((watch_port, actions.output))
    return GroupSpec(switch=switch, dpid=dp.id, group_id=stats.group_id, type=kind, buckets=tuple(buckets),
                     retag=retag)


def delete_flow_as_held(dp: Any, stats: Any) -> Any:
    """OFPFC_DELETE_STRICT of a flow entry exactly as `dp` reported it (table, priority, match,
    cookie under an all-ones mask): for entries whose match `flow_from_stats` cannot decode."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPFlowMod(dp, cookie=stats.cookie, cookie_mask=ALL_ONES_COOKIE, table_id=stats.table_id,
                             command=ofp.OFPFC_DELETE_STRICT, priority=stats.priority,
                             buffer_id=ofp.OFP_NO_BUFFER, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=stats.match, instructions=[])
