"""The reservation book when it controls switches: PROVISIONING until the adapter confirms,
OpenFlow changes queued in order, and what they do to real-looking flow tables."""

from __future__ import annotations

import pytest

from sdn_app.core.errors import FailedPrecondition
from sdn_app.core.ledger import Ledger
from sdn_app.core.plans import StepKind
from sdn_app.core.reservation import State
from sdn_app.core.reservations import CONFIRMED, ReservationBook
from tests.flowtable import delivered
from tests.switched import DESIGNS, RUCIO, G, after_grace, own, request, switched_ring8


@pytest.fixture(params=DESIGNS)
def env(tmp_path, request):
    return switched_ring8(tmp_path, request.param)


def apply(tables, changes):
    for change in changes:
        tables.apply_all(change.steps)


def test_active_only_after_the_adapter_confirms(env):
    r = env.book.create(RUCIO, request(env.clock))
    assert r.state is State.PROVISIONING
    changes = env.book.take_changes()
    assert [c.confirm for c in own(changes)] == [True]
    assert delivered(env.tables, "dtn1", "dtn3")[0] is None  # nothing installed yet: default deny
    apply(env.tables, changes)
    assert delivered(env.tables, "dtn1", "dtn3") == ("dtn3", ("s1", "s2", "s3"))
    assert delivered(env.tables, "dtn3", "dtn1")[0] == "dtn1"
    env.book.provisioned(r.id, None)
    now = env.book.get(RUCIO, r.name)
    assert (now.state, now.reason) == (State.ACTIVE, CONFIRMED)
    assert [(e.previous, e.reservation.state) for e in env.book.take_events()] == [
        (None, State.PROVISIONING), (State.PROVISIONING, State.ACTIVE)]


def test_a_failed_install_is_removed_and_frees_the_bandwidth(env):
    r = env.book.create(RUCIO, request(env.clock, bandwidth=100 * G))
    apply(env.tables, env.book.take_changes())
    env.book.provisioned(r.id, "switch s2 (dpid 0x2) refused a flow")
    failed = env.book.get(RUCIO, r.name)
    assert failed.state is State.FAILED and "s2" in failed.reason
    assert len(env.ledger) == 0
    removal = env.book.take_changes()
    assert [c.confirm for c in removal] == [False]
    apply(env.tables, removal)
    after_grace(env)
    assert env.tables.is_empty()
    assert env.book.create(RUCIO, request(env.clock, bandwidth=100 * G)).state is State.PROVISIONING  # room again


def test_release_and_expiry_remove_the_flows(env):
    a = env.book.create(RUCIO, request(env.clock, duration=60))
    b = env.book.create(RUCIO, request(env.clock, "dtn5", "dtn7"))
    apply(env.tables, env.book.take_changes())
    env.book.provisioned(a.id, None)
    env.book.provisioned(b.id, None)
    env.book.release(RUCIO, b.name)
    apply(env.tables, env.book.take_changes())
    assert delivered(env.tables, "dtn5", "dtn7")[0] is None
    assert delivered(env.tables, "dtn1", "dtn3")[0] == "dtn3"
    env.clock.advance(61)
    env.book.tick()
    assert env.book.get(RUCIO, a.name).state is State.EXPIRED
    apply(env.tables, env.book.take_changes())
    after_grace(env)
    assert env.tables.is_empty()


def test_a_release_while_installing_wins(env):
    r = env.book.create(RUCIO, request(env.clock))
    env.book.release(RUCIO, r.name)
    apply(env.tables, env.book.take_changes())  # install, then removal, in that order
    env.book.provisioned(r.id, None)  # the late confirmation changes nothing
    assert env.book.get(RUCIO, r.name).state is State.RELEASED
    after_grace(env)
    assert env.tables.is_empty()


def test_scheduled_windows_install_when_they_start(env):
    r = env.book.create(RUCIO, request(env.clock, start=600))
    assert r.state is State.SCHEDULED and env.book.take_changes() == []
    env.clock.advance(600)
    env.book.tick()
    assert env.book.get(RUCIO, r.name).state is State.PROVISIONING
    assert [c.confirm for c in own(env.book.take_changes())] == [True]


def test_a_new_bandwidth_changes_the_meter_only(env):
    r = env.book.create(RUCIO, request(env.clock))
    apply(env.tables, env.book.take_changes())
    env.book.provisioned(r.id, None)
    env.book.modify(RUCIO, r.name, bandwidth=20 * G)
    changes = env.book.take_changes()
    kinds = {s.kind for c in changes for s in c.steps if s.kind is not StepKind.BARRIER}
    assert kinds == {StepKind.MODIFY_METER}
    apply(env.tables, changes)
    assert delivered(env.tables, "dtn1", "dtn3")[0] == "dtn3"


def test_after_a_restart_installing_ones_wait_for_reconciliation_and_active_ones_are_removable(env, tmp_path):
    active = env.book.create(RUCIO, request(env.clock))
    installing = env.book.create(RUCIO, request(env.clock, "dtn5", "dtn7"))
    apply(env.tables, env.book.take_changes())
    env.book.provisioned(active.id, None)
    env.ledger.close()
    ledger = Ledger(env.topology.capacities(), tmp_path / "t.db", env.clock)
    again = ReservationBook(env.topology, ledger, env.clock, provisioning=True,
                           flow_design=env.book.installs.design)
    assert again.take_changes() == []  # reconciliation of each switch installs what is missing
    assert {f.switch for f in again.switch_plan("s6").flows} == {"s6"}
    for switch in ("s5", "s6"):
        again.switch_reconciled(switch)
    assert again.get(RUCIO, installing.name).state is State.PROVISIONING
    again.switch_reconciled("s7")
    assert again.get(RUCIO, installing.name).state is State.ACTIVE
    again.release(RUCIO, active.name)
    apply(env.tables, again.take_changes())  # the restarted book knows the plan it must remove
    assert delivered(env.tables, "dtn1", "dtn3")[0] is None


def test_one_reservation_per_ordered_pair_at_a_time_with_switches(env):
    first = env.book.create(RUCIO, request(env.clock, duration=600))
    with pytest.raises(FailedPrecondition, match=f"already has {first.name}.*modify its bandwidth"):
        env.book.create(RUCIO, request(env.clock, start=300, duration=600))
    env.book.create(RUCIO, request(env.clock, "dtn3", "dtn1"))  # the other direction is another pair
    later = env.book.create(RUCIO, request(env.clock, start=600, duration=600))  # after it: fine
    assert later.state is State.SCHEDULED
    env.book.release(RUCIO, first.name)
    assert env.book.create(RUCIO, request(env.clock, start=100, duration=400)).state is State.SCHEDULED
