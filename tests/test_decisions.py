"""Every rerouting decision explained: the book's history of each reservation (what `tsdn path
show` prints), and the decision each event's reason names (what the map, /metrics and the demo
report count), driven through the real book on ring8 and a small mesh."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from sdn_app.core.advisor import Health, RateAdvisor
from sdn_app.core.congestion import ReroutePolicy
from sdn_app.core.decisions import reroute_cause, verdict
from sdn_app.core.reservations import HISTORY_LENGTH, Principal, ReservationBook, Role, State
from tests.switched import RUCIO, G, active, confirm, measured_loads, switched_ring8
from tests.test_advisor import S2_S3, mesh, rearranged, tick
from tests.waiting import wait_for
from tsdn.cli import main

ADMIN = Principal("ops", Role.ADMIN)


@pytest.fixture
def env(tmp_path):
    return switched_ring8(tmp_path)


def decisions(env) -> list[tuple[str | None, str | None]]:
    """(verdict, reroute cause) of each event since the last call."""
    return [(verdict(e.reason), reroute_cause(e.reason)) for e in env.book.take_events()]


# -- the history ----------------------------------------------------------------------------------

def test_the_history_tells_each_decision_with_its_evidence_oldest_first(env):
    r = active(env, bandwidth=25 * G)
    tick(env, r, 8 * G, {S2_S3: 30 * G}, times=3, health=Health(retransmits=0))
    tick(env, r, 8 * G, {S2_S3: 98 * G})
    confirm(env)
    history = env.book.history(r.id)
    assert [h.state for h in history] == [State.PROVISIONING, State.ACTIVE, State.ACTIVE, State.MOVING, State.ACTIVE]
    assert history[0].reason.startswith("window started")
    assert "limited by the hosts: path links at most 30% loaded" in history[2].reason
    assert "no retransmits" in history[2].reason
    assert history[3].reason.startswith("congested: achieved 8G of 25G booked for 3 reports; congested: "
                                        "s2:1->s3:2 at 98% of 100G")
    assert "moving to dtn1 > s1 > s8" in history[3].reason
    assert history[4].reason.startswith("moved to dtn1 > s1 > s8")
    assert [h.time for h in history] == sorted(h.time for h in history) and history[3].time == env.clock.now()
    assert env.book.history(active(env, "dtn5", "dtn7").id)[-1].state is State.ACTIVE  # each its own


def test_the_history_keeps_the_last_changes_and_leaves_memory_with_the_reservation(tmp_path):
    env = switched_ring8(tmp_path)
    env.book = ReservationBook(env.topology, env.ledger, env.clock, provisioning=True, keep_ended=60)
    r = active(env)
    for i in range(HISTORY_LENGTH):  # two changes each: moving off the cut link, confirmed
        env.clock.advance(1)
        cut, mended = ("s2-s3", "s8-s1") if i % 2 == 0 else ("s8-s1", "s2-s3")
        env.book.set_link_state(mended, up=True)
        env.book.set_link_state(cut, up=False, reason=f"cut {i}")
        confirm(env)
    history = env.book.history(r.id)
    assert len(history) == HISTORY_LENGTH
    assert "cut 19" in history[-2].reason and "cut 10" in history[0].reason  # the newest kept, in order
    assert not any(h.reason.startswith("window started") for h in history)
    env.book.release(RUCIO, r.name)
    confirm(env)
    assert env.book.history(r.id)[-1].state is State.RELEASED  # still readable while it is in memory
    env.clock.advance(61)
    env.book.sweep()
    assert env.book.get(RUCIO, r.name).state is State.RELEASED  # from the store now
    assert env.book.history(r.id) == []


# -- the decision each reason names ---------------------------------------------------------------

def test_each_verdict_of_the_book_is_named_from_its_reason(env):
    r = active(env, bandwidth=25 * G)
    env.book.take_events()
    tick(env, r, 5 * G, times=3)
    assert decisions(env) == [("unmeasured", None)]
    tick(env, r, 8 * G, {S2_S3: 30 * G}, times=3)
    assert decisions(env) == [("hosts", None)]
    tick(env, r, 8 * G, {S2_S3: 98 * G})
    assert decisions(env) == [("moved", "congestion")]
    confirm(env)
    assert decisions(env) == [(None, None)]  # the switches confirmed: no decision, no second move
    way_round = {S2_S3: 98 * G, "s8:2->s7:1": 98 * G}
    tick(env, r, 8 * G, way_round, times=6)
    assert decisions(env) == [(None, None), ("held", None)]  # after the move, then held down
    env.book.set_link_state("s8-s1", up=False)
    assert decisions(env) == [(None, "link")]


def test_budget_no_room_and_access_verdicts_are_named(env):
    env.book = ReservationBook(env.topology, env.ledger, env.clock, provisioning=True,
                               advisor=RateAdvisor(ReroutePolicy(hold_down=0, move_budget=1)))
    r = active(env, bandwidth=25 * G)
    env.book.take_events()
    tick(env, r, 8 * G, {S2_S3: 98 * G, "s8:2->s7:1": 85 * G}, times=3)
    assert decisions(env) == [("no_room", None)]
    tick(env, r, 8 * G, {S2_S3: 98 * G}, times=3)
    confirm(env)
    assert [d for d in decisions(env) if d[0]] == [("moved", "congestion")]
    tick(env, r, 8 * G, {"s8:2->s7:1": 98 * G}, times=6)
    assert [d for d in decisions(env) if d[0]] == [("budget", None)]
    up, _ = env.topology.access("dtn1")
    other = active(env, "dtn1", "dtn2", bandwidth=25 * G)
    env.book.take_events()
    tick(env, other, 8 * G, {up.id: 399 * G}, times=3)
    assert decisions(env) == [("access", None)]


def test_a_rearrangement_is_one_decision_and_its_moves_have_their_cause(tmp_path):
    env = mesh(tmp_path)
    s, _t, r = rearranged(env)
    confirm(env)
    confirm(env)
    named = [(e.reservation.id, verdict(e.reason), reroute_cause(e.reason)) for e in env.book.take_events()]
    assert (r.id, "rearranged", None) in named
    assert (s.id, None, "rearrangement") in named
    assert (r.id, None, "congestion") in named  # the relieved one's move: counted as a reroute, not a decision
    assert sum(1 for _, v, _ in named if v is not None) == 1


def test_reasons_that_are_no_decision_name_none():
    for reason in ("", "window started", "every hop confirmed by barrier replies", "after the move: 25G achieved",
                   "moved to s1 > s2", "rearrangement stopped: no capacity"):
        assert verdict(reason) is None
    assert reroute_cause("link s2-s3 down (test): moving to s1 > s8") == "link"
    assert reroute_cause("moved by rucio: moving to s1 > s8") == "other"


# -- `tsdn path show` through a real controller ---------------------------------------------------

def test_path_show_prints_the_history_and_only_get_carries_it(start_controller):
    from northbound.client import TsdnClient

    controller = start_controller("ring8")
    client = TsdnClient(controller.address, timeout=10)
    made = client.create_reservation("dtn1", "dtn3", 25 * G)
    book = controller.book

    def congest() -> None:
        for _ in range(3):
            book.observe_loads(measured_loads(book.topology, {S2_S3: 98 * G}))
            book.report_rate(ADMIN, made.name, 8 * G)

    controller.worker.call(congest)
    wait_for(lambda: len(client.get_reservation(made.name).history) >= 3, "the move in the history")
    got = client.get_reservation(made.name)
    assert [h.reason.split(":")[0] for h in got.history] == ["window started", "booked in the ledger only",
                                                               "congested"]
    assert all(h.HasField("time") for h in got.history)
    assert not any(r.history for r in client.list_reservations())  # List stays cheap
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["path", "show", made.id, "--controller", controller.address])
    text = out.getvalue()
    assert code == 0, text
    assert "  reason: congested: achieved 8G of 25G booked for 3 reports" in text
    block = text.split("  history:\n", 1)[1].splitlines()
    assert len(block) == 3 and "PROVISIONING" in block[0] and "window started" in block[0]
    assert "ACTIVE" in block[2] and "s2:1->s3:2 at 98% of 100G" in block[2] and "moving to dtn1 > s1 > s8" in block[2]
    assert block[2].lstrip()[:4].isdigit()  # each line starts with its time
    client.close()
