"""Link repair: reservations moved off links that went down, and back when capacity returns.

The adapter reports links going down and coming back; no path is computed across a down link
(`PathFinder.down_links`). A reservation whose path crosses a link that went down moves
(MOVING, make-before-break, then ACTIVE) to the best route that fits, avoiding measured
congestion when a route with measured headroom exists; one that fits nowhere becomes DEGRADED
with the reason and keeps its booking and flows, so it works again as soon as its link does.
DEGRADED reservations are retried whenever capacity returns: a link comes up, a reservation ends
or shrinks. A protected reservation losing a link of either path is moved to a new link-disjoint
pair when one fits; otherwise it stays on the fast-failover groups, DEGRADED ("protection lost")
until a pair fits again. Every change is a typed `decisions.Decision` (`Trigger`).

`LinkRepair` holds no reservation: it sees the book's and asks the book to move or commit them,
on the book's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sdn_app.core.decisions import Decision, Protection, Trigger, render, taken
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.paths import PathFinder, Route
from sdn_app.core.reservation import Reservation, State, route_key
from sdn_app.core.topology import Topology

# Book `route` for a reservation and move its flows there for a decision; the reservation then.
Move = Callable[[Reservation, Route, Decision], Reservation]
# Give a reservation a new reason or decision, and a new state when given: stored, one event.
Commit = Callable[[Reservation, str | Decision, State | None], Reservation]


class LinkRepair:
    """Moves of one book's reservations for links going down and coming back."""

    def __init__(self, topology: Topology, finder: PathFinder, live: Mapping[str, Reservation],
                 degraded: set[str], measured_route: Callable[[Reservation], Route | None], move: Move,
                 commit: Commit):
        """`live` and `degraded` are the book's own (read only): the live reservations by id, and the
        ids of the DEGRADED ones; `measured_route` is the rerouter's best route avoiding measured
        congestion, if one fits."""
        self.topology = topology
        self.finder = finder
        self.live = live
        self.degraded = degraded
        self.measured_route = measured_route
        self.move = move
        self.commit = commit

    def set_link_state(self, link: str, up: bool, reason: str = "") -> None:
        """A link went down or came back (as the switches report it): move what it affects.

        Down: every live reservation whose primary or backup crosses `link` is moved to the
        best route that fits, or becomes DEGRADED. Up: DEGRADED reservations are retried.
        """
        if link not in self.topology.links:
            raise InvalidArgument(f"link: {link!r} is not a link of topology {self.topology.name}")
        down = self.finder.down_links
        why = Trigger(link, up, reason)
        if up:
            if link in down:
                down.discard(link)
                self.retry_degraded(why)
            return
        if link in down:
            return
        down.add(link)
        affected = [r for r in self.live.values() if r.route is not None and link in route_links(r.route)]
        for reservation in sorted(affected, key=lambda r: (r.created, r.id)):
            self.reroute(reservation, why)

    def down_on(self, route: Route) -> list[str]:
        """The links of `route`'s primary path that are down now."""
        return sorted(set(route.primary.links) & self.finder.down_links)

    def reroute(self, old: Reservation, why: Trigger) -> None:
        """Move `old` off down links to the best route that fits, or mark it DEGRADED."""
        assert old.route is not None
        try:
            route = self.measured_route(old) or self.finder.route(old.request, ignore=old.id)
        except (NoCapacity, FailedPrecondition) as refusal:
            self.degrade(old, why, str(refusal))
            return
        self.move(old, route, why.move(taken(route.primary)))

    def degrade(self, old: Reservation, why: Trigger, refusal: str) -> None:
        """No route fits `old` any more: DEGRADED, saying where its traffic goes meanwhile."""
        assert old.route is not None
        if old.route.backup is not None and not set(old.route.primary.links) & self.finder.down_links:
            decision = why.degrade(Protection.STAYS, taken(old.route.primary), refusal)
        elif old.route.backup is not None and not set(old.route.backup.links) & self.finder.down_links:
            decision = why.degrade(Protection.FAILS_OVER, taken(old.route.backup), refusal)
        else:
            decision = why.degrade(Protection.NONE, None, refusal)
        # Held, scheduled or with its data plane released: nothing on the switches, retried later.
        state = old.state if old.state.booked_only else State.DEGRADED
        if (state, render(decision)) != (old.state, old.reason):
            self.commit(old, decision, state)

    def retry_degraded(self, why: Trigger) -> None:
        """Capacity came back: move each DEGRADED reservation to a route that fits, oldest first."""
        if not self.degraded and not self.finder.down_links:
            return
        degraded = [r for r in self.live.values() if r.state is State.DEGRADED
                    or (r.state.booked_only and r.route is not None and self.down_on(r.route))]
        for old in sorted(degraded, key=lambda r: (r.created, r.id)):
            assert old.route is not None
            try:
                route = self.finder.route(old.request, ignore=old.id)
            except (NoCapacity, FailedPrecondition):
                continue
            if route_key(route) == route_key(old.route):
                if old.state is State.DEGRADED:  # its flows are in place: working again as it is
                    self.commit(old, f"{why.describe()}: running on {old.route.primary.describe()} again",
                                State.ACTIVE)
                continue
            self.move(old, route, why.move(taken(route.primary)))



def route_links(route: Route) -> set[str]:
    """Links of the primary and the backup."""
    return set(route.primary.links) | set(route.backup.links if route.backup else ())
