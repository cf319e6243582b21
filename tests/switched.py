"""A reservation book on ring8 that controls switches, with simulated flow tables to apply its
changes to: the setting of the provisioning, reroute and provisioner tests; and `TablesFabric`,
simulated switches behind the provisioner."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from sdn_app.core.clock import FakeClock
from sdn_app.core.installs import FLOW_DESIGNS, LABELS
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.plans import SwitchPlan
from sdn_app.core.reconcile import Reconciliation, reconcile
from sdn_app.core.reservation import Change, Principal, Reservation, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.core.utilization import DirectionLoad
from tests.flowtable import FlowTables, TableError
from topologies import builtin_topology

G = 10**9
RUCIO = Principal("rucio", Role.SERVICE)


def switched_ring8(tmp_path: Path, design: str = LABELS) -> SimpleNamespace:
    """topology, clock, ledger (at `path`), book (provisioning, flows of `design`) and empty
    `tables` for ring8."""
    topology = Topology.load(builtin_topology("ring8"))
    clock = FakeClock()
    path = tmp_path / "t.db"
    ledger = Ledger(topology.capacities(), path, clock)
    book = ReservationBook(topology, ledger, clock, provisioning=True, flow_design=design)
    return SimpleNamespace(topology=topology, clock=clock, ledger=ledger, book=book, tables=FlowTables(topology),
                           path=path)


def switch_plans(book: ReservationBook, topology: Topology) -> dict[str, tuple[set, set, set]]:
    """Per switch, the flows, meters and groups `book` wants there."""
    return {s: (set(p.flows), set(p.meters), set(p.groups)) for s in topology.switches
            for p in [book.switch_plan(s)]}


def reopened(env: SimpleNamespace) -> ReservationBook:
    """`env`'s book as a restarted controller loads it from the same state file."""
    env.ledger.close()
    ledger = Ledger(env.topology.capacities(), env.path, env.clock)
    return ReservationBook(env.topology, ledger, env.clock, provisioning=True)


def request(clock, src="dtn1", dst="dtn3", bandwidth=10 * G, start=0.0, duration=3600.0, **more) -> PathRequest:
    """A request from `start` seconds after now, lasting `duration`."""
    begin = clock.now() + start
    return PathRequest(src, dst, bandwidth, begin, begin + duration, **more)


def own(changes: list[Change]) -> list[Change]:
    """The reservations' own changes among `changes` (not those of shared paths)."""
    return [c for c in changes if not c.reservation_id.startswith("path-")]


def after_grace(env: SimpleNamespace) -> None:
    """Let the clock pass the grace of unused shared paths, tick, and apply what that queues."""
    paths = env.book.installs.paths
    if paths is not None:
        env.clock.advance(paths.grace + 1)
        env.book.tick()
        for change in env.book.take_changes():
            env.tables.apply_all(change.steps)


def confirm(env: SimpleNamespace) -> None:
    """Apply every queued change to the tables and report each confirmed one as done."""
    for change in env.book.take_changes():
        env.tables.apply_all(change.steps)
        if change.confirm:
            env.book.provisioned(change.reservation_id, None, change.token)


def active(env: SimpleNamespace, *args, **kwargs) -> Reservation:
    """A reservation of RUCIO made with `request(env.clock, *args, **kwargs)`, installed and ACTIVE."""
    r = env.book.create(RUCIO, request(env.clock, *args, **kwargs))
    confirm(env)
    assert env.book.get(RUCIO, r.name).state is State.ACTIVE
    return r


def measured_loads(topology: Topology, measured: dict[str, float]) -> dict[str, DirectionLoad]:
    """Every direction measured as the switches' port counters would: `measured` (nominal bits/s)
    where given, idle elsewhere."""
    out = {}
    for d in topology.directions.values():
        bps = measured.get(d.id, 0.0)
        out[d.id] = DirectionLoad(d.id, d.link, d.src, d.dst, d.capacity, d.kind, bps, bps, bps / d.capacity)
    return out


DESIGNS = FLOW_DESIGNS  # for tests parametrized over both flow designs


class TablesFabric:
    """The switches as the provisioner and the controller see them: simulated flow tables
    (`tables`) that apply each change, or refuse it: every change with the reason `refuse`, or
    each change touching switch `refuse_switch`. While `gate` is clear every batch waits for it;
    `entered` is set when a batch reaches the switches; `batches` records them."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.tables = FlowTables(topology)
        self.on_switch_connected = None
        self.link_listener = None
        self.batches: list[list[tuple]] = []
        self.reconciled: list[tuple[str, SwitchPlan]] = []
        self.connected: set[str] = set(topology.switches)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.refuse: str | None = None
        self.refuse_switch: str | None = None
        self.lock = threading.Lock()

    def apply_many(self, changes, timeout: float = 5.0) -> list[str | None]:
        """Apply each change to the tables in turn; per change, None or why it was refused."""
        self.entered.set()
        self.gate.wait(10)
        with self.lock:
            self.batches.append([tuple(c) for c in changes])
            results: list[str | None] = []
            for steps in changes:
                if self.refuse is not None:
                    results.append(self.refuse)
                elif self.refuse_switch is not None and any(
                        s.spec is not None and s.spec.switch == self.refuse_switch for s in steps):
                    results.append(f"switch {self.refuse_switch} refused a flow")
                else:
                    try:
                        self.tables.apply_all(steps)
                        results.append(None)
                    except TableError as refused:
                        results.append(str(refused))
            return results

    def reconcile(self, switch: str, expected: SwitchPlan, timeout: float = 5.0) -> Reconciliation:
        """Make the switch's simulated tables hold `expected`."""
        with self.lock:
            t = self.tables.tables[switch]
            held = SwitchPlan(tuple(t.flows.values()), tuple(t.meters.values()), tuple(t.groups.values()))
            done = reconcile(switch, expected, held)
            self.tables.apply_all(done.steps)
            self.reconciled.append((switch, expected))
            return done

    def connected_switches(self) -> set[str]:
        """The switches connected (`connected`, all by default)."""
        return set(self.connected)

    def utilization(self) -> dict:
        """No measured load."""
        return {}
