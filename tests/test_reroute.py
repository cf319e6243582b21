"""The reservation book when links fail and come back, and when a service moves a reservation:
make-before-break moves traced through simulated flow tables, DEGRADED when nothing fits and
recovery when capacity returns."""

from __future__ import annotations

import pytest

from sdn_app.core.errors import InvalidArgument, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.plans import StepKind
from sdn_app.core.reservation import PathChoice, State
from sdn_app.core.reservations import ReservationBook
from tests.flowtable import delivered
from tests.switched import DESIGNS, RUCIO, G, active, after_grace, confirm, own, request, switched_ring8


@pytest.fixture(params=DESIGNS)
def env(tmp_path, request):
    return switched_ring8(tmp_path, request.param)


def switches_of(env, r) -> list[str]:
    return list(env.book.get(RUCIO, r.name).route.primary.switches)


def test_a_link_down_moves_the_reservation_and_its_booking(env):
    r = active(env)
    assert switches_of(env, r) == ["s1", "s2", "s3"]
    env.book.set_link_state("s2-s3", up=False, reason="port s2:1 down")
    moving = env.book.get(RUCIO, r.name)
    assert moving.state is State.MOVING and "s2-s3" in moving.reason and "port s2:1 down" in moving.reason
    assert "s2-s3" not in {d.link for d in env.topology.directions.values()
                           if d.id in env.ledger.get(r.id).directions}
    confirm(env)
    now = env.book.get(RUCIO, r.name)
    assert now.state is State.ACTIVE and now.reason.startswith("moved to")
    assert delivered(env.tables, "dtn1", "dtn3", down=["s2-s3"]) == ("dtn3", ("s1", "s8", "s7", "s6", "s5", "s4",
                                                                              "s3"))
    assert delivered(env.tables, "dtn3", "dtn1", down=["s2-s3"])[0] == "dtn1"
    states = [(e.previous, e.reservation.state) for e in env.book.take_events()][-2:]
    assert states == [(State.ACTIVE, State.MOVING), (State.MOVING, State.ACTIVE)]


def test_only_reservations_on_the_link_move(env):
    on = active(env)
    off = active(env, "dtn5", "dtn7")
    env.book.set_link_state("s1-s2", up=False)
    assert env.book.get(RUCIO, on.name).state is State.MOVING
    assert env.book.get(RUCIO, off.name).state is State.ACTIVE
    changes = env.book.take_changes()
    assert {c.reservation_id for c in own(changes)} == {on.id}
    env.book.set_link_state("s1-s2", up=False)  # reported twice: nothing more to do
    assert env.book.take_changes() == []


def test_nothing_fits_makes_it_degraded_and_link_up_recovers_it(env):
    r = active(env, bandwidth=60 * G)
    active(env, "dtn7", "dtn5", bandwidth=50 * G)  # the long way round has only 50G left on s6->s5
    env.book.set_link_state("s2-s3", up=False, reason="no LLDP for 3.5s")
    degraded = env.book.get(RUCIO, r.name)
    assert degraded.state is State.DEGRADED
    assert "s2-s3" in degraded.reason and "no alternate path" in degraded.reason and "free" in degraded.reason
    assert env.book.take_changes() == []  # its flows stay: it works again as soon as the link does
    assert env.ledger.get(r.id).bandwidth == 60 * G  # and it keeps its booking
    env.book.set_link_state("s2-s3", up=True)
    back = env.book.get(RUCIO, r.name)
    assert back.state is State.ACTIVE and "up" in back.reason
    assert env.book.take_changes() == []
    assert delivered(env.tables, "dtn1", "dtn3") == ("dtn3", ("s1", "s2", "s3"))


def test_a_degraded_reservation_moves_when_another_releases_its_capacity(env):
    r = active(env, bandwidth=60 * G)
    blocker = active(env, "dtn7", "dtn5", bandwidth=50 * G)
    env.book.set_link_state("s2-s3", up=False)
    assert env.book.get(RUCIO, r.name).state is State.DEGRADED
    env.book.release(RUCIO, blocker.name)
    assert env.book.get(RUCIO, r.name).state is State.MOVING
    confirm(env)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE
    assert delivered(env.tables, "dtn1", "dtn3", down=["s2-s3"])[0] == "dtn3"


def test_protection_lost_is_degraded_and_traffic_stays_on_the_primary(env):
    r = active(env, protect=True)
    env.book.set_link_state("s6-s7", up=False)  # on the backup; a ring has no other disjoint pair
    lost = env.book.get(RUCIO, r.name)
    assert lost.state is State.DEGRADED and "protection lost" in lost.reason
    assert delivered(env.tables, "dtn1", "dtn3", down=["s6-s7"]) == ("dtn3", ("s1", "s2", "s3"))
    env.book.set_link_state("s6-s7", up=True)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE


def test_primary_down_on_a_protected_reservation_keeps_traffic_on_the_backup(env):
    r = active(env, protect=True)
    env.book.set_link_state("s1-s2", up=False)
    lost = env.book.get(RUCIO, r.name)
    assert lost.state is State.DEGRADED and "fails over" in lost.reason
    assert delivered(env.tables, "dtn1", "dtn3", down=["s1-s2"])[0] == "dtn3"


def test_a_report_on_a_superseded_change_is_ignored(env):
    r = env.book.create(RUCIO, request(env.clock))
    install = env.book.take_changes()
    env.book.set_link_state("s2-s3", up=False)  # while the install is still in flight
    move = env.book.take_changes()
    for change in install:
        env.tables.apply_all(change.steps)
    env.book.provisioned(r.id, None, own(install)[0].token)
    assert env.book.get(RUCIO, r.name).state is State.MOVING  # not ACTIVE before the move is confirmed
    for change in move:
        env.tables.apply_all(change.steps)
    env.book.provisioned(r.id, None, own(move)[0].token)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE
    assert delivered(env.tables, "dtn1", "dtn3", down=["s2-s3"])[0] == "dtn3"


def test_a_failed_move_is_degraded_not_failed(env):
    r = active(env)
    env.book.set_link_state("s2-s3", up=False)
    change = own(env.book.take_changes())[0]
    env.book.provisioned(r.id, "switch s5 (dpid 0x5) not connected", change.token)
    now = env.book.get(RUCIO, r.name)
    assert now.state is State.DEGRADED and "moving failed" in now.reason and "s5" in now.reason
    assert r.id in env.ledger


def test_a_scheduled_reservation_is_rebooked_around_a_down_link(env):
    r = env.book.create(RUCIO, request(env.clock, start=600))
    env.book.set_link_state("s1-s2", up=False)
    now = env.book.get(RUCIO, r.name)
    assert now.state is State.SCHEDULED and "s1-s2" not in now.route.primary.links
    assert env.book.take_changes() == []
    env.clock.advance(600)
    env.book.tick()
    confirm(env)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE
    assert delivered(env.tables, "dtn1", "dtn3", down=["s1-s2"])[0] == "dtn3"


def test_new_requests_avoid_down_links_and_say_so(env):
    env.book.set_link_state("s1-s2", up=False)
    env.book.set_link_state("s8-s1", up=False)
    with pytest.raises(Exception, match="links down s1-s2, s8-s1"):
        env.book.create(RUCIO, request(env.clock))
    with pytest.raises(InvalidArgument, match="s1-s9"):
        env.book.set_link_state("s1-s9", up=False)


def test_a_move_asked_for_is_make_before_break(env):
    r = active(env)
    moved = env.book.modify(RUCIO, r.name, path=PathChoice(exclude=("s2",)))
    assert moved.state is State.MOVING and "path ->" in moved.reason
    changes = env.book.take_changes()
    moves = own(changes)
    assert len(moves) == 1 and moves[0].confirm and changes[-1] is moves[0]  # after the new paths' entries
    steps = [step for change in changes for step in change.steps]
    for step in steps:  # traffic flows after every single step, both ways
        env.tables.apply(step)
        assert delivered(env.tables, "dtn1", "dtn3")[0] == "dtn3", step.describe()
        assert delivered(env.tables, "dtn3", "dtn1")[0] == "dtn1", step.describe()
    assert delivered(env.tables, "dtn1", "dtn3")[1] == ("s1", "s8", "s7", "s6", "s5", "s4", "s3")
    if env.book.installs.paths is not None:  # labels: the move is one steer change per direction
        flow_mods = [s for s in moves[0].steps if s.kind is not StepKind.BARRIER]
        assert [(s.kind, s.switch) for s in flow_mods] == [(StepKind.MODIFY_FLOW, "s1"), (StepKind.MODIFY_FLOW, "s3")]
    env.book.provisioned(r.id, None, moves[0].token)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE
    after_grace(env)
    assert env.tables.entry_count("s2") == 0


def test_a_move_that_does_not_fit_changes_nothing(env):
    r = active(env, bandwidth=60 * G)
    active(env, "dtn7", "dtn5", bandwidth=50 * G)
    before = env.book.get(RUCIO, r.name)
    with pytest.raises(NoCapacity):
        env.book.modify(RUCIO, r.name, path=PathChoice(exclude=("s2",)))
    with pytest.raises(InvalidArgument, match="s99"):
        env.book.modify(RUCIO, r.name, path=PathChoice(exclude=("s99",)))
    assert env.book.get(RUCIO, r.name) == before
    assert env.book.take_changes() == []


def test_a_controller_restarted_mid_move_installs_the_new_path(env):
    r = active(env)
    env.book.set_link_state("s2-s3", up=False)
    env.book.take_changes()  # the move was never applied: the controller died
    env.ledger.close()
    ledger = Ledger(env.topology.capacities(), env.path, env.clock)
    book = ReservationBook(env.topology, ledger, env.clock, provisioning=True,
                           flow_design=env.book.installs.design)
    assert book.take_changes() == []  # reconciliation, switch by switch, puts the new path in place
    plan_switches = {"s1", "s8", "s7", "s6", "s5", "s4", "s3"}
    for switch in sorted(plan_switches - {"s3"}):
        book.switch_reconciled(switch)
        assert book.get(RUCIO, r.name).state is State.MOVING
    book.switch_reconciled("s3")
    assert book.get(RUCIO, r.name).state is State.ACTIVE
    assert {s for s in env.topology.switches if book.switch_plan(s).flows} == plan_switches
