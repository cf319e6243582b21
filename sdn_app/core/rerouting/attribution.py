"""Why a transfer gets less than it booked, decided from measurements: the network or the hosts.

`attribute` takes an underperforming reservation's path (its directions, and their reverses:
TCP's acks come back that way) and the congestion verdicts of `LinkWatch`: a congested direction
on either is the network's doing; every direction measured and clear puts it at the hosts; a
direction never measured leaves it unknown. The evidence is a typed record (`decisions.Evidence`)
of the shortfall and the measurements, with the transfer's retransmits, RTT and sender CPU when
its engine reports them (None when it does not: rendered "unknown", never 0).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sdn_app.core.decisions import Evidence, Measured
from sdn_app.core.rerouting.advisor import Underperforming
from sdn_app.core.rerouting.congestion import Condition, LinkWatch
from sdn_app.core.topology import LinkDirection


@dataclass(frozen=True)
class Attribution:
    """Why a reservation gets less than it booked: `network` (congested directions on its path,
    forward or reverse), `hosts` (every direction measured and clear), or `unmeasured`."""

    cause: str
    congested: tuple[Condition, ...]
    evidence: Evidence


def measured(condition: Condition, reverse: bool = False) -> Measured:
    """The evidence of one measured direction."""
    return Measured(condition.direction, condition.link, condition.capacity, condition.measured_bps,
                    condition.unowned_bps, reverse)


def attribute(forward: list[LinkDirection], reverse: list[LinkDirection], watch: LinkWatch,
              advice: Underperforming) -> Attribution:
    """Decide from measurements whether a congested link or the hosts hold a transfer back."""
    health = advice.health
    shortfall = Evidence(advice.achieved_bps, advice.booked_bps, watch.policy.consecutive,
                         retransmits=health.retransmits, rtt_ms=health.rtt_ms, sender_cpu_percent=health.cpu_percent)
    ways = [(d, False) for d in forward] + [(d, True) for d in reverse]
    conditions = [(watch.condition(d.id), back) for d, back in ways]
    found = [(c, back) for c, back in conditions if c is not None and c.congested]
    if found:
        return Attribution("network", tuple(c for c, _ in found),
                           replace(shortfall, congested=tuple(measured(c, back) for c, back in found)))
    unmeasured = tuple(d.id for (d, _), (c, _) in zip(ways, conditions, strict=True) if c is None)
    if unmeasured:
        return Attribution("unmeasured", (), replace(shortfall, unmeasured=unmeasured))
    loaded, back = max(conditions, key=lambda found: found[0].fraction)  # type: ignore[union-attr]
    assert loaded is not None
    return Attribution("hosts", (), replace(shortfall, busiest=measured(loaded, back)))
