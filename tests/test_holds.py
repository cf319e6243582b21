"""Two-phase reservations and the data plane apart from the booking (sdn_app.core.reservations):
held, committed, aborted, timed out; provisioned and released (NSI's release) within the window;
across a restart. Driven without threads by a FakeClock, on a SQLite file as the controller does."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity, NotFound, PermissionDenied
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role, State, Terms
from sdn_app.core.reservations import DEFAULT_HOLD_TIMEOUT, ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

G = 10**9
RING8 = Topology.load(builtin_topology("ring8"))
RUCIO = Principal("rucio", Role.SERVICE)
FTS = Principal("fts", Role.SERVICE)
ACCESS = "dtn1->s1:3"  # dtn1's access link towards the ring: 100G, on every path from dtn1


class Book:
    """A book that controls switches (its changes are what the provisioner would apply)."""

    def __init__(self, db: Path, clock: FakeClock | None = None, hold_timeout: float = DEFAULT_HOLD_TIMEOUT):
        self.db = db
        self.clock = clock or FakeClock()
        self.ledger = Ledger(RING8.capacities(), db, self.clock)
        self.book = ReservationBook(RING8, self.ledger, self.clock, provisioning=True, hold_timeout=hold_timeout)

    def request(self, bandwidth: int = 40 * G, dst: str = "dtn2", start: float | None = None,
                end: float | None = None) -> PathRequest:
        now = self.clock.now()
        return PathRequest("dtn1", dst, bandwidth, now if start is None else start, end or now + 3600)

    def free(self) -> int:
        now = self.clock.now()
        return self.ledger.free(ACCESS, now, now + 1)

    def transitions(self) -> list[tuple[State | None, State, str]]:
        return [(e.previous, e.reservation.state, e.reason) for e in self.book.take_events()]

    def installed(self, reservation_id: str) -> bool:
        """Whether the changes queued so far leave the reservation's flows on the switches."""
        for change in self.book.take_changes():
            if change.reservation_id == reservation_id and change.steps:
                self._installed = change.confirm  # installs and moves are confirmed, removals not
        return getattr(self, "_installed", False)

    def reopen(self) -> Book:
        self.ledger.close()
        return Book(self.db, self.clock)


@pytest.fixture
def env(tmp_path: Path):
    books = [Book(tmp_path / "state.db")]
    yield books[0]
    for b in books:
        b.ledger.close()


def test_a_hold_books_without_flows_and_commit_installs_them(env):
    held = env.book.create(RUCIO, env.request(), terms=Terms(hold=True))
    assert held.state is State.HELD and held.hold_until == env.clock.now() + DEFAULT_HOLD_TIMEOUT
    assert env.free() == 60 * G  # held bandwidth counts against capacity for everyone
    assert env.book.take_changes() == []  # nothing on the switches while held
    with pytest.raises(NoCapacity, match="dtn1->s1:3"):
        env.book.create(FTS, env.request(70 * G, dst="dtn3"))
    committed = env.book.commit(RUCIO, held.name)
    assert committed.state is State.PROVISIONING and committed.hold_until == 0
    assert env.installed(held.id)
    assert [(p, s) for p, s, _ in env.transitions()] == [(None, State.HELD), (State.HELD, State.PROVISIONING)]
    assert env.book.commit(RUCIO, held.name).state is State.PROVISIONING  # a retry changes nothing
    assert env.transitions() == []


def test_commit_before_the_window_schedules_it(env):
    start = env.clock.now() + 600
    held = env.book.create(RUCIO, env.request(start=start, end=start + 600), terms=Terms(hold=True))
    assert env.book.commit(RUCIO, held.name).state is State.SCHEDULED
    env.clock.advance(600)
    env.book.tick()
    assert env.book.get(RUCIO, held.name).state is State.PROVISIONING


def test_abort_frees_exactly_the_booking(env):
    before = env.free()
    held = env.book.create(RUCIO, env.request(), terms=Terms(hold=True))
    aborted = env.book.abort(RUCIO, held.name)
    assert aborted.state is State.RELEASED and "aborted by rucio" in aborted.reason
    assert env.free() == before and held.id not in env.ledger
    with pytest.raises(FailedPrecondition, match="not HELD"):
        env.book.abort(RUCIO, held.name)
    with pytest.raises(FailedPrecondition, match="RELEASED"):
        env.book.commit(RUCIO, held.name)


def test_an_expired_hold_frees_its_booking_and_refuses_commit(env):
    before = env.free()
    held = env.book.create(RUCIO, env.request(), terms=Terms(hold=True))
    env.clock.advance(DEFAULT_HOLD_TIMEOUT - 1)
    env.book.tick()
    assert env.book.get(RUCIO, held.name).state is State.HELD
    env.clock.advance(1)
    assert env.book.next_deadline() <= env.clock.now()
    env.book.tick()
    expired = env.book.get(RUCIO, held.name)
    assert expired.state is State.EXPIRED and "hold timed out" in expired.reason
    assert env.free() == before
    assert env.transitions()[-1][:2] == (State.HELD, State.EXPIRED)
    with pytest.raises(FailedPrecondition, match="hold expired at"):
        env.book.commit(RUCIO, held.name)


def test_commit_after_the_timeout_is_refused_even_before_a_tick(env):
    held = env.book.create(RUCIO, env.request(), terms=Terms(hold=True))
    env.clock.advance(DEFAULT_HOLD_TIMEOUT + 5)
    with pytest.raises(FailedPrecondition, match="hold expired"):
        env.book.commit(RUCIO, held.name)
    assert held.id not in env.ledger


def test_holds_survive_a_restart_and_expire_on_start_when_their_time_passed(env):
    kept = env.book.create(RUCIO, env.request(), terms=Terms(hold=True))
    lapsing = env.book.create(RUCIO, env.request(dst="dtn3"), terms=Terms(hold=True))
    env.clock.advance(60)
    env.book.commit(RUCIO, kept.name)
    later = env.book.create(RUCIO, env.request(10 * G, dst="dtn4"), terms=Terms(hold=True))
    env.clock.advance(DEFAULT_HOLD_TIMEOUT - 30)  # `lapsing` timed out while no controller ran
    restarted = env.reopen()
    assert restarted.book.next_deadline() <= restarted.clock.now()
    restarted.book.tick()
    assert restarted.book.get(RUCIO, lapsing.name).state is State.EXPIRED
    assert lapsing.id not in restarted.ledger
    still = restarted.book.get(RUCIO, later.name)
    assert still.state is State.HELD and still.hold_until == later.hold_until
    assert restarted.book.commit(RUCIO, later.name).state is State.PROVISIONING
    assert restarted.book.get(RUCIO, kept.name).state is State.PROVISIONING
    restarted.ledger.close()


def test_only_the_owner_or_an_admin_commits_and_unknown_names_are_not_found(env):
    held = env.book.create(RUCIO, env.request(), terms=Terms(hold=True))
    with pytest.raises(PermissionDenied):
        env.book.commit(FTS, held.name)
    with pytest.raises(PermissionDenied):
        env.book.abort(FTS, held.name)
    assert env.book.get(RUCIO, held.name).state is State.HELD
    with pytest.raises(NotFound):
        env.book.commit(RUCIO, "reservations/" + "0" * 32)
    assert env.book.commit(Principal("noc", Role.ADMIN), held.name).state is State.PROVISIONING


def test_a_retried_held_request_returns_the_same_hold(env):
    first = env.book.create(RUCIO, env.request(), request_id="r-1", terms=Terms(hold=True))
    again = env.book.create(RUCIO, env.request(), request_id="r-1", terms=Terms(hold=True))
    assert again.id == first.id and len(env.ledger) == 1


def test_release_of_the_data_plane_keeps_the_booking_and_provision_brings_the_flows_back(env):
    r = env.book.create(RUCIO, env.request())
    env.book.provisioned(r.id, None)
    assert env.installed(r.id)
    released = env.book.unprovision(RUCIO, r.name)
    assert released.state is State.RESERVED and not released.provisioned
    assert not env.installed(r.id)  # flows removed
    assert env.free() == 60 * G  # the booking kept
    again = env.book.provision(RUCIO, r.name)
    assert again.state is State.PROVISIONING and env.installed(r.id)
    env.book.provisioned(r.id, None)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE
    states = [(p, s) for p, s, _ in env.transitions()]
    assert states[-3:] == [(State.ACTIVE, State.RESERVED), (State.RESERVED, State.PROVISIONING),
                           (State.PROVISIONING, State.ACTIVE)]


def test_a_manually_provisioned_reservation_waits_for_provision(env):
    start = env.clock.now() + 60
    r = env.book.create(RUCIO, env.request(start=start, end=start + 600), terms=Terms(provision=False))
    env.clock.advance(60)
    env.book.tick()
    waiting = env.book.get(RUCIO, r.name)
    assert waiting.state is State.RESERVED and not env.installed(r.id)
    assert env.book.provision(RUCIO, r.name).state is State.PROVISIONING and env.installed(r.id)


def test_a_held_reservation_cannot_be_provisioned_before_commit(env):
    held = env.book.create(RUCIO, env.request(), terms=Terms(hold=True))
    with pytest.raises(FailedPrecondition, match="commit it first"):
        env.book.provision(RUCIO, held.name)
    with pytest.raises(FailedPrecondition, match="commit it first"):
        env.book.unprovision(RUCIO, held.name)
    assert env.book.get(RUCIO, held.name).state is State.HELD


def test_a_released_data_plane_survives_a_restart_without_flows(env):
    r = env.book.create(RUCIO, env.request())
    env.book.provisioned(r.id, None)
    env.book.unprovision(RUCIO, r.name)
    restarted = env.reopen()
    assert restarted.book.switch_plan("s1").flows == ()
    kept = restarted.book.get(RUCIO, r.name)
    assert kept.state is State.RESERVED and not kept.provisioned
    restarted.ledger.close()


def test_a_deadline_is_booked_as_a_schedule_whose_meter_follows_its_steps(env):
    now = env.clock.now()
    # 60G from now for 10 minutes on dtn1 -> dtn3 (both ways round the ring): 40G left until then
    blocker = env.book.create(FTS, PathRequest("dtn1", "dtn4", 60 * G, now, now + 600))
    size = 100 * G * 1200 // 8 * 8  # 100G for 20 minutes, in bits
    r = env.book.book_by_deadline(RUCIO, "dtn1", "dtn3", size, now + 3 * 3600)
    # the earliest finish: 40G while the blocker holds dtn1's access link, then all of it
    # the earliest finish (at 1560 s): 40G while the blocker holds dtn1's access link, then all of
    # it, the last step kept on a tenth of the schedule's length past that, for a slow start
    assert [(s.start - now, s.end - now, s.bandwidth) for s in r.schedule] == [(0, 600, 40 * G),
                                                                               (600, 1716, 100 * G)]
    assert r.meter_bps == 40 * G
    env.book.provisioned(r.id, None)
    env.book.release(FTS, blocker.name)
    first_end = r.schedule[0].end
    env.clock.advance(first_end - now)
    env.book.tick()
    after = env.book.get(RUCIO, r.name)
    assert after.meter_bps == 100 * G and "schedule: 40G -> 100G" in after.reason
    meters = {m.rate_bps for m in env.book.installs.plan(r.id).meters if m.direction == "forward"}
    assert meters == {100 * G}


def test_a_deadline_that_cannot_be_met_names_the_earliest_finish(env):
    from sdn_app.core.schedules import DeadlineMissed

    now = env.clock.now()
    size = 100 * G * 3600  # an hour at 100G, in bits
    with pytest.raises(DeadlineMissed, match="earliest possible finish") as missed:
        env.book.book_by_deadline(RUCIO, "dtn1", "dtn3", size, now + 1800)
    assert missed.value.earliest >= now + 3600 and missed.value.bandwidth == 100 * G
    assert len(env.ledger) == 0
    with pytest.raises(InvalidArgument, match="deadline"):
        env.book.book_by_deadline(RUCIO, "dtn1", "dtn3", size, now - 1)
    with pytest.raises(InvalidArgument, match="size_bytes"):
        env.book.book_by_deadline(RUCIO, "dtn1", "dtn3", 0, now + 3600)
    assert env.book.earliest_finish(RUCIO, "dtn1", "dtn3", size, now)[-1].end == missed.value.earliest


def test_the_grace_after_a_schedule_stops_at_the_deadline_and_at_the_next_booking(env):
    now = env.clock.now()
    size = 100 * G * 1200  # 20 minutes at 100G
    tight = env.book.book_by_deadline(RUCIO, "dtn1", "dtn3", size, now + 1250)
    assert [(s.start - now, s.end - now) for s in tight.schedule] == [(0, 1250)]
    env.book.release(RUCIO, tight.name)
    env.book.create(FTS, PathRequest("dtn1", "dtn4", 60 * G, now + 1230, now + 7200))  # dtn1's access link
    blocked = env.book.book_by_deadline(RUCIO, "dtn1", "dtn3", size, now + 3600)
    assert blocked.schedule[-1].end - now == 1230 and blocked.schedule[-1].bandwidth == 100 * G


def test_a_scheduled_reservation_moves_off_a_failed_link_with_its_steps(env):
    now = env.clock.now()
    r = env.book.book_by_deadline(RUCIO, "dtn1", "dtn3", 50 * G * 600, now + 3600)
    env.book.provisioned(r.id, None)
    env.book.set_link_state("s1-s2", up=False)
    moved = env.book.get(RUCIO, r.name)
    assert moved.state is State.MOVING and "s1-s2" not in moved.route.primary.links
    booking = env.ledger.get(r.id)
    assert booking.directions == moved.route.direction_ids
    assert [(s.start, s.end, s.bandwidth) for s in booking.steps] == [(s.start, s.end, s.bandwidth)
                                                                     for s in r.schedule]
