"""The rerouter: what the reservation book's rate reports and measured loads call for.

`Rerouter` takes, from the book, each rate report of an ACTIVE reservation and each round of
measured link loads. After `consecutive` reports in a row below `threshold` x the booking
(`advisor.RateAdvisor`), the shortfall is attributed from measurements
(`attribution.attribute`). A congested link direction on the path (either way) moves the
reservation, make-before-break, to the best path avoiding the congested links that has
measured headroom for its booking (`relief.Headroom`), or rearranges others to make room
(`relief.plan_rearrangement`, moves made in SWAN order, each waiting for the one before it to
be confirmed on the switches), within the stability rules of `policy.ReroutePolicy`; a
shortfall at the hosts never moves it. Each decision, moved or not, is an event carrying a
typed `decisions.Decision` with its evidence, the reason rendered from it; a verdict that stays
the same is told once.

The rerouter holds no reservation: it sees the book's through a `Fleet` and asks the book to
move or commit them, on the book's thread, so the book stays the one owner of their state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from sdn_app.core.clock import Clock
from sdn_app.core.decisions import Decision, Displacement, Evidence, Kind, Why, taken
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathFinder, Route
from sdn_app.core.rerouting.advisor import AfterMove, Health, RateAdvisor, Underperforming
from sdn_app.core.rerouting.attribution import Attribution, attribute
from sdn_app.core.rerouting.congestion import Condition, LinkWatch, path_directions
from sdn_app.core.rerouting.policy import ACK_SHARE, WIRE_OVERHEAD
from sdn_app.core.rerouting.relief import Headroom, Mover, Rearrangement, plan_rearrangement
from sdn_app.core.reservation import Reservation, State
from sdn_app.core.topology import Topology
from sdn_app.core.units import format_bandwidth
from sdn_app.core.utilization import DirectionLoad


@dataclass(frozen=True)
class Fleet:
    """What the rerouter sees of the book's reservations and what it may ask of the book (on the
    book's thread; the mappings are the book's own, read only)."""

    live: Mapping[str, Reservation]  # the live reservations, by id
    known: Mapping[str, Reservation]  # every reservation in memory, live or ended, by id
    # Book `route` for a reservation and move its flows there, make-before-break, for a decision
    # (its reason rendered from it); the reservation as it is then (NoCapacity when the route no
    # longer fits).
    move: Callable[[Reservation, Route, Decision], Reservation]
    # Give it a new reason, or a decision and the reason rendered from it: stored, one event.
    commit: Callable[[Reservation, str | Decision], Reservation]
    confirming: Callable[[str], bool]  # whether a move of this reservation waits for the switches to confirm it


class Rerouter:
    """Rate-driven rerouting of one book's reservations; not thread-safe: the book calls it."""

    def __init__(self, topology: Topology, ledger: Ledger, clock: Clock, advisor: RateAdvisor,
                 down_links: set[str], fleet: Fleet):
        """`down_links`: the book's set of links reported down (read, kept up to date by the book)."""
        self.topology = topology
        self.ledger = ledger
        self.clock = clock
        self.advisor = advisor
        self.down_links = down_links
        self.fleet = fleet
        self.watch = LinkWatch(topology, advisor.policy)  # congestion measured on every link direction
        # A rearrangement under way: the reservation whose move must be confirmed first ->
        # (the reservation it relieves, the moves left in order, the evidence that called for it).
        self._rearranging: dict[str, tuple[str, list[tuple[str, Route]], Evidence]] = {}

    # -- what the book hands over ----------------------------------------------------------

    def report_rate(self, reservation: Reservation, achieved_bps: float, health: Health | None) -> Reservation:
        """One rate report of an ACTIVE reservation: move it, rearrange, or tell why not, when
        the reports call for it; the reservation as it is then."""
        booked = reservation.meter_bps
        advice = self.advisor.observe(reservation.id, booked, achieved_bps, self.clock.now(), health)
        if isinstance(advice, Underperforming):
            return self._relieve(reservation, advice)
        if isinstance(advice, AfterMove):
            return self.fleet.commit(reservation, f"after the move: {format_bandwidth(int(advice.after_bps))} "
                                                  f"achieved (was {format_bandwidth(int(advice.before_bps))}, "
                                                  f"booked {format_bandwidth(booked)})")
        return reservation

    def observe_loads(self, loads: Mapping[str, DirectionLoad]) -> list[Condition]:
        """One round of measured link loads (the switches' port counters, every tenant's traffic):
        return the link directions that became congested or clear."""
        now = self.clock.now()
        owned: dict[str, float] = {}
        for r in self.fleet.live.values():
            if r.route is None or r.state not in (State.ACTIVE, State.MOVING, State.DEGRADED):
                continue
            rate = self.advisor.recent_rate(r.id, now)
            sends = float(r.meter_bps) if rate is None else rate * WIRE_OVERHEAD
            forward, reverse = path_directions(self.topology, r.route.primary.direction_ids)
            for d in forward:
                owned[d.id] = owned.get(d.id, 0.0) + sends
            for d in reverse:  # its acks: not booked (as in the ledger), but the controller's own
                owned[d.id] = owned.get(d.id, 0.0) + sends * ACK_SHARE
        return self.watch.observe(loads, owned, now)

    def conditions(self) -> list[Condition]:
        """The congestion verdict of every measured link direction, as last measured."""
        return self.watch.conditions()

    def measured_route(self, old: Reservation) -> Route | None:
        """The best route for `old` avoiding congested links with measured headroom, if one fits
        (a reservation fleeing a failure should not land on congestion when it need not)."""
        congested = self.watch.congested_links()
        if not congested and not self.watch.conditions():
            return None  # nothing measured: the ledger alone decides
        avoiding = replace(old.request, exclude=(*old.request.exclude, *sorted(congested)))
        try:
            return self._headroom_finder().route(avoiding, ignore=old.id)
        except (NoCapacity, FailedPrecondition, InvalidArgument):
            return None

    def path_changed(self, reservation_id: str) -> None:
        """A reservation's path changed: its rates so far were on the old one."""
        self.advisor.path_changed(reservation_id)

    def confirmed(self, reservation_id: str) -> None:
        """The switches confirmed a move of `reservation_id`: a rearrangement waiting for it goes on."""
        waiting = self._rearranging.pop(reservation_id, None)
        if waiting is not None:
            self._continue_rearrangement(*waiting)

    def move_failed(self, old: Reservation, error: str) -> None:
        """Moving `old` failed on the switches: a rearrangement waiting for it stops, and says so."""
        waiting = self._rearranging.pop(old.id, None)
        if waiting is not None and waiting[0] in self.fleet.live:
            self.fleet.commit(self.fleet.live[waiting[0]], f"rearrangement stopped: moving {old.name} failed: {error}")

    def forget(self, reservation_id: str) -> None:
        """A reservation left the switches (it ended): drop what is kept about it."""
        self._rearranging.pop(reservation_id, None)
        self.advisor.forget(reservation_id)

    # -- deciding ------------------------------------------------------------------------

    def _relieve(self, old: Reservation, advice: Underperforming) -> Reservation:
        """Act on an underperforming reservation: move it, rearrange, or say why not."""
        assert old.route is not None
        now = self.clock.now()
        forward, reverse = path_directions(self.topology, old.route.primary.direction_ids)
        why = attribute(forward, reverse, self.watch, advice)
        if why.cause != "network":
            return self._verdict(old, Decision(Kind.NOT_MOVED, Why(why.cause), why.evidence))
        held = self.advisor.held(old.id, now)
        if held is not None:
            return self._verdict(old, Decision(Kind.NOT_MOVED, held[0], why.evidence, hold=held[1]))
        congested_links = frozenset(c.link for c in why.congested)
        if congested_links & {d.link for d in forward if d.is_access} | \
                congested_links & {d.link for d in reverse if d.is_access}:
            return self._verdict(old, Decision(Kind.NOT_MOVED, Why.ACCESS, why.evidence))
        barred = self.watch.congested_links() | self.advisor.barred_links(old.id, self.watch, now)
        avoiding = replace(old.request, exclude=(*old.request.exclude, *sorted(barred)))
        try:
            route = self._headroom_finder().route(avoiding, ignore=old.id)
        except (NoCapacity, FailedPrecondition, InvalidArgument) as refusal:
            return self._rearrange(old, advice, why, barred, str(refusal))
        moved = self.fleet.move(old, route, Decision(Kind.MOVED, evidence=why.evidence, to=taken(route.primary),
                                                     headroom_bps=route.primary.free_bps))
        self.advisor.moved(old.id, now, advice.achieved_bps, congested_links)
        return moved

    def _headroom_finder(self) -> PathFinder:
        """A path finder on measured headroom (`relief.Headroom`) that avoids the links down now."""
        finder = PathFinder(self.topology, Headroom(self.topology, self.ledger, self.watch))
        finder.down_links = self.down_links
        return finder

    def _verdict(self, old: Reservation, decision: Decision) -> Reservation:
        """A reservation not moved: told (an event) once while the same kind of verdict lasts."""
        assert decision.verdict is not None
        if not self.advisor.announce(old.id, decision.verdict):
            return old
        return self.fleet.commit(old, decision)

    def _mover(self, r: Reservation, now: float) -> Mover:
        assert r.route is not None
        barred = self.watch.congested_links() | self.advisor.barred_links(r.id, self.watch, now)
        return Mover(r.id, r.request, r.route, frozenset(barred))

    def _rearrange(self, old: Reservation, advice: Underperforming, why: Attribution, barred: frozenset[str],
                   refusal: str) -> Reservation:
        """No path has headroom: make room by moving others first (SWAN order), or say why not."""
        now = self.clock.now()
        plan: Rearrangement | None = None
        if old.route is not None and old.route.backup is None and old.id not in self._rearranging_ids():
            busy = self._rearranging_ids()
            movers = [self._mover(r, now) for r in self.fleet.live.values()
                      if r.id != old.id and r.state is State.ACTIVE and r.route is not None
                      and r.route.backup is None and r.id not in busy and not self.advisor.may_move(r.id, now)]
            crossing: dict[str, list[Mover]] = {}
            for m in movers:
                for d in m.route.primary.direction_ids:
                    crossing.setdefault(d, []).append(m)
            relieved = replace(self._mover(old, now), barred=barred)
            plan = plan_rearrangement(self.topology, self.ledger, self.watch, self.down_links, relieved,
                                      movers, lambda d: crossing.get(d, []))
        if plan is None:
            return self._verdict(old, Decision(Kind.NOT_MOVED, Why.NO_ROOM, why.evidence, barred=tuple(sorted(barred)),
                                               refusal=refusal))
        steps = tuple(Displacement(self.fleet.known[rid].name, taken(route.primary)) for rid, route in plan.displaced)
        now_old = self.fleet.commit(old, Decision(Kind.REARRANGED, evidence=why.evidence, displaced=steps,
                                                  to=taken(plan.relieved[1].primary)))
        self.advisor.moved(old.id, now, advice.achieved_bps, frozenset(c.link for c in why.congested))
        self._continue_rearrangement(old.id, list(plan.moves), why.evidence)
        return self.fleet.known.get(now_old.id, now_old)

    def _rearranging_ids(self) -> set[str]:
        ids = set(self._rearranging)
        for relieved, moves, _ in self._rearranging.values():
            ids.add(relieved)
            ids.update(rid for rid, _ in moves)
        return ids

    def _continue_rearrangement(self, relieved_id: str, moves: list[tuple[str, Route]], evidence: Evidence) -> None:
        """Make the next moves of a rearrangement; with switches, each waits for the one before
        it to be confirmed, so no direction ever carries more than it can."""
        while moves:
            rid, route = moves.pop(0)
            current = self.fleet.live.get(rid)
            relieved = self.fleet.live.get(relieved_id)
            if current is None or relieved is None or current.route is None or current.state is not State.ACTIVE:
                if relieved is not None:
                    self.fleet.commit(relieved, f"rearrangement stopped: {self.fleet.known.get(rid, relieved).name} "
                                                f"is no longer active")
                return
            if rid == relieved_id:
                decision = Decision(Kind.RELIEVED, evidence=evidence, to=taken(route.primary))
            else:
                decision = Decision(Kind.DISPLACED, relieves=relieved.name, to=taken(route.primary))
            try:
                self.fleet.move(current, route, decision)
            except NoCapacity as refusal:
                self.fleet.commit(relieved, f"rearrangement stopped: {refusal}")
                return
            if rid != relieved_id:
                self.advisor.moved(rid, self.clock.now())
            if self.fleet.confirming(rid) and moves:
                self._rearranging[rid] = (relieved_id, moves, evidence)
                return
