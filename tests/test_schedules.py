"""The deadline scheduler: free profiles read from the ledger, schedules planned over them.

Times are epoch seconds from SC16's first day (or small numbers where whole seconds matter);
bandwidths are bits/s; a size is given in bits (40 TB = 3.2e14 bits).
"""

from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction

import pytest

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import InvalidArgument, NoCapacity, NotFound
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import ScheduleStep
from sdn_app.core.schedules import (
    LOOKAHEAD,
    MAX_PROFILE_STEPS,
    DeadlineMissed,
    _Grid,
    free_profile,
    plan,
    plan_transfer,
)

G = 10**9
TB_BITS = 8 * 10**12
T0 = 1_479_081_600.0  # 2016-11-14T00:00Z
HOUR = 3600.0


def carried(schedule: tuple[ScheduleStep, ...]) -> Fraction:
    """Bits the schedule carries, exactly."""
    return sum((Fraction(s.end) - Fraction(s.start)) * s.bandwidth for s in schedule)


def contiguous_from(schedule: tuple[ScheduleStep, ...], start: float) -> bool:
    return schedule[0].start == start and all(a.end == b.start for a, b in itertools.pairwise(schedule))


def ledger(capacities: dict[str, int], now: float = T0) -> Ledger:
    return Ledger(capacities, clock=FakeClock(now))


# -- the examples a data-management service brings -------------------------------------------


def test_empty_path_gives_one_step_that_finishes_first() -> None:
    led = ledger({"a": 100 * G, "b": 100 * G})
    schedule = plan_transfer(led, ["a", "b"], 40 * TB_BITS, T0, T0 + 6 * HOUR, cap=400 * G)
    assert schedule == (ScheduleStep(T0, T0 + 3200, 100 * G),)  # 40 TB at 100G: 53 min 20 s
    # The NIC's cap is the path's, when lower.
    assert plan_transfer(led, ["a", "b"], 40 * TB_BITS, T0, T0 + 6 * HOUR, cap=40 * G) == (
        ScheduleStep(T0, T0 + 8000, 40 * G),)


def test_the_last_whole_second_is_shared_out_at_the_lowest_rate_that_keeps_it() -> None:
    # One byte more than 40 TB at 100G takes a sliver past 3200 s: the finish is the next whole
    # second, and the rate the lowest whole bits/s that carries every bit by then.
    size = 40 * TB_BITS + 8
    [step] = plan([ScheduleStep(T0, T0 + 10 * HOUR, 100 * G)], size, T0, T0 + 6 * HOUR)
    assert (step.start, step.end) == (T0, T0 + 3201)
    assert step.bandwidth == -(-size // 3201) < 100 * G
    assert carried((step,)) >= size > (step.bandwidth - 1) * 3201


def test_a_fractional_start_keeps_whole_second_finish_and_carries_every_bit() -> None:
    start = T0 + 0.25
    [step] = plan([ScheduleStep(T0, T0 + 10 * HOUR, 100 * G)], 40 * TB_BITS, start, T0 + 6 * HOUR)
    assert (step.start, step.end) == (start, T0 + 3201)  # 3200 s from .25 end at .25: the next second
    assert carried((step,)) >= 40 * TB_BITS
    assert (step.bandwidth - 1) * (Fraction(step.end) - Fraction(start)) < 40 * TB_BITS


def test_a_booking_in_the_middle_gives_steps_around_it() -> None:
    led = ledger({"a": 100 * G, "b": 100 * G})
    led.reserve(["b"], 80 * G, T0 + 1000, T0 + 3000, booking_id="busy")  # 20G left on b for 2000 s
    schedule = plan_transfer(led, ["a", "b"], 40 * TB_BITS, T0, T0 + 6 * HOUR, cap=400 * G)
    assert schedule == (
        ScheduleStep(T0, T0 + 1000, 100 * G),
        ScheduleStep(T0 + 1000, T0 + 3000, 20 * G),
        ScheduleStep(T0 + 3000, T0 + 4800, 100 * G),
    )
    # With two steps the dip is ridden through at 20G, then the rest at full rate.
    assert plan_transfer(led, ["a", "b"], 40 * TB_BITS, T0, T0 + 6 * HOUR, cap=400 * G, max_steps=2) == (
        ScheduleStep(T0, T0 + 3000, 20 * G),
        ScheduleStep(T0 + 3000, T0 + 5600, 100 * G),
    )
    # One step runs at the dip's rate throughout.
    assert plan_transfer(led, ["a", "b"], 40 * TB_BITS, T0, T0 + 6 * HOUR, cap=400 * G, max_steps=1) == (
        ScheduleStep(T0, T0 + 16000, 20 * G),)
    # The ledger takes the schedule as one stepped booking, and the dip is exactly full.
    booking = led.reserve(["a", "b"], None, None, None, booking_id="transfer", steps=schedule)
    assert booking.segments == tuple((s.start, s.end, s.bandwidth) for s in schedule)
    assert led.used("b", T0, T0 + 4800) == 100 * G and led.free("a", T0 + 1000, T0 + 3000) == 80 * G


def test_a_refusal_names_the_earliest_finish_and_its_bandwidth() -> None:
    led = ledger({"a": 100 * G})
    led.reserve(["a"], 80 * G, T0 + 1000, T0 + 3000, booking_id="busy")
    with pytest.raises(DeadlineMissed) as missed:
        plan_transfer(led, ["a"], 40 * TB_BITS, T0, T0 + HOUR, cap=400 * G)
    refusal = missed.value
    assert isinstance(refusal, NoCapacity) and refusal.code == "RESOURCE_EXHAUSTED"
    assert refusal.earliest == T0 + 4800 and refusal.bandwidth == 100 * G
    assert str(refusal) == ("40.0 TB from 2016-11-14T00:00:00Z cannot arrive by 2016-11-14T01:00:00Z: the earliest "
                            "possible finish is 2016-11-14T01:20:00Z, at up to 100G")
    assert refusal.schedule == plan_transfer(led, ["a"], 40 * TB_BITS, T0, refusal.earliest, cap=400 * G)
    with pytest.raises(DeadlineMissed):  # one second less is too little
        plan_transfer(led, ["a"], 40 * TB_BITS, T0, refusal.earliest - 1, cap=400 * G)


def test_a_path_that_fills_up_ends_what_can_be_carried_before_it() -> None:
    led = ledger({"a": 100 * G})
    led.reserve(["a"], 100 * G, T0 + 1000, math.inf, booking_id="forever")
    # 10 TB fits in the first 1000 s; 40 TB does not, and no pause is allowed to wait it out.
    assert plan_transfer(led, ["a"], 10 * TB_BITS, T0, T0 + HOUR, cap=400 * G) == (
        ScheduleStep(T0, T0 + 800, 100 * G),)
    with pytest.raises(DeadlineMissed) as missed:
        plan_transfer(led, ["a"], 40 * TB_BITS, T0, T0 + 2 * HOUR, cap=400 * G)
    assert missed.value.earliest == math.inf and missed.value.schedule == ()
    assert missed.value.bandwidth == -(-40 * TB_BITS // 7200)  # what 2 hours would have taken throughout
    assert "the path has nothing free from 2016-11-14T00:16:40Z" in str(missed.value)
    assert "meeting the deadline would take 44.444G throughout" in str(missed.value)


def test_nothing_free_at_the_start_refuses() -> None:
    profile = [ScheduleStep(T0 + 10, T0 + HOUR, 100 * G)]  # nothing in the first 10 s
    with pytest.raises(DeadlineMissed, match="nothing free from 2016-11-14T00:00:00Z") as missed:
        plan(profile, 8, T0, T0 + HOUR)
    assert missed.value.earliest == math.inf


def test_a_refusal_looks_no_further_than_the_look_ahead() -> None:
    profile = [ScheduleStep(T0, T0 + 2 * LOOKAHEAD, 1)]  # one bit/s
    with pytest.raises(DeadlineMissed, match="finishes by 2016-12-14T00:00:00Z either") as missed:
        plan(profile, int(LOOKAHEAD) + 1, T0, T0 + HOUR)
    assert missed.value.earliest == math.inf
    with pytest.raises(DeadlineMissed) as missed:
        plan(profile, int(LOOKAHEAD), T0, T0 + HOUR)
    assert missed.value.earliest == T0 + LOOKAHEAD


def test_a_change_within_a_second_takes_the_least_of_it() -> None:
    # 40G free until 1000.5 s, then 100G: the second from 1000 s counts at 40G.
    profile = [ScheduleStep(0, 1000.5, 40 * G), ScheduleStep(1000.5, 10_000, 100 * G)]
    schedule = plan(profile, 140_000 * G, 0, 5000, max_steps=2)
    # 40.04 Tbit by 1001 s; the other 99.96 Tbit at 100G take 999.6 s, so 1000 s at 99.96G.
    assert schedule == (ScheduleStep(0, 1001, 40 * G), ScheduleStep(1001, 2001, 99_960_000_000))
    assert carried(schedule) == 140_000 * G


def test_a_long_jagged_profile_is_coarsened_and_still_within_it() -> None:
    # 3 s steps of alternating free bandwidth: more change points than planned over.
    profile = [ScheduleStep(3 * i, 3 * i + 3, (100 if i % 2 else 60 + i % 7) * G) for i in range(3 * MAX_PROFILE_STEPS)]
    assert len(_Grid.of(profile, 0, LOOKAHEAD).free) == MAX_PROFILE_STEPS  # what the planner works over
    began = time.perf_counter()
    schedule = plan(profile, 20_000 * G, 0, 1000)
    assert time.perf_counter() - began < 5
    assert len(schedule) <= 4 and contiguous_from(schedule, 0) and carried(schedule) >= 20_000 * G
    for step in schedule:
        assert all(step.bandwidth <= p.bandwidth for p in profile if p.start < step.end and step.start < p.end)


# -- free profiles -----------------------------------------------------------------------------


def test_free_profile_is_the_least_free_over_the_directions_capped() -> None:
    led = ledger({"a": 100 * G, "b": 40 * G, "c": 100 * G})
    led.reserve(["a"], 70 * G, T0 + 10, T0 + 20, booking_id="a1")
    led.reserve(["c"], 90 * G, T0 + 50, T0 + 60, booking_id="c1")
    led.reserve(["a", "c"], 10 * G, T0 + 15, math.inf, booking_id="ac")
    assert free_profile(led, ["a", "b", "c"], T0, T0 + 100, cap=400 * G) == [
        ScheduleStep(T0, T0 + 10, 40 * G),
        ScheduleStep(T0 + 10, T0 + 15, 30 * G),
        ScheduleStep(T0 + 15, T0 + 20, 20 * G),
        ScheduleStep(T0 + 20, T0 + 50, 40 * G),
        ScheduleStep(T0 + 50, T0 + 60, 0),
        ScheduleStep(T0 + 60, T0 + 100, 40 * G),
    ]
    assert free_profile(led, ["a"], T0, T0 + 100, cap=25 * G) == [
        ScheduleStep(T0, T0 + 15, 25 * G), ScheduleStep(T0 + 15, T0 + 20, 20 * G),
        ScheduleStep(T0 + 20, T0 + 100, 25 * G)]
    assert free_profile(led, ["a"], T0, T0 + 100, cap=400 * G, ignore="ac") == [
        ScheduleStep(T0, T0 + 10, 100 * G), ScheduleStep(T0 + 10, T0 + 20, 30 * G),
        ScheduleStep(T0 + 20, T0 + 100, 100 * G)]


def test_free_profile_of_an_overbooked_direction_is_zero_not_negative(tmp_path) -> None:
    path = tmp_path / "ledger.db"
    led = Ledger({"a": 100 * G}, path, FakeClock(T0))
    led.reserve(["a"], 90 * G, T0, T0 + 10)
    led.close()
    shrunk = Ledger({"a": 50 * G}, path, FakeClock(T0))
    try:
        assert free_profile(shrunk, ["a"], T0, T0 + 20, cap=400 * G) == [
            ScheduleStep(T0, T0 + 10, 0), ScheduleStep(T0 + 10, T0 + 20, 50 * G)]
    finally:
        shrunk.close()


def test_free_profile_bad_input() -> None:
    led = ledger({"a": 100 * G})
    with pytest.raises(NotFound, match="nope"):
        free_profile(led, ["a", "nope"], T0, T0 + 1, cap=G)
    with pytest.raises(InvalidArgument, match="at least one link direction"):
        free_profile(led, [], T0, T0 + 1, cap=G)
    with pytest.raises(InvalidArgument, match="end"):
        free_profile(led, ["a"], T0, T0, cap=G)
    with pytest.raises(InvalidArgument, match="cap"):
        free_profile(led, ["a"], T0, T0 + 1, cap=0)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size, deadline, max_steps, field", [
    (0, T0 + HOUR, 4, "size_bytes"),
    (-8, T0 + HOUR, 4, "size_bytes"),
    (1.5, T0 + HOUR, 4, "size_bytes"),
    (True, T0 + HOUR, 4, "size_bytes"),
    (8, T0, 4, "deadline"),
    (8, T0 - 1, 4, "deadline"),
    (8, math.inf, 4, "deadline"),
    (8, math.nan, 4, "deadline"),
    (8, T0 + HOUR, 0, "max_steps"),
    (8, T0 + HOUR, 2.0, "max_steps"),
])
def test_bad_input_names_the_field(size, deadline: float, max_steps, field: str) -> None:
    profile = [ScheduleStep(T0, T0 + 2 * HOUR, 100 * G)]
    with pytest.raises(InvalidArgument, match=field):
        plan(profile, size, T0, deadline, max_steps)
    with pytest.raises(InvalidArgument, match=field):
        plan_transfer(ledger({"a": 100 * G}), ["a"], size, T0, deadline, 100 * G, max_steps)


def test_overlapping_profile_steps_invalid() -> None:
    with pytest.raises(InvalidArgument, match="overlaps"):
        plan([ScheduleStep(0, 10, 5), ScheduleStep(5, 20, 5)], 8, 0, 20)
