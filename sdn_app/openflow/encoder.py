"""Plan specs as OpenFlow 1.3 messages: the one place for the wire format (Faucet's `valve_of.py`).

Pure functions: each takes a datapath (anything with os-ken's `ofproto` and `ofproto_parser`
attributes, a connected `os_ken.controller.controller.Datapath` or a stand-in carrying the
real `ofproto_v1_3` modules) and returns message objects; nothing is sent here.

- `encode_step(dp, step, scale)`: the messages of one `plans.Step` (none for a BARRIER;
  the fabric sends `barrier(dp)` itself).
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
- `describe_error(ofproto, type, code)`: `OFPET_BAD_ACTION/OFPBAC_BAD_OUT_GROUP` for reasons.
"""

from __future__ import annotations

from typing import Any

from sdn_app.core.plans import IN_PORT, MIN_BURST_BITS, FlowSpec, GroupSpec, MeterSpec, Step, StepKind

ETH_TYPE_ARP = 0x0806
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


def match(dp: Any, flow: FlowSpec) -> Any:
    """The `OFPMatch` of `flow` (fields left None are wildcards)."""
    m = flow.match
    fields: dict[str, Any] = {}
    if m.in_port is not None:
        fields["in_port"] = m.in_port
    fields["eth_type"] = m.eth_type
    source, target = ("arp_spa", "arp_tpa") if m.eth_type == ETH_TYPE_ARP else ("ipv4_src", "ipv4_dst")
    if m.ipv4_src is not None:
        fields[source] = m.ipv4_src
    if m.ipv4_dst is not None:
        fields[target] = m.ipv4_dst
    return dp.ofproto_parser.OFPMatch(**fields)


def instructions(dp: Any, flow: FlowSpec) -> list[Any]:
    """Meter (when set), then apply-actions: output to a port or to a group."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    out: list[Any] = []
    if flow.meter_id is not None:
        out.append(parser.OFPInstructionMeter(flow.meter_id, ofp.OFPIT_METER))
    if flow.group_id is not None:
        action = parser.OFPActionGroup(flow.group_id)
    else:
        assert flow.output is not None
        action = parser.OFPActionOutput(_port(dp, flow.output), 0)
    out.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [action]))
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
    """OFPGC_ADD of a fast-failover group: bucket i watches its port and outputs to its output."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if group.type != "ff":
        raise ValueError(f"only fast-failover groups are encoded, not {group.describe()}")
    buckets = [parser.OFPBucket(weight=0, watch_port=watch, watch_group=ofp.OFPG_ANY,
                                actions=[parser.OFPActionOutput(_port(dp, output), 0)])
               for watch, output in group.buckets]
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


def arp_to_controller(dp: Any, table_id: int = 0) -> Any:
    """Priority 1: every ARP packet goes whole to the controller (which answers for DTNs)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    action = parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
    return parser.OFPFlowMod(dp, cookie=0, table_id=table_id, command=ofp.OFPFC_ADD,
                             priority=ARP_PRIORITY, buffer_id=ofp.OFP_NO_BUFFER,
                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=parser.OFPMatch(eth_type=ETH_TYPE_ARP),
                             instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [action])])


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


# --- errors ----------------------------------------------------------------------------------


def describe_error(ofp: Any, type_: int, code: int) -> str:
    """`OFPET_METER_MOD_FAILED/OFPMMFC_UNKNOWN_METER` for an error message's type and code."""
    type_name = next((n for n in _CODE_PREFIX if getattr(ofp, n, None) == type_), None)
    if type_name is None:
        return f"error type {type_} code {code}"
    prefix = _CODE_PREFIX[type_name]
    code_name = next((n for n in sorted(vars(ofp)) if n.startswith(prefix) and getattr(ofp, n) == code), None)
    return f"{type_name}/{code_name or f'code {code}'}"
