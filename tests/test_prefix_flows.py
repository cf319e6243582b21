"""Reservations whose traffic is named by IPv6 prefixes (one /64 per Rucio rule and site, as
the SENSE API allocates them): two rules between the same DTNs both install and are told apart
on the switches, a packet outside the prefixes is dropped, the hosts' neighbour solicitations
follow the reserved hops, bad prefixes change nothing, and the prefixes survive a restart.

The flows are applied to simulated tables (tests/flowtable.py), which refuse two flows of one
priority matching the same packet, so a collision between two reservations shows as an error.
"""

from __future__ import annotations

import json

import grpc
import pytest

from northbound.client import ApiError
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from sdn_app.core.installs import PER_HOP
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathFinder, PathRequest, Unbooked
from sdn_app.core.plans import (
    ETH_TYPE_IPV6,
    FORWARD,
    ICMPV6_NEIGHBOR_SOLICITATION,
    IP_PROTO_ICMPV6,
    REVERSE,
    SOLICITED_NODE,
    FlowPlan,
    SwitchPlan,
    clash,
    plan_for,
)
from sdn_app.core.reconcile import reconcile
from sdn_app.core.reservation import State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from tests.flowtable import DELIVERED, DROPPED, Packet, Trace, delivered, ipv6_packet, send_from, solicitation
from tests.switched import RUCIO, G, confirm, request, switched_ring8
from topologies import builtin_topology

# Two Rucio rules between dtn1 and dtn3, each with a /64 at each site (inside ring8's pools).
RULE_A = ("2001:db8:8:101::/64", "2001:db8:8:301::/64")
RULE_B = ("2001:db8:8:102::/64", "2001:db8:8:302::/64")
A1, A3 = "2001:db8:8:101::10", "2001:db8:8:301::20"  # hosts of rule A at dtn1 and dtn3
B1, B3 = "2001:db8:8:102::10", "2001:db8:8:302::20"
OUTSIDE1 = "2001:db8:8:1ff::10"  # an address of dtn1 in no reservation's prefix


@pytest.fixture
def env(tmp_path):
    return switched_ring8(tmp_path)


def prefixed(env, prefixes: tuple[str, str], src: str = "dtn1", dst: str = "dtn3", **more) -> PathRequest:
    return request(env.clock, src, dst, src_prefix=prefixes[0], dst_prefix=prefixes[1], **more)


def plan_of(env, reservation) -> FlowPlan:
    plan = env.book.installs.plan(reservation.id)
    assert plan is not None
    return plan


def meter(plan: FlowPlan, direction: str):
    return next(m for m in plan.meters if m.direction == direction)


def unchanged(env, bookings: int) -> None:
    """Nothing was booked, queued for the switches or announced."""
    assert len(env.ledger) == bookings
    assert env.book.take_changes() == []
    assert env.book.take_events() == []


def from_dtn(env, dtn: str, packet: Packet, down=()) -> Trace:
    return send_from(env.tables, dtn, packet, down)


# --- two rules between the same DTNs ------------------------------------------------------------


def test_two_rules_between_the_same_dtns_both_install_and_are_told_apart(env):
    a = env.book.create(RUCIO, prefixed(env, RULE_A, bandwidth=10 * G))
    b = env.book.create(RUCIO, prefixed(env, RULE_B, bandwidth=20 * G))
    assert (a.state, b.state) == (State.PROVISIONING, State.PROVISIONING)
    assert (a.request.src_prefix, a.request.dst_prefix) == RULE_A
    confirm(env)  # the simulated switches refuse colliding flows
    assert env.book.get(RUCIO, a.name).state is State.ACTIVE
    assert env.book.get(RUCIO, b.name).state is State.ACTIVE
    plan_a, plan_b = plan_of(env, a), plan_of(env, b)

    to_a = from_dtn(env, "dtn1", ipv6_packet(A1, A3))
    assert (to_a.outcome, to_a.dtn, to_a.switches) == (DELIVERED, "dtn3", ("s1", "s2", "s3"))
    assert to_a.meters == (meter(plan_a, FORWARD),) and to_a.meters[0].rate_bps == 10 * G
    to_b = from_dtn(env, "dtn1", ipv6_packet(B1, B3, ip_proto=17))
    assert (to_b.outcome, to_b.dtn) == (DELIVERED, "dtn3")
    assert to_b.meters == (meter(plan_b, FORWARD),) and to_b.meters[0].rate_bps == 20 * G
    back = from_dtn(env, "dtn3", ipv6_packet(A3, A1))  # acks: rule A's reverse meter
    assert (back.outcome, back.dtn, back.meters) == (DELIVERED, "dtn1", (meter(plan_a, REVERSE),))

    for stray in (ipv6_packet(A1, B3), ipv6_packet(B1, A3),  # across the two rules
                  ipv6_packet(OUTSIDE1, A3), ipv6_packet(A1, "2001:db8:8:3ff::20")):  # outside the prefixes
        assert from_dtn(env, "dtn1", stray).outcome == DROPPED, stray
    assert delivered(env.tables, "dtn1", "dtn3")[0] is None  # no IPv4 between the DTNs: not reserved
    spoofed = env.tables.trace(ipv6_packet(A1, A3), "s2", env.topology.dtns["dtn2"].port)
    assert spoofed.outcome == DROPPED  # rule A's addresses sent by another DTN


def test_the_flows_match_ipv6_between_the_prefixes_and_the_solicitations_of_each_source(tmp_path):
    env = switched_ring8(tmp_path, PER_HOP)  # the shape of per-hop plans (tests/test_label_plans.py: labels)
    a = env.book.create(RUCIO, prefixed(env, RULE_A))
    plan = env.book.installs.plan(a.id)
    assert plan is not None and all(f.match.eth_type == ETH_TYPE_IPV6 for f in plan.flows)
    data = [f for f in plan.flows if f.match.icmpv6_type is None]
    solicit = [f for f in plan.flows if f.match.icmpv6_type is not None]
    assert len(data) == len(solicit) == 6  # three switches, two directions
    assert {(f.direction, f.match.ipv6_src, f.match.ipv6_dst, f.match.ip_proto) for f in data} == {
        (FORWARD, RULE_A[0], RULE_A[1], None), (REVERSE, RULE_A[1], RULE_A[0], None)}
    assert {(f.direction, f.match.ipv6_src, f.match.ipv6_dst, f.match.ip_proto, f.match.icmpv6_type)
            for f in solicit} == {(FORWARD, RULE_A[0], SOLICITED_NODE, IP_PROTO_ICMPV6, ICMPV6_NEIGHBOR_SOLICITATION),
                                  (REVERSE, RULE_A[1], SOLICITED_NODE, IP_PROTO_ICMPV6, ICMPV6_NEIGHBOR_SOLICITATION)}
    # Each solicitation twin follows its data flow's hop: same switch, in-port and output, no meter.
    assert {(f.switch, f.match.in_port, f.output, f.priority) for f in solicit} == {
        (f.switch, f.match.in_port, f.output, f.priority) for f in data}
    assert all(f.meter_id is None for f in solicit)
    assert sum(f.meter_id is not None for f in data) == 2  # one meter per direction, at its ingress
    assert "ipv6 2001:db8:8:101::/64->2001:db8:8:301::/64" in plan.describe()


def test_neighbour_solicitations_reach_the_peer_and_nothing_else_does(env):
    env.book.create(RUCIO, prefixed(env, RULE_A))
    env.book.create(RUCIO, prefixed(env, RULE_B))
    confirm(env)
    asked = from_dtn(env, "dtn1", solicitation(A1, A3))
    assert (asked.outcome, asked.dtn, asked.switches, asked.meters) == (DELIVERED, "dtn3", ("s1", "s2", "s3"), ())
    answered = from_dtn(env, "dtn3", ipv6_packet(A3, A1, IP_PROTO_ICMPV6, 136))  # the advertisement, unicast
    assert (answered.outcome, answered.dtn) == (DELIVERED, "dtn1")
    assert from_dtn(env, "dtn3", solicitation(B3, B1)).dtn == "dtn1"  # the other direction asks too
    assert from_dtn(env, "dtn1", solicitation(OUTSIDE1, A3)).outcome == DROPPED
    for other in (ipv6_packet(A1, "ff02::1:ff00:20", IP_PROTO_ICMPV6, 143),  # not a solicitation
                  ipv6_packet(A1, "ff02::1", IP_PROTO_ICMPV6, 135),  # not to a solicited-node address
                  ipv6_packet(A1, "ff02::1:ff00:20", 17)):
        assert from_dtn(env, "dtn1", other).outcome == DROPPED, other


def test_a_protected_prefix_reservation_fails_over_like_any_other(env):
    r = env.book.create(RUCIO, prefixed(env, RULE_A, protect=True))
    confirm(env)
    assert r.route is not None and r.route.backup is not None
    cut = r.route.primary.links[-1]  # downstream of the ingress: crankback, then the backup
    for packet in (ipv6_packet(A1, A3), solicitation(A1, A3)):
        trace = from_dtn(env, "dtn1", packet, down=[cut])
        assert (trace.outcome, trace.dtn) == (DELIVERED, "dtn3"), trace.reason
        assert trace.switches[-1] == "s3" and "s8" in trace.switches


def test_release_removes_one_rule_and_leaves_the_other(env):
    a = env.book.create(RUCIO, prefixed(env, RULE_A))
    env.book.create(RUCIO, prefixed(env, RULE_B))
    confirm(env)
    env.book.release(RUCIO, a.name)
    confirm(env)
    assert from_dtn(env, "dtn1", ipv6_packet(A1, A3)).outcome == DROPPED
    assert from_dtn(env, "dtn1", solicitation(A1, A3)).outcome == DROPPED
    assert from_dtn(env, "dtn1", ipv6_packet(B1, B3)).dtn == "dtn3"


# --- what coexists and what collides --------------------------------------------------------------


def test_prefix_and_plain_reservations_between_the_same_dtns_coexist(env):
    plain = env.book.create(RUCIO, request(env.clock))
    env.book.create(RUCIO, prefixed(env, RULE_A))
    confirm(env)
    assert delivered(env.tables, "dtn1", "dtn3")[0] == "dtn3"  # the plain one's IPv4
    assert from_dtn(env, "dtn1", ipv6_packet(A1, A3)).dtn == "dtn3"
    with pytest.raises(FailedPrecondition, match=f"already has {plain.name}"):
        env.book.create(RUCIO, request(env.clock))  # a second plain one still collides


def test_the_opposite_direction_may_use_the_same_prefixes(env):
    env.book.create(RUCIO, prefixed(env, RULE_A))
    back = env.book.create(RUCIO, prefixed(env, RULE_A[::-1], "dtn3", "dtn1"))
    assert back.state is State.PROVISIONING
    confirm(env)
    assert from_dtn(env, "dtn1", ipv6_packet(A1, A3)).dtn == "dtn3"
    assert from_dtn(env, "dtn3", ipv6_packet(A3, A1)).dtn == "dtn1"
    assert from_dtn(env, "dtn3", solicitation(A3, A1)).dtn == "dtn1"


@pytest.mark.parametrize(("src", "dst", "prefixes", "complaint"), [
    ("dtn1", "dtn3", RULE_A, "src_prefix: 2001:db8:8:101::/64 overlaps the source prefix 2001:db8:8:101::/64"),
    ("dtn1", "dtn3", ("2001:db8:8:103::/64", "2001:db8:8:300::/56"),
     "dst_prefix: 2001:db8:8:300::/56 overlaps the destination prefix 2001:db8:8:301::/64"),
    ("dtn1", "dtn3", ("2001:db8:8:101::/64", "2001:db8:8:303::/64"), "src_prefix: .* overlaps the source"),
    ("dtn1", "dtn5", ("2001:db8:8:101::/64", "2001:db8:8:501::/64"), "src_prefix: .* overlaps the source"),
    ("dtn5", "dtn7", ("2001:db8:8:501::/64", "2001:db8:8:301::/64"), "dst_prefix: .* overlaps the destination"),
    ("dtn7", "dtn3", ("2001:db8:8:301::/64", "2001:db8:8:701::/64"),
     "src_prefix: 2001:db8:8:301::/64 overlaps the destination prefix"),  # rule A's dtn3 prefix, at dtn7
    ("dtn3", "dtn5", ("2001:db8:8:301::/64", "2001:db8:8:501::/64"),
     "src_prefix: .* overlaps the destination prefix"),  # dtn3's prefix facing another DTN
], ids=["same-rule", "dst-inside", "shared-source", "same-source-other-peer", "same-destination-other-pair",
        "prefix-at-another-dtn", "prefix-facing-another-dtn"])
def test_overlapping_prefixes_are_refused_and_change_nothing(env, src, dst, prefixes, complaint):
    first = env.book.create(RUCIO, prefixed(env, RULE_A))
    confirm(env)
    env.book.take_events()
    with pytest.raises(FailedPrecondition, match=complaint) as refused:
        env.book.create(RUCIO, prefixed(env, prefixes, src, dst))
    assert f"of {first.name} (dtn1 -> dtn3," in str(refused.value)
    unchanged(env, bookings=1)
    assert env.book.refusals["failed_precondition"] == 1


def test_the_same_prefixes_in_a_later_window_are_fine_and_extending_into_it_is_refused(env):
    first = env.book.create(RUCIO, prefixed(env, RULE_A, duration=600))
    later = env.book.create(RUCIO, prefixed(env, RULE_A, start=600, duration=600))
    assert later.state is State.SCHEDULED
    confirm(env)
    env.book.take_events()
    with pytest.raises(FailedPrecondition, match=f"src_prefix: .* of {later.name}"):
        env.book.modify(RUCIO, first.name, end=env.clock.now() + 900)
    unchanged(env, bookings=2)
    assert env.book.get(RUCIO, first.name).request.end == first.request.end


def test_extending_a_plain_reservation_into_the_next_one_of_its_pair_is_refused(env):
    first = env.book.create(RUCIO, request(env.clock, duration=600))
    later = env.book.create(RUCIO, request(env.clock, start=600, duration=600))
    env.book.take_changes()
    env.book.take_events()
    with pytest.raises(FailedPrecondition, match=f"already has {later.name}"):
        env.book.modify(RUCIO, first.name, end=env.clock.now() + 601)
    unchanged(env, bookings=2)
    assert env.book.modify(RUCIO, first.name, end=env.clock.now() + 599).request.end == env.clock.now() + 599


def test_without_switches_bookings_alone_may_overlap(tmp_path):
    topology = Topology.load(builtin_topology("ring8"))
    env = switched_ring8(tmp_path)
    book = ReservationBook(topology, Ledger(topology.capacities(), tmp_path / "ledger-only.db", env.clock), env.clock)
    for _ in range(2):
        assert book.create(RUCIO, prefixed(env, RULE_A)).state is State.ACTIVE


def test_clash_is_symmetric_in_what_it_refuses():
    def q(src, dst, prefixes=(None, None)):
        return PathRequest(src, dst, G, 0, 60, src_prefix=prefixes[0], dst_prefix=prefixes[1])
    cases = [(q("dtn1", "dtn3", RULE_A), q("dtn1", "dtn3", RULE_B), False),
             (q("dtn1", "dtn3", RULE_A), q("dtn3", "dtn1", RULE_A[::-1]), False),
             (q("dtn1", "dtn3", RULE_A), q("dtn1", "dtn3"), False),
             (q("dtn1", "dtn3"), q("dtn1", "dtn3"), True),
             (q("dtn1", "dtn3"), q("dtn3", "dtn1"), False),
             (q("dtn1", "dtn3", RULE_A), q("dtn1", "dtn3", RULE_A), True),
             (q("dtn1", "dtn3", RULE_A), q("dtn3", "dtn1", ("2001:db8:8:301::/64", "2001:db8:8:1ff::/64")), False),
             (q("dtn1", "dtn3", RULE_A), q("dtn5", "dtn3", ("2001:db8:8:501::/64", "2001:db8:8:301::/64")), True)]
    for one, other, collides in cases:
        assert (clash(one, other) is not None, clash(other, one) is not None) == (collides, collides), (one, other)


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("src", "dst", "complaint"), [
    ("2001:db8:8:101::/64", None, "dst_prefix: required with src_prefix"),
    (None, "2001:db8:8:301::/64", "src_prefix: required with dst_prefix"),
    ("10.0.0.0/8", "2001:db8:8:301::/64", "src_prefix: '10.0.0.0/8' is not an IPv6 network"),
    ("2001:db8:8:101::1/64", "2001:db8:8:301::/64",
     "src_prefix: '2001:db8:8:101::1/64' has host bits set; the network is 2001:db8:8:101::/64"),
    ("2001:db8:8:101::/64", "2001:db8:8:301::", "dst_prefix: '2001:db8:8:301::' has no prefix length"),
    ("::/0", "2001:db8:8:301::/64", "src_prefix: ::/0 would match every address; the prefix length must be 1"),
    ("2001:db8:8:101::/64", "2001:db8:8:301::/129", "dst_prefix: .* is not an IPv6 network"),
    ("2001:db8:8:101::/64", "2001:db8:8:100::/56", "dst_prefix: 2001:db8:8:100::/56 overlaps src_prefix"),
    ("2001:db8:8:101::/64", "2001:db8:8:101::/64", "dst_prefix: .* overlaps src_prefix"),
    ("2001:db8:8:101::/64", "ff02::/16", "dst_prefix: ff02::/16 reaches into multicast"),
    ("fe80::%dtn1-eth0/64", "2001:db8:8:301::/64", "src_prefix: .* carries a zone"),
    ("2001:db8:8:101::/64", "2" * 100, "dst_prefix: 100 characters, at most 64"),
    ("2001:db8:8:101::/64", 64, "dst_prefix: an IPv6 network"),
    ("", "2001:db8:8:301::/64", "src_prefix: required"),
])
def test_bad_prefixes_are_refused_naming_the_field_and_change_nothing(env, src, dst, complaint):
    env.book.create(RUCIO, request(env.clock, "dtn5", "dtn7"))
    confirm(env)
    env.book.take_events()
    bad = request(env.clock, src_prefix=src, dst_prefix=dst)
    with pytest.raises(InvalidArgument, match=complaint):
        env.book.create(RUCIO, bad)
    with pytest.raises(InvalidArgument, match=complaint):
        PathFinder(env.topology, Unbooked(env.topology)).route(bad)
    unchanged(env, bookings=1)
    assert [r.request.src for r in env.book.list(RUCIO)[0]] == ["dtn5"]


def test_a_plan_refuses_bad_prefixes_too(env):
    route = PathFinder(env.topology, Unbooked(env.topology)).route(request(env.clock))
    with pytest.raises(InvalidArgument, match="dst_prefix: required"):
        plan_for(env.topology, "ab" * 16, "dtn1", "dtn3", route, G, src_prefix=RULE_A[0])


def test_prefixes_are_kept_in_canonical_text_and_a_retry_must_repeat_them(env):
    written = ("2001:DB8:8:101:0::/64", "2001:0db8:0008:0301::/064")
    r = env.book.create(RUCIO, prefixed(env, written), request_id="rule-a")
    assert (r.request.src_prefix, r.request.dst_prefix) == RULE_A
    assert env.book.create(RUCIO, prefixed(env, RULE_A), request_id="rule-a") == r  # the same request
    with pytest.raises(AlreadyExists, match="rule-a"):
        env.book.create(RUCIO, prefixed(env, RULE_B), request_id="rule-a")
    with pytest.raises(AlreadyExists, match="rule-a"):
        env.book.create(RUCIO, request(env.clock), request_id="rule-a")  # the same pair without prefixes


# --- a restart --------------------------------------------------------------------------------------


def test_prefix_reservations_survive_a_restart(env):
    a = env.book.create(RUCIO, prefixed(env, RULE_A))
    b = env.book.create(RUCIO, prefixed(env, RULE_B))
    plain = env.book.create(RUCIO, request(env.clock, "dtn5", "dtn7"))
    confirm(env)
    switches = ("s1", "s2", "s3", "s5", "s6", "s7")
    # Flow keys: a restart may hand two reservations created in one clock tick each other's meter
    # ids on a switch where their preferred ids collide (reconciliation then swaps them back).
    before = {s: {f.key for f in env.book.switch_plan(s).flows} for s in switches}
    rows = dict(env.ledger.query("SELECT id, body FROM reservations", ()))
    assert json.loads(rows[a.id])["request"]["src_prefix"] == RULE_A[0]
    assert "src_prefix" not in json.loads(rows[plain.id])["request"]  # a row without prefixes is as before
    env.ledger.close()

    ledger = Ledger(env.topology.capacities(), env.path, env.clock)
    again = ReservationBook(env.topology, ledger, env.clock, provisioning=True)
    restored = again.get(RUCIO, a.name)
    assert (restored.state, restored.request.src_prefix, restored.request.dst_prefix) == (State.ACTIVE, *RULE_A)
    assert again.get(RUCIO, plain.name).request.src_prefix is None
    assert {s: {f.key for f in again.switch_plan(s).flows} for s in switches} == before
    assert again.take_changes() == []
    with pytest.raises(FailedPrecondition, match="src_prefix"):
        again.create(RUCIO, prefixed(env, RULE_B))  # still known as taken

    for switch in env.topology.switches:  # the switches reconnect: each is made to hold what the book wants
        table = env.tables.tables[switch]
        held = SwitchPlan(tuple(table.flows.values()), tuple(table.meters.values()), tuple(table.groups.values()))
        env.tables.apply_all(reconcile(switch, again.switch_plan(switch), held).steps)
        again.switch_reconciled(switch)
    assert from_dtn(env, "dtn1", ipv6_packet(B1, B3)).dtn == "dtn3"
    again.release(RUCIO, b.name)
    for change in again.take_changes():  # the restarted book knows the plan to remove
        env.tables.apply_all(change.steps)
    assert from_dtn(env, "dtn1", ipv6_packet(B1, B3)).outcome == DROPPED
    assert from_dtn(env, "dtn1", ipv6_packet(A1, A3)).dtn == "dtn3"


# --- over gRPC ---------------------------------------------------------------------------------------


def test_create_reservation_over_grpc_carries_the_prefixes(client_for):
    rucio = client_for("rucio")
    made = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", G, duration=600, request_id="rule-1",
                                    src_prefix="2001:DB8:16:101:0::/64", dst_prefix="2001:db8:16:301::/64")
    assert (made.src_prefix, made.dst_prefix) == ("2001:db8:16:101::/64", "2001:db8:16:301::/64")
    assert rucio.get_reservation(made.name).src_prefix == "2001:db8:16:101::/64"
    assert rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", G, duration=600, request_id="rule-1",
                                    src_prefix="2001:DB8:16:101:0::/64",
                                    dst_prefix="2001:db8:16:301::/64").name == made.name  # a retry
    with pytest.raises(ApiError) as reused:
        rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", G, duration=600, request_id="rule-1",
                                 src_prefix="2001:db8:16:102::/64", dst_prefix="2001:db8:16:302::/64")
    assert reused.value.code is grpc.StatusCode.ALREADY_EXISTS
    plain = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", G, duration=600)
    assert (plain.src_prefix, plain.dst_prefix) == ("", "")
    for prefixes, complaint in ((("2001:db8:16:101::/64", ""), "dst_prefix: required with src_prefix"),
                                (("2001:db8:16:101::1/64", "2001:db8:16:301::/64"),
                                 "src_prefix: '2001:db8:16:101::1/64' has host bits set")):
        with pytest.raises(ApiError) as refused:
            rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", G, duration=600,
                                     src_prefix=prefixes[0], dst_prefix=prefixes[1])
        assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.message.startswith(complaint), refused.value.message
    assert len(list(rucio.list_reservations())) == 2
