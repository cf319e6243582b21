"""A scenario's expectations checked against what a run recorded. Pure.

- `aggregate_rate`: the transfers' nominal rates summed over every rate report, over their
  bookings summed over the same reports (the periods where transfers run), at least X.
- `resume_within`: after each fail_link, every transfer whose last path before the cut
  crossed that link reports at least half its booking within Y s (counting only reports
  that began after the cut).
- `never_overbooked`: at no sample of the controller's bookings is a link direction booked
  beyond its capacity.
- `reroutes_at_least` / `reroutes_at_most`: at least / at most N moves of reservations to
  another path.
- `unexplained_moves_at_most`: at most N moves without a network cause. A move is explained
  when, at its time, its old path crossed a link with an active cause (failed, or with a
  congested direction either way: TCP's acknowledgements use the reverse), or when the
  controller announced it as a rearrangement for another flow whose own path then crossed one
  (the reroute's typed decision names the flow it relieves; no reason text is read).
- `never_onto_congested`: no move onto a path crossing a link that was failed or congested
  then.
- `reacted_within`: after each fail_link, every flow whose path crossed the link has moved off
  it within the `failure` seconds; after each congest_link, every transfer whose path crossed a
  congested direction forwards and whose rate then fell under `UNDERPERFORMING` of its booking
  has moved off it within the `congestion` seconds.
- `nsi_segments`: every flow with a remote end (a DTN beyond an inter-domain port) got its WAN
  segment from the neighbour's NSA (a connection id the controller named), moved no data before
  it (a transfer moved data after it), and the neighbour said at the end that the connection was
  terminated (its own querySummarySync, `NsiSegment.end`).
- `timeline`: always checked: every action was carried out and no transfer failed.

Causes are the recording's ground truth, the timeline's own fail_link / restore_link and
congest_link / clear_link events (with the directions congested), never what the controller
says about itself. A cause is active from its onset to its end plus `GRACE` seconds, for
decisions in flight when it ended.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from sdn_app.core import decisions
from sdn_app.core.units import format_bandwidth
from tsdn.demo.record import Event, Recording
from tsdn.demo.scenario import Scenario

RESUMED_SHARE = 0.5  # a transfer has resumed once it carries this share of its booking
REPORT_INTERVAL = 1.0  # seconds one rate report covers
GRACE = 2.0  # seconds a cause stays active after its clear or restore (decisions in flight)
UNDERPERFORMING = 0.8  # a transfer under this share of its booking is held back by congestion


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


# -- causes and moves (the ground truth of the timeline) ------------------------------------------


@dataclass(frozen=True)
class Cause:
    """A failed link, or congested directions of a link, from `start` to `end` (inf: never ended)."""

    kind: str  # failure or congestion
    link: str
    ends: tuple[str, str]
    directions: frozenset[tuple[str, str]]  # (from switch, to switch) congested; both for a failure
    start: float
    end: float = math.inf

    def active(self, t: float, grace: float = GRACE) -> bool:
        """Whether the cause holds at `t` (up to `grace` seconds after it ended)."""
        return self.start <= t <= self.end + grace

    def describe(self) -> str:
        if self.kind == "failure":
            return f"{self.link} failed at {self.start:.1f} s"
        ways = ", ".join(f"{a}->{b}" for a, b in sorted(self.directions))
        return f"{self.link} congested ({ways}) at {self.start:.1f} s"


@dataclass(frozen=True)
class Move:
    """A reservation moved from `old` to `new` at `time`; `relieves`: the flow a rearrangement made room for."""

    time: float
    flow: str
    old: tuple[str, ...]
    new: tuple[str, ...]
    relieves: str = ""

    def describe(self) -> str:
        return f"{self.flow} at {self.time:.1f} s: {' '.join(self.old)} -> {' '.join(self.new)}"


def _switches(direction: str) -> tuple[str, str]:
    """The two switches of a direction id `a:port->b:port`."""
    src, _, dst = direction.partition("->")
    return src.rsplit(":", 1)[0], dst.rsplit(":", 1)[0]


def _ends(recording: Recording, event: Event) -> tuple[str, str]:
    link = event.details.get("link", "")
    ends = event.details.get("ends") or recording.links.get(link) or ("", "")
    return (str(ends[0]), str(ends[1]))


def causes(recording: Recording) -> list[Cause]:
    """Every failure and congestion of the timeline, with when it began and ended."""
    found: list[Cause] = []
    open_: dict[tuple[str, str], int] = {}  # (kind, link) -> index in found
    for event in recording.sorted_events():
        kind = {"fail_link": "failure", "restore_link": "failure", "congest_link": "congestion",
                "clear_link": "congestion"}.get(event.kind)
        if kind is None:
            continue
        link = event.details.get("link", "")
        ends = _ends(recording, event)
        if event.kind in ("fail_link", "congest_link"):
            if kind == "failure":
                directions = frozenset({ends, (ends[1], ends[0])})
            else:
                given = event.details.get("directions")
                directions = frozenset(_switches(d) for d in given) if given else frozenset(
                    {ends, (ends[1], ends[0])})
            open_[(kind, link)] = len(found)
            found.append(Cause(kind, link, ends, directions, event.time))
        elif (kind, link) in open_:
            index = open_.pop((kind, link))
            cause = found[index]
            found[index] = Cause(cause.kind, cause.link, cause.ends, cause.directions, cause.start, event.time)
    return found


def moves(recording: Recording) -> list[Move]:
    """Every reroute of the recording, in time order; a rearrangement names the flow it relieves."""
    names = recording.reservation_flows
    found = []
    for event in recording.sorted_events():
        if event.kind != "reroute":
            continue
        d = event.details
        relieves = d.get("relieves", "")
        decision = decisions.from_dict(d["decision"]) if d.get("decision") else None
        if not relieves and decision is not None and decision.relieves:  # the typed decision of a displacement
            relieves = names.get(decision.relieves.removeprefix("reservations/"), decision.relieves)
        found.append(Move(event.time, str(d.get("flow", "")), tuple(d.get("old") or ()), tuple(d.get("new") or ()),
                          relieves))
    return found


def _pairs(path: Sequence[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(path))


def crosses_link(path: Sequence[str], cause: Cause) -> bool:
    """Whether `path` goes over the cause's link, either way."""
    return crosses(path, cause.ends)


def crosses_forward(path: Sequence[str], cause: Cause) -> bool:
    """Whether `path` goes over one of the cause's directions the way it is congested."""
    return bool(_pairs(path) & cause.directions)


def path_at(recording: Recording, all_moves: list[Move], flow: str, t: float) -> tuple[str, ...]:
    """The path `flow` had at `t` (before a move at exactly `t`), as far as the recording knows."""
    mine = [m for m in all_moves if m.flow == flow]
    before = [m for m in mine if m.time < t]
    if before:
        return before[-1].new
    after = [m for m in mine if m.time >= t]
    if after:
        return after[0].old
    samples = [s.path for s in recording.rates if s.flow == flow and s.path]
    if samples:
        return samples[0]
    known = recording.flows.get(flow)
    return known.path if known is not None else ()


def _lifetime(recording: Recording, flow: str) -> tuple[float, float]:
    """When a flow of the timeline was started and released (inf: never released)."""
    start, end = math.inf, math.inf
    for event in recording.sorted_events():
        if event.details.get("name") != flow:
            continue
        if event.kind in ("transfer", "reserve") and "timeline" in event.details:
            start = min(start, event.time)
        elif event.kind == "release":
            end = min(end, event.time)
    return start, end


def _explained(move: Move, found: list[Cause], recording: Recording, all_moves: list[Move]) -> str:
    """What explains `move` (a sentence), or '' when nothing does."""
    for cause in found:
        if cause.active(move.time) and crosses_link(move.old, cause):
            return cause.describe()
    if move.relieves:
        theirs = path_at(recording, all_moves, move.relieves, move.time)
        for cause in found:
            if cause.active(move.time) and crosses_link(theirs, cause):
                return f"rearrangement for {move.relieves}, whose path crossed {cause.describe()}"
    return ""


def unexplained_moves_at_most(recording: Recording, maximum: int) -> Result:
    found = causes(recording)
    all_moves = moves(recording)
    unexplained = [m for m in all_moves if not _explained(m, found, recording, all_moves)]
    expected = f"at most {maximum} move(s) without a failed or congested link on the old path"
    detail = "; ".join(m.describe() + (f" (rearrangement for {m.relieves}, which crossed no failed or congested "
                                       "link)" if m.relieves else "") for m in unexplained)
    return Result("unexplained_moves_at_most", len(unexplained) <= maximum, expected,
                  f"{len(unexplained)} unexplained of {len(all_moves)} move(s)",
                  detail or f"{len(all_moves)} move(s), each with a cause")


def never_onto_congested(recording: Recording) -> Result:
    found = causes(recording)
    bad = []
    for move in moves(recording):
        onto = [c for c in found if c.active(move.time, grace=0.0) and crosses_link(move.new, c)]
        bad += [f"{move.describe()} onto {c.describe()}" for c in onto]
    return Result("never_onto_congested", not bad, "no move onto a failed or congested link",
                  f"{len(bad)} move(s) onto a failed or congested link", "; ".join(bad))


def _moved_off(all_moves: list[Move], flow: str, cause: Cause) -> Move | None:
    """The first move of `flow` from the cause's onset onto a path that avoids what it must."""
    for move in all_moves:
        if move.flow != flow or move.time < cause.start:
            continue
        if cause.kind == "failure" and not crosses_link(move.new, cause):
            return move
        if cause.kind == "congestion" and not crosses_forward(move.new, cause):
            return move
    return None


def _affected(recording: Recording, all_moves: list[Move], cause: Cause) -> list[str]:
    """The flows a cause requires to move: every flow on a failed link; every transfer on a
    congested direction that then fell under `UNDERPERFORMING` of its booking."""
    flows = []
    for name, flow in sorted(recording.flows.items()):
        start, end = _lifetime(recording, name)
        if not start <= cause.start < end:
            continue
        path = path_at(recording, all_moves, name, cause.start)
        if cause.kind == "failure":
            if crosses_link(path, cause):
                flows.append(name)
            continue
        if flow.kind != "transfer" or not crosses_forward(path, cause):
            continue
        leaving = _moved_off(all_moves, name, cause)
        until = min(cause.end, leaving.time if leaving else math.inf)
        if any(cause.start < s.time <= until and s.nominal_bps < UNDERPERFORMING * s.booked_bps
               for s in recording.rates if s.flow == name):
            flows.append(name)
    return flows


def reacted_within(recording: Recording, congestion: float | None, failure: float | None) -> Result:
    limits = {"congestion": congestion, "failure": failure}
    wanted = " and ".join(f"off a {'congested' if k == 'congestion' else 'failed'} link within {v:g} s"
                          for k, v in limits.items() if v is not None)
    expected = f"every affected flow {wanted}"
    all_moves = moves(recording)
    worst = {k: 0.0 for k in limits}
    problems: list[str] = []
    checked = 0
    for cause in causes(recording):
        limit = limits[cause.kind]
        if limit is None:
            continue
        for flow in _affected(recording, all_moves, cause):
            checked += 1
            leaving = _moved_off(all_moves, flow, cause)
            _, end = _lifetime(recording, flow)
            if leaving is None and end < cause.start + limit:
                continue  # released before it had to move
            took = leaving.time - cause.start if leaving is not None else math.inf
            worst[cause.kind] = max(worst[cause.kind], took)
            if leaving is None:
                problems.append(f"{flow} never moved off {cause.describe()}")
            elif took > limit:
                problems.append(f"{flow} moved off {cause.describe()} after {took:.1f} s")
    measured = ", ".join(f"{kind} {'never' if worst[kind] == math.inf else f'{worst[kind]:.1f} s'} at worst"
                         for kind, limit in limits.items() if limit is not None)
    return Result("reacted_within", not problems, expected, measured,
                  "; ".join(problems) or f"{checked} flow(s) had to move")


def reroutes_at_most(recording: Recording, maximum: int) -> Result:
    found = moves(recording)
    return Result("reroutes_at_most", len(found) <= maximum, f"<= {maximum} reroute(s)", f"{len(found)} reroute(s)",
                  "; ".join(m.describe() for m in found))


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


def remote_flows(recording: Recording) -> list[str]:
    """The flows of the timeline with an end in a neighbouring domain, by name."""
    return sorted(name for name, flow in recording.flows.items()
                  if flow.src in recording.remote_dtns or flow.dst in recording.remote_dtns)


def nsi_segments(recording: Recording) -> Result:
    expected = ("every flow to a remote DTN over a WAN segment with a connection id, no data before it, "
                "terminated at the neighbour at the end")
    names = remote_flows(recording)
    if not names:
        return Result("nsi_segments", False, expected, "no flow to a remote DTN")
    problems: list[str] = []
    terminated = 0
    for name in names:
        flow = recording.flows[name]
        segment = recording.segments.get(name)
        moved = [s for s in recording.rates if s.flow == name and s.nominal_bps > 0]
        if segment is None or not segment.connection_id:
            why = f" ({flow.state}: {flow.reason})" if flow.reason else f" ({flow.state})"
            problems.append(f"{name} never got its WAN segment (no connection id){why}")
            if moved:
                problems.append(f"{name} moved data without a WAN segment ({len(moved)} report(s))")
            continue
        early = [s for s in moved if s.time < segment.confirmed]
        if early:
            problems.append(f"{name} moved data at {early[0].time:.1f} s, before its segment {segment.connection_id} "
                            f"was confirmed at {segment.confirmed:.1f} s")
        if flow.kind == "transfer" and not moved:
            problems.append(f"{name} moved no data over {segment.connection_id}")
        if segment.end == "Terminated":
            terminated += 1
        else:
            problems.append(f"{segment.connection_id} at {segment.nsa} ({name}) not terminated at the end: "
                            f"{segment.end or 'not asked'}")
    got = sum(1 for n in names if n in recording.segments and recording.segments[n].connection_id)
    return Result("nsi_segments", not problems, expected,
                  f"{got} of {len(names)} flow(s) to remote DTNs over a segment, {terminated} terminated",
                  "; ".join(problems) or ", ".join(
                      f"{n}: {recording.segments[n].connection_id} at {recording.segments[n].nsa}" for n in names))


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
    if expect.reroutes_at_most is not None:
        results.append(reroutes_at_most(recording, expect.reroutes_at_most))
    if expect.unexplained_moves_at_most is not None:
        results.append(unexplained_moves_at_most(recording, expect.unexplained_moves_at_most))
    if expect.never_onto_congested:
        results.append(never_onto_congested(recording))
    if expect.reacted_within is not None:
        results.append(reacted_within(recording, expect.reacted_within.congestion, expect.reacted_within.failure))
    if expect.nsi_segments:
        results.append(nsi_segments(recording))
    results.append(timeline_ran(recording))
    return results
