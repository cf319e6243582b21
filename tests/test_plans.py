"""Flow plans (sdn_app.core.plans), checked by applying their steps to simulated tables (tests/flowtable.py)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import InvalidArgument, NoCapacity
from sdn_app.core.paths import Path, PathFinder, PathRequest, Route, Unbooked
from sdn_app.core.plans import (
    COOKIE_MASK,
    COOKIE_TAG,
    FORWARD,
    IN_PORT,
    INGRESS,
    PRIORITY,
    REVERSE,
    REVERSE_PRIORITY,
    FlowPlan,
    FlowSpec,
    GroupSpec,
    IdAllocator,
    Match,
    MeterSpec,
    Step,
    StepKind,
    burst_bits,
    is_tsdn_cookie,
    plan_for,
    plan_steps,
    reservation_cookie,
    reverse_rate,
)
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import parse_topology_spec
from tests.flowtable import (
    DELIVERED,
    DROPPED,
    LOOP,
    LOST,
    FlowTables,
    Packet,
    TableError,
    delivered,
    dtn_packet,
    send,
)
from topologies import builtin_topology


def barrier_phases(steps: Iterable[Step]) -> list[list[Step]]:
    """`steps` split at their barriers: the groups a switch may apply in any order."""
    phases: list[list[Step]] = [[]]
    for step in steps:
        if step.kind is StepKind.BARRIER:
            phases.append([])
        else:
            phases[-1].append(step)
    return [p for p in phases if p]


def held_ids(ids: IdAllocator, switch: str, kind: str) -> set[int]:
    """The `kind` ("meter" or "group") ids `ids` holds on `switch` (its ownership table)."""
    return {value for (s, k, value) in ids._owner if s == switch and k == kind}

G = 10**9
T0 = FakeClock().now()
RID = "0123456789abcdef0123456789abcdef"

PAIRS = {
    "ring8": [("dtn1", "dtn4"), ("dtn1", "dtn5"), ("dtn3", "dtn2"), ("dtn8", "dtn2")],
    "sc16": [
        ("caltech-a-dtn1", "starlight-dtn1"),  # the 1T RDMA link, one hop
        ("ucsd-dtn1", "chicago-dtn1"),  # the backup crosses scinet, a switch of the primary
        ("2crsi-dtn1", "miami-dtn1"),
        ("pasadena-dtn1", "annarbor-dtn1"),
        ("dell-dtn1", "umich-dtn1"),
        ("caltech-a-dtn1", "caltech-a-dtn2"),  # same switch: no link to protect
    ],
}
CASES = [(name, a, b) for name, pairs in PAIRS.items() for a, b in pairs]
PROTECTED_CASES = [c for c in CASES if c[1:] != ("caltech-a-dtn1", "caltech-a-dtn2")]


# --- helpers -----------------------------------------------------------------------------


@functools.cache
def topo(name: str) -> Topology:
    return Topology.load(builtin_topology(name))


def finder(name: str) -> PathFinder:
    t = topo(name)
    return PathFinder(t, Unbooked(t))


def request(a: str, b: str, bandwidth: int = 10 * G, protect: bool = False) -> PathRequest:
    return PathRequest(a, b, bandwidth, T0, T0 + 3600, protect=protect)


@functools.cache
def route(name: str, a: str, b: str, protect: bool = False) -> Route:
    return finder(name).route(request(a, b, protect=protect))


@functools.cache
def alternatives(name: str, a: str, b: str) -> tuple[Path, ...]:
    return tuple(finder(name).alternatives(request(a, b), 6))


def rid(n: int) -> str:
    """A distinct reservation id per `n`."""
    return hashlib.md5(str(n).encode()).hexdigest()


def installed(name: str, *plans: FlowPlan) -> FlowTables:
    tables = FlowTables(topo(name))
    for plan in plans:
        tables.install(plan)
    return tables


def crankback_switches(primary: tuple[str, ...], backup: tuple[str, ...], k: int) -> tuple[str, ...]:
    """Switches crossed when primary link k (from primary[k] to primary[k+1]) is down."""
    return primary[:k + 1] + primary[:k][::-1] + backup[1:]


PHASE_OF = {
    StepKind.ADD_METER: 0, StepKind.MODIFY_METER: 0, StepKind.ADD_GROUP: 0,
    StepKind.ADD_FLOW: 1, StepKind.MODIFY_FLOW: 1,
    StepKind.DELETE_FLOW: 3, StepKind.DELETE_GROUP: 4, StepKind.DELETE_METER: 4,
}


def phase_of(step: Step) -> int:
    phase = PHASE_OF[step.kind]
    if phase == 1 and isinstance(step.spec, FlowSpec) and step.spec.role == INGRESS:
        return 2
    return phase


def check_phases(steps: list[Step]) -> None:
    """Barriers close every phase, on exactly the switches the phase touched; phases come in
    order (meters and groups, other flows downstream first, ingress flows, deletes of flows,
    deletes of groups and meters) and never share a barrier-delimited group."""
    if not steps:
        return
    assert steps[-1].kind is StepKind.BARRIER
    pending: set[str] = set()
    for step in steps:
        if step.kind is StepKind.BARRIER:
            assert pending, "a barrier with nothing before it"
            assert set(step.switches) == pending
            pending = set()
        else:
            pending.add(step.switch)
    order: list[int] = []
    waves: list[int] = []
    for phase in barrier_phases(steps):
        kinds = {phase_of(s) for s in phase}
        if kinds == {0, 1}:  # meters and groups with new flows: only flows that use none of them
            prepared = {(s.spec.switch, s.kind, getattr(s.spec, "group_id", None) or getattr(s.spec, "meter_id", None))
                        for s in phase if phase_of(s) == 0}
            assert all(s.kind is StepKind.ADD_FLOW for s in phase if phase_of(s) == 1)
            assert not any((s.spec.switch, StepKind.ADD_GROUP, s.spec.group_id) in prepared
                           or (s.spec.switch, StepKind.ADD_METER, s.spec.meter_id) in prepared
                           for s in phase if phase_of(s) == 1), "a flow shares a barrier group with what it uses"
            order.append(1)
            phase = [s for s in phase if phase_of(s) == 1]
        else:
            assert len(kinds) == 1, f"one barrier group mixes phases: {[s.describe() for s in phase]}"
            order.append(kinds.pop())
        stages = [s.spec.stage for s in phase if isinstance(s.spec, FlowSpec)]
        if order[-1] == 1 and phase[0].kind is StepKind.ADD_FLOW:
            assert stages == sorted(stages), "flows are not added downstream first"
        if order[-1] == 1 and phase[0].kind is StepKind.MODIFY_FLOW:
            assert len(set(stages)) == 1, "one wave of changes mixes stages"
            assert waves == [] or waves[-1] < stages[0], "waves of changes are not downstream first"
            waves.append(stages[0])
    assert order == sorted(order)


# --- cookies -----------------------------------------------------------------------------


def test_cookie_carries_the_tag_and_48_bits_of_the_id() -> None:
    cookie = reservation_cookie(RID)
    assert cookie >> 48 == 0x75D5
    assert cookie & COOKIE_MASK == COOKIE_TAG
    assert cookie & ~COOKIE_MASK == int(RID[-12:], 16)
    assert cookie < 1 << 64
    assert is_tsdn_cookie(cookie)
    assert reservation_cookie(RID) == cookie
    assert len({reservation_cookie(rid(n)) for n in range(500)}) == 500
    for other in (0, 1, 0x75D4 << 48, 0x75D6 << 48 | 5, (1 << 64) - 1, -1, 1 << 64):
        assert not is_tsdn_cookie(other)
    for bad in ("", "xyz", RID.upper(), RID[:-1], RID + "0", "reservations/" + RID, 42):
        with pytest.raises(InvalidArgument):
            reservation_cookie(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("protect", [False, True])
def test_every_entry_is_tagged_with_the_reservation(protect: bool) -> None:
    plan = plan_for(topo("ring8"), RID, "dtn1", "dtn4", route("ring8", "dtn1", "dtn4", protect), 10 * G)
    assert plan.cookie == reservation_cookie(RID)
    assert plan.flows and all(f.cookie == plan.cookie for f in plan.flows)
    assert bool(plan.groups) == protect
    tables = installed("ring8", plan)
    cookies = {f.cookie for t in tables.tables.values() for f in t.flows.values()}
    assert cookies == {reservation_cookie(RID)}


# --- install -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "a", "b"), CASES)
def test_install_delivers_both_ways_along_exactly_the_route(name: str, a: str, b: str) -> None:
    r = route(name, a, b)
    plan = plan_for(topo(name), RID, a, b, r, 10 * G)
    assert set(plan.switches) == set(r.primary.switches)
    tables = installed(name, plan)
    forward = send(tables, a, b)
    assert (forward.outcome, forward.dtn) == (DELIVERED, b), forward.reason
    assert forward.switches == r.primary.switches
    assert delivered(tables, a, b, eth_type=0x0806) == (b, r.primary.switches)  # ARP too, no controller
    assert delivered(tables, b, a, eth_type=0x0806) == (a, r.primary.switches[::-1])
    back = send(tables, b, a)
    assert (back.outcome, back.dtn) == (DELIVERED, a), back.reason
    assert back.switches == r.primary.switches[::-1]
    for switch in topo(name).switches:
        if switch not in r.primary.switches:
            assert tables.entry_count(switch) == 0
    assert all(f.priority == (PRIORITY if f.direction == FORWARD else REVERSE_PRIORITY) for f in plan.flows)
    assert all(f.match.in_port is not None for f in plan.flows)
    ipv4 = [f for f in plan.flows if f.match.eth_type == 0x0800]
    arp = [f for f in plan.flows if f.match.eth_type == 0x0806]
    # ARP follows exactly the IPv4 hops (no controller needed, never flooded) and is never metered
    assert len(ipv4) == len(arp) == len(plan.flows) // 2
    assert {(f.switch, f.match.in_port, f.match.ipv4_src, f.match.ipv4_dst, f.output, f.group_id) for f in arp} == {
        (f.switch, f.match.in_port, f.match.ipv4_src, f.match.ipv4_dst, f.output, f.group_id) for f in ipv4}
    assert all(f.meter_id is None for f in arp)


@pytest.mark.parametrize(("name", "a", "b"), CASES)
def test_default_deny_other_pairs_spoofing_and_wrong_ports(name: str, a: str, b: str) -> None:
    t = topo(name)
    plan = plan_for(t, RID, a, b, route(name, a, b, protect=(name, a, b) in PROTECTED_CASES), 10 * G)
    tables = installed(name, plan)
    for c in t.dtns:
        if c not in (a, b):
            for src, dst in ((c, b), (b, c), (a, c), (c, a)):
                got = send(tables, src, dst)
                assert got.outcome == DROPPED and got.dtn is None, (src, dst, got)
            spoofed = tables.trace(dtn_packet(t, a, b), t.dtns[c].switch, t.dtns[c].port)
            assert spoofed.outcome == DROPPED, (c, spoofed)
    not_ip = Packet(t.dtns[a].ipv4, t.dtns[b].ipv4, eth_type=0x86DD)
    assert tables.trace(not_ip, t.dtns[a].switch, t.dtns[a].port).outcome == DROPPED
    # A's packet injected on every port of every switch other than the ports the plan expects it on
    expected = {(f.switch, f.match.in_port) for f in plan.flows if f.direction == FORWARD}
    for switch, spec in t.switches.items():
        for port in spec.ports:
            if (switch, port) not in expected:
                got = tables.trace(dtn_packet(t, a, b), switch, port)
                assert got.outcome == DROPPED, (switch, port, got)


@pytest.mark.parametrize("bandwidth", [500_000, 10 * G, 400 * G])
@pytest.mark.parametrize(("name", "a", "b"), CASES)
def test_meters_at_the_ingress_switches(name: str, a: str, b: str, bandwidth: int) -> None:
    t = topo(name)
    plan = plan_for(t, RID, a, b, route(name, a, b), bandwidth)
    by_direction = {m.direction: m for m in plan.meters}
    assert len(plan.meters) == 2 and set(by_direction) == {FORWARD, REVERSE}
    forward, reverse = by_direction[FORWARD], by_direction[REVERSE]
    assert (forward.switch, forward.rate_bps) == (t.dtns[a].switch, bandwidth)
    assert (reverse.switch, reverse.rate_bps) == (t.dtns[b].switch, max(bandwidth // 20, 1_000_000))
    assert reverse.rate_bps == reverse_rate(bandwidth)
    for m in plan.meters:
        assert m.burst_bits == burst_bits(m.rate_bps) >= max(m.rate_bps // 100, 1)
    tables = installed(name, plan)
    assert send(tables, a, b).meters == (forward,)
    assert send(tables, b, a).meters == (reverse,)
    metered = [f for f in plan.flows if f.meter_id is not None]
    assert sorted((f.role, f.direction) for f in metered) == [(INGRESS, FORWARD), (INGRESS, REVERSE)]


def test_single_switch_pair_uses_two_distinct_meters() -> None:
    plan = plan_for(topo("sc16"), RID, "caltech-a-dtn1", "caltech-a-dtn2", route("sc16", "caltech-a-dtn1",
                                                                                   "caltech-a-dtn2"), 10 * G)
    assert plan.switches == ("caltech-a",)
    assert len({m.meter_id for m in plan.meters}) == 2
    assert len(plan.flows) == 4  # one per direction, and its ARP twin


def test_install_steps_add_meters_then_downstream_then_ingress() -> None:
    plan = plan_for(topo("ring8"), RID, "dtn1", "dtn4", route("ring8", "dtn1", "dtn4", protect=True), 10 * G)
    steps = plan_steps(None, plan)
    check_phases(steps)
    assert {s.kind for s in steps} == {StepKind.ADD_METER, StepKind.ADD_GROUP, StepKind.ADD_FLOW, StepKind.BARRIER}
    phases = barrier_phases(steps)
    # the last phase is the two ingress flows (forward at s1, reverse at s4) and their ARP twins
    assert [len(p) for p in phases] == [len(plan.meters) + len(plan.groups), len(plan.flows) - 4, 4]
    assert {(s.switch, s.spec.direction) for s in phases[-1]} == {("s1", FORWARD), ("s4", REVERSE)}  # type: ignore
    assert plan_steps(None, None) == []


@pytest.mark.parametrize("protect", [False, True])
@pytest.mark.parametrize(("name", "a", "b"), PROTECTED_CASES)
def test_release_leaves_empty_tables(name: str, a: str, b: str, protect: bool) -> None:
    plan = plan_for(topo(name), RID, a, b, route(name, a, b, protect), 10 * G)
    tables = installed(name, plan)
    assert not tables.is_empty()
    steps = plan_steps(plan, None)
    check_phases(steps)
    assert {s.kind for s in steps} <= {StepKind.DELETE_FLOW, StepKind.DELETE_GROUP, StepKind.DELETE_METER,
                                       StepKind.BARRIER}
    first = barrier_phases(steps)[0]
    assert first[0].spec.role == INGRESS  # type: ignore[union-attr]  # traffic stops at the edge first
    tables.apply_all(steps)
    assert tables.is_empty()
    assert delivered(tables, a, b) == (None, (topo(name).dtns[a].switch,))


# --- protection --------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "a", "b"), PROTECTED_CASES)
def test_protected_uses_the_primary_while_it_works(name: str, a: str, b: str) -> None:
    r = route(name, a, b, protect=True)
    assert r.backup is not None
    tables = installed(name, plan_for(topo(name), RID, a, b, r, 10 * G))
    for down in [(), *[(link,) for link in r.backup.links]]:
        assert delivered(tables, a, b, down) == (b, r.primary.switches)
        assert delivered(tables, b, a, down) == (a, r.primary.switches[::-1])


@pytest.mark.parametrize(("name", "a", "b"), PROTECTED_CASES)
def test_protected_survives_any_single_primary_link_failure(name: str, a: str, b: str) -> None:
    r = route(name, a, b, protect=True)
    assert r.backup is not None
    tables = installed(name, plan_for(topo(name), RID, a, b, r, 10 * G))
    p, q = r.primary.switches, r.backup.switches
    for k, link in enumerate(r.primary.links):
        assert delivered(tables, a, b, [link]) == (b, crankback_switches(p, q, k)), link
        back = len(r.primary.links) - 1 - k  # the same link, counted from B
        assert delivered(tables, b, a, [link]) == (a, crankback_switches(p[::-1], q[::-1], back)), link


@pytest.mark.parametrize(("name", "a", "b"), PROTECTED_CASES)
def test_protected_drops_without_loops_when_primary_and_backup_both_fail(name: str, a: str, b: str) -> None:
    r = route(name, a, b, protect=True)
    assert r.backup is not None
    tables = installed(name, plan_for(topo(name), RID, a, b, r, 10 * G))
    for down in itertools.product(r.primary.links, r.backup.links):
        for src, dst in ((a, b), (b, a)):
            got = send(tables, src, dst, down)
            assert got.outcome in (DROPPED, LOST), (down, src, got)


def test_a_backup_through_a_primary_switch_is_covered() -> None:
    r = route("sc16", "ucsd-dtn1", "chicago-dtn1", protect=True)
    assert r.backup is not None
    assert set(r.primary.switches[1:-1]) & set(r.backup.switches[1:-1])  # scinet on both


def test_simulator_catches_loops_and_plan_mistakes() -> None:
    """The simulator's verdicts the tests above rely on can come out the other way."""
    t = topo("ring8")
    cookie = reservation_cookie(RID)
    match = functools.partial(Match, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.5")

    def flow(switch: str, in_port: int, **action: int) -> FlowSpec:
        return FlowSpec(switch=switch, dpid=t.switches[switch].dpid, priority=PRIORITY, cookie=cookie,
                        match=match(in_port=in_port), **action)

    looping = [flow("s1", 3, output=1), *(flow(f"s{i}", 2, output=1) for i in range(1, 9))]
    tables = FlowTables(t)
    tables.install(FlowPlan(RID, cookie, "dtn1", "dtn5", tuple(looping)))
    assert send(tables, "dtn1", "dtn5").outcome == LOOP
    assert send(tables, "dtn1", "dtn5", ["s4-s5"]).outcome == LOST
    hairpin = FlowTables(t)
    hairpin.install(FlowPlan(RID, cookie, "dtn1", "dtn5", (flow("s1", 3, output=3),)))
    assert send(hairpin, "dtn1", "dtn5").outcome == DROPPED  # output to in_port needs IN_PORT
    with pytest.raises(TableError):
        FlowTables(t).apply(Step(StepKind.ADD_FLOW, ("s1",), flow("s1", 3, group_id=7)))
    with pytest.raises(TableError):
        FlowTables(t).apply(Step(StepKind.ADD_FLOW, ("s1",), flow("s1", 3, output=9)))
    with pytest.raises(TableError):
        FlowTables(t).apply(Step(StepKind.ADD_FLOW, ("s1",), dataclasses.replace(flow("s1", 3, output=1), dpid=99)))
    with pytest.raises(ValueError, match="uses a group not in the plan"):
        FlowPlan(RID, cookie, "dtn1", "dtn5", (flow("s1", 3, group_id=7),))


# --- moves -------------------------------------------------------------------------------


MOVE_PAIRS = {
    "ring8": [("dtn1", "dtn4"), ("dtn2", "dtn7"), ("dtn3", "dtn4")],
    "sc16": [("ucsd-dtn1", "chicago-dtn1"), ("caltech-a-dtn1", "starlight-dtn1"), ("dell-dtn1", "umich-dtn1"),
             ("2crsi-dtn1", "miami-dtn1")],
}


@functools.cache
def path_pool(name: str, a: str, b: str) -> tuple[Path, ...]:
    """Loop-free paths from a to b: the first alternatives and the protected route's two."""
    r = route(name, a, b, protect=True)
    return tuple(dict.fromkeys([*alternatives(name, a, b), r.primary, r.backup]))  # type: ignore[list-item]


def draw_route(data: st.DataObject, paths: tuple[Path, ...]) -> Route:
    primary = data.draw(st.sampled_from(paths))
    disjoint = [p for p in paths if not set(p.links) & set(primary.links)]
    if disjoint and data.draw(st.booleans()):
        return Route(primary, data.draw(st.sampled_from(disjoint)))
    return Route(primary)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_move_is_make_before_break_in_any_order_the_barriers_allow(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(MOVE_PAIRS)))
    a, b = data.draw(st.sampled_from(MOVE_PAIRS[name]))
    paths = path_pool(name, a, b)
    old_route, new_route = draw_route(data, paths), draw_route(data, paths)
    old_bw, new_bw = (data.draw(st.sampled_from([10 * G, 40 * G])) for _ in range(2))
    t = topo(name)
    ids = IdAllocator()
    old = plan_for(t, RID, a, b, old_route, old_bw, ids)
    new = plan_for(t, RID, a, b, new_route, new_bw, ids)
    tables = installed(name, old)
    steps = plan_steps(old, new)
    check_phases(steps)
    if old_route != new_route:
        assert any(s.kind is StepKind.BARRIER for s in steps)
    # Between barriers a switch (or several switches) may apply messages in any order.
    for phase in barrier_phases(steps):
        for step in data.draw(st.permutations(phase)):
            tables.apply(step)
            assert delivered(tables, a, b)[0] == b, f"A->B lost after {step.describe()}"
            assert delivered(tables, b, a)[0] == a, f"B->A lost after {step.describe()}"
    assert tables.snapshot() == installed(name, new).snapshot()
    assert delivered(tables, a, b) == (b, new_route.primary.switches)
    if new_route.backup is not None:
        assert delivered(tables, a, b, [new_route.primary.links[-1]])[0] == b
    ids.retain(new)
    for switch in t.switches:
        assert held_ids(ids, switch, "meter") == {m.meter_id for m in new.meters_on(switch)}
        assert held_ids(ids, switch, "group") == {g.group_id for g in new.groups_on(switch)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_moving_off_a_failed_link_keeps_protected_traffic_flowing(data: st.DataObject) -> None:
    """The advisor's case: a primary link is down, traffic runs over crankback and backup, and
    the reservation moves to a route (and backup) that avoids the failed link."""
    name = data.draw(st.sampled_from(sorted(MOVE_PAIRS)))
    a, b = data.draw(st.sampled_from(MOVE_PAIRS[name]))
    paths = path_pool(name, a, b)
    pairs = [(p, q) for p in paths for q in paths if not set(p.links) & set(q.links)]
    old_route = Route(*data.draw(st.sampled_from(pairs)))
    primary = old_route.primary
    down = [data.draw(st.sampled_from(primary.links))]
    new_route = draw_route(data, tuple(p for p in paths if down[0] not in p.links))
    t = topo(name)
    ids = IdAllocator()
    old = plan_for(t, RID, a, b, old_route, 10 * G, ids)
    new = plan_for(t, RID, a, b, new_route, 10 * G, ids)
    tables = installed(name, old)
    for phase in barrier_phases(plan_steps(old, new)):
        for step in data.draw(st.permutations(phase)):
            tables.apply(step)
            assert delivered(tables, a, b, down)[0] == b, f"A->B lost after {step.describe()}"
            assert delivered(tables, b, a, down)[0] == a, f"B->A lost after {step.describe()}"
    assert delivered(tables, a, b, down) == (b, new_route.primary.switches)


def tangle() -> Topology:
    """Six switches where two routes from ha to hb cross the same two links in opposite orders:
    old sa-vp-v-up-u-sb, new sa-up-u-vp-v-sb (v is entered from vp and u from up on both)."""
    pairs = [("sa", "vp"), ("vp", "v"), ("v", "up"), ("up", "u"), ("u", "sb"), ("sa", "up"), ("u", "vp"), ("v", "sb")]
    names = ["sa", "vp", "v", "up", "u", "sb"]
    ports = dict.fromkeys(names, 0)
    links = []
    for a, b in pairs:
        ports[a] += 1
        ports[b] += 1
        links.append({"a": a, "a_port": ports[a], "b": b, "b_port": ports[b], "capacity": "100G"})
    data = {
        "name": "tangle",
        "switches": [{"name": n, "dpid": i + 1, "ports": ["1-10"]} for i, n in enumerate(names)],
        "links": links,
        "dtns": [{"name": "ha", "switch": "sa", "port": 9, "ipv4": "10.9.0.1", "mac": "02:09:00:00:00:01",
                  "nic_speed": "100G"},
                 {"name": "hb", "switch": "sb", "port": 9, "ipv4": "10.9.0.2", "mac": "02:09:00:00:00:02",
                  "nic_speed": "100G"}],
    }
    return Topology(parse_topology_spec(data, "tangle"))


def path_through(t: Topology, a: str, b: str, switches: list[str]) -> Path:
    up, _ = t.access(a)
    _, down = t.access(b)
    inner = [t.adjacency[u][v][0] for u, v in itertools.pairwise(switches)]
    directions = (up, *inner, down)
    return Path(a, b, directions, min(d.capacity for d in directions), up.id)


def test_changes_go_downstream_first_where_old_and_new_routes_cross() -> None:
    t = tangle()
    old_path = path_through(t, "ha", "hb", ["sa", "vp", "v", "up", "u", "sb"])
    new_path = path_through(t, "ha", "hb", ["sa", "up", "u", "vp", "v", "sb"])
    old = plan_for(t, RID, "ha", "hb", Route(old_path), 10 * G)
    new = plan_for(t, RID, "ha", "hb", Route(new_path), 10 * G)
    steps = plan_steps(old, new)
    check_phases(steps)
    changed = [s for s in steps if s.kind is StepKind.MODIFY_FLOW and s.spec.role != INGRESS]  # type: ignore
    for eth_type in (0x0800, 0x0806):  # IPv4 and its ARP twins change in the same downstream-first order
        assert [(s.switch, s.spec.direction) for s in changed  # type: ignore
                if s.spec.direction == FORWARD and s.spec.match.eth_type == eth_type] == [  # type: ignore
            ("v", FORWARD), ("u", FORWARD)]
    phases = barrier_phases(steps)
    for i, phase in enumerate(phases):  # every order within a barrier group keeps traffic flowing
        arp_steps = [s for s in phase if isinstance(s.spec, FlowSpec) and s.spec.match.eth_type == 0x0806]
        ipv4_steps = [s for s in phase if s not in arp_steps]
        # IPv4 and ARP flows never touch each other's packets: each kind's orders are checked in full
        for eth_type, part, others in ((0x0800, ipv4_steps, arp_steps), (0x0806, arp_steps, ipv4_steps)):
            for order in itertools.permutations(part):
                tables = FlowTables(t)
                tables.install(old)
                tables.apply_all(s for p in phases[:i] for s in p)
                tables.apply_all(others)
                for step in order:
                    tables.apply(step)
                    assert delivered(tables, "ha", "hb", eth_type=eth_type)[0] == "hb", step.describe()
                    assert delivered(tables, "hb", "ha", eth_type=eth_type)[0] == "ha", step.describe()
    assert delivered(tables, "ha", "hb") == ("hb", new_path.switches)
    # Changing u before v (upstream first) would loop the traffic still on the old route.
    tables = FlowTables(t)
    tables.install(old)
    tables.apply_all(s for s in steps if s.kind is StepKind.ADD_FLOW and s.spec.role != INGRESS)  # type: ignore
    tables.apply(changed[[s.switch for s in changed].index("u")])
    assert send(tables, "ha", "hb").outcome == LOOP


def test_unchanged_plan_gives_no_steps() -> None:
    r = route("sc16", "ucsd-dtn1", "chicago-dtn1", protect=True)
    plan = plan_for(topo("sc16"), RID, "ucsd-dtn1", "chicago-dtn1", r, 10 * G)
    again = plan_for(topo("sc16"), RID, "ucsd-dtn1", "chicago-dtn1", r, 10 * G)
    assert plan == again and hash(plan) == hash(again)
    assert plan_steps(plan, again) == []


def test_bandwidth_change_only_modifies_the_meters() -> None:
    r = route("ring8", "dtn1", "dtn4", protect=True)
    ids = IdAllocator()
    old = plan_for(topo("ring8"), RID, "dtn1", "dtn4", r, 10 * G, ids)
    new = plan_for(topo("ring8"), RID, "dtn1", "dtn4", r, 40 * G, ids)
    steps = plan_steps(old, new)
    assert [s.kind for s in steps] == [StepKind.MODIFY_METER, StepKind.MODIFY_METER, StepKind.BARRIER]
    assert {(s.spec.switch, s.spec.rate_bps) for s in steps[:2]} == {("s1", 40 * G), ("s4", 2 * G)}  # type: ignore
    tables = installed("ring8", old)
    tables.apply_all(steps)
    assert tables.snapshot() == installed("ring8", new).snapshot()


def test_move_refuses_one_group_id_with_different_buckets() -> None:
    r = route("ring8", "dtn1", "dtn4", protect=True)
    plan = plan_for(topo("ring8"), RID, "dtn1", "dtn4", r, 10 * G)
    group = plan.groups[0]
    swapped = dataclasses.replace(group, buckets=group.buckets[::-1])
    other = dataclasses.replace(plan, groups=(swapped, *plan.groups[1:]))
    with pytest.raises(ValueError, match="different buckets"):
        plan_steps(plan, other)


# --- several reservations ----------------------------------------------------------------


COEXIST = {
    "ring8": [("dtn1", "dtn4"), ("dtn2", "dtn5"), ("dtn8", "dtn3")],
    "sc16": [("caltech-a-dtn1", "starlight-dtn1"), ("caltech-a-dtn2", "starlight-dtn2"),
             ("ucsd-dtn1", "chicago-dtn1")],
}


@pytest.mark.parametrize("limits", [{}, {"max_meter_id": 6, "max_group_id": 8}])
@pytest.mark.parametrize("name", sorted(COEXIST))
def test_reservations_on_overlapping_paths_coexist(name: str, limits: dict) -> None:
    t = topo(name)
    ids = IdAllocator(**limits)
    pairs = COEXIST[name]
    plans = [plan_for(t, rid(i), a, b, route(name, a, b, protect=True), 10 * G, ids) for i, (a, b) in enumerate(pairs)]
    assert len({p.cookie for p in plans}) == len(plans)
    assert len(set.intersection(*(set(p.switches) for p in plans))) >= 1
    for kind in ("meters", "groups"):
        keys = [spec.key for p in plans for spec in getattr(p, kind)]
        assert len(keys) == len(set(keys)), f"{kind} ids collide"
    tables = installed(name, *plans)
    owner = {p.cookie: p for p in plans}
    for table in tables.tables.values():
        for f in table.flows.values():
            assert f in owner[f.cookie].flows
    for a, b in pairs:
        r = route(name, a, b, protect=True)
        assert delivered(tables, a, b) == (b, r.primary.switches)
        assert delivered(tables, a, b, [r.primary.links[0]])[0] == b
    tables.remove(plans[0])
    ids.release(plans[0].reservation_id)
    assert tables.snapshot() == installed(name, *plans[1:]).snapshot()
    for a, b in pairs[1:]:
        r = route(name, a, b, protect=True)
        assert delivered(tables, a, b) == (b, r.primary.switches)
        assert delivered(tables, b, a) == (a, r.primary.switches[::-1])
        assert delivered(tables, a, b, [r.primary.links[-1]])[0] == b
    assert delivered(tables, *pairs[0])[0] is None


def test_opposite_reservations_each_carry_their_booked_direction() -> None:
    t = topo("ring8")
    ids = IdAllocator()
    there, back = alternatives("ring8", "dtn1", "dtn4")[0], alternatives("ring8", "dtn4", "dtn1")[1]
    assert set(there.links) != set(back.links)
    one = plan_for(t, rid(1), "dtn1", "dtn4", Route(there), 10 * G, ids)
    two = plan_for(t, rid(2), "dtn4", "dtn1", Route(back), 20 * G, ids)
    tables = installed("ring8", one, two)
    forward, reverse = send(tables, "dtn1", "dtn4"), send(tables, "dtn4", "dtn1")
    assert (forward.dtn, forward.switches) == ("dtn4", there.switches)
    assert [m.rate_bps for m in forward.meters] == [10 * G]
    assert (reverse.dtn, reverse.switches) == ("dtn1", back.switches)
    assert [m.rate_bps for m in reverse.meters] == [20 * G]
    tables.remove(two)
    reverse = send(tables, "dtn4", "dtn1")
    assert (reverse.dtn, reverse.switches) == ("dtn1", there.switches[::-1])  # the acks of `one`
    assert [m.rate_bps for m in reverse.meters] == [reverse_rate(10 * G)]


# --- ids, validation, helpers ------------------------------------------------------------


def test_id_allocator_is_stable_probes_on_collision_and_runs_out() -> None:
    ids = IdAllocator(max_meter_id=3, max_group_id=3)
    first = ids.meter_id("s1", rid(1), FORWARD)
    assert ids.meter_id("s1", rid(1), FORWARD) == first
    assert IdAllocator(max_meter_id=3).meter_id("s1", rid(1), FORWARD) == first  # deterministic
    got = {first, ids.meter_id("s1", rid(2), FORWARD), ids.meter_id("s1", rid(3), REVERSE)}
    assert got == {1, 2, 3}
    with pytest.raises(NoCapacity, match="s1 has no free meter id"):
        ids.meter_id("s1", rid(4), FORWARD)
    assert ids.meter_id("s2", rid(4), FORWARD) in (1, 2, 3)  # per switch
    ids.release(rid(2))
    assert ids.meter_id("s1", rid(4), FORWARD) not in {ids.meter_id("s1", rid(1), FORWARD),
                                                      ids.meter_id("s1", rid(3), REVERSE)}
    assert held_ids(ids, "s1", "meter") == {1, 2, 3}


def test_id_allocator_retain_and_adopt() -> None:
    t = topo("ring8")
    ids = IdAllocator()
    r1, r2 = alternatives("ring8", "dtn1", "dtn4")[:2]
    old = plan_for(t, RID, "dtn1", "dtn4", Route(r1, r2), 10 * G, ids)
    new = plan_for(t, RID, "dtn1", "dtn4", Route(r2, r1), 10 * G, ids)
    held = sum(len(held_ids(ids, s, "group")) for s in t.switches)
    assert held == len(old.groups) + len(new.groups)  # no shared buckets: both plans' groups held
    ids.retain(new)
    assert sum(len(held_ids(ids, s, "group")) for s in t.switches) == len(new.groups)
    fresh = IdAllocator()
    fresh.adopt(new)
    assert plan_for(t, RID, "dtn1", "dtn4", Route(r2, r1), 10 * G, fresh) == new
    clash = IdAllocator()
    theirs = plan_for(t, rid(9), "dtn1", "dtn4", Route(r2, r1), 10 * G, clash)
    with pytest.raises(ValueError, match="already held"):
        clash.adopt(dataclasses.replace(theirs, reservation_id=RID))


def test_plan_for_rejects_what_it_cannot_plan() -> None:
    t = topo("ring8")
    r = route("ring8", "dtn1", "dtn4", protect=True)
    for bad_id in ("nope", RID.upper()):
        with pytest.raises(InvalidArgument, match="reservation id"):
            plan_for(t, bad_id, "dtn1", "dtn4", r, 10 * G)
    for bad_bw in (0, -1, True, 1.5):
        with pytest.raises(InvalidArgument, match="bandwidth"):
            plan_for(t, RID, "dtn1", "dtn4", r, bad_bw)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="does not join"):
        plan_for(t, RID, "dtn1", "dtn5", r, 10 * G)
    with pytest.raises(InvalidArgument, match="shares link"):
        plan_for(t, RID, "dtn1", "dtn4", Route(r.primary, r.primary), 10 * G)
    same = route("sc16", "caltech-a-dtn1", "caltech-a-dtn2")
    with pytest.raises(InvalidArgument, match="no link a backup"):
        plan_for(topo("sc16"), RID, "caltech-a-dtn1", "caltech-a-dtn2", Route(same.primary, same.primary), 10 * G)


def test_plan_helpers_per_switch() -> None:
    plan = plan_for(topo("ring8"), RID, "dtn1", "dtn4", route("ring8", "dtn1", "dtn4", protect=True), 10 * G)
    parts = {s: plan.for_switch(s) for s in plan.switches}
    assert tuple(parts) == plan.switches == tuple(sorted(f"s{i}" for i in range(1, 9)))
    assert sum(len(p.flows) for p in parts.values()) == len(plan.flows)
    assert parts["s1"].meters == plan.meters_on("s1") and len(parts["s1"].meters) == 1
    assert parts["s2"].groups == plan.groups_on("s2") and len(parts["s2"].groups) == 2  # one per direction
    assert all(isinstance(g, GroupSpec) and g.type == "ff" and len(g.buckets) == 2 for g in plan.groups)
    crank = [g for g in plan.groups_on("s2") if g.buckets[1][1] == IN_PORT]
    assert len(crank) == 2
    assert isinstance(plan.meters[0], MeterSpec)
    assert len(plan.describe().splitlines()) == len(plan.flows) + len(plan.meters) + len(plan.groups)
    assert {plan} == {plan_for(topo("ring8"), RID, "dtn1", "dtn4", route("ring8", "dtn1", "dtn4", True), 10 * G)}
