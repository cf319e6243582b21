"""A reservation book on ring8 that controls switches, with simulated flow tables to apply its
changes to: the setting of the provisioning, reroute and provisioner tests."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from sdn_app.core.clock import FakeClock
from sdn_app.core.installs import FLOW_DESIGNS, LABELS
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Change, Principal, Reservation, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.core.utilization import DirectionLoad
from tests.flowtable import FlowTables
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
