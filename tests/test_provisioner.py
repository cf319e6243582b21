"""The provisioner (sdn_app.openflow.provisioner): OpenFlow changes applied in batches, in an order that keeps
what depends on what, reconciliation jobs serialized with them, and the CoreWorker wiring a
switch's connect to a reconciliation, against a fabric of simulated tables (tests/flowtable.py)."""

from __future__ import annotations

import pytest

from sdn_app.core.clock import FakeClock
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.plans import (
    COOKIE_ID_MASK,
    FlowSpec,
    MeterSpec,
    Step,
    StepKind,
    SwitchPlan,
    is_path_cookie_bits,
    reservation_cookie,
)
from sdn_app.core.reservation import Change, Principal, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.openflow.provisioner import Provisioner, Reconcile, provisioned_worker
from sdn_app.worker import CoreWorker
from tests.flowtable import delivered
from tests.switched import TablesFabric, switched_ring8
from tests.waiting import wait_for
from topologies import builtin_topology

G = 10**9
RUCIO = Principal("rucio", Role.SERVICE)


def meter_step(kind: StepKind, meter_id: int, switch: str = "s1", dpid: int = 1) -> Step:
    return Step(kind, (switch,), MeterSpec(switch=switch, dpid=dpid, meter_id=meter_id, rate_bps=10**6,
                                           burst_bits=10**6))


def change(rid: str, *steps: Step, confirm: bool = True) -> Change:
    return Change(rid, tuple(steps), confirm)


def drained(provisioner: Provisioner) -> list:
    """Every piece of work the provisioner would run, in order (without running any)."""
    provisioner.stop(timeout=0)  # queues the end; the thread was never started
    out = []
    while (work := provisioner.next_batch()) is not None:
        out.append(work if isinstance(work, Reconcile) else [c.reservation_id for c in work])
    return out


def idle_provisioner(max_batch: int = 1000) -> Provisioner:
    return Provisioner(TablesFabric(Topology.load(builtin_topology("ring8"))), lambda reports: None,
                       max_batch=max_batch)


# --- batching and order ----------------------------------------------------------------------


def test_what_is_queued_goes_in_one_batch_up_to_the_bound() -> None:
    p = idle_provisioner(max_batch=4)
    p.submit([change(f"r{i}", meter_step(StepKind.ADD_METER, i)) for i in range(1, 11)])
    assert drained(p) == [["r1", "r2", "r3", "r4"], ["r5", "r6", "r7", "r8"], ["r9", "r10"]]


def test_a_later_change_of_a_reservation_in_the_batch_waits_for_the_next() -> None:
    p = idle_provisioner()
    p.submit([change("a", meter_step(StepKind.ADD_METER, 1)), change("b", meter_step(StepKind.ADD_METER, 2)),
              change("a", meter_step(StepKind.MODIFY_METER, 1), confirm=False),
              change("c", meter_step(StepKind.ADD_METER, 3))])
    assert drained(p) == [["a", "b", "c"], ["a"]]


def test_an_id_freed_by_one_change_and_taken_by_another_keeps_their_order() -> None:
    p = idle_provisioner()
    p.submit([change("old", meter_step(StepKind.ADD_METER, 1)),
              change("gone", meter_step(StepKind.DELETE_METER, 5), confirm=False),
              change("new", meter_step(StepKind.ADD_METER, 5)),
              change("elsewhere", meter_step(StepKind.ADD_METER, 5, "s2", 2), meter_step(StepKind.ADD_METER, 6))])
    # "new" takes the meter "gone" frees on s1; meter 5 of s2 is another meter.
    assert drained(p) == [["old", "gone", "elsewhere"], ["new"]]


def test_whatever_touches_a_deferred_change_is_deferred_behind_it() -> None:
    p = idle_provisioner()
    p.submit([change("a", meter_step(StepKind.ADD_METER, 1)),
              change("a", meter_step(StepKind.ADD_METER, 2)),
              change("b", meter_step(StepKind.DELETE_METER, 2), confirm=False),
              change("c", meter_step(StepKind.ADD_METER, 3))])
    assert drained(p) == [["a", "c"], ["a"], ["b"]]  # "b" deletes the meter the second "a" adds


def test_a_reconciliation_runs_alone_between_what_came_before_and_after() -> None:
    p = idle_provisioner()
    job = Reconcile("s1", SwitchPlan((), (), ()))
    p.submit([change("a", meter_step(StepKind.ADD_METER, 1)), change("a", meter_step(StepKind.DELETE_METER, 1))])
    p.reconcile(job.switch, job.expected)
    p.submit([change("b", meter_step(StepKind.ADD_METER, 2))])
    assert drained(p) == [["a"], ["a"], job, ["b"]]


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch must be at least 1, got 0"):
        idle_provisioner(max_batch=0)


# --- the core worker with a fabric -------------------------------------------------------------


@pytest.fixture
def core(tmp_path):
    env = switched_ring8(tmp_path)
    topology, clock, ledger, book = env.topology, env.clock, env.ledger, env.book
    fabric = TablesFabric(topology)
    fabric.connected = {"s1"}
    worker = provisioned_worker(book, fabric)
    worker.start()
    yield worker, fabric, clock
    worker.stop()
    ledger.close()


def _is_reservation(steps) -> bool:
    """Whether a change's steps are a reservation's (not a shared path's)."""
    return any(s.spec is not None and not is_path_cookie_bits(getattr(s.spec, "cookie", 0) & COOKIE_ID_MASK)
               for s in steps if isinstance(s.spec, FlowSpec))


def create(worker: CoreWorker, clock: FakeClock, src: str, dst: str):
    now = clock.now()
    return worker.call(worker.book.create, RUCIO, PathRequest(src, dst, 10 * G, now, now + 3600))


def state(worker: CoreWorker, reservation) -> State:
    return worker.call(worker.book.get, RUCIO, reservation.name).state


def test_installs_queued_together_are_applied_as_one_batch_and_reported(core) -> None:
    worker, fabric, clock = core
    wait_for(lambda: fabric.reconciled, "the connected switch to be reconciled at start")
    fabric.gate.clear()  # hold the provisioner in its next apply
    first = create(worker, clock, "dtn1", "dtn3")
    wait_for(fabric.entered.is_set, "the first install to be taken")
    more = [create(worker, clock, a, b) for a, b in (("dtn5", "dtn7"), ("dtn2", "dtn6"), ("dtn8", "dtn4"))]
    fabric.gate.set()
    wait_for(lambda: all(state(worker, r) is State.ACTIVE for r in (first, *more)), "every install to be confirmed")
    # With labels the paths' entries go first, in batches of their own before the reservations that need them.
    assert [sum(_is_reservation(steps) for steps in b) for b in fabric.batches if any(map(_is_reservation, b))] \
        == [1, 3]
    for r in (first, *more):
        assert delivered(fabric.tables, r.request.src, r.request.dst)[0] == r.request.dst


def test_a_refused_install_fails_only_its_reservation(core) -> None:
    worker, fabric, clock = core
    fabric.gate.clear()
    good = create(worker, clock, "dtn1", "dtn3")
    bad = create(worker, clock, "dtn5", "dtn7")
    meter = worker.call(worker.book.switch_plan, "s5").meters[0]  # dtn5's switch: only "bad" has a meter there
    fabric.tables.tables[meter.switch].meters[meter.meter_id] = meter  # the switch already has it: ADD is refused
    fabric.gate.set()
    wait_for(lambda: state(worker, good) is State.ACTIVE and state(worker, bad) is State.FAILED, "the outcomes")
    assert "exists" in worker.call(worker.book.get, RUCIO, bad.name).reason


def test_a_connect_reconciles_the_switch_with_what_the_core_wants_after_the_queued_changes(core) -> None:
    worker, fabric, clock = core
    wait_for(lambda: fabric.reconciled, "the connected switch to be reconciled at start")
    assert fabric.reconciled == [("s1", SwitchPlan((), (), ()))]
    assert fabric.on_switch_connected == worker.reconcile_switch

    kept = create(worker, clock, "dtn1", "dtn3")
    wait_for(lambda: state(worker, kept) is State.ACTIVE, "the first install")
    s1 = fabric.tables.tables["s1"]
    lost = next(iter(s1.flows))
    del s1.flows[lost]  # by hand, while the switch was away
    fabric.gate.clear()
    added = create(worker, clock, "dtn1", "dtn4")  # queued before the connect: must not look stale
    fabric.on_switch_connected("s1")
    gone = worker.call(worker.book.release, RUCIO, kept.name)  # queued after it
    fabric.gate.set()
    wait_for(lambda: state(worker, added) is State.ACTIVE and len(fabric.reconciled) == 2, "the install and the job")
    _, expected = fabric.reconciled[1]
    assert {f.cookie for f in expected.flows if not is_path_cookie_bits(f.cookie & COOKIE_ID_MASK)} == {
        reservation_cookie(added.id), reservation_cookie(kept.id)}
    assert gone.state is State.RELEASED
    wait_for(lambda: delivered(fabric.tables, "dtn1", "dtn3")[0] is None, "the release to be applied")
    assert delivered(fabric.tables, "dtn1", "dtn4")[0] == "dtn4"
    assert {f.cookie for f in s1.flows.values() if not is_path_cookie_bits(f.cookie & COOKIE_ID_MASK)} == {
        reservation_cookie(added.id)}


def test_after_a_restart_an_install_caught_midway_is_confirmed_once_its_switches_are_reconciled(tmp_path) -> None:
    topology = Topology.load(builtin_topology("ring8"))
    clock = FakeClock()
    ledger = Ledger(topology.capacities(), tmp_path / "t.db", clock)
    book = ReservationBook(topology, ledger, clock, provisioning=True)
    caught = book.create(RUCIO, PathRequest("dtn1", "dtn3", 10 * G, clock.now(), clock.now() + 3600))
    assert caught.state is State.PROVISIONING  # the controller dies before the switches answer
    ledger.close()

    ledger = Ledger(topology.capacities(), tmp_path / "t.db", clock)
    fabric = TablesFabric(topology)  # every switch connected, holding nothing
    worker = provisioned_worker(ReservationBook(topology, ledger, clock, provisioning=True), fabric)
    worker.start()
    try:
        wait_for(lambda: state(worker, caught) is State.ACTIVE, "the install to be confirmed by reconciliation")
        assert sorted(s for s, _ in fabric.reconciled) == sorted(topology.switches)
        assert delivered(fabric.tables, "dtn1", "dtn3")[0] == "dtn3"
        assert fabric.batches == [], "reconciliation alone put the flows in place"
    finally:
        worker.stop()
        ledger.close()
