"""Which link directions are congested, measured: load the controller does not own, with hysteresis.

`LinkWatch.observe(loads, owned, now)` takes the switches' measured load per link direction
(`core.utilization`, unowned traffic included) and what the controller's own reservations
send there (their reported rates, or their bookings when they report none). A direction becomes
congested when it measures at least `congested_at` of its capacity AND carries at least
`unowned_margin` of its capacity beyond the controller's own traffic (another tenant's, as at
a show); it is clear again only below `clear_at` of its capacity or below half that margin.
The two thresholds keep a load hovering around one of them from flapping the verdict.

A full link carrying only the controller's own reservations is not congested: meters hold each
reservation to its booking and the bookings fit, so a transfer below its booking there is
limited elsewhere (at its hosts).

Pure: measurements come in as data with their time; no clock of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sdn_app.core.rerouting.policy import ReroutePolicy
from sdn_app.core.topology import LinkDirection, Topology
from sdn_app.core.units import format_bandwidth
from sdn_app.core.utilization import DirectionLoad


@dataclass(frozen=True, slots=True)
class Condition:
    """One direction as last measured: its load, the part not the controller's, and its verdict."""

    direction: str
    link: str
    capacity: int
    measured_bps: float  # nominal
    unowned_bps: float  # measured beyond the controller's own traffic there
    congested: bool
    since: float  # when the verdict last changed

    @property
    def fraction(self) -> float:
        return self.measured_bps / self.capacity if self.capacity else 0.0

    def describe(self) -> str:
        """e.g. "caltech-a->caltech-b at 97% of 1T, 560G not the controller's"."""
        return (f"{self.direction} at {self.fraction:.0%} of {format_bandwidth(self.capacity)}, "
                f"{format_bandwidth(int(self.unowned_bps))} not the controller's")


class LinkWatch:
    """The congestion verdict of every measured link direction. Not thread-safe: one owner."""

    def __init__(self, topology: Topology, policy: ReroutePolicy):
        self.topology = topology
        self.policy = policy
        self._conditions: dict[str, Condition] = {}
        self._clear_since: dict[str, float] = {}  # link -> since when every direction of it is clear

    def observe(self, loads: Mapping[str, DirectionLoad], owned: Mapping[str, float], now: float) -> list[Condition]:
        """Take one round of measured loads; return the directions whose verdict changed."""
        p = self.policy
        changed: list[Condition] = []
        for direction_id, load in loads.items():
            direction = self.topology.directions.get(direction_id)
            if direction is None or load.nominal_bps is None or direction.capacity <= 0:
                self._conditions.pop(direction_id, None)  # unknown now: no verdict
                continue
            measured = load.nominal_bps
            unowned = max(0.0, measured - owned.get(direction_id, 0.0))
            share, spare = measured / direction.capacity, unowned / direction.capacity
            previous = self._conditions.get(direction_id)
            was = previous is not None and previous.congested
            if was:
                congested = not (share < p.clear_at or spare < p.unowned_margin / 2)
            else:
                congested = share >= p.congested_at and spare >= p.unowned_margin
            since = previous.since if previous is not None and previous.congested == congested else now
            condition = Condition(direction_id, direction.link, direction.capacity, measured, unowned, congested, since)
            self._conditions[direction_id] = condition
            if (previous.congested if previous is not None else False) != congested:
                changed.append(condition)
        for link, directions in self.topology.link_directions.items():
            if any(self.congested(d.id) for d in directions):
                self._clear_since.pop(link, None)
            else:
                self._clear_since.setdefault(link, now)
        return changed

    def condition(self, direction: str) -> Condition | None:
        """The last verdict on `direction`, or None when it is not measured."""
        return self._conditions.get(direction)

    def congested(self, direction: str) -> bool:
        condition = self._conditions.get(direction)
        return condition is not None and condition.congested

    def congested_links(self) -> set[str]:
        """Links between switches with at least one congested direction: the ones another path can
        avoid (a congested DTN access link is its own reservations' concern, `Why.ACCESS`)."""
        return {c.link for c in self._conditions.values() if c.congested and c.link in self.topology.link_directions}

    def conditions(self) -> list[Condition]:
        """Every measured direction's verdict."""
        return list(self._conditions.values())

    def clear_for(self, link: str, now: float) -> float:
        """Seconds every direction of `link` has measured clear (0 while one is congested)."""
        since = self._clear_since.get(link)
        return 0.0 if since is None else now - since


def reverse_of(topology: Topology, direction: LinkDirection) -> LinkDirection | None:
    """The other direction of `direction`'s link (the way its acknowledgements come back)."""
    pair = topology.access(direction.link) if direction.is_access else topology.link_directions[direction.link]
    return next((d for d in pair if d.id != direction.id), None)


def path_directions(topology: Topology, direction_ids: Iterable[str]) -> tuple[list[LinkDirection],
                                                                               list[LinkDirection]]:
    """A path's directions, and their reverses (both carry a TCP transfer: data and acks)."""
    forward = [topology.directions[d] for d in direction_ids]
    reverse = [r for r in (reverse_of(topology, d) for d in forward) if r is not None]
    return forward, reverse
