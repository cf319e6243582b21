"""Property tests of the deadline scheduler, against exact arithmetic, the ledger and brute force.

- On an empty path a schedule is one step that carries every bit by the deadline, accepted
  exactly when the path's rate can carry it by then (to the whole second).
- On a randomly loaded ledger an accepted schedule starts at the start, runs without a pause,
  has at most `max_steps` steps, carries every bit by the deadline, and is booked by the ledger
  as a stepped booking (so it is within what is free at every instant) with no direction then
  over its capacity at any instant; a refusal's `earliest` is after the deadline, and planning
  again with that as the deadline gives the schedule the refusal carried, finishing then.
- On small whole-second profiles the finish and the peak are the best any schedule of at
  most `max_steps` steps changing at whole seconds can do (found by trying them all).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from fractions import Fraction

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import ScheduleStep
from sdn_app.core.schedules import LOOKAHEAD, DeadlineMissed, plan, plan_transfer

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
START = st.one_of(st.integers(0, 50).map(float), st.floats(0, 50, allow_nan=False).map(lambda t: round(t, 3)))


def carried(schedule: tuple[ScheduleStep, ...]) -> Fraction:
    """Bits the schedule carries, exactly."""
    return sum((Fraction(s.end) - Fraction(s.start)) * s.bandwidth for s in schedule)


def check_shape(schedule: tuple[ScheduleStep, ...], size: int, start: float, deadline: float, max_steps: int) -> None:
    """What every accepted schedule is: from `start`, no pause, few steps, every bit by the deadline."""
    assert 1 <= len(schedule) <= max_steps
    assert schedule[0].start == start
    assert all(a.end == b.start for a, b in itertools.pairwise(schedule))
    assert all(s.bandwidth >= 1 and isinstance(s.bandwidth, int) and s.end > s.start for s in schedule)
    assert schedule[-1].end <= deadline
    assert schedule[-1].end == math.ceil(schedule[-1].end)  # a whole second
    assert carried(schedule) >= size
    # It ends when the bytes are done: a second less of its last step would leave some behind.
    last = schedule[-1]
    assert carried(schedule) - last.bandwidth * min(Fraction(1), Fraction(last.end) - Fraction(last.start)) < size


@SETTINGS
@given(capacity=st.integers(1, 10**12), size=st.integers(1, 10**15), start=START,
       length=st.floats(0.5, 5e5, allow_nan=False), max_steps=st.integers(1, 6))
def test_an_empty_path_gives_one_step_by_the_deadline(capacity: int, size: int, start: float, length: float,
                                                      max_steps: int) -> None:
    deadline = start + length
    profile = [ScheduleStep(0.0, start + LOOKAHEAD + 10, capacity)]
    first_second = math.ceil(Fraction(start) + Fraction(size, capacity))  # at full rate throughout
    try:
        schedule = plan(profile, size, start, deadline, max_steps)
    except DeadlineMissed as missed:
        event("refused")
        assert first_second > deadline
        assert missed.earliest == (first_second if first_second <= start + LOOKAHEAD else math.inf)
        return
    event("accepted")
    assert first_second <= deadline
    assert len(schedule) == 1 and schedule[0].end == first_second
    check_shape(schedule, size, start, deadline, max_steps)


BOOKING = st.tuples(
    st.lists(st.integers(0, 2), min_size=1, max_size=3),  # which directions
    st.one_of(st.integers(1, 100), st.sampled_from([50, 90, 100])),  # bandwidth, in % of the least capacity
    st.integers(0, 100),  # start
    st.one_of(st.integers(1, 60), st.just(math.inf)),  # length
)


@SETTINGS
@given(capacities=st.lists(st.integers(10, 100), min_size=3, max_size=3),
       bookings=st.lists(BOOKING, max_size=10),
       path=st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True),
       size=st.integers(1, 8_000), start=START, length=st.integers(1, 150),
       cap=st.integers(1, 120), max_steps=st.integers(1, 5))
def test_a_schedule_on_a_loaded_path_is_booked_within_capacity(
        capacities: list[int], bookings: list, path: list[int], size: int, start: float, length: int, cap: int,
        max_steps: int) -> None:
    names = [f"d{i}" for i in range(3)]
    ledger = Ledger(dict(zip(names, capacities, strict=True)), clock=FakeClock(0))
    for on, percent, at, duration in bookings:
        bandwidth = max(1, min(capacities[i] for i in on) * percent // 100)
        with contextlib.suppress(NoCapacity):
            ledger.reserve([names[i] for i in on], bandwidth, at, at + duration)
    directions = [names[i] for i in path]
    deadline = start + length
    try:
        schedule = plan_transfer(ledger, directions, size, start, deadline, cap, max_steps)
    except DeadlineMissed as missed:
        event(f"refused, {'never' if math.isinf(missed.earliest) else 'later'}")
        assert missed.earliest > deadline
        if math.isinf(missed.earliest):
            assert missed.schedule == ()
            try:
                plan_transfer(ledger, directions, size, start, start + LOOKAHEAD, cap, max_steps)
            except DeadlineMissed as again:
                assert math.isinf(again.earliest)
            else:
                raise AssertionError("refused as never possible, yet possible within the look-ahead") from None
            return
        later = plan_transfer(ledger, directions, size, start, missed.earliest, cap, max_steps)
        assert later == missed.schedule
        assert later[-1].end == missed.earliest and max(s.bandwidth for s in later) == missed.bandwidth
        schedule, deadline = later, missed.earliest
        event(f"planned by the earliest finish with {len(schedule)} step(s)")
    else:
        event(f"accepted with {len(schedule)} step(s)")
    check_shape(schedule, size, start, deadline, max_steps)
    assert max(s.bandwidth for s in schedule) <= cap
    booking = ledger.reserve(directions, None, None, None, steps=schedule)  # within what is free throughout
    assert booking.segments == tuple((s.start, s.end, s.bandwidth) for s in schedule)
    everything = ledger.bookings()
    for direction in names:
        for t in {s.start for b in everything if direction in b.directions for s in b.segments}:
            use = sum(s.bandwidth for b in everything if direction in b.directions
                      for s in b.segments if s.start <= t < s.end)
            assert use <= ledger.capacities[direction], (direction, t)


def best_by_brute_force(free: list[int], size: int, deadline: int, max_steps: int) -> tuple[int, int] | None:
    """The earliest whole-second finish by `deadline` and the lowest peak then, trying every
    schedule of at most `max_steps` steps changing at whole seconds from 0 (`free[t]`: what is
    free over [t, t + 1))."""
    for finish in range(1, deadline + 1):
        peaks = []
        for steps in range(1, max_steps + 1):
            for inner in itertools.combinations(range(1, finish), steps - 1):
                points = [0, *inner, finish]
                spans = list(itertools.pairwise(points))
                caps = [min(free[a:b]) for a, b in spans]
                if min(caps) <= 0 or sum(c * (b - a) for c, (a, b) in zip(caps, spans, strict=True)) < size:
                    continue
                peaks.append(min(r for r in range(1, max(caps) + 1)
                                 if sum(min(c, r) * (b - a) for c, (a, b) in zip(caps, spans, strict=True)) >= size))
        if peaks:
            return finish, min(peaks)
    return None


@SETTINGS
@given(free=st.lists(st.sampled_from([0, 1, 2, 3, 5, 8, 13]), min_size=1, max_size=9),
       size=st.integers(1, 70), deadline=st.integers(1, 9), max_steps=st.integers(1, 3))
def test_the_finish_and_the_peak_are_the_best_any_schedule_does(free: list[int], size: int, deadline: int,
                                                                  max_steps: int) -> None:
    deadline = min(deadline, len(free))
    profile = [ScheduleStep(float(t), float(t + 1), f) for t, f in enumerate(free) if f]
    expected = best_by_brute_force(free, size, deadline, max_steps)
    try:
        schedule = plan(profile, size, 0.0, float(deadline), max_steps)
    except DeadlineMissed as missed:
        event("refused")
        assert expected is None
        if not math.isinf(missed.earliest):  # the profile ends where `free` does
            assert (missed.earliest, missed.bandwidth) == best_by_brute_force(free, size, len(free), max_steps)
        else:
            assert best_by_brute_force(free, size, len(free), max_steps) is None
        return
    event(f"accepted with {len(schedule)} step(s)")
    assert expected is not None
    assert (schedule[-1].end, max(s.bandwidth for s in schedule)) == expected
    check_shape(schedule, size, 0.0, deadline, max_steps)
    for step in schedule:
        assert step.bandwidth <= min(free[int(step.start):int(step.end)])
