"""Rate-driven rerouting: is a transfer getting what it booked, and if not, what to do.

The DTN agents report each transfer's achieved rate once per second. `RateAdvisor` keeps, per
reservation, how many reports in a row fell below `threshold` x the booked rate; at
`consecutive` of them it advises acting (the book moves the reservation to an alternate path
with room, make-before-break, or marks it congested when none has). After a move it averages
the next `consecutive` reports and says what the move achieved, so every decision can be told
with its rate before and after. Pure: the book feeds it, no clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_THRESHOLD = 0.8
DEFAULT_CONSECUTIVE = 3


@dataclass(frozen=True)
class Underperforming:
    """`consecutive` reports in a row below the threshold: their mean rate, and the booking."""

    reservation_id: str
    achieved_bps: float
    booked_bps: int


@dataclass(frozen=True)
class AfterMove:
    """The mean rate of the first reports after a move, and the rate that caused it."""

    reservation_id: str
    before_bps: float
    after_bps: float
    booked_bps: int


@dataclass
class _Track:
    low: list[float] = field(default_factory=list)  # the current run of reports below the threshold
    before_move: float | None = None  # set after a move, until the rate after it is known
    after: list[float] = field(default_factory=list)


class RateAdvisor:
    """Per-reservation history of achieved rates against bookings."""

    def __init__(self, threshold: float = DEFAULT_THRESHOLD, consecutive: int = DEFAULT_CONSECUTIVE):
        if not 0 < threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if consecutive < 1:
            raise ValueError(f"consecutive must be at least 1, got {consecutive}")
        self.threshold = threshold
        self.consecutive = consecutive
        self._tracks: dict[str, _Track] = {}

    def observe(self, reservation_id: str, booked_bps: int, achieved_bps: float) -> Underperforming | AfterMove | None:
        """Take one report; what it calls for, if anything."""
        track = self._tracks.setdefault(reservation_id, _Track())
        if track.before_move is not None:
            track.after.append(achieved_bps)
            if len(track.after) < self.consecutive:
                return None
            after = AfterMove(reservation_id, track.before_move, sum(track.after) / len(track.after), booked_bps)
            self._tracks[reservation_id] = _Track()
            return after
        if achieved_bps >= self.threshold * booked_bps:
            track.low.clear()
            return None
        track.low.append(achieved_bps)
        if len(track.low) < self.consecutive:
            return None
        advice = Underperforming(reservation_id, sum(track.low) / len(track.low), booked_bps)
        track.low.clear()
        return advice

    def moved(self, reservation_id: str, before_bps: float) -> None:
        """The reservation was moved because of `before_bps`: average the next reports."""
        self._tracks[reservation_id] = _Track(before_move=before_bps)

    def forget(self, reservation_id: str) -> None:
        """Drop a reservation's history (it ended, or its path changed for another reason)."""
        self._tracks.pop(reservation_id, None)
