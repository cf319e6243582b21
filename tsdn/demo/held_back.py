"""Who held each transfer back, from the controller's own evidence. Pure.

A transfer sagged when `consecutive` rate reports in a row fell below `threshold` of its booking
(the controller's own rerouting policy, `ReroutePolicy`). What held it back is what the controller
decided about it, read from the typed decisions the run recorded, never from reason text:

- the network: a move off a congested link (MOVED, RELIEVED, REARRANGED), a verdict naming
  congested directions on its path (not moved: held down, budget spent, no room, access link), a
  move off a link that went down (LINK), or DEGRADED when a link went down and no path fits;
- its hosts: NOT_MOVED because every direction of its path measured clear (`hosts`);
- unknown: a direction of its path was not measured (`unmeasured`), or the controller said nothing.

`sags` lists the sags that no move ended, each with the controller's verdicts in it: the report's
"not moved, and why".
"""

from __future__ import annotations

from dataclasses import dataclass

from sdn_app.core import decisions
from sdn_app.core.decisions import Decision, Kind
from sdn_app.core.rerouting.policy import ReroutePolicy
from sdn_app.core.units import format_bandwidth
from tsdn.demo.record import Event, Recording

POLICY = ReroutePolicy()  # the controller's defaults, which the demo runs with
AROUND = 1.5  # seconds before and after a sag in which the controller's verdicts about it count
JUDGED = (Kind.LINK, Kind.DEGRADED, Kind.MOVED, Kind.RELIEVED, Kind.REARRANGED, Kind.NOT_MOVED)
"""The decisions that say who held a flow back (others, e.g. a share re-solved, say nothing of it)."""


@dataclass(frozen=True)
class Verdict:
    """One decision of the controller about a flow, as the run recorded it."""

    time: float
    decision: Decision
    reason: str

    @property
    def by(self) -> str:
        """`network`, `hosts` or `unknown`: who the decision holds responsible."""
        d = self.decision
        if d.kind is not Kind.NOT_MOVED or (d.evidence is not None and d.evidence.congested):
            return "network"
        return "hosts" if d.why is decisions.Why.HOSTS else "unknown"

    def what(self) -> str:
        """e.g. "tbit-tcp congested", "link wan-chicago down", "path at most 55% loaded"."""
        d = self.decision
        if d.kind in (Kind.LINK, Kind.DEGRADED) and d.link:
            return f"link {d.link} {'up' if d.link_up else 'down'}"
        if d.evidence is not None and d.evidence.congested:
            return ", ".join(sorted({m.link for m in d.evidence.congested})) + " congested"
        if d.evidence is not None and d.evidence.busiest is not None:
            return f"path at most {d.evidence.busiest.fraction:.0%} loaded"
        if d.evidence is not None and d.evidence.unmeasured:
            return "path not measured"
        return d.kind.value


@dataclass(frozen=True)
class Sag:
    """`reports` rate reports in a row below the threshold, from `start` to `end`."""

    flow: str
    start: float
    end: float
    reports: int
    mean_bps: float
    booked_bps: int
    moved: bool  # a move of the flow ended it (or came within it)
    verdicts: tuple[Verdict, ...]


def verdicts(recording: Recording, flow: str) -> list[Verdict]:
    """The controller's decisions about `flow`, in time order: moves, verdicts, degradations."""
    found = []
    for event in recording.sorted_events():
        if event.details.get("flow") != flow or not event.details.get("decision"):
            continue
        decision = decisions.from_dict(event.details["decision"])
        if decision.kind in JUDGED:
            found.append(Verdict(event.time, decision, _reason(event)))
    return found


def _reason(event: Event) -> str:
    return str(event.details.get("reason") or event.details.get("message") or "")


def sags(recording: Recording, flow: str) -> list[Sag]:
    """Each run of at least `consecutive` reports below `threshold` of the booking."""
    samples = sorted((s for s in recording.rates if s.flow == flow and s.booked_bps > 0), key=lambda s: s.time)
    moves = [e.time for e in recording.events if e.kind == "reroute" and e.details.get("flow") == flow]
    mine = verdicts(recording, flow)
    found: list[Sag] = []
    run: list = []
    for sample in [*samples, None]:
        if sample is not None and sample.nominal_bps < POLICY.threshold * sample.booked_bps:
            run.append(sample)
            continue
        if len(run) >= POLICY.consecutive:
            start, end = run[0].time - 1.0, run[-1].time  # a report covers the second before it
            moved = any(start <= t <= (sample.time if sample is not None else end) + AROUND for t in moves)
            found.append(Sag(flow, start, end, len(run), sum(s.nominal_bps for s in run) / len(run),
                             run[-1].booked_bps, moved,
                             tuple(v for v in mine if start - AROUND <= v.time <= end + AROUND)))
        run = []
    return found


def held_back(recording: Recording, flow: str) -> tuple[str, str]:
    """(short, long): who held the transfer back over the run, from the controller's decisions
    while it sagged: "network", "hosts", both, or "-" when it never sagged."""
    found = sags(recording, flow)
    if not found:
        return "-", f"nothing: never {POLICY.consecutive} reports in a row below {POLICY.threshold:.0%} of its booking"
    by: dict[str, list[str]] = {}
    for sag in found:
        if not sag.verdicts:
            by.setdefault("unknown", []).append(f"{sag.start:.0f}-{sag.end:.0f} s: no decision")
        for verdict in sag.verdicts:
            by.setdefault(verdict.by, []).append(f"{verdict.what()} at {verdict.time:.1f} s")
    order = [who for who in ("network", "hosts", "unknown") if who in by]
    long = "; ".join(f"{'its hosts' if who == 'hosts' else 'the ' + who if who == 'network' else 'unknown'}: "
                     f"{', '.join(dict.fromkeys(by[who]))}" for who in order)
    return " + ".join(order), long


def not_moved_rows(recording: Recording) -> list[tuple[str, ...]]:
    """Per sag of a transfer that no move ended: when, how low, and what the controller said."""
    rows = []
    for name, flow in sorted(recording.flows.items()):
        if flow.kind != "transfer":
            continue
        for sag in sags(recording, name):
            if sag.moved:
                continue
            said = "; ".join(f"{v.time:.1f} s {v.decision.verdict or v.decision.kind.value} ({v.by}): {v.reason}"
                             for v in sag.verdicts)
            if not said:
                said = ("no decision: the controller judges a transfer after "
                        f"{POLICY.consecutive} low reports in a row, and said nothing about this one then")
            share = sag.mean_bps / sag.booked_bps if sag.booked_bps else 0.0
            rows.append((name, f"{sag.start:.1f}", f"{sag.end:.1f}", str(sag.reports),
                         f"{format_bandwidth(int(sag.mean_bps))} of {format_bandwidth(sag.booked_bps)} ({share:.0%})",
                         said))
    return rows
