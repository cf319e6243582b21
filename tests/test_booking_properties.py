"""Properties of the reservation book across holds, commits, aborts, timeouts, data-plane changes,
elastic re-solves, priority changes and link failures (hypothesis state machine, FakeClock):

- no link direction is ever booked over its capacity, at any instant from now on;
- the meters of the reservations with flows never add up to more than a direction carries;
- an elastic reservation's meter stays within its floor and ceiling;
- a hold that times out frees exactly its own booking, and nothing else changes with it.
"""

from __future__ import annotations

import contextlib
import math

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import FailedPrecondition, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role, State, Terms
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

G = 10**9
RING8 = Topology.load(builtin_topology("ring8"))
OWNER = Principal("dmm", Role.SERVICE, priority=10)
DTNS = ["dtn1", "dtn2", "dtn3", "dtn8"]  # few DTNs, neighbours: reservations meet on links often
LINKS = sorted(RING8.link_directions)
HOLD = 60.0
FLOWING = (State.PROVISIONING, State.ACTIVE, State.MOVING, State.DEGRADED)


class Booking(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.clock = FakeClock()
        self.ledger = Ledger(RING8.capacities(), None, self.clock)
        self.book = ReservationBook(RING8, self.ledger, self.clock, provisioning=True, hold_timeout=HOLD)
        self.ids: list[str] = []

    def teardown(self) -> None:
        if hasattr(self, "ledger"):
            self.ledger.close()

    def _confirm(self) -> None:
        """The switches confirm every change (the provisioner's reports)."""
        for change in self.book.take_changes():
            if change.confirm:
                self.book.provisioned(change.reservation_id, None, change.token)

    def _live(self, state: State | None = None) -> list[str]:
        found = [r for r in (self.book._lookup(i) for i in self.ids) if not r.state.is_final]
        return sorted(r.id for r in found if state is None or r.state is state)

    @rule(src=st.sampled_from(DTNS), dst=st.sampled_from(DTNS), gbps=st.sampled_from([1, 2, 5, 10, 20, 40]),
          extra=st.sampled_from([0, 0, 0, 3, 50, 90]), priority=st.integers(1, 10), hold=st.booleans(),
          later=st.sampled_from([0, 0, 30, 300]), length=st.sampled_from([120, 600, 3600, math.inf]))
    def create(self, src, dst, gbps, extra, priority, hold, later, length) -> None:
        if src == dst:
            return
        now = self.clock.now()
        request = PathRequest(src, dst, gbps * G, now + later, now + later + length)
        try:
            made = self.book.create(OWNER, request, terms=Terms(hold=hold, priority=priority,
                                                                ceiling=(gbps + extra) * G if extra else 0))
        except (NoCapacity, FailedPrecondition):
            return
        self.ids.append(made.id)
        self._confirm()

    @precondition(lambda self: self.ids)
    @rule(pick=st.integers(0, 10**6), what=st.sampled_from(["commit", "abort", "release", "unprovision",
                                                            "provision"]))
    def change(self, pick, what) -> None:
        live = self._live()
        if not live:
            return
        name = live[pick % len(live)]
        with contextlib.suppress(FailedPrecondition):  # e.g. commit of one not held
            getattr(self.book, what)(OWNER, name)
        self._confirm()

    @precondition(lambda self: self.ids)
    @rule(pick=st.integers(0, 10**6), priority=st.integers(1, 10))
    def reprioritise(self, pick, priority) -> None:
        live = self._live()
        if live:
            self.book.modify(OWNER, live[pick % len(live)], priority=priority)
            self._confirm()

    @rule(seconds=st.sampled_from([1.0, 20.0, 59.0, 61.0, 200.0, 700.0]))
    def advance(self, seconds) -> None:
        now = self.clock.now()
        lapsing = {i: self.book._lookup(i) for i in self._live(State.HELD)}
        lapsing = {i: r for i, r in lapsing.items() if r.hold_until <= now + seconds < r.request.end}
        others = {b.id: b for b in self.ledger.bookings() if b.id not in lapsing and b.end > now + seconds}
        self.clock.advance(seconds)
        self.book.tick()
        self._confirm()
        for reservation_id in lapsing:
            assert self.book._lookup(reservation_id).state is State.EXPIRED
            assert reservation_id not in self.ledger
        after = {b.id: b for b in self.ledger.bookings()}
        assert {i: after.get(i) for i in others} == others  # every other booking exactly as it was

    @rule(link=st.sampled_from(LINKS), up=st.booleans())
    def link(self, link, up) -> None:
        self.book.set_link_state(link, up)
        self._confirm()

    @invariant()
    def never_booked_over_capacity(self) -> None:
        if hasattr(self, "ledger"):
            assert self.ledger.overbooked() == []

    @invariant()
    def meters_fit_every_direction_and_shares_their_bounds(self) -> None:
        if not hasattr(self, "book"):
            return
        metered: dict[str, int] = {}
        for r in self.book._live.values():
            if r.elastic:
                assert r.request.bandwidth <= r.meter_bps <= r.ceiling, r
            if r.state in FLOWING and r.id in self.book.installs:
                for direction in r.route.primary.direction_ids:
                    metered[direction] = metered.get(direction, 0) + r.meter_bps
        for direction, total in metered.items():
            assert total <= self.ledger.capacities[direction], (direction, total)


TestBooking = Booking.TestCase
TestBooking.settings = settings(max_examples=1500, stateful_step_count=50, deadline=None,
                                suppress_health_check=[HealthCheck.too_slow])
