"""Property tests of the bandwidth ledger against a brute-force model.

A hypothesis state machine draws a set of link directions with small capacities and runs
random reserve / modify / release / expire / clock-advance / reopen steps with small integer
windows that overlap a lot (some open-ended), stepped bookings (a profile of 1 to 4 contiguous
steps, each with a bandwidth of its own) mixed in with constant ones. The model keeps the
expected bookings and decides every admission by brute force (summing, at each instant, the
step of every booking active then), never through the ledger's own code. After every step:
- `bookings()` equals the model, so refused and failed steps changed nothing, and a second
  ledger opened on the file (and the ledger reopened at the end) loads the same bookings,
  steps included;
- no direction carries more than its capacity at any step's start (where use can rise);
and every outcome (admitted, or which error, naming which direction with how much free)
is the one brute force predicts: no false refusals, no over-admissions.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NoCapacity, NotFound
from sdn_app.core.ledger import Booking, Ledger, Span

IDS = [f"b{i}" for i in range(8)]
CAPACITIES = st.sampled_from([10, 20, 30, 50, 100])
# Mostly valid values, with a few bad ones mixed in (one_of picks a branch evenly).
BANDWIDTHS = st.one_of(st.integers(1, 60), st.integers(1, 30), st.integers(5, 20), st.sampled_from([0, -1]))
OFFSETS = st.integers(-4, 20)  # a window's start, relative to the clock's now
LENGTHS = st.one_of(st.integers(1, 12), st.integers(1, 6), st.integers(3, 20), st.just(math.inf),
                    st.integers(-2, 0))
DIRECTION_COUNTS = st.one_of(st.integers(1, 4), st.integers(1, 2), st.just(0))
META = st.dictionaries(
    st.sampled_from(["src", "dst", "n"]),
    st.one_of(st.integers(-5, 5), st.text(max_size=3), st.lists(st.integers(0, 3), max_size=2)),
    max_size=2,
)


def spans(booking: Booking) -> list[tuple[float, float, int]]:
    """What `booking` holds over time, read from its fields (not from `segments`)."""
    return list(booking.steps) if booking.steps else [(booking.start, booking.end, booking.bandwidth)]


def active_use(bookings: list[Booking], direction: str, t: float, ignore: str | None = None) -> int:
    """Bandwidth booked on `direction` at instant `t` (windows and steps are [start, end))."""
    return sum(bw for b in bookings if direction in b.directions and b.id != ignore
               for start, end, bw in spans(b) if start <= t < end)


def peak(bookings: list[Booking], direction: str, start: float, end: float, ignore: str | None = None) -> int:
    """Largest use of `direction` at any instant of [start, end): use only rises at a step's start."""
    instants = {start} | {s for b in bookings if direction in b.directions
                          for s, _, _ in spans(b) if start <= s < end}
    return max(active_use(bookings, direction, t, ignore) for t in instants)


def unique(directions: list[str]) -> tuple[str, ...]:
    seen: list[str] = []
    for d in directions:
        if d not in seen:
            seen.append(d)
    return tuple(seen)


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ledger-prop-"))
        self.path = self.tmp / "ledger.db"
        self.clock = FakeClock(0)
        self.caps: dict[str, int] = {}
        self.model: dict[str, Booking] = {}
        self.ledger: Ledger | None = None

    # -- the model's brute-force decision ---------------------------------------------------

    def expected_error(self, booking: Booking, ignore: str | None) -> tuple[type[Exception], str | None, int | None]:
        """What the ledger must raise for `booking` (or `(None, ...)` to admit it)."""
        bw = booking.bandwidth
        if isinstance(bw, bool) or not isinstance(bw, int) or bw <= 0:
            return InvalidArgument, None, None
        if booking.end <= booking.start or booking.end <= self.clock.now() or not booking.directions:
            return InvalidArgument, None, None
        others = list(self.model.values())
        for d in booking.directions:
            for start, end, step_bw in spans(booking):
                used = peak(others, d, start, end, ignore)
                if used + step_bw > self.caps[d]:
                    return NoCapacity, d, max(self.caps[d] - used, 0)
        return None, None, None

    def check_refusal(self, error: Exception, expected: tuple, booking: Booking, ignore: str | None) -> None:
        kind, bottleneck, free = expected
        assert type(error) is kind, (error, expected)
        if kind is NoCapacity:
            assert error.bottleneck == bottleneck
            assert error.free_bps == free
            # Not a false refusal: by brute force the named direction really lacks the room.
            assert any(peak(list(self.model.values()), error.bottleneck, start, end, ignore) + bw
                       > self.caps[error.bottleneck] for start, end, bw in spans(booking))

    def snapshot(self) -> list[Booking]:
        return self.ledger.bookings()

    # -- rules ------------------------------------------------------------------------------

    @initialize(capacities=st.lists(CAPACITIES, min_size=3, max_size=10))
    def open_ledger(self, capacities: list[int]) -> None:
        self.caps = {f"d{i}": c for i, c in enumerate(capacities)}
        self.ledger = Ledger(self.caps, self.path, self.clock)

    def draw_id(self, data) -> str:
        """Mostly a booking that exists, sometimes any id (maybe unknown)."""
        pool = sorted(self.model) if self.model and data.draw(st.integers(0, 3), label="pick") else IDS
        return data.draw(st.sampled_from(pool), label="booking_id")

    def draw_directions(self, data, count: int) -> list[str]:
        return data.draw(st.lists(st.sampled_from(sorted(self.caps)), min_size=count, max_size=count),
                         label="directions")

    @rule(data=st.data(), booking_id=st.sampled_from(IDS), bandwidth=BANDWIDTHS, offset=OFFSETS,
          length=LENGTHS, count=DIRECTION_COUNTS, meta=META)
    def reserve(self, data, booking_id: str, bandwidth: int, offset: int, length: float, count: int,
                meta: dict) -> None:
        directions = self.draw_directions(data, count)
        start = max(0, int(self.clock.now()) + offset)
        end = start + length
        booking = Booking(booking_id, bandwidth, start, end, unique(directions), meta)
        self.attempt(booking, lambda: self.ledger.reserve(directions, bandwidth, start, end, booking_id=booking_id,
                                                          meta=meta), "reserve")

    def attempt(self, booking: Booking, reserve: Callable[[], Booking], what: str) -> None:
        """Book `booking` with `reserve`: admitted exactly when brute force says it fits, and a
        refusal changes nothing."""
        if booking.id in self.model:
            expected = (AlreadyExists, None, None)
        else:
            expected = self.expected_error(booking, ignore=None)
        before = self.snapshot()
        try:
            got = reserve()
        except (AlreadyExists, InvalidArgument, NoCapacity) as error:
            event(f"{what} refused: {type(error).__name__}")
            self.check_refusal(error, expected, booking, ignore=None)
            assert self.snapshot() == before
            return
        assert expected[0] is None, f"admitted, but brute force expected {expected}"
        event(f"{what} admitted")
        assert got == booking
        self.model[booking.id] = booking

    @rule(booking_id=st.sampled_from(IDS), offset=OFFSETS, count=st.integers(1, 3), data=st.data(),
          steps=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 40)), min_size=1, max_size=4),
          open_end=st.booleans())
    def reserve_stepped(self, booking_id: str, offset: int, count: int, data, steps: list[tuple[int, int]],
                        open_end: bool) -> None:
        """A profile of contiguous steps (the last one maybe open-ended) on 1 to 3 directions."""
        directions = self.draw_directions(data, count)
        at = max(0, int(self.clock.now()) + offset)
        profile = []
        for length, bw in steps:
            profile.append(Span(float(at), float(at + length), bw))
            at += length
        if open_end:
            profile[-1] = profile[-1]._replace(end=math.inf)
        booking = Booking(booking_id, max(bw for _, bw in steps), profile[0].start, profile[-1].end,
                          unique(directions), {}, tuple(profile))
        self.attempt(booking, lambda: self.ledger.reserve(directions, None, None, None, booking_id=booking_id,
                                                          steps=profile), "stepped reserve")

    @rule(data=st.data(), bandwidth=st.one_of(st.none(), BANDWIDTHS),
          length=st.one_of(st.none(), LENGTHS), count=st.one_of(st.none(), DIRECTION_COUNTS))
    def modify(self, data, bandwidth: int | None, length: float | None, count: int | None) -> None:
        booking_id = self.draw_id(data)
        directions = None if count is None else self.draw_directions(data, count)
        before = self.snapshot()
        old = self.model.get(booking_id)
        end = None if length is None or old is None else old.start + length
        if old is None:
            try:
                self.ledger.modify(booking_id, bandwidth=bandwidth, end=end, directions=directions)
            except NotFound:
                assert self.snapshot() == before
                return
            raise AssertionError(f"modify of unknown booking {booking_id} did not raise NotFound")
        new = replace(
            old,
            bandwidth=old.bandwidth if bandwidth is None else bandwidth,
            end=old.end if end is None else end,
            directions=old.directions if directions is None else unique(directions),
        )
        changes_profile = (bandwidth is not None and bandwidth != old.bandwidth) or (end is not None and end != old.end)
        if old.steps and changes_profile:
            try:
                self.ledger.modify(booking_id, bandwidth=bandwidth, end=end, directions=directions)
            except FailedPrecondition:
                event("stepped modify refused: FailedPrecondition")
                assert self.snapshot() == before
                return
            raise AssertionError(f"a stepped booking's bandwidth or end changed: {bandwidth}, {end}")
        expected = self.expected_error(new, ignore=booking_id)
        try:
            got = self.ledger.modify(booking_id, bandwidth=bandwidth, end=end, directions=directions)
        except (InvalidArgument, NoCapacity) as error:
            event(f"modify refused: {type(error).__name__}")
            self.check_refusal(error, expected, new, ignore=booking_id)
            assert self.snapshot() == before
            return
        assert expected[0] is None, f"modified, but brute force expected {expected}"
        event("modify admitted")
        assert got == new
        self.model[booking_id] = new

    @rule(data=st.data())
    def release(self, data) -> None:
        booking_id = self.draw_id(data)
        before = self.snapshot()
        if booking_id not in self.model:
            try:
                self.ledger.release(booking_id)
            except NotFound:
                assert self.snapshot() == before
                return
            raise AssertionError(f"release of unknown booking {booking_id} did not raise NotFound")
        assert self.ledger.release(booking_id) == self.model.pop(booking_id)

    @rule(seconds=st.integers(0, 6))
    def advance_clock(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule()
    def expire(self) -> None:
        now = self.clock.now()
        ended = sorted((b for b in self.model.values() if b.end <= now), key=lambda b: (b.end, b.id))
        event(f"expire removed {'some' if ended else 'none'}")
        assert self.ledger.expire() == ended
        for b in ended:
            del self.model[b.id]

    @rule(data=st.data(), start=st.integers(0, 40), length=st.one_of(st.integers(1, 15), st.just(math.inf)))
    def query(self, data, start: int, length: float) -> None:
        ignore = data.draw(st.one_of(st.none(), st.just(self.draw_id(data))), label="ignore")
        # Usually a direction the ignored booking is on, where leaving it out matters.
        mine = sorted(self.model[ignore].directions) if ignore in self.model else []
        direction = data.draw(st.sampled_from(mine or sorted(self.caps)), label="direction")
        end = start + length
        expected = peak(list(self.model.values()), direction, start, end, ignore)
        assert self.ledger.used(direction, start, end, ignore) == expected
        assert self.ledger.free(direction, start, end, ignore) == self.caps[direction] - expected

    @rule()
    def peek_from_second_ledger(self) -> None:
        other = Ledger(self.caps, self.path, self.clock)
        try:
            assert other.bookings() == self.snapshot()
        finally:
            other.close()

    @rule()
    def reopen(self) -> None:
        """Close and go on with a ledger rebuilt from the database alone."""
        self.ledger.close()
        self.ledger = Ledger(self.caps, self.path, self.clock)

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        if self.ledger is not None:
            assert self.snapshot() == [self.model[k] for k in sorted(self.model)]

    @invariant()
    def never_over_capacity(self) -> None:
        if self.ledger is None:
            return
        bookings = self.snapshot()
        for direction, capacity in self.caps.items():
            for t in {s for b in bookings if direction in b.directions for s, _, _ in spans(b)}:
                assert active_use(bookings, direction, t) <= capacity, (direction, t)

    def teardown(self) -> None:
        try:
            if self.ledger is not None:
                live = self.snapshot()
                self.ledger.close()
                again = Ledger(self.caps, self.path, self.clock)
                try:
                    assert again.bookings() == live
                finally:
                    again.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


LedgerMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
TestLedgerMachine = LedgerMachine.TestCase
