"""Rate-driven rerouting: is a transfer getting what it booked, and may it move now.

The DTN agents report each transfer's achieved rate once per second (with its retransmits,
RTT and sender CPU when the engine knows them). `RateAdvisor` keeps, per reservation:

- how many reports in a row fell below `threshold` x the booked rate; from `consecutive` of them
  on, it says so at each report (`Underperforming`), and the rerouter attributes the shortfall
  (`attribution.attribute`): a congested link direction on the path, either way (TCP's acks use
  the reverse), or the hosts;
- after a move, the mean of the next `consecutive` reports (`AfterMove`), so every decision is
  told with its rate before and after;
- the stability rules of `ReroutePolicy`: a hold-down after each move, a budget of moves per
  window (moves off failed links are not counted), and the links it left for congestion,
  which it may not go back onto until they have measured clear for `clear_for` seconds;
- the last verdict announced, so a reservation that stays host-limited is told once, not
  every three seconds.

Pure: the rerouter feeds it with the time; no clock of its own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sdn_app.core.decisions import Hold, Why, hold_text
from sdn_app.core.rerouting.congestion import LinkWatch
from sdn_app.core.rerouting.policy import RECENT, ReroutePolicy


@dataclass(frozen=True)
class Health:
    """What one rate report says about a transfer besides its rate (None: the engine does not say)."""

    retransmits: int | None = None  # in the report's interval
    rtt_ms: float | None = None
    cpu_percent: float | None = None  # of one core, at the sender


@dataclass(frozen=True)
class Underperforming:
    """`consecutive` reports in a row below the threshold: their mean rate, and the booking."""

    reservation_id: str
    achieved_bps: float
    booked_bps: int
    health: Health = Health()


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
    last_rate: float | None = None
    last_rate_time: float = 0.0
    previous_rate: float | None = None  # the report before the last one
    health: Health = Health()


@dataclass
class _History:
    moves: deque[float] = field(default_factory=deque)  # times of counted moves, within the budget window
    last_move: float | None = None
    left: dict[str, float] = field(default_factory=dict)  # link left for congestion -> when
    announced: str = ""  # the kind of the last not-moved verdict told


class RateAdvisor:
    """Per-reservation rates against bookings, and the stability history of its moves."""

    def __init__(self, policy: ReroutePolicy | None = None):
        self.policy = policy or ReroutePolicy()
        self._tracks: dict[str, _Track] = {}
        self._history: dict[str, _History] = {}

    @property
    def threshold(self) -> float:
        return self.policy.threshold

    @property
    def consecutive(self) -> int:
        return self.policy.consecutive

    def observe(self, reservation_id: str, booked_bps: int, achieved_bps: float, now: float,
                health: Health | None = None) -> Underperforming | AfterMove | None:
        """Take one report; what it calls for, if anything."""
        track = self._tracks.setdefault(reservation_id, _Track())
        track.previous_rate = track.last_rate
        track.last_rate, track.last_rate_time, track.health = achieved_bps, now, health or Health()
        if track.before_move is not None:
            track.after.append(achieved_bps)
            if len(track.after) < self.consecutive:
                return None
            after = AfterMove(reservation_id, track.before_move, sum(track.after) / len(track.after), booked_bps)
            track.before_move, track.after = None, []
            return after
        if achieved_bps >= self.threshold * booked_bps:
            track.low.clear()
            self._history.get(reservation_id, _History()).announced = ""
            return None
        track.low.append(achieved_bps)
        if len(track.low) < self.consecutive:
            return None
        # Every further low report is judged again: the measurements may have caught up (a link
        # whose congestion the switches' counters show a poll later), or a hold-down ended.
        del track.low[:-self.consecutive]
        return Underperforming(reservation_id, sum(track.low) / len(track.low), booked_bps, track.health)

    def recent_rate(self, reservation_id: str, now: float) -> float | None:
        """What the reservation sends now, as reported within the last few seconds: the larger of its
        last two reports. The switches' counters cover a second of their own, which straddles two of
        the agent's: a transfer whose rate moved between them would otherwise leave part of its own
        traffic counted as another tenant's (seen: a DTN link booked to its last bit judged
        congested by 5% that was the transfer's own)."""
        track = self._tracks.get(reservation_id)
        if track is None or track.last_rate is None or now - track.last_rate_time > RECENT:
            return None
        return max(track.last_rate, track.previous_rate or 0.0)

    def moved(self, reservation_id: str, now: float, before_bps: float | None = None,
              left_links: frozenset[str] = frozenset(), counted: bool = True) -> None:
        """The reservation moved: at `before_bps` (its rate after is then averaged), off
        `left_links` for congestion; `counted` against hold-down and budget unless it fled a failure."""
        self._tracks[reservation_id] = _Track(before_move=before_bps)
        history = self._history.setdefault(reservation_id, _History())
        history.announced = ""
        for link in left_links:
            history.left[link] = now
        if counted:
            history.moves.append(now)
            history.last_move = now

    def path_changed(self, reservation_id: str) -> None:
        """Its path changed (a failure, a change asked for): rates so far say nothing about the new one."""
        track = self._tracks.get(reservation_id)
        if track is not None:
            track.low.clear()

    def may_move(self, reservation_id: str, now: float) -> str:
        """Why the reservation may not move for congestion now ("" when it may)."""
        held = self.held(reservation_id, now)
        return hold_text(*held) if held is not None else ""

    def held(self, reservation_id: str, now: float) -> tuple[Why, Hold] | None:
        """Whether the stability rules keep the reservation from moving for congestion now:
        (HELD or BUDGET, the numbers), or None when it may move."""
        history = self._history.get(reservation_id)
        if history is None:
            return None
        p = self.policy
        while history.moves and now - history.moves[0] >= p.budget_window:
            history.moves.popleft()
        hold = Hold(now - history.last_move if history.last_move is not None else 0.0, p.hold_down,
                    len(history.moves), p.budget_window, p.move_budget)
        if history.last_move is not None and now - history.last_move < p.hold_down:
            return Why.HELD, hold
        if len(history.moves) >= p.move_budget:
            return Why.BUDGET, hold
        return None

    def barred_links(self, reservation_id: str, watch: LinkWatch, now: float) -> frozenset[str]:
        """Links the reservation left for congestion that have not measured clear for `clear_for` s."""
        history = self._history.get(reservation_id)
        if history is None:
            return frozenset()
        for link in [link for link in history.left if watch.clear_for(link, now) >= self.policy.clear_for]:
            del history.left[link]
        return frozenset(history.left)

    def announce(self, reservation_id: str, verdict: str) -> bool:
        """Whether a not-moved verdict of this kind is news (it is told once while it lasts)."""
        history = self._history.setdefault(reservation_id, _History())
        if history.announced == verdict:
            return False
        history.announced = verdict
        return True

    def forget(self, reservation_id: str) -> None:
        """Drop everything about a reservation (it ended)."""
        self._tracks.pop(reservation_id, None)
        self._history.pop(reservation_id, None)
