"""Priorities and elastic sharing in the reservation book: floors booked, shares solved by
priority, a guaranteed request admitted by shrinking elastic ones (named in its event), meters
following the shares, and bad terms refused with nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from northbound import convert
from sdn_app.core import decisions
from sdn_app.core.clock import FakeClock
from sdn_app.core.decisions import Kind, render
from sdn_app.core.errors import InvalidArgument, NoCapacity, PermissionDenied
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role, State, Terms
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

G = 10**9
RING8 = Topology.load(builtin_topology("ring8"))
DMM = Principal("dmm", Role.SERVICE, priority=5)
LOW = Principal("low", Role.SERVICE)
BOTTLENECK = "s2:3->dtn2"  # dtn2's access link: 100G, on every path into dtn2


class Env:
    def __init__(self, db: Path, share_step: float = 0.05, solver: str = "filling"):
        self.clock = FakeClock()
        self.ledger = Ledger(RING8.capacities(), db, self.clock)
        self.book = ReservationBook(RING8, self.ledger, self.clock, provisioning=True, share_step=share_step,
                                    share_solver=solver)

    def elastic(self, src: str, floor: int, ceiling: int, priority: int = 0, who: Principal = DMM):
        now = self.clock.now()
        r = self.book.create(who, PathRequest(src, "dtn2", floor, now, now + 3600),
                             terms=Terms(priority=priority, ceiling=ceiling))
        self.book.provisioned(r.id, None)
        return r

    def share(self, r) -> int:
        return self.book.get(DMM, r.name).meter_bps

    def meter(self, r) -> int:
        """The rate of the reservation's forward meter as planned on the switches."""
        plan = self.book.installs.plan(r.id)
        return next(m.rate_bps for m in plan.meters if m.direction == "forward")


@pytest.fixture(params=["filling", "highs"])  # the LP's closed form, and the LP by HiGHS: the same shares
def env(tmp_path: Path, request):
    e = Env(tmp_path / "state.db", solver=request.param)
    yield e
    e.ledger.close()


def test_elastic_reservations_share_what_is_left_by_priority(env):
    a = env.elastic("dtn1", 10 * G, 100 * G, priority=1)
    b = env.elastic("dtn3", 10 * G, 100 * G, priority=3)
    # 100G - two floors of 10G = 80G to share 1:3
    assert (env.share(a), env.share(b)) == (30 * G, 70 * G)
    assert (env.meter(a), env.meter(b)) == (30 * G, 70 * G)


def test_a_guaranteed_request_shrinks_them_and_names_who_and_by_how_much(env):
    a = env.elastic("dtn1", 10 * G, 100 * G, priority=1)
    b = env.elastic("dtn3", 10 * G, 100 * G, priority=3)
    env.book.take_events()
    now = env.clock.now()
    g = env.book.create(LOW, PathRequest("dtn4", "dtn2", 40 * G, now, now + 3600))
    assert f"{a.name} 30G -> 20G" in g.reason and f"{b.name} 70G -> 40G" in g.reason
    assert (env.share(a), env.share(b)) == (20 * G, 40 * G)
    assert (env.meter(a), env.meter(b)) == (20 * G, 40 * G)
    events = env.book.take_events()
    # typed: the admission names who shrank and by how much; each shrink is its own decision
    [admitted] = [e.decision for e in events if e.reservation.id == g.id and e.decision is not None]
    assert admitted.kind is Kind.ADMITTED and [(c.reservation, c.before_bps, c.after_bps) for c in admitted.shares] \
        == sorted([(a.name, 30 * G, 20 * G), (b.name, 70 * G, 40 * G)])
    shrunk = [e for e in events if e.reservation.id in (a.id, b.id)]
    assert {e.reservation.id for e in shrunk} == {a.id, b.id}
    assert all(e.decision.kind is Kind.SHARED and e.decision.trigger == f"{g.name} admitted" for e in shrunk)
    assert all(f"re-solved after {g.name} admitted" in e.reason for e in shrunk)
    for decision in (admitted, shrunk[0].decision):  # kept whole through the JSON rows and the API
        assert decisions.from_dict(decisions.to_dict(decision)) == decision
        assert convert.decision_in(convert.decision_out(decision)) == decision
        assert render(decision) in (g.reason, shrunk[0].reason)
    # at the floors only 80G is left: more is refused at the bottleneck, and nothing changes
    with pytest.raises(NoCapacity, match=BOTTLENECK):
        env.book.create(LOW, PathRequest("dtn5", "dtn2", 41 * G, now, now + 3600))
    assert (env.share(a), env.share(b)) == (20 * G, 40 * G)
    env.book.release(LOW, g.name)
    assert (env.share(a), env.share(b)) == (30 * G, 70 * G)


def test_the_ledger_never_books_more_than_the_floors(env):
    env.elastic("dtn1", 10 * G, 100 * G)
    now = env.clock.now()
    assert env.ledger.free(BOTTLENECK, now, now + 1) == 90 * G


def test_small_growth_leaves_the_meters_alone_and_any_shrink_is_applied(tmp_path):
    env = Env(tmp_path / "s.db", share_step=0.05)
    a = env.elastic("dtn1", 10 * G, 100 * G)
    now = env.clock.now()
    g = env.book.create(LOW, PathRequest("dtn4", "dtn2", 10 * G, now, now + 3600))
    assert env.share(a) == 90 * G
    small = env.book.create(LOW, PathRequest("dtn5", "dtn2", 1 * G, now, now + 3600))
    assert env.share(a) == 89 * G  # 1% of its ceiling, applied: the new one needs that capacity now
    env.book.take_changes()
    env.book.release(LOW, small.name)  # it could grow by 1%: below the step, its meter stays
    assert env.share(a) == 89 * G
    assert [c for c in env.book.take_changes() if c.reservation_id == a.id] == []
    env.book.release(LOW, g.name)  # 11%: its meter follows
    assert env.share(a) == 100 * G
    assert [c.reservation_id for c in env.book.take_changes()] == [g.id, a.id]  # g's flows out, a's meter up
    env.ledger.close()


def test_a_priority_change_re_solves(env):
    a = env.elastic("dtn1", 10 * G, 100 * G, priority=1)
    b = env.elastic("dtn3", 10 * G, 100 * G, priority=1)
    assert (env.share(a), env.share(b)) == (50 * G, 50 * G)
    env.book.modify(DMM, a.name, priority=3)
    assert (env.share(a), env.share(b)) == (70 * G, 30 * G)


def test_ceilings_and_floors_bound_the_shares(env):
    a = env.elastic("dtn1", 10 * G, 25 * G, priority=5)
    b = env.elastic("dtn3", 10 * G, 100 * G, priority=1)
    assert (env.share(a), env.share(b)) == (25 * G, 75 * G)


def test_a_link_failure_re_solves_on_the_new_paths(env):
    a = env.elastic("dtn1", 10 * G, 100 * G)
    b = env.elastic("dtn8", 10 * G, 100 * G)  # dtn8 -> s8 -> s1 -> s2: shares s1->s2 with a
    assert env.share(a) + env.share(b) == 100 * G
    env.book.set_link_state("s1-s2", up=False)
    for r in (a, b):
        now = env.book.get(DMM, r.name)
        assert now.state is State.MOVING and "s1-s2" not in now.route.primary.links
        env.book.provisioned(r.id, None)
    assert env.share(a) + env.share(b) == 100 * G  # still only dtn2's access link between them


def test_bad_terms_are_refused_naming_the_field_and_change_nothing(env):
    now = env.clock.now()
    request = PathRequest("dtn1", "dtn2", 10 * G, now, now + 3600)
    with pytest.raises(PermissionDenied, match="priority: 6 is above dmm's own priority 5"):
        env.book.create(DMM, request, terms=Terms(priority=6))
    with pytest.raises(InvalidArgument, match="ceiling_bps: 5G is below the floor"):
        env.book.create(DMM, request, terms=Terms(ceiling=5 * G))
    with pytest.raises(PermissionDenied, match="priority"):
        env.book.create(LOW, request, terms=Terms(priority=2))
    assert len(env.ledger) == 0 and env.book.take_events() == []
    r = env.elastic("dtn1", 10 * G, 100 * G, priority=2)
    with pytest.raises(PermissionDenied, match="priority"):
        env.book.modify(DMM, r.name, priority=9)
    with pytest.raises(InvalidArgument, match="ceiling_bps"):
        env.book.modify(DMM, r.name, ceiling=5 * G)
    assert env.book.get(DMM, r.name).priority == 2 and env.book.get(DMM, r.name).ceiling == 100 * G


def test_a_request_carries_the_callers_priority_unless_it_asks_lower(env):
    assert env.elastic("dtn1", 10 * G, 100 * G).priority == 5
    assert env.elastic("dtn3", 10 * G, 100 * G, priority=2).priority == 2


def test_shares_survive_a_restart(tmp_path):
    env = Env(tmp_path / "r.db")
    a = env.elastic("dtn1", 10 * G, 100 * G, priority=1)
    b = env.elastic("dtn3", 10 * G, 100 * G, priority=3)
    env.ledger.close()
    ledger = Ledger(RING8.capacities(), tmp_path / "r.db", env.clock)
    book = ReservationBook(RING8, ledger, env.clock, provisioning=True)
    assert (book.get(DMM, a.name).meter_bps, book.get(DMM, b.name).meter_bps) == (30 * G, 70 * G)
    # the ingress switches' meters, as reconciliation makes the switches hold them
    assert 30 * G in {m.rate_bps for m in book.switch_plan("s1").meters}
    assert 70 * G in {m.rate_bps for m in book.switch_plan("s3").meters}
    ledger.close()


def test_a_hold_counts_against_elastic_shares_at_once(env):
    a = env.elastic("dtn1", 10 * G, 100 * G)
    now = env.clock.now()
    held = env.book.create(LOW, PathRequest("dtn4", "dtn2", 30 * G, now, now + 3600), terms=Terms(hold=True))
    assert env.share(a) == 70 * G and f"{a.name} 100G -> 70G" in held.reason
    env.book.abort(LOW, held.name)
    assert env.share(a) == 100 * G
