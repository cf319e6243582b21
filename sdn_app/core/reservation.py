"""The reservation model: a reservation, its states, who may see it, and what its changes record.

States (see the proto for the diagram): SCHEDULED until the window starts, then
PROVISIONING and ACTIVE; MOVING and DEGRADED when the network changes under it; RELEASED,
EXPIRED and FAILED are final. Until an OpenFlow adapter provisions switches, PROVISIONING
is confirmed at once: the reservation is booked in the ledger only.

A `Principal` is an authenticated caller with a `Role`; each change of a reservation is an
`Event` (and a `HistoryEntry` while it is in memory); a `Change` is OpenFlow steps for the
adapter to apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from sdn_app.core.decisions import Decision, render
from sdn_app.core.errors import PermissionDenied
from sdn_app.core.paths import Path, PathRequest, Route
from sdn_app.core.plans import Step

_FINAL_STATES = frozenset({"RELEASED", "EXPIRED", "FAILED"})


class State(StrEnum):
    """Where a reservation is in its life."""

    SCHEDULED = "SCHEDULED"
    PROVISIONING = "PROVISIONING"
    ACTIVE = "ACTIVE"
    MOVING = "MOVING"
    DEGRADED = "DEGRADED"
    RELEASED = "RELEASED"
    EXPIRED = "EXPIRED"
    FAILED = "FAILED"

    @property
    def is_final(self) -> bool:
        """Whether the reservation holds no bandwidth any more and never will."""
        return self.value in _FINAL_STATES


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

    def __post_init__(self) -> None:
        # A change that gives a new reason and no decision leaves no stale decision behind: the
        # decision kept is only ever the one the reason tells.
        if self.decision is not None and render(self.decision) != self.reason:
            object.__setattr__(self, "decision", None)

    @property
    def name(self) -> str:
        """The resource name, `reservations/{id}`."""
        return f"reservations/{self.id}" if self.id else ""


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

    reservation_id: str
    steps: tuple[Step, ...]
    confirm: bool
    token: int = 0  # which change of the reservation a report is about: only the latest counts


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
