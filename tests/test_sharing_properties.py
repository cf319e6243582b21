"""Property tests of elastic sharing against its definition and an exact brute-force model.

Hypothesis draws a few link directions (some missing from the spare capacities, some with a
negative spare capacity, small and terabit-sized values) and up to ten claims across them with
random floors, ceilings and weights. For both methods, every time:
- each share is a whole number of bits/s within [floor, ceiling];
- on every direction the extras (share - floor) sum to at most the spare capacity;
- weighted max-min fairness, by its bottleneck characterisation: every claim below its ceiling
  crosses a saturated direction (spare capacity used up to rounding) on which its extra per unit
  of weight is the largest of the claims there;
- each extra is, to rounding, the one exact progressive filling in fractions gives (a model
  written here, sharing no code with the solver).
On one direction with no ceiling binding, extras are proportional to the weights; `changed`
reports exactly the shares that shrank, grew by more than the step, or are new. The checks
themselves are shown to refuse an equal split and an allocation that leaves capacity unused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sdn_app.core.sharing import METHODS, Claim, changed, solve

DIRECTIONS = [f"d{i}" for i in range(6)]
RELATIVE = Fraction(1, 10**8)  # of the largest spare capacity: float error allowed on top of rounding
SMALL = st.integers(0, 300)
HUGE = st.integers(0, 4 * 10**12)


@st.composite
def problems(draw) -> tuple[list[Claim], dict[str, int]]:
    magnitude = draw(st.sampled_from([SMALL, HUGE]), label="magnitude")
    spare = draw(st.dictionaries(st.sampled_from(DIRECTIONS), st.one_of(magnitude, st.integers(-50, 0)),
                                 max_size=len(DIRECTIONS)), label="spare")
    claims = []
    for i in range(draw(st.integers(0, 10), label="claims")):
        route = draw(st.lists(st.sampled_from(DIRECTIONS), min_size=1, max_size=3, unique=True))
        floor = draw(magnitude)
        ceiling = floor + draw(st.one_of(magnitude, st.just(0), st.integers(0, 10)))
        weight = draw(st.one_of(st.integers(1, 4), st.integers(1, 1000)))
        claims.append(Claim(f"c{i}", tuple(route), floor, ceiling, weight))
    return claims, spare


def spare_of(claims: Sequence[Claim], spare: Mapping[str, int]) -> dict[str, int]:
    """Every crossed direction's spare capacity as the solver must read it."""
    return {d: max(0, spare.get(d, 0)) for c in claims for d in c.directions}


def exact_filling(claims: Sequence[Claim], spare: Mapping[str, int]) -> dict[str, Fraction]:
    """Weighted progressive filling in exact fractions: each claim's extra above its floor."""
    room = spare_of(claims, spare)
    extra = {c.id: Fraction(0) for c in claims}
    live = {c.id: c for c in claims}
    level = Fraction(0)
    while live:
        candidates = [Fraction(c.ceiling - c.floor, c.weight) for c in live.values()]
        for d, capacity in room.items():
            weight = sum(c.weight for c in live.values() if d in c.directions)
            if weight:
                frozen = sum(extra[c.id] for c in claims if c.id not in live and d in c.directions)
                candidates.append(Fraction(capacity - frozen) / weight)
        level = max(level, min(candidates))
        for c in live.values():
            extra[c.id] = c.weight * level
        used = {d: sum(extra[c.id] for c in claims if d in c.directions) for d in room}
        for c in list(live.values()):
            if extra[c.id] >= c.ceiling - c.floor or any(used[d] >= room[d] for d in c.directions):
                extra[c.id] = min(extra[c.id], Fraction(c.ceiling - c.floor))
                del live[c.id]
    return extra


def violations(claims: Sequence[Claim], spare: Mapping[str, int], shares: Mapping[str, int]) -> list[str]:
    """What in `shares` breaks the bounds, the spare capacities, or weighted max-min fairness."""
    room = spare_of(claims, spare)
    slack = RELATIVE * max(room.values(), default=0)
    found = []
    if set(shares) != {c.id for c in claims}:
        found.append(f"shares for {sorted(shares)}, claims {sorted(c.id for c in claims)}")
        return found
    extra = {c.id: shares[c.id] - c.floor for c in claims}
    for c in claims:
        if type(shares[c.id]) is not int or not c.floor <= shares[c.id] <= c.ceiling:
            found.append(f"{c.id}: share {shares[c.id]!r} outside [{c.floor}, {c.ceiling}]")
    on = {d: [c for c in claims if d in c.directions] for d in room}
    used = {d: sum(extra[c.id] for c in on[d]) for d in room}
    for d, capacity in room.items():
        if used[d] > capacity:
            found.append(f"{d}: extras {used[d]} over spare {capacity}")
    for c in claims:
        if shares[c.id] == c.ceiling:
            continue
        # Rounding down takes less than 1 bit/s from each claim, hence the allowances.
        if not any(used[d] >= room[d] - len(on[d]) - slack
                   and all(Fraction(extra[c.id] + 1, c.weight) + slack >= Fraction(extra[o.id], o.weight)
                           for o in on[d])
                   for d in c.directions):
            found.append(f"{c.id}: below its ceiling with no saturated direction where it has the most per weight")
    return found


@settings(max_examples=300, deadline=None)
@given(problems(), st.sampled_from(METHODS))
@example(([Claim("low", ("d",), 0, 1000, 1), Claim("high", ("d",), 0, 1000, 3)], {"d": 100}), "filling")
@example(([Claim("long", ("w", "e"), 5, 900, 2), Claim("west", ("w",), 0, 900, 1), Claim("east", ("e",), 0, 40, 1)],
          {"w": 100, "e": 60}), "highs")
def test_shares_are_bounded_fit_and_weighted_max_min_fair(problem, method):
    claims, spare = problem
    shares = solve(claims, spare, method=method)
    assert violations(claims, spare, shares) == []


@settings(max_examples=300, deadline=None)
@given(problems(), st.sampled_from(METHODS))
def test_shares_are_exact_progressive_filling_to_rounding(problem, method):
    claims, spare = problem
    shares = solve(claims, spare, method=method)
    exact = exact_filling(claims, spare)
    slack = RELATIVE * max(spare_of(claims, spare).values(), default=0)
    for c in claims:
        assert exact[c.id] - 1 - slack < shares[c.id] - c.floor <= exact[c.id] + slack, c.id


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=12), st.one_of(SMALL, HUGE), st.sampled_from(METHODS))
def test_on_one_direction_extras_are_proportional_to_weights(weights, capacity, method):
    claims = [Claim(f"c{i}", ("d",), i, i + capacity + 1, w) for i, w in enumerate(weights)]
    shares = solve(claims, {"d": capacity}, method=method)
    assert proportionality(claims, capacity, shares) == []


def proportionality(claims: Sequence[Claim], capacity: int, shares: Mapping[str, int]) -> list[str]:
    total = sum(c.weight for c in claims)
    slack = RELATIVE * capacity
    return [f"{c.id}: extra {shares[c.id] - c.floor}, its weight's part {c.weight * Fraction(capacity, total)}"
            for c in claims
            if not c.weight * Fraction(capacity, total) - 1 - slack < shares[c.id] - c.floor
            <= c.weight * Fraction(capacity, total) + slack]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_changed_reports_every_shrink_and_every_growth_beyond_the_step(data):
    ids = [f"c{i}" for i in range(data.draw(st.integers(0, 8)))]
    ceilings = {i: data.draw(st.integers(1, 10**12), label=f"ceiling {i}") for i in ids}
    claims = {i: Claim(i, ("d",), 0, ceilings[i], 1) for i in ids}
    new = {i: data.draw(st.integers(0, ceilings[i]), label=f"new {i}") for i in ids}
    known = data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
    old = {i: data.draw(st.one_of(st.integers(0, ceilings[i]), st.just(new[i]),
                                  st.integers(max(0, new[i] - 5), new[i] + 5)), label=f"old {i}")
           for i in known}
    step = data.draw(st.sampled_from([0.0, 0.05, 0.2, 1.0]))
    moved = changed(old, new, claims, step)
    for i in ids:
        expected = i not in old or new[i] < old[i] or Fraction(new[i] - old[i]) > Fraction(step) * ceilings[i]
        assert (i in moved) == expected, (i, old.get(i), new[i], ceilings[i], step)
        if expected:
            assert moved[i] == new[i]
    assert set(moved) <= set(new)


@settings(max_examples=300, deadline=None)
@given(problems(), st.data(), st.sampled_from([0.0, 0.05, 0.5]))
def test_meters_kept_by_changed_never_put_a_direction_over_its_spare(problem, data, step):
    """Whatever the meters were (any within their bounds, e.g. an older solution), rewriting only
    what `changed` says leaves every direction within its spare capacity."""
    claims, spare = problem
    new = solve(claims, spare)
    old = {c.id: data.draw(st.integers(c.floor, c.ceiling), label=f"old {c.id}") for c in claims
           if data.draw(st.booleans(), label=f"has a meter {c.id}")}
    moved = changed(old, new, claims, step, spare)
    meters = {c.id: moved.get(c.id, old.get(c.id)) for c in claims}
    assert all(meters[c.id] is not None and c.floor <= meters[c.id] <= c.ceiling for c in claims)
    for d, room in spare_of(claims, spare).items():
        assert sum(meters[c.id] - c.floor for c in claims if d in c.directions) <= room, d


def test_the_checks_refuse_an_equal_split_and_unused_capacity():
    """The properties can fail: an equal split ignores the weights, a half-used link is not Pareto-efficient."""
    claims = [Claim("low", ("d",), 0, 1000, 1), Claim("high", ("d",), 0, 1000, 3)]
    equal = {"low": 50, "high": 50}
    assert violations(claims, {"d": 100}, equal) == [
        "high: below its ceiling with no saturated direction where it has the most per weight"]
    assert proportionality(claims, 100, equal) != []
    half = {"low": 12, "high": 37}
    assert len(violations(claims, {"d": 100}, half)) == 2
    over = {"low": 25, "high": 76}
    assert violations(claims, {"d": 100}, over) == ["d: extras 101 over spare 100"]
    assert violations(claims, {"d": 100}, solve(claims, {"d": 100})) == []
    exact = exact_filling(claims, {"d": 100})
    assert exact == {"low": 25, "high": 75}
