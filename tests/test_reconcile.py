"""Reconciliation (sdn_app.core.reconcile): the steps that make a switch hold exactly what the
reservations want there, checked on simulated tables (tests/flowtable.py) that refuse any step
a real switch would refuse or a diff should never ask (adding a present flow, deleting a
missing one)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdn_app.core.paths import PathFinder, PathRequest, Unbooked
from sdn_app.core.plans import (
    COOKIE_TAG,
    INGRESS,
    PRIORITY,
    FlowPlan,
    FlowSpec,
    GroupSpec,
    IdAllocator,
    Match,
    MeterSpec,
    Step,
    StepKind,
    SwitchPlan,
    plan_for,
)
from sdn_app.core.reconcile import Reconciliation, reconcile
from sdn_app.core.topology import Topology
from sdn_app.openflow.encoder import held_meter
from tests.flowtable import DELIVERED, DROPPED, FlowTables, delivered, ipv6_packet, send_from, solicitation
from topologies import builtin_topology

G = 10**9
PAIRS = (("dtn1", "dtn3", False), ("dtn5", "dtn7", False), ("dtn2", "dtn6", True), ("dtn4", "dtn3", True))


@functools.cache
def ring8() -> Topology:
    return Topology.load(builtin_topology("ring8"))


def rid(n: int) -> str:
    return f"{n:02x}" * 16


@functools.cache
def plans(count: int = len(PAIRS)) -> tuple[FlowPlan, ...]:
    """Plans of the first `count` pairs, with one allocator (ids unique per switch across them)."""
    topology, ids = ring8(), IdAllocator()
    out = []
    for n, (a, b, protect) in enumerate(PAIRS[:count], start=1):
        route = PathFinder(topology, Unbooked(topology)).route(PathRequest(a, b, 10 * G, 0, 3600, protect=protect))
        out.append(plan_for(topology, rid(n), a, b, route, 10 * G, ids))
    return tuple(out)


def expected(switch: str, *wanted: FlowPlan) -> SwitchPlan:
    """What `ReservationBook.switch_plan` gives for `switch` with `wanted` installed."""
    parts = [p.for_switch(switch) for p in wanted]
    return SwitchPlan(tuple(f for p in parts for f in p.flows), tuple(m for p in parts for m in p.meters),
                      tuple(g for p in parts for g in p.groups))


def held(tables: FlowTables, switch: str) -> SwitchPlan:
    t = tables.tables[switch]
    return SwitchPlan(tuple(t.flows.values()), tuple(t.meters.values()), tuple(t.groups.values()))


def installed(*wanted: FlowPlan) -> FlowTables:
    tables = FlowTables(ring8())
    for plan in wanted:
        tables.install(plan)
    return tables


def reconcile_everywhere(tables: FlowTables, *wanted: FlowPlan) -> dict[str, Reconciliation]:
    """Reconcile every switch of ring8 against `wanted`, applying the steps to `tables`."""
    out = {}
    for switch in ring8().switches:
        done = reconcile(switch, expected(switch, *wanted), held(tables, switch))
        tables.apply_all(done.steps)
        out[switch] = done
    return out


def entries(switch_plan: SwitchPlan) -> set:
    return {*switch_plan.flows, *switch_plan.meters, *switch_plan.groups}


def assert_exactly(tables: FlowTables, *wanted: FlowPlan) -> None:
    for switch in ring8().switches:
        got = {e for e in entries(held(tables, switch)) if not isinstance(e, FlowSpec) or e.cookie != 0}
        assert got == entries(expected(switch, *wanted)), switch
    assert all(reconcile(s, expected(s, *wanted), held(tables, s)).steps == () for s in ring8().switches)


def dpid(switch: str) -> int:
    return ring8().switches[switch].dpid


def stale_flow(switch: str, cookie: int = COOKIE_TAG | 0xBAD, output: int = 2, **more: int) -> FlowSpec:
    return FlowSpec(switch=switch, dpid=dpid(switch), priority=PRIORITY, cookie=cookie,
                    match=Match(in_port=1, ipv4_src="10.9.9.9", ipv4_dst="10.9.9.8"), output=output, **more)


# --- nothing to do ---------------------------------------------------------------------------


def test_a_switch_holding_exactly_its_plans_gets_no_steps() -> None:
    tables = installed(*plans())
    done = reconcile_everywhere(tables, *plans())
    assert all(r.steps == () and not r.changes_anything for r in done.values())
    assert done["s1"].summary() == "nothing to change"


# --- missing entries -------------------------------------------------------------------------


def test_missing_flows_and_meters_are_added_and_right_ones_left_alone() -> None:
    a, b = plans(2)
    tables = installed(a, b)
    s1 = tables.tables["s1"]
    lost = [k for k, f in s1.flows.items() if f.cookie == a.cookie and f.role != INGRESS][:2]
    for key in lost:
        del s1.flows[key]
    meter = next(m for m in a.meters_on("s1"))
    tables._delete_meter(s1, meter)  # as a switch does: the flows using it go too
    before = entries(held(tables, "s1"))
    assert delivered(tables, "dtn1", "dtn3")[0] is None

    done = reconcile_everywhere(tables, a, b)
    assert_exactly(tables, a, b)
    assert delivered(tables, "dtn1", "dtn3") == ("dtn3", ("s1", "s2", "s3"))
    assert delivered(tables, "dtn5", "dtn7")[0] == "dtn7"
    assert all(r.steps == () for s, r in done.items() if s != "s1")
    touched = {s.spec for s in done["s1"].steps if s.spec is not None}
    assert not touched & before, "an entry that was right was touched"
    assert {s.kind for s in done["s1"].steps} == {StepKind.ADD_METER, StepKind.ADD_FLOW, StepKind.BARRIER}
    assert done["s1"].summary() == f"added {done['s1'].count(StepKind.ADD_FLOW)} missing flows, added 1 missing meter"


def test_a_switch_that_lost_everything_gets_it_all_back_in_make_before_break_order() -> None:
    wanted = plans()
    tables = installed(*wanted)
    for table in tables.tables.values():
        table.flows.clear()
        table.meters.clear()
        table.groups.clear()
    done = reconcile_everywhere(tables, *wanted)
    assert_exactly(tables, *wanted)
    steps = done["s1"].steps
    kinds = [s.kind for s in steps if s.kind is not StepKind.BARRIER]
    # meters and groups first, then the downstream flows, the ingress flows last
    last_prepare = max(i for i, k in enumerate(kinds) if k in (StepKind.ADD_METER, StepKind.ADD_GROUP))
    first_flow = kinds.index(StepKind.ADD_FLOW)
    assert last_prepare < first_flow
    flows = [s.spec for s in steps if s.kind is StepKind.ADD_FLOW]
    roles = [f.role == INGRESS for f in flows]
    assert roles == sorted(roles), "an ingress flow came before a downstream one"
    assert steps[-1].kind is StepKind.BARRIER
    for i, step in enumerate(steps[:-1]):
        if step.kind is StepKind.BARRIER:
            assert steps[i + 1].kind is not StepKind.BARRIER
    for src, dst, _ in PAIRS:
        assert delivered(tables, src, dst)[0] == dst
        assert delivered(tables, dst, src)[0] == src


# --- stale entries ---------------------------------------------------------------------------


def test_stale_tsdn_entries_go_and_base_flows_stay() -> None:
    a, b = plans(2)
    tables = installed(a, b)
    s2 = tables.tables["s2"]
    base = FlowSpec(switch="s2", dpid=dpid("s2"), priority=1, cookie=0, match=Match(eth_type=0x0806), output=2)
    s2.flows[base.key] = base
    meter = MeterSpec(switch="s2", dpid=dpid("s2"), meter_id=999, rate_bps=10**6, burst_bits=10**6)
    group = GroupSpec(switch="s2", dpid=dpid("s2"), group_id=4242, type="all", buckets=((1, 2),))
    s2.meters[999] = meter
    s2.groups[4242] = group
    stale = stale_flow("s2", meter_id=999)
    s2.flows[stale.key] = stale

    done = reconcile_everywhere(tables, a, b)
    assert_exactly(tables, a, b)
    assert s2.flows[base.key] == base, "the base flow (cookie 0) must never be touched"
    steps = [s for s in done["s2"].steps if s.kind is not StepKind.BARRIER]
    assert [(s.kind, s.spec) for s in steps] == [(StepKind.DELETE_FLOW, stale), (StepKind.DELETE_GROUP, group),
                                                 (StepKind.DELETE_METER, meter)]
    assert done["s2"].steps[1].kind is StepKind.BARRIER, "flows must be gone before their meter"
    assert done["s2"].summary() == "removed 1 stale flow, removed 1 stale meter, removed 1 stale or wrong group"


def test_a_reservation_released_while_the_switch_was_away_is_removed_from_it() -> None:
    wanted = plans()
    tables = installed(*wanted)
    gone = wanted[2]  # protected: flows, meters and groups
    kept = tuple(p for p in wanted if p is not gone)
    done = reconcile_everywhere(tables, *kept)
    assert_exactly(tables, *kept)
    assert delivered(tables, "dtn2", "dtn6")[0] is None
    for src, dst, _ in PAIRS:
        if (src, dst) != ("dtn2", "dtn6"):
            assert delivered(tables, src, dst)[0] == dst
    for switch, result in done.items():
        assert all(s.kind in (StepKind.DELETE_FLOW, StepKind.DELETE_GROUP, StepKind.DELETE_METER, StepKind.BARRIER)
                   for s in result.steps), switch
        assert {s.spec for s in result.steps if s.spec is not None} == entries(gone.for_switch(switch))


@functools.cache
def prefix_plans() -> tuple[FlowPlan, FlowPlan]:
    """Two protected reservations between dtn1 and dtn3 told apart by IPv6 prefixes (two Rucio
    rules), with one allocator."""
    topology, ids = ring8(), IdAllocator()
    route = PathFinder(topology, Unbooked(topology)).route(PathRequest("dtn1", "dtn3", 10 * G, 0, 3600, protect=True))
    return tuple(plan_for(topology, rid(n), "dtn1", "dtn3", route, 10 * G, ids, src_prefix=f"2001:db8:8:10{n}::/64",
                          dst_prefix=f"2001:db8:8:30{n}::/64") for n in (1, 2))


def test_prefix_reservations_between_the_same_dtns_are_reconciled_apart() -> None:
    rule_a, rule_b = prefix_plans()
    tables = installed(rule_a, rule_b)
    for table in tables.tables.values():  # rule A's flows deleted by hand; rule B released while away
        for key in [k for k, f in table.flows.items() if f.cookie == rule_a.cookie]:
            del table.flows[key]
    assert send_from(tables, "dtn1", ipv6_packet("2001:db8:8:101::1", "2001:db8:8:301::1")).outcome == DROPPED
    done = reconcile_everywhere(tables, rule_a)
    assert_exactly(tables, rule_a)
    assert done["s1"].count(StepKind.ADD_FLOW) == len(rule_a.flows_on("s1"))
    assert done["s1"].count(StepKind.DELETE_FLOW) == len(rule_b.flows_on("s1"))
    for packet in (ipv6_packet("2001:db8:8:101::1", "2001:db8:8:301::1"),
                   solicitation("2001:db8:8:101::1", "2001:db8:8:301::1")):
        trace = send_from(tables, "dtn1", packet)
        assert (trace.outcome, trace.dtn) == (DELIVERED, "dtn3"), trace.reason
    assert send_from(tables, "dtn1", ipv6_packet("2001:db8:8:102::1", "2001:db8:8:302::1")).outcome == DROPPED


# --- wrong entries ---------------------------------------------------------------------------


def test_a_flow_with_another_action_or_cookie_is_modified_in_place() -> None:
    (a,) = plans(1)
    tables = installed(a)
    s2 = tables.tables["s2"]
    transit = next(f for f in s2.flows.values() if f.direction == "forward" and f.match.eth_type == 0x0800)
    wrong = dataclasses.replace(transit, output=4, cookie=COOKIE_TAG | 0x1234)
    s2.flows[transit.key] = wrong
    assert delivered(tables, "dtn1", "dtn3")[0] is None
    done = reconcile_everywhere(tables, a)
    assert_exactly(tables, a)
    assert done["s2"].steps == (Step(StepKind.MODIFY_FLOW, ("s2",), transit, wrong), Step(StepKind.BARRIER, ("s2",)))
    assert done["s2"].summary() == "corrected 1 flow"
    assert delivered(tables, "dtn1", "dtn3")[0] == "dtn3"


def test_a_group_with_other_buckets_is_replaced_and_its_flows_put_back() -> None:
    protected = plans()[2]
    tables = installed(protected)
    switch, group = next((g.switch, g) for g in protected.groups)
    table = tables.tables[switch]
    wrong = dataclasses.replace(group, buckets=tuple(reversed(group.buckets)))
    table.groups[group.group_id] = wrong
    users = [f for f in table.flows.values() if f.group_id == group.group_id]
    assert users
    done = reconcile_everywhere(tables, protected)
    assert_exactly(tables, protected)
    steps = done[switch].steps
    assert steps[:2] == (Step(StepKind.DELETE_GROUP, (switch,), wrong), Step(StepKind.BARRIER, (switch,)))
    assert steps[2:4] == (Step(StepKind.ADD_GROUP, (switch,), group), Step(StepKind.BARRIER, (switch,)))
    assert {s.spec for s in steps if s.kind is StepKind.ADD_FLOW} == set(users)


def test_meters_are_compared_as_the_switch_reports_them() -> None:
    """The switch holds kbit/s at the emulation scale, rounded, with a burst floor: a meter
    decoded from it equals `held_meter(spec, scale)`, not the spec, and is no reason to act."""
    (a,) = plans(1)
    scale = 0.0002
    tables = installed(a)
    s1 = tables.tables["s1"]
    for meter_id, meter in list(s1.meters.items()):
        s1.meters[meter_id] = held_meter(meter, scale)
    assert any(s1.meters[m.meter_id] != m for m in a.meters_on("s1")), "the scale should change what is reported"
    as_held = functools.partial(held_meter, scale=scale)
    assert reconcile("s1", expected("s1", a), held(tables, "s1"), as_held).steps == ()

    meter = a.meters_on("s1")[0]
    s1.meters[meter.meter_id] = held_meter(dataclasses.replace(meter, rate_bps=2 * meter.rate_bps), scale)
    done = reconcile("s1", expected("s1", a), held(tables, "s1"), as_held)
    assert done.steps == (Step(StepKind.MODIFY_METER, ("s1",), meter, s1.meters[meter.meter_id]),
                          Step(StepKind.BARRIER, ("s1",)))
    # A meter in a shape tsdn never installs is decoded with rate 0: corrected, never kept.
    s1.meters[meter.meter_id] = dataclasses.replace(meter, rate_bps=0, burst_bits=0)
    assert [s.kind for s in reconcile("s1", expected("s1", a), held(tables, "s1"), as_held).steps] == [
        StepKind.MODIFY_METER, StepKind.BARRIER]


# --- refusals --------------------------------------------------------------------------------


def test_specs_of_another_switch_or_two_claims_on_one_key_are_refused() -> None:
    (a,) = plans(1)
    with pytest.raises(ValueError, match=r"reconciling s1: the expected flow s2 .* is on another switch"):
        reconcile("s1", expected("s2", a), SwitchPlan((), (), ()))
    flow = a.flows_on("s1")[0]
    clash = dataclasses.replace(flow, output=7)
    with pytest.raises(ValueError, match="two expected flows share"):
        reconcile("s1", SwitchPlan((flow, clash), (), ()), SwitchPlan((), (), ()))
    meter = a.meters_on("s1")[0]
    with pytest.raises(ValueError, match="two held meters share"):
        reconcile("s1", SwitchPlan((), (), ()),
                  SwitchPlan((), (meter, dataclasses.replace(meter, rate_bps=1)), ()))


def test_flows_without_the_tsdn_tag_in_what_is_held_are_ignored() -> None:
    foreign = stale_flow("s4", cookie=0x1234)
    assert reconcile("s4", SwitchPlan((), (), ()), SwitchPlan((foreign,), (), ())).steps == ()


# --- any tampering ---------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_tampering_is_undone_without_touching_what_is_right(data: st.DataObject) -> None:
    everything = plans()
    wanted = tuple(p for p in everything if data.draw(st.booleans(), label=f"want {p.src_dtn}->{p.dst_dtn}"))
    on_switches = tuple(p for p in everything if p in wanted or data.draw(st.booleans(), label="left over"))
    tables = installed(*on_switches)
    for name, table in sorted(tables.tables.items()):
        for key in sorted(table.flows, key=repr):
            if data.draw(st.integers(0, 9), label=f"{name} flow") == 0:
                del table.flows[key]
        for meter_id in sorted(table.meters):
            roll = data.draw(st.integers(0, 9), label=f"{name} meter")
            if roll == 0:
                tables._delete_meter(table, table.meters[meter_id])
            elif roll == 1:
                table.meters[meter_id] = dataclasses.replace(table.meters[meter_id], rate_bps=12345)
        for group_id in sorted(table.groups):
            if data.draw(st.integers(0, 9), label=f"{name} group") == 0:
                group = table.groups[group_id]
                table.groups[group_id] = dataclasses.replace(group, buckets=group.buckets[:1])
        if data.draw(st.integers(0, 3), label=f"{name} stale") == 0:
            port = min(table.ports)
            stale = stale_flow(name, output=port)
            table.flows[stale.key] = dataclasses.replace(stale, match=dataclasses.replace(stale.match, in_port=port))
    before = {s: entries(held(tables, s)) for s in tables.tables}

    done = reconcile_everywhere(tables, *wanted)
    assert_exactly(tables, *wanted)
    for switch, result in done.items():
        right = before[switch] & entries(expected(switch, *wanted))
        replaced_groups = {s.spec.group_id for s in result.steps if s.kind is StepKind.DELETE_GROUP}
        for step in result.steps:
            if step.spec is None or step.spec not in right:
                continue
            # The one exception: a right flow whose group was wrong goes with the group and comes back.
            assert step.kind is StepKind.ADD_FLOW and step.spec.group_id in replaced_groups, step.describe()
    for plan in wanted:
        assert delivered(tables, plan.src_dtn, plan.dst_dtn)[0] == plan.dst_dtn
