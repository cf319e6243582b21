"""Every rerouting decision explained: the book's history of each reservation (what `tsdn path
show` prints), and the typed decision each event carries (what the map, /metrics and the demo
report count), its reason rendered from it, driven through the real book on ring8 and a small mesh."""

from __future__ import annotations

import dataclasses
import io
from contextlib import redirect_stdout

import pytest

from sdn_app.core import decisions as typed
from sdn_app.core.decisions import (
    Decision,
    Displacement,
    Evidence,
    Hold,
    Kind,
    Measured,
    PathTaken,
    Protection,
    Trigger,
    Why,
    render,
)
from sdn_app.core.rerouting.advisor import Health, RateAdvisor
from sdn_app.core.rerouting.policy import ReroutePolicy
from sdn_app.core.reservation import Principal, Role, State
from sdn_app.core.reservation_memory import HISTORY_LENGTH
from sdn_app.core.reservations import ReservationBook
from tests.switched import RUCIO, G, active, confirm, measured_loads, switched_ring8
from tests.test_advisor import S2_S3, mesh, rearranged, tick
from tests.waiting import wait_for
from tsdn.cli import main

ADMIN = Principal("ops", Role.ADMIN)


@pytest.fixture
def env(tmp_path):
    return switched_ring8(tmp_path)


def named(decision: Decision | None) -> tuple[str | None, str | None]:
    """(verdict, reroute cause) of a typed decision (None, None when there is none)."""
    return (decision.verdict, decision.cause) if decision is not None else (None, None)


def decisions(env) -> list[tuple[str | None, str | None]]:
    """(verdict, reroute cause) of each event's typed decision since the last call; each event's
    reason is the one rendered from its decision."""
    events = env.book.take_events()
    for e in events:
        if e.decision is not None:
            assert e.reason == render(e.decision)
    return [named(e.decision) for e in events]


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


def test_the_last_decision_is_stored_with_the_reservation_and_outlives_a_restart(env):
    """The map shows a reservation's verdict after a controller restart: the decision its reason
    tells is stored with it; a later change that is no decision leaves none behind."""
    r = active(env, bandwidth=25 * G)
    tick(env, r, 8 * G, {S2_S3: 30 * G}, times=3)  # every direction measured clear: the hosts
    told = env.book.get(RUCIO, r.name)
    assert told.decision is not None and told.decision.verdict == "hosts" and told.reason == render(told.decision)
    env.ledger.close()
    again = switched_ring8(env.path.parent)  # the same state file, read by a new book
    loaded = again.book.get(RUCIO, r.name)
    assert loaded.decision == told.decision and loaded.reason == told.reason
    assert again.book.history(r.id) == []  # the history itself is not stored
    released = again.book.release(RUCIO, r.name)  # a change that is no decision
    assert released.decision is None
    again.ledger.close()
    assert switched_ring8(env.path.parent).book.get(RUCIO, r.name).decision is None


# -- the decision each reason names ---------------------------------------------------------------

def test_each_verdict_of_the_book_is_a_typed_decision(env):
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
    events = env.book.take_events()
    found = [(e.reservation.id, *named(e.decision)) for e in events]
    assert (r.id, "rearranged", None) in found
    assert (s.id, None, "rearrangement") in found
    assert (r.id, None, "congestion") in found  # the relieved one's move: counted as a reroute, not a decision
    assert sum(1 for _, v, _ in found if v is not None) == 1
    displaced = next(e.decision for e in events if e.decision is not None and e.decision.kind is Kind.DISPLACED)
    assert displaced.relieves == r.name and displaced.to is not None and displaced.to.links
    announced = next(e.decision for e in events if e.decision is not None and e.decision.kind is Kind.REARRANGED)
    assert [m.reservation for m in announced.displaced] == [s.name]


def test_changes_that_are_no_decision_carry_none(env):
    r = active(env)
    assert [e.decision for e in env.book.take_events()] == [None, None]  # window started, confirmed
    tick(env, r, 25 * G, {S2_S3: 30 * G}, times=3)  # at its booking: nothing to decide
    env.book.release(RUCIO, r.name)
    assert [e.decision for e in env.book.take_events()] == [None]
    assert all(h.decision is None for h in env.book.history(r.id))


def test_the_evidence_is_numbers_and_the_new_route_names_its_links(env):
    r = active(env, bandwidth=25 * G)
    env.book.take_events()
    tick(env, r, 8 * G, {S2_S3: 98 * G}, times=3, health=Health(retransmits=12, rtt_ms=3.25, cpu_percent=40.0))
    (moved,) = [e for e in env.book.take_events() if e.decision is not None]
    d = moved.decision
    assert d.kind is Kind.MOVED and d.verdict == "moved" and d.cause == "congestion"
    e = d.evidence
    assert (e.achieved_bps, e.booked_bps, e.reports) == (8 * G, 25 * G, 3)
    assert (e.retransmits, e.rtt_ms, e.sender_cpu_percent) == (12, 3.25, 40.0)
    (congested,) = e.congested
    assert (congested.direction, congested.link, congested.capacity_bps, congested.measured_bps) == \
        (S2_S3, "s2-s3", 100 * G, 98 * G)
    assert 0 < congested.unowned_bps < 98 * G and not congested.reverse
    assert d.to is not None and d.to.route[:3] == ("dtn1", "s1", "s8")
    assert d.to.links == moved.reservation.route.primary.links and d.to.links[0] == "s8-s1"
    assert d.headroom_bps == moved.reservation.route.primary.free_bps and d.headroom_bps >= 25 * G
    assert moved.reason.endswith("which has measured headroom for 25G")
    assert env.book.history(r.id)[-1].decision == d


def test_a_move_off_a_failed_link_is_typed_with_its_link(env):
    r = active(env)
    env.book.take_events()
    env.book.set_link_state("s2-s3", up=False, reason="port s2:1 down")
    (event,) = env.book.take_events()
    d = event.decision
    assert (d.kind, d.cause, d.link, d.link_up, d.note) == (Kind.LINK, "link", "s2-s3", False, "port s2:1 down")
    assert d.to is not None and "s2-s3" not in d.to.links and d.to.links == event.reservation.route.primary.links
    assert event.reason == f"link s2-s3 down (port s2:1 down): moving to {d.to.describe()}"
    assert r.id == event.reservation.id


def test_sender_cpu_is_unknown_not_zero_when_the_report_has_no_cpu_figure():
    shortfall = Evidence(8 * G, 25 * G, 3, busiest=Measured("s2:1->s3:2", "s2-s3", 100 * G, 30 * G, 0.0),
                         retransmits=0, rtt_ms=1.0)
    assert shortfall.sender_cpu_percent is None
    text = render(Decision(Kind.NOT_MOVED, Why.HOSTS, shortfall))
    assert text.endswith("; no retransmits, RTT 1.0 ms, sender CPU unknown") and "0%" not in text.split(";")[-1]
    busy = Evidence(8 * G, 25 * G, 3, retransmits=0, rtt_ms=1.0, sender_cpu_percent=87.0,
                    busiest=shortfall.busiest)
    assert render(Decision(Kind.NOT_MOVED, Why.HOSTS, busy)).endswith("sender CPU 87% of a core")
    paced = dataclasses.replace(busy, sender_cpu_percent=0.3)  # a paced sender's real, small figure
    assert render(Decision(Kind.NOT_MOVED, Why.HOSTS, paced)).endswith("sender CPU 0.3% of a core")
    silent = Evidence(8 * G, 25 * G, 3, busiest=shortfall.busiest)  # the report said nothing of its transport
    assert render(Decision(Kind.NOT_MOVED, Why.HOSTS, silent)).endswith("loaded (s2:1->s3:2)")


CONGESTED = Measured("s2:1->s3:2", "s2-s3", 100 * G, 98 * G, 90 * G)
EVIDENCE = Evidence(8 * G, 25 * G, 3, congested=(CONGESTED,))
LONG = PathTaken(("dtn1", "s1", "s8", "s7", "s6", "s5", "s4", "s3", "dtn3"),
                 ("s8-s1", "s7-s8", "s6-s7", "s5-s6", "s4-s5", "s3-s4"))
SHOWN = "achieved 8G of 25G booked for 3 reports; congested: s2:1->s3:2 at 98% of 100G, 90G not the controller's"
EVERY_KIND = [
    (Decision(Kind.MOVED, evidence=EVIDENCE, to=LONG, headroom_bps=40 * G),
     f"congested: {SHOWN}; moving to {LONG.describe()}, which has measured headroom for 25G"),
    (Decision(Kind.REARRANGED, evidence=EVIDENCE, to=LONG,
              displaced=(Displacement("reservations/ab", LONG), Displacement("reservations/cd", LONG))),
     f"congested: {SHOWN}; rearranging to make room: moving reservations/ab to {LONG.describe()}, then "
     f"reservations/cd to {LONG.describe()}, then this one to {LONG.describe()}"),
    (Decision(Kind.RELIEVED, evidence=EVIDENCE, to=LONG),
     f"congested: {SHOWN}; moving to {LONG.describe()} (rearrangement made room)"),
    (Decision(Kind.DISPLACED, relieves="reservations/ab", to=LONG),
     f"rearrangement for reservations/ab: moving to {LONG.describe()} to make room"),
    (Decision(Kind.NOT_MOVED, Why.HELD, EVIDENCE, hold=Hold(3.2, 10.0, 1, 300.0, 3)),
     f"{SHOWN}; not moved: held down: moved 3 s ago, not again within 10 s of a move"),
    (Decision(Kind.NOT_MOVED, Why.BUDGET, EVIDENCE, hold=Hold(40.0, 10.0, 3, 300.0, 3)),
     f"{SHOWN}; not moved: move budget spent: 3 moves within 300 s (at most 3)"),
    (Decision(Kind.NOT_MOVED, Why.NO_ROOM, EVIDENCE, barred=("s7-s8", "s2-s3"), refusal="no path has 25G"),
     f"congested: {SHOWN}; not moved: no path avoiding s2-s3, s7-s8 has measured headroom, and moving others "
     "would not make room: no path has 25G"),
    (Decision(Kind.NOT_MOVED, Why.ACCESS, EVIDENCE),
     f"{SHOWN}; not moved: the congestion is on a DTN's access link, which no other path avoids"),
    (Decision(Kind.NOT_MOVED, Why.UNMEASURED, Evidence(8 * G, 25 * G, 3, unmeasured=("a", "b", "c", "d", "e"))),
     "achieved 8G of 25G booked for 3 reports; not moved: no load measured on a, b, c and 2 more"),
    (Decision(Kind.NOT_MOVED, Why.HOSTS, Evidence(8 * G, 25 * G, 3, busiest=Measured("x", "l", 100 * G, 30 * G, 0))),
     "achieved 8G of 25G booked for 3 reports; limited by the hosts: path links at most 30% loaded (x)"),
    (Trigger("s2-s3", False, "port s2:1 down").move(LONG), f"link s2-s3 down (port s2:1 down): moving to "
                                                           f"{LONG.describe()}"),
    (Trigger("s2-s3", True).move(LONG), f"link s2-s3 up: moving to {LONG.describe()}"),
    (Trigger(text="reservations/ab released").move(LONG), f"reservations/ab released: moving to {LONG.describe()}"),
    (Trigger("s2-s3").degrade(Protection.NONE, None, "no path has 25G"),
     "link s2-s3 down: no alternate path; no path has 25G"),
    (Trigger("s2-s3").degrade(Protection.STAYS, LONG, "no pair fits"),
     f"link s2-s3 down: protection lost, traffic stays on {LONG.describe()}; no pair fits"),
    (Trigger("s2-s3").degrade(Protection.FAILS_OVER, LONG, "no pair fits"),
     f"link s2-s3 down: protection lost, traffic fails over to {LONG.describe()}; no pair fits"),
]


@pytest.mark.parametrize(("decision", "reason"), EVERY_KIND)
def test_each_kind_renders_the_reason_of_today_and_survives_json(decision, reason):
    assert render(decision) == reason
    assert typed.from_dict(typed.to_dict(decision)) == decision


def test_verdicts_and_causes_follow_from_the_kind_alone():
    verdicts = {d.verdict for d, _ in EVERY_KIND} - {None}
    causes = {d.cause for d, _ in EVERY_KIND} - {None}
    assert verdicts == set(typed.VERDICTS) and causes == set(typed.CAUSES)
    for d, _ in EVERY_KIND:
        assert (d.verdict is None) == (d.kind not in (Kind.MOVED, Kind.REARRANGED, Kind.NOT_MOVED))


# -- `tsdn path show` through a real controller ---------------------------------------------------

def test_path_show_prints_the_history_and_only_get_carries_it(start_controller):
    from northbound.client import TsdnClient
    from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb

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
    assert [h.HasField("decision") for h in got.history] == [False, False, True]
    moved = got.history[2].decision
    assert (moved.kind, moved.verdict, moved.cause) == (pb.DECISION_MOVED, "moved", "congestion")
    assert moved.evidence.congested[0].direction == S2_S3 and moved.evidence.booked_bps == 25 * G
    assert list(moved.to.links) == list(got.path.links) and moved.headroom_bps >= 25 * G
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
    assert "[moved] congested: " in block[2] and "[" not in block[0] + block[1]  # the typed decision, tagged
    assert block[2].lstrip()[:4].isdigit()  # each line starts with its time
    client.close()
