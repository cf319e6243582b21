"""A scenario's expectations checked against what a run recorded. Pure.

- `aggregate_rate`: the transfers' nominal rates summed over every rate report, over their
  bookings summed over the same reports (the periods where transfers run), at least X.
- `resume_within`: after each fail_link, every transfer whose last path before the cut
  crossed that link reports at least half its booking within Y s (counting only reports
  that began after the cut).
- `never_overbooked`: at no sample of the controller's bookings is a link direction booked
  beyond its capacity.
- `reroutes_at_least`: at least N reservations were moved to another path.
- `timeline`: always checked: every action was carried out and no transfer failed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from sdn_app.core.units import format_bandwidth
from sdn_app.demo.record import Recording
from sdn_app.demo.scenario import Scenario

RESUMED_SHARE = 0.5  # a transfer has resumed once it carries this share of its booking
REPORT_INTERVAL = 1.0  # seconds one rate report covers


@dataclass(frozen=True)
class Result:
    """One expectation: whether it held, what was expected and what was measured."""

    name: str
    passed: bool
    expected: str
    measured: str
    detail: str = ""

    def line(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        text = f"{verdict} {self.name}: measured {self.measured}; expected {self.expected}"
        return f"{text} ({self.detail})" if self.detail else text


def crosses(path: tuple[str, ...] | list[str], ends: tuple[str, str]) -> bool:
    """Whether a path of switches goes over the link between `ends` (either way)."""
    a, b = ends
    return any({x, y} == {a, b} for x, y in itertools.pairwise(path))


def aggregate_rate(recording: Recording, minimum: float) -> Result:
    samples = [s for s in recording.rates if s.booked_bps > 0]
    expected = f">= {minimum:g} of booked"
    if not samples:
        return Result("aggregate_rate", False, expected, "no rate report from any transfer")
    carried = sum(s.nominal_bps for s in samples)
    booked = sum(s.booked_bps for s in samples)
    ratio = carried / booked
    return Result("aggregate_rate", ratio >= minimum, expected, f"{ratio:.2f} of booked",
                  f"{len(samples)} reports, mean {format_bandwidth(carried / len(samples))} carried of "
                  f"{format_bandwidth(booked / len(samples))} booked")


def resume_within(recording: Recording, seconds: float) -> Result:
    expected = f"every transfer crossing a failed link back to >= {RESUMED_SHARE:.0%} of its booking " \
               f"within {seconds:g} s"
    failures = [e for e in recording.events if e.kind == "fail_link"]
    if not failures:
        return Result("resume_within", False, expected, "no link was failed")
    worst = 0.0
    problems: list[str] = []
    checked = 0
    for failure in failures:
        link = failure.details.get("link", "")
        ends = tuple(failure.details.get("ends") or recording.links.get(link, ("", "")))
        t_fail = failure.time
        by_flow: dict[str, list] = {}
        for sample in recording.rates:
            by_flow.setdefault(sample.flow, []).append(sample)
        for flow, samples in sorted(by_flow.items()):
            before = [s for s in samples if t_fail - 3 * REPORT_INTERVAL <= s.time <= t_fail]
            if not before or not crosses(before[-1].path, ends):  # type: ignore[arg-type]
                continue
            checked += 1
            after = [s for s in samples if s.time >= t_fail + REPORT_INTERVAL]
            back = next((s for s in after if s.nominal_bps >= RESUMED_SHARE * s.booked_bps), None)
            if back is None:
                problems.append(f"{flow} never resumed after {link} failed at {t_fail:.1f} s")
                worst = float("inf")
                continue
            took = back.time - t_fail
            worst = max(worst, took)
            if took > seconds:
                problems.append(f"{flow} took {took:.1f} s after {link} failed at {t_fail:.1f} s")
    if not checked:
        links = ", ".join(e.details.get("link", "?") for e in failures)
        return Result("resume_within", True, expected, "no transfer crossed a failed link",
                      f"failed: {links}")
    measured = "never resumed" if worst == float("inf") else f"{worst:.1f} s at worst"
    return Result("resume_within", not problems, expected, measured,
                  "; ".join(problems) or f"{checked} transfer(s) crossed a failed link")


def never_overbooked(recording: Recording) -> Result:
    expected = "no link direction booked beyond its capacity"
    if not recording.bookings:
        return Result("never_overbooked", False, expected, "no sample of the controller's bookings")
    over = [(s.time, o) for s in recording.bookings for o in s.overbooked]
    fullest = max(recording.bookings, key=lambda s: s.fullest_ratio)
    if over:
        time, (direction, booked, capacity) = over[0]
        return Result("never_overbooked", False, expected,
                      f"{direction} booked {format_bandwidth(booked)} of {format_bandwidth(capacity)} at {time:.1f} s",
                      f"{len(over)} overbooked direction-samples")
    return Result("never_overbooked", True, expected,
                  f"at most {fullest.fullest_ratio:.0%} booked ({fullest.fullest} at {fullest.time:.1f} s)",
                  f"{len(recording.bookings)} samples")


def reroutes_at_least(recording: Recording, minimum: int) -> Result:
    count = sum(1 for e in recording.events if e.kind == "reroute")
    return Result("reroutes_at_least", count >= minimum, f">= {minimum} reroute(s)", f"{count} reroute(s)")


def timeline_ran(recording: Recording) -> Result:
    refused = [e for e in recording.events if e.kind == "refused"]
    failed = [f for f in recording.flows.values() if f.state in ("FAILED", "TRANSFER_FAILED")]
    problems = [f"{e.details.get('action', '?')} {e.details.get('name') or e.details.get('link', '')}: "
                f"{e.details.get('message', '')}" for e in refused]
    problems += [f"transfer {f.name} failed: {f.reason}" for f in failed]
    if recording.interrupted:
        problems.append(f"interrupted at {recording.ended:.1f} s")
    if recording.error:
        problems.append(recording.error)
    actions = sum(1 for e in recording.events if "timeline" in e.details and e.kind != "refused")
    return Result("timeline", not problems, "every action carried out, no transfer failed",
                  f"{actions} action(s) run, {len(refused)} refused, {len(failed)} transfer(s) failed",
                  "; ".join(problems))


def evaluate(scenario: Scenario, recording: Recording) -> list[Result]:
    """Every expectation of `scenario`, in a fixed order, then the timeline check."""
    expect = scenario.expectations
    results = []
    if expect.aggregate_rate is not None:
        results.append(aggregate_rate(recording, expect.aggregate_rate))
    if expect.resume_within is not None:
        results.append(resume_within(recording, expect.resume_within))
    if expect.never_overbooked:
        results.append(never_overbooked(recording))
    if expect.reroutes_at_least is not None:
        results.append(reroutes_at_least(recording, expect.reroutes_at_least))
    results.append(timeline_ran(recording))
    return results
