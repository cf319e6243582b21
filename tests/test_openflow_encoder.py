"""The OpenFlow 1.3 encoding of plan specs, with os-ken's real ofproto_v1_3 parser.

The stand-in datapath carries os-ken's own `ofproto_v1_3` and `ofproto_v1_3_parser` modules
(no mock of os-ken: the message classes are the ones sent on the wire), and every message is
serialized to check that it is well formed. Also: whom the app answers ARP for, and a fabric
with no switch refusing steps before sending anything.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import socket

import pytest
from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from benchmarks.report import free_port
from sdn_app.core.paths import PathFinder, PathRequest, Unbooked
from sdn_app.core.plans import (
    COOKIE_TAG,
    ETH_TYPE_IPV6,
    FORWARD,
    IN_PORT,
    MIN_BURST_BITS,
    PRIORITY,
    REVERSE,
    REVERSE_PRIORITY,
    FlowPlan,
    FlowSpec,
    GroupSpec,
    Match,
    MeterSpec,
    Step,
    StepKind,
    plan_for,
    plan_steps,
    reverse_rate,
)
from sdn_app.core.topology import Topology
from sdn_app.openflow import encoder
from sdn_app.openflow.app import arp_answer
from topologies import builtin_topology

RID = "0123456789abcdef0123456789abcdef"
G = 1_000_000_000
SCALE = 0.002


class StandInDatapath:
    """What the encoder reads of a datapath: os-ken's real OpenFlow 1.3 modules and an id."""

    ofproto = ofp
    ofproto_parser = parser
    id = 1


DP = StandInDatapath()


def serialized(msg):
    msg.set_xid(7)
    msg.serialize()
    assert len(msg.buf) >= 8
    return msg


@pytest.fixture(scope="module")
def ring8() -> Topology:
    return Topology.load(builtin_topology("ring8"))


PREFIXES = ("2001:db8:8:101::/64", "2001:db8:8:301::/64")  # a Rucio rule's /64 at dtn1 and at dtn3


def make_plan(topology: Topology, src: str, dst: str, bandwidth: int = 10 * G, protect: bool = False,
              prefixes: tuple[str, str] | tuple[None, None] = (None, None)) -> FlowPlan:
    route = PathFinder(topology, Unbooked(topology)).route(PathRequest(src, dst, bandwidth, 0, 3600, protect=protect))
    return plan_for(topology, RID, src, dst, route, bandwidth, src_prefix=prefixes[0], dst_prefix=prefixes[1])


def ingress(plan: FlowPlan, direction: str = "forward") -> FlowSpec:
    return next(f for f in plan.flows if f.role == "ingress" and f.direction == direction)


# --- flows -----------------------------------------------------------------------------------


def test_the_ingress_flow_matches_the_pair_on_the_dtn_port_meters_and_outputs(ring8):
    plan = make_plan(ring8, "dtn1", "dtn3")
    flow = ingress(plan)
    msg = serialized(encoder.add_flow(DP, flow))
    assert msg.command == ofp.OFPFC_ADD
    assert (msg.cookie, msg.cookie_mask, msg.priority, msg.table_id) == (plan.cookie, 0, PRIORITY, 0)
    assert msg.cookie & COOKIE_TAG == COOKIE_TAG
    assert dict(msg.match.items()) == {"in_port": 3, "eth_type": 0x0800, "ipv4_src": "10.0.0.1",
                                       "ipv4_dst": "10.0.0.3"}
    meter, actions = msg.instructions
    assert isinstance(meter, parser.OFPInstructionMeter) and meter.meter_id == flow.meter_id
    assert actions.type == ofp.OFPIT_APPLY_ACTIONS
    [out] = actions.actions
    assert isinstance(out, parser.OFPActionOutput) and out.port == flow.output == 1  # s1 port 1 faces s2


def test_a_transit_flow_has_no_meter_and_the_reverse_direction_its_own_priority(ring8):
    plan = make_plan(ring8, "dtn1", "dtn3")
    transit = next(f for f in plan.flows if f.switch == "s2" and f.direction == REVERSE)
    msg = serialized(encoder.add_flow(DP, transit))
    assert msg.priority == REVERSE_PRIORITY
    assert dict(msg.match.items()) == {"in_port": 1, "eth_type": 0x0800, "ipv4_src": "10.0.0.3",
                                       "ipv4_dst": "10.0.0.1"}
    [actions] = msg.instructions
    assert [a.port for a in actions.actions] == [2]


def test_modify_is_strict_and_becomes_an_add_when_the_cookie_changes(ring8):
    plan = make_plan(ring8, "dtn1", "dtn3")
    flow = ingress(plan)
    moved = FlowSpec(switch=flow.switch, dpid=flow.dpid, priority=flow.priority, match=flow.match, cookie=flow.cookie,
                     output=2, meter_id=flow.meter_id, role=flow.role)
    msg = serialized(encoder.modify_flow(DP, moved, flow))
    assert msg.command == ofp.OFPFC_MODIFY_STRICT and msg.priority == PRIORITY
    assert msg.instructions[-1].actions[0].port == 2
    other = FlowSpec(switch=flow.switch, dpid=flow.dpid, priority=flow.priority, match=flow.match,
                     cookie=COOKIE_TAG | 5, output=2)
    assert encoder.modify_flow(DP, other, flow).command == ofp.OFPFC_ADD
    [step_msg] = encoder.encode_step(DP, Step(StepKind.MODIFY_FLOW, ("s1",), other, flow))
    assert step_msg.command == ofp.OFPFC_ADD and step_msg.cookie == COOKIE_TAG | 5


def test_delete_is_strict_on_match_and_priority_with_the_exact_cookie(ring8):
    plan = make_plan(ring8, "dtn1", "dtn3")
    flow = ingress(plan)
    msg = serialized(encoder.delete_flow(DP, flow))
    assert msg.command == ofp.OFPFC_DELETE_STRICT
    assert (msg.cookie, msg.cookie_mask, msg.priority) == (plan.cookie, 0xFFFF_FFFF_FFFF_FFFF, PRIORITY)
    assert (msg.out_port, msg.out_group) == (ofp.OFPP_ANY, ofp.OFPG_ANY)
    assert dict(msg.match.items())["in_port"] == 3
    assert msg.instructions == []


def test_a_prefix_reservation_matches_ipv6_under_the_prefix_masks_and_solicitations(ring8):
    plan = make_plan(ring8, "dtn1", "dtn3", prefixes=PREFIXES)
    flow = ingress(plan)
    msg = serialized(encoder.add_flow(DP, flow))
    assert dict(msg.match.items()) == {"in_port": 3, "eth_type": 0x86DD,
                                       "ipv6_src": ("2001:db8:8:101::", "ffff:ffff:ffff:ffff::"),
                                       "ipv6_dst": ("2001:db8:8:301::", "ffff:ffff:ffff:ffff::")}
    assert isinstance(msg.instructions[0], parser.OFPInstructionMeter)
    solicit = next(f for f in plan.flows if f.role == "ingress" and f.match.icmpv6_type is not None)
    msg = serialized(encoder.add_flow(DP, solicit))
    assert dict(msg.match.items()) == {"in_port": 3, "eth_type": 0x86DD, "ip_proto": 58,
                                       "ipv6_src": ("2001:db8:8:101::", "ffff:ffff:ffff:ffff::"),
                                       "ipv6_dst": ("ff02::1:ff00:0", "ffff:ffff:ffff:ffff:ffff:ffff:ff00:0"),
                                       "icmpv6_type": 135}
    assert [type(i) for i in msg.instructions] == [parser.OFPInstructionActions]  # no meter
    one = FlowSpec(switch="s1", dpid=1, priority=5, cookie=COOKIE_TAG, output=4,
                   match=Match(eth_type=0x86DD, ipv6_src="2001:db8::1/128", ipv6_dst="2001:db8::/32"))
    assert dict(serialized(encoder.add_flow(DP, one)).match.items()) == {
        "eth_type": 0x86DD, "ipv6_src": "2001:db8::1", "ipv6_dst": ("2001:db8::", "ffff:ffff::")}


def test_a_wildcard_match_leaves_the_fields_out():
    flow = FlowSpec(switch="s1", dpid=1, priority=5, match=Match(ipv4_dst="10.0.0.9"), cookie=COOKIE_TAG, output=4)
    assert dict(serialized(encoder.add_flow(DP, flow)).match.items()) == {"eth_type": 0x0800, "ipv4_dst": "10.0.0.9"}


# --- meters ----------------------------------------------------------------------------------


def test_meters_are_kbps_with_burst_and_one_drop_band_scaled(ring8):
    plan = make_plan(ring8, "dtn1", "dtn3", bandwidth=10 * G)
    forward = next(m for m in plan.meters if m.direction == "forward")
    msg = serialized(encoder.add_meter(DP, forward, SCALE))
    assert msg.command == ofp.OFPMC_ADD and msg.meter_id == forward.meter_id
    assert msg.flags == ofp.OFPMF_KBPS | ofp.OFPMF_BURST
    [band] = msg.bands
    assert isinstance(band, parser.OFPMeterBandDrop)
    assert band.rate == 20_000  # 10G x 0.002 = 20 Mbit/s
    assert band.burst_size == 1_000  # 10 ms at 20 Mbit/s is 200 kbit: the plan's 1 Mbit floor holds
    reverse = next(m for m in plan.meters if m.direction == REVERSE)
    assert reverse.rate_bps == reverse_rate(10 * G)
    assert encoder.add_meter(DP, reverse, SCALE).bands[0].rate == 1_000  # 500M x 0.002 = 1 Mbit/s


def test_meter_rates_are_unscaled_at_scale_one_and_never_below_one_kbps():
    meter = MeterSpec(switch="s1", dpid=1, meter_id=9, rate_bps=400 * G, burst_bits=4 * G)
    band = encoder.add_meter(DP, meter, 1.0).bands[0]
    assert (band.rate, band.burst_size) == (400_000_000, 4_000_000)
    tiny = MeterSpec(switch="s1", dpid=1, meter_id=9, rate_bps=1000, burst_bits=MIN_BURST_BITS)
    band = encoder.add_meter(DP, tiny, 1e-6).bands[0]
    assert band.rate == 1 and band.burst_size == encoder.MIN_BURST_KBITS
    with pytest.raises(ValueError, match="scale"):
        encoder.add_meter(DP, meter, 0)


def test_modify_and_delete_meter():
    meter = MeterSpec(switch="s1", dpid=1, meter_id=9, rate_bps=10 * G, burst_bits=100_000_000)
    mod = serialized(encoder.modify_meter(DP, meter, 0.5))
    assert mod.command == ofp.OFPMC_MODIFY and mod.bands[0].rate == 5_000_000
    delete = serialized(encoder.delete_meter(DP, meter))
    assert (delete.command, delete.meter_id, delete.bands) == (ofp.OFPMC_DELETE, 9, [])


# --- groups ----------------------------------------------------------------------------------


def test_fast_failover_groups_watch_ports_and_map_in_port(ring8):
    plan = make_plan(ring8, "dtn1", "dtn4", protect=True)
    transit = next(g for g in plan.groups if any(out == IN_PORT for _, out in g.buckets))
    msg = serialized(encoder.add_group(DP, transit))
    assert (msg.command, msg.type, msg.group_id) == (ofp.OFPGC_ADD, ofp.OFPGT_FF, transit.group_id)
    got = [(b.watch_port, b.watch_group, [a.port for a in b.actions]) for b in msg.buckets]
    (watch1, out1), (watch2, _) = transit.buckets
    assert got == [(watch1, ofp.OFPG_ANY, [out1]), (watch2, ofp.OFPG_ANY, [ofp.OFPP_IN_PORT])]
    assert ofp.OFPP_IN_PORT == IN_PORT

    flow = next(f for f in plan.flows if f.group_id == transit.group_id and f.switch == transit.switch)
    [actions] = serialized(encoder.add_flow(DP, flow)).instructions
    [group_action] = actions.actions
    assert isinstance(group_action, parser.OFPActionGroup) and group_action.group_id == transit.group_id

    delete = serialized(encoder.delete_group(DP, transit))
    assert (delete.command, delete.group_id, delete.buckets) == (ofp.OFPGC_DELETE, transit.group_id, [])


def test_only_fast_failover_groups_are_encoded():
    group = GroupSpec(switch="s1", dpid=1, group_id=3, type="select", buckets=((1, 1),))
    with pytest.raises(ValueError, match="fast-failover"):
        encoder.add_group(DP, group)


# --- steps -----------------------------------------------------------------------------------


@pytest.mark.parametrize("protect", [False, True])
def test_every_step_of_install_and_removal_encodes_to_one_message_and_barriers_to_none(ring8, protect):
    plan = make_plan(ring8, "dtn1", "dtn4", protect=protect)
    kinds = {
        StepKind.ADD_METER: (parser.OFPMeterMod, ofp.OFPMC_ADD),
        StepKind.ADD_GROUP: (parser.OFPGroupMod, ofp.OFPGC_ADD),
        StepKind.ADD_FLOW: (parser.OFPFlowMod, ofp.OFPFC_ADD),
        StepKind.DELETE_FLOW: (parser.OFPFlowMod, ofp.OFPFC_DELETE_STRICT),
        StepKind.DELETE_GROUP: (parser.OFPGroupMod, ofp.OFPGC_DELETE),
        StepKind.DELETE_METER: (parser.OFPMeterMod, ofp.OFPMC_DELETE),
    }
    for step in plan_steps(None, plan) + plan_steps(plan, None):
        messages = encoder.encode_step(DP, step, SCALE)
        if step.kind is StepKind.BARRIER:
            assert messages == []
            continue
        [msg] = messages
        cls, command = kinds[step.kind]
        assert isinstance(msg, cls) and msg.command == command, step.describe()
        serialized(msg)
    assert isinstance(serialized(encoder.barrier(DP)), parser.OFPBarrierRequest)


# --- base flows and ARP ----------------------------------------------------------------------


def test_the_table_miss_drops_and_arp_goes_to_the_controller():
    miss = serialized(encoder.table_miss_drop(DP))
    assert (miss.command, miss.priority, miss.cookie) == (ofp.OFPFC_ADD, 0, 0)
    assert dict(miss.match.items()) == {} and miss.instructions == []
    arp_flow = serialized(encoder.arp_to_controller(DP))
    assert arp_flow.priority == 1 and dict(arp_flow.match.items()) == {"eth_type": 0x0806}
    [actions] = arp_flow.instructions
    [out] = actions.actions
    assert (out.port, out.max_len) == (ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)


def test_arp_reply_goes_back_out_the_asking_port():
    msg = serialized(encoder.arp_reply(DP, 3, asker_mac="02:00:00:00:00:01", asker_ip="10.0.0.1",
                                       target_mac="02:00:00:00:00:03", target_ip="10.0.0.3"))
    assert msg.in_port == 3 and msg.buffer_id == ofp.OFP_NO_BUFFER
    assert [a.port for a in msg.actions] == [ofp.OFPP_IN_PORT]
    pkt = packet.Packet(msg.data)
    eth, reply = pkt.get_protocol(ethernet.ethernet), pkt.get_protocol(arp.arp)
    assert (eth.src, eth.dst, eth.ethertype) == ("02:00:00:00:00:03", "02:00:00:00:00:01", 0x0806)
    assert (reply.opcode, reply.src_mac, reply.src_ip, reply.dst_mac, reply.dst_ip) == (
        arp.ARP_REPLY, "02:00:00:00:00:03", "10.0.0.3", "02:00:00:00:00:01", "10.0.0.1")


def ask(topology, dpid=1, in_port=3, eth_src="02:00:00:00:00:01", opcode=arp.ARP_REQUEST,
        src_mac="02:00:00:00:00:01", src_ip="10.0.0.1", dst_ip="10.0.0.3"):
    return arp_answer(topology, dpid, in_port, eth_src, opcode, src_mac, src_ip, dst_ip)


def test_arp_is_answered_only_for_a_dtn_asking_on_its_own_port_about_another_dtn(ring8):
    answer = ask(ring8)
    assert answer is not None
    assert (answer.target_mac, answer.target_ip, answer.asker_mac, answer.asker_ip) == (
        "02:00:00:00:00:03", "10.0.0.3", "02:00:00:00:00:01", "10.0.0.1")
    assert ask(ring8, in_port=1) is None  # from the ring, not the DTN's port
    assert ask(ring8, dpid=2) is None  # on another switch
    assert ask(ring8, dpid=99) is None  # a switch not in the topology
    assert ask(ring8, src_ip="10.0.0.77") is None  # not a DTN
    assert ask(ring8, src_mac="02:00:00:00:00:09", eth_src="02:00:00:00:00:09") is None  # spoofed address
    assert ask(ring8, eth_src="02:00:00:00:00:09") is None  # ARP header and Ethernet source disagree
    assert ask(ring8, dst_ip="10.0.0.200") is None  # no such DTN
    assert ask(ring8, dst_ip="10.0.0.1") is None  # gratuitous
    assert ask(ring8, opcode=arp.ARP_REPLY) is None


def test_errors_are_named_by_type_and_code():
    assert encoder.describe_error(ofp, ofp.OFPET_BAD_ACTION, ofp.OFPBAC_BAD_OUT_GROUP) == \
        "OFPET_BAD_ACTION/OFPBAC_BAD_OUT_GROUP"
    assert encoder.describe_error(ofp, ofp.OFPET_METER_MOD_FAILED, ofp.OFPMMFC_UNKNOWN_METER) == \
        "OFPET_METER_MOD_FAILED/OFPMMFC_UNKNOWN_METER"
    assert encoder.describe_error(ofp, 999, 1) == "error type 999 code 1"


# --- a fabric with no switch -----------------------------------------------------------------



def test_a_fabric_without_switches_refuses_steps_and_frees_its_port_on_stop(ring8):
    from sdn_app.openflow.fabric import start_openflow

    port = free_port()
    for _ in range(2):  # the second start proves the first stop released the port and the apps
        fabric = start_openflow(ring8, listen_port=port, scale=SCALE)
        try:
            with pytest.raises(RuntimeError, match="already runs"):
                start_openflow(ring8, listen_port=free_port())
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
            assert fabric.connected() == set()
            assert not fabric.wait_connected({1}, timeout=0.2)
            steps = plan_steps(None, make_plan(ring8, "dtn1", "dtn3"))
            assert fabric.apply(steps) == ("switch s1 (dpid 0x1) not connected; switch s2 (dpid 0x2) not connected; "
                                           "switch s3 (dpid 0x3) not connected")
            assert fabric.apply([]) is None
        finally:
            fabric.stop()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
    assert fabric.apply([]) == "the OpenFlow fabric is not running"


# --- reading back: encode, then decode what a switch would report ------------------------------


def reported_flow(msg):
    """The OFPFlowStats a switch reports for the entry a flow-mod made (the mod itself parsed off the wire)."""
    from os_ken.ofproto import ofproto_parser

    serialized(msg)
    parsed = ofproto_parser.msg(DP, ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, len(msg.buf), 7, bytes(msg.buf))
    return parser.OFPFlowStats(table_id=parsed.table_id, priority=parsed.priority, cookie=parsed.cookie,
                               match=parsed.match, instructions=parsed.instructions)


def reported_meter(msg):
    """The OFPMeterConfigStats a switch reports for a meter-mod (its bands parsed off the wire)."""
    serialized(msg)
    bands, offset = [], ofp.OFP_METER_MOD_SIZE
    while offset < len(msg.buf):
        band = parser.OFPMeterBandHeader.parser(bytes(msg.buf), offset)
        bands.append(band)
        offset += band.len
    return parser.OFPMeterConfigStats(flags=msg.flags, meter_id=msg.meter_id, bands=bands)


def reported_group(msg):
    """The OFPGroupDescStats a switch reports for a group-mod (its buckets parsed off the wire)."""
    serialized(msg)
    buckets, offset = [], ofp.OFP_GROUP_MOD_SIZE
    while offset < len(msg.buf):
        bucket = parser.OFPBucket.parser(bytes(msg.buf), offset)
        buckets.append(bucket)
        offset += bucket.len
    return parser.OFPGroupDescStats(type_=msg.type, group_id=msg.group_id, buckets=buckets)


@pytest.mark.parametrize("prefixes", [(None, None), PREFIXES], ids=["ipv4", "ipv6-prefixes"])
@pytest.mark.parametrize("protect", [False, True], ids=["plain", "protected"])
def test_every_flow_and_group_of_a_plan_decodes_back_to_its_spec(ring8, protect, prefixes):
    plan = make_plan(ring8, "dtn1", "dtn3", protect=protect, prefixes=prefixes)
    twin = encoder.ETH_TYPE_ARP if prefixes[0] is None else ETH_TYPE_IPV6
    assert any(f.match.eth_type == twin for f in plan.flows)
    for flow in plan.flows:
        dp = StandInDatapath()
        dp.id = flow.dpid
        assert encoder.flow_from_stats(dp, reported_flow(encoder.add_flow(dp, flow)), flow.switch) == flow
    assert any(g.buckets[1][1] == IN_PORT for g in plan.groups) == protect
    for group in plan.groups:
        dp = StandInDatapath()
        dp.id = group.dpid
        assert encoder.group_from_stats(dp, reported_group(encoder.add_group(dp, group)), group.switch) == group


@pytest.mark.parametrize("scale", [1.0, SCALE, 0.0002])
def test_meters_decode_back_to_their_spec_through_the_scale(ring8, scale):
    plan = make_plan(ring8, "dtn1", "dtn3", bandwidth=25 * G // 10)
    for meter in plan.meters:
        dp = StandInDatapath()
        dp.id = meter.dpid
        decoded = encoder.meter_from_stats(dp, reported_meter(encoder.add_meter(dp, meter, scale)), meter.switch,
                                           scale)
        # A switch does not know which direction a meter serves: that comes from the plan.
        assert decoded == dataclasses.replace(encoder.held_meter(meter, scale), direction=FORWARD)
        assert encoder.held_meter(decoded, scale) == decoded  # what a switch reports is stable
    # Rates that are whole kbit/s at the scale, with a burst above the floor, come back exactly.
    exact = MeterSpec(switch="s1", dpid=DP.id, meter_id=9, rate_bps=100 * G, burst_bits=1000 * G)
    assert encoder.meter_from_stats(DP, reported_meter(encoder.add_meter(DP, exact, SCALE)), "s1", SCALE) == exact
    # The burst floor (not scaled): a small meter comes back with the floor's burst.
    small = MeterSpec(switch="s1", dpid=DP.id, meter_id=9, rate_bps=10**9, burst_bits=MIN_BURST_BITS)
    held = encoder.held_meter(small, SCALE)
    assert held.rate_bps == small.rate_bps and held.burst_bits == round(encoder.MIN_BURST_KBITS * 1000 / SCALE)


def test_entries_tsdn_never_installs_decode_to_specs_no_plan_holds(ring8):
    flow = ingress(make_plan(ring8, "dtn1", "dtn3"))
    stats = reported_flow(encoder.add_flow(DP, flow))
    stats.instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [])]  # a drop
    dropped = encoder.flow_from_stats(DP, stats, "s1")
    assert (dropped.key, dropped.output, dropped.meter_id) == (flow.key, encoder.NO_OUTPUT, None)
    stats.instructions = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [
        parser.OFPActionOutput(1, 0), parser.OFPActionOutput(2, 0)])]
    assert encoder.flow_from_stats(DP, stats, "s1").output == encoder.NO_OUTPUT

    for fields, complaint in (({"eth_type": 0x0800, "ip_proto": 6, "tcp_dst": 22}, "ip_proto, tcp_dst"),
                              ({"eth_type": 0x0800, "ipv4_src": ("10.0.0.0", "255.0.0.0")}, "under a mask"),
                              ({"in_port": 1}, "no eth_type"),
                              ({"eth_type": 0x0800, "ipv6_src": "2001:db8::1"}, "ipv6_src, which tsdn never matches "
                                                                                 "with eth_type 0x0800"),
                              ({"eth_type": 0x86DD, "ipv4_dst": "10.0.0.1"}, "ipv4_dst, which"),
                              ({"eth_type": 0x86DD, "ip_proto": 6, "tcp_dst": 22}, "tcp_dst"),
                              ({"eth_type": 0x86DD, "ipv6_src": ("2001:db8::", "ffff::ffff")},
                               "ipv6_src 2001:: mask ffff::ffff, which is no IPv6 prefix")):
        odd = parser.OFPFlowStats(table_id=0, priority=5, cookie=COOKIE_TAG | 5, match=parser.OFPMatch(**fields),
                                  instructions=[])
        with pytest.raises(ValueError, match=complaint):
            encoder.flow_from_stats(DP, odd, "s1")
        delete = serialized(encoder.delete_flow_as_held(DP, odd))
        assert (delete.command, delete.cookie, delete.cookie_mask, delete.priority) == (
            ofp.OFPFC_DELETE_STRICT, COOKIE_TAG | 5, encoder.ALL_ONES_COOKIE, 5)
        assert delete.match is odd.match

    host_bits = parser.OFPMatch(_ordered_fields=[("eth_type", 0x86DD), ("ipv6_dst", ("2001:db8::1", "ffff::"))])
    unmasked = parser.OFPFlowStats(table_id=0, priority=5, cookie=COOKIE_TAG | 5, instructions=[], match=host_bits)
    with pytest.raises(ValueError, match="ipv6_dst 2001:db8::1 mask ffff::, which is no IPv6 prefix"):
        encoder.flow_from_stats(DP, unmasked, "s1")

    pktps = parser.OFPMeterConfigStats(flags=ofp.OFPMF_PKTPS, meter_id=3,
                                       bands=[parser.OFPMeterBandDrop(rate=10, burst_size=0)])
    assert (encoder.meter_from_stats(DP, pktps, "s1").rate_bps, encoder.meter_from_stats(DP, pktps, "s1").burst_bits) \
        == (0, 0)
    select = parser.OFPGroupDescStats(type_=ofp.OFPGT_SELECT, group_id=4, buckets=[
        parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY, actions=[])])
    assert encoder.group_from_stats(DP, select, "s1") == GroupSpec(
        switch="s1", dpid=DP.id, group_id=4, type="select", buckets=((ofp.OFPP_ANY, encoder.NO_OUTPUT),))


def test_the_read_requests_ask_for_tsdn_flows_every_meter_and_every_group():
    flows = serialized(encoder.flow_stats_request(DP))
    assert (flows.cookie, flows.cookie_mask, flows.table_id) == (COOKIE_TAG, 0xFFFF << 48, ofp.OFPTT_ALL)
    assert serialized(encoder.meter_config_request(DP)).meter_id == ofp.OFPM_ALL
    assert isinstance(serialized(encoder.group_desc_request(DP)), parser.OFPGroupDescStatsRequest)


def _masked(network: str | None) -> str | tuple[str, str] | None:
    """os-ken's keyword value of an IPv6 network: the address and its mask (a /128 alone)."""
    if network is None:
        return None
    net = ipaddress.IPv6Network(network)
    return str(net.network_address) if net.prefixlen == 128 else (str(net.network_address), str(net.netmask))


@pytest.mark.parametrize("prefixes", [(None, None), PREFIXES], ids=["ipv4", "ipv6-prefixes"])
@pytest.mark.parametrize("protect", [False, True], ids=["plain", "protected"])
def test_matches_serialize_as_os_ken_keyword_matches_do(ring8, protect, prefixes):
    """`encoder.match` builds the fields in OXM order itself (fast); the bytes are os-ken's own."""
    for flow in make_plan(ring8, "dtn1", "dtn3", protect=protect, prefixes=prefixes).flows:
        m = flow.match
        names = ("arp_spa", "arp_tpa") if m.eth_type == encoder.ETH_TYPE_ARP else ("ipv4_src", "ipv4_dst")
        keywords = {"in_port": m.in_port, "eth_type": m.eth_type, names[0]: m.ipv4_src, names[1]: m.ipv4_dst,
                    "ip_proto": m.ip_proto, "ipv6_src": _masked(m.ipv6_src), "ipv6_dst": _masked(m.ipv6_dst),
                    "icmpv6_type": m.icmpv6_type}
        ours, theirs = bytearray(), bytearray()
        encoder.match(DP, flow).serialize(ours, 0)
        parser.OFPMatch(**{k: v for k, v in keywords.items() if v is not None}).serialize(theirs, 0)
        assert ours == theirs, flow.describe()
    wildcard = FlowSpec(switch="s1", dpid=1, priority=5, cookie=COOKIE_TAG, match=Match(), output=1)
    ours, theirs = bytearray(), bytearray()
    encoder.match(DP, wildcard).serialize(ours, 0)
    parser.OFPMatch(eth_type=0x0800).serialize(theirs, 0)
    assert ours == theirs
