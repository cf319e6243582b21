"""Elastic reservations' shares as the book sees them: who takes part, what they share, and which
meters a re-solve changes.

An elastic reservation books its floor in the ledger like a guaranteed bandwidth; above it, it
shares what every booking leaves on its path at this instant (`spare`: capacity minus what is
booked now, holds and floors included; nothing on a link that is down) with the other elastic
reservations, by priority, as `sharing.solve` divides it. Only those whose flows carry traffic
take part (PROVISIONING, ACTIVE, MOVING, DEGRADED, in their window; a DEGRADED one crosses a
link that is down, with no spare, so it gets its floor); a held one, one before its window or one
with its data plane released has no flows and no share.

A re-solve raises a reservation's meter only when its share grew by more than `step` x its
ceiling (`--share-step`), so small shifts do not churn meters and pacing; a share that shrank is
applied at once, however little, because another reservation needs that capacity now: no link
direction's meters ever add up to more than it carries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Set

from sdn_app.core import sharing
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import Reservation, State
from sdn_app.core.topology import Topology

DEFAULT_SHARE_STEP = 0.05  # of a reservation's ceiling: smaller share changes leave its meter alone
_SHARING = frozenset({State.PROVISIONING, State.ACTIVE, State.MOVING, State.DEGRADED})


class Shares:
    """Solves the shares of the elastic reservations among `live` (`elastic`: their ids)."""

    def __init__(self, topology: Topology, ledger: Ledger, live: Mapping[str, Reservation], elastic: Set[str],
                 down_links: Callable[[], Set[str]], step: float = DEFAULT_SHARE_STEP, method: str = "filling"):
        if isinstance(step, bool) or not isinstance(step, int | float) or not 0 <= step < 1:
            raise InvalidArgument(f"share_step: a fraction of the ceiling from 0 to below 1, got {step!r}")
        self.topology = topology
        self.ledger = ledger
        self.live = live
        self.elastic = elastic  # ids of the live elastic ones among `live`
        self.down_links = down_links
        self.step = float(step)
        if method not in sharing.METHODS:
            raise InvalidArgument(f"share_solver: one of {', '.join(sharing.METHODS)}, got {method!r}")
        self.method = method  # how each round of the filling is solved (`sharing`): the same shares

    def _sharing(self, now: float) -> list[Reservation]:
        """The elastic reservations that take part in a re-solve now, oldest first."""
        return sorted((r for r in map(self.live.__getitem__, self.elastic)
                       if r.state in _SHARING and r.route is not None and r.request.start <= now),
                      key=lambda r: (r.created, r.id))

    def changes(self, now: float) -> dict[str, int]:
        """Re-solve the shares now; the new meters worth setting (`sharing.changed`): one below the
        reservation's meter where a direction needs it, one above by more than the step, and the
        first share of one that had none."""
        taking_part = self._sharing(now)
        if not taking_part:
            return {}
        claims = {r.id: _claim(r) for r in taking_part}
        directions = {d for c in claims.values() for d in c.directions}
        down = self.down_links()
        after = math.nextafter(now, math.inf)
        spare = {d: 0 if self.topology.directions[d].link in down
                 else self.ledger.capacities[d] - self.ledger.used(d, now, after)
                 for d in directions if d in self.ledger.capacities}
        shares = sharing.solve(list(claims.values()), spare, method=self.method)
        current = {r.id: r.rate for r in taking_part if r.rate}
        return sharing.changed(current, shares, claims, self.step, spare)


def _claim(r: Reservation) -> sharing.Claim:
    assert r.route is not None
    return sharing.Claim(r.id, r.route.primary.direction_ids, r.request.bandwidth, r.ceiling, r.priority)
