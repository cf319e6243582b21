"""Elastic sharing: what each elastic reservation may send now, beyond its booked floor.

An elastic reservation books a floor in the ledger like a guaranteed one and may send up to a
ceiling. At the current instant each link direction has some spare capacity: its capacity minus
everything booked on it now, every elastic floor included. `solve` shares that spare capacity
among the elastic reservations (`Claim`s), each on its fixed route; `changed` says which meters
a new sharing moves enough to be worth rewriting.

Fairness rule: weighted max-min fairness of the extra above the floor, by progressive filling.
Every claim not yet frozen grows at the same rate per unit of its weight (its priority); when a
link direction's spare capacity is used up, every claim crossing it freezes; a claim that
reaches its ceiling freezes; filling goes on until every claim is frozen. The result is
Pareto-efficient (no claim can get more without taking from one whose extra per unit of weight
is no larger), every claim below its ceiling crosses a saturated direction on which its extra
per unit of weight is the largest, and on a shared bottleneck a claim of weight 3 gets three
times the extra of a claim of weight 1.

Each round of the filling is the linear program: maximise the common level t subject to
extra_i >= weight_i * t for the claims not yet frozen, extra_i <= ceiling_i - floor_i, and, on
every direction, the extras crossing it summing to at most its spare capacity; then the claims
on the directions this saturates and the claims at their ceiling freeze (to within 1e-12 of
the largest spare capacity). With one fixed route per claim this program has a closed-form
optimum: the least, over the directions live claims cross, of the direction's remaining spare
capacity over the live weight crossing it (claims that reach their ceiling below that level
freeze first, and the level is taken again). The default `method="filling"` computes that
directly with numpy; `method="highs"` solves the same rounds as LPs with HiGHS (one model per
solve, re-solved warm with a frozen claim's column fixed): the same shares to within 1e-10 of
the largest spare capacity, tens of times slower, and the formulation to extend if a claim may
ever split over several paths.

Shares are whole bits per second, rounded down: never below the floor, never above the ceiling,
and on every direction the extras (shares minus floors) sum to at most its spare capacity. A
direction missing from the spare capacities has none; a negative spare capacity counts as 0.

>>> shares = solve([Claim("a", ("d",), 0, 100, 1), Claim("b", ("d",), 10, 100, 3)], {"d": 40})
>>> shares == {"a": 10, "b": 40}
True
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import highspy
import numpy as np

from sdn_app.core.errors import InvalidArgument

METHODS: tuple[str, ...] = ("filling", "highs")
# A direction with spare capacity left below this share of the largest spare capacity is
# saturated, and a claim this close to its ceiling is at it.
_TOLERANCE = 1e-12
# An extra a float rounding error below a whole number of bits/s rounds up to it, not down.
_SNAP = 1e-12
_MAX_SPARE = 2**62  # keeps sums of int64 extras from overflowing


@dataclass(frozen=True)
class Claim:
    """An elastic reservation as the solver sees it."""

    id: str
    directions: tuple[str, ...]  # link directions its route crosses (primary path)
    floor: int  # bits/s booked in the ledger
    ceiling: int  # bits/s at most, >= floor
    weight: int  # priority, >= 1

    def __post_init__(self) -> None:
        name = f"claim {self.id!r}"
        if not isinstance(self.id, str) or not self.id:
            raise InvalidArgument(f"{name}: id must be a non-empty string")
        for field in ("floor", "ceiling", "weight"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgument(f"{name}: {field} must be a whole number, got {value!r}")
        if self.floor < 0:
            raise InvalidArgument(f"{name}: floor must be at least 0 bit/s, got {self.floor}")
        if self.ceiling < self.floor:
            raise InvalidArgument(f"{name}: ceiling {self.ceiling} bit/s is below its floor {self.floor} bit/s")
        if self.weight < 1:
            raise InvalidArgument(f"{name}: weight must be at least 1, got {self.weight}")
        if (isinstance(self.directions, str) or not self.directions
                or not all(isinstance(d, str) and d for d in self.directions)):
            raise InvalidArgument(f"{name}: directions must name at least one link direction, "
                                  f"got {self.directions!r}")


def solve(claims: Sequence[Claim], spare: Mapping[str, int], *, method: str = "filling") -> dict[str, int]:
    """Each claim's share in bits/s (floor + what it gets of the spare capacity), by claim id.

    Weighted max-min fair, whole bits/s, within [floor, ceiling], and within every direction's
    spare capacity (see the module's docstring). `method` is "filling" or "highs": two ways to
    the same shares. Raises `InvalidArgument` for a claim id given twice or an unknown method
    (an invalid `Claim` cannot be made).
    """
    if method not in METHODS:
        raise InvalidArgument(f"method: one of {', '.join(METHODS)}, got {method!r}")
    if not claims:
        return {}
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        twice = next(i for i, n in _counts(ids).items() if n > 1)
        raise InvalidArgument(f"claim {twice!r}: id given twice")
    extras = _Problem(claims, spare).extras(method)
    return {c.id: c.floor + e for c, e in zip(claims, extras.tolist(), strict=True)}


def changed(old: Mapping[str, int], new: Mapping[str, int], claims: Mapping[str, Claim] | Sequence[Claim],
            step: float, spare: Mapping[str, int] | None = None) -> dict[str, int]:
    """The meters worth rewriting, by claim id, when the shares go from the meters `old` to `new`:

    - those with no meter in `old`, and those outside their claim's floor and ceiling now;
    - every share above its meter by more than `step` x the claim's ceiling (smaller increases
      would churn meters and senders for little);
    - the shares below their meter where it is needed: on every direction whose extras (meters
      minus floors) would otherwise add up to more than its `spare` capacity, every claim that
      shrinks. Without `spare`, every share below its meter.

    Keeping the rest of the meters as they are never puts a direction over its spare capacity
    when `new` fits it. `claims` (by id, or a sequence) must hold every claim of `new`; `step` is
    at least 0.
    """
    if not step >= 0:
        raise InvalidArgument(f"step: a share of the ceiling of at least 0, got {step!r}")
    by_id = claims if isinstance(claims, Mapping) else {c.id: c for c in claims}
    moved: dict[str, int] = {}
    shrinking: list[str] = []
    for claim_id, share in new.items():
        claim = by_id.get(claim_id)
        if claim is None:
            raise InvalidArgument(f"claim {claim_id!r}: has a new share but no claim")
        before = old.get(claim_id)
        if before is None or not claim.floor <= before <= claim.ceiling or share - before > step * claim.ceiling:
            moved[claim_id] = share
        elif share < before:
            shrinking.append(claim_id)
    if spare is None:
        moved.update((claim_id, new[claim_id]) for claim_id in shrinking)
        return moved
    load: dict[str, int] = {}
    for claim_id in new:
        claim = by_id[claim_id]
        meter = moved.get(claim_id, old.get(claim_id, new[claim_id]))
        for d in claim.directions:
            load[d] = load.get(d, 0) + meter - claim.floor
    over = {d for d, extra in load.items() if extra > max(spare.get(d, 0), 0)}
    moved.update((claim_id, new[claim_id]) for claim_id in shrinking if over.intersection(by_id[claim_id].directions))
    return moved


def _counts(items: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The concatenation of arange(start, end) for each pair."""
    lengths = ends - starts
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return offsets + np.arange(int(lengths.sum()))


class _Problem:
    """One solve: the claims and directions as arrays, and the shares rounded to fit."""

    def __init__(self, claims: Sequence[Claim], spare: Mapping[str, int]):
        self.claims = claims
        index: dict[str, int] = {}
        names = itertools.chain.from_iterable(c.directions for c in claims)
        direction_of = np.fromiter((index.setdefault(d, len(index)) for d in names), dtype=np.int64)
        counts = np.fromiter((len(c.directions) for c in claims), dtype=np.int64, count=len(claims))
        k = len(index)
        # (claim, direction) pairs, each once and sorted by claim: a route crossing a direction
        # twice needs it once.
        pairs = np.unique(np.repeat(np.arange(len(claims)), counts) * k + direction_of)
        self.claim_of, self.direction_of = pairs // k, pairs % k
        self.spare = np.fromiter((min(max(0, int(spare.get(d, 0))), _MAX_SPARE) for d in index),
                                 dtype=np.int64, count=k)
        room = np.fromiter((c.ceiling - c.floor for c in claims), dtype=np.int64, count=len(claims))
        starts = np.flatnonzero(np.diff(self.claim_of, prepend=-1))
        # No claim can take more than any direction it crosses has spare.
        self.headroom = np.minimum(room, np.minimum.reduceat(self.spare[self.direction_of], starts))
        self.weight = np.fromiter((c.weight for c in claims), dtype=np.float64, count=len(claims))

    def extras(self, method: str) -> np.ndarray:
        """Each claim's whole bits/s above its floor, in the order of the claims."""
        extras = np.zeros(len(self.claims), dtype=np.int64)
        active = np.flatnonzero(self.headroom > 0)  # the others get exactly their floor
        if active.size:
            rounds = _Rounds(self, active)
            level: _Level = _HighsLevel(rounds) if method == "highs" else _ClosedFormLevel(rounds)
            scaled = rounds.run(level) * rounds.scale
            extras[active] = np.floor(scaled + _SNAP * scaled)
            np.clip(extras, 0, self.headroom, out=extras)
            self._fit(extras)
        return extras

    def _fit(self, extras: np.ndarray) -> None:
        """Take back what float rounding left over a direction's spare capacity (rare; a few bits/s)."""
        load = np.zeros(len(self.spare), dtype=np.int64)
        np.add.at(load, self.direction_of, extras[self.claim_of])
        for d in np.flatnonzero(load > self.spare):
            on = self.claim_of[self.direction_of == d]
            excess = int(extras[on].sum() - self.spare[d])
            for i in on[np.argsort(-extras[on], kind="stable")]:
                if excess <= 0:
                    break
                cut = min(excess, int(extras[i]))
                extras[i] -= cut
                excess -= cut


class _Level(Protocol):
    """How a round's level is found: the closed form, or an LP."""

    def level(self) -> float:
        """The highest common level the live claims reach (ceilings aside) with the frozen ones fixed."""
        ...

    def froze(self, claims: np.ndarray) -> None:
        """`claims` were just frozen at their values."""
        ...


class _Rounds:
    """Progressive filling over the active claims, in units of the largest spare capacity they cross."""

    def __init__(self, problem: _Problem, active: np.ndarray):
        m = active.size
        position = np.full(len(problem.claims), -1, dtype=np.int64)
        position[active] = np.arange(m)
        keep = position[problem.claim_of] >= 0
        used, self.direction_of = np.unique(problem.direction_of[keep], return_inverse=True)
        self.claim_of = position[problem.claim_of[keep]]  # still sorted by claim
        self.m, self.k = m, used.size
        # bits/s per unit: the largest spare capacity these claims cross (> 0, as each has headroom).
        self.scale = scale = float(problem.spare[used].max())
        self.weight = problem.weight[active]
        self.ceiling = problem.headroom[active] / scale
        self.spare = problem.spare[used] / scale
        self.claim_start = np.searchsorted(self.claim_of, np.arange(m + 1))
        by_direction = np.argsort(self.direction_of, kind="stable")
        self.claims_on = self.claim_of[by_direction]
        self.direction_start = np.searchsorted(self.direction_of[by_direction], np.arange(self.k + 1))
        self.live = np.ones(m, dtype=bool)
        self.value = np.zeros(m)
        self.live_weight = np.bincount(self.direction_of, weights=self.weight[self.claim_of], minlength=self.k)
        self.frozen_load = np.zeros(self.k)
        self.t = 0.0

    def run(self, finder: _Level) -> np.ndarray:
        """Each active claim's extra, filled round by round until every claim is frozen."""
        ceiling_level = self.ceiling / self.weight
        by_ceiling = np.argsort(ceiling_level, kind="stable")
        ceiling_levels = ceiling_level[by_ceiling]
        reached = 0  # claims before this place in by_ceiling are frozen
        remaining = self.m
        while remaining:
            self.t = max(self.t, finder.level())
            # Claims that reach their ceiling at this level freeze there, and the level is found
            # again: what they leave raises it.
            upto = int(np.searchsorted(ceiling_levels, self.t + _TOLERANCE, side="right"))
            window = by_ceiling[reached:upto]
            at_ceiling = self.live[window] & (self.ceiling[window] <= self.weight[window] * self.t + _TOLERANCE)
            if at_ceiling.any():
                remaining -= self._freeze(window[at_ceiling], self.ceiling[window[at_ceiling]], finder)
            waiting = self.live[window]
            reached += int(np.argmax(waiting)) if waiting.any() else window.size
            if at_ceiling.any():
                continue
            crossed = self.live_weight > 0.5
            slack = np.where(crossed, self.spare - self.frozen_load - self.live_weight * self.t, np.inf)
            saturated = np.flatnonzero(slack <= _TOLERANCE)
            if not saturated.size:  # float noise left the binding direction just outside the tolerance
                saturated = np.array([int(np.argmin(slack))])
            on = self.claims_on[_ranges(self.direction_start[saturated], self.direction_start[saturated + 1])]
            on = np.unique(on[self.live[on]])
            remaining -= self._freeze(on, np.minimum(self.weight[on] * self.t, self.ceiling[on]), finder)
        return self.value

    def _freeze(self, claims: np.ndarray, values: np.ndarray, finder: _Level) -> int:
        self.value[claims] = values
        self.live[claims] = False
        entries = _ranges(self.claim_start[claims], self.claim_start[claims + 1])
        directions, owners = self.direction_of[entries], self.claim_of[entries]
        self.live_weight -= np.bincount(directions, weights=self.weight[owners], minlength=self.k)
        self.frozen_load += np.bincount(directions, weights=self.value[owners], minlength=self.k)
        finder.froze(claims)
        return claims.size


class _ClosedFormLevel:
    """A round's optimum directly: the least remaining spare capacity per live weight."""

    def __init__(self, rounds: _Rounds):
        self.rounds = rounds

    def level(self) -> float:
        r = self.rounds
        crossed = r.live_weight > 0.5
        return float(((r.spare[crossed] - r.frozen_load[crossed]) / r.live_weight[crossed]).min())

    def froze(self, claims: np.ndarray) -> None:
        """Nothing to keep: each level is computed afresh from the rounds' loads."""


class _QuietHighs(highspy.Highs):
    """HiGHS with its output off from the start."""

    def enableCallbacks(self) -> None:
        # Highs() registers its callbacks in its constructor, which prints HiGHS's banner on
        # stdout unless output is off by then.
        self.setOptionValue("output_flag", False)
        super().enableCallbacks()


class _HighsLevel:
    """A round's optimum as an LP solved by HiGHS, the model built once and re-solved warm.

    Columns: the active claims' extras, then the level t. Rows: extra_i - weight_i * t >= 0 per
    claim, then per direction the extras crossing it <= its spare capacity. A live claim's
    ceiling is left to the rounds (as a bound it would stop t at the first ceiling). A frozen
    claim's column is fixed at 0 and its level row dropped, and what it was frozen at comes off
    the spare capacity of the rows it crosses (never below 0): a frozen value a rounding error
    too large can then never make a later round infeasible.
    """

    def __init__(self, rounds: _Rounds):
        m, k, inf = rounds.m, rounds.k, highspy.kHighsInf
        self.direction_rows = (m + np.arange(k)).astype(np.int32)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = m + 1, m + k
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.col_cost_ = np.concatenate((np.zeros(m), [1.0]))
        lp.col_lower_ = np.zeros(m + 1)
        lp.col_upper_ = np.full(m + 1, inf)
        lp.row_lower_ = np.concatenate((np.zeros(m), np.full(k, -inf)))
        lp.row_upper_ = np.concatenate((np.full(m, inf), rounds.spare))
        matrix = lp.a_matrix_
        matrix.format_ = highspy.MatrixFormat.kRowwise
        matrix.num_col_, matrix.num_row_ = m + 1, m + k
        matrix.start_ = np.concatenate((2 * np.arange(m + 1), 2 * m + rounds.direction_start[1:]))
        matrix.index_ = np.concatenate((np.column_stack((np.arange(m), np.full(m, m))).ravel(), rounds.claims_on))
        matrix.value_ = np.concatenate((np.column_stack((np.ones(m), -rounds.weight)).ravel(),
                                        np.ones(rounds.claims_on.size)))
        self.rounds = rounds
        self.highs = _QuietHighs()
        # Tighter than HiGHS's default 1e-7: in units of the largest spare capacity, that would let
        # a small direction be overrun by a visible share of its own spare capacity.
        self.highs.setOptionValue("primal_feasibility_tolerance", 1e-10)
        self.highs.setOptionValue("dual_feasibility_tolerance", 1e-10)
        self.highs.passModel(lp)

    def level(self) -> float:
        self.highs.run()
        status = self.highs.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise RuntimeError(f"elastic sharing: HiGHS ended a round with {self.highs.modelStatusToString(status)}")
        return self.highs.getInfo().objective_function_value

    def froze(self, claims: np.ndarray) -> None:
        inf = highspy.kHighsInf
        columns = claims.astype(np.int32)
        self.highs.changeColsBounds(columns.size, columns, np.zeros(columns.size), np.zeros(columns.size))
        self.highs.changeRowsBounds(columns.size, columns, np.full(columns.size, -inf), np.full(columns.size, inf))
        left = np.maximum(0.0, self.rounds.spare - self.rounds.frozen_load)
        self.highs.changeRowsBounds(left.size, self.direction_rows, np.full(left.size, -inf), left)
