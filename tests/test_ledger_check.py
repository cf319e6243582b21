"""A loaded ledger is checked against the topology it is loaded over.

Reservations are booked on ring8 in a real SQLite file, then the book is opened again over a
topology file written with a link shrunk or removed, or a DTN removed (what an operator does
between two runs). Nothing that no longer fits is kept silently: each such reservation is moved
to a route that fits, or cut to what its path has left (DEGRADED), or FAILED, each with a reason
naming the link, its capacity and what was booked; after loading no link direction is booked
beyond its capacity at any instant from now on. A controller counts them on /metrics and logs
them at WARNING.

Ring8: dtn1 -> dtn3 goes s1 > s2 > s3 (the short way); the long way is s1 > s8 > ... > s4 > s3.
"""

from __future__ import annotations

import copy
import logging
import math
import urllib.request
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from northbound.client import TsdnClient
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.ledger_repair import repair_counts
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Repair, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import parse_topology_spec
from topologies import builtin_topology

G = 10**9
HOUR = 3600.0
RUCIO = Principal("rucio", Role.SERVICE)
NOC = Principal("noc", Role.ADMIN)
RING8_DATA = yaml.safe_load(Path(builtin_topology("ring8")).read_text())
RING8 = Topology(parse_topology_spec(RING8_DATA, "ring8"))
LONG_WAY = "dtn1 > s1 > s8 > s7 > s6 > s5 > s4 > s3 > dtn3"


def ring8_data(capacity: dict[str, str] | None = None, nic: dict[str, str] | None = None,
               drop_links: tuple[str, ...] = (), drop_dtns: tuple[str, ...] = ()) -> dict:
    """ring8 with some links' capacity or DTNs' NIC speed changed, some links or DTNs removed."""
    data = copy.deepcopy(RING8_DATA)
    data["links"] = [link for link in data["links"] if link["name"] not in drop_links]
    for link in data["links"]:
        link["capacity"] = (capacity or {}).get(link["name"], link["capacity"])
    data["dtns"] = [dtn for dtn in data["dtns"] if dtn["name"] not in drop_dtns]
    for dtn in data["dtns"]:
        dtn["nic_speed"] = (nic or {}).get(dtn["name"], dtn["nic_speed"])
    return data


def topology_file(folder: Path, name: str = "changed", **changes) -> Path:
    """Write ring8 with `changes` (see `ring8_data`) as a topology file, as an operator would."""
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(ring8_data(**changes), sort_keys=False))
    return path


class State8:
    """A state file, a fake clock, and books opened over it one after the other (restarts)."""

    def __init__(self, db: Path):
        self.db = db
        self.clock = FakeClock()
        self.book: ReservationBook | None = None

    def open(self, topology: Topology = RING8, provisioning: bool = False) -> ReservationBook:
        if self.book is not None:
            self.book.ledger.close()
        self.book = ReservationBook(topology, Ledger(topology.capacities(), self.db, self.clock), self.clock,
                                    provisioning=provisioning)
        return self.book

    def create(self, src: str, dst: str, bandwidth: int, start: float | None = None, end: float = math.inf,
               **extra):
        assert self.book is not None
        now = self.clock.now()
        return self.book.create(RUCIO, PathRequest(src, dst, bandwidth, now if start is None else start, end,
                                                   **extra))

    def close(self) -> None:
        if self.book is not None:
            self.book.ledger.close()


@pytest.fixture
def state(tmp_path: Path):
    s = State8(tmp_path / "tsdn.db")
    yield s
    s.close()


def same(a, b) -> bool:
    """The same reservation, path and all (a path's link objects carry the topology's capacity)."""
    def key(r):
        return (r.id, r.state, r.request, r.reason, r.updated, r.route.direction_ids if r.route else None)
    return key(a) == key(b)


def assert_within_capacity(book: ReservationBook) -> None:
    """By brute force: at every instant from now on, every direction carries at most its
    capacity; every booking is on directions the topology has and belongs to a live reservation
    whose route and bandwidth it matches."""
    now = book.clock.now()
    capacities = book.topology.capacities()
    bookings = book.ledger.bookings()
    for booking in bookings:
        assert set(booking.directions) <= set(capacities), booking
        owner = book.get(NOC, booking.id)
        assert not owner.state.is_final and owner.route is not None
        assert owner.request.bandwidth == booking.bandwidth
        assert set(owner.route.direction_ids) == set(booking.directions)
    for direction, capacity in capacities.items():
        on = [b for b in bookings if direction in b.directions]
        for t in {now} | {b.start for b in on if b.start >= now}:
            used = sum(b.bandwidth for b in on if b.start <= t < b.end)
            assert used <= capacity, f"{direction}: {used} booked at {t} on {capacity}"


# -- a link shrinks --------------------------------------------------------------------------------


def test_a_shrunk_link_moves_the_reservation_to_a_route_that_fits(state, tmp_path):
    state.open()
    booked = state.create("dtn1", "dtn3", 50 * G)
    assert booked.route.primary.links == ("s1-s2", "s2-s3")
    shrunk = Topology.load(topology_file(tmp_path, capacity={"s1-s2": "10G"}))

    book = state.open(shrunk)
    moved = book.get(RUCIO, booked.name)
    assert moved.state is State.ACTIVE and moved.request.bandwidth == 50 * G
    assert moved.route.primary.describe() == LONG_WAY
    assert moved.reason.startswith("at start-up: link s1-s2 (s1:1->s2:2) has 10G, 50G booked on it from ")
    assert moved.reason.endswith(f"until released: moving to {LONG_WAY}")
    assert book.repairs == [Repair(booked.name, "capacity", "rerouted", moved.reason)]
    assert repair_counts(book.repairs) == {("capacity", "rerouted"): 1}
    [event] = book.take_events()
    assert (event.previous, event.reservation) == (State.ACTIVE, moved)
    assert_within_capacity(book)

    again = state.open(shrunk)  # the move was stored: nothing to repair the next time
    assert again.repairs == [] and again.get(RUCIO, booked.name).route.primary.describe() == LONG_WAY


def test_50g_booked_on_a_link_shrunk_to_10g_with_no_other_route_is_degraded_to_what_fits(state, tmp_path):
    state.open()
    booked = state.create("dtn1", "dtn3", 50 * G)
    shrunk = Topology.load(topology_file(tmp_path, capacity={"s1-s2": "10G", "s8-s1": "10G"}))

    book = state.open(shrunk)
    cut = book.get(RUCIO, booked.name)
    assert cut.state is State.DEGRADED
    assert cut.request.bandwidth == 10 * G and book.ledger.get(booked.id).bandwidth == 10 * G
    assert cut.route.direction_ids == booked.route.direction_ids
    assert "link s1-s2 (s1:1->s2:2) has 10G, 50G booked on it" in cut.reason
    assert "cut from 50G to 10G, what its path has left for it; no other path has 50G free" in cut.reason
    assert book.repairs == [Repair(booked.name, "capacity", "degraded", cut.reason)]
    assert_within_capacity(book)
    assert book.ledger.overbooked() == []


def test_the_newest_reservation_gives_way_first(state, tmp_path):
    state.open()
    older = state.create("dtn1", "dtn3", 50 * G)
    state.clock.advance(1)
    newer = state.create("dtn1", "dtn3", 30 * G)
    book = state.open(Topology.load(topology_file(tmp_path, capacity={"s1-s2": "60G"})))
    assert same(book.get(RUCIO, older.name), older)  # untouched
    assert book.get(RUCIO, newer.name).route.primary.describe() == LONG_WAY
    assert [(r.reservation, r.action) for r in book.repairs] == [(newer.name, "rerouted")]
    assert_within_capacity(book)


def test_a_reservation_whose_path_has_nothing_left_fails_with_the_reason(state, tmp_path):
    state.open()
    older = state.create("dtn1", "dtn3", 10 * G)
    state.clock.advance(1)
    newer = state.create("dtn1", "dtn3", 50 * G)
    book = state.open(Topology.load(topology_file(tmp_path, capacity={"s1-s2": "10G", "s8-s1": "10G"})))
    failed = book.get(RUCIO, newer.name)
    assert failed.state is State.FAILED and newer.id not in book.ledger
    assert "link s1-s2 (s1:1->s2:2) has 10G, 60G booked on it" in failed.reason
    assert "its own has nothing left for it" in failed.reason
    assert book.get(RUCIO, older.name).state is State.ACTIVE
    assert repair_counts(book.repairs) == {("capacity", "failed"): 1}
    assert_within_capacity(book)


def test_a_file_two_controllers_overbooked_is_repaired_when_loaded(state, tmp_path):
    """What two controllers on one file did before it was locked: each admitted 100G on s2-s3
    against its own memory, 200G on a 100G link. A restart on that file no longer keeps it."""
    state.open()
    other = ReservationBook(RING8, Ledger(RING8.capacities(), state.db, state.clock), state.clock)
    try:
        first = state.create("dtn1", "dtn3", 100 * G)
        state.clock.advance(1)
        second = other.create(RUCIO, PathRequest("dtn2", "dtn4", 100 * G, state.clock.now(), math.inf))
    finally:
        other.ledger.close()
    assert set(first.route.primary.links) & set(second.route.primary.links) == {"s2-s3"}

    book = state.open()  # the same topology
    moved = book.get(RUCIO, second.name)
    assert moved.route.primary.describe() == "dtn2 > s2 > s1 > s8 > s7 > s6 > s5 > s4 > dtn4"
    assert "link s2-s3 (s2:1->s3:2) has 100G, 200G booked on it" in moved.reason
    assert same(book.get(RUCIO, first.name), first)
    assert_within_capacity(book)


def test_a_shrunk_nic_cuts_the_reservation_naming_the_access_link(state, tmp_path):
    state.open()
    booked = state.create("dtn1", "dtn3", 50 * G)
    book = state.open(Topology.load(topology_file(tmp_path, nic={"dtn1": "25G"})))
    cut = book.get(RUCIO, booked.name)
    assert cut.state is State.DEGRADED and cut.request.bandwidth == 25 * G
    assert "the access link of dtn dtn1 (dtn1->s1:3) has 25G, 50G booked on it" in cut.reason
    assert_within_capacity(book)


def test_a_scheduled_reservation_is_moved_and_stays_scheduled(state, tmp_path):
    state.open()
    start = state.clock.now() + HOUR
    later = state.create("dtn1", "dtn3", 50 * G, start=start, end=start + HOUR)
    book = state.open(Topology.load(topology_file(tmp_path, capacity={"s2-s3": "20G"})))
    moved = book.get(RUCIO, later.name)
    assert moved.state is State.SCHEDULED and moved.route.primary.describe() == LONG_WAY
    assert "link s2-s3 (s2:1->s3:2) has 20G, 50G booked on it from " in moved.reason
    assert_within_capacity(book)


def test_only_what_is_over_capacity_from_now_on_counts(state, tmp_path):
    state.open()
    ending = state.create("dtn1", "dtn3", 50 * G, end=state.clock.now() + HOUR)
    state.clock.advance(2 * HOUR)  # its window ended while the controller was down
    book = state.open(Topology.load(topology_file(tmp_path, capacity={"s1-s2": "10G"})))
    assert book.repairs == [] and same(book.get(RUCIO, ending.name), ending)
    book.tick()
    assert book.get(RUCIO, ending.name).state is State.EXPIRED


def test_with_switches_a_moved_reservation_is_moving_until_reconciled(state, tmp_path):
    state.open(provisioning=True)
    booked = state.create("dtn1", "dtn3", 50 * G)
    state.book.provisioned(booked.id, None, state.book.take_changes()[-1].token)
    assert state.book.get(RUCIO, booked.name).state is State.ACTIVE
    book = state.open(Topology.load(topology_file(tmp_path, capacity={"s1-s2": "10G"})), provisioning=True)
    moving = book.get(RUCIO, booked.name)
    assert moving.state is State.MOVING and moving.route.primary.describe() == LONG_WAY
    assert book.switch_plan("s8").flows and not book.switch_plan("s2").flows  # what reconciliation installs
    for switch in sorted(book.topology.switches):
        book.switch_reconciled(switch)
    active = book.get(RUCIO, booked.name)
    assert active.state is State.ACTIVE and "moved to" in active.reason


# -- a link or a DTN is removed --------------------------------------------------------------------------


def test_a_removed_link_moves_its_reservations_or_fails_them(state, tmp_path):
    state.open()
    fits = state.create("dtn1", "dtn3", 40 * G)
    state.clock.advance(1)
    too_big = state.create("dtn2", "dtn3", 60 * G)  # s2 > s3
    state.clock.advance(1)
    elsewhere = state.create("dtn6", "dtn5", 50 * G)  # on the long way: 50G left there
    assert elsewhere.route.primary.links == ("s5-s6",)
    book = state.open(Topology.load(topology_file(tmp_path, drop_links=("s2-s3",))))

    moved = book.get(RUCIO, fits.name)
    assert moved.state is State.ACTIVE and moved.route.primary.describe() == LONG_WAY
    assert moved.reason.startswith("at start-up: topology ring8 has no link direction s2:1->s3:2")
    failed = book.get(RUCIO, too_big.name)
    assert failed.state is State.FAILED and too_big.id not in book.ledger
    assert "has no link direction s2:1->s3:2" in failed.reason and "no other path fits" in failed.reason
    assert same(book.get(RUCIO, elsewhere.name), elsewhere)
    assert repair_counts(book.repairs) == {("link_removed", "rerouted"): 1, ("link_removed", "failed"): 1}
    assert book.ledger.stranded() == {}
    assert_within_capacity(book)


def test_a_removed_dtn_fails_its_reservations_and_keeps_their_history(state, tmp_path):
    state.open()
    live = state.create("dtn1", "dtn3", 10 * G)
    released = state.create("dtn3", "dtn4", 10 * G)
    state.book.release(RUCIO, released.name)
    kept = state.create("dtn1", "dtn2", 10 * G)
    book = state.open(Topology.load(topology_file(tmp_path, drop_dtns=("dtn3",))))
    failed = book.get(RUCIO, live.name)
    assert failed.state is State.FAILED and live.id not in book.ledger
    assert failed.reason == "at start-up: topology ring8 has no dtn dtn3"
    assert book.get(RUCIO, released.name).state is State.RELEASED  # history stays readable
    assert same(book.get(RUCIO, kept.name), kept)
    assert book.repairs == [Repair(live.name, "dtn_removed", "failed", failed.reason)]
    assert_within_capacity(book)


def test_a_reservation_ended_on_a_removed_link_expires(state, tmp_path):
    state.open()
    ended = state.create("dtn1", "dtn3", 10 * G, end=state.clock.now() + HOUR)
    state.clock.advance(2 * HOUR)
    book = state.open(Topology.load(topology_file(tmp_path, drop_links=("s2-s3",))))
    expired = book.get(RUCIO, ended.name)
    assert expired.state is State.EXPIRED and ended.id not in book.ledger
    assert book.repairs == []  # its window had ended: nothing to repair
    assert_within_capacity(book)


# -- the property ----------------------------------------------------------------------------------


LINKS = sorted(link["name"] for link in RING8_DATA["links"])
DTNS = sorted(dtn["name"] for dtn in RING8_DATA["dtns"])
BOOKING = st.tuples(st.sampled_from(DTNS), st.sampled_from(DTNS), st.sampled_from([5, 10, 20, 40, 60]),
                    st.integers(-2, 6), st.one_of(st.integers(1, 8), st.just(None)), st.booleans(),
                    st.sampled_from(["shortest", "widest"]))
CHANGE = st.one_of(
    st.tuples(st.just("capacity"), st.sampled_from(LINKS), st.sampled_from([0, 5, 10, 30, 60])),
    st.tuples(st.just("nic"), st.sampled_from(DTNS), st.sampled_from([5, 20, 50])),
    st.tuples(st.just("drop_link"), st.sampled_from(LINKS), st.just(0)),
    st.tuples(st.just("drop_dtn"), st.sampled_from(DTNS), st.just(0)),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bookings=st.lists(BOOKING, min_size=1, max_size=14), changes=st.lists(CHANGE, min_size=1, max_size=4),
       later=st.integers(0, 3))
def test_after_loading_no_direction_is_booked_beyond_its_capacity(tmp_path_factory, bookings, changes, later):
    """Random bookings on ring8 (some scheduled, some ended by the restart, some protected), then
    random capacity shrinks (down to zero: a link taken out of service by its capacity) and
    removals of links and DTNs: after loading, no direction is over its capacity at any instant
    from now on, and every reservation whose booking changed or that was ended has a repair
    (or ended on its own: its window passed)."""
    state = State8(tmp_path_factory.mktemp("prop") / "tsdn.db")
    try:
        state.open()
        made = []
        for src, dst, gbps, offset, length, protect, policy in bookings:
            start = state.clock.now() + offset * HOUR if offset > 0 else state.clock.now()
            end = math.inf if length is None else start + length * HOUR
            try:
                made.append(state.create(src, dst, gbps * G, start=start, end=end, protect=protect, policy=policy))
            except (NoCapacity, FailedPrecondition, InvalidArgument):  # the ring is full, the same DTN twice
                continue
        before = {b.id: b for b in state.book.ledger.bookings()}
        state.clock.advance(later * HOUR)

        capacity, nic, drop_links, drop_dtns = {}, {}, set(), set()
        for kind, name, gbps in changes:
            if kind == "capacity":
                capacity[name] = f"{gbps}G" if gbps else "1"  # a capacity must be positive: 1 bit/s
            elif kind == "nic":
                nic[name] = f"{gbps}G"
            elif kind == "drop_link":
                drop_links.add(name)
            else:
                drop_dtns.add(name)
        data = ring8_data(capacity, nic, tuple(drop_links), tuple(drop_dtns))
        book = state.open(Topology(parse_topology_spec(data, "changed")))

        assert_within_capacity(book)
        assert book.ledger.overbooked() == [] and book.ledger.stranded() == {}
        for repair in book.repairs:
            event(f"{repair.cause} {repair.action}")
        repaired = {r.reservation for r in book.repairs}
        now = book.clock.now()
        for reservation in made:
            after = book.get(NOC, reservation.name)
            booking = book.ledger.get(reservation.id) if reservation.id in book.ledger else None
            was = before.get(reservation.id)
            changed = booking is None or was is None or (booking.bandwidth, booking.directions) != (
                was.bandwidth, was.directions)
            if changed and reservation.request.end > now:
                assert reservation.name in repaired, (reservation, after)
                assert after.reason.startswith("at start-up: "), after.reason
    finally:
        state.close()


# -- a controller: WARNING and /metrics --------------------------------------------------------------


def test_the_controller_logs_and_counts_what_it_repaired(start_controller, tmp_path, caplog):
    first = start_controller(builtin_topology("ring8"))
    with TsdnClient(first.address, timeout=10) as client:
        moved = client.create_reservation("dtn1", "dtn3", 50 * G)
        cut = client.create_reservation("dtn5", "dtn6", 50 * G)
    first.stop(grace=0.5)

    caplog.set_level(logging.WARNING, logger="tsdn.controller")
    shrunk = topology_file(tmp_path, capacity={"s2-s3": "10G"}, nic={"dtn5": "10G"})
    second = start_controller(shrunk, listen_http="127.0.0.1:0")
    with TsdnClient(second.address, timeout=10) as client:
        rerouted = client.get_reservation(moved.name)
        degraded = client.get_reservation(cut.name)
    assert "s8" in rerouted.path.route and "link s2-s3" in rerouted.state_reason
    assert degraded.bandwidth_bps == 10 * G and "the access link of dtn dtn5" in degraded.state_reason
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(moved.name in w and "rerouted" in w and "link s2-s3" in w for w in warnings), warnings
    assert any(cut.name in w and "degraded" in w and "cut from 50G to 10G" in w for w in warnings), warnings

    with urllib.request.urlopen(f"http://{second.http_address}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    assert 'tsdn_ledger_repairs_total{action="rerouted",cause="capacity"} 1.0' in text, text
    assert 'tsdn_ledger_repairs_total{action="degraded",cause="capacity"} 1.0' in text
    assert 'tsdn_ledger_repairs_total{action="failed",cause="dtn_removed"} 0.0' in text


def test_a_deadline_schedule_that_no_longer_fits_fails_rather_than_being_cut(state, tmp_path):
    book = state.open()
    now = state.clock.now()
    scheduled = book.book_by_deadline(RUCIO, "dtn1", "dtn3", 50 * G * 600, now + 3600)  # 600 s at 100G
    shrunk = Topology.load(topology_file(tmp_path, nic={"dtn1": "10G"}))  # every path from dtn1 shrinks

    book = state.open(shrunk)
    failed = book.get(RUCIO, scheduled.name)
    assert failed.state is State.FAILED and "no other path carries its deadline schedule" in failed.reason
    assert scheduled.id not in book.ledger
    assert book.ledger.overbooked() == []
