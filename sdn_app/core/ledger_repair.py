"""Link repair at load: the reservations loaded from the store made to fit the topology of today.

A controller may start over a topology changed since its state file was written: a DTN or a
link removed, a capacity lowered. `LedgerRepair.fit`, run by the book once it has loaded, leaves
no booking on a DTN, link direction or capacity the topology no longer has: each reservation
affected is moved to another route, cut to what its path still has, or failed, with an event
and a `Repair` saying why (`repair_counts` for /metrics). Nothing is on the switches yet:
reconciliation puts the repaired plans there.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import replace

from sdn_app.core.clock import Clock
from sdn_app.core.decisions import Decision, Trigger, render, taken
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity, NotFound
from sdn_app.core.ledger import Ledger, Overbooking
from sdn_app.core.paths import PathFinder, Route
from sdn_app.core.reservation import Repair, Reservation, State, route_key
from sdn_app.core.topology import Topology
from sdn_app.core.units import format_bandwidth, format_time, format_window


class LedgerRepair:
    """One repair of a book's loaded reservations against its topology (see `fit`)."""

    def __init__(self, topology: Topology, ledger: Ledger, finder: PathFinder, clock: Clock, provisioning: bool,
                 live: Mapping[str, Reservation], write: Callable[[sqlite3.Connection, Reservation], None],
                 changed: Callable[[State | None, Reservation, Decision | None], None]):
        """`live`: the book's live reservations by id (read, kept up to date by `changed`);
        `write(db, reservation)`: its row, inside a ledger transaction; `changed(previous, new,
        decision)`: the book remembers `new` and records the event."""
        self.topology = topology
        self.ledger = ledger
        self.finder = finder
        self.clock = clock
        self.provisioning = provisioning
        self.live = live
        self.write = write
        self.changed = changed
        self.repairs: list[Repair] = []

    def fit(self) -> list[Repair]:
        """Make what was loaded fit the topology it was loaded over (it may have changed since).

        From now on no booking stays on a DTN, link direction or capacity the topology no longer
        has. A reservation whose DTN is gone is FAILED. One whose path uses a link direction
        that is gone, or that is booked on a direction now below what is booked there (the
        newest first, until none is), moves to the best route that fits; when none does, one
        on a gone link is FAILED, and one over a capacity is cut to what its path still has
        (DEGRADED, or kept SCHEDULED) or FAILED when that is nothing. Each is an event with its
        reason and a `Repair` in `repairs`, which it returns.
        """
        now = self.clock.now()
        dtns = self.topology.dtns
        stranded = self.ledger.stranded()
        live = sorted(self.live.values(), key=lambda r: (r.created, r.id))
        dtn_gone = [r for r in live if r.request.end > now and (r.request.src not in dtns or r.request.dst not in dtns)]
        failing = {r.id for r in dtn_gone}
        path_gone = [r for r in live if r.id not in failing and (r.route is None or r.id in stranded)]
        if not (dtn_gone or path_gone or self.ledger.overbooked(now)):
            return self.repairs
        for old in dtn_gone:
            missing = ", ".join(d for d in (old.request.src, old.request.dst) if d not in dtns)
            self._fail(old, "dtn_removed", f"at start-up: topology {self.topology.name} has no dtn {missing}")
        for old in path_gone:
            if old.request.end <= now:  # ended while the controller was down: as a tick would have it
                self._end(old, State.EXPIRED, f"window ended at {format_time(old.request.end)}")
                continue
            gone = ", ".join(stranded.get(old.id, ())) or "of its stored path"
            why = f"at start-up: topology {self.topology.name} has no link direction {gone}"
            try:
                route = self.finder.route(old.request, ignore=old.id)
            except (NoCapacity, FailedPrecondition, InvalidArgument, NotFound) as refusal:
                self._fail(old, "link_removed", f"{why}, and no other path fits: {refusal}")
                continue
            self._move(old, route, "link_removed", why)
        self.ledger.expire(now)  # bookings of ended windows hold nothing any more; the next tick expires them
        # A move books only what fits and a cut frees, so no repair overbooks another direction.
        for direction in [over.direction for over in self.ledger.overbooked(now)]:
            while over := self.ledger.overbooked(now, [direction]):
                victims = [self.live[b] for b in over[0].bookings if b in self.live]
                if not victims:  # held for no live reservation (the loading above frees those)
                    for booking in over[0].bookings:
                        self.ledger.release(booking)
                    continue
                self._relieve_capacity(max(victims, key=lambda r: (r.created, r.id)), over[0])
        return self.repairs

    def _relieve_capacity(self, old: Reservation, over: Overbooking) -> None:
        """Take `old` off a direction booked beyond its capacity: to another route, or cut down."""
        assert old.route is not None
        direction = self.topology.directions[over.direction]
        link = (f"the access link of dtn {direction.link}" if direction.is_access else f"link {direction.link}")
        why = (f"at start-up: {link} ({direction.id}) has {format_bandwidth(over.capacity)}, "
               f"{format_bandwidth(over.booked)} booked on it {format_window(over.start, over.end)}")
        refused = ""
        try:
            route = self.finder.route(old.request, ignore=old.id)
            if route_key(route) != route_key(old.route):
                self._move(old, route, "capacity", why)
                return
        except (NoCapacity, FailedPrecondition, InvalidArgument, NotFound) as refusal:
            refused = f" ({refusal})"
        booking = self.ledger.get(old.id)
        if booking.stepped:  # a deadline schedule cut short would miss its deadline: say so, free its path
            self._fail(old, "capacity", f"{why}; no other path carries its deadline schedule{refused}")
            return
        fits = min(self.ledger.free(d, booking.start, booking.end, ignore=old.id) for d in booking.directions)
        wanted = format_bandwidth(old.request.bandwidth)
        if fits <= 0:
            self._fail(old, "capacity", f"{why}; no other path has {wanted} free{refused}, and its own has "
                                        "nothing left for it")
            return
        reason = (f"{why}: cut from {wanted} to {format_bandwidth(fits)}, what its path has left for it; no other "
                  f"path has {wanted} free{refused}")
        new = replace(old, request=replace(old.request, bandwidth=fits), updated=self.clock.now(), reason=reason,
                      state=State.SCHEDULED if old.state is State.SCHEDULED else State.DEGRADED)
        self.ledger.modify(old.id, bandwidth=fits, also=lambda db: self.write(db, new))
        self._repaired(old, new, "capacity", "degraded")

    def _move(self, old: Reservation, route: Route, cause: str, why: str) -> None:
        """Book `route` for `old` instead of its path, for `why` (nothing is on the switches yet:
        the plans are made after loading, and reconciliation puts them there)."""
        state = old.state if old.state is State.SCHEDULED else State.MOVING if self.provisioning else State.ACTIVE
        decision = Trigger(text=why).move(taken(route.primary))
        new = replace(old, route=route, state=state, updated=self.clock.now(), reason=render(decision),
                      decision=decision)
        self.ledger.modify(old.id, directions=route.direction_ids, also=lambda db: self.write(db, new))
        self._repaired(old, new, cause, "rerouted", decision)

    def _fail(self, old: Reservation, cause: str, reason: str) -> None:
        """End `old` FAILED at start-up, releasing its booking: a repair."""
        self._end(old, State.FAILED, reason)
        self.repairs.append(Repair(old.name, cause, "failed", reason))

    def _end(self, old: Reservation, state: State, reason: str) -> None:
        """End `old` in `state` at start-up, releasing its booking."""
        new = replace(old, state=state, updated=self.clock.now(), reason=reason)
        if old.id in self.ledger:
            self.ledger.release(old.id, also=lambda db: self.write(db, new))
        else:
            self.ledger.write(lambda db: self.write(db, new))
        self.changed(old.state, new, None)

    def _repaired(self, old: Reservation, new: Reservation, cause: str, action: str,
                  decision: Decision | None = None) -> None:
        """`old` is `new` now, booked as it is: remembered, an event (with `decision`), and a repair."""
        self.changed(old.state, new, decision)
        self.repairs.append(Repair(new.name, cause, action, new.reason))


def repair_counts(repairs: list[Repair]) -> collections.Counter[tuple[str, str]]:
    """How many reservations loading repaired, by (cause, action) (see `Repair`)."""
    return collections.Counter((r.cause, r.action) for r in repairs)
