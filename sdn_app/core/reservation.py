"""The reservation model: a reservation, its states, who may see it, and what its changes record.

States (docs/api.md draws them): HELD while a two-phase request waits for its commit (booked,
no flows, until `hold_until`); SCHEDULED until the window starts, then PROVISIONING and
ACTIVE; RESERVED in its window without flows (its owner released the data plane, or asked to
provision it by hand); MOVING and DEGRADED when the network changes under it; RELEASED,
EXPIRED and FAILED are final. Until an OpenFlow adapter provisions switches, PROVISIONING is
confirmed at once: the reservation is booked in the ledger only.

A reservation is guaranteed (its bandwidth is what the ledger books and its meter allows) or
elastic (`ceiling` set: the ledger books its floor, `request.bandwidth`, and its meter allows the
`rate` the sharing solver gave it, between floor and ceiling). A deadline transfer's reservation
has a `schedule`: steps of constant bandwidth, its meter at the step of the moment (`rate`).

A `Principal` is an authenticated caller with a `Role`; each change of a reservation is an
`Event` (and a `HistoryEntry` while it is in memory); a `Change` is OpenFlow steps for the
adapter to apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from sdn_app.core.decisions import Decision, render
from sdn_app.core.errors import InvalidArgument, PermissionDenied
from sdn_app.core.paths import Path, PathRequest, Route
from sdn_app.core.plans import Step
from sdn_app.core.units import MAX_BANDWIDTH, format_bandwidth

MAX_PRIORITY = 1000  # the highest priority (elastic sharing weight) a principal or request may have
_FINAL_STATES = frozenset({"RELEASED", "EXPIRED", "FAILED"})
_BOOKED_ONLY = frozenset({"HELD", "SCHEDULED", "RESERVED"})


class State(StrEnum):
    """Where a reservation is in its life."""

    HELD = "HELD"
    SCHEDULED = "SCHEDULED"
    PROVISIONING = "PROVISIONING"
    ACTIVE = "ACTIVE"
    MOVING = "MOVING"
    DEGRADED = "DEGRADED"
    RESERVED = "RESERVED"
    RELEASED = "RELEASED"
    EXPIRED = "EXPIRED"
    FAILED = "FAILED"

    @property
    def is_final(self) -> bool:
        """Whether the reservation holds no bandwidth any more and never will."""
        return self.value in _FINAL_STATES

    @property
    def booked_only(self) -> bool:
        """Whether it is live with no flows wanted on the switches now (held, before its window,
        or with its data plane released)."""
        return self.value in _BOOKED_ONLY


class Role(StrEnum):
    """What a caller may do: admins everything, services their own reservations, agents report."""

    ADMIN = "admin"
    SERVICE = "service"
    AGENT = "agent"


@dataclass(frozen=True)
class Principal:
    """An authenticated caller."""

    name: str
    role: Role
    priority: int = 1  # the highest priority (sharing weight) its requests may carry

    def may_see(self, owner: str) -> bool:
        """Whether this caller may see and change reservations of `owner`."""
        return self.role is Role.ADMIN or (self.role is Role.SERVICE and owner == self.name)


@dataclass(frozen=True)
class Reservation:
    """A request admitted (or being checked) with its route and state."""

    id: str
    owner: str
    request: PathRequest
    state: State
    route: Route | None
    created: float
    updated: float
    reason: str = ""
    request_id: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    fingerprint: str = ""  # of the request as the caller sent it, to tell a retry from a new request
    decision: Decision | None = None  # the typed decision its reason was rendered from (None: no decision)
    hold_until: float = 0.0  # HELD: when the hold times out unless committed
    provisioned: bool = True  # whether its flows are wanted in its window (NSI's provision state)
    priority: int = 1  # its weight when elastic reservations share capacity
    ceiling: int = 0  # elastic: the most it may get (bits/s); 0: guaranteed
    rate: int = 0  # what its meter allows now, when not `request.bandwidth` (elastic share, schedule step)
    schedule: tuple[ScheduleStep, ...] = ()  # a deadline transfer's steps, in time order

    def __post_init__(self) -> None:
        # A change that gives a new reason and no decision leaves no stale decision behind: the
        # decision kept is only ever the one the reason tells.
        if self.decision is not None and render(self.decision) != self.reason:
            object.__setattr__(self, "decision", None)

    @property
    def name(self) -> str:
        """The resource name, `reservations/{id}`."""
        return f"reservations/{self.id}" if self.id else ""

    @property
    def elastic(self) -> bool:
        """Whether it shares capacity between a floor (`request.bandwidth`) and a `ceiling`."""
        return self.ceiling > 0

    @property
    def meter_bps(self) -> int:
        """The rate its meter allows now (and its sender is paced to)."""
        return self.rate or self.request.bandwidth



@dataclass(frozen=True)
class Terms:
    """How a request is booked beyond its bandwidth and window.

    `hold`: two phases, HELD until committed or the hold times out; `provision`: its flows go in
    at its window's start (False: when its owner provisions it, as NSI does); `priority`: its
    weight among elastic reservations (0: the caller's own); `ceiling`: elastic, sharing spare
    capacity up to this, its bandwidth the floor (0: guaranteed); `schedule`: a deadline
    transfer's steps (the book sets it)."""

    hold: bool = False
    provision: bool = True
    priority: int = 0
    ceiling: int = 0
    schedule: tuple[ScheduleStep, ...] = ()


@dataclass(frozen=True)
class ScheduleStep:
    """`bandwidth` bits/s from `start` up to (not including) `end`."""

    start: float
    end: float
    bandwidth: int


@dataclass(frozen=True)
class Event:
    """A change of a reservation: `previous` is None when it was created; `decision`: what the
    controller decided, with its evidence (`core.decisions`; the reason is rendered from it),
    None when the change is no decision (created, confirmed, released, ...)."""

    sequence: int
    time: float
    previous: State | None
    reservation: Reservation
    reason: str
    decision: Decision | None = None


@dataclass(frozen=True)
class Change:
    """OpenFlow steps for the adapter to apply, in order; `confirm`: report back with
    `provisioned(reservation_id, error, token)`."""

    reservation_id: str  # or, for a shared path's entries, "path-<label>"
    steps: tuple[Step, ...]
    confirm: bool
    token: int = 0  # which change of the reservation a report is about: only the latest counts
    # Shared paths this change relies on (labels): applied only after the changes that install
    # them, and failed with their reason when those failed.
    needs: frozenset[int] = frozenset()
    # Shared paths this change installs or removes (labels).
    makes: frozenset[int] = frozenset()


@dataclass(frozen=True)
class PathChoice:
    """Constraints for a reservation's new path; they replace the ones it was made with."""

    policy: str = "shortest"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_hops: int | None = None


@dataclass(frozen=True)
class HostLimit:
    """The most a DTN's host can carry (nominal bits/s) and what sets it, e.g. "PCIe Gen3 x8"."""

    capacity_bps: int
    why: str


@dataclass(frozen=True)
class Repair:
    """What loading did to a reservation whose booking no longer fit the topology.

    `cause`: capacity (a link direction's capacity below what is booked on it), link_removed
    (its path uses a link direction the topology lacks) or dtn_removed; `action`: rerouted,
    degraded (cut to what its path still has) or failed."""

    reservation: str
    cause: str
    action: str
    reason: str


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One change of a reservation: when, the state it was left in, why, and the decision it
    was (None: no decision)."""

    time: float
    state: State
    reason: str
    decision: Decision | None = None


@dataclass(frozen=True)
class Availability:
    """What one more reservation could get between two DTNs in a window."""

    max_bandwidth: int
    paths: list[Path]
    reason: str = ""


def require_role(principal: Principal, what: str) -> None:
    """Refuse a caller who is neither an admin nor a service: agents only report."""
    if principal.role not in (Role.ADMIN, Role.SERVICE):
        raise PermissionDenied(f"principal {principal.name!r} (role {principal.role}) may not {what}")


def route_key(route: Route) -> tuple:
    """What identifies a route on the switches (free bandwidth aside)."""
    return route.primary.direction_ids, route.backup.direction_ids if route.backup else None


def check_terms(principal: Principal, request: PathRequest, terms: Terms) -> int:
    """The priority a request gets (the caller's when it names none), or InvalidArgument /
    PermissionDenied naming the field that is wrong."""
    priority = terms.priority or principal.priority
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= MAX_PRIORITY:
        raise InvalidArgument(f"priority: a whole number from 1 to {MAX_PRIORITY}, got {priority!r}")
    if priority > principal.priority:
        raise PermissionDenied(f"priority: {priority} is above {principal.name}'s own priority {principal.priority}; "
                               "a request may carry a lower priority, never a higher one")
    ceiling = terms.ceiling
    if isinstance(ceiling, bool) or not isinstance(ceiling, int) or not 0 <= ceiling <= MAX_BANDWIDTH:
        raise InvalidArgument(f"ceiling_bps: whole bits/s up to {MAX_BANDWIDTH}, got {ceiling!r}")
    if ceiling and ceiling < request.bandwidth:
        raise InvalidArgument(f"ceiling_bps: {format_bandwidth(ceiling)} is below the floor (bandwidth_bps) "
                              f"{format_bandwidth(request.bandwidth)}; an elastic request's floor must not be above "
                              "its ceiling")
    return priority


def step_at(schedule: tuple[ScheduleStep, ...], when: float) -> ScheduleStep | None:
    """The step of `schedule` at `when` (None: no schedule, or outside it)."""
    return next((s for s in schedule if s.start <= when < s.end), None)


def step_rate(schedule: tuple[ScheduleStep, ...], now: float) -> int:
    """A schedule's rate at `now` (its first step's before it starts; 0 without a schedule)."""
    if not schedule:
        return 0
    return (step_at(schedule, now) or schedule[0]).bandwidth
