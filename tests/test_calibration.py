"""Calibration, without Mininet: the heaviest moment of each shipped scenario, the ladder of scales,
where calibration puts the cross traffic, and the verdict on what the emulation carried: the
largest scale that fits, the next rung from the capacity measured, and a machine too slow for the
smallest rung refused naming what it carried and what was needed."""

from __future__ import annotations

import pytest

from tests.test_scenarios import SMOKE, changed, problems_of, write
from tsdn.demo.calibration import (
    FIT,
    LADDER,
    Attempt,
    CrossLoad,
    FlowCarried,
    TooSlow,
    cross_placement,
    ladder,
    next_choice,
    peak_load,
)
from tsdn.demo.scenario import load_scenario

G = 10**9


def capacities(loaded) -> dict[tuple[str, str], int]:
    return {(d.link, d.src): d.capacity for pair in loaded.topology.link_directions.values() for d in pair}


def peak_of(name_or_path):
    loaded = load_scenario(name_or_path)
    return peak_load(loaded.scenario, capacities(loaded))


def test_the_sc16_peak_is_the_congestion_with_every_transfer_running():
    peak = peak_of("sc16-terabit")
    assert peak.at == 32
    assert [t.name for t in peak.transfers] == ["rdma-demo", "tcp-demo", "wan-saopaulo", "wan-chicago"]
    assert len(peak.reservations) == 4  # booked then: they shape the transfers' routes
    assert peak.cross == (CrossLoad("tbit-tcp", "caltech-a", 900 * G),)
    assert (peak.transfers_bps, peak.offered_bps) == (880 * G, 1780 * G)
    assert peak.describe() == "at 32 s: 4 transfer(s) 880G, cross traffic 900G"


def test_a_paced_transfer_offers_its_pace_not_its_booking():
    peak = peak_of("host-limited")
    assert peak.transfers_bps == 12 * G


def test_cleared_cross_traffic_and_released_transfers_leave_the_moment(tmp_path):
    data = changed(timeline=[
        {"at": 0, "action": "transfer", "name": "east", "src": "dtn1", "dst": "dtn3", "bandwidth": "20G",
         "until": "release"},
        {"at": 2, "action": "congest_link", "link": "s5-s6", "fraction": 0.5},
        {"at": 4, "action": "clear_link", "link": "s5-s6"},
        {"at": 6, "action": "release", "name": "east"},
        {"at": 8, "action": "transfer", "name": "west", "src": "dtn3", "dst": "dtn1", "bandwidth": "30G",
         "until": "release"},
        {"at": 10, "action": "release", "name": "west"},
    ], expectations={})
    peak = peak_of(write(tmp_path, data))
    # both directions of s5-s6 at half their 100G: 100G of cross traffic at 2 s beats west alone
    assert (peak.at, [t.name for t in peak.transfers], peak.cross_bps) == (2, ["east"], 100 * G)


def test_a_timeline_without_transfers_has_no_peak(tmp_path):
    data = changed(agents=[], timeline=[{"at": 0, "action": "reserve", "name": "r", "src": "dtn1", "dst": "dtn3",
                                         "bandwidth": "10G"}], expectations={})
    assert peak_of(write(tmp_path, data)) is None


def test_the_ladder_halves_and_keeps_every_link_within_tclink():
    assert ladder(0.0002) == pytest.approx([0.0002 * f for f in LADDER])
    # sc16's 25G NICs at 1/16 of 0.0002 run at 0.3 Mbit/s; a 1 kbit/s floor (0.001 Mbit/s) cuts below
    rungs = ladder(0.0002, [25 * G, 1_000_000_000_000])
    assert rungs[0] == 0.0002 and len(rungs) == len(LADDER)
    assert ladder(1e-6, [10 * G]) == [1e-6 * f for f in LADDER if 10 * G * 1e-6 * f / 1e6 >= 0.001]


def test_calibration_sends_cross_traffic_the_other_way_when_the_data_runs_its_way():
    cross = CrossLoad("tbit-tcp", "caltech-a", 900 * G)
    ends = ("caltech-a", "caltech-b")
    data = {("caltech-a", "caltech-b"): 400 * G}
    assert cross_placement(cross, ends, 1000 * G, data) == ("caltech-b", 900 * G)
    both = {("caltech-a", "caltech-b"): 400 * G, ("caltech-b", "caltech-a"): 400 * G}
    assert cross_placement(cross, ends, 1000 * G, both) == ("caltech-b", 600 * G)  # what is left, noted
    assert cross_placement(cross, ends, 1000 * G, {("caltech-b", "caltech-a"): 400 * G}) == ("caltech-a", 900 * G)


def attempt(scale: float, carried: float = 0.95, cross: float | None = 1.0) -> Attempt:
    flows = (FlowCarried("a", 400 * G, carried * 400 * G, 4), FlowCarried("b", 40 * G, carried * 40 * G, 4))
    if cross is None:
        return Attempt(scale, flows)
    return Attempt(scale, flows, 900 * G, cross * 900 * G)


def test_the_largest_scale_that_fits_is_chosen_saying_why():
    rungs = ladder(0.0002)
    choice = next_choice(rungs, [attempt(0.0002)], "sc16-terabit")
    assert choice.done and choice.scale == 0.0002 and "the largest scale allowed" in choice.why
    assert "carried 263.6 of the 268.0 Mbit/s" in choice.why


def test_a_scale_that_does_not_fit_tries_the_rung_the_measured_capacity_calls_for():
    rungs = ladder(0.0002)
    first = attempt(0.0002, carried=0.6)
    assert not first.fits and first.headroom == pytest.approx(0.6 / FIT)
    choice = next_choice(rungs, [first], "sc16-terabit")
    assert not choice.done and choice.scale == pytest.approx(0.0001)  # 0.6 / 0.9 of 0.0002 = 0.000133: 1/2
    assert "trying 0.0001" in choice.why
    done = next_choice(rungs, [first, attempt(0.0001)], "sc16-terabit")
    assert done.done and done.scale == pytest.approx(0.0001)
    assert "the largest rung of the ladder that fits (the scenario allows up to 0.0002)" in done.why


def test_cross_traffic_that_is_not_carried_is_a_misfit_too():
    lost = attempt(0.0002, carried=0.95, cross=0.7)
    assert not lost.fits
    assert next_choice(ladder(0.0002), [lost], "x").scale == pytest.approx(0.0002 * 0.75)


def test_a_machine_too_slow_for_the_smallest_rung_is_refused_naming_the_rates():
    rungs = ladder(0.0002)
    with pytest.raises(TooSlow) as refused:
        next_choice(rungs, [attempt(rungs[-1], carried=0.5)], "sc16-terabit")
    said = str(refused.value)
    assert "too slow for sc16-terabit" in said and f"smallest scale {rungs[-1]:g}" in said
    assert "offers 16.8 Mbit/s and the emulation carried 14.0 (transfers 50%, cross traffic 100%" in said


def test_the_attempt_says_what_it_measured():
    line = attempt(0.0002, carried=0.8).describe()
    assert line.startswith("scale 0.0002: carried 250.4 of 268.0 Mbit/s offered (transfers 80% of 88.0, "
                           "cross traffic 100% of 180.0 Mbit/s): does not fit")


def test_a_fixed_scale_is_not_calibrated_and_is_checked_like_a_bound(tmp_path):
    fixed = load_scenario(write(tmp_path, changed(emulation_scale={"fixed": 0.0005}))).scenario
    assert (fixed.scale_bound, fixed.calibrated) == (0.0005, False)
    bound = load_scenario(write(tmp_path, SMOKE)).scenario
    assert (bound.scale_bound, bound.calibrated) == (0.001, True)
    for wrong, said in (({"fixed": 2}, "got 2"), (0, "got 0"), ({"at_most": 0.1}, "got the keys ['at_most']")):
        (problem,) = problems_of(write(tmp_path, changed(emulation_scale=wrong)))
        assert problem.endswith(f"scenario.yaml: emulation_scale: a number in (0, 1] (the largest scale calibration "
                                f"may choose), or {{fixed: X}} (X, not calibrated); {said}"), problem
    problems = problems_of(write(tmp_path, changed(emulation_scale={"fixed": 0.5})))
    assert any("emulation_scale: 0.5 runs" in p for p in problems), problems
