"""Label-switched paths (sdn_app.core.label_plans, labels, installs): packets traced through the
shared label entries of simulated switches, what a move changes, default deny, protection with
the controller gone, the grace of unused paths, and the provisioner's order of paths first."""

from __future__ import annotations

import threading

import pytest

from sdn_app.core.errors import NoCapacity
from sdn_app.core.label_plans import STEER_TABLE, PathKey
from sdn_app.core.labels import PathTable, parse_label_range
from sdn_app.core.paths import Hop
from sdn_app.core.plans import IdAllocator, StepKind
from sdn_app.core.reservation import PathChoice, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.openflow.encoder import add_flow, add_group, flow_from_stats, group_from_stats
from sdn_app.openflow.provisioner import Provisioner
from tests.flowtable import DELIVERED, DROPPED, Packet, delivered, dtn_packet, ipv6_packet, send
from tests.switched import (
    DESIGNS,
    RUCIO,
    TablesFabric,
    active,
    after_grace,
    confirm,
    own,
    reopened,
    request,
    switch_plans,
    switched_ring8,
)

A = ("2001:db8:8:110::/64", "2001:db8:8:310::/64")  # dtn1's and dtn3's prefixes of two Rucio rules
B = ("2001:db8:8:111::/64", "2001:db8:8:311::/64")


@pytest.fixture
def env(tmp_path):
    return switched_ring8(tmp_path)


def entries(env, switch: str) -> set:
    t = env.tables.tables[switch]
    return {*t.flows.values(), *t.groups.values(), *t.meters.values()}


def test_only_the_ingress_switches_hold_a_reservations_own_entries_and_labels_carry_it_between(env):
    r = active(env)  # dtn1 (s1) -> dtn3 (s3) over s2
    assert delivered(env.tables, "dtn1", "dtn3") == ("dtn3", ("s1", "s2", "s3"))
    assert delivered(env.tables, "dtn3", "dtn1") == ("dtn1", ("s3", "s2", "s1"))
    assert delivered(env.tables, "dtn1", "dtn3", eth_type=0x0806)[0] == "dtn3"  # its ARP follows it
    plan = env.book.installs.plan(r.id)
    assert set(plan.switches) == {"s1", "s3"}
    # per direction: a metered classifier, its ARP twin, one steer entry
    for switch in ("s1", "s3"):
        own_flows = plan.flows_on(switch)
        assert sorted(f.table_id for f in own_flows) == [0, 0, STEER_TABLE]
    s2 = env.tables.tables["s2"].flows.values()
    assert all(f.match.vlan_vid not in (None, 0) and f.match.eth_type is None for f in s2)  # labels only
    labels = env.book.installs.labels(r.id)
    assert set(labels) == {"forward", "reverse"} and labels["forward"] != labels["reverse"]


def test_reservations_on_one_route_share_its_transit_entries(env):
    for rule in (A, B, ("2001:db8:8:112::/64", "2001:db8:8:312::/64")):
        env.book.create(RUCIO, request(env.clock, src_prefix=rule[0], dst_prefix=rule[1]))
        confirm(env)
        if rule == A:
            transit = entries(env, "s2")
    assert entries(env, "s2") == transit  # the third reservation added nothing on s2
    for rule in (A, B):
        src, dst = rule[0].replace("::/64", "::10"), rule[1].replace("::/64", "::20")
        assert send(env.tables, "dtn1", "dtn3").outcome == DROPPED  # no IPv4 between them: not reserved
        t = env.tables.trace(ipv6_packet(src, dst), "s1", env.topology.dtns["dtn1"].port)
        assert (t.outcome, t.dtn) == (DELIVERED, "dtn3")


def test_a_dtn_cannot_inject_labelled_frames_or_reach_anyone_but_its_peer(env):
    r = active(env)
    label = env.book.installs.labels(r.id)["forward"]
    packet = dtn_packet(env.topology, "dtn1", "dtn3")
    dtn1 = env.topology.dtns["dtn1"]
    tagged = env.tables.trace(Packet(packet.ipv4_src, packet.ipv4_dst, vlan=label), dtn1.switch, dtn1.port)
    assert tagged.outcome == DROPPED  # the reservation's own label, sent by its own DTN
    dtn2 = env.topology.dtns["dtn2"]  # a DTN on the path's transit switch
    for vlan in (label, None):
        t = env.tables.trace(Packet(packet.ipv4_src, packet.ipv4_dst, vlan=vlan), dtn2.switch, dtn2.port)
        assert t.outcome == DROPPED
    assert delivered(env.tables, "dtn1", "dtn4")[0] is None  # another peer of the same DTN


def test_a_move_changes_one_steer_entry_per_direction_and_a_move_back_within_the_grace_is_free(env):
    r = active(env)
    before = {s: entries(env, s) for s in env.topology.switches}
    env.book.modify(RUCIO, r.name, path=PathChoice(exclude=("s2",)))
    changes = env.book.take_changes()
    move = own(changes)[0]
    for change in changes:
        env.tables.apply_all(change.steps)
    env.book.provisioned(r.id, None, move.token)
    assert [(s.kind, s.switch, s.spec.table_id) for s in move.steps if s.kind is not StepKind.BARRIER] == [
        (StepKind.MODIFY_FLOW, "s1", STEER_TABLE), (StepKind.MODIFY_FLOW, "s3", STEER_TABLE)]
    after = {s: entries(env, s) for s in env.topology.switches}
    assert after["s2"] == before["s2"]  # the old path stays for its grace
    assert delivered(env.tables, "dtn1", "dtn3")[1] == ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
    env.book.modify(RUCIO, r.name, path=PathChoice(include=("s2",)))
    back = env.book.take_changes()
    assert back == own(back)  # nothing to install: the old path's entries are still there
    for change in back:
        env.tables.apply_all(change.steps)
        env.book.provisioned(r.id, None, change.token)
    assert delivered(env.tables, "dtn1", "dtn3")[1] == ("s1", "s2", "s3")
    assert env.book.next_deadline() <= env.clock.now() + env.book.installs.paths.grace
    after_grace(env)  # the detour nobody uses now is removed
    assert not entries(env, "s6")
    assert delivered(env.tables, "dtn1", "dtn3")[0] == "dtn3"


@pytest.mark.parametrize("cut", ["s1-s2", "s2-s3"])
def test_protection_survives_any_primary_link_with_no_controller(env, cut):
    r = active(env, protect=True)
    assert env.book.get(RUCIO, r.name).route.backup is not None
    # The switches alone (nothing applied after the cut): fast failover at the ingress, crankback further on.
    assert delivered(env.tables, "dtn1", "dtn3", down=[cut])[0] == "dtn3"
    assert delivered(env.tables, "dtn3", "dtn1", down=[cut])[0] == "dtn1"
    assert delivered(env.tables, "dtn1", "dtn3", down=[cut], eth_type=0x0806)[0] == "dtn3"


def test_labels_never_collide_and_running_out_is_refused(env):
    made = [active(env, a, b) for a, b in (("dtn1", "dtn3"), ("dtn2", "dtn6"), ("dtn5", "dtn8"), ("dtn4", "dtn7"))]
    paths = env.book.installs.paths
    labels = [paths.label(k) for p in paths.plans() for k in [paths.key(int(p.reservation_id[5:]))]]
    assert len(labels) == len(set(labels)) == len(paths) == 2 * len(made)
    table = PathTable(env.topology, IdAllocator(), labels=(10, 11))
    hops = [PathKey((Hop("s1", 3, 1), Hop("s2", 2, port), Hop("s3", 2, 3))) for port in (1, 3, 4)]
    assert {table.use("a/forward", hops[0], 0).label, table.use("b/forward", hops[1], 0).label} == {10, 11}
    with pytest.raises(NoCapacity, match="every path label"):
        table.use("c/forward", hops[2], 0)
    assert len(table) == 2 and len(table.take_changes()) == 2


def test_the_label_range_is_checked():
    assert parse_label_range("100-199") == (100, 199)
    for bad in ("0-10", "10-5000", "20-10", "ten-20", "12"):
        with pytest.raises(ValueError):
            parse_label_range(bad)


def test_a_restart_finds_the_same_labels_and_entries(env):
    active(env)
    active(env, "dtn5", "dtn8", protect=True)
    wanted = switch_plans(env.book, env.topology)
    book = reopened(env)
    assert book.take_changes() == []
    assert switch_plans(book, env.topology) == wanted


def test_every_entry_of_a_label_design_decodes_back_to_its_spec(env):
    from tests.test_openflow_encoder import StandInDatapath, reported_flow, reported_group

    active(env, protect=True)
    active(env, "dtn5", "dtn7")
    for switch in env.topology.switches:
        plan = env.book.switch_plan(switch)
        for flow in plan.flows:
            dp = StandInDatapath()
            dp.id = flow.dpid
            assert flow_from_stats(dp, reported_flow(add_flow(dp, flow)), switch) == flow, flow.describe()
        for group in plan.groups:
            dp = StandInDatapath()
            dp.id = group.dpid
            assert group_from_stats(dp, reported_group(add_group(dp, group)), switch) == group


def test_the_provisioner_applies_paths_first_and_fails_what_relies_on_a_path_that_failed(env):
    env.book.create(RUCIO, request(env.clock))
    env.book.create(RUCIO, request(env.clock, src_prefix=A[0], dst_prefix=A[1]))
    changes = env.book.take_changes()
    assert [c.reservation_id.startswith("path-") for c in changes] == [True, True, False, False]
    reports, done = [], threading.Event()
    fabric = TablesFabric(env.topology)
    fabric.tables, fabric.refuse_switch = env.tables, "s2"
    provisioner = Provisioner(fabric, lambda r: (reports.extend(r), len(reports) == 2 and done.set()))
    provisioner.submit(changes)
    provisioner.start()
    assert done.wait(10)
    provisioner.stop()
    # one batch: the paths (one phase each) and the reservations (two phases) that need them; the paths
    # fail on s2, so the reservations fail too, with the path's reason, though their own entries went in
    assert [len(b) for b in fabric.batches] == [4]
    assert all(error and "not installed: switch s2 refused" in error for _, error, _ in reports[:2])
    for rid, _, token in reports[:2]:
        env.book.provisioned(rid, "path failed", token)
    assert all(r.state is State.FAILED for r in env.book.snapshot(RUCIO))


def test_a_request_needing_labels_that_are_not_free_is_refused_before_anything_is_booked(tmp_path):
    env = switched_ring8(tmp_path)
    env.book = ReservationBook(env.topology, env.ledger, env.clock, provisioning=True, path_labels=(10, 11))
    first = active(env)  # its two directions take both labels
    with pytest.raises(NoCapacity, match="every path label"):
        env.book.create(RUCIO, request(env.clock, "dtn5", "dtn7"))
    assert len(env.ledger) == 1 and env.book.take_changes() == []
    assert [r.id for r in env.book.snapshot(RUCIO)] == [first.id]
    # the same route's other rule needs no new label
    env.book.create(RUCIO, request(env.clock, src_prefix=A[0], dst_prefix=A[1]))


@pytest.mark.parametrize("design", DESIGNS)
def test_a_switch_out_of_meter_ids_refuses_before_booking_and_a_starting_window_fails_cleanly(tmp_path, design):
    env = switched_ring8(tmp_path, design)
    env.book = ReservationBook(env.topology, env.ledger, env.clock, provisioning=True, flow_design=design,
                               max_meters=1)
    later = env.book.create(RUCIO, request(env.clock, "dtn1", "dtn4", start=600))  # takes no meter yet
    active(env)  # dtn1 -> dtn3: s1's only meter id, and s3's
    with pytest.raises(NoCapacity, match="switch s1 has no free meter id"):
        env.book.create(RUCIO, request(env.clock, src_prefix=A[0], dst_prefix=A[1]))
    assert len(env.ledger) == 2 and own(env.book.take_changes()) == []
    env.clock.advance(600)
    env.book.tick()  # later's window starts: s1 has no meter for it
    failed = env.book.get(RUCIO, later.name)
    assert failed.state is State.FAILED and "no free meter id" in failed.reason
    assert len(env.ledger) == 1
    confirm(env)
    assert delivered(env.tables, "dtn1", "dtn4")[0] is None and delivered(env.tables, "dtn1", "dtn3")[0] == "dtn3"


def test_a_move_onto_a_new_path_waits_for_the_batch_after_the_paths(env):
    r = active(env)
    env.book.modify(RUCIO, r.name, path=PathChoice(exclude=("s2",)))
    changes = env.book.take_changes()
    assert [c.reservation_id.startswith("path-") for c in changes] == [True, True, False]
    reports, done = [], threading.Event()
    fabric = TablesFabric(env.topology)
    fabric.tables = env.tables
    provisioner = Provisioner(fabric, lambda r: (reports.extend(r), done.set()))
    provisioner.submit(changes)
    provisioner.start()
    assert done.wait(10)
    provisioner.stop()
    # the move is one round (its steer entries): it may not share a round with the entries it moves onto
    assert [len(b) for b in fabric.batches] == [2, 1] and reports[0][1] is None
    env.book.provisioned(r.id, None, reports[0][2])
    assert delivered(env.tables, "dtn1", "dtn3")[1] == ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
