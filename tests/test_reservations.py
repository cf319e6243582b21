"""The reservation book (sdn_app.core.reservations): life of a reservation, idempotency,
authorization, listing, availability and persistence, driven without threads by a FakeClock.

Every book here is built the way the controller builds it: a topology, a ledger on a SQLite
file and a fake clock; tests reopen the same file to check what survives a restart.
"""

from __future__ import annotations

import base64
import json
import math
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sdn_app.core import reservation_store
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    NotFound,
    PermissionDenied,
)
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Event, Principal, Reservation, Role, State
from sdn_app.core.reservations import LEDGER_ONLY, ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

G = 10**9
HOUR = 3600.0
T0 = FakeClock().now()

SC16 = Topology.load(builtin_topology("sc16"))
RING8 = Topology.load(builtin_topology("ring8"))

RUCIO = Principal("rucio", Role.SERVICE)
FTS = Principal("fts", Role.SERVICE)
NOC = Principal("noc", Role.ADMIN)
AGENT = Principal("agent1", Role.AGENT)

# dtn1 -> dtn3 on ring8, the short way round (clockwise)
RING_1_3 = ("dtn1->s1:3", "s1:1->s2:2", "s2:1->s3:2", "s3:3->dtn3")


class Env:
    """A topology, fake clock, ledger on `db` and the reservation book over them."""

    def __init__(self, topology: Topology, db: Path, clock: FakeClock | None = None):
        self.topology = topology
        self.db = db
        self.clock = clock or FakeClock()
        self.ledger = Ledger(topology.capacities(), db, self.clock)
        self.book = ReservationBook(topology, self.ledger, self.clock)

    def req(self, src: str = "dtn1", dst: str = "dtn2", bandwidth: int = 10 * G, start: float | None = None,
            end: float = math.inf, **extra) -> PathRequest:
        """A request starting now (unless `start` is given)."""
        return PathRequest(src, dst, bandwidth, self.clock.now() if start is None else start, end, **extra)

    def reopen(self, clock: FakeClock | None = None) -> Env:
        """Close this ledger and open a new ledger and book on the same file (a restart)."""
        self.ledger.close()
        return Env(self.topology, self.db, clock or self.clock)

    def transitions(self) -> list[tuple[State | None, State]]:
        return [(e.previous, e.reservation.state) for e in self.book.take_events()]


@pytest.fixture
def make_env(tmp_path: Path) -> Iterator:
    envs: list[Env] = []

    def make(topology: Topology = RING8, clock: FakeClock | None = None, name: str = "t.db") -> Env:
        env = Env(topology, tmp_path / name, clock)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.ledger.close()


@pytest.fixture
def ring(make_env) -> Env:
    return make_env(RING8)


def free_now(env: Env, direction: str) -> int:
    now = env.clock.now()
    return env.ledger.free(direction, now, now + 1)


# --- creating -------------------------------------------------------------------------------


def test_create_now_is_active_books_every_direction_of_the_route(ring: Env):
    before = {d: free_now(ring, d) for d in RING8.directions}
    r = ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 30 * G, end=T0 + HOUR))
    assert r.state is State.ACTIVE
    assert r.owner == "rucio"
    assert r.name == f"reservations/{r.id}" and len(r.id) == 32
    assert "ledger only" in r.reason and r.reason == LEDGER_ONLY
    assert r.route is not None and r.route.primary.direction_ids == RING_1_3
    assert r.route.backup is None
    after = {d: free_now(ring, d) for d in RING8.directions}
    for d in RING8.directions:
        assert after[d] == before[d] - (30 * G if d in RING_1_3 else 0), d
    booking = ring.ledger.get(r.id)
    assert (booking.bandwidth, booking.start, booking.end) == (30 * G, T0, T0 + HOUR)
    assert booking.directions == RING_1_3
    events = ring.book.take_events()
    assert [(e.previous, e.reservation.state) for e in events] == [
        (None, State.PROVISIONING), (State.PROVISIONING, State.ACTIVE)]
    assert [e.sequence for e in events] == [1, 2]
    assert events[-1].reservation == r and events[-1].reason == r.reason
    assert ring.book.take_events() == []
    assert ring.book.get(RUCIO, r.name) == r


def test_create_protected_books_primary_and_backup(ring: Env):
    r = ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 20 * G, protect=True))
    assert r.route is not None and r.route.backup is not None
    assert not set(r.route.primary.links) & set(r.route.backup.links)
    for d in r.route.direction_ids:
        assert free_now(ring, d) == 80 * G, d
    assert ring.ledger.get(r.id).directions == r.route.direction_ids
    # the access links are shared by both paths but booked once
    assert free_now(ring, "dtn1->s1:3") == 80 * G


def test_create_refusal_names_bottleneck_and_books_nothing(ring: Env):
    first = ring.book.create(RUCIO, ring.req("dtn1", "dtn2", 100 * G))
    ring.book.take_events()
    with pytest.raises(NoCapacity) as refused:
        ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 1 * G))
    assert refused.value.bottleneck == "dtn1->s1:3"
    assert refused.value.free_bps == 0
    assert "dtn1->s1:3" in str(refused.value)
    assert [b.id for b in ring.ledger.bookings()] == [first.id]
    assert ring.book.take_events() == []
    assert ring.book.list(RUCIO)[0] == [first]


def test_create_rejects_bad_requests(ring: Env):
    with pytest.raises(InvalidArgument, match="end"):
        ring.book.create(RUCIO, ring.req(start=T0 - 100, end=T0))
    with pytest.raises(NotFound, match="nowhere"):
        ring.book.create(RUCIO, ring.req("nowhere", "dtn2"))
    with pytest.raises(InvalidArgument):
        ring.book.create(RUCIO, ring.req(bandwidth=0))
    assert len(ring.ledger) == 0
    assert ring.book.take_events() == []


def test_scheduled_reservation_starts_and_expires_with_the_clock(ring: Env):
    start, end = T0 + 600, T0 + 1200
    r = ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 40 * G, start=start, end=end))
    assert r.state is State.SCHEDULED
    assert ring.transitions() == [(None, State.SCHEDULED)]
    assert ring.book.booked_now("s1:1->s2:2") == 0
    assert ring.ledger.free("s1:1->s2:2", start, end) == 60 * G
    assert ring.book.next_deadline() == start

    ring.clock.advance(599)
    ring.book.tick()
    assert ring.transitions() == []
    assert ring.book.get(RUCIO, r.id).state is State.SCHEDULED

    ring.clock.advance(1)
    ring.book.tick()
    assert ring.transitions() == [(State.SCHEDULED, State.PROVISIONING), (State.PROVISIONING, State.ACTIVE)]
    active = ring.book.get(RUCIO, r.id)
    assert active.state is State.ACTIVE and active.reason == LEDGER_ONLY
    assert active.updated == start
    assert ring.book.booked_now("s1:1->s2:2") == 40 * G
    assert ring.book.next_deadline() == end

    ring.clock.advance(600)
    ring.book.tick()
    events = ring.book.take_events()
    assert [(e.previous, e.reservation.state) for e in events] == [(State.ACTIVE, State.EXPIRED)]
    assert "window ended" in events[0].reason
    assert ring.book.get(RUCIO, r.id).state is State.EXPIRED
    assert len(ring.ledger) == 0
    assert ring.book.booked_now("s1:1->s2:2") == 0
    assert ring.book.next_deadline() == math.inf
    ring.book.tick()
    assert ring.transitions() == []


def test_scheduled_window_jumped_over_expires_directly(ring: Env):
    r = ring.book.create(RUCIO, ring.req(start=T0 + 10, end=T0 + 20))
    ring.book.take_events()
    ring.clock.advance(100)
    ring.book.tick()
    assert ring.transitions() == [(State.SCHEDULED, State.EXPIRED)]
    assert ring.book.get(RUCIO, r.id).state is State.EXPIRED
    assert len(ring.ledger) == 0


def test_next_deadline_is_the_earliest_pending_start_or_end(ring: Env):
    assert ring.book.next_deadline() == math.inf
    ring.book.create(RUCIO, ring.req("dtn1", "dtn2", end=T0 + 500))
    ring.book.create(RUCIO, ring.req("dtn3", "dtn4", start=T0 + 300, end=T0 + 900))
    ring.book.create(RUCIO, ring.req("dtn5", "dtn6"))  # until released
    assert ring.book.next_deadline() == T0 + 300
    ring.clock.set(T0 + 300)
    ring.book.tick()
    assert ring.book.next_deadline() == T0 + 500
    ring.clock.set(T0 + 500)
    ring.book.tick()
    assert ring.book.next_deadline() == T0 + 900
    ring.clock.set(T0 + 900)
    ring.book.tick()
    assert ring.book.next_deadline() == math.inf
    assert [r.state for r in ring.book.snapshot(NOC)] == [State.ACTIVE]


def test_next_deadline_follows_modified_and_released_reservations(ring: Env):
    a = ring.book.create(RUCIO, ring.req("dtn1", "dtn2", end=T0 + 500))
    b = ring.book.create(RUCIO, ring.req("dtn3", "dtn4", end=T0 + 800))
    ring.book.modify(RUCIO, a.name, end=T0 + 1000)  # later: b's end comes first now
    assert ring.book.next_deadline() == T0 + 800
    ring.book.modify(RUCIO, a.name, end=T0 + 200)  # earlier again
    assert ring.book.next_deadline() == T0 + 200
    ring.book.release(RUCIO, a.name)
    assert ring.book.next_deadline() == T0 + 800
    ring.book.release(RUCIO, b.name)
    assert ring.book.next_deadline() == math.inf


# --- releasing ------------------------------------------------------------------------------


def test_release_frees_bandwidth_once(ring: Env):
    r = ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 30 * G))
    ring.book.take_events()
    ring.clock.advance(5)
    released = ring.book.release(RUCIO, r.name)
    assert released.state is State.RELEASED
    assert released.updated == T0 + 5
    assert "rucio" in released.reason
    assert len(ring.ledger) == 0
    assert all(free_now(ring, d) == 100 * G for d in RING_1_3)
    events = ring.book.take_events()
    assert [(e.previous, e.reservation.state) for e in events] == [(State.ACTIVE, State.RELEASED)]
    assert events[0].reservation == released

    again = ring.book.release(RUCIO, r.id)
    assert again == released
    assert ring.book.take_events() == []
    with pytest.raises(FailedPrecondition, match="RELEASED"):
        ring.book.modify(RUCIO, r.name, bandwidth=10 * G)
    assert ring.book.get(RUCIO, r.name) == released


def test_release_scheduled_never_starts(ring: Env):
    r = ring.book.create(RUCIO, ring.req(start=T0 + 60, end=T0 + 120))
    ring.book.take_events()
    ring.book.release(RUCIO, r.name)
    assert ring.transitions() == [(State.SCHEDULED, State.RELEASED)]
    ring.clock.advance(90)
    ring.book.tick()
    assert ring.transitions() == []
    assert ring.book.get(RUCIO, r.name).state is State.RELEASED
    assert ring.book.next_deadline() == math.inf


def test_release_after_end_before_tick_finds_it_expired(ring: Env):
    r = ring.book.create(RUCIO, ring.req(end=T0 + 10))
    ring.book.take_events()
    ring.clock.advance(20)
    assert ring.book.release(RUCIO, r.name).state is State.EXPIRED  # the window ended before the release
    assert len(ring.ledger) == 0
    ring.book.tick()
    assert ring.transitions() == [(State.ACTIVE, State.EXPIRED)]
    with pytest.raises(FailedPrecondition):
        ring.book.modify(RUCIO, r.name, end=T0 + HOUR)  # an ended reservation does not come back to life


# --- modifying ------------------------------------------------------------------------------


def test_modify_bandwidth_up_and_down(ring: Env):
    a = ring.book.create(RUCIO, ring.req("dtn1", "dtn2", 40 * G, end=T0 + HOUR))
    b = ring.book.create(FTS, ring.req("dtn8", "dtn3", 50 * G, end=T0 + HOUR))
    assert "s1:1->s2:2" in b.route.primary.direction_ids
    ring.book.take_events()

    with pytest.raises(NoCapacity) as refused:
        ring.book.modify(RUCIO, a.name, bandwidth=60 * G)
    assert refused.value.bottleneck == "s1:1->s2:2"
    assert refused.value.free_bps == 50 * G  # a's own 40G not counted
    assert ring.book.get(RUCIO, a.name) == a
    assert ring.ledger.get(a.id).bandwidth == 40 * G
    assert free_now(ring, "s1:1->s2:2") == 10 * G
    assert ring.book.take_events() == []

    ring.clock.advance(1)
    up = ring.book.modify(RUCIO, a.name, bandwidth=50 * G)
    assert up.request.bandwidth == 50 * G and up.state is State.ACTIVE
    assert up.updated == T0 + 1 and up.created == T0
    assert up.route == a.route
    assert "bandwidth" in up.reason
    assert ring.ledger.get(a.id).bandwidth == 50 * G
    assert free_now(ring, "s1:1->s2:2") == 0
    assert ring.transitions() == [(State.ACTIVE, State.ACTIVE)]

    down = ring.book.modify(RUCIO, a.name, bandwidth=20 * G)
    assert down.request.bandwidth == 20 * G
    assert free_now(ring, "s1:1->s2:2") == 30 * G
    assert free_now(ring, "dtn1->s1:3") == 80 * G
    assert ring.book.get(RUCIO, a.id) == down


def test_modify_end_extends_only_into_free_time(ring: Env):
    a = ring.book.create(RUCIO, ring.req("dtn1", "dtn2", 100 * G, end=T0 + HOUR))
    later = ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 100 * G, start=T0 + 2 * HOUR, end=T0 + 3 * HOUR))
    ring.book.take_events()

    for end in (T0 + 2 * HOUR + 1, math.inf):
        with pytest.raises(NoCapacity) as refused:
            ring.book.modify(RUCIO, a.name, end=end)
        assert refused.value.bottleneck == "dtn1->s1:3"
        assert ring.book.get(RUCIO, a.name) == a
        assert ring.ledger.get(a.id).end == T0 + HOUR
    assert ring.book.take_events() == []

    touching = ring.book.modify(RUCIO, a.name, end=T0 + 2 * HOUR)  # [start, end) windows only touch
    assert touching.request.end == T0 + 2 * HOUR
    assert ring.ledger.get(a.id).end == T0 + 2 * HOUR
    assert "end" in touching.reason
    assert ring.transitions() == [(State.ACTIVE, State.ACTIVE)]

    shorter = ring.book.modify(RUCIO, a.name, end=T0 + 1800)
    assert ring.book.next_deadline() == T0 + 1800
    assert shorter.request.end == T0 + 1800

    # a scheduled reservation stays scheduled when modified
    moved = ring.book.modify(RUCIO, later.name, bandwidth=50 * G)
    assert moved.state is State.SCHEDULED
    assert ring.transitions() == [(State.ACTIVE, State.ACTIVE), (State.SCHEDULED, State.SCHEDULED)]


def test_modify_until_released(ring: Env):
    a = ring.book.create(RUCIO, ring.req(end=T0 + 60))
    open_ended = ring.book.modify(RUCIO, a.name, end=math.inf)
    assert open_ended.request.end == math.inf
    assert ring.ledger.get(a.id).end == math.inf
    assert ring.book.next_deadline() == math.inf
    ring.clock.advance(10 * HOUR)
    ring.book.tick()
    assert ring.book.get(RUCIO, a.name).state is State.ACTIVE
    assert ring.book.booked_now("dtn1->s1:3") == 10 * G


def test_modify_rejects_bad_changes_and_changes_nothing(ring: Env):
    a = ring.book.create(RUCIO, ring.req(end=T0 + HOUR))
    s = ring.book.create(RUCIO, ring.req("dtn3", "dtn4", start=T0 + 100, end=T0 + 200))
    ring.book.take_events()
    ring.clock.advance(30)
    with pytest.raises(InvalidArgument, match="past"):
        ring.book.modify(RUCIO, a.name, end=T0 + 30)
    with pytest.raises(InvalidArgument, match="past"):
        ring.book.modify(RUCIO, a.name, end=T0 + 10, validate_only=True)
    with pytest.raises(InvalidArgument):
        ring.book.modify(RUCIO, a.name)
    with pytest.raises(InvalidArgument):
        ring.book.modify(RUCIO, a.name, bandwidth=0)
    with pytest.raises(InvalidArgument):
        ring.book.modify(RUCIO, s.name, end=T0 + 50)  # before its own start
    assert ring.book.get(RUCIO, a.name) == a
    assert ring.book.get(RUCIO, s.name) == s
    assert ring.ledger.get(a.id).end == T0 + HOUR
    assert ring.ledger.get(s.id).end == T0 + 200
    assert ring.book.take_events() == []


def test_modify_validate_only_changes_nothing(ring: Env):
    a = ring.book.create(RUCIO, ring.req(bandwidth=40 * G, end=T0 + HOUR))
    ring.book.take_events()
    preview = ring.book.modify(RUCIO, a.name, bandwidth=90 * G, end=T0 + 2 * HOUR, validate_only=True)
    assert preview.request.bandwidth == 90 * G and preview.request.end == T0 + 2 * HOUR
    assert "validate_only" in preview.reason
    assert ring.book.get(RUCIO, a.name) == a
    booking = ring.ledger.get(a.id)
    assert (booking.bandwidth, booking.end) == (40 * G, T0 + HOUR)
    assert ring.book.take_events() == []
    with pytest.raises(NoCapacity):
        ring.book.modify(RUCIO, a.name, bandwidth=101 * G, validate_only=True)


# --- validate_only create ---------------------------------------------------------------------


def test_create_validate_only_books_nothing(ring: Env):
    now = ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 30 * G), validate_only=True)
    assert now.state is State.ACTIVE and now.id == "" and now.name == ""
    assert now.route is not None and now.route.primary.direction_ids == RING_1_3
    assert "validate_only" in now.reason
    later = ring.book.create(RUCIO, ring.req(start=T0 + 60, end=T0 + 120), validate_only=True,
                             request_id="try-1")
    assert later.state is State.SCHEDULED
    assert len(ring.ledger) == 0
    assert ring.book.take_events() == []
    assert ring.book.list(NOC) == ([], "")
    assert ring.book.next_deadline() == math.inf
    # a what-if does not use up its request_id
    real = ring.book.create(RUCIO, ring.req(start=T0 + 60, end=T0 + 120), request_id="try-1")
    assert real.id and len(ring.ledger) == 1


def test_create_validate_only_refusal_still_raises(ring: Env):
    ring.book.create(RUCIO, ring.req("dtn1", "dtn2", 100 * G))
    ring.book.take_events()
    with pytest.raises(NoCapacity) as refused:
        ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 1 * G), validate_only=True)
    assert refused.value.bottleneck == "dtn1->s1:3"
    with pytest.raises(PermissionDenied):
        ring.book.create(AGENT, ring.req("dtn3", "dtn4"), validate_only=True)
    assert len(ring.ledger) == 1
    assert ring.book.take_events() == []


# --- idempotency ----------------------------------------------------------------------------


def test_same_request_id_returns_the_same_reservation(ring: Env):
    first = ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 30 * G, end=T0 + HOUR), request_id="job-42")
    ring.book.take_events()
    ring.clock.advance(5)  # a retry computes "now" again; it is still the same request
    retry = ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 30 * G, end=T0 + HOUR + 5), request_id="job-42")
    assert retry == first
    assert len(ring.ledger) == 1
    assert free_now(ring, "s1:1->s2:2") == 70 * G
    assert ring.book.take_events() == []
    assert len(ring.book.list(RUCIO)[0]) == 1

    with pytest.raises(AlreadyExists, match="job-42"):
        ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 40 * G), request_id="job-42")
    with pytest.raises(AlreadyExists):
        ring.book.create(RUCIO, ring.req("dtn1", "dtn4", 30 * G), request_id="job-42")
    assert len(ring.ledger) == 1

    released = ring.book.release(RUCIO, first.name)
    assert ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 30 * G), request_id="job-42") == released
    assert len(ring.ledger) == 0

    reopened = ring.reopen()
    assert reopened.book.create(RUCIO, reopened.req("dtn1", "dtn3", 30 * G), request_id="job-42") == released
    assert len(reopened.ledger) == 0
    assert len(reopened.book.list(NOC)[0]) == 1


def test_request_id_survives_restart_for_a_live_reservation(make_env):
    env = make_env()
    first = env.book.create(RUCIO, env.req(), request_id="uuid-1")
    reopened = env.reopen()
    assert reopened.book.create(RUCIO, reopened.req(), request_id="uuid-1") == first
    assert [b.id for b in reopened.ledger.bookings()] == [first.id]


def test_request_ids_are_per_principal(ring: Env):
    mine = ring.book.create(RUCIO, ring.req("dtn1", "dtn2"), request_id="same")
    theirs = ring.book.create(FTS, ring.req("dtn3", "dtn4"), request_id="same")
    assert mine.id != theirs.id
    assert theirs.owner == "fts"
    assert len(ring.ledger) == 2
    assert ring.book.create(FTS, ring.req("dtn3", "dtn4"), request_id="same") == theirs
    # an admin's request_id is its own too, even though it can see the others
    ours = ring.book.create(NOC, ring.req("dtn1", "dtn2"), request_id="same")
    assert ours.id not in (mine.id, theirs.id) and ours.owner == "noc"
    assert len(ring.ledger) == 3


def test_empty_request_id_means_no_idempotency(ring: Env):
    a = ring.book.create(RUCIO, ring.req(), request_id="")
    b = ring.book.create(RUCIO, ring.req(), request_id="")
    assert a.id != b.id
    assert len(ring.ledger) == 2
    assert free_now(ring, "dtn1->s1:3") == 80 * G


@pytest.mark.parametrize("request_id", ["has space", "x" * 129, "tab\there", "job-1\n", "\njob-1", "é", "\x00"])
def test_bad_request_id_is_rejected(ring: Env, request_id: str):
    with pytest.raises(InvalidArgument, match="request_id"):
        ring.book.create(RUCIO, ring.req(), request_id=request_id)
    assert len(ring.ledger) == 0
    assert ring.book.take_events() == []


def test_longest_request_id_is_accepted(ring: Env):
    rid = "~" * 128
    r = ring.book.create(RUCIO, ring.req(), request_id=rid)
    assert r.request_id == rid
    assert ring.book.create(RUCIO, ring.req(), request_id=rid) == r


# --- authorization --------------------------------------------------------------------------


def test_services_see_and_change_only_their_own(ring: Env):
    theirs = ring.book.create(FTS, ring.req("dtn1", "dtn3", 30 * G))
    ring.book.take_events()
    for call in (lambda: ring.book.get(RUCIO, theirs.name),
                 lambda: ring.book.modify(RUCIO, theirs.name, bandwidth=10 * G),
                 lambda: ring.book.modify(RUCIO, theirs.name, bandwidth=10 * G, validate_only=True),
                 lambda: ring.book.release(RUCIO, theirs.name),
                 lambda: ring.book.snapshot(RUCIO, theirs.name)):
        with pytest.raises(PermissionDenied):
            call()
    assert ring.book.get(FTS, theirs.name) == theirs
    assert ring.ledger.get(theirs.id).bandwidth == 30 * G
    assert ring.book.take_events() == []

    assert ring.book.get(NOC, theirs.name) == theirs
    assert ring.book.modify(NOC, theirs.name, bandwidth=10 * G).request.bandwidth == 10 * G
    released = ring.book.release(NOC, theirs.name)
    assert released.state is State.RELEASED and released.owner == "fts"
    assert "noc" in released.reason
    assert len(ring.ledger) == 0


def test_agents_may_not_use_reservations(ring: Env):
    r = ring.book.create(RUCIO, ring.req())
    with pytest.raises(PermissionDenied):
        ring.book.create(AGENT, ring.req("dtn3", "dtn4"))
    with pytest.raises(PermissionDenied):
        ring.book.list(AGENT)
    with pytest.raises(PermissionDenied):
        ring.book.availability(AGENT, ring.req("dtn3", "dtn4"))
    with pytest.raises(PermissionDenied):
        ring.book.get(AGENT, r.name)
    with pytest.raises(PermissionDenied):
        ring.book.release(AGENT, r.name)
    with pytest.raises(PermissionDenied):
        ring.book.snapshot(AGENT)
    assert len(ring.ledger) == 1


def test_list_shows_services_only_their_own(ring: Env):
    mine = ring.book.create(RUCIO, ring.req("dtn1", "dtn2"))
    ring.clock.advance(1)
    theirs = ring.book.create(FTS, ring.req("dtn3", "dtn4"))
    assert ring.book.list(RUCIO) == ([mine], "")
    assert ring.book.list(FTS) == ([theirs], "")
    assert ring.book.list(RUCIO, owner="rucio") == ([mine], "")
    with pytest.raises(PermissionDenied):
        ring.book.list(RUCIO, owner="fts")
    assert ring.book.list(NOC) == ([theirs, mine], "")
    assert ring.book.list(NOC, owner="fts") == ([theirs], "")
    assert ring.book.list(NOC, owner="nobody") == ([], "")


# --- listing --------------------------------------------------------------------------------


def test_list_newest_first_with_filters(ring: Env):
    a = ring.book.create(RUCIO, ring.req("dtn1", "dtn2"))
    ring.clock.advance(1)
    b = ring.book.create(RUCIO, ring.req("dtn3", "dtn1", start=T0 + 100, end=T0 + 200))
    ring.clock.advance(1)
    c = ring.book.create(FTS, ring.req("dtn5", "dtn6"))
    ring.clock.advance(1)
    d = ring.book.create(RUCIO, ring.req("dtn7", "dtn8"))
    ring.book.release(RUCIO, d.name)
    d = ring.book.get(RUCIO, d.name)

    assert ring.book.list(NOC)[0] == [d, c, b, a]
    assert ring.book.list(RUCIO)[0] == [d, b, a]
    assert ring.book.list(NOC, state=State.ACTIVE)[0] == [c, a]
    assert ring.book.list(NOC, state=State.SCHEDULED)[0] == [b]
    assert ring.book.list(NOC, state=State.RELEASED)[0] == [d]
    assert ring.book.list(NOC, state=State.EXPIRED)[0] == []
    assert ring.book.list(NOC, dtn="dtn1")[0] == [b, a]  # source or destination
    assert ring.book.list(NOC, dtn="dtn6")[0] == [c]
    assert ring.book.list(RUCIO, dtn="dtn6")[0] == []
    assert ring.book.list(NOC, dtn="dtn1", state=State.ACTIVE, owner="rucio")[0] == [a]
    with pytest.raises(NotFound, match="nowhere"):
        ring.book.list(NOC, dtn="nowhere")


def test_list_pages_cover_everything_once_in_order(ring: Env):
    made = []
    for i in range(5):
        made.append(ring.book.create(RUCIO, ring.req(f"dtn{i + 1}", f"dtn{i + 2}", 1 * G)))
        ring.clock.advance(1)
    pages = []
    token = ""
    while True:
        page, token = ring.book.list(RUCIO, page_size=2, page_token=token)
        pages.append(page)
        if not token:
            break
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [r for p in pages for r in p] == made[::-1]


def test_list_pages_with_equal_creation_times(ring: Env):
    made = {ring.book.create(RUCIO, ring.req(f"dtn{i + 1}", f"dtn{i + 2}", 1 * G)).id for i in range(5)}
    seen = []
    page, token = ring.book.list(RUCIO, page_size=2)
    seen += page
    while token:
        page, token = ring.book.list(RUCIO, page_size=2, page_token=token)
        seen += page
    assert len(seen) == 5 and {r.id for r in seen} == made


def test_list_page_tokens_are_checked(ring: Env):
    for i in range(3):
        ring.book.create(RUCIO, ring.req(f"dtn{i + 1}", f"dtn{i + 2}", 1 * G))
        ring.clock.advance(1)
    _, token = ring.book.list(RUCIO, page_size=1)
    assert token
    with pytest.raises(InvalidArgument, match="page_token"):
        ring.book.list(RUCIO, page_size=1, page_token=token, state=State.ACTIVE)
    with pytest.raises(InvalidArgument, match="page_token"):
        ring.book.list(RUCIO, page_size=1, page_token=token, dtn="dtn1")
    garbage = ["garbage", "!!!!", base64.urlsafe_b64encode(b"[1, 2]").decode(),
               base64.urlsafe_b64encode(b'{"q": "x"}').decode(), base64.urlsafe_b64encode(b"\xff\xfe").decode(),
               base64.urlsafe_b64encode(json.dumps({"q": 1, "c": [], "i": 2}).encode()).decode()]
    for bad in garbage:
        with pytest.raises(InvalidArgument, match="page_token"):
            ring.book.list(RUCIO, page_token=bad)
    with pytest.raises(InvalidArgument, match="page_size"):
        ring.book.list(RUCIO, page_size=-1)


def test_list_page_size_default_and_ceiling(ring: Env, monkeypatch: pytest.MonkeyPatch):
    for i in range(3):
        ring.book.create(RUCIO, ring.req(f"dtn{i + 1}", f"dtn{i + 2}", 1 * G))
        ring.clock.advance(1)
    assert len(ring.book.list(RUCIO, page_size=10**6)[0]) == 3
    monkeypatch.setattr(reservation_store, "MAX_PAGE_SIZE", 2)
    page, token = ring.book.list(RUCIO, page_size=10**6)
    assert len(page) == 2 and token
    monkeypatch.setattr(reservation_store, "MAX_PAGE_SIZE", 1000)
    monkeypatch.setattr(reservation_store, "DEFAULT_PAGE_SIZE", 1)
    page, token = ring.book.list(RUCIO)
    assert len(page) == 1 and token


# --- names ----------------------------------------------------------------------------------


def test_get_by_name_or_bare_id(ring: Env):
    r = ring.book.create(RUCIO, ring.req())
    assert ring.book.get(RUCIO, r.id) == r
    assert ring.book.get(RUCIO, f"reservations/{r.id}") == r
    assert ring.book.snapshot(RUCIO, r.id) == [r]


@pytest.mark.parametrize("name", ["", "reservations/", "reservations/xyz", "foo/{id}", "{ID}", "{id}0",
                                  "reservations/{id}/", " {id}", "{id}\n", "reservations//{id}"])
def test_get_rejects_malformed_names(ring: Env, name: str):
    r = ring.book.create(RUCIO, ring.req())
    with pytest.raises(InvalidArgument, match="name"):
        ring.book.get(RUCIO, name.format(id=r.id, ID=r.id.upper()))


def test_get_unknown_is_not_found(ring: Env):
    with pytest.raises(NotFound, match="0" * 32):
        ring.book.get(NOC, "reservations/" + "0" * 32)
    with pytest.raises(NotFound):
        ring.book.release(NOC, "f" * 32)


# --- labels ---------------------------------------------------------------------------------


def test_labels_are_stored_and_returned(ring: Env):
    labels = {"experiment": "cms", "team/site": "caltech", "a": "", "k" * 63: "v" * 256}
    r = ring.book.create(RUCIO, ring.req(), labels=labels)
    assert dict(r.labels) == labels
    assert dict(ring.book.get(RUCIO, r.name).labels) == labels
    with pytest.raises(TypeError):
        r.labels["experiment"] = "atlas"  # type: ignore[index]
    many = {f"k{i}": str(i) for i in range(32)}
    assert dict(ring.book.create(RUCIO, ring.req("dtn3", "dtn4"), labels=many).labels) == many


@pytest.mark.parametrize("labels", [
    {"Bad": "x"}, {"-x": "y"}, {"x-": "y"}, {"": "y"}, {"k" * 64: "v"}, {"has space": "v"},
    {"k\n": "v"}, {1: "v"}, {"k": 1}, {"k": "x" * 257}, {"k": "line\nbreak"},
    {f"k{i}": "v" for i in range(33)},
])
def test_bad_labels_are_rejected_and_nothing_is_booked(ring: Env, labels: dict):
    with pytest.raises(InvalidArgument, match="labels"):
        ring.book.create(RUCIO, ring.req(), labels=labels)
    assert len(ring.ledger) == 0
    assert ring.book.list(NOC) == ([], "")
    assert ring.book.take_events() == []


# --- availability ---------------------------------------------------------------------------


def test_availability_on_sc16_is_what_can_still_be_booked(make_env):
    env = make_env(SC16)
    book = env.book
    req = env.req("caltech-a-dtn1", "starlight-dtn1", 1, end=T0 + HOUR)
    empty = book.availability(RUCIO, req)
    assert empty.max_bandwidth == 400 * G  # the 400G NICs, not the 1T link, are the limit
    assert empty.reason == ""
    book.create(RUCIO, env.req("caltech-a-dtn1", "caltech-b-dtn1", 300 * G, end=T0 + HOUR))
    after = book.availability(RUCIO, req)
    assert after.max_bandwidth == 100 * G
    assert after.paths and len(after.paths) <= 3
    for path in after.paths:
        assert (path.src, path.dst) == ("caltech-a-dtn1", "starlight-dtn1")
        assert path.free_bps <= 100 * G
    assert "tbit-rdma" in after.paths[0].links
    # a window after that booking sees the whole NIC again
    later = book.availability(RUCIO, env.req("caltech-a-dtn1", "starlight-dtn1", 1, start=T0 + HOUR,
                                             end=T0 + 2 * HOUR))
    assert later.max_bandwidth == 400 * G
    # exactly the maximum can be booked, one bit more cannot
    with pytest.raises(NoCapacity):
        book.create(RUCIO, env.req("caltech-a-dtn1", "starlight-dtn1", 100 * G + 1, end=T0 + HOUR))
    book.create(RUCIO, env.req("caltech-a-dtn1", "starlight-dtn1", 100 * G, end=T0 + HOUR))
    assert book.availability(NOC, req).max_bandwidth == 0


def test_availability_is_the_widest_inner_bottleneck(ring: Env):
    ring.book.create(RUCIO, ring.req("dtn8", "dtn3", 60 * G))  # s8 > s1 > s2 > s3: s1->s2 keeps 40G
    assert ring.book.availability(RUCIO, ring.req("dtn1", "dtn2", 1)).max_bandwidth == 100 * G  # the long way
    ring.book.create(RUCIO, ring.req("dtn7", "dtn6", 70 * G))  # the long way keeps 30G on s7->s6
    result = ring.book.availability(RUCIO, ring.req("dtn1", "dtn2", 1), max_paths=5)
    assert result.max_bandwidth == 40 * G
    assert [p.hop_count for p in result.paths] == [1, 7]
    assert sorted(p.free_bps for p in result.paths) == [30 * G, 40 * G]
    assert len(ring.book.availability(RUCIO, ring.req("dtn1", "dtn2", 1), max_paths=1).paths) == 1
    # what availability says is what create gets
    with pytest.raises(NoCapacity):
        ring.book.create(RUCIO, ring.req("dtn1", "dtn2", 40 * G + 1, policy="widest"))
    ring.book.create(RUCIO, ring.req("dtn1", "dtn2", 40 * G, policy="widest"))


def test_availability_without_a_route_is_zero_with_a_reason(ring: Env):
    cut = ring.book.availability(RUCIO, ring.req("dtn1", "dtn3", exclude=("s2", "s8")))
    assert cut.max_bandwidth == 0 and cut.paths == []
    assert "no route" in cut.reason
    ring.book.create(RUCIO, ring.req("dtn1", "dtn2", 100 * G))
    full = ring.book.availability(RUCIO, ring.req("dtn1", "dtn3"))
    assert full.max_bandwidth == 0 and full.paths == []
    assert "dtn1->s1:3" in full.reason


@pytest.mark.parametrize("max_paths", [0, 21, -1])
def test_availability_max_paths_bounds(ring: Env, max_paths: int):
    with pytest.raises(InvalidArgument, match="max_paths"):
        ring.book.availability(RUCIO, ring.req(), max_paths=max_paths)
    assert len(ring.book.availability(RUCIO, ring.req("dtn1", "dtn5"), max_paths=20).paths) == 2


def test_booked_now(ring: Env):
    ring.book.create(RUCIO, ring.req("dtn1", "dtn3", 30 * G, end=T0 + 100))
    ring.book.create(FTS, ring.req("dtn1", "dtn2", 20 * G, start=T0 + 50, end=T0 + 150))
    assert ring.book.booked_now("s1:1->s2:2") == 30 * G
    assert ring.book.booked_now("s2:2->s1:1") == 0
    ring.clock.set(T0 + 50)
    assert ring.book.booked_now("s1:1->s2:2") == 50 * G
    ring.clock.set(T0 + 100)
    assert ring.book.booked_now("s1:1->s2:2") == 20 * G
    assert ring.book.booked_now("s2:1->s3:2") == 0
    with pytest.raises(NotFound):
        ring.book.booked_now("nowhere")


# --- persistence ----------------------------------------------------------------------------


def test_reservations_survive_a_restart(make_env):
    env = make_env()
    active = env.book.create(RUCIO, env.req("dtn1", "dtn3", 30 * G, end=T0 + HOUR), labels={"exp": "cms"},
                             request_id="r-1")
    scheduled = env.book.create(FTS, env.req("dtn4", "dtn6", 20 * G, start=T0 + 600, end=T0 + 1200,
                                             policy="widest", max_hops=3, exclude=("s7",)))
    protected = env.book.create(RUCIO, env.req("dtn2", "dtn5", 10 * G, protect=True))
    released = env.book.create(RUCIO, env.req("dtn7", "dtn8"))
    env.clock.advance(1)
    released = env.book.release(NOC, released.name)
    modified = env.book.modify(RUCIO, active.name, bandwidth=35 * G)
    assert protected.route is not None and protected.route.backup is not None
    bookings = env.ledger.bookings()
    everything = sorted(env.book.list(NOC)[0], key=lambda r: r.id)

    again = env.reopen()
    assert sorted(again.book.list(NOC)[0], key=lambda r: r.id) == everything
    assert again.ledger.bookings() == bookings
    got = again.book.get(NOC, protected.name)
    assert got.route == protected.route
    assert got.route.backup.direction_ids == protected.route.backup.direction_ids
    assert got.request.end == math.inf
    assert again.book.get(NOC, modified.name) == modified
    assert dict(again.book.get(NOC, active.name).labels) == {"exp": "cms"}
    assert again.book.get(NOC, released.name).reason == released.reason
    assert again.book.get(NOC, scheduled.name).request == scheduled.request
    assert again.book.next_deadline() == T0 + 600
    assert again.book.take_events() == []

    # the clock went on while it was down: the first tick catches up
    late = again.reopen(FakeClock(T0 + 2 * HOUR))
    late.book.tick()
    states = {r.id: r.state for r in late.book.list(NOC)[0]}
    assert states == {active.id: State.EXPIRED, scheduled.id: State.EXPIRED, protected.id: State.ACTIVE,
                      released.id: State.RELEASED}
    assert [b.id for b in late.ledger.bookings()] == [protected.id]
    assert sorted(e.reservation.id for e in late.book.take_events()) == sorted([active.id, scheduled.id])
    final = late.reopen()
    assert {r.id: r.state for r in final.book.list(NOC)[0]} == states


def test_live_reservation_without_its_booking_fails_at_start(make_env):
    env = make_env()
    lost = env.book.create(RUCIO, env.req("dtn1", "dtn3", 30 * G, end=T0 + HOUR))
    lost_later = env.book.create(RUCIO, env.req("dtn4", "dtn5", start=T0 + 600, end=T0 + 1200))
    kept = env.book.create(RUCIO, env.req("dtn6", "dtn7"))
    env.ledger.close()
    with sqlite3.connect(env.db) as db:
        db.execute("DELETE FROM bookings WHERE id IN (?, ?)", (lost.id, lost_later.id))
    db.close()
    again = Env(RING8, env.db, env.clock)
    try:
        for r in (lost, lost_later):
            failed = again.book.get(RUCIO, r.name)
            assert failed.state is State.FAILED
            assert "booking" in failed.reason and "missing" in failed.reason
        assert again.book.get(RUCIO, kept.name).state is State.ACTIVE
        assert again.book.snapshot(RUCIO) == [again.book.get(RUCIO, kept.name)]
        assert again.book.next_deadline() == math.inf
        with pytest.raises(FailedPrecondition):
            again.book.modify(RUCIO, lost.name, bandwidth=1 * G)
        # the failure is kept
        third = again.reopen()
        assert third.book.get(RUCIO, lost.name).state is State.FAILED
        third.ledger.close()
    finally:
        again.ledger.close()


def test_orphan_booking_is_released_at_start(make_env):
    env = make_env()
    orphan = env.book.create(RUCIO, env.req("dtn1", "dtn3", 30 * G))
    kept = env.book.create(RUCIO, env.req("dtn4", "dtn5"))
    env.ledger.close()
    with sqlite3.connect(env.db) as db:
        db.execute("DELETE FROM reservations WHERE id=?", (orphan.id,))
    db.close()
    again = make_env(name="t.db")
    assert [b.id for b in again.ledger.bookings()] == [kept.id]
    assert all(free_now(again, d) == 100 * G for d in RING_1_3)
    with pytest.raises(NotFound):
        again.book.get(NOC, orphan.name)
    with sqlite3.connect(env.db) as db:
        rows = db.execute("SELECT id FROM bookings").fetchall()
    db.close()
    assert rows == [(kept.id,)]


# --- snapshot -------------------------------------------------------------------------------


def test_snapshot_is_live_visible_oldest_first(ring: Env):
    a = ring.book.create(RUCIO, ring.req("dtn1", "dtn2"))
    ring.clock.advance(1)
    b = ring.book.create(FTS, ring.req("dtn3", "dtn4"))
    ring.clock.advance(1)
    c = ring.book.create(RUCIO, ring.req("dtn5", "dtn6", start=T0 + 100, end=T0 + 200))
    ring.clock.advance(1)
    d = ring.book.create(RUCIO, ring.req("dtn7", "dtn8"))
    d = ring.book.release(RUCIO, d.name)
    assert ring.book.snapshot(RUCIO) == [a, c]
    assert ring.book.snapshot(FTS) == [b]
    assert ring.book.snapshot(NOC) == [a, b, c]
    assert ring.book.snapshot(RUCIO, c.name) == [c]
    assert ring.book.snapshot(RUCIO, d.id) == [d]
    with pytest.raises(NotFound):
        ring.book.snapshot(RUCIO, "0" * 32)


# --- property: random use never overbooks and every event is a legal transition -------------

ALLOWED = {
    (None, State.SCHEDULED), (None, State.PROVISIONING),
    (State.SCHEDULED, State.PROVISIONING), (State.SCHEDULED, State.RELEASED), (State.SCHEDULED, State.EXPIRED),
    (State.SCHEDULED, State.SCHEDULED),
    (State.PROVISIONING, State.ACTIVE),
    (State.ACTIVE, State.ACTIVE), (State.ACTIVE, State.RELEASED), (State.ACTIVE, State.EXPIRED),
}
DTNS = sorted(RING8.dtns)
PRINCIPALS = [RUCIO, FTS]

CREATE = st.tuples(st.just("create"), st.integers(0, 1), st.integers(0, 7), st.integers(1, 7),
                   st.sampled_from([10, 30, 50, 70, 100]), st.sampled_from([0, 0, 5, 20, 40]),
                   st.sampled_from([5, 20, 60, math.inf]), st.booleans(), st.sampled_from(["", "", "a", "b"]))
MODIFY = st.tuples(st.just("modify"), st.integers(0, 1), st.integers(0, 20), st.sampled_from([None, 20, 40, 90]),
                   st.sampled_from([None, 10, 50, math.inf]))
RELEASE = st.tuples(st.just("release"), st.integers(0, 1), st.integers(0, 20))
ADVANCE = st.tuples(st.just("advance"), st.integers(1, 30))
OPS = st.lists(st.one_of(CREATE, CREATE, MODIFY, RELEASE, ADVANCE, ADVANCE), min_size=5, max_size=30)


def check_invariants(book: ReservationBook, ledger: Ledger, events: list[Event]) -> None:
    everything: dict[str, Reservation] = {r.id: r for r in book.list(NOC, page_size=1000)[0]}
    live = {i: r for i, r in everything.items() if not r.state.is_final}
    # the ledger holds exactly the live reservations' bookings, in their current form
    assert {b.id for b in ledger.bookings()} == set(live)
    for r in live.values():
        booking = ledger.get(r.id)
        assert booking.bandwidth == r.request.bandwidth
        assert (booking.start, booking.end) == (r.request.start, r.request.end)
        assert booking.directions == r.route.direction_ids
    # no direction carries more than its capacity at any instant (use rises only at a start)
    by_direction: dict[str, list[Reservation]] = defaultdict(list)
    for r in live.values():
        for d in r.route.direction_ids:
            by_direction[d].append(r)
    for d, holders in by_direction.items():
        for t in {r.request.start for r in holders}:
            use = sum(r.request.bandwidth for r in holders if r.request.start <= t < r.request.end)
            assert use <= RING8.directions[d].capacity, (d, t)
    # events: numbered 1, 2, 3...; each reservation's history is a chain of legal transitions
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    history: dict[str, State | None] = {}
    for e in events:
        step = (e.previous, e.reservation.state)
        assert step in ALLOWED, step
        assert history.get(e.reservation.id) == e.previous
        history[e.reservation.id] = e.reservation.state
    assert history == {i: r.state for i, r in everything.items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_use_never_overbooks(ops: list[tuple]):
    clock = FakeClock()
    ledger = Ledger(RING8.capacities(), None, clock)
    try:
        book = ReservationBook(RING8, ledger, clock)
        events: list[Event] = []
        owners: dict[str, str] = {}  # reservation id -> owner, in creation order
        by_request: dict[tuple[str, str], Reservation] = {}
        for op in ops:
            now = clock.now()
            if op[0] == "create":
                _, who, src, hop, gbps, offset, length, protect, rid = op
                principal = PRINCIPALS[who]
                start = now + offset
                request = PathRequest(DTNS[src], DTNS[(src + hop) % len(DTNS)], gbps * G, start, start + length,
                                      protect=protect)
                earlier = by_request.get((principal.name, rid)) if rid else None
                try:
                    r = book.create(principal, request, request_id=rid)
                except AlreadyExists:
                    assert earlier is not None
                except (NoCapacity, FailedPrecondition):
                    assert earlier is None
                else:
                    if earlier is not None:
                        assert r.id == earlier.id
                    else:
                        assert r.id not in owners and r.owner == principal.name
                        owners[r.id] = principal.name
                        if rid:
                            by_request[(principal.name, rid)] = r
            elif op[0] == "modify" and owners:
                _, who, index, gbps, end = op
                name = list(owners)[index % len(owners)]
                try:
                    book.modify(PRINCIPALS[who], name, None if gbps is None else gbps * G,
                                None if end is None else now + end)
                except PermissionDenied:
                    assert owners[name] != PRINCIPALS[who].name
                except (NoCapacity, FailedPrecondition, InvalidArgument):
                    pass
            elif op[0] == "release" and owners:
                _, who, index = op
                name = list(owners)[index % len(owners)]
                try:
                    assert book.release(PRINCIPALS[who], name).state.is_final
                except PermissionDenied:
                    assert owners[name] != PRINCIPALS[who].name
            elif op[0] == "advance":
                clock.advance(op[1])
                book.tick()
            new_events = book.take_events()
            for e in new_events:
                event(f"{e.previous} -> {e.reservation.state}")
            events += new_events
            check_invariants(book, ledger, events)
    finally:
        ledger.close()


# --- loading over the same topology -------------------------------------------------------------


def test_a_restart_over_the_topology_it_was_booked_on_repairs_nothing(make_env):
    env = make_env()
    env.book.create(RUCIO, env.req("dtn1", "dtn3", 100 * G))  # a link full to the bit
    env.book.create(RUCIO, env.req("dtn4", "dtn6", 40 * G, protect=True))
    env.book.create(FTS, env.req("dtn2", "dtn7", 60 * G, start=T0 + HOUR, end=T0 + 2 * HOUR))
    before = [(r.id, r.state, r.request, r.route, r.reason) for r in env.book.list(NOC)[0]]
    booked = env.ledger.bookings()
    env.clock.advance(HOUR + 1)  # the scheduled one's window started while it was down
    again = env.reopen()
    assert again.book.repairs == [] and again.book.take_events() == []
    assert [(r.id, r.state, r.request, r.route, r.reason) for r in again.book.list(NOC)[0]] == before
    assert again.ledger.bookings() == booked and again.ledger.overbooked() == []
    again.ledger.close()
