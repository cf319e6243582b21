"""What the controller decided about a reservation, as a typed record with its evidence as numbers.

The book records each rerouting decision (moved, rearranged, not moved and why, moved off a link
that went down, degraded, ...) as a `Decision` on the reservation's event and history entry. The
human reason is rendered from the record (`render`), so the live map, /metrics, `tsdn path show`
and the demo report read the record's typed fields and none of them parses reason text:
rewording a reason cannot change what they conclude.

- `Kind`: what was decided. A move's cause (`Decision.cause`, one of `CAUSES`) and a
  rate-driven rerouting verdict (`Decision.verdict`, one of `VERDICTS`) follow from it.
- `Evidence`: what the rate reports and the switches' measurements showed: the shortfall, each
  congested link direction (its load, capacity and the part that is not the controller's), the
  path's busiest direction when the hosts are the limit, the directions not measured, and the
  transport's retransmits, RTT and sender CPU (None: the report did not say; rendered "unknown").
- `PathTaken`: a route as an event names it, its nodes and its links: with parallel links the
  switches alone cannot say which of two links between the same switches a flow took.

Pure: no framework imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sdn_app.core.paths import Path
from sdn_app.core.units import format_bandwidth

# Every verdict of rate-driven rerouting, in the order people read them.
VERDICTS = ("moved", "rearranged", "hosts", "held", "budget", "no_room", "unmeasured", "access")
# Every cause of a move to another route.
CAUSES = ("link", "congestion", "rearrangement", "other")


class Kind(StrEnum):
    """What the controller decided."""

    MOVED = "moved"  # congested: moved to a route with measured headroom
    REARRANGED = "rearranged"  # congested, no route with headroom: others move first to make room
    RELIEVED = "relieved"  # the relieved reservation's own move, ending a rearrangement
    DISPLACED = "displaced"  # moved to make room for another (a step of a rearrangement)
    NOT_MOVED = "not_moved"  # underperforming and not moved: `Decision.why` says why
    LINK = "link"  # moved because a link went down (or came back)
    DEGRADED = "degraded"  # a link went down and no alternate path fits
    REROUTED = "rerouted"  # moved for another reason: capacity came back, a repair at start-up
    SHARED = "shared"  # an elastic reservation's share re-solved: its meter changes
    ADMITTED = "admitted"  # admitted (or committed) with elastic reservations shrunk to make room


class Why(StrEnum):
    """Why an underperforming reservation was not moved."""

    HOSTS = "hosts"  # every direction of its path measured clear: the hosts are the limit
    HELD = "held"  # held down after its last move
    BUDGET = "budget"  # its moves for congestion within the budget window are spent
    NO_ROOM = "no_room"  # no path avoiding the barred links has measured headroom, nor could be made
    UNMEASURED = "unmeasured"  # a direction of its path has no measured load
    ACCESS = "access"  # the congestion is on a DTN's access link, which no other path avoids


class Protection(StrEnum):
    """What a degraded protected reservation still has."""

    NONE = ""  # no alternate path, unprotected or both paths cut
    STAYS = "stays"  # the backup is lost, traffic stays on the primary
    FAILS_OVER = "fails_over"  # the primary is lost, traffic fails over to the backup


_CAUSE = {Kind.MOVED: "congestion", Kind.RELIEVED: "congestion", Kind.DISPLACED: "rearrangement",
          Kind.LINK: "link", Kind.REROUTED: "other"}


@dataclass(frozen=True, slots=True)
class Measured:
    """One link direction as measured: its load, capacity and the part not the controller's."""

    direction: str
    link: str
    capacity_bps: int
    measured_bps: float
    unowned_bps: float
    reverse: bool = False  # on the reverse of the path (its acknowledgements), not its data

    @property
    def fraction(self) -> float:
        return self.measured_bps / self.capacity_bps if self.capacity_bps else 0.0

    def describe(self) -> str:
        """e.g. "caltech-a->caltech-b at 97% of 1T, 560G not the controller's"."""
        return (f"{self.direction} at {self.fraction:.0%} of {format_bandwidth(self.capacity_bps)}, "
                f"{format_bandwidth(int(self.unowned_bps))} not the controller's")


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the rate reports and the measurements showed when a reservation underperformed."""

    achieved_bps: float  # the mean of the low reports
    booked_bps: int
    reports: int  # how many reports in a row were low
    congested: tuple[Measured, ...] = ()  # congested directions of the path, either way
    busiest: Measured | None = None  # every direction clear: the most loaded one (the hosts are the limit)
    unmeasured: tuple[str, ...] = ()  # directions of the path with no measured load
    retransmits: int | None = None  # in the last report's interval; None: unknown
    rtt_ms: float | None = None
    sender_cpu_percent: float | None = None  # of one core; None: the report had no CPU figure

    def transport(self) -> str:
        """"; no retransmits, RTT 1.2 ms, sender CPU 40% of a core", or "" when the report said nothing."""
        parts = []
        if self.retransmits is not None:
            parts.append("no retransmits" if self.retransmits == 0 else f"{self.retransmits} retransmits")
        if self.rtt_ms is not None:
            parts.append(f"RTT {self.rtt_ms:.1f} ms")
        if self.sender_cpu_percent is not None:
            cpu = self.sender_cpu_percent  # a paced sender may use a fraction of a percent: not "0%"
            parts.append(f"sender CPU {cpu:.0f}% of a core" if cpu >= 1 else f"sender CPU {cpu:.1f}% of a core")
        elif parts:
            parts.append("sender CPU unknown")
        return f"; {', '.join(parts)}" if parts else ""

    def describe(self) -> str:
        """The evidence as people read it: the shortfall and what it is attributed to."""
        shortfall = (f"achieved {format_bandwidth(int(self.achieved_bps))} of {format_bandwidth(self.booked_bps)} "
                     f"booked for {self.reports} reports")
        if self.congested:
            return f"{shortfall}; congested: {'; '.join(c.describe() for c in self.congested)}{self.transport()}"
        if self.unmeasured:
            shown = ", ".join(self.unmeasured[:3]) + (f" and {len(self.unmeasured) - 3} more"
                                                      if len(self.unmeasured) > 3 else "")
            return f"{shortfall}; not moved: no load measured on {shown}"
        if self.busiest is not None:
            return (f"{shortfall}; limited by the hosts: path links at most {self.busiest.fraction:.0%} loaded "
                    f"({self.busiest.direction}){self.transport()}")
        return f"{shortfall}{self.transport()}"


@dataclass(frozen=True, slots=True)
class PathTaken:
    """A route as an event names it: its nodes (source DTN, switches, destination DTN) and the
    switch-to-switch links it crosses, in order."""

    route: tuple[str, ...]
    links: tuple[str, ...] = ()

    def describe(self) -> str:
        """`src > sw1 > sw2 > dst`, as `Path.describe`."""
        return " > ".join(self.route)


def taken(path: Path) -> PathTaken:
    """How an event names `path`: its nodes and its links."""
    return PathTaken((path.src, *path.switches, path.dst), path.links)


@dataclass(frozen=True, slots=True)
class Trigger:
    """What calls for a move or a degradation: a link going down or coming back (`link`), or
    another change told as `text` (e.g. "reservations/... released")."""

    link: str = ""
    up: bool = False
    note: str = ""  # what the switches said about the link, e.g. "port s8:2 down"
    text: str = ""

    def describe(self) -> str:
        """"link s2-s3 down (port s2:1 down)", or the text."""
        if self.link:
            return f"link {self.link} {'up' if self.up else 'down'}" + (f" ({self.note})" if self.note else "")
        return self.text

    def move(self, to: PathTaken) -> Decision:
        """The decision to move to `to` for this trigger: LINK for a link, REROUTED otherwise."""
        if self.link:
            return Decision(Kind.LINK, to=to, link=self.link, link_up=self.up, note=self.note)
        return Decision(Kind.REROUTED, to=to, trigger=self.text)

    def degrade(self, protection: Protection, on: PathTaken | None, refusal: str) -> Decision:
        """The decision to leave a reservation DEGRADED for this trigger: no path fits."""
        return Decision(Kind.DEGRADED, protection=protection, on=on, refusal=refusal, link=self.link,
                        link_up=self.up, note=self.note, trigger="" if self.link else self.text)


@dataclass(frozen=True, slots=True)
class Displacement:
    """One reservation a rearrangement moves out of the way, and where to."""

    reservation: str  # its name, reservations/{id}
    to: PathTaken


@dataclass(frozen=True, slots=True)
class ShareChange:
    """An elastic reservation's share going from `before_bps` to `after_bps`, with its terms."""

    reservation: str  # its name, reservations/{id}
    before_bps: int
    after_bps: int
    floor_bps: int
    ceiling_bps: int
    priority: int

    def describe(self) -> str:
        """"reservations/... 70G -> 40G"."""
        return f"{self.reservation} {format_bandwidth(self.before_bps)} -> {format_bandwidth(self.after_bps)}"


@dataclass(frozen=True, slots=True)
class Hold:
    """Why the stability rules keep a reservation where it is: its last move and the policy."""

    moved_ago_s: float = 0.0  # since its last counted move
    hold_down_s: float = 0.0  # the policy's hold-down after a move
    moves: int = 0  # counted moves within the budget window
    window_s: float = 0.0  # the budget window
    budget: int = 0  # moves allowed within it


@dataclass(frozen=True, slots=True)
class Decision:
    """What the controller decided about a reservation, with its evidence (see `Kind`).

    Which fields a kind fills: MOVED `evidence`, `to`, `headroom_bps`; REARRANGED `evidence`,
    `displaced`, `to` (where the relieved one goes last); RELIEVED `evidence`, `to`; DISPLACED
    `relieves`, `to`; NOT_MOVED `why`, `evidence`, and `hold` (HELD, BUDGET) or `barred` and
    `refusal` (NO_ROOM); LINK `link`, `link_up`, `note`, `to`; DEGRADED the link (or `trigger`),
    `protection`, `on` (the path traffic is left on) and `refusal`; REROUTED `trigger`, `to`;
    SHARED `shares` (its own change) and `trigger` (what the re-solve followed); ADMITTED `shares`
    (the elastic reservations that shrank) and `trigger` (the reason the admission had without them).
    """

    kind: Kind
    why: Why | None = None
    evidence: Evidence | None = None
    to: PathTaken | None = None  # where the reservation moves
    headroom_bps: int | None = None  # MOVED: the least measured headroom along the new route
    displaced: tuple[Displacement, ...] = ()
    relieves: str = ""  # DISPLACED: the reservation it makes room for, reservations/{id}
    hold: Hold | None = None
    barred: tuple[str, ...] = ()  # NO_ROOM: links no new path may cross (congested, or left for congestion)
    refusal: str = ""  # why no path fits, as the path finder said it
    link: str = ""  # LINK, DEGRADED: the link that went down or came back
    link_up: bool = False
    note: str = ""  # what the switches said about the link, e.g. "port s8:2 down"
    trigger: str = ""  # REROUTED, DEGRADED without a link: what called for it, e.g. "reservations/... released"
    protection: Protection = Protection.NONE
    on: PathTaken | None = None  # DEGRADED with protection: the path traffic stays on or fails over to
    shares: tuple[ShareChange, ...] = ()  # SHARED: its own; ADMITTED: those that shrank for it

    @property
    def verdict(self) -> str | None:
        """The rate-driven rerouting verdict it is (one of `VERDICTS`), or None."""
        if self.kind is Kind.NOT_MOVED:
            return self.why.value if self.why is not None else None
        if self.kind in (Kind.MOVED, Kind.REARRANGED):
            return self.kind.value
        return None

    @property
    def cause(self) -> str | None:
        """Why it moved the reservation to another route (one of `CAUSES`), or None: no move."""
        return _CAUSE.get(self.kind)


def render(decision: Decision) -> str:
    """The reason people read, rendered from the decision."""
    d = decision
    evidence = d.evidence.describe() if d.evidence is not None else ""
    to = d.to.describe() if d.to is not None else ""
    kind = d.kind
    if kind is Kind.MOVED:
        booked = d.evidence.booked_bps if d.evidence is not None else 0
        return f"congested: {evidence}; moving to {to}, which has measured headroom for {format_bandwidth(booked)}"
    if kind is Kind.REARRANGED:
        steps = ", then ".join(f"{m.reservation} to {m.to.describe()}" for m in d.displaced)
        return f"congested: {evidence}; rearranging to make room: moving {steps}, then this one to {to}"
    if kind is Kind.RELIEVED:
        return f"congested: {evidence}; moving to {to} (rearrangement made room)"
    if kind is Kind.DISPLACED:
        return f"rearrangement for {d.relieves}: moving to {to} to make room"
    if kind is Kind.NOT_MOVED:
        return _not_moved(d, evidence)
    if kind is Kind.LINK or kind is Kind.REROUTED:
        return f"{_trigger(d)}: moving to {to}"
    if kind is Kind.SHARED:
        c = d.shares[0]
        return (f"share {format_bandwidth(c.before_bps)} -> {format_bandwidth(c.after_bps)} (floor "
                f"{format_bandwidth(c.floor_bps)}, ceiling {format_bandwidth(c.ceiling_bps)}, priority {c.priority}): "
                f"re-solved after {d.trigger}")
    if kind is Kind.ADMITTED:
        shrank = "elastic reservations shrank to make room: " + ", ".join(c.describe() for c in d.shares)
        return f"{d.trigger}; {shrank}" if d.trigger else shrank
    if kind is Kind.DEGRADED:
        on = d.on.describe() if d.on is not None else ""
        if d.protection is Protection.STAYS:
            return f"{_trigger(d)}: protection lost, traffic stays on {on}; {d.refusal}"
        if d.protection is Protection.FAILS_OVER:
            return f"{_trigger(d)}: protection lost, traffic fails over to {on}; {d.refusal}"
        return f"{_trigger(d)}: no alternate path; {d.refusal}"
    raise ValueError(f"no reason for a decision of kind {kind!r}")


def _not_moved(d: Decision, evidence: str) -> str:
    why = d.why
    if why is Why.HOSTS or why is Why.UNMEASURED:
        return evidence
    if why is Why.HELD or why is Why.BUDGET:
        return f"{evidence}; not moved: {hold_text(why, d.hold or Hold())}"
    if why is Why.ACCESS:
        return f"{evidence}; not moved: the congestion is on a DTN's access link, which no other path avoids"
    if why is Why.NO_ROOM:
        return (f"congested: {evidence}; not moved: no path avoiding {', '.join(sorted(d.barred))} has measured "
                f"headroom, and moving others would not make room: {d.refusal}")
    raise ValueError(f"no reason for a reservation not moved because {why!r}")


def hold_text(why: Why, hold: Hold) -> str:
    """Why the stability rules keep a reservation: "held down: ..." or "move budget spent: ..."."""
    if why is Why.HELD:
        return (f"held down: moved {hold.moved_ago_s:.0f} s ago, not again within {hold.hold_down_s:g} s of a "
                f"move")
    return f"move budget spent: {hold.moves} moves within {hold.window_s:g} s (at most {hold.budget})"


def _trigger(d: Decision) -> str:
    return Trigger(d.link, d.link_up, d.note, d.trigger).describe()


# -- as JSON (events.jsonl, the live map) ----------------------------------------------------------


def _measured_dict(m: Measured) -> dict[str, Any]:
    return {"direction": m.direction, "link": m.link, "capacity_bps": m.capacity_bps,
            "measured_bps": m.measured_bps, "unowned_bps": m.unowned_bps, "reverse": m.reverse}


def _path_dict(p: PathTaken) -> dict[str, Any]:
    return {"route": list(p.route), "links": list(p.links)}


def to_dict(decision: Decision) -> dict[str, Any]:
    """The decision as JSON-ready data: its kind, verdict and cause, and every field it fills."""
    d = decision
    data: dict[str, Any] = {"kind": d.kind.value, "verdict": d.verdict, "cause": d.cause}
    if d.why is not None:
        data["why"] = d.why.value
    if d.evidence is not None:
        e = d.evidence
        data["evidence"] = {
            "achieved_bps": e.achieved_bps, "booked_bps": e.booked_bps, "reports": e.reports,
            "congested": [_measured_dict(m) for m in e.congested],
            "busiest": _measured_dict(e.busiest) if e.busiest is not None else None,
            "unmeasured": list(e.unmeasured), "retransmits": e.retransmits, "rtt_ms": e.rtt_ms,
            "sender_cpu_percent": e.sender_cpu_percent}
    if d.to is not None:
        data["to"] = _path_dict(d.to)
    if d.headroom_bps is not None:
        data["headroom_bps"] = d.headroom_bps
    if d.displaced:
        data["displaced"] = [{"reservation": m.reservation, "to": _path_dict(m.to)} for m in d.displaced]
    if d.relieves:
        data["relieves"] = d.relieves
    if d.hold is not None:
        h = d.hold
        data["hold"] = {"moved_ago_s": h.moved_ago_s, "hold_down_s": h.hold_down_s, "moves": h.moves,
                        "window_s": h.window_s, "budget": h.budget}
    if d.barred:
        data["barred"] = list(d.barred)
    for name in ("refusal", "link", "note", "trigger"):
        if getattr(d, name):
            data[name] = getattr(d, name)
    if d.link:
        data["link_up"] = d.link_up
    if d.protection is not Protection.NONE:
        data["protection"] = d.protection.value
    if d.on is not None:
        data["on"] = _path_dict(d.on)
    if d.shares:
        data["shares"] = [{"reservation": c.reservation, "before_bps": c.before_bps, "after_bps": c.after_bps,
                           "floor_bps": c.floor_bps, "ceiling_bps": c.ceiling_bps, "priority": c.priority}
                          for c in d.shares]
    return data


def _measured_from(data: dict[str, Any]) -> Measured:
    return Measured(str(data["direction"]), str(data["link"]), int(data["capacity_bps"]), float(data["measured_bps"]),
                    float(data["unowned_bps"]), bool(data.get("reverse", False)))


def _path_from(data: dict[str, Any]) -> PathTaken:
    return PathTaken(tuple(data.get("route") or ()), tuple(data.get("links") or ()))


def from_dict(data: dict[str, Any]) -> Decision:
    """The decision `to_dict` gave (its derived verdict and cause are ignored)."""
    evidence = None
    if (e := data.get("evidence")) is not None:
        evidence = Evidence(float(e["achieved_bps"]), int(e["booked_bps"]), int(e["reports"]),
                            tuple(_measured_from(m) for m in e.get("congested") or ()),
                            _measured_from(e["busiest"]) if e.get("busiest") else None,
                            tuple(e.get("unmeasured") or ()), e.get("retransmits"), e.get("rtt_ms"),
                            e.get("sender_cpu_percent"))
    hold = Hold(**data["hold"]) if data.get("hold") else None
    return Decision(
        Kind(data["kind"]), Why(data["why"]) if data.get("why") else None, evidence,
        _path_from(data["to"]) if data.get("to") else None, data.get("headroom_bps"),
        tuple(Displacement(m["reservation"], _path_from(m["to"])) for m in data.get("displaced") or ()),
        data.get("relieves", ""), hold, tuple(data.get("barred") or ()), data.get("refusal", ""),
        data.get("link", ""), bool(data.get("link_up", False)), data.get("note", ""), data.get("trigger", ""),
        Protection(data.get("protection", "")), _path_from(data["on"]) if data.get("on") else None,
        tuple(ShareChange(str(c["reservation"]), int(c["before_bps"]), int(c["after_bps"]), int(c["floor_bps"]),
                          int(c["ceiling_bps"]), int(c["priority"])) for c in data.get("shares") or ()))

