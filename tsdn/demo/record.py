"""What a demo run records: events, rate samples, booking samples and the measured load of
congested links. Pure data.

Times are seconds from the start of the timeline (setup happens at negative times). Rates
are nominal bit/s (the sender's rate divided by the emulation scale), as bookings are.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from tsdn.demo.calibration import Attempt

# Event kinds drawn as vertical lines in the plots, and how.
MARKED = {"fail_link": "failure", "restore_link": "restore", "congest_link": "congestion",
          "clear_link": "clear", "reroute": "reroute"}


@dataclass(frozen=True)
class Event:
    """Something that happened: a timeline action, a state change, a reroute, a refusal."""

    time: float
    kind: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"time": round(self.time, 3), "kind": self.kind, "details": self.details}

    def describe(self) -> str:
        """One line for people."""
        d = self.details
        if "message" in d:
            return str(d["message"])
        return ", ".join(f"{k}={v}" for k, v in d.items())


@dataclass(frozen=True)
class RateSample:
    """One rate report of a transfer's sender."""

    time: float
    flow: str
    nominal_bps: float
    booked_bps: int
    path: tuple[str, ...] = ()
    state: str = "RUNNING"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = list(self.path)
        data["time"] = round(self.time, 3)
        return data


@dataclass(frozen=True)
class BookingSample:
    """The controller's bookings at one instant: the fullest link direction and any overbooked."""

    time: float
    fullest: str
    fullest_ratio: float  # booked / capacity of the fullest direction
    overbooked: tuple[tuple[str, int, int], ...] = ()  # (direction, booked, capacity)

    def to_dict(self) -> dict[str, Any]:
        return {"time": round(self.time, 3), "fullest": self.fullest, "fullest_ratio": round(self.fullest_ratio, 4),
                "overbooked": [list(o) for o in self.overbooked]}


@dataclass(frozen=True)
class LinkSample:
    """A congested link direction as the runner measured it: what its sending port transmitted."""

    time: float
    link: str
    direction: str  # topology direction id, `a:port->b:port`
    measured_bps: float  # nominal: all traffic (tsdn's and the cross traffic) over the last interval
    capacity_bps: int
    cross_traffic_bps: int  # nominal rate the cross traffic was sent at

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["time"] = round(self.time, 3)
        data["measured_bps"] = round(self.measured_bps)
        return data


@dataclass
class Flow:
    """A transfer or reservation of the timeline as last seen."""

    name: str
    kind: str  # transfer or reservation
    src: str
    dst: str
    booked_bps: int
    state: str = "PENDING"
    path: tuple[str, ...] = ()
    nominal_bps: float | None = None
    reason: str = ""
    transfer: str = ""  # transfers/{id}
    reservation: str = ""  # reservations/{id}
    pace_bps: int | None = None  # a transfer whose sender the scenario holds below its booking


@dataclass
class NsiSegment:
    """A flow's WAN segment requested over NSI, as the run saw it: where, which connection, and its end."""

    flow: str
    reservation: str
    remote_dtn: str
    nsa: str
    connection_id: str
    interdomain: str
    vlan: int
    confirmed: float  # when the controller's reservation named it (the neighbour had confirmed it)
    end: str = ""  # what became of it: the neighbour's lifecycle state at the end (Terminated), or why unknown
    ended: float | None = None  # when the neighbour was seen to have terminated it

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["confirmed"] = round(self.confirmed, 3)
        data["ended"] = None if self.ended is None else round(self.ended, 3)
        return data


@dataclass
class Recording:
    """Everything one run saw; appended to from several threads."""

    scenario: str
    events: list[Event] = field(default_factory=list)
    rates: list[RateSample] = field(default_factory=list)
    bookings: list[BookingSample] = field(default_factory=list)
    link_loads: list[LinkSample] = field(default_factory=list)
    flows: dict[str, Flow] = field(default_factory=dict)
    links: dict[str, tuple[str, str]] = field(default_factory=dict)  # link label -> its two switches
    reservation_flows: dict[str, str] = field(default_factory=dict)  # reservation id -> flow name
    remote_dtns: dict[str, tuple[str, str]] = field(default_factory=dict)  # remote DTN -> (interdomain port, NSA)
    segments: dict[str, NsiSegment] = field(default_factory=dict)  # flow name -> its WAN segment
    scale: float = 0.0  # the emulation scale the timeline ran at
    scale_why: str = ""  # why that one: calibration's verdict, or fixed by the scenario
    calibration: list[Attempt] = field(default_factory=list)  # what the emulation carried at each scale tried
    ended: float = 0.0  # when the timeline stopped (seconds from its start)
    interrupted: bool = False
    error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def event(self, time: float, kind: str, **details: Any) -> Event:
        event = Event(time, kind, details)
        with self._lock:
            self.events.append(event)
        return event

    def rate(self, sample: RateSample) -> None:
        with self._lock:
            self.rates.append(sample)
            flow = self.flows.get(sample.flow)
            if flow is not None:
                flow.nominal_bps = sample.nominal_bps
                if sample.path:
                    flow.path = sample.path

    def booking(self, sample: BookingSample) -> None:
        with self._lock:
            self.bookings.append(sample)

    def link_load(self, sample: LinkSample) -> None:
        with self._lock:
            self.link_loads.append(sample)

    def sorted_events(self) -> list[Event]:
        with self._lock:
            return sorted(self.events, key=lambda e: e.time)
