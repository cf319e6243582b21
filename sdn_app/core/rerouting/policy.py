"""The policy of rate-driven rerouting: every threshold a controller option sets, and the constants.

`ReroutePolicy` holds what an operator tunes (`tsdn controller --help`): when a transfer
underperforms, when a link direction is congested and clear again, and the stability rules
(hold-down, move budget, how long a link left for congestion must measure clear). The module's
constants are the fixed parts: how long a reported rate stands, what a transfer puts on the wire
beyond what it reports, what counts as measurement noise, and the bounds of a rearrangement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sdn_app.core.errors import InvalidArgument

RECENT = 5.0  # seconds a reported rate stands for what a reservation sends
WIRE_OVERHEAD = 1.05  # bytes on the wire (Ethernet, IP, TCP headers) per byte a transfer reports moving
ACK_SHARE = 0.03  # a TCP transfer's acks against its data rate (about 2.2% at 1500-byte segments, and margin)
NOISE_SHARE = 0.01  # unowned load below this share of a direction's capacity is measurement noise
MAX_DISPLACED = 2  # reservations moved to make room for one
CANDIDATE_PATHS = 4  # paths of the relieved reservation tried
CANDIDATE_MOVERS = 6  # reservations considered for each short direction set


@dataclass(frozen=True)
class ReroutePolicy:
    """Every threshold of rate-driven rerouting; each is a controller option (`tsdn controller --help`)."""

    threshold: float = 0.8  # a transfer underperforms below this share of its booking ...
    consecutive: int = 3  # ... for this many reports in a row
    congested_at: float = 0.9  # a link direction is congested at this share of its capacity measured ...
    clear_at: float = 0.7  # ... and clear again below this share
    unowned_margin: float = 0.05  # congested only with this share of capacity beyond the controller's own traffic
    clear_for: float = 20.0  # seconds a link left for congestion must measure clear before a move back onto it
    hold_down: float = 10.0  # seconds after a move before the reservation may move again for congestion
    move_budget: int = 3  # moves for congestion (or to make room) per reservation ...
    budget_window: float = 300.0  # ... in this many seconds; moves off failed links are not counted

    def __post_init__(self) -> None:
        def share(name: str) -> None:
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) \
                    or not 0 < value <= 1:
                raise InvalidArgument(f"{name}: a share in (0, 1], got {value!r}")

        for name in ("threshold", "congested_at", "clear_at", "unowned_margin"):
            share(name)
        if self.clear_at >= self.congested_at:
            raise InvalidArgument(f"clear_at ({self.clear_at:g}) must be below congested_at "
                                  f"({self.congested_at:g}): they are the two ends of the hysteresis")
        for name in ("consecutive", "move_budget"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidArgument(f"{name}: a whole number of at least 1, got {value!r}")
        for name in ("clear_for", "hold_down", "budget_window"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise InvalidArgument(f"{name}: seconds, zero or more, got {value!r}")
