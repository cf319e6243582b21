"""Deadline transfers: a schedule of a few steps that carries a data set over a path by a deadline.

A data-management service asks for "these 40 TB at the other site by 06:00". `free_profile`
reads what the ledger leaves free on every direction of a path over time; `plan` turns that
profile into a schedule of at most `max_steps` contiguous steps of constant bandwidth (the
ledger books it as one stepped booking, `Ledger.reserve(steps=...)`), or refuses with
`DeadlineMissed`, naming the earliest finish the path allows. `plan_transfer` does both;
`plan_on_paths` picks the best of a few candidate paths, and `with_grace` keeps the last step on
a little past the planned finish.

What a schedule is:
- it runs from its start without a pause: every step's bandwidth is above 0 and within what is
  free throughout the step's span, so an instant with nothing free ends what can be carried
  before it (a schedule that would need to wait for the path to clear is refused);
- among the schedules of at most `max_steps` steps it finishes first, and among those that
  finish then it has the lowest peak (an empty path gives one step at the lowest rate that
  keeps the earliest finish);
- its steps change at whole seconds of the clock (the profile is read at a whole-second grain,
  taking the least free in a second it changes within), its rates are whole bits/s, and it
  ends at the first whole second by which its rates have carried every bit: it never promises
  a finish its rates do not deliver.

A refusal looks past the deadline up to `LOOKAHEAD` after the start for the earliest finish.
A profile of more than `MAX_PROFILE_STEPS` steps is coarsened first (neighbouring steps merged
at the lower of their bandwidths, the merges that give up the fewest bits first), so the work
is bounded; a coarsened profile never offers more than is free.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

from sdn_app.core.errors import InvalidArgument, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathFinder, PathRequest, Route
from sdn_app.core.reservation import ScheduleStep
from sdn_app.core.units import format_bandwidth, format_bytes, format_time

LOOKAHEAD = 30 * 86400.0  # how far past the start a refusal looks for the earliest finish
CANDIDATE_PATHS = 3  # paths a deadline schedule is planned on, the one finishing first booked
GRACE = 0.1  # of a schedule's length: how long its last step is kept past its planned finish
MIN_GRACE = 60.0  # seconds, at least (a transfer's start-up alone can take 10 s)
MAX_PROFILE_STEPS = 200  # steps of the free profile planned over; more are coarsened to this


class DeadlineMissed(NoCapacity):
    """No schedule finishes by the deadline. `earliest`: the earliest finish the path allows
    (`math.inf`: none within the look-ahead); `schedule`: the schedule that finishes then (empty
    without one); `bandwidth`: its peak, or without one the constant rate from the start that
    would have met the deadline."""

    def __init__(self, message: str, earliest: float, bandwidth: int, schedule: tuple[ScheduleStep, ...] = ()):
        super().__init__(message)
        self.earliest = earliest
        self.bandwidth = bandwidth
        self.schedule = schedule


def free_profile(ledger: Ledger, directions: Sequence[str], start: float, end: float, cap: int,
                 ignore: str | None = None) -> list[ScheduleStep]:
    """Bandwidth free on every one of `directions` over [start, end), as contiguous steps in time
    order: at each instant the least of capacity minus booked over the directions, at most `cap`
    and at least 0, with a new step wherever that changes. `ignore` leaves one booking out (to
    plan it again). Raises `NotFound` for an unknown direction, `InvalidArgument` for no
    directions, an empty window or a cap below 1."""
    if not directions:
        raise InvalidArgument("a free profile needs at least one link direction")
    if not end > start:
        raise InvalidArgument(f"end ({format_time(end)}) must be after start ({format_time(start)})")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise InvalidArgument(f"cap must be a whole number of bits/s above 0, got {cap!r}")
    usages = [ledger.usage(d, start, end, ignore) for d in directions]
    capacities = [ledger.capacities[d] for d in directions]
    times = sorted({span.start for spans in usages for span in spans})
    at = [0] * len(usages)
    steps: list[ScheduleStep] = []
    for k, t in enumerate(times):
        free = cap
        for j, spans in enumerate(usages):
            while spans[at[j]].end <= t:
                at[j] += 1
            free = min(free, capacities[j] - spans[at[j]].bandwidth)
        until = times[k + 1] if k + 1 < len(times) else end
        if steps and steps[-1].bandwidth == max(free, 0):
            steps[-1] = replace(steps[-1], end=until)
        else:
            steps.append(ScheduleStep(t, until, max(free, 0)))
    return steps


def plan(profile: Sequence[ScheduleStep], size_bits: int, start: float, deadline: float,
         max_steps: int = 4) -> tuple[ScheduleStep, ...]:
    """A schedule carrying `size_bits` from `start` that finishes by `deadline`, within the free
    `profile` (nothing is free where it has no step, nor after its last): at most `max_steps`
    contiguous steps of constant bandwidth, the earliest finish first, then the lowest peak.

    Raises `InvalidArgument` naming `size_bytes`, `deadline` or `max_steps` when one is out of
    range, and `DeadlineMissed` when no schedule finishes by the deadline.
    """
    _validate(size_bits, start, deadline, max_steps)
    grid = _Grid.of(profile, start, max(deadline, start + LOOKAHEAD))
    within = grid.until(math.floor(deadline))
    finish = _earliest(within, size_bits, max_steps)
    if finish is not None:
        return _lowest_peak(within, size_bits, max_steps, finish)
    later = _earliest(grid, size_bits, max_steps)
    what = f"{format_bytes(size_bits / 8)} from {format_time(start)} cannot arrive by {format_time(deadline)}"
    if later is None:
        steady = _ceil(Fraction(size_bits) / (Fraction(deadline) - Fraction(start)))
        if grid.dry is not None:
            why = (f"the path has nothing free from {format_time(grid.dry)}, and no schedule of at most "
                   f"{max_steps} step(s) carries it all before then")
        else:
            why = f"no schedule of at most {max_steps} step(s) finishes by {format_time(grid.times[-1])} either"
        raise DeadlineMissed(
            f"{what}: {why}; meeting the deadline would take {format_bandwidth(steady)} throughout",
            math.inf, steady,
        )
    schedule = _lowest_peak(grid, size_bits, max_steps, later)
    peak = max(step.bandwidth for step in schedule)
    raise DeadlineMissed(
        f"{what}: the earliest possible finish is {format_time(later)}, at up to {format_bandwidth(peak)}",
        float(later), peak, schedule,
    )


def plan_transfer(ledger: Ledger, directions: Sequence[str], size_bits: int, start: float, deadline: float,
                  cap: int, max_steps: int = 4, ignore: str | None = None) -> tuple[ScheduleStep, ...]:
    """`plan` over the `free_profile` of `directions` (at most `cap`, `ignore` left out), read as
    far ahead as a refusal looks."""
    _validate(size_bits, start, deadline, max_steps)
    profile = free_profile(ledger, directions, start, max(deadline, start + LOOKAHEAD), cap, ignore)
    return plan(profile, size_bits, start, deadline, max_steps)


def plan_on_paths(finder: PathFinder, ledger: Ledger, probe: PathRequest, size_bits: int,
                  cap: int) -> tuple[tuple[ScheduleStep, ...], Route]:
    """The best schedule for `size_bits` from `probe.src` to `probe.dst` between `probe.start` and
    `probe.end` (the deadline) on the first `CANDIDATE_PATHS` candidate paths (the earliest finish,
    then the lowest peak), and its route; `DeadlineMissed` (the one finishing first) when none
    makes it."""
    best: tuple[tuple[float, int], tuple[ScheduleStep, ...], Route] | None = None
    missed: list[DeadlineMissed] = []
    for path in finder.alternatives(probe, CANDIDATE_PATHS):
        try:
            schedule = plan_transfer(ledger, path.direction_ids, size_bits, probe.start, probe.end, cap)
        except DeadlineMissed as refusal:
            missed.append(refusal)
            continue
        score = (schedule[-1].end, max(s.bandwidth for s in schedule))
        if best is None or score < best[0]:
            best = (score, schedule, Route(path))
    if best is not None:
        return best[1], best[2]
    if not missed:
        raise NoCapacity(f"no path from {probe.src} to {probe.dst} has bandwidth free from {format_time(probe.start)}")
    raise min(missed, key=lambda m: m.earliest)


def with_grace(ledger: Ledger, schedule: tuple[ScheduleStep, ...], route: Route,
               deadline: float) -> tuple[ScheduleStep, ...]:
    """`schedule` with its last step kept on past its planned finish, by a tenth of its length (at
    least `MIN_GRACE`), up to the deadline and as far as its path has room: a transfer that starts
    late or runs a little slow still has its path when the plan ends."""
    last = schedule[-1]
    until = min(deadline, last.end + max(MIN_GRACE, GRACE * (last.end - schedule[0].start)))
    if until <= last.end:
        return schedule
    end = last.end
    for span in free_profile(ledger, route.primary.direction_ids, last.end, until, last.bandwidth):
        if span.bandwidth < last.bandwidth:
            break
        end = span.end
    return (*schedule[:-1], replace(last, end=end))


def _validate(size_bits: int, start: float, deadline: float, max_steps: int) -> None:
    if isinstance(size_bits, bool) or not isinstance(size_bits, int) or size_bits <= 0:
        raise InvalidArgument(f"size_bytes: a transfer needs a whole, positive size, got {size_bits!r} bits")
    if not (math.isfinite(start) and start >= 0):
        raise InvalidArgument(f"start must be a finite time, got {start!r}")
    if not math.isfinite(deadline) or deadline <= start:
        raise InvalidArgument(f"deadline ({format_time(deadline)}) must be a finite time after the start "
                              f"({format_time(start)})")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise InvalidArgument(f"max_steps must be a whole number from 1, got {max_steps!r}")


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


class _Grid:
    """A free profile ready to plan over: `times[0]` is the start, every later time a whole
    second (an int), and `free[i]` (at least 1) is free from `times[i]` to `times[i + 1]`;
    `dry` is when nothing was free any more (None: not before the last time)."""

    def __init__(self, start: float, times: list, free: list[int], dry: float | None):
        self.start = start
        self.times = times
        self.free = free
        self.dry = dry
        exact = Fraction(start)
        self._num, self._den = exact.numerator, exact.denominator

    @classmethod
    def of(cls, profile: Sequence[ScheduleStep], start: float, horizon: float) -> _Grid:
        """`profile` over [start, horizon's whole second), read at a whole-second grain, cut
        where nothing is free and coarsened to at most `MAX_PROFILE_STEPS` steps."""
        end = math.floor(horizon)
        spans = _covering(profile, start, end)
        if not spans:
            return cls(start, [start], [], start)
        bounds = sorted({start, end} | {b for a, _, _ in spans[1:] for b in (math.floor(a), math.ceil(a))
                                        if start < b < end})
        times: list = [start]
        free: list[int] = []
        k = 0
        for a, b in itertools.pairwise(bounds):
            while spans[k][1] <= a:
                k += 1
            least, m = spans[k][2], k + 1
            while m < len(spans) and spans[m][0] < b:
                least, m = min(least, spans[m][2]), m + 1
            if free and free[-1] == least:
                times[-1] = b
            else:
                free.append(least)
                times.append(b)
        dry = None
        cut = next((i for i, f in enumerate(free) if f <= 0), None)
        if cut is not None:
            dry, times, free = times[cut], times[:cut + 1], free[:cut]
        times, free = _coarsened(times, free, MAX_PROFILE_STEPS)
        return cls(start, times, free, dry)

    def until(self, end: int) -> _Grid:
        """The grid cut at the whole second `end`."""
        if end <= self.start:
            return _Grid(self.start, [self.start], [], self.dry)
        n = sum(1 for t in self.times[1:] if t < end)
        if n == len(self.free):
            return self
        return _Grid(self.start, [*self.times[:n + 1], end], self.free[:n + 1], self.dry)

    def carried(self, i: int, j: int, rate: int) -> int:
        """Whole bits carried at `rate` from `times[i]` to `times[j]`."""
        if i:
            return rate * (self.times[j] - self.times[i])
        return rate * (self.times[j] * self._den - self._num) // self._den

    def finish(self, i: int, rate: int, bits: int) -> int:
        """The first whole second by which `rate` from `times[i]` has carried `bits`."""
        if i:
            return self.times[i] - (-bits // rate)
        return -(-(bits * self._den + rate * self._num) // (rate * self._den))

    def rate_for(self, i: int, j: int, bits: int) -> int:
        """The lowest whole rate that carries `bits` from `times[i]` to `times[j]`."""
        if i:
            return -(-bits // (self.times[j] - self.times[i]))
        return -(-bits * self._den // (self.times[j] * self._den - self._num))


def _covering(profile: Sequence[ScheduleStep], start: float, end: float) -> list[tuple[float, float, int]]:
    """`profile` within [start, end) as contiguous (from, until, free) spans, 0 in its gaps."""
    spans: list[tuple[float, float, int]] = []
    at = start
    for step in sorted(profile, key=lambda s: s.start):
        if spans and step.start < at and step.end > step.start:
            raise InvalidArgument(f"profile: the step from {format_time(step.start)} overlaps the one before it")
        a, b = max(step.start, at), min(step.end, end)
        if b <= a:
            continue
        if a > at:
            spans.append((at, a, 0))
        spans.append((a, b, step.bandwidth))
        at = b
    if spans and at < end:
        spans.append((at, end, 0))
    return spans


def _coarsened(times: list, free: list[int], limit: int) -> tuple[list, list[int]]:
    """At most `limit` steps: neighbours merged at the lower bandwidth, the merge that gives up
    the fewest bits (bandwidth times duration) first."""
    if len(free) <= limit:
        return times, free
    n = len(free)
    left = list(range(-1, n - 1))
    right = [*range(1, n), -1]
    ends = times[1:]
    starts = times[:-1]
    level = free[:]
    version = [0] * n

    def cost(i: int, j: int) -> float:
        low = min(level[i], level[j])
        return ((level[i] - low) * (ends[i] - starts[i]) + (level[j] - low) * (ends[j] - starts[j]))

    heap = [(cost(i, i + 1), i, 0, 0) for i in range(n - 1)]
    heapq.heapify(heap)
    alive = n
    while alive > limit:
        _, i, vi, vj = heapq.heappop(heap)
        j = right[i]
        if j < 0 or version[i] != vi or version[j] != vj or level[i] < 0:
            continue
        level[i] = min(level[i], level[j])
        ends[i] = ends[j]
        level[j] = -1
        right[i] = right[j]
        if right[j] >= 0:
            left[right[j]] = i
        version[i] += 1
        alive -= 1
        if left[i] >= 0:
            heapq.heappush(heap, (cost(left[i], i), left[i], version[left[i]], version[i]))
        if right[i] >= 0:
            heapq.heappush(heap, (cost(i, right[i]), i, version[i], version[right[i]]))
    kept = [i for i in range(n) if level[i] >= 0]
    return [times[0], *(ends[i] for i in kept)], [level[i] for i in kept]


def _best(grid: _Grid, caps: list[int], steps: int) -> tuple[list[list[int]], list[list[int]]]:
    """`best[k][j]`: the most bits carried by `times[j]` by at most `k` steps from the start, at
    most `caps[i]` over `times[i]`..`times[i + 1]`, changing only at grid times (-1: none end
    there); `came[k][j]`: where the last of them starts (-1: fewer steps do as well)."""
    n = len(caps)
    times = grid.times
    best = [[0] + [-1] * n]
    came = [[-1] * (n + 1)]
    for _ in range(steps):
        prev = best[-1]
        row, origin = prev[:], [-1] * (n + 1)
        for j in range(1, n + 1):
            top, tj, rate = row[j], times[j], caps[j - 1]
            for i in range(j - 1, 0, -1):
                if caps[i] < rate:
                    rate = caps[i]
                if prev[i] >= 0:
                    value = prev[i] + rate * (tj - times[i])
                    if value > top:
                        top, origin[j] = value, i
            rate = min(rate, caps[0])
            value = grid.carried(0, j, rate)  # prev[0] is 0: nothing before the start
            if value > top:
                top, origin[j] = value, 0
            row[j] = top
        best.append(row)
        came.append(origin)
    return best, came


def _earliest(grid: _Grid, size_bits: int, steps: int) -> int | None:
    """The first whole second by which at most `steps` steps within `grid` carry `size_bits`
    (None: none within it)."""
    n = len(grid.free)
    if not n:
        return None
    prefix = _best(grid, grid.free, steps - 1)[0][-1]  # the steps before the last
    times, free = grid.times, grid.free
    found: int | None = None
    for i in range(n):
        if found is not None and times[i] >= found:
            break
        if prefix[i] < 0:
            continue
        rest = size_bits - prefix[i]
        if rest <= 0:
            found = times[i]
            break
        rate = free[i]
        for p in range(i, n):
            rate = min(rate, free[p])
            finish = grid.finish(i, rate, rest)
            if finish <= times[p + 1]:
                found = finish if found is None else min(found, finish)
                break
            if found is not None and times[p + 1] >= found:
                break
    return found


def _lowest_peak(grid: _Grid, size_bits: int, steps: int, finish: int) -> tuple[ScheduleStep, ...]:
    """The schedule of at most `steps` steps within `grid` that carries `size_bits` by `finish`
    (which one can) with the lowest peak."""
    part = grid.until(finish)
    n = len(part.free)

    def carries(peak: int) -> bool:
        return _best(part, [min(f, peak) for f in part.free], steps)[0][-1][n] >= size_bits

    low = _ceil(Fraction(size_bits) / (Fraction(finish) - Fraction(grid.start)))  # no less can do it
    high = max(part.free)
    if carries(low):
        high = low
    while high - low > 1:
        middle = (low + high) // 2
        if carries(middle):
            high = middle
        else:
            low = middle
    caps = [min(f, high) for f in part.free]
    came = _best(part, caps, steps)[1]
    spans: list[tuple[int, int]] = []
    j, k = n, steps
    while j > 0 and k > 0:
        if came[k][j] < 0:
            k -= 1
            continue
        spans.append((came[k][j], j))
        j, k = came[k][j], k - 1
    spans.reverse()
    rates = [min(caps[i:j]) for i, j in spans]
    carried = sum(part.carried(i, j, r) for (i, j), r in zip(spans[:-1], rates, strict=False))
    rates[-1] = max(1, part.rate_for(spans[-1][0], n, size_bits - carried))  # no faster than needed
    schedule: list[ScheduleStep] = []
    for (i, j), rate in zip(spans, rates, strict=True):
        if schedule and schedule[-1].bandwidth == rate:
            schedule[-1] = replace(schedule[-1], end=float(part.times[j]))
        else:
            schedule.append(ScheduleStep(float(part.times[i]), float(part.times[j]), rate))
    return tuple(schedule)
