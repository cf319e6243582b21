"""Rate-driven rerouting decided from measurements: synthetic per-second reports and link loads
against bookings, on ring8 (and a small mesh for rearrangements) with simulated flow tables."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import InvalidArgument, PermissionDenied
from sdn_app.core.ledger import Ledger
from sdn_app.core.rerouting.advisor import AfterMove, Health, RateAdvisor, Underperforming
from sdn_app.core.rerouting.congestion import LinkWatch
from sdn_app.core.rerouting.policy import ReroutePolicy
from sdn_app.core.reservation import Principal, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import load_topology_spec
from tests.flowtable import FlowTables, delivered
from tests.switched import RUCIO, G, active, confirm, measured_loads, own, switched_ring8

OTHER = Principal("fts", Role.SERVICE)
AGENT = Principal("dtn1-agent", Role.AGENT)
S2_S3 = "s2:1->s3:2"  # the clockwise direction dtn1 -> dtn3 takes
S3_S2 = "s3:2->s2:1"  # its acks come back this way

MESH = """
name: mesh4
switches:
  - {name: a, dpid: 1, ports: ["1-5"]}
  - {name: b, dpid: 2, ports: ["1-5"]}
  - {name: c, dpid: 3, ports: ["1-5"]}
  - {name: d, dpid: 4, ports: ["1-5"]}
links:
  - {name: a-b, a: a, a_port: 1, b: b, b_port: 1, capacity: 100G, latency_ms: 1, kind: core}
  - {name: a-c, a: a, a_port: 2, b: c, b_port: 1, capacity: 100G, latency_ms: 1, kind: core}
  - {name: c-b, a: c, a_port: 2, b: b, b_port: 2, capacity: 100G, latency_ms: 1, kind: core}
  - {name: a-d, a: a, a_port: 3, b: d, b_port: 1, capacity: 100G, latency_ms: 1, kind: core}
  - {name: d-b, a: d, a_port: 2, b: b, b_port: 3, capacity: 100G, latency_ms: 1, kind: core}
dtns:
  - {name: dtna, switch: a, port: 5, ipv4: 10.0.0.1, mac: "02:00:00:00:00:01", nic_speed: 400G}
  - {name: dtnb, switch: b, port: 5, ipv4: 10.0.0.2, mac: "02:00:00:00:00:02", nic_speed: 400G}
  - {name: dtnc, switch: c, port: 5, ipv4: 10.0.0.3, mac: "02:00:00:00:00:03", nic_speed: 400G}
  - {name: dtnd, switch: d, port: 5, ipv4: 10.0.0.4, mac: "02:00:00:00:00:04", nic_speed: 400G}
"""


@pytest.fixture
def env(tmp_path):
    return switched_ring8(tmp_path)


def tick(env, r, bps, measured: dict[str, float] | None = None, times=1, who=AGENT, health=None):
    """`times` seconds: link loads measured (when given), then one rate report of `r`."""
    now = None
    for _ in range(times):
        env.clock.advance(1)
        if measured is not None:
            env.book.observe_loads(measured_loads(env.topology, measured))
        now = env.book.report_rate(who, r.name, bps, health)
    return now


def path_of(env, r) -> tuple[str, ...]:
    return env.book.get(RUCIO, r.name).route.primary.switches


def test_the_advisor_counts_consecutive_low_reports():
    advisor = RateAdvisor(ReroutePolicy(threshold=0.8, consecutive=3))
    assert advisor.observe("r", 10 * G, 5 * G, 1) is None
    assert advisor.observe("r", 10 * G, 5 * G, 2) is None
    assert advisor.observe("r", 10 * G, 9 * G, 3) is None  # one good report breaks the run
    assert advisor.observe("r", 10 * G, 4 * G, 4) is None
    assert advisor.observe("r", 10 * G, 6 * G, 5) is None
    assert advisor.observe("r", 10 * G, 5 * G, 6) == Underperforming("r", 5 * G, 10 * G)
    advisor.moved("r", 6, 5 * G)
    assert advisor.observe("r", 10 * G, 9 * G, 7) is None
    assert advisor.observe("r", 10 * G, 10 * G, 8) is None
    assert advisor.observe("r", 10 * G, 11 * G, 9) == AfterMove("r", 5 * G, 10 * G, 10 * G)


@pytest.mark.parametrize("field, value, message", [
    ("threshold", 1.5, "threshold"), ("consecutive", 0, "consecutive"), ("clear_at", 0.95, "below congested_at"),
    ("hold_down", -1, "hold_down"), ("move_budget", 0, "move_budget"), ("congested_at", math.nan, "congested_at"),
    ("unowned_margin", 0, "unowned_margin"), ("budget_window", math.inf, "budget_window")])
def test_every_threshold_is_checked_naming_it(field, value, message):
    with pytest.raises(InvalidArgument, match=message):
        ReroutePolicy(**{field: value})


def test_hysteresis_a_direction_is_congested_above_one_threshold_and_clear_below_the_other(env):
    watch = LinkWatch(env.topology, ReroutePolicy(congested_at=0.9, clear_at=0.7))
    seen = []
    for t, load in enumerate([85, 92, 80, 75, 88, 69, 85, 89]):
        changed = watch.observe(measured_loads(env.topology, {S2_S3: load * G}), {}, float(t))
        seen.append((watch.congested(S2_S3), [c.congested for c in changed]))
    assert seen == [(False, []), (True, [True]), (True, []), (True, []), (True, []), (False, [False]),
                    (False, []), (False, [])]
    assert watch.clear_for("s2-s3", 7.0) == 2.0 and watch.clear_for("s1-s2", 7.0) == 7.0


def test_a_full_link_of_the_controllers_own_traffic_is_not_congested(env):
    watch = LinkWatch(env.topology, ReroutePolicy())
    watch.observe(measured_loads(env.topology, {S2_S3: 97 * G}), {S2_S3: 95 * G}, 1.0)
    assert not watch.congested(S2_S3)
    watch.observe(measured_loads(env.topology, {S2_S3: 97 * G}), {S2_S3: 40 * G}, 2.0)
    assert watch.congested(S2_S3)
    assert "s2:1->s3:2 at 97% of 100G, 57G not the controller's" in watch.condition(S2_S3).describe()


def test_a_host_limited_transfer_is_never_moved_and_told_once_with_the_evidence(env):
    r = active(env, bandwidth=25 * G)
    env.book.take_events()
    health = Health(retransmits=0, rtt_ms=3.2, cpu_percent=100.0)
    now = tick(env, r, 12 * G, {"s1:1->s2:2": 12 * G, S2_S3: 12 * G}, times=3, health=health)
    assert now.state is State.ACTIVE and env.book.take_changes() == []
    assert "limited by the hosts: path links at most 12% loaded" in now.reason
    assert "no retransmits, RTT 3.2 ms, sender CPU 100% of a core" in now.reason
    assert len(env.book.take_events()) == 1
    tick(env, r, 12 * G, {"s1:1->s2:2": 12 * G, S2_S3: 12 * G}, times=12, health=health)
    assert env.book.take_events() == [] and env.book.take_changes() == []  # told once, never moved
    assert path_of(env, r) == ("s1", "s2", "s3")


def test_without_measurements_a_low_rate_moves_nothing(env):
    r = active(env, bandwidth=25 * G)
    now = tick(env, r, 5 * G, times=3)
    assert "not moved: no load measured on" in now.reason and env.book.take_changes() == []


@pytest.mark.parametrize("congested", [S2_S3, S3_S2], ids=["forward", "reverse (acks)"])
def test_congestion_on_the_path_either_way_moves_it_off_that_link_only(env, congested):
    r = active(env, bandwidth=25 * G)
    now = tick(env, r, 25 * G, {congested: 40 * G}, times=3)  # loaded, not congested: stays
    assert env.book.take_changes() == []
    now = tick(env, r, 8 * G, {congested: 98 * G}, times=2)
    assert now.state is State.ACTIVE
    now = tick(env, r, 8 * G, {congested: 98 * G})
    assert now.state is State.MOVING
    assert now.reason.startswith("congested: achieved 8G of 25G booked for 3 reports; congested: "
                                 f"{congested} at 98% of 100G")
    assert "measured headroom for 25G" in now.reason
    confirm(env)
    assert delivered(env.tables, "dtn1", "dtn3")[1] == ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
    assert env.book.get(RUCIO, r.name).request.exclude == ()  # the service's own constraints stay
    env.book.take_events()
    after = tick(env, r, 25 * G, {congested: 98 * G}, times=3)
    assert after.reason == "after the move: 25G achieved (was 8G, booked 25G)"


def test_never_onto_a_congested_or_measured_full_path(env):
    r = active(env, bandwidth=25 * G)
    # The only other way round: s8 -> s7 measured at 85 % (not congested, but 15G of headroom < 25G).
    now = tick(env, r, 8 * G, {S2_S3: 98 * G, "s8:2->s7:1": 85 * G}, times=3)
    assert now.state is State.ACTIVE and env.book.take_changes() == []
    assert "not moved: no path avoiding s2-s3 has measured headroom" in now.reason
    env.book.take_events()
    now = tick(env, r, 8 * G, {S2_S3: 98 * G, "s8:2->s7:1": 99 * G}, times=3)  # now congested too
    assert env.book.take_changes() == [] and env.book.take_events() == []  # same verdict: told once
    # The way round measures clear again: the move happens.
    now = tick(env, r, 8 * G, {S2_S3: 98 * G, "s8:2->s7:1": 10 * G}, times=3)
    assert now.state is State.MOVING


def test_hold_down_budget_and_no_straight_back(env):
    policy = ReroutePolicy(hold_down=10, move_budget=2, budget_window=300, clear_for=20)
    env.book = ReservationBook(env.topology, env.ledger, env.clock, provisioning=True, advisor=RateAdvisor(policy))
    r = active(env, bandwidth=25 * G)
    tick(env, r, 8 * G, {S2_S3: 98 * G}, times=3)
    confirm(env)
    assert path_of(env, r)[1] == "s8"
    # Congestion moves to the new path at once: held down, and s2-s3 (left for congestion, still
    # congested) is barred anyway.
    way_round = {S2_S3: 98 * G, "s8:2->s7:1": 98 * G}
    assert tick(env, r, 8 * G, way_round, times=3).reason.startswith("after the move: 8G achieved")
    now = tick(env, r, 8 * G, way_round, times=3)
    assert "held down" in now.reason and env.book.take_changes() == []
    # s2-s3 measures clear, but not yet for clear_for: not straight back.
    env.clock.advance(10)
    back_clear = {"s8:2->s7:1": 98 * G}
    now = tick(env, r, 8 * G, back_clear, times=3)
    assert "no path avoiding s2-s3, s7-s8 has measured headroom" in now.reason
    assert env.book.take_changes() == []
    now = tick(env, r, 8 * G, back_clear, times=18)
    assert now.state is State.MOVING and path_of(env, r) == ("s1", "s2", "s3")
    confirm(env)
    # Two moves in the window: the budget is spent, even for a new, real congestion.
    env.clock.advance(30)
    now = tick(env, r, 8 * G, {S2_S3: 98 * G}, times=6)
    assert "move budget spent: 2 moves within 300 s (at most 2)" in now.reason
    # A failed link is not counted: the reservation still moves off it.
    env.book.set_link_state("s2-s3", up=False)
    assert env.book.get(RUCIO, r.name).state is State.MOVING


def rearranged(env):
    """On the mesh: c->b and d->b carry 50G each, R (60G) on a->b is congested: only moving one of
    the others makes room. Returns (s, t, r) after R's third low report (the rearrangement announced)."""
    s = active(env, "dtnc", "dtnb", bandwidth=50 * G)
    t = active(env, "dtnd", "dtnb", bandwidth=50 * G)
    r = active(env, "dtna", "dtnb", bandwidth=60 * G)
    for reporter in (s, t):
        env.book.report_rate(RUCIO, reporter.name, 50 * G)
    env.book.take_events()
    tick(env, r, 10 * G, {"a:1->b:1": 99 * G, "c:2->b:2": 50 * G, "d:2->b:3": 50 * G}, times=3)
    return s, t, r


def test_a_rearrangement_makes_room_in_an_order_that_never_overfills_a_link(tmp_path):
    env = mesh(tmp_path)
    s, t, r = rearranged(env)
    now = env.book.get(RUCIO, r.name)
    assert "rearranging to make room: moving reservations/" in now.reason
    changes = env.book.take_changes()
    assert [c.reservation_id for c in own(changes)] == [s.id]  # only the displaced one, first
    assert path_of(env, s) == ("c", "a", "d", "b") and path_of(env, r) == ("a", "b")
    moved = env.book.get(RUCIO, s.name)
    assert moved.reason.startswith(f"rearrangement for {r.name}: moving to")
    for change in changes:
        env.tables.apply_all(change.steps)
        env.book.provisioned(change.reservation_id, None, change.token)
    confirm(env)  # now the relieved one moves
    assert path_of(env, r) == ("a", "c", "b")
    assert delivered(env.tables, "dtna", "dtnb")[1] == ("a", "c", "b")
    assert env.book.get(RUCIO, t.name).route.primary.switches == ("d", "b")
    for d in env.topology.directions.values():
        assert env.book.booked_now(d.id) <= d.capacity


def test_reports_while_moving_or_for_other_owners_or_garbage_change_nothing(env):
    r = active(env)
    env.book.set_link_state("s2-s3", up=False)
    assert tick(env, r, 0, times=5).state is State.MOVING  # its rate says nothing while it moves
    confirm(env)
    with pytest.raises(PermissionDenied):
        env.book.report_rate(OTHER, r.name, 1 * G)
    for bad in (-1, math.nan, math.inf, "10G", True):
        with pytest.raises(InvalidArgument, match="achieved_bps"):
            env.book.report_rate(AGENT, r.name, bad)
    assert tick(env, r, 1 * G, times=2, who=RUCIO).state is State.ACTIVE  # the owner may report too


def mesh(tmp_path):
    path = tmp_path / "mesh4.yaml"
    path.write_text(MESH)
    topology = Topology(load_topology_spec(path))
    clock = FakeClock()
    ledger = Ledger(topology.capacities(), tmp_path / "m.db", clock)
    book = ReservationBook(topology, ledger, clock, provisioning=True)
    return SimpleNamespace(topology=topology, clock=clock, ledger=ledger, book=book, tables=FlowTables(topology))


def test_a_verdict_is_judged_again_when_the_measurements_catch_up(env):
    """The switches' counters show congestion a poll after the rate fell: the next report moves it."""
    r = active(env, bandwidth=25 * G)
    now = tick(env, r, 8 * G, {S2_S3: 30 * G}, times=3)
    assert "limited by the hosts" in now.reason and env.book.take_changes() == []
    now = tick(env, r, 8 * G, {S2_S3: 99 * G})
    assert now.state is State.MOVING and now.reason.startswith("congested: ")


def test_the_load_feed_gives_the_book_the_switches_loads_and_logs_each_verdict(env, caplog):
    from tsdn.controller import LoadFeed

    measured = {S2_S3: 20 * G}
    feed = LoadFeed(env.book, lambda: measured_loads(env.topology, measured))
    with caplog.at_level("INFO", logger="tsdn.controller"):
        feed.tick()
        assert not env.book.rerouter.watch.congested(S2_S3) and feed.next_deadline() == env.clock.now() + 1
        measured[S2_S3] = 99 * G
        feed.tick()
        assert env.book.rerouter.watch.congested(S2_S3)
        measured[S2_S3] = 10 * G
        feed.tick()
    assert [r.getMessage() for r in caplog.records] == [
        "link direction congested: s2:1->s3:2 at 99% of 100G, 99G not the controller's",
        "link direction clear again: s2:1->s3:2 at 10% of 100G, 10G not the controller's"]


def test_another_dtns_congested_access_link_does_not_keep_a_reservation_on_a_congested_link(env):
    """A DTN's access link judged congested is no link a path can avoid: it must not make every other
    move impossible (it was put in the move's exclusions, which path finding refused as no link)."""
    r = active(env, bandwidth=25 * G)
    dtn5_down = env.topology.access("dtn5")[1].id  # s5 -> dtn5: another DTN's traffic, not r's
    now = tick(env, r, 8 * G, {S2_S3: 98 * G, dtn5_down: 99 * G}, times=3)
    assert env.book.rerouter.watch.congested(dtn5_down)
    assert "dtn5" not in env.book.rerouter.watch.congested_links()
    assert now.state is State.MOVING, now.reason
    assert now.reason.startswith(f"congested: achieved 8G of 25G booked for 3 reports; congested: {S2_S3} at 98%")


def test_a_transfers_own_traffic_counted_over_a_shifted_second_is_not_another_tenants(env):
    """A DTN link booked to its last bit: the switches' second caught more of the transfer than its last
    report says (its rate moved between two reports). That is no congestion."""
    r = active(env, "dtn1", "dtn3", bandwidth=100 * G)
    up = env.topology.access("dtn1")[0].id  # dtn1 -> s1, its 100G NIC
    tick(env, r, 97 * G, {up: 97 * G, "s1:1->s2:2": 97 * G, S2_S3: 97 * G})
    tick(env, r, 86 * G, {up: 97 * G, "s1:1->s2:2": 97 * G, S2_S3: 97 * G}, times=2)  # counted: the faster one
    assert not env.book.rerouter.watch.congested(up), env.book.rerouter.watch.condition(up).describe()
    tick(env, r, 86 * G, {up: 99 * G, "s1:1->s2:2": 99 * G, S2_S3: 99 * G})  # 99G is more than 2 x 86G reports
    assert env.book.rerouter.watch.congested(up)
