"""What this machine's emulation carries, and the emulation scale a scenario runs at. Pure.

A scenario's `emulation_scale` is the largest scale it may run at. Before its timeline the
runner plays the scenario's heaviest moment (`peak_load`) on the real fabric for a few
seconds: the transfers live then (their senders paced where the scenario paces them), the
reservations booked then (they shape the routes) and the cross traffic running then. The
cross traffic goes over the same link but the other way (`cross_placement`): it costs the
switches the same work without congesting the transfers being measured.

From what arrived (`Attempt`) the scale either fits, or the next rung of the ladder to try is
estimated from the capacity measured: the machine carried C Mbit/s where N were offered, so a
rung r fits when its offered load x `FIT` is at most C.

The ladder is the scenario's scale times `LADDER` (1, 3/4, 1/2, 3/8, 1/4, 3/16, 1/8, 1/16),
each rung kept only where every link of the topology stays within what Mininet's TCLink can
shape. A machine that cannot carry the peak at the smallest rung is too slow for the scenario
(`TooSlow`): the runner exits 3 naming the measured and the needed rate, never blaming the
network.

>>> rungs = ladder(0.0002)
>>> [f"{r:g}" for r in rungs[:3]]
['0.0002', '0.00015', '0.0001']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from sdn_app.core.errors import FailedPrecondition
from sdn_app.core.units import format_bandwidth
from tsdn.demo.scenario import (
    MAX_TCLINK_MBPS,
    MIN_TCLINK_MBPS,
    ClearLinkAction,
    CongestLinkAction,
    ReleaseAction,
    ReserveAction,
    Scenario,
    TransferAction,
)

LADDER = (1.0, 0.75, 0.5, 0.375, 0.25, 0.1875, 0.125, 0.0625)
"""The scales tried, as fractions of the scenario's `emulation_scale`, largest first."""
FIT = 0.9
"""A scale fits when the emulation carried at least this share of the transfers' offered rate,
and of the cross traffic's: TCP through a meter at its booking carries 0.92-0.96 of it when the
machine keeps up."""
WARMUP_REPORTS = 2  # a transfer's first reports (TCP's slow start, the path being installed) are not counted
MEASURED_REPORTS = 4  # the reports after them that are


class TooSlow(FailedPrecondition):
    """The machine cannot carry the scenario's heaviest moment even at the smallest scale."""


@dataclass(frozen=True)
class CrossLoad:
    """Cross traffic running at the peak: `rate_bps` (nominal) sent over `link` from switch `src`."""

    link: str
    src: str
    rate_bps: int


@dataclass(frozen=True)
class Peak:
    """The heaviest moment of a timeline: what runs then, and at what time it first does."""

    at: float
    transfers: tuple[TransferAction, ...]
    reservations: tuple[ReserveAction, ...]
    cross: tuple[CrossLoad, ...]

    @property
    def transfers_bps(self) -> int:
        """What the transfers offer (nominal): their bookings, or their pace where paced."""
        return sum(offered(t) for t in self.transfers)

    @property
    def cross_bps(self) -> int:
        return sum(c.rate_bps for c in self.cross)

    @property
    def offered_bps(self) -> int:
        return self.transfers_bps + self.cross_bps

    def describe(self) -> str:
        """e.g. "at 32 s: 4 transfer(s) 880G, cross traffic 900G"."""
        cross = f", cross traffic {format_bandwidth(self.cross_bps)}" if self.cross else ""
        return f"at {self.at:g} s: {len(self.transfers)} transfer(s) {format_bandwidth(self.transfers_bps)}{cross}"


def offered(transfer: TransferAction) -> int:
    """What a transfer puts on the wire at most (nominal): its pace when the scenario paces it."""
    return transfer.pace if transfer.pace is not None else transfer.bandwidth


def peak_load(scenario: Scenario, capacity: dict[tuple[str, str], int]) -> Peak | None:
    """The moment of the timeline with the most traffic offered (transfers and cross traffic), the
    earliest among equals; None when the timeline starts no transfer.

    `capacity`: (link, from switch) -> nominal capacity of that direction, for cross traffic given
    as what it leaves (`rate`, `fraction`). Transfers that end by size count until their release or
    the end: the file does not say when they finish."""
    transfers: dict[str, TransferAction] = {}
    reservations: dict[str, ReserveAction] = {}
    cross: dict[tuple[str, str], CrossLoad] = {}
    best: Peak | None = None
    ordered = scenario.ordered()
    for i, (_, action) in enumerate(ordered):
        if isinstance(action, TransferAction):
            transfers[action.name] = action
        elif isinstance(action, ReserveAction):
            reservations[action.name] = action
        elif isinstance(action, ReleaseAction):
            transfers.pop(action.name, None)
            reservations.pop(action.name, None)
        elif isinstance(action, CongestLinkAction):
            for (link, src), cap in capacity.items():
                if link == action.link and (action.from_ is None or action.from_ == src):
                    left = action.rate if action.rate is not None else int(cap * (action.fraction or 1))
                    cross[(link, src)] = CrossLoad(link, src, cap - left)
        elif isinstance(action, ClearLinkAction):
            for key in [k for k in cross if k[0] == action.link and (action.from_ is None or action.from_ == k[1])]:
                del cross[key]
        if i + 1 < len(ordered) and ordered[i + 1][1].at == action.at:
            continue  # the moment is what holds after every action at this time
        if not transfers:
            continue
        moment = Peak(action.at, tuple(transfers.values()), tuple(reservations.values()), tuple(cross.values()))
        if best is None or moment.offered_bps > best.offered_bps:
            best = moment
    return best


def ladder(bound: float, capacities: Sequence[int] = ()) -> list[float]:
    """The scales tried for a scenario whose `emulation_scale` is `bound`, largest first: `LADDER`
    of it, keeping the rungs at which every capacity (nominal bit/s) is within TCLink's range."""
    rungs = []
    for fraction in LADDER:
        scale = bound * fraction
        if all(MIN_TCLINK_MBPS <= c * scale / 1e6 <= MAX_TCLINK_MBPS * (1 + 1e-9) for c in capacities):
            rungs.append(scale)
    return rungs


def cross_placement(cross: CrossLoad, ends: tuple[str, str], capacity: int,
                    data_on: dict[tuple[str, str], int]) -> tuple[str, int]:
    """Where calibration sends `cross`'s traffic on its link, and at what rate (nominal): the other
    way than it runs in the timeline when the transfers' data leaves it room (their acks are
    little), else its own way; at most what the direction has left beside the data
    (`data_on`: (from, to) switch -> nominal data rate of the transfers measured there)."""
    a, b = ends
    own = (cross.src, b if cross.src == a else a)
    choices = [(own[1], own[0]), own]
    for src, dst in choices:
        if cross.rate_bps + data_on.get((src, dst), 0) <= capacity:
            return src, cross.rate_bps
    src, dst = min(choices, key=lambda way: data_on.get(way, 0))
    return src, max(0, capacity - data_on.get((src, dst), 0))


@dataclass(frozen=True)
class FlowCarried:
    """One transfer of a calibration: what it offered and carried (nominal bit/s, mean of its
    measured reports)."""

    name: str
    offered_bps: int
    carried_bps: float
    reports: int


@dataclass(frozen=True)
class Attempt:
    """What the emulation carried at one scale: the transfers and the cross traffic (nominal)."""

    scale: float
    flows: tuple[FlowCarried, ...]
    cross_offered_bps: int = 0
    cross_carried_bps: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def transfers_offered_bps(self) -> int:
        return sum(f.offered_bps for f in self.flows)

    @property
    def transfers_carried_bps(self) -> float:
        return sum(f.carried_bps for f in self.flows)

    @property
    def transfers_share(self) -> float:
        offered_bps = self.transfers_offered_bps
        return self.transfers_carried_bps / offered_bps if offered_bps else 1.0

    @property
    def cross_share(self) -> float:
        return min(1.0, self.cross_carried_bps / self.cross_offered_bps) if self.cross_offered_bps else 1.0

    @property
    def offered_mbps(self) -> float:
        """What was offered, as the emulation ran it (Mbit/s)."""
        return (self.transfers_offered_bps + self.cross_offered_bps) * self.scale / 1e6

    @property
    def carried_mbps(self) -> float:
        """What the emulation carried (Mbit/s): the capacity measured."""
        return (self.transfers_carried_bps + min(self.cross_carried_bps, self.cross_offered_bps)) * self.scale / 1e6

    @property
    def fits(self) -> bool:
        return bool(self.flows) and self.transfers_share >= FIT and self.cross_share >= FIT

    @property
    def headroom(self) -> float:
        """How much the load could grow before the part carried worst falls below `FIT` (below 1:
        it already has)."""
        return min(self.transfers_share, self.cross_share) / FIT

    def describe(self) -> str:
        """One line: the scale, what was offered and carried, and the verdict."""
        cross = ""
        if self.cross_offered_bps:
            cross = (f", cross traffic {self.cross_share:.0%} of {self.cross_offered_bps * self.scale / 1e6:.1f}")
        return (f"scale {self.scale:g}: carried {self.carried_mbps:.1f} of {self.offered_mbps:.1f} Mbit/s offered "
                f"(transfers {self.transfers_share:.0%} of {self.transfers_offered_bps * self.scale / 1e6:.1f}{cross} "
                f"Mbit/s): {'fits' if self.fits else 'does not fit'} (needs {FIT:.0%} of each carried)")


@dataclass(frozen=True)
class Choice:
    """After an attempt: the scale to run the timeline at (`done`), or the next one to try."""

    scale: float
    done: bool
    why: str


def next_choice(rungs: Sequence[float], attempts: Sequence[Attempt], scenario: str) -> Choice:
    """The scale chosen after `attempts` (the last one at the rung it names), or the next rung to
    try, estimated from the capacity measured; `TooSlow` when no rung is left."""
    last = attempts[-1]
    if last.fits:
        bound = rungs[0]
        why = ("the largest scale allowed" if math.isclose(last.scale, bound) else
               f"the largest rung of the ladder that fits (the scenario allows up to {bound:g})")
        return Choice(last.scale, True, f"scale {last.scale:g}, {why}: the emulation carried "
                                        f"{last.carried_mbps:.1f} of the {last.offered_mbps:.1f} Mbit/s "
                                        f"of {scenario}'s heaviest moment")
    measured = last.carried_mbps
    lower = [r for r in rungs if r < last.scale * (1 - 1e-9)]
    if not lower:
        cross = f", cross traffic {last.cross_share:.0%}" if last.cross_offered_bps else ""
        raise TooSlow(f"this machine's emulation is too slow for {scenario}: at the smallest scale {last.scale:g} "
                      f"its heaviest moment offers {last.offered_mbps:.1f} Mbit/s and the emulation carried "
                      f"{measured:.1f} (transfers {last.transfers_share:.0%}{cross}; each needs {FIT:.0%}): run "
                      f"the demo on a faster or quieter machine")
    estimate = last.scale * min(last.headroom, 1.0)  # the load scales with the scale
    fitting = [r for r in lower if r <= estimate * (1 + 1e-9)]
    chosen = fitting[0] if fitting else lower[-1]
    return Choice(chosen, False, f"scale {last.scale:g} does not fit: the emulation carried {measured:.1f} of "
                                 f"{last.offered_mbps:.1f} Mbit/s offered; the part closest to its limit would be "
                                 f"within it at about scale {estimate:.3g}: trying {chosen:g}")
