"""Where a reservation held back by congestion can go: measured headroom, and rearrangements.

A candidate path needs headroom for the booking on every direction: its capacity minus what is
booked there and what is measured there beyond the controller's own traffic (other tenants'),
the controller's own acks (not booked, as in the ledger) counting as its own. A direction
measured congested has none. `Headroom` is that view, usable by `PathFinder` in
place of the ledger, with adjustments for moves planned but not made yet.

When no path has headroom, `plan_rearrangement` looks for at most `MAX_DISPLACED` other
reservations whose moves elsewhere would make room on one of the relieved reservation's
candidate paths, and returns the moves in an order that never puts more on a direction than it
carries (SWAN's lesson): each displaced reservation first, onto a path with headroom for it
while the room for the relieved one is already counted as taken; the relieved one last, once
every displaced one has left.

Why a search and not an LP: a reservation is one unsplittable path (one OpenFlow route with
one meter), so an LP's fractional answer would need rounding, and the integer version (a
MILP over k candidate paths per reservation) is a solver run per decision. The number of moves
an engineer accepts at once is small, so trying the relieved reservation's candidate paths
and, for each, the fewest reservations crossing its short directions (one, then two), is
exact for that bound and costs well under a millisecond on sc16 (`tsdn bench advisor`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import Path, PathFinder, PathRequest, Route, Unbooked
from sdn_app.core.rerouting.congestion import LinkWatch
from sdn_app.core.rerouting.policy import CANDIDATE_MOVERS, CANDIDATE_PATHS, MAX_DISPLACED, NOISE_SHARE
from sdn_app.core.topology import Topology


class Headroom:
    """Free bandwidth per direction: capacity minus what is booked and what is measured beyond the
    controller's own traffic (bookings alone on DTN access links), none where congested; `booked`
    adds planned changes (positive: more booked)."""

    def __init__(self, topology: Topology, ledger: Ledger, watch: LinkWatch, booked: Mapping[str, float] | None = None):
        self.topology = topology
        self.ledger = ledger
        self.watch = watch
        self.booked = dict(booked or {})

    def free(self, direction: str, start: float, end: float, ignore: str | None = None) -> int:
        link_direction = self.topology.directions[direction]
        capacity = link_direction.capacity
        if self.watch.congested(direction):
            return 0
        booked = capacity - self.ledger.free(direction, start, end, ignore) + self.booked.get(direction, 0.0)
        if link_direction.is_access:
            # No path avoids a DTN's own access link, and only its reservations (held to their
            # bookings by meters) and their acks cross it: bookings decide there.
            return max(0, int(capacity - booked))
        condition = self.watch.condition(direction)
        unowned = 0.0 if condition is None else condition.unowned_bps
        if unowned < NOISE_SHARE * capacity:
            unowned = 0.0  # LLDP, ARP, counters sampled a little apart: not another tenant's traffic
        return max(0, int(capacity - booked - unowned))


@dataclass(frozen=True)
class Mover:
    """A reservation that may be moved to make room: its id, request and route."""

    id: str
    request: PathRequest
    route: Route
    barred: frozenset[str]  # links it may not move onto (congested, or left for congestion lately)


@dataclass(frozen=True)
class Rearrangement:
    """Moves in the order to make them: every displaced reservation, then the relieved one."""

    moves: tuple[tuple[str, Route], ...]  # (reservation id, new route)

    @property
    def relieved(self) -> tuple[str, Route]:
        return self.moves[-1]

    @property
    def displaced(self) -> tuple[tuple[str, Route], ...]:
        return self.moves[:-1]


def plan_rearrangement(topology: Topology, ledger: Ledger, watch: LinkWatch, down_links: set[str],
                       relieved: Mover, movers: Sequence[Mover],
                       on_path: Callable[[str], Sequence[Mover]]) -> Rearrangement | None:
    """The fewest moves (at most MAX_DISPLACED others) after which `relieved` fits on a path
    with headroom, or None. `on_path(direction)` lists the movers whose path crosses it."""
    request = replace(relieved.request, exclude=(*relieved.request.exclude, *sorted(relieved.barred)))
    shapes = PathFinder(topology, Unbooked(topology))
    shapes.down_links = down_links
    try:
        candidates = shapes.alternatives(request, CANDIDATE_PATHS)
    except (NoCapacity, FailedPrecondition, InvalidArgument):
        return None
    need = relieved.request.bandwidth
    by_id = {m.id: m for m in movers}
    view = Headroom(topology, ledger, watch)
    for path in candidates:
        if _same_path(path, relieved.route.primary):
            continue
        r = relieved.request
        short = [d for d in path.direction_ids
                 if view.free(d, r.start, r.end, relieved.id) < need and not watch.congested(d)]
        if not short or any(watch.congested(d) for d in path.direction_ids):
            continue
        crossing: dict[str, Mover] = {}
        for d in short:
            for mover in on_path(d):
                if mover.id != relieved.id and mover.id in by_id:
                    crossing.setdefault(mover.id, mover)
        pool = sorted(crossing.values(), key=lambda m: (m.request.bandwidth, m.id))[:CANDIDATE_MOVERS]
        for count in range(1, MAX_DISPLACED + 1):
            for group in itertools.combinations(pool, count):
                plan = _try_group(topology, ledger, watch, down_links, relieved, path, short, group)
                if plan is not None:
                    return plan
    return None


def _try_group(topology: Topology, ledger: Ledger, watch: LinkWatch, down_links: set[str], relieved: Mover,
               path: Path, short: list[str], group: Sequence[Mover]) -> Rearrangement | None:
    need = relieved.request.bandwidth
    r = relieved.request
    freed: dict[str, float] = {}
    for mover in group:
        for d in mover.route.direction_ids:
            freed[d] = freed.get(d, 0.0) - mover.request.bandwidth
    after = Headroom(topology, ledger, watch, freed)
    if any(after.free(d, r.start, r.end, relieved.id) < need for d in short):
        return None
    # Place the displaced ones with the relieved one's room already counted as taken.
    taken = {d: float(need) for d in path.direction_ids}
    moves: list[tuple[str, Route]] = []
    for mover in group:
        finder = PathFinder(topology, Headroom(topology, ledger, watch, taken))
        finder.down_links = down_links
        avoid = replace(mover.request, exclude=(*mover.request.exclude, *sorted(mover.barred)))
        try:
            route = finder.route(avoid, ignore=mover.id)
        except (NoCapacity, FailedPrecondition, InvalidArgument):
            return None
        if _same_path(route.primary, mover.route.primary):
            return None
        moves.append((mover.id, route))
        for d in route.direction_ids:
            taken[d] = taken.get(d, 0.0) + mover.request.bandwidth
    return Rearrangement((*moves, (relieved.id, Route(path))))


def _same_path(a: Path, b: Path) -> bool:
    return a.direction_ids == b.direction_ids
