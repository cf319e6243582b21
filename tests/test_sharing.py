"""Elastic sharing by examples: weights divide a bottleneck, ceilings hand the rest on, the
shares fit every direction in whole bits/s, and bad input is refused by name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.sharing import METHODS, Claim, changed, solve

G = 10**9


@pytest.fixture(params=METHODS)
def method(request):
    return request.param


def test_weights_1_and_3_on_one_link_get_a_quarter_and_three_quarters_of_the_extra(method):
    claims = [Claim("low", ("s1-s2",), 10 * G, 400 * G, 1), Claim("high", ("s1-s2",), 20 * G, 400 * G, 3)]
    shares = solve(claims, {"s1-s2": 100 * G}, method=method)
    assert shares == {"low": 10 * G + 25 * G, "high": 20 * G + 75 * G}


def test_a_ceiling_that_binds_gives_the_rest_to_the_other(method):
    claims = [Claim("capped", ("s1-s2",), 0, 10 * G, 3), Claim("open", ("s1-s2",), 5 * G, 400 * G, 1)]
    assert solve(claims, {"s1-s2": 100 * G}, method=method) == {"capped": 10 * G, "open": 5 * G + 90 * G}


def test_each_claim_is_held_by_its_own_bottleneck(method):
    # "long" crosses both links; "east" only the narrow one, "west" only the wide one: the narrow
    # link is split evenly, and "west" takes what "long" cannot use of the wide one.
    claims = [Claim("long", ("w", "e"), 0, 400 * G, 1), Claim("west", ("w",), 0, 400 * G, 1),
              Claim("east", ("e",), 0, 400 * G, 1)]
    shares = solve(claims, {"w": 100 * G, "e": 30 * G}, method=method)
    assert shares == {"long": 15 * G, "east": 15 * G, "west": 85 * G}


def test_a_direction_without_spare_capacity_leaves_its_claims_their_floor(method):
    claims = [Claim("a", ("missing", "x"), 7 * G, 50 * G, 2), Claim("b", ("negative",), 3 * G, 50 * G, 1),
              Claim("c", ("x",), 1 * G, 50 * G, 1)]
    shares = solve(claims, {"negative": -5 * G, "x": 20 * G}, method=method)
    assert shares == {"a": 7 * G, "b": 3 * G, "c": 21 * G}


def test_shares_are_whole_bits_per_second_rounded_down_to_fit(method):
    claims = [Claim(f"c{i}", ("d",), 0, 1000, 1) for i in range(3)] + [Claim("w7", ("d", "e"), 1, 1000, 7)]
    shares = solve(claims, {"d": 101, "e": 1000}, method=method)  # 10.1 per unit of weight
    assert all(type(s) is int for s in shares.values())
    assert shares == {"c0": 10, "c1": 10, "c2": 10, "w7": 1 + 70}


def test_no_claims_share_nothing(method):
    assert solve([], {"d": 100}, method=method) == {}


def test_the_highs_method_prints_nothing():
    """HiGHS writes a banner on stdout when it is made with its output on: the solver turns it off first."""
    code = ("from sdn_app.core.sharing import Claim, solve\n"
            "print(solve([Claim('a', ('d',), 0, 9, 1)], {'d': 5}, method='highs'))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout == "{'a': 5}\n" and run.stderr == ""


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"floor": 10, "ceiling": 5}, "claim 'r1': ceiling 5 bit/s is below its floor 10 bit/s"),
    ({"weight": 0}, "claim 'r1': weight must be at least 1, got 0"),
    ({"directions": ()}, "claim 'r1': directions must name at least one link direction, got ()"),
    ({"directions": "s1-s2"}, "claim 'r1': directions must name at least one link direction, got 's1-s2'"),
    ({"floor": -1}, "claim 'r1': floor must be at least 0 bit/s, got -1"),
    ({"weight": 1.5}, "claim 'r1': weight must be a whole number, got 1.5"),
    ({"ceiling": True}, "claim 'r1': ceiling must be a whole number, got True"),
])
def test_a_bad_claim_is_refused_naming_the_claim_and_the_field(kwargs, message):
    fields = {"id": "r1", "directions": ("s1-s2",), "floor": 0, "ceiling": 10, "weight": 1, **kwargs}
    with pytest.raises(InvalidArgument) as refused:
        Claim(**fields)
    assert str(refused.value) == message


def test_a_claim_given_twice_or_an_unknown_method_is_refused():
    claim = Claim("r1", ("d",), 0, 10, 1)
    with pytest.raises(InvalidArgument, match="claim 'r1': id given twice"):
        solve([claim, Claim("r2", ("d",), 0, 10, 1), claim], {"d": 10})
    with pytest.raises(InvalidArgument, match="method: one of filling, highs, got 'simplex'"):
        solve([claim], {"d": 10}, method="simplex")


def test_changed_reports_moves_beyond_the_step_and_new_claims():
    claims = {c.id: c for c in (Claim("a", ("d",), 0, 100 * G, 1), Claim("b", ("d",), 0, 10 * G, 1),
                                Claim("c", ("d",), 0, 10 * G, 1))}
    old = {"a": 50 * G, "b": 5 * G, "gone": 1 * G}
    # a grows 5G (exactly 5% of 100G: not more), b shrinks 1G (any shrink), c is new.
    new = {"a": 55 * G, "b": 4 * G, "c": 2 * G}
    assert changed(old, new, claims, 0.05) == {"b": 4 * G, "c": 2 * G}
    # without the spare capacity, any shrink is a change; growth by no more than the step is not
    assert changed({"a": 50 * G}, {"a": 50 * G - 1}, claims, 0.05) == {"a": 50 * G - 1}
    assert changed({"a": 50 * G}, {"a": 51 * G}, claims, 0.05) == {}
    assert changed(old, new, list(claims.values()), 0.0) == new
    with pytest.raises(InvalidArgument, match=r"step: a share of the ceiling of at least 0, got -0\.1"):
        changed(old, new, claims, -0.1)
    with pytest.raises(InvalidArgument, match="claim 'x': has a new share but no claim"):
        changed(old, {"x": 1}, claims, 0.05)


def test_a_shrink_is_a_change_only_where_a_direction_needs_it():
    """b's share shrinks by 1G on a full direction (c arrived): rewritten; a's by 1G where there is
    room: its meter stays, so meters and senders are not churned for nothing."""
    claims = [Claim("a", ("x",), 0, 100 * G, 1), Claim("b", ("d",), 0, 100 * G, 1),
              Claim("c", ("d",), 0, 100 * G, 1)]
    old = {"a": 40 * G, "b": 50 * G}
    new = {"a": 39 * G, "b": 49 * G, "c": 51 * G}
    assert changed(old, new, claims, 0.05, {"x": 45 * G, "d": 100 * G}) == {"b": 49 * G, "c": 51 * G}
    assert changed(old, new, claims, 0.05, {"x": 39 * G, "d": 100 * G}) == {"a": 39 * G, "b": 49 * G,
                                                                           "c": 51 * G}
