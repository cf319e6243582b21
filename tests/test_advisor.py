"""Rate-driven rerouting: synthetic per-second reports against bookings, on ring8 with
simulated flow tables."""

from __future__ import annotations

import math

import pytest

from sdn_app.core.advisor import AfterMove, RateAdvisor, Underperforming
from sdn_app.core.errors import InvalidArgument, PermissionDenied
from sdn_app.core.reservations import Principal, Role, State
from tests.flowtable import delivered
from tests.switched import RUCIO, G, active, confirm, switched_ring8

OTHER = Principal("fts", Role.SERVICE)
AGENT = Principal("dtn1-agent", Role.AGENT)


@pytest.fixture
def env(tmp_path):
    return switched_ring8(tmp_path)


def report(env, r, bps, times=1, who=AGENT):
    for _ in range(times):
        env.clock.advance(1)
        now = env.book.report_rate(who, r.name, bps)
    return now


def test_the_advisor_counts_consecutive_low_reports():
    advisor = RateAdvisor(threshold=0.8, consecutive=3)
    assert advisor.observe("r", 10 * G, 5 * G) is None
    assert advisor.observe("r", 10 * G, 5 * G) is None
    assert advisor.observe("r", 10 * G, 9 * G) is None  # one good report breaks the run
    assert advisor.observe("r", 10 * G, 4 * G) is None
    assert advisor.observe("r", 10 * G, 6 * G) is None
    assert advisor.observe("r", 10 * G, 5 * G) == Underperforming("r", 5 * G, 10 * G)
    advisor.moved("r", 5 * G)
    assert advisor.observe("r", 10 * G, 9 * G) is None
    assert advisor.observe("r", 10 * G, 10 * G) is None
    assert advisor.observe("r", 10 * G, 11 * G) == AfterMove("r", 5 * G, 10 * G, 10 * G)
    with pytest.raises(ValueError):
        RateAdvisor(threshold=1.5)
    with pytest.raises(ValueError):
        RateAdvisor(consecutive=0)


def test_an_underperforming_transfer_moves_and_the_rate_after_is_told(env):
    r = active(env)
    report(env, r, 9 * G, times=5)  # at 90 %: fine
    assert env.book.take_changes() == []
    report(env, r, 3 * G, times=2)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE
    moving = report(env, r, 3 * G)
    assert moving.state is State.MOVING
    assert "achieved 3G of 10G booked for 3 reports" in moving.reason and "s8" in moving.reason
    confirm(env)
    assert delivered(env.tables, "dtn1", "dtn3")[1] == ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
    assert env.book.get(RUCIO, r.name).request.exclude == ()  # the service's own constraints stay
    env.book.take_events()
    after = report(env, r, 10 * G, times=3)
    assert after.state is State.ACTIVE and after.reason == "after the move: 10G achieved (was 3G, booked 10G)"
    assert [e.reason for e in env.book.take_events()] == [after.reason]


def test_no_alternate_with_room_marks_it_congested_and_changes_nothing(env):
    r = active(env, bandwidth=60 * G)
    active(env, "dtn7", "dtn5", bandwidth=50 * G)  # the way round has only 50G left on s7->s6->s5
    now = report(env, r, 20 * G, times=3)
    assert now.state is State.ACTIVE
    assert now.reason.startswith("congested: achieved 20G of 60G booked") and "no alternate path" in now.reason
    assert env.book.take_changes() == []
    assert delivered(env.tables, "dtn1", "dtn3")[1] == ("s1", "s2", "s3")


def test_reports_while_moving_or_for_other_owners_or_garbage_change_nothing(env):
    r = active(env)
    env.book.set_link_state("s2-s3", up=False)
    assert report(env, r, 0, times=5).state is State.MOVING  # its rate says nothing while it moves
    confirm(env)
    with pytest.raises(PermissionDenied):
        env.book.report_rate(OTHER, r.name, 1 * G)
    for bad in (-1, math.nan, math.inf, "10G", True):
        with pytest.raises(InvalidArgument, match="achieved_bps"):
            env.book.report_rate(AGENT, r.name, bad)
    assert report(env, r, 1 * G, times=2, who=RUCIO).state is State.ACTIVE  # the owner may report too
