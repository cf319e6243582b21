"""The bandwidth ledger: admission by concurrent peak, atomicity, changes, expiry, persistence.

Times are small numbers of seconds on a `FakeClock` that starts at 0; bandwidths are bits/s.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NoCapacity, NotFound
from sdn_app.core.ledger import STEPS_KEY, Booking, Ledger
from sdn_app.core.paths import PathFinder, PathRequest
from sdn_app.core.reservation import ScheduleStep
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import parse_topology_spec

G = 10**9
T = 10**12
CAPS = {"a": 100 * G, "b": 100 * G, "c": 100 * G, "d": 400 * G}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(0)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def ledger(db: Path, clock: FakeClock):
    led = Ledger(CAPS, db, clock)
    yield led
    led.close()


def db_rows(path: Path) -> list[tuple]:
    """The bookings table as stored, read with a connection of our own."""
    con = sqlite3.connect(path)
    try:
        return con.execute('SELECT id, bandwidth, start, "end", directions, meta FROM bookings ORDER BY id').fetchall()
    finally:
        con.close()


def reopened(path: Path, capacities=CAPS) -> list[Booking]:
    """`bookings()` of a second ledger opened on the same file."""
    other = Ledger(capacities, path, FakeClock(0))
    try:
        return other.bookings()
    finally:
        other.close()


def state(led: Ledger) -> tuple:
    """Everything observable about the ledger: bookings and free bandwidth per direction."""
    return (led.bookings(), {d: led.free(d, 0, math.inf) for d in led.capacities})


# -- PR #25: admission by worst-case concurrent use, not the sum of everything in the window ---


def test_pr25_request_fits_under_concurrent_peak(ledger: Ledger) -> None:
    ledger.reserve(["a"], 60 * G, 0, 10, booking_id="early")
    ledger.reserve(["a"], 60 * G, 10, 20, booking_id="late")
    # Both touch [5, 15) but never overlap each other: the peak is 60G, not 120G.
    assert ledger.used("a", 5, 15) == 60 * G
    assert ledger.free("a", 5, 15) == 40 * G
    booking = ledger.reserve(["a"], 40 * G, 5, 15, booking_id="middle")
    assert booking.bandwidth == 40 * G
    assert ledger.used("a", 5, 15) == 100 * G
    assert ledger.used("a", 0, 5) == 60 * G


def test_pr25_request_above_concurrent_peak_refused(ledger: Ledger) -> None:
    ledger.reserve(["a"], 60 * G, 0, 10, booking_id="early")
    ledger.reserve(["a"], 60 * G, 10, 20, booking_id="late")
    before = state(ledger)
    with pytest.raises(NoCapacity) as err:
        ledger.reserve(["a"], 50 * G, 5, 15, booking_id="middle")
    assert err.value.bottleneck == "a"
    assert err.value.free_bps == 40 * G
    assert err.value.code == "RESOURCE_EXHAUSTED"
    assert state(ledger) == before
    assert "middle" not in ledger


def test_windows_are_half_open(ledger: Ledger) -> None:
    ledger.reserve(["a"], 100 * G, 0, 10, booking_id="first")
    ledger.reserve(["a"], 100 * G, 10, 20, booking_id="second")  # starts exactly when first ends
    assert ledger.used("a", 10, 20) == 100 * G
    assert ledger.used("a", 20, 30) == 0  # the end instant itself is free
    assert ledger.used("a", -5, 0) == 0
    with pytest.raises(NoCapacity):
        ledger.reserve(["a"], 1, 9, 10)
    with pytest.raises(NoCapacity):
        ledger.reserve(["a"], 1, 19, 20)
    ledger.reserve(["a"], 100 * G, 20, 21, booking_id="third")


def test_query_ending_at_a_booking_start_does_not_see_it(ledger: Ledger) -> None:
    ledger.reserve(["a"], 70 * G, 10, 20)
    assert ledger.used("a", 0, 10) == 0
    assert ledger.used("a", 0, 10.5) == 70 * G
    assert ledger.used("a", 19.5, 30) == 70 * G
    assert ledger.free("a", 20, math.inf) == 100 * G


# -- OSCARS #37: never more than capacity at any instant -----------------------------------


def test_oscars37_terabit_on_100g_refused(ledger: Ledger) -> None:
    with pytest.raises(NoCapacity) as err:
        ledger.reserve(["a"], 1 * T, 0, 10)
    assert err.value.bottleneck == "a"
    assert err.value.free_bps == 100 * G
    assert "a" in str(err.value)
    assert ledger.bookings() == []
    assert db_rows(ledger.path) == []


def test_exactly_the_free_capacity_is_admitted_one_bit_more_is_not(ledger: Ledger) -> None:
    ledger.reserve(["a"], 30 * G, 0, math.inf, booking_id="base")
    with pytest.raises(NoCapacity) as err:
        ledger.reserve(["a"], 70 * G + 1, 5, 10)
    assert err.value.free_bps == 70 * G
    ledger.reserve(["a"], 70 * G, 5, 10, booking_id="exact")
    assert ledger.free("a", 5, 10) == 0
    with pytest.raises(NoCapacity) as err:
        ledger.reserve(["a"], 1, 0, 100)
    assert err.value.free_bps == 0
    assert [b.id for b in ledger.bookings()] == ["base", "exact"]


def test_open_ended_booking_blocks_all_later_windows(ledger: Ledger) -> None:
    ledger.reserve(["a"], 80 * G, 10, math.inf)
    assert ledger.free("a", 1_000_000, 1_000_001) == 20 * G
    assert ledger.free("a", 0, 10) == 100 * G
    with pytest.raises(NoCapacity):
        ledger.reserve(["a"], 21 * G, 5000, 6000)


# -- atomic admission over a path ----------------------------------------------------------


def test_path_admission_is_all_or_nothing(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["c"], 50 * G, 0, 100, booking_id="blocker")
    before = state(ledger)
    rows = db_rows(db)
    with pytest.raises(NoCapacity) as err:
        ledger.reserve(["a", "b", "c"], 60 * G, 10, 20, booking_id="path")
    assert err.value.bottleneck == "c"
    assert err.value.free_bps == 50 * G
    assert "c" in str(err.value)
    assert ledger.used("a", 0, math.inf) == 0
    assert ledger.used("b", 0, math.inf) == 0
    assert ledger.free("a", 10, 20) == ledger.free("b", 10, 20) == 100 * G
    assert state(ledger) == before
    assert db_rows(db) == rows
    assert reopened(db) == before[0]


def test_refusal_names_the_first_direction_without_room(ledger: Ledger) -> None:
    ledger.reserve(["b", "c"], 90 * G, 0, 10)
    with pytest.raises(NoCapacity) as err:
        ledger.reserve(["a", "c", "b"], 20 * G, 0, 10)
    assert err.value.bottleneck == "c"
    assert err.value.free_bps == 10 * G


def test_admitted_path_books_every_direction(ledger: Ledger) -> None:
    booking = ledger.reserve(["a", "b", "c"], 60 * G, 10, 20, booking_id="path")
    assert booking.directions == ("a", "b", "c")
    for direction in "abc":
        assert ledger.used(direction, 10, 20) == 60 * G
    assert ledger.used("d", 10, 20) == 0


def test_repeated_direction_is_booked_once(ledger: Ledger) -> None:
    booking = ledger.reserve(["a", "b", "a"], 60 * G, 0, 10)
    assert booking.directions == ("a", "b")
    assert ledger.used("a", 0, 10) == 60 * G


# -- modify --------------------------------------------------------------------------------


def test_modify_raise_bandwidth_that_fits(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["a"], 40 * G, 0, 10, booking_id="other")
    ledger.reserve(["a"], 40 * G, 0, 10, booking_id="mine")
    new = ledger.modify("mine", bandwidth=60 * G)
    assert new.bandwidth == 60 * G
    assert ledger.get("mine") == new
    assert ledger.free("a", 0, 10) == 0
    assert reopened(db) == ledger.bookings()


def test_modify_own_bandwidth_is_not_counted_twice(ledger: Ledger) -> None:
    ledger.reserve(["a", "b"], 60 * G, 0, 10, booking_id="mine")
    assert ledger.modify("mine", bandwidth=100 * G).bandwidth == 100 * G
    assert ledger.modify("mine", bandwidth=1).bandwidth == 1
    assert ledger.free("a", 0, 10) == 100 * G - 1


def test_modify_raise_bandwidth_that_does_not_fit_leaves_booking(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["a"], 40 * G, 0, 10, booking_id="other")
    old = ledger.reserve(["a", "b"], 40 * G, 5, 15, booking_id="mine")
    before, rows = state(ledger), db_rows(db)
    with pytest.raises(NoCapacity) as err:
        ledger.modify("mine", bandwidth=61 * G)
    assert err.value.bottleneck == "a"
    assert err.value.free_bps == 60 * G
    assert ledger.get("mine") == old
    assert state(ledger) == before
    assert db_rows(db) == rows


def test_modify_extend_end_into_later_booking_refused(ledger: Ledger, db: Path) -> None:
    old = ledger.reserve(["a"], 60 * G, 0, 10, booking_id="mine")
    ledger.reserve(["a"], 60 * G, 10, 20, booking_id="later")
    before, rows = state(ledger), db_rows(db)
    with pytest.raises(NoCapacity):
        ledger.modify("mine", end=15)
    with pytest.raises(NoCapacity):
        ledger.modify("mine", end=math.inf)
    assert ledger.get("mine") == old
    assert state(ledger) == before
    assert db_rows(db) == rows
    # Shrinking the later booking makes room for the extension.
    ledger.modify("later", bandwidth=40 * G)
    assert ledger.modify("mine", end=15).end == 15
    assert ledger.used("a", 10, 15) == 100 * G


def test_modify_shorten_end_frees_the_tail(ledger: Ledger) -> None:
    ledger.reserve(["a"], 100 * G, 0, math.inf, booking_id="mine")
    ledger.modify("mine", end=10)
    assert ledger.free("a", 10, 20) == 100 * G
    with pytest.raises(InvalidArgument):
        ledger.modify("mine", end=0)  # not after start
    assert ledger.get("mine").end == 10


def test_modify_move_to_new_path_ignores_its_old_booking(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["a", "b"], 60 * G, 0, 10, booking_id="mine")
    moved = ledger.modify("mine", directions=["b", "c"])  # shares b with the old path
    assert moved.directions == ("b", "c")
    assert moved.bandwidth == 60 * G
    assert ledger.used("a", 0, 10) == 0
    assert ledger.used("b", 0, 10) == 60 * G
    assert ledger.used("c", 0, 10) == 60 * G
    assert reopened(db) == ledger.bookings()


def test_modify_move_and_raise_together(ledger: Ledger) -> None:
    ledger.reserve(["a", "b"], 60 * G, 0, 10, booking_id="mine")
    moved = ledger.modify("mine", directions=["b", "d"], bandwidth=100 * G)
    assert ledger.used("b", 0, 10) == 100 * G
    assert ledger.used("d", 0, 10) == 100 * G
    assert ledger.used("a", 0, 10) == 0
    assert moved.bandwidth == 100 * G


def test_modify_move_onto_a_full_direction_refused(ledger: Ledger, db: Path) -> None:
    old = ledger.reserve(["a", "b"], 60 * G, 0, 10, booking_id="mine")
    ledger.reserve(["c"], 50 * G, 5, 6, booking_id="blocker")
    before, rows = state(ledger), db_rows(db)
    with pytest.raises(NoCapacity) as err:
        ledger.modify("mine", directions=["b", "c"])
    assert err.value.bottleneck == "c"
    assert ledger.get("mine") == old
    assert state(ledger) == before
    assert db_rows(db) == rows


def test_modify_meta_only(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["a"], 1 * G, 0, 10, booking_id="mine", meta={"src": "dtn1"})
    new = ledger.modify("mine", meta={"src": "dtn1", "dst": "dtn2", "streams": 8})
    assert new.meta == {"src": "dtn1", "dst": "dtn2", "streams": 8}
    assert reopened(db) == ledger.bookings()


def test_modify_unknown_booking_not_found(ledger: Ledger) -> None:
    with pytest.raises(NotFound):
        ledger.modify("nope", bandwidth=1)
    ledger.reserve(["a"], 1, 0, 10, booking_id="x")
    ledger.release("x")
    with pytest.raises(NotFound):
        ledger.modify("x", end=20)


@pytest.mark.parametrize(
    "change",
    [
        {"bandwidth": 0},
        {"bandwidth": -5},
        {"bandwidth": True},
        {"bandwidth": 1.5},
        {"end": 5},
        {"end": 2},
        {"end": math.nan},
        {"directions": []},
    ],
)
def test_modify_bad_change_invalid_and_unchanged(ledger: Ledger, db: Path, change: dict) -> None:
    old = ledger.reserve(["a"], 10 * G, 5, 10, booking_id="mine")
    rows = db_rows(db)
    with pytest.raises(InvalidArgument):
        ledger.modify("mine", **change)
    assert ledger.get("mine") == old
    assert db_rows(db) == rows


def test_modify_to_unknown_direction_not_found(ledger: Ledger) -> None:
    old = ledger.reserve(["a"], 10 * G, 0, 10, booking_id="mine")
    with pytest.raises(NotFound):
        ledger.modify("mine", directions=["a", "zz"])
    assert ledger.get("mine") == old


# -- release -------------------------------------------------------------------------------


def test_release_frees_bandwidth(ledger: Ledger, db: Path) -> None:
    booking = ledger.reserve(["a", "b"], 100 * G, 0, 10, booking_id="mine")
    with pytest.raises(NoCapacity):
        ledger.reserve(["a"], 1, 0, 10)
    assert ledger.release("mine") == booking
    assert "mine" not in ledger
    assert len(ledger) == 0
    assert ledger.free("a", 0, 10) == ledger.free("b", 0, 10) == 100 * G
    assert db_rows(db) == []
    ledger.reserve(["a"], 100 * G, 0, 10)


def test_release_twice_not_found(ledger: Ledger) -> None:
    ledger.reserve(["a"], 1 * G, 0, 10, booking_id="mine")
    ledger.release("mine")
    with pytest.raises(NotFound):
        ledger.release("mine")
    with pytest.raises(NotFound):
        ledger.release("never-was")
    with pytest.raises(NotFound):
        ledger.get("mine")


# -- expiry --------------------------------------------------------------------------------


def test_expire_removes_ended_bookings(ledger: Ledger, clock: FakeClock, db: Path) -> None:
    short = ledger.reserve(["a"], 10 * G, 0, 10, booking_id="short")
    long = ledger.reserve(["a"], 10 * G, 0, 20, booking_id="long")
    forever = ledger.reserve(["a"], 10 * G, 5, math.inf, booking_id="forever")
    assert ledger.expire() == []
    clock.set(9.5)
    assert ledger.expire() == []
    clock.set(10)  # end == now: the window [0, 10) is over
    assert ledger.expire() == [short]
    assert [b.id for b in ledger.bookings()] == ["forever", "long"]
    clock.set(1e9)
    assert ledger.expire() == [long]
    assert ledger.bookings() == [forever]
    assert [row[0] for row in db_rows(db)] == ["forever"]
    assert ledger.used("a", 0, 20) == 10 * G


def test_expire_returns_by_end_then_id_and_takes_explicit_now(ledger: Ledger, clock: FakeClock) -> None:
    ledger.reserve(["a"], 1, 0, 7, booking_id="z")
    ledger.reserve(["a"], 1, 0, 5, booking_id="y")
    ledger.reserve(["b"], 1, 0, 5, booking_id="x")
    ledger.reserve(["b"], 1, 0, 9, booking_id="w")
    assert [b.id for b in ledger.expire(now=8)] == ["x", "y", "z"]
    assert clock.now() == 0
    assert [b.id for b in ledger.bookings()] == ["w"]


def test_reserve_window_already_ended_invalid(ledger: Ledger, clock: FakeClock) -> None:
    clock.set(100)
    with pytest.raises(InvalidArgument):
        ledger.reserve(["a"], 1, 50, 100)
    with pytest.raises(InvalidArgument):
        ledger.reserve(["a"], 1, 0, 99)
    assert ledger.bookings() == []
    # A window that began in the past but has not ended yet is fine.
    assert ledger.reserve(["a"], 1, 50, 101).start == 50


def test_modify_cannot_end_in_the_past(ledger: Ledger, clock: FakeClock) -> None:
    old = ledger.reserve(["a"], 1, 0, 100, booking_id="mine")
    clock.set(50)
    with pytest.raises(InvalidArgument):
        ledger.modify("mine", end=40)
    assert ledger.get("mine") == old
    assert ledger.modify("mine", end=60).end == 60


# -- persistence ---------------------------------------------------------------------------


def test_reopen_gives_identical_bookings(db: Path, clock: FakeClock) -> None:
    led = Ledger(CAPS, db, clock)
    led.reserve(["a", "b"], 10 * G, 0, 10, booking_id="r1", meta={"src": "dtn1", "tags": ["x", 1]})
    led.reserve(["c"], 20 * G, 2.5, math.inf, booking_id="r2", meta={"nested": {"k": [1, 2.5, None]}})
    led.reserve(["d"], 30 * G, 1, 1000, booking_id="r3")
    led.reserve(["a"], 40 * G, 0, 50, booking_id="r4")
    led.modify("r1", bandwidth=15 * G, end=12.25)
    led.modify("r3", directions=["d", "a"])
    led.modify("r2", meta={"moved": True})
    led.release("r4")
    live = led.bookings()
    free = {d: led.free(d, 0, 2000) for d in CAPS}
    led.close()

    again = Ledger(CAPS, db, clock)
    try:
        assert again.bookings() == live
        by_id = {b.id: b for b in again.bookings()}
        assert by_id["r2"].end == math.inf
        assert by_id["r1"].end == 12.25 and by_id["r1"].bandwidth == 15 * G
        assert by_id["r3"].directions == ("d", "a")
        assert by_id["r2"].meta == {"moved": True}
        assert isinstance(by_id["r1"].bandwidth, int)
        assert {d: again.free(d, 0, 2000) for d in CAPS} == free
        # The reopened ledger admits against what it loaded.
        with pytest.raises(NoCapacity):
            again.reserve(["c"], 81 * G, 5, 6)
        with pytest.raises(AlreadyExists):
            again.reserve(["a"], 1, 0, 10, booking_id="r1")
    finally:
        again.close()


def test_reopen_empty_and_in_memory(db: Path) -> None:
    Ledger(CAPS, db, FakeClock(0)).close()
    assert reopened(db) == []
    mem = Ledger(CAPS, clock=FakeClock(0))
    mem.reserve(["a"], 1, 0, 10, booking_id="m")
    assert mem.path == ":memory:"
    assert [b.id for b in mem.bookings()] == ["m"]
    mem.close()


def test_meta_reads_back_as_stored(ledger: Ledger, db: Path) -> None:
    # Tuples come back from JSON as lists: the live booking must equal the reloaded one.
    booking = ledger.reserve(["a"], 1, 0, 10, booking_id="t", meta={"hops": ("s1", "s2")})
    assert reopened(db) == ledger.bookings() == [booking]


def test_reopen_with_a_missing_direction_loads_it_stranded(db: Path) -> None:
    led = Ledger(CAPS, db, FakeClock(0))
    led.reserve(["a", "c"], 1 * G, 0, 10, booking_id="uses-c")
    led.reserve(["a"], 1 * G, 0, 10, booking_id="only-a")
    led.close()
    smaller = {k: v for k, v in CAPS.items() if k != "c"}
    again = Ledger(smaller, db, FakeClock(0))
    try:
        assert again.stranded() == {"uses-c": ("c",)}
        assert [b.id for b in again.bookings()] == ["only-a", "uses-c"]  # nothing was dropped
        assert again.used("a", 0, 10) == 2 * G  # still counted where its directions exist
        moved = again.modify("uses-c", directions=["a", "b"])  # the book moves it off the missing one
        assert moved.directions == ("a", "b") and again.stranded() == {}
        assert again.used("b", 0, 10) == 1 * G
    finally:
        again.close()
    assert [row[0] for row in db_rows(db)] == ["only-a", "uses-c"]


def test_a_stranded_booking_can_be_released_and_expired(db: Path) -> None:
    clock = FakeClock(0)
    led = Ledger(CAPS, db, clock)
    led.reserve(["c", "a"], 1 * G, 0, 10, booking_id="one")
    led.reserve(["c"], 1 * G, 0, 5, booking_id="two")
    led.close()
    again = Ledger({"a": 100 * G}, db, clock)
    try:
        assert set(again.stranded()) == {"one", "two"}
        assert again.release("one").id == "one"
        assert [b.id for b in again.expire(6)] == ["two"]
        assert len(again) == 0 and again.used("a", 0, 10) == 0
    finally:
        again.close()


def test_overbooked_names_the_direction_its_peak_the_span_and_the_bookings(db: Path) -> None:
    clock = FakeClock(0)
    led = Ledger(CAPS, db, clock)
    led.reserve(["a"], 50 * G, 0, math.inf, booking_id="old")
    led.reserve(["a", "b"], 30 * G, 10, 20, booking_id="mid")
    led.reserve(["a"], 20 * G, 30, 40, booking_id="late")
    led.reserve(["b"], 70 * G, 0, 100, booking_id="fits-b")
    assert led.overbooked() == []  # as admitted
    led.close()
    again = Ledger({**CAPS, "a": 60 * G}, db, clock)
    try:
        [over] = again.overbooked()
        assert (over.direction, over.capacity, over.booked) == ("a", 60 * G, 80 * G)
        assert (over.start, over.end) == (10, 40)
        assert over.bookings == ("late", "mid", "old")
        # from 25 on only "late" (with "old") is over
        [later] = again.overbooked(25)
        assert (later.start, later.end, later.booked, later.bookings) == (30, 40, 70 * G, ("late", "old"))
        assert again.overbooked(40) == []
        assert again.free("a", 10, 20) == -20 * G
    finally:
        again.close()


def test_schema_version_mismatch_fails(db: Path) -> None:
    Ledger(CAPS, db, FakeClock(0)).close()
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE ledger_meta SET value='99' WHERE key='schema_version'")
    con.close()
    with pytest.raises(FailedPrecondition, match="99"):
        Ledger(CAPS, db, FakeClock(0))


def test_each_change_is_one_transaction(ledger: Ledger, clock: FakeClock) -> None:
    statements: list[str] = []
    ledger._db.set_trace_callback(statements.append)
    ledger.reserve(["a", "b"], 1, 0, 10, booking_id="x")
    ledger.reserve(["a"], 1, 0, 5, booking_id="y")
    ledger.modify("x", bandwidth=2, directions=["c"])
    ledger.release("x")
    clock.set(5)
    ledger.expire()
    ledger._db.set_trace_callback(None)
    begins = [s for s in statements if s.startswith("BEGIN")]
    commits = [s for s in statements if s == "COMMIT"]
    assert len(begins) == len(commits) == 5
    assert not [s for s in statements if s == "ROLLBACK"]


def _install_failing_trigger(db: Path, when: str, booking_id: str) -> None:
    """A trigger that aborts the statement touching `booking_id`, as a full disk would."""
    column = "OLD" if when == "DELETE" else "NEW"
    con = sqlite3.connect(db)
    with con:
        con.execute(
            f"CREATE TRIGGER boom BEFORE {when} ON bookings WHEN {column}.id = '{booking_id}' "
            "BEGIN SELECT RAISE(ABORT, 'simulated write failure'); END"
        )
    con.close()


def _drop_trigger(db: Path) -> None:
    con = sqlite3.connect(db)
    with con:
        con.execute("DROP TRIGGER boom")
    con.close()


def test_failed_write_on_reserve_changes_nothing(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["a"], 10 * G, 0, 10, booking_id="keep")
    _install_failing_trigger(db, "INSERT", "doomed")
    before, rows = state(ledger), db_rows(db)
    with pytest.raises(sqlite3.DatabaseError, match="simulated"):
        ledger.reserve(["a", "b"], 10 * G, 0, 10, booking_id="doomed")
    assert state(ledger) == before
    assert db_rows(db) == rows
    _drop_trigger(db)
    ledger.reserve(["a", "b"], 90 * G, 0, 10, booking_id="doomed")
    assert ledger.free("a", 0, 10) == 0
    assert reopened(db) == ledger.bookings()


def test_failed_write_on_modify_keeps_the_old_row(ledger: Ledger, db: Path) -> None:
    # modify deletes the old row and inserts the new one: the insert failing must not lose it.
    old = ledger.reserve(["a"], 10 * G, 0, 10, booking_id="mine")
    _install_failing_trigger(db, "INSERT", "mine")
    before, rows = state(ledger), db_rows(db)
    with pytest.raises(sqlite3.DatabaseError, match="simulated"):
        ledger.modify("mine", bandwidth=20 * G, directions=["b"])
    assert ledger.get("mine") == old
    assert state(ledger) == before
    assert db_rows(db) == rows
    assert reopened(db) == [old]
    _drop_trigger(db)
    assert ledger.modify("mine", bandwidth=20 * G, directions=["b"]).directions == ("b",)
    assert ledger.used("a", 0, 10) == 0
    assert reopened(db) == ledger.bookings()


def test_crash_between_delete_and_insert_of_modify(ledger: Ledger, db: Path, monkeypatch) -> None:
    old = ledger.reserve(["a"], 10 * G, 0, 10, booking_id="mine", meta={"v": 1})
    before, rows = state(ledger), db_rows(db)

    def crash(booking: Booking) -> None:
        raise OSError("process killed mid-change")

    monkeypatch.setattr(ledger, "_write", crash)
    with pytest.raises(OSError):
        ledger.modify("mine", bandwidth=20 * G)
    monkeypatch.undo()
    assert ledger.get("mine") == old
    assert state(ledger) == before
    assert db_rows(db) == rows
    assert ledger.modify("mine", bandwidth=20 * G).bandwidth == 20 * G


def test_failed_write_on_release_and_expire_changes_nothing(ledger: Ledger, db: Path, clock: FakeClock) -> None:
    ledger.reserve(["a"], 1, 0, 5, booking_id="first")
    ledger.reserve(["a"], 1, 0, 6, booking_id="second")
    ledger.reserve(["a"], 1, 0, 50, booking_id="stays")
    _install_failing_trigger(db, "DELETE", "second")
    before, rows = state(ledger), db_rows(db)
    with pytest.raises(sqlite3.DatabaseError, match="simulated"):
        ledger.release("second")
    clock.set(10)
    with pytest.raises(sqlite3.DatabaseError, match="simulated"):
        ledger.expire()  # "first" is deleted before "second" fails: both must stay
    assert state(ledger) == before
    assert db_rows(db) == rows
    _drop_trigger(db)
    assert [b.id for b in ledger.expire()] == ["first", "second"]
    assert reopened(db) == ledger.bookings()


def test_meta_that_is_not_json_changes_nothing(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["a"], 10 * G, 0, 10, booking_id="mine", meta={"v": 1})
    before, rows = state(ledger), db_rows(db)
    with pytest.raises(InvalidArgument):
        ledger.reserve(["a"], 10 * G, 0, 10, booking_id="bad", meta={"x": object()})
    with pytest.raises(InvalidArgument):
        ledger.modify("mine", bandwidth=20 * G, meta={"x": {1, 2}})
    with pytest.raises(InvalidArgument):
        ledger.reserve(["a"], 10 * G, 0, 10, booking_id="nan", meta={"x": math.nan})
    assert state(ledger) == before
    assert db_rows(db) == rows
    assert ledger.modify("mine", bandwidth=20 * G).bandwidth == 20 * G


# -- bad input -----------------------------------------------------------------------------


def test_duplicate_id_already_exists(ledger: Ledger) -> None:
    first = ledger.reserve(["a"], 10 * G, 0, 10, booking_id="dup")
    with pytest.raises(AlreadyExists):
        ledger.reserve(["b"], 20 * G, 5, 15, booking_id="dup")
    assert ledger.bookings() == [first]
    assert ledger.used("b", 0, 20) == 0


def test_generated_ids_are_unique(ledger: Ledger) -> None:
    ids = {ledger.reserve(["d"], 1, 0, 10).id for _ in range(20)}
    assert len(ids) == 20


def test_unknown_direction_not_found(ledger: Ledger) -> None:
    with pytest.raises(NotFound, match="zz"):
        ledger.reserve(["a", "zz"], 1, 0, 10)
    with pytest.raises(NotFound):
        ledger.free("zz", 0, 10)
    with pytest.raises(NotFound):
        ledger.used("zz", 0, 10)
    assert ledger.bookings() == []


@pytest.mark.parametrize("bandwidth", [0, -1, True, False, 1.5, 1e9, "10G", None])
def test_bad_bandwidth_invalid(ledger: Ledger, db: Path, bandwidth) -> None:
    with pytest.raises(InvalidArgument):
        ledger.reserve(["a"], bandwidth, 0, 10)
    assert ledger.bookings() == []
    assert db_rows(db) == []


@pytest.mark.parametrize(
    ("start", "end"),
    [(10, 10), (10, 5), (0, -math.inf), (math.nan, 10), (0, math.nan), (-1, 10), (math.inf, math.inf)],
)
def test_bad_window_invalid(ledger: Ledger, db: Path, start: float, end: float) -> None:
    with pytest.raises(InvalidArgument):
        ledger.reserve(["a"], 1, start, end)
    assert ledger.bookings() == []
    assert db_rows(db) == []


def test_times_beyond_what_a_calendar_shows_still_get_ledger_errors(ledger: Ledger, db: Path) -> None:
    # Messages name the window; a time past year 9999 must not turn a refusal into a crash.
    with pytest.raises(NoCapacity):
        ledger.reserve(["a"], 1 * T, 0, 1e20)
    with pytest.raises(InvalidArgument):
        ledger.reserve(["a"], 1, 1e20, 5)
    far = ledger.reserve(["a"], 1, 0, 1e20, booking_id="far")
    assert reopened(db) == [far]


def test_empty_directions_invalid(ledger: Ledger) -> None:
    with pytest.raises(InvalidArgument):
        ledger.reserve([], 1, 0, 10)
    with pytest.raises(InvalidArgument):
        ledger.reserve(iter(()), 1, 0, 10)
    assert ledger.bookings() == []


# -- queries -------------------------------------------------------------------------------


def test_free_and_used_over_windows(ledger: Ledger) -> None:
    ledger.reserve(["a"], 10 * G, 0, 10, booking_id="p")
    ledger.reserve(["a"], 20 * G, 5, 15, booking_id="q")
    ledger.reserve(["a"], 40 * G, 20, math.inf, booking_id="r")
    expected = {
        (0, 5): 10 * G,
        (0, 6): 30 * G,
        (10, 15): 20 * G,
        (14, 20): 20 * G,
        (15, 20): 0,
        (15, 21): 40 * G,
        (0, math.inf): 40 * G,
        (100, 200): 40 * G,
        (9.999, 10): 30 * G,
    }
    for (start, end), used in expected.items():
        assert ledger.used("a", start, end) == used, (start, end)
        assert ledger.free("a", start, end) == 100 * G - used, (start, end)
    assert ledger.used("b", 0, math.inf) == 0


def test_ignore_leaves_one_booking_out(ledger: Ledger) -> None:
    ledger.reserve(["a"], 60 * G, 0, 10, booking_id="early")
    ledger.reserve(["a"], 60 * G, 10, 20, booking_id="late")
    ledger.reserve(["a", "b"], 30 * G, 0, 20, booking_id="all")
    assert ledger.used("a", 0, 20) == 90 * G
    assert ledger.used("a", 0, 20, ignore="all") == 60 * G  # early and late never overlap
    assert ledger.used("a", 0, 20, ignore="early") == 90 * G
    assert ledger.used("a", 0, 10, ignore="late") == 90 * G
    assert ledger.used("a", 5, 15, ignore="early") == 90 * G
    assert ledger.free("a", 0, 10, ignore="early") == 70 * G
    assert ledger.used("a", 0, 20, ignore="unknown") == 90 * G
    assert ledger.used("b", 0, 20, ignore="early") == 30 * G  # not on b: no effect
    assert ledger.used("b", 0, 20, ignore="all") == 0
    assert ledger.used("a", 20, 30, ignore="all") == 0


def test_get_len_contains(ledger: Ledger) -> None:
    booking = ledger.reserve(["a"], 1, 0, 10, booking_id="k", meta={"who": "me"})
    assert ledger.get("k") == booking
    assert "k" in ledger and "other" not in ledger
    assert len(ledger) == 1
    assert booking.meta == {"who": "me"}
    assert booking.overlaps(9, 20) and not booking.overlaps(10, 20) and not booking.overlaps(-5, 0)
    with pytest.raises(NotFound):
        ledger.get("other")


# -- with the path finder ------------------------------------------------------------------

RING = {
    "name": "ring4",
    "switches": [{"name": f"s{i}", "dpid": i, "ports": ["1-3"]} for i in range(1, 5)],
    "links": [
        {"name": "l12", "a": "s1", "a_port": 1, "b": "s2", "b_port": 2, "capacity": "100G"},
        {"name": "l23", "a": "s2", "a_port": 1, "b": "s3", "b_port": 2, "capacity": "100G"},
        {"name": "l34", "a": "s3", "a_port": 1, "b": "s4", "b_port": 2, "capacity": "80G"},
        {"name": "l41", "a": "s4", "a_port": 1, "b": "s1", "b_port": 2, "capacity": "80G"},
    ],
    "dtns": [
        {"name": "dtn1", "switch": "s1", "port": 3, "ipv4": "10.0.0.1", "mac": "02:00:00:00:00:01",
         "nic_speed": "400G"},
        {"name": "dtn3", "switch": "s3", "port": 3, "ipv4": "10.0.0.3", "mac": "02:00:00:00:00:03",
         "nic_speed": "400G"},
    ],
}


@pytest.fixture
def ring() -> Topology:
    return Topology(parse_topology_spec(RING, "ring4"))


def test_widest_route_avoids_a_filled_link_and_returns_after_release(ring: Topology, db: Path) -> None:
    led = Ledger(ring.capacities(), db, FakeClock(0))
    finder = PathFinder(ring, led)
    request = PathRequest("dtn1", "dtn3", 10 * G, 100, 200, policy="widest")
    assert finder.route(request).primary.links == ("l12", "l23")  # 100G beats 80G

    s1_to_s2 = ring.link_directions["l12"][0].id
    led.reserve([s1_to_s2], 30 * G, 50, 150, booking_id="fill-1")
    led.reserve([s1_to_s2], 40 * G, 150, 300, booking_id="fill-2")
    # Each fill alone leaves 70G or 60G; the s4 side has 80G.
    route = finder.route(request)
    assert route.primary.links == ("l41", "l34")
    assert route.primary.free_bps == 80 * G
    # A request outside the filled window still goes the wide way.
    assert finder.route(PathRequest("dtn1", "dtn3", 10 * G, 300, 400, policy="widest")).primary.links == (
        "l12", "l23")

    led.release("fill-2")
    assert finder.route(request).primary.links == ("l41", "l34")  # 70G left on s1->s2 < 80G
    led.release("fill-1")
    assert finder.route(request).primary.links == ("l12", "l23")
    assert led.free(s1_to_s2, 0, math.inf) == 100 * G

    # Book the wide route; the next request goes around, unless it is this booking moving.
    wide = finder.route(request).primary
    led.reserve(wide.direction_ids, 60 * G, request.start, request.end, booking_id="r")
    assert finder.route(request).primary.links == ("l41", "l34")
    moving = finder.route(PathRequest("dtn1", "dtn3", 60 * G, 100, 200, policy="widest"), ignore="r")
    assert moving.primary.links == ("l12", "l23")
    assert moving.primary.free_bps == 100 * G
    led.close()


def test_shortest_route_refused_when_ring_is_full(ring: Topology, db: Path) -> None:
    led = Ledger(ring.capacities(), db, FakeClock(0))
    finder = PathFinder(ring, led)
    l12 = ring.link_directions["l12"][0].id  # s1->s2
    l41 = ring.link_directions["l41"][1].id  # s1->s4 (the link is declared s4 to s1)
    assert (ring.directions[l41].src, ring.directions[l41].dst) == ("s1", "s4")
    led.reserve([l12], 95 * G, 0, 100)
    led.reserve([l41], 75 * G, 0, 100)
    with pytest.raises(NoCapacity) as err:
        finder.route(PathRequest("dtn1", "dtn3", 10 * G, 10, 20))
    assert err.value.bottleneck in {l12, l41}
    # The reverse direction is untouched.
    assert finder.route(PathRequest("dtn3", "dtn1", 10 * G, 10, 20)).primary.hop_count == 2
    led.close()


# -- stepped bookings (a deadline transfer's schedule) ---------------------------------------

# 80G over [0, 10), 20G over [10, 20), 60G over [20, 30)
PROFILE = [(0, 10, 80 * G), (10, 20, 20 * G), (20, 30, 60 * G)]


def test_stepped_booking_holds_each_step_in_its_span(ledger: Ledger) -> None:
    booking = ledger.reserve(["a"], None, None, None, booking_id="s", steps=PROFILE)
    assert (booking.bandwidth, booking.start, booking.end) == (80 * G, 0, 30)  # the peak and the window
    assert booking.stepped and booking.segments == tuple(PROFILE)
    assert ledger.used("a", 0, 10) == 80 * G
    assert ledger.used("a", 10, 20) == 20 * G
    assert ledger.used("a", 12, 25) == 60 * G
    assert ledger.used("a", 30, 40) == 0
    assert ledger.usage("a", 5, 40) == [(5, 10, 80 * G), (10, 20, 20 * G), (20, 30, 60 * G), (30, 40, 0)]
    # Each step is admitted against what is free in its own span, not against the peak.
    ledger.reserve(["a"], 80 * G, 10, 20, booking_id="fills-the-dip")
    with pytest.raises(NoCapacity) as err:
        ledger.reserve(["a"], 20 * G + 1, 0, 10)
    assert err.value.free_bps == 20 * G
    ledger.reserve(["a"], 40 * G, 20, 30, booking_id="beside-the-last")
    with pytest.raises(NoCapacity):
        ledger.reserve(["a"], 1, 25, 26)
    plain = ledger.reserve(["b"], 5 * G, 0, 10)
    assert not plain.stepped and plain.segments == ((0, 10, 5 * G),)


def test_stepped_booking_is_admitted_per_step_and_refused_naming_the_step(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["b"], 90 * G, 12, 14, booking_id="busy-b")
    before = state(ledger)
    with pytest.raises(NoCapacity, match=r"link b has 10G free.*20G requested \(step 2 of 3 of its schedule\)") as err:
        ledger.reserve(["a", "b"], None, None, None, booking_id="s", steps=PROFILE)
    assert (err.value.bottleneck, err.value.free_bps) == ("b", 10 * G)
    assert state(ledger) == before and [row[0] for row in db_rows(db)] == ["busy-b"]  # nothing booked on "a" either
    # The what-if says the same and books nothing; at 10G the dip fits.
    with pytest.raises(NoCapacity, match="step 2 of 3"):
        ledger.check(["a", "b"], None, None, None, steps=PROFILE)
    fitting = [(0, 10, 80 * G), (10, 20, 10 * G), (20, 30, 60 * G)]
    ledger.check(["a", "b"], None, None, None, steps=fitting)
    assert state(ledger) == before
    assert ledger.reserve(["a", "b"], 80 * G, 0, 30, booking_id="s", steps=fitting).segments == tuple(fitting)


def test_stepped_booking_takes_schedule_steps(ledger: Ledger) -> None:
    steps = [ScheduleStep(0.0, 3200.0, 100 * G), ScheduleStep(3200.0, 4000.0, 7)]
    booking = ledger.reserve(["a"], None, None, None, steps=steps)
    assert booking.segments == ((0.0, 3200.0, 100 * G), (3200.0, 4000.0, 7))
    assert ledger.used("a", 3200, 4000) == 7


@pytest.mark.parametrize("steps, given, field", [
    ([], {}, "at least one step"),
    ([(0, 10, G), (11, 20, G)], {}, r"steps\[1\].*contiguous"),  # a gap
    ([(10, 20, G), (0, 10, G)], {}, r"steps\[1\].*contiguous"),  # out of order
    ([(0, 10, G), (10, 10, G)], {}, r"steps\[1\]: end"),  # empty
    ([(0, 10, G), (10, 20, 0)], {}, r"steps\[1\]: bandwidth"),
    ([(0, 10, G), (10, 20, 1.5)], {}, r"steps\[1\]: bandwidth"),
    ([(0, 10, G), (10, 20, True)], {}, r"steps\[1\]: bandwidth"),
    ([(0, math.inf, G), (math.inf, math.inf, G)], {}, r"steps\[0\]: end"),  # open only at the end
    ([(-1, 10, G)], {}, r"steps\[0\]: start"),
    ([(0, 10)], {}, r"steps\[0\]: expected"),
    ([(0, 10, G)], {"bandwidth": 2 * G}, "bandwidth"),
    ([(0, 10, G)], {"start": 1}, "start"),
    ([(0, 10, G)], {"end": 11}, "end"),
])
def test_bad_steps_invalid_and_nothing_booked(ledger: Ledger, db: Path, steps: list, given: dict,
                                               field: str) -> None:
    args = {"bandwidth": None, "start": None, "end": None, **given}
    with pytest.raises(InvalidArgument, match=field):
        ledger.reserve(["a"], args["bandwidth"], args["start"], args["end"], steps=steps)
    assert ledger.bookings() == [] and db_rows(db) == []


def test_a_booking_without_steps_still_needs_its_window_and_bandwidth(ledger: Ledger) -> None:
    with pytest.raises(InvalidArgument, match="needs a bandwidth"):
        ledger.reserve(["a"], None, 0, 10)
    with pytest.raises(InvalidArgument, match="ledger's own key"):
        ledger.reserve(["a"], G, 0, 10, meta={STEPS_KEY: []})


def test_stepped_booking_reopens_identical_and_stores_its_peak_in_the_row(ledger: Ledger, db: Path) -> None:
    stepped = ledger.reserve(["a", "b"], None, None, None, booking_id="s", steps=PROFILE, meta={"dtn": "dtn1"})
    open_ended = ledger.reserve(["c"], None, None, None, booking_id="t",
                                steps=[(0.5, 10.25, 3 * G), (10.25, math.inf, G)])
    ledger.reserve(["d"], G, 0, 10, booking_id="u")
    assert reopened(db) == ledger.bookings() == [stepped, open_ended, ledger.get("u")]
    again = reopened(db)
    assert again[0].segments == tuple(PROFILE) and again[0].meta == {"dtn": "dtn1"}
    assert again[1].end == math.inf and again[1].segments[-1] == (10.25, math.inf, G)
    # A reader that knows nothing of steps sees a constant booking at the peak: more, never less.
    row = db_rows(db)[0]
    assert row[:4] == ("s", 80 * G, 0, 30)
    assert STEPS_KEY in row[5]
    other = Ledger(CAPS, db, FakeClock(0))
    try:
        assert other.used("a", 10, 20) == 20 * G and other.used("c", 20, 30) == G
    finally:
        other.close()


def test_stepped_booking_moves_with_its_steps_checked_on_the_new_path(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["a"], None, None, None, booking_id="s", steps=PROFILE)
    ledger.reserve(["c"], 50 * G, 20, 25, booking_id="busy-c")  # leaves 50G where the last step needs 60G
    ledger.reserve(["b"], 80 * G, 10, 20, booking_id="busy-b")  # leaves exactly the 20G dip
    before = state(ledger)
    with pytest.raises(NoCapacity, match=r"link c has 50G free.*step 3 of 3") as err:
        ledger.modify("s", directions=["c"])
    assert err.value.bottleneck == "c"
    assert state(ledger) == before
    moved = ledger.modify("s", directions=["b"])
    assert moved.segments == tuple(PROFILE) and moved.directions == ("b",)
    assert ledger.used("a", 0, 30) == 0
    assert ledger.used("b", 10, 20) == 100 * G
    # Its own old steps are not counted against it: moving back and forth is fine.
    assert ledger.modify("s", directions=["b", "a"]).segments == tuple(PROFILE)
    assert reopened(db) == ledger.bookings()


def test_stepped_booking_keeps_its_bandwidth_and_end(ledger: Ledger, db: Path) -> None:
    ledger.reserve(["a"], None, None, None, booking_id="s", steps=PROFILE)
    before = state(ledger)
    with pytest.raises(FailedPrecondition, match="a stepped booking's bandwidth is its schedule's"):
        ledger.modify("s", bandwidth=10 * G)
    with pytest.raises(FailedPrecondition, match="a stepped booking's end is its schedule's"):
        ledger.modify("s", end=40)
    with pytest.raises(FailedPrecondition):
        ledger.modify("s", bandwidth=80 * G, end=31, directions=["b"])
    assert state(ledger) == before
    # Its own bandwidth and end (as a caller that always sends them does) change nothing.
    same = ledger.modify("s", bandwidth=80 * G, end=30, meta={"n": 1})
    assert same.segments == tuple(PROFILE) and same.meta == {"n": 1}
    assert reopened(db) == [same]
    with pytest.raises(NotFound):
        ledger.modify("nobody", bandwidth=1)


def test_stepped_booking_releases_and_expires(ledger: Ledger, clock: FakeClock, db: Path) -> None:
    ledger.reserve(["a"], None, None, None, booking_id="s", steps=PROFILE)
    ledger.reserve(["a"], None, None, None, booking_id="later", steps=[(30, 35, G), (35, 40, 2 * G)])
    assert ledger.release("s").segments == tuple(PROFILE)
    assert ledger.used("a", 0, 30) == 0
    ledger.reserve(["a"], None, None, None, booking_id="s", steps=PROFILE)
    clock.set(30)
    assert [b.id for b in ledger.expire()] == ["s"]
    assert ledger.expire(39.9) == []
    assert [b.id for b in ledger.expire(40)] == ["later"]
    assert len(ledger) == 0 and db_rows(db) == []


def test_ignore_clips_a_stepped_booking_to_the_window(ledger: Ledger) -> None:
    # The stepped booking peaks outside [12, 18); ignoring another booking must not count its peak.
    ledger.reserve(["a"], None, None, None, booking_id="s", steps=PROFILE)
    ledger.reserve(["a"], 5 * G, 10, 30, booking_id="other")
    assert ledger.used("a", 12, 18) == 25 * G
    assert ledger.used("a", 12, 18, ignore="other") == 20 * G
    assert ledger.used("a", 12, 18, ignore="s") == 5 * G
    assert ledger.used("a", 5, 25, ignore="other") == 80 * G
    assert ledger.usage("a", 0, 30, ignore="other") == [(0, 10, 80 * G), (10, 20, 20 * G), (20, 30, 60 * G)]
    assert ledger.usage("a", 0, 30, ignore="s") == [(0, 10, 0), (10, 30, 5 * G)]
    # A move of "other" is admitted against the dip, not the peak.
    assert ledger.modify("other", bandwidth=80 * G, end=20) is not None
    with pytest.raises(NoCapacity):
        ledger.modify("other", end=21)


def test_overbooked_follows_the_steps(db: Path) -> None:
    clock = FakeClock(0)
    led = Ledger(CAPS, db, clock)
    led.reserve(["a"], None, None, None, booking_id="s", steps=PROFILE)
    led.reserve(["a"], 30 * G, 10, 20, booking_id="dip")
    led.close()
    again = Ledger({**CAPS, "a": 70 * G}, db, clock)
    try:
        [over] = again.overbooked()  # only the first step is above 70G; the dip holds 50G
        assert (over.booked, over.start, over.end, over.bookings) == (80 * G, 0, 10, ("s",))
        assert again.overbooked(10) == []
    finally:
        again.close()
