"""Tagged ends (802.1Q VLANs at a reservation's end ports) in the label design: VLAN circuits
(both ends tagged, every frame of the VLAN), one-sided tagged address reservations, what the
book refuses (bad ids, a VLAN taken at a port, the per-hop design), a restart, protection with
the controller gone, and the OpenFlow encoding and reconciliation of the new entries."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import replace
from typing import NamedTuple

import pytest

from sdn_app.core.errors import FailedPrecondition, InvalidArgument
from sdn_app.core.label_plans import PathUse, edge_plan, path_keys
from sdn_app.core.plans import IN_PORT, UNTAGGED, IdAllocator, StepKind, SwitchPlan
from sdn_app.core.reconcile import reconcile
from sdn_app.core.reservation import State
from sdn_app.core.reservations import BatchItem
from sdn_app.openflow.encoder import add_flow, add_group, flow_from_stats, group_from_stats
from tests.flowtable import (
    FlowTables,
    Packet,
    TableError,
    dtn_packet,
    ipv6_packet,
)
from tests.switched import RUCIO, TablesFabric, active, confirm, reopened, request, switch_plans, switched_ring8

V1, V3, OTHER = 1780, 1781, 1782  # dtn1's VLAN, dtn3's, and one nobody reserved


class Arrival(NamedTuple):
    """Where a frame went: the end it reached (None: nowhere), the VLAN it carried there, why it stopped."""

    dtn: str | None
    vlan: int | None
    reason: str


class TaggedTables(FlowTables):
    """`FlowTables` whose ends may be tagged: a frame reaches a DTN port with whatever tag it
    carries (the caller checks it), and a `retag` group rewrites the tag instead of pushing one."""

    def arrive(self, packet: Packet, src_dtn: str, down: Iterable[str] = ()) -> Arrival:
        """Follow `packet` sent on `src_dtn`'s port (tagged as `packet.vlan` says)."""
        dtn = self.topology.dtns[src_dtn]
        switch, in_port, down_links = dtn.switch, dtn.port, frozenset(down)
        seen: set[tuple[str, int]] = set()
        while (switch, in_port) not in seen:
            seen.add((switch, in_port))
            table, table_id, metadata = self.tables[switch], 0, 0
            while True:
                flow = table.lookup(packet, in_port, table_id, metadata)
                if flow is None:
                    return Arrival(None, None, f"table miss at {switch} port {in_port} (table {table_id})")
                if flow.goto_table is None:
                    break
                table_id, metadata = flow.goto_table, flow.write_metadata or 0
            packet = _relabelled(packet, flow.push_label, flow.set_label, flow.pop_label)
            out = flow.output
            if flow.group_id is not None:
                group = table.groups[flow.group_id]
                bucket = next((b for b in group.buckets if self.live(switch, b[0], down_links)), None)
                if bucket is None:
                    return Arrival(None, None, f"no live bucket in {group.describe()}")
                out = bucket[1]
                if len(bucket) > 2:
                    packet = _relabelled(packet, set_=bucket[2]) if group.retag else _relabelled(packet, bucket[2])
            assert out is not None
            out = in_port if out == IN_PORT else out
            peer = self.wiring.get((switch, out))
            if peer is None:
                return Arrival(None, None, f"{switch}: nothing on port {out}")
            if peer[0] == "dtn":
                return Arrival(peer[1], packet.vlan, f"out {switch} port {out}")
            if peer[3] in down_links:
                return Arrival(None, None, f"{switch}: sent into down link {peer[3]}")
            switch, in_port = peer[1], peer[2]
        return Arrival(None, None, f"loop at {switch} port {in_port}")


def _relabelled(packet: Packet, push: int | None = None, set_: int | None = None, pop: bool = False) -> Packet:
    if push is not None:
        if packet.vlan is not None:
            raise TableError(f"pushing {push} onto a frame tagged {packet.vlan}: it would leave double-tagged")
        return replace(packet, vlan=push)
    if set_ is not None or pop:
        if packet.vlan is None:
            raise TableError("changing the tag of an untagged frame")
        return replace(packet, vlan=None if pop else set_)
    return packet


@pytest.fixture
def env(tmp_path):
    env = switched_ring8(tmp_path)
    env.tables = TaggedTables(env.topology)
    return env


def frames(env, src: str, dst: str, vlan: int | None) -> list[Packet]:
    """Frames of every kind `src` might send towards `dst`, tagged `vlan`: its own IPv4, ARP,
    IPv6, and IPv4 between addresses nobody reserved."""
    kinds = [dtn_packet(env.topology, src, dst), dtn_packet(env.topology, src, dst, 0x0806),
             ipv6_packet("2001:db8:99::1", "2001:db8:98::2"), Packet("192.0.2.7", "198.51.100.9")]
    return [replace(p, vlan=vlan) for p in kinds]


def circuit(env, **more):
    """The VLAN circuit dtn1 (VLAN V1) <-> dtn3 (VLAN V3), installed and ACTIVE."""
    return active(env, "dtn1", "dtn3", src_vlan=V1, dst_vlan=V3, **more)


def test_a_vlan_circuit_carries_every_frame_of_its_vlan_retagged_and_nothing_else(env):
    r = circuit(env)
    for frame in frames(env, "dtn1", "dtn3", V1):
        assert env.tables.arrive(frame, "dtn1")[:2] == ("dtn3", V3), frame
    for frame in frames(env, "dtn3", "dtn1", V3):
        assert env.tables.arrive(frame, "dtn3")[:2] == ("dtn1", V1), frame
    for vlan in (None, OTHER, V3):  # untagged, another VLAN, the far end's VLAN at the near end: nobody
        for frame in frames(env, "dtn1", "dtn3", vlan):
            assert env.tables.arrive(frame, "dtn1").dtn is None, frame
    for vlan in (None, OTHER, V1):
        assert env.tables.arrive(frames(env, "dtn3", "dtn1", vlan)[0], "dtn3").dtn is None
    # the classifier is in_port and VLAN only, one per direction (no address-resolution twin), and
    # the label is rewritten at the ingress, not pushed
    plan = env.book.installs.plan(r.id)
    classifiers = [f for f in plan.flows if f.table_id == 0]
    assert sorted((f.switch, f.match.in_port, f.match.vlan_vid, f.match.eth_type, f.match.ipv4_src)
                  for f in classifiers) == [("s1", 3, V1, None, None), ("s3", 3, V3, None, None)]
    steers = [f for f in plan.flows if f.table_id != 0]
    assert all(f.set_label is not None and f.push_label is None for f in steers)

    env.book.release(RUCIO, r.name)
    confirm(env)
    assert env.tables.arrive(frames(env, "dtn1", "dtn3", V1)[0], "dtn1").dtn is None


def test_a_vlan_circuit_needs_no_addresses_at_its_ends(env):
    class NoAddresses:  # a topology whose ends have no address to look up (inter-domain ports)
        switches = env.topology.switches

        def dtn(self, name):
            raise AssertionError(f"a VLAN circuit looked up the address of {name}")

    route = env.book.finder.route(request(env.clock))
    ids = IdAllocator()
    uses = {d: PathUse(label) for d, label in (("forward", 100), ("reverse", 101))}
    plan = edge_plan(NoAddresses(), "0123456789abcdef0123456789abcdef", "dtn1", "dtn3", route, 10**9, ids, uses,
                     src_vlan=V1, dst_vlan=V3)
    assert {f.match.vlan_vid for f in plan.flows if f.table_id == 0} == {V1, V3}
    with pytest.raises(AssertionError, match="looked up the address"):  # an address reservation does need them
        edge_plan(NoAddresses(), "0123456789abcdef0123456789abcdef", "dtn1", "dtn3", route, 10**9, ids, uses,
                  dst_vlan=V3)
    # through the book, with the ends' addresses gone from the topology
    for name in ("dtn1", "dtn3"):
        env.topology.dtns[name] = env.topology.dtns[name].model_copy(update={"ipv4": None})
    circuit(env)
    assert env.tables.arrive(Packet(vlan=V1), "dtn1")[:2] == ("dtn3", V3)


def test_a_reservation_tagged_at_one_end_keeps_its_addresses(env):
    r = active(env, "dtn1", "dtn3", dst_vlan=V3)
    for kind in (0x0800, 0x0806):  # its traffic and its ARP
        assert env.tables.arrive(dtn_packet(env.topology, "dtn1", "dtn3", kind), "dtn1")[:2] == ("dtn3", V3)
        back = replace(dtn_packet(env.topology, "dtn3", "dtn1", kind), vlan=V3)
        assert env.tables.arrive(back, "dtn3")[:2] == ("dtn1", None)
    # other addresses, or dtn3's frames untagged or on another VLAN, reach nobody
    assert env.tables.arrive(Packet("192.0.2.7", "10.0.0.3"), "dtn1").dtn is None
    assert env.tables.arrive(dtn_packet(env.topology, "dtn3", "dtn1"), "dtn3").dtn is None
    assert env.tables.arrive(replace(dtn_packet(env.topology, "dtn3", "dtn1"), vlan=OTHER), "dtn3").dtn is None
    plan = env.book.installs.plan(r.id)
    s1 = sorted(f.match.vlan_vid for f in plan.flows_on("s1") if f.table_id == 0)
    s3 = sorted(f.match.vlan_vid for f in plan.flows_on("s3") if f.table_id == 0)
    assert (s1, s3) == ([UNTAGGED, UNTAGGED], [V3, V3])  # each with its ARP twin


def test_two_reservations_ending_at_one_port_with_other_tags_get_their_own_labels(env):
    plain = active(env, "dtn1", "dtn3")  # untagged at dtn3: its egress pops
    tagged = circuit(env)  # the same hops, but its egress sets V3
    a, b = env.book.installs.labels(plain.id), env.book.installs.labels(tagged.id)
    assert a["forward"] != b["forward"] and a["reverse"] != b["reverse"]
    keys = path_keys(env.book.get(RUCIO, tagged.name).route, V1, V3)
    assert keys["forward"].hops == path_keys(env.book.get(RUCIO, plain.name).route)["forward"].hops
    assert env.tables.arrive(dtn_packet(env.topology, "dtn1", "dtn3"), "dtn1")[:2] == ("dtn3", None)
    assert env.tables.arrive(replace(dtn_packet(env.topology, "dtn1", "dtn3"), vlan=V1), "dtn1")[:2] == ("dtn3", V3)
    assert env.tables.arrive(dtn_packet(env.topology, "dtn3", "dtn1"), "dtn3")[:2] == ("dtn1", None)
    assert env.tables.arrive(Packet(vlan=V3), "dtn3")[:2] == ("dtn1", V1)


def test_a_vlan_taken_at_a_port_is_refused_naming_it_and_its_holder(env):
    first = circuit(env)
    booked = len(env.ledger)
    for src, dst, vlans, port in (("dtn1", "dtn5", {"src_vlan": V1, "dst_vlan": 1790}, "s1 port 3"),
                                  ("dtn5", "dtn3", {"src_vlan": 1790, "dst_vlan": V3}, "s3 port 3"),
                                  ("dtn3", "dtn5", {"src_vlan": V3}, "s3 port 3")):  # the same port as a src end
        with pytest.raises(FailedPrecondition) as refused:
            env.book.create(RUCIO, request(env.clock, src, dst, **vlans))
        message = str(refused.value)
        vlan = V1 if port == "s1 port 3" else V3
        assert f"VLAN {vlan}" in message and port in message and first.name in message, message
    assert len(env.ledger) == booked and env.book.take_changes() == []
    # another VLAN at the port, or a window after the holder's, is fine
    active(env, "dtn1", "dtn5", src_vlan=OTHER, dst_vlan=1790)
    env.book.create(RUCIO, request(env.clock, "dtn1", "dtn6", start=7200, src_vlan=V1, dst_vlan=1791))
    # a batch may not take one VLAN twice either
    items = [BatchItem(request(env.clock, "dtn2", "dtn6", src_vlan=1800, dst_vlan=1801)),
             BatchItem(request(env.clock, "dtn2", "dtn7", src_vlan=1800, dst_vlan=1802))]
    outcomes = env.book.create_many(RUCIO, items, all_or_nothing=True)
    assert isinstance(outcomes[1], FailedPrecondition) and "requests[0] of this batch" in str(outcomes[1])
    # released, the VLAN is free again
    env.book.release(RUCIO, first.name)
    confirm(env)
    active(env, "dtn1", "dtn5", src_vlan=V1, dst_vlan=1792)


@pytest.mark.parametrize("field", ["src_vlan", "dst_vlan"])
@pytest.mark.parametrize("bad", [0, 4095, -1, True, "1780", 17.0])
def test_a_vlan_id_outside_1_to_4094_is_refused_naming_the_field(env, field, bad):
    with pytest.raises(InvalidArgument, match=field):
        env.book.create(RUCIO, request(env.clock, **{field: bad}))
    assert len(env.ledger) == 0 and env.book.take_changes() == []


def test_a_vlan_circuit_with_prefixes_is_refused(env):
    with pytest.raises(InvalidArgument, match="src_prefix: a VLAN circuit"):
        env.book.create(RUCIO, request(env.clock, src_vlan=V1, dst_vlan=V3, src_prefix="2001:db8:8:110::/64",
                                       dst_prefix="2001:db8:8:310::/64"))
    assert len(env.ledger) == 0


def test_an_address_reservation_tagged_at_one_end_still_keeps_its_pair_apart(env):
    active(env, "dtn1", "dtn3", dst_vlan=V3)
    # untagged at dtn1 too: dtn1's classifier could not tell the two apart
    with pytest.raises(FailedPrecondition, match="dtn1 -> dtn3 already has"):
        env.book.create(RUCIO, request(env.clock, "dtn1", "dtn3"))
    active(env, "dtn1", "dtn3", src_vlan=V1, dst_vlan=OTHER)  # a circuit between them: other frames altogether


def test_the_per_hop_design_refuses_tagged_ends(tmp_path):
    env = switched_ring8(tmp_path, "per-hop")
    for vlans in ({"src_vlan": V1}, {"dst_vlan": V3}, {"src_vlan": V1, "dst_vlan": V3}):
        with pytest.raises(FailedPrecondition, match="label flow design"):
            env.book.create(RUCIO, request(env.clock, **vlans))
    assert len(env.ledger) == 0
    active(env)  # untagged ones as before


def test_a_restart_keeps_the_vlans_and_installs_the_same_flows(env):
    c = circuit(env)
    one = active(env, "dtn5", "dtn7", src_vlan=1900)
    protected = active(env, "dtn2", "dtn6", src_vlan=1901, dst_vlan=1902, protect=True)

    wanted = switch_plans(env.book, env.topology)

    book = reopened(env)

    assert book.take_changes() == []

    assert switch_plans(book, env.topology) == wanted
    for r, vlans in ((c, (V1, V3)), (one, (1900, None)), (protected, (1901, 1902))):
        q = book.get(RUCIO, r.name).request
        assert (q.src_vlan, q.dst_vlan) == vlans
    with pytest.raises(FailedPrecondition, match=f"VLAN {V1}"):  # still held after the restart
        book.create(RUCIO, request(env.clock, "dtn1", "dtn4", src_vlan=V1))
    # switches that lost everything get it back by reconciliation, and carry the circuit again
    fabric = TablesFabric(env.topology)
    fabric.tables = TaggedTables(env.topology)
    for switch in env.topology.switches:
        fabric.reconcile(switch, book.switch_plan(switch))
    assert fabric.tables.arrive(Packet(vlan=V1), "dtn1")[:2] == ("dtn3", V3)
    assert fabric.tables.arrive(Packet(vlan=1902), "dtn6")[:2] == ("dtn2", 1901)


@pytest.mark.parametrize("cut", ["s1-s2", "s2-s3"])
def test_a_protected_circuit_survives_any_primary_link_with_no_controller(env, cut):
    r = circuit(env, protect=True)
    assert env.book.get(RUCIO, r.name).route.backup is not None
    for down in ((), (cut,)):
        assert env.tables.arrive(Packet(vlan=V1), "dtn1", down)[:2] == ("dtn3", V3), down
        assert env.tables.arrive(Packet(vlan=V3), "dtn3", down)[:2] == ("dtn1", V1), down
        assert env.tables.arrive(Packet(vlan=OTHER), "dtn1", down).dtn is None
    # the ingress groups rewrite the frame's tag; those of an untagged reservation on the same hops push
    plain = active(env, "dtn1", "dtn3", protect=True)
    for switch in ("s1", "s3"):
        groups = [g for g in env.book.switch_plan(switch).groups if len(g.buckets[0]) == 3]
        assert sorted(g.retag for g in groups) == [False, True]
    assert env.tables.arrive(dtn_packet(env.topology, "dtn1", "dtn3"), "dtn1", (cut,))[:2] == ("dtn3", None)
    assert env.book.installs.labels(plain.id) != env.book.installs.labels(r.id)


def test_every_entry_of_tagged_ends_decodes_back_to_its_spec(env):
    from tests.test_openflow_encoder import StandInDatapath, reported_flow, reported_group

    circuit(env, protect=True)
    active(env, "dtn5", "dtn7", dst_vlan=1900)
    checked = 0
    for switch in env.topology.switches:
        plan = env.book.switch_plan(switch)
        for flow in plan.flows:
            dp = StandInDatapath()
            dp.id = flow.dpid
            assert flow_from_stats(dp, reported_flow(add_flow(dp, flow)), switch) == flow, flow.describe()
        for group in plan.groups:
            dp = StandInDatapath()
            dp.id = group.dpid
            assert group_from_stats(dp, reported_group(add_group(dp, group)), switch) == group, group.describe()
            checked += group.retag
    assert checked == 2  # the circuit's two ingress groups


def test_reconciliation_replaces_a_group_that_pushes_where_it_should_rewrite(env):
    circuit(env, protect=True)
    expected = env.book.switch_plan("s1")
    retagging = next(g for g in expected.groups if g.retag)
    held = SwitchPlan(expected.flows, expected.meters,
                      tuple(dataclasses.replace(g, retag=False) if g == retagging else g for g in expected.groups))
    steps = reconcile("s1", expected, held).steps
    kinds = [(s.kind, s.spec.group_id) for s in steps if s.kind in (StepKind.DELETE_GROUP, StepKind.ADD_GROUP)]
    assert kinds == [(StepKind.DELETE_GROUP, retagging.group_id), (StepKind.ADD_GROUP, retagging.group_id)]
    assert not reconcile("s1", expected, expected).steps


def test_a_reservation_ends_in_state_active_only_once_its_tagged_flows_are_in(env):
    r = env.book.create(RUCIO, request(env.clock, src_vlan=V1, dst_vlan=V3))
    assert env.book.get(RUCIO, r.name).state is State.PROVISIONING
    assert env.tables.arrive(Packet(vlan=V1), "dtn1").dtn is None
    confirm(env)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE
    assert env.tables.arrive(Packet(vlan=V1), "dtn1")[:2] == ("dtn3", V3)


def test_every_entry_that_rewrites_or_pops_a_tag_matches_one(env):
    """OpenFlow's prerequisite (Open vSwitch refuses such an entry: OFPBAC_MATCH_INCONSISTENT)."""
    circuit(env)
    active(env, "dtn5", "dtn7", src_vlan=1900)
    active(env, "dtn2", "dtn6", dst_vlan=1901, protect=True)
    flows = [f for s in env.topology.switches for f in env.book.switch_plan(s).flows]
    changing = [f for f in flows if f.set_label is not None or f.pop_label]
    assert {f.table_id for f in changing} == {0, 1}  # label egresses and the tagged ends' steer entries
    for f in changing:
        assert f.match.vlan_vid not in (None, UNTAGGED), f.describe()
