"""Reservations: bandwidth a principal holds between two DTNs, their life, and who sees them.

`ReservationBook` is the one owner of reservation state. It decides admission (through
`PathFinder` and the `Ledger`), moves reservations through their states as the clock
passes their windows, keeps the idempotency index of `request_id`s, and records every
change as an `Event` for watchers. Each change is one SQLite transaction shared with the
ledger, so a reservation row and its booking are committed together or not at all; rows of
another table that go with a reservation (a transfer's) join that transaction through
`companion`.

States (see the proto for the diagram): SCHEDULED until the window starts, then
PROVISIONING and ACTIVE; MOVING and DEGRADED when the network changes under it; RELEASED,
EXPIRED and FAILED are final. Until an OpenFlow adapter provisions switches, PROVISIONING
is confirmed at once: the reservation is booked in the ledger only.

Links: the adapter reports links going down and coming back (`set_link_state`). No path is
computed across a down link. A reservation whose path crosses one moves (MOVING, make-before-
break, then ACTIVE) to the best route that fits, its booking moving with it in one ledger
transaction; one that fits nowhere becomes DEGRADED with the reason and keeps its booking and
flows, so it works again as soon as its link does. DEGRADED reservations are retried whenever
capacity returns: a link comes up, a reservation ends or shrinks. A protected reservation
losing a link of either path is moved to a new link-disjoint pair when one fits; otherwise it
stays on the fast-failover groups, DEGRADED ("protection lost") until a pair fits again.

Memory: live reservations are held in memory; an ended one only for `keep_ended` seconds after
it ended, then only in the store (each row about 1.5 kB with its indexes). `get` (and
`request_id` retries) read a reservation no longer in memory from the store; `list` pages
through the store itself, ordered by creation then id, so a page token stays valid whatever
leaves memory between pages. A restart loads the live ones and those ended within `keep_ended`.
Each reservation in memory also keeps its last `HISTORY_LENGTH` changes (`history`: about 120
bytes each plus its reason, 2.5 to 7.5 kB when full), which leave memory with it.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import heapq
import json
import math
import os
import random
import re
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from sdn_app.core import validation
from sdn_app.core.advisor import AfterMove, Attribution, Health, RateAdvisor, Underperforming, attribute
from sdn_app.core.clock import Clock
from sdn_app.core.congestion import Condition, LinkWatch, path_directions
from sdn_app.core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    NotFound,
    PermissionDenied,
)
from sdn_app.core.ledger import AlsoWrite, Ledger, Overbooking
from sdn_app.core.paths import Path, PathFinder, PathRequest, Route
from sdn_app.core.plans import FlowPlan, IdAllocator, Step, SwitchPlan, plan_for, plan_steps
from sdn_app.core.relief import Headroom, Mover, Rearrangement, plan_rearrangement
from sdn_app.core.topology import Topology
from sdn_app.core.units import format_bandwidth, format_time, format_window
from sdn_app.core.utilization import DirectionLoad

Query = Callable[[str, tuple], list[tuple]]  # rows of an SQL query on the state database

WIRE_OVERHEAD = 1.05  # bytes on the wire (Ethernet, IP, TCP headers) per byte a transfer reports moving
ACK_SHARE = 0.03  # a TCP transfer's acks against its data rate (about 2.2% at 1500-byte segments, and margin)
LEDGER_ONLY = "booked in the ledger only: no OpenFlow switches are controlled"
CONFIRMED = "every hop confirmed by barrier replies"
_LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$")
_RESERVATION_NAME = re.compile(r"^(reservations/)?(?P<id>[0-9a-f]{32})$")
MAX_LABELS = 32
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_TOKEN = 1024  # ours are about 180 characters
MAX_PAGE_SIZE = 1000
# Seconds an ended reservation stays in memory after it ended (`keep_ended`); then only the store
# holds it. Memory at most: reservations ending per second x this x about 1.6 kB (the process's RSS).
DEFAULT_KEEP_ENDED = 300.0
EVICTION_INTERVAL = 1.0  # seconds at least between sweeps of ended reservations out of memory (batched)
HISTORY_LENGTH = 20  # changes of a reservation held for `history` while it is in memory


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

    @property
    def name(self) -> str:
        """The resource name, `reservations/{id}`."""
        return f"reservations/{self.id}" if self.id else ""


@dataclass(frozen=True)
class Event:
    """A change of a reservation: `previous` is None when it was created."""

    sequence: int
    time: float
    previous: State | None
    reservation: Reservation
    reason: str


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
    """One change of a reservation: when, the state it was left in, and why."""

    time: float
    state: State
    reason: str


@dataclass(frozen=True)
class Availability:
    """What one more reservation could get between two DTNs in a window."""

    max_bandwidth: int
    paths: list[Path]
    reason: str = ""


class ReservationBook:
    """Every reservation of one controller; not thread-safe: one owner calls it."""

    def __init__(self, topology: Topology, ledger: Ledger, clock: Clock, provisioning: bool = False,
                 advisor: RateAdvisor | None = None, keep_ended: float = DEFAULT_KEEP_ENDED):
        """Load the reservations kept in the ledger's database and reconcile them with it.

        With `provisioning`, switches are controlled: a reservation whose window starts waits in
        PROVISIONING until the adapter confirms its flows (`take_changes`, then `provisioned`).
        Without, it is booked in the ledger only and ACTIVE at once.

        An ended reservation stays in memory `keep_ended` seconds (`math.inf`: for good), then
        only in the database, where `get` and `list` still find it; loading reads only the live
        ones and those ended within `keep_ended`.
        """
        if isinstance(keep_ended, bool) or not isinstance(keep_ended, int | float) or math.isnan(keep_ended) \
                or keep_ended < 0:
            raise InvalidArgument(f"keep_ended: seconds, zero or more, got {keep_ended!r}")
        self.keep_ended = float(keep_ended)
        self.topology = topology
        self.ledger = ledger
        self.clock = clock
        self.provisioning = provisioning
        self.finder = PathFinder(topology, ledger)
        self.advisor = advisor or RateAdvisor()
        self.watch = LinkWatch(topology, self.advisor.policy)  # congestion measured on every link direction
        # A rearrangement under way: the reservation whose move must be confirmed first ->
        # (the reservation it relieves, the moves left in order, the evidence that called for it).
        self._rearranging: dict[str, tuple[str, list[tuple[str, Route]], str]] = {}
        self.host_limits: Callable[[str], HostLimit | None] | None = None  # what a DTN's host can carry
        # Rows of another table that go with a reservation's row (a transfer's), written in the same
        # transaction each time the book writes that reservation: None when nothing goes with it.
        self.companion: Callable[[Reservation], AlsoWrite | None] | None = None
        self.refusals: collections.Counter[str] = collections.Counter()  # admissions refused, by kind
        self.repairs: list[Repair] = []  # what loading changed so the ledger fits the topology
        self._plans: dict[str, FlowPlan] = {}
        self._tokens: dict[str, int] = {}  # reservation -> token of its latest confirmed change
        self._awaiting_reconcile: dict[str, set[str]] = {}  # caught mid-change at start-up -> switches left
        self._plan_ids = IdAllocator()
        self._changes: list[Change] = []
        self._reservations: dict[str, Reservation] = {}
        self._live: dict[str, Reservation] = {}  # not final: what ticks and deadlines look at
        self._by_request: dict[tuple[str, str], str] = {}
        self._by_pair: dict[tuple[str, str], set[str]] = {}  # (src, dst) -> live reservations
        self._deadlines: list[tuple[float, str]] = []  # heap of (window start or end, id); stale entries skipped
        self._degraded: set[str] = set()
        self._leaving: list[tuple[float, str]] = []  # heap of (when it leaves memory, id) of ended reservations
        self._next_sweep = -math.inf  # sweeps out of memory are batched, EVICTION_INTERVAL apart
        self._events: list[Event] = []
        # The last HISTORY_LENGTH changes of each reservation in memory; it leaves with it.
        self._histories: dict[str, collections.deque[HistoryEntry]] = {}
        self._random = random.Random(os.urandom(16))  # ids need to be unique, not secret: owners are checked
        self._sequence = 0
        self.ledger.write(create_table)
        self._load()

    # -- reading -------------------------------------------------------------------------

    def get(self, principal: Principal, name: str) -> Reservation:
        """The reservation called `name` (`reservations/{id}` or the id), if the caller may see it."""
        return read_visible(principal, name, self._lookup)

    def _current(self, principal: Principal, name: str) -> Reservation:
        """`get`, after ticking if the clock passed this reservation's window start or end."""
        reservation = self.get(principal, name)
        deadline = reservation.request.start if reservation.state is State.SCHEDULED else reservation.request.end
        if not reservation.state.is_final and deadline <= self.clock.now():
            self.tick()
            reservation = self._lookup(reservation.id)
        return reservation

    def list(self, principal: Principal, state: State | None = None, dtn: str = "", owner: str = "",
             page_size: int = 0, page_token: str = "") -> tuple[list[Reservation], str]:
        """A page of the reservations the caller may see, live and ended alike, newest first (by
        creation, then id), and the next page's token."""
        return list_page(self.ledger.query, self.topology, principal, state, dtn, owner, page_size, page_token,
                         self._reservations)

    def availability(self, principal: Principal, request: PathRequest, max_paths: int = 3) -> Availability:
        """The largest bandwidth bookable for `request`'s DTNs and window, and candidate paths."""
        _require_role(principal, "query availability")
        if not 1 <= max_paths <= 20:
            raise InvalidArgument(f"max_paths: ask for 1 to 20 paths, got {max_paths}")
        probe = replace(request, bandwidth=1, protect=False)
        try:
            widest = self.finder.route(replace(probe, policy="widest")).primary
            paths = self.finder.alternatives(probe, max_paths)
        except (NoCapacity, FailedPrecondition) as refusal:
            return Availability(0, [], str(refusal))
        return Availability(widest.free_bps, paths)

    def booked_now(self, direction: str) -> int:
        """Bandwidth booked on a link direction at this instant."""
        now = self.clock.now()
        return self.ledger.used(direction, now, math.nextafter(now, math.inf))

    def take_events(self) -> list[Event]:
        """The events recorded since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def in_memory(self) -> dict[str, int]:
        """How many reservations memory holds: `live`, and `ended` within `keep_ended`."""
        return {"live": len(self._live), "ended": len(self._reservations) - len(self._live)}

    def history(self, reservation_id: str) -> list[HistoryEntry]:
        """The last `HISTORY_LENGTH` changes of a reservation, oldest first: every decision about
        it with its reason. Empty once it left memory, and for changes before a restart."""
        return list(self._histories.get(reservation_id, ()))

    def conditions(self) -> list[Condition]:
        """The congestion verdict of every measured link direction, as last measured."""
        return self.watch.conditions()

    def snapshot(self, principal: Principal, name: str = "") -> list[Reservation]:
        """Live reservations the caller may see (one, when `name` is given), oldest first."""
        _require_role(principal, "watch reservations")
        if name:
            return [self.get(principal, name)]
        return sorted((r for r in self._live.values() if principal.may_see(r.owner)), key=lambda r: (r.created, r.id))

    # -- changing ------------------------------------------------------------------------

    def create(self, principal: Principal, request: PathRequest, labels: Mapping[str, str] | None = None,
               request_id: str = "", validate_only: bool = False, fingerprint: str = "") -> Reservation:
        """Admit `request` for the caller, or raise why not (counted in `refusals`); idempotent
        per `request_id`."""
        try:
            return self._admit(principal, request, labels, request_id, validate_only, fingerprint)
        except NoCapacity:
            self.refusals["no_capacity"] += 1
            raise
        except FailedPrecondition:
            self.refusals["failed_precondition"] += 1
            raise

    def _admit(self, principal: Principal, request: PathRequest, labels: Mapping[str, str] | None,
               request_id: str, validate_only: bool, fingerprint: str) -> Reservation:
        """Admit `request` for the caller, or raise why not; idempotent per `request_id`.

        A retry with a `request_id` already used by this caller returns that reservation
        (whatever its state now) instead of booking again. `fingerprint` identifies the request
        as sent (an adapter's hash of it): a retry must match it; without one, the request's
        fields other than its times must match (a "now" start moves between retries).
        """
        _require_role(principal, "create reservations")
        labels = _check_labels(labels or {})
        validation.request_id(request_id)
        earlier = self._by_request_id(principal.name, request_id) if request_id else None
        if earlier is not None:
            same = (fingerprint == earlier.fingerprint if fingerprint and earlier.fingerprint
                    else _same_request(earlier.request, request))
            if same:
                return earlier
            raise AlreadyExists(
                f"request_id {request_id!r} was used for {earlier.name}, a different request; "
                "use a new request_id for a new request"
            )
        now = self.clock.now()
        if request.end <= now:
            raise InvalidArgument(f"end: the window ended already ({format_time(request.end)})")
        self._check_pair_free(request)
        self._check_hosts(request)
        route = self.finder.route(request)
        state, reason = (State.SCHEDULED, "") if request.start > now else self._started()
        if validate_only:
            self.ledger.check(route.direction_ids, request.bandwidth, request.start, request.end)
            return Reservation("", principal.name, request, state, route, now, now,
                               "validate_only: checked, nothing was booked", request_id, labels)
        reservation = Reservation(f"{self._random.getrandbits(128):032x}", principal.name, request, state, route,
                                  now, now, reason, request_id, labels, fingerprint)
        self.ledger.reserve(route.direction_ids, request.bandwidth, request.start, request.end,
                            booking_id=reservation.id, also=lambda db: self._insert_row(db, reservation))
        self._remember(reservation)
        if state is State.ACTIVE:  # ledger only: confirmed at once
            self._record(None, replace(reservation, state=State.PROVISIONING, reason="window started"))
            self._record(State.PROVISIONING, reservation)
        else:
            self._record(None, reservation)
            if state is State.PROVISIONING:
                self._install(reservation)
        return reservation

    def _check_pair_free(self, request: PathRequest) -> None:
        """With switches, one reservation per ordered DTN pair at a time: the switches tell
        reservations apart by the pair's addresses, so a second would take over the first's flows.
        (Bookings alone, without switches, may overlap.)"""
        if not self.provisioning:
            return
        for other_id in self._by_pair.get((request.src, request.dst), ()):
            other = self._live[other_id]
            if other.request.start < request.end and request.start < other.request.end:
                raise FailedPrecondition(
                    f"{request.src} -> {request.dst} already has {other.name} "
                    f"{format_window(other.request.start, other.request.end)}; one reservation per DTN pair at a "
                    "time: modify its bandwidth or end instead, or ask for a window after it"
                )

    def _check_hosts(self, request: PathRequest) -> None:
        """Refuse more than either DTN's host can carry (NIC or PCIe slot, as its agent found)."""
        if self.host_limits is None:
            return
        for dtn in (request.src, request.dst):
            limit = self.host_limits(dtn)
            if limit is not None and request.bandwidth > limit.capacity_bps:
                raise NoCapacity(
                    f"{format_bandwidth(request.bandwidth)} is more than dtn {dtn} can carry: "
                    f"{format_bandwidth(limit.capacity_bps)}, limited by {limit.why}")

    def _started(self) -> tuple[State, str]:
        """State and reason of a reservation whose window has just started."""
        if self.provisioning:
            return State.PROVISIONING, "window started: installing flows and meters"
        return State.ACTIVE, LEDGER_ONLY

    def provisioned(self, reservation_id: str, error: str | None, token: int | None = None) -> None:
        """The adapter's report on a reservation's change of flows.

        An install: ACTIVE, or FAILED with `error` and removed. A move: ACTIVE on the new path,
        or DEGRADED with `error` (its flows are put right when the switches reconnect). A
        report on a change that a later one superseded (`token`) is ignored.
        """
        old = self._reservations.get(reservation_id)
        if old is None or old.state not in (State.PROVISIONING, State.MOVING):
            return  # released or expired while installing: its removal is already queued
        if token is not None and token != self._tokens.get(reservation_id):
            return
        assert old.route is not None
        down = self._down_on(old.route)
        if error is None and old.state is State.PROVISIONING and down:
            self._commit(old, f"installed, but link {', '.join(down)} is down and no alternate path fits",
                         State.DEGRADED)
        elif error is None:
            self._commit(old, CONFIRMED if old.state is State.PROVISIONING
                         else f"moved to {old.route.primary.describe()}: {CONFIRMED}", State.ACTIVE)
            waiting = self._rearranging.pop(reservation_id, None)
            if waiting is not None:
                self._continue_rearrangement(*waiting)
        elif old.state is State.MOVING:
            self._commit(old, f"moving failed: {error}", State.DEGRADED)
            waiting = self._rearranging.pop(reservation_id, None)
            if waiting is not None and waiting[0] in self._live:
                self._commit(self._live[waiting[0]], f"rearrangement stopped: moving {old.name} failed: {error}")
        else:
            new = replace(old, state=State.FAILED, updated=self.clock.now(), reason=f"provisioning failed: {error}")
            self.ledger.release(old.id, also=lambda db: self._update_row(db, new))
            self._uninstall(old.id)
            self._remember(new)
            self._record(old.state, new)

    # -- rates ---------------------------------------------------------------------------

    def report_rate(self, principal: Principal, name: str, achieved_bps: float,
                    health: Health | None = None) -> Reservation:
        """One per-second report of the rate a transfer on reservation `name` achieves.

        After `consecutive` reports in a row below `threshold` x the booking, the shortfall is
        attributed from measurements (`advisor.attribute`). A congested link direction on the path
        (either way) moves the reservation, make-before-break, to the best path avoiding the
        congested links that has measured headroom for its booking, or rearranges others to make
        room, within the stability rules; a shortfall at the hosts never moves it. Each decision,
        moved or not, is an event whose reason gives the evidence; a verdict that stays the same
        is told once.
        """
        if principal.role not in (Role.AGENT, Role.ADMIN, Role.SERVICE):
            raise PermissionDenied(f"principal {principal.name!r} (role {principal.role}) may not report rates")
        reservation = self._find(name)
        if principal.role is Role.SERVICE and reservation.owner != principal.name:
            raise PermissionDenied(f"{reservation.name} belongs to another principal")
        if isinstance(achieved_bps, bool) or not isinstance(achieved_bps, int | float) \
                or not math.isfinite(achieved_bps) or achieved_bps < 0:
            raise InvalidArgument(f"achieved_bps: must be a finite rate of zero or more, got {achieved_bps!r}")
        if reservation.state is not State.ACTIVE:
            return reservation  # installing, moving or degraded: its rate says nothing about the path
        booked = reservation.request.bandwidth
        advice = self.advisor.observe(reservation.id, booked, achieved_bps, self.clock.now(), health)
        if isinstance(advice, Underperforming):
            return self._relieve(reservation, advice)
        if isinstance(advice, AfterMove):
            return self._commit(reservation, f"after the move: {format_bandwidth(int(advice.after_bps))} achieved "
                                           f"(was {format_bandwidth(int(advice.before_bps))}, "
                                           f"booked {format_bandwidth(booked)})")
        return reservation

    def observe_loads(self, loads: Mapping[str, DirectionLoad]) -> list[Condition]:
        """One round of measured link loads (the switches' port counters, every tenant's traffic):
        return the link directions that became congested or clear."""
        now = self.clock.now()
        owned: dict[str, float] = {}
        for r in self._live.values():
            if r.route is None or r.state not in (State.ACTIVE, State.MOVING, State.DEGRADED):
                continue
            rate = self.advisor.recent_rate(r.id, now)
            sends = float(r.request.bandwidth) if rate is None else rate * WIRE_OVERHEAD
            forward, reverse = path_directions(self.topology, r.route.primary.direction_ids)
            for d in forward:
                owned[d.id] = owned.get(d.id, 0.0) + sends
            for d in reverse:  # its acks: not booked (as in the ledger), but the controller's own
                owned[d.id] = owned.get(d.id, 0.0) + sends * ACK_SHARE
        return self.watch.observe(loads, owned, now)

    def _relieve(self, old: Reservation, advice: Underperforming) -> Reservation:
        """Act on an underperforming reservation: move it, rearrange, or say why not."""
        assert old.route is not None
        now = self.clock.now()
        forward, reverse = path_directions(self.topology, old.route.primary.direction_ids)
        why = attribute(forward, reverse, self.watch, advice)
        if why.cause != "network":
            return self._verdict(old, why.cause, why.evidence)
        held = self.advisor.may_move(old.id, now)
        if held:
            kind = "budget" if held.startswith("move budget") else "held"
            return self._verdict(old, kind, f"{why.evidence}; not moved: {held}")
        congested_links = frozenset(c.link for c in why.congested)
        if congested_links & {d.link for d in forward if d.is_access} | \
                congested_links & {d.link for d in reverse if d.is_access}:
            return self._verdict(old, "access", f"{why.evidence}; not moved: the congestion is on a DTN's "
                                                f"access link, which no other path avoids")
        barred = self.watch.congested_links() | self.advisor.barred_links(old.id, self.watch, now)
        avoiding = replace(old.request, exclude=(*old.request.exclude, *sorted(barred)))
        finder = PathFinder(self.topology, Headroom(self.topology, self.ledger, self.watch))
        finder.down_links = self.finder.down_links
        try:
            route = finder.route(avoiding, ignore=old.id)
        except (NoCapacity, FailedPrecondition, InvalidArgument) as refusal:
            return self._rearrange(old, advice, why, barred, str(refusal))
        moved = self._move(old, route, f"congested: {why.evidence}; moving to {route.primary.describe()}, "
                                       f"which has measured headroom for {format_bandwidth(advice.booked_bps)}")
        self.advisor.moved(old.id, now, advice.achieved_bps, congested_links)
        return moved

    def _verdict(self, old: Reservation, kind: str, reason: str) -> Reservation:
        """A reservation not moved: told (an event) once while the same kind of verdict lasts."""
        if not self.advisor.announce(old.id, kind):
            return old
        return self._commit(old, reason)

    def _mover(self, r: Reservation, now: float) -> Mover:
        assert r.route is not None
        barred = self.watch.congested_links() | self.advisor.barred_links(r.id, self.watch, now)
        return Mover(r.id, r.request, r.route, frozenset(barred))

    def _rearrange(self, old: Reservation, advice: Underperforming, why: Attribution, barred: frozenset[str],
                   refusal: str) -> Reservation:
        """No path has headroom: make room by moving others first (SWAN order), or say why not."""
        now = self.clock.now()
        plan: Rearrangement | None = None
        if old.route is not None and old.route.backup is None and old.id not in self._rearranging_ids():
            busy = self._rearranging_ids()
            movers = [self._mover(r, now) for r in self._live.values()
                      if r.id != old.id and r.state is State.ACTIVE and r.route is not None
                      and r.route.backup is None and r.id not in busy and not self.advisor.may_move(r.id, now)]
            crossing: dict[str, list[Mover]] = {}
            for m in movers:
                for d in m.route.primary.direction_ids:
                    crossing.setdefault(d, []).append(m)
            relieved = replace(self._mover(old, now), barred=barred)
            plan = plan_rearrangement(self.topology, self.ledger, self.watch, self.finder.down_links, relieved,
                                      movers, lambda d: crossing.get(d, []))
        if plan is None:
            return self._verdict(old, "no-room", f"congested: {why.evidence}; not moved: no path avoiding "
                                                 f"{', '.join(sorted(barred))} has measured headroom, and moving "
                                                 f"others would not make room: {refusal}")
        steps = ", then ".join(f"{self._reservations[rid].name} to {route.primary.describe()}"
                               for rid, route in plan.displaced)
        target = plan.relieved[1].primary.describe()
        now_old = self._commit(old, f"congested: {why.evidence}; rearranging to make room: moving {steps}, "
                                    f"then this one to {target}")
        self.advisor.moved(old.id, now, advice.achieved_bps, frozenset(c.link for c in why.congested))
        self._continue_rearrangement(old.id, list(plan.moves), why.evidence)
        return self._reservations.get(now_old.id, now_old)

    def _rearranging_ids(self) -> set[str]:
        ids = set(self._rearranging)
        for relieved, moves, _ in self._rearranging.values():
            ids.add(relieved)
            ids.update(rid for rid, _ in moves)
        return ids

    def _continue_rearrangement(self, relieved_id: str, moves: list[tuple[str, Route]], evidence: str) -> None:
        """Make the next moves of a rearrangement; with switches, each waits for the one before
        it to be confirmed, so no direction ever carries more than it can."""
        while moves:
            rid, route = moves.pop(0)
            current = self._live.get(rid)
            relieved = self._live.get(relieved_id)
            if current is None or relieved is None or current.route is None or current.state is not State.ACTIVE:
                if relieved is not None:
                    self._commit(relieved, f"rearrangement stopped: {self._reservations.get(rid, relieved).name} "
                                           f"is no longer active")
                return
            if rid == relieved_id:
                reason = f"congested: {evidence}; moving to {route.primary.describe()} (rearrangement made room)"
            else:
                reason = f"rearrangement for {relieved.name}: moving to {route.primary.describe()} to make room"
            try:
                self._move(current, route, reason)
            except NoCapacity as refusal:
                self._commit(relieved, f"rearrangement stopped: {refusal}")
                return
            if rid != relieved_id:
                self.advisor.moved(rid, self.clock.now())
            if self.provisioning and rid in self._plans and moves:
                self._rearranging[rid] = (relieved_id, moves, evidence)
                return

    def _commit(self, old: Reservation, reason: str, state: State | None = None) -> Reservation:
        """Give `old` a new reason (and `state`, when given): stored, remembered, one event."""
        new = replace(old, state=old.state if state is None else state, updated=self.clock.now(), reason=reason)
        self.ledger.write(lambda db: self._update_row(db, new))
        self._remember(new)
        self._record(old.state, new)
        return new

    # -- links ---------------------------------------------------------------------------

    def set_link_state(self, link: str, up: bool, reason: str = "") -> None:
        """A link went down or came back (as the switches report it): move what it affects.

        Down: every live reservation whose primary or backup crosses `link` is moved to the
        best route that fits, or becomes DEGRADED. Up: DEGRADED reservations are retried.
        """
        if link not in self.topology.links:
            raise InvalidArgument(f"link: {link!r} is not a link of topology {self.topology.name}")
        down = self.finder.down_links
        why = f"link {link} {'up' if up else 'down'}" + (f" ({reason})" if reason else "")
        if up:
            if link in down:
                down.discard(link)
                self._retry_degraded(why)
            return
        if link in down:
            return
        down.add(link)
        affected = [r for r in self._live.values() if r.route is not None and link in _route_links(r.route)]
        for reservation in sorted(affected, key=lambda r: (r.created, r.id)):
            self._reroute(reservation, why)

    def down_links(self) -> frozenset[str]:
        """Links reported down now."""
        return frozenset(self.finder.down_links)

    def _down_on(self, route: Route) -> list[str]:
        return sorted(set(route.primary.links) & self.finder.down_links)

    def _reroute(self, old: Reservation, why: str) -> None:
        """Move `old` off down links to the best route that fits, or mark it DEGRADED."""
        assert old.route is not None
        try:
            route = self._measured_route(old) or self.finder.route(old.request, ignore=old.id)
        except (NoCapacity, FailedPrecondition) as refusal:
            self._degrade(old, why, str(refusal))
            return
        self._move(old, route, f"{why}: moving to {route.primary.describe()}")

    def _measured_route(self, old: Reservation) -> Route | None:
        """The best route for `old` avoiding congested links with measured headroom, if one fits
        (a reservation fleeing a failure should not land on congestion when it need not)."""
        congested = self.watch.congested_links()
        if not congested and not self.watch.conditions():
            return None  # nothing measured: the ledger alone decides
        finder = PathFinder(self.topology, Headroom(self.topology, self.ledger, self.watch))
        finder.down_links = self.finder.down_links
        try:
            return finder.route(replace(old.request, exclude=(*old.request.exclude, *sorted(congested))), ignore=old.id)
        except (NoCapacity, FailedPrecondition, InvalidArgument):
            return None

    def _degrade(self, old: Reservation, why: str, refusal: str) -> None:
        assert old.route is not None
        if old.route.backup is not None and not set(old.route.primary.links) & self.finder.down_links:
            reason = f"{why}: protection lost, traffic stays on {old.route.primary.describe()}; {refusal}"
        elif old.route.backup is not None and not set(old.route.backup.links) & self.finder.down_links:
            reason = f"{why}: protection lost, traffic fails over to {old.route.backup.describe()}; {refusal}"
        else:
            reason = f"{why}: no alternate path; {refusal}"
        # A SCHEDULED one has nothing on the switches yet: it is retried at its start.
        state = old.state if old.state is State.SCHEDULED else State.DEGRADED
        if (state, reason) != (old.state, old.reason):
            self._commit(old, reason, state)

    def _move(self, old: Reservation, route: Route, reason: str, request: PathRequest | None = None) -> Reservation:
        """Book `route` (and `request`, when it changes) for `old` and move its flows there,
        make-before-break; ACTIVE again when every hop confirms."""
        request = request or old.request
        now = self.clock.now()
        installed = old.id in self._plans
        self.advisor.path_changed(old.id)  # its rates so far were on the old path
        state = State.MOVING if installed else old.state
        new = replace(old, request=request, route=route, state=state, updated=now, reason=reason)
        self.ledger.modify(old.id, bandwidth=request.bandwidth, end=request.end, directions=route.direction_ids,
                           also=lambda db: self._update_row(db, new))
        self._remember(new)
        self._record(old.state, new)
        if installed:
            plan = plan_for(self.topology, new.id, request.src, request.dst, route, request.bandwidth, self._plan_ids)
            self._plan_ids.retain(plan)
            self._queue(new.id, plan_steps(self._plans[new.id], plan), confirm=True)
            self._plans[new.id] = plan
        return new

    def _retry_degraded(self, why: str) -> None:
        """Capacity came back: move each DEGRADED reservation to a route that fits, oldest first."""
        if not self._degraded and not self.finder.down_links:
            return
        degraded = [r for r in self._live.values() if r.state is State.DEGRADED
                    or (r.state is State.SCHEDULED and r.route is not None and self._down_on(r.route))]
        for old in sorted(degraded, key=lambda r: (r.created, r.id)):
            assert old.route is not None
            try:
                route = self.finder.route(old.request, ignore=old.id)
            except (NoCapacity, FailedPrecondition):
                continue
            if _route_key(route) == _route_key(old.route):
                if old.state is State.DEGRADED:  # its flows are in place: working again as it is
                    self._commit(old, f"{why}: running on {old.route.primary.describe()} again", State.ACTIVE)
                continue
            self._move(old, route, f"{why}: moving to {route.primary.describe()}")

    def switch_plan(self, switch: str) -> SwitchPlan:
        """Every flow, meter and group the reservations on the switches want on `switch` now
        (what reconciliation makes the switch hold)."""
        parts = [plan.for_switch(switch) for plan in self._plans.values()]
        return SwitchPlan(tuple(f for p in parts for f in p.flows), tuple(m for p in parts for m in p.meters),
                          tuple(g for p in parts for g in p.groups))

    def take_changes(self) -> list[Change]:
        """OpenFlow changes decided since the last call, in the order they must be applied."""
        changes, self._changes = self._changes, []
        return changes

    def _install(self, reservation: Reservation) -> None:
        assert reservation.route is not None
        q = reservation.request
        plan = plan_for(self.topology, reservation.id, q.src, q.dst, reservation.route, q.bandwidth, self._plan_ids)
        self._plans[reservation.id] = plan
        self._queue(reservation.id, plan_steps(None, plan), confirm=True)

    def _uninstall(self, reservation_id: str) -> None:
        plan = self._plans.pop(reservation_id, None)
        if plan is not None:
            self._queue(reservation_id, plan_steps(plan, None), confirm=False)
            self._plan_ids.release(reservation_id)
        self._tokens.pop(reservation_id, None)
        self._awaiting_reconcile.pop(reservation_id, None)
        self._rearranging.pop(reservation_id, None)
        self.advisor.forget(reservation_id)

    def _queue(self, reservation_id: str, steps: list[Step], confirm: bool) -> None:
        """Hand steps to the adapter; a confirmed change supersedes earlier reports."""
        token = 0
        if confirm:
            token = self._tokens[reservation_id] = self._tokens.get(reservation_id, 0) + 1
            self._awaiting_reconcile.pop(reservation_id, None)
        self._changes.append(Change(reservation_id, tuple(steps), confirm, token))

    def modify(self, principal: Principal, name: str, bandwidth: int | None = None, end: float | None = None,
               validate_only: bool = False, path: PathChoice | None = None) -> Reservation:
        """Change bandwidth, end (`math.inf`: until released) and/or the path, all or nothing.

        Without `path` the reservation stays on its path. With it, a new route is computed
        under those constraints (they replace the old ones) and the reservation moves there
        make-before-break (MOVING, then ACTIVE when every hop confirms).
        """
        old = self._current(principal, name)
        if old.state.is_final:
            raise FailedPrecondition(f"{old.name} is {old.state}; only live reservations can be modified")
        if bandwidth is None and end is None and path is None:
            raise InvalidArgument("give a new bandwidth_bps, end time or path")
        if old.state in (State.PROVISIONING, State.MOVING) and path is not None:
            raise FailedPrecondition(f"{old.name} is {old.state}; move it once its flows are confirmed")
        request = replace(old.request, bandwidth=old.request.bandwidth if bandwidth is None else bandwidth,
                          end=old.request.end if end is None else end)
        if path is not None:
            request = replace(request, policy=path.policy, include=path.include, exclude=path.exclude,
                              max_hops=path.max_hops)
        if end is not None and end <= self.clock.now():
            raise InvalidArgument(f"end_time: {format_time(end)} is already past")
        if request.bandwidth > old.request.bandwidth:
            self._check_hosts(request)
        assert old.route is not None
        route = self.finder.route(request, ignore=old.id) if path is not None else old.route
        if validate_only:
            self.ledger.check(route.direction_ids, request.bandwidth, request.start, request.end, ignore=old.id)
            return replace(old, request=request, route=route, reason="validate_only: checked, nothing was changed")
        changes = []
        if request.bandwidth != old.request.bandwidth:
            changes.append(f"bandwidth {format_bandwidth(old.request.bandwidth)} -> "
                           f"{format_bandwidth(request.bandwidth)}")
        if request.end != old.request.end:
            changes.append(f"end {format_time(old.request.end)} -> {format_time(request.end)}")
        if _route_key(route) != _route_key(old.route):
            changes.append(f"path -> {route.primary.describe()}")
        reason = "modified: " + ", ".join(changes) if changes else "modified: nothing changed"
        if _route_key(route) != _route_key(old.route):
            new = self._move(old, route, reason, request)
        else:
            new = replace(old, request=request, updated=self.clock.now(), reason=reason)
            self.ledger.modify(old.id, bandwidth=request.bandwidth, end=request.end,
                               also=lambda db: self._update_row(db, new))
            self._remember(new)
            self._record(old.state, new)
            plan = self._plans.get(old.id)
            if plan is not None and request.bandwidth != old.request.bandwidth:
                replan = plan_for(self.topology, new.id, request.src, request.dst, route, request.bandwidth,
                                  self._plan_ids)
                self._plans[new.id] = replan
                self._queue(new.id, plan_steps(plan, replan), confirm=False)
        if request.bandwidth < old.request.bandwidth or request.end < old.request.end:
            self._retry_degraded(f"{old.name} shrank")
        return new

    def release(self, principal: Principal, name: str, why: str = "") -> Reservation:
        """Release a reservation and its bandwidth; a final one is returned unchanged."""
        old = self._current(principal, name)
        if old.state.is_final:
            return old
        reason = f"released by {principal.name}" + (f": {why}" if why else "")
        new = replace(old, state=State.RELEASED, updated=self.clock.now(), reason=reason)
        self.ledger.release(old.id, also=lambda db: self._update_row(db, new))
        self._remember(new)
        self._record(old.state, new)
        self._uninstall(old.id)
        self._retry_degraded(f"{old.name} released")
        return new

    def tick(self) -> None:
        """Start the windows that began and expire those that ended, by the clock; reservations
        ended more than `keep_ended` ago leave memory (the store keeps them)."""
        now = self.clock.now()
        self._sweep(now)
        starting = [r for r in self._live.values() if r.state is State.SCHEDULED and r.request.start <= now]
        for old in sorted(starting, key=lambda r: (r.request.start, r.id)):
            if old.route is not None and self._down_on(old.route) and old.request.end > now:
                self._reroute(old, "its path crosses a link that is down")
                old = self._reservations[old.id]
            if old.state is State.SCHEDULED and old.request.start <= now < old.request.end:
                state, reason = self._started()
                new = replace(old, state=state, updated=now, reason=reason)
                self.ledger.write(lambda db, new=new: self._update_row(db, new))
                self._remember(new)
                if state is State.ACTIVE:
                    self._record(State.SCHEDULED, replace(new, state=State.PROVISIONING, reason="window started"))
                    self._record(State.PROVISIONING, new)
                else:
                    self._record(State.SCHEDULED, new)
                    self._install(new)
        ending = [r for r in self._live.values() if r.request.end <= now]
        if not ending:
            return
        ended = [replace(r, state=State.EXPIRED, updated=now, reason=f"window ended at {format_time(r.request.end)}")
                 for r in sorted(ending, key=lambda r: (r.request.end, r.id))]

        def write_all(db: sqlite3.Connection) -> None:
            for new in ended:
                self._update_row(db, new)
        if self.ledger.expire(now, also=write_all) == [] and ended:
            self.ledger.write(write_all)  # reservations whose bookings were already gone
        for old, new in zip(sorted(ending, key=lambda r: (r.request.end, r.id)), ended, strict=True):
            self._remember(new)
            self._record(old.state, new)
            self._uninstall(old.id)
        self._retry_degraded("reservations ended")

    def next_deadline(self) -> float:
        """When `tick` next has something to do (math.inf when nothing is pending)."""
        heap = self._deadlines
        while heap:
            when, reservation_id = heap[0]
            live = self._live.get(reservation_id)
            if live is not None and _deadline(live) == when:
                return when
            heapq.heappop(heap)  # stale: the reservation ended or its deadline moved
        return math.inf

    def sweep(self) -> None:
        """Forget the ended reservations held in memory for `keep_ended` (`tick` does it too)."""
        self._sweep(self.clock.now())

    def next_sweep(self) -> float:
        """When `sweep` next has something to do, at least EVICTION_INTERVAL after the last one
        (math.inf: nothing held to forget)."""
        return max(self._leaving[0][0], self._next_sweep) if self._leaving else math.inf

    # -- internals -----------------------------------------------------------------------

    def _find(self, name: str) -> Reservation:
        return self._lookup(reservation_id_of(name))

    def _lookup(self, reservation_id: str) -> Reservation:
        """The reservation `reservation_id`: from memory, else (ended and swept out) from the store."""
        found = self._reservations.get(reservation_id)
        if found is not None:
            return found
        return read_row(self.ledger.query, self.topology, reservation_id)

    def _by_request_id(self, owner: str, request_id: str) -> Reservation | None:
        """The reservation `owner` created with `request_id`, in memory or (swept out) in the store."""
        known = self._by_request.get((owner, request_id))
        if known is not None:
            return self._lookup(known)
        rows = self.ledger.query("SELECT body FROM reservations WHERE owner = ? AND request_id = ? LIMIT 1",
                                 (owner, request_id))
        return _from_json(json.loads(rows[0][0]), self.topology) if rows else None

    def _sweep(self, now: float) -> None:
        """Forget the ended reservations whose time in memory is up; the store keeps them."""
        leaving = self._leaving
        while leaving and leaving[0][0] <= now:
            _, reservation_id = heapq.heappop(leaving)
            gone = self._reservations.pop(reservation_id, None)
            self._histories.pop(reservation_id, None)
            if gone is not None and gone.request_id \
                    and self._by_request.get((gone.owner, gone.request_id)) == reservation_id:
                del self._by_request[(gone.owner, gone.request_id)]
        self._next_sweep = now + EVICTION_INTERVAL

    def _remember(self, reservation: Reservation) -> None:
        earlier = self._reservations.get(reservation.id)
        self._reservations[reservation.id] = reservation
        pair = (reservation.request.src, reservation.request.dst)
        if reservation.state.is_final:
            if (earlier is None or not earlier.state.is_final) and math.isfinite(self.keep_ended):
                heapq.heappush(self._leaving, (reservation.updated + self.keep_ended, reservation.id))
            self._live.pop(reservation.id, None)
            same = self._by_pair.get(pair)
            if same is not None:
                same.discard(reservation.id)
                if not same:
                    del self._by_pair[pair]
        else:
            previous = self._live.get(reservation.id)
            self._live[reservation.id] = reservation
            self._by_pair.setdefault(pair, set()).add(reservation.id)
            if len(self._deadlines) > 2 * len(self._live) + 64:  # mostly stale entries: rebuild, keep it bounded
                self._deadlines = [(_deadline(r), r.id) for r in self._live.values()]
                heapq.heapify(self._deadlines)
            elif previous is None or _deadline(previous) != _deadline(reservation):
                heapq.heappush(self._deadlines, (_deadline(reservation), reservation.id))
        if reservation.state is State.DEGRADED:
            self._degraded.add(reservation.id)
        else:
            self._degraded.discard(reservation.id)
        if reservation.request_id:
            self._by_request[(reservation.owner, reservation.request_id)] = reservation.id

    def _insert_row(self, db: sqlite3.Connection, reservation: Reservation) -> None:
        """Inside a ledger transaction: the new reservation's row, and its companion's rows."""
        _insert(db, reservation)
        self._companion_rows(db, reservation)

    def _update_row(self, db: sqlite3.Connection, reservation: Reservation) -> None:
        """Inside a ledger transaction: the reservation's row as it is now, and its companion's rows."""
        _update(db, reservation)
        self._companion_rows(db, reservation)

    def _companion_rows(self, db: sqlite3.Connection, reservation: Reservation) -> None:
        if self.companion is not None and (write := self.companion(reservation)) is not None:
            write(db)

    def _record(self, previous: State | None, reservation: Reservation) -> None:
        self._sequence += 1
        now = self.clock.now()
        self._events.append(Event(self._sequence, now, previous, reservation, reservation.reason))
        history = self._histories.get(reservation.id)
        if history is None:
            history = self._histories[reservation.id] = collections.deque(maxlen=HISTORY_LENGTH)
        history.append(HistoryEntry(now, reservation.state, reservation.reason))

    def _load(self) -> None:
        now = self.clock.now()
        live = [s.value for s in State if not s.is_final]
        rows = self.ledger.query(f"SELECT body FROM reservations WHERE state IN ({', '.join('?' * len(live))})",
                                 tuple(live))
        if math.isinf(self.keep_ended):
            rows += self.ledger.query("SELECT body FROM reservations WHERE ended IS NOT NULL")
        else:  # and ended within keep_ended; older ones stay in the store only
            rows += self.ledger.query("SELECT body FROM reservations WHERE ended > ?", (now - self.keep_ended,))
        for (body,) in rows:
            self._remember(_from_json(json.loads(body), self.topology))
        booked = {b.id for b in self.ledger.bookings()}
        for reservation in list(self._reservations.values()):
            if not reservation.state.is_final and reservation.id not in booked and reservation.request.end > now:
                lost = replace(reservation, state=State.FAILED, updated=now,
                               reason="its booking was missing from the ledger at start-up")
                self.ledger.write(lambda db, lost=lost: self._update_row(db, lost))
                self._remember(lost)
                self._record(reservation.state, lost)
        for booking in booked:
            owner = self._reservations.get(booking)
            if owner is None or owner.state.is_final:
                self.ledger.release(booking)  # held for no live reservation: free it
        self._fit_topology()
        if self.provisioning:
            self._resume_provisioning()

    # -- the loaded ledger against the topology ------------------------------------------

    def _fit_topology(self) -> None:
        """Make what was loaded fit the topology it was loaded over (it may have changed since).

        From now on no booking stays on a DTN, link direction or capacity the topology no longer
        has. A reservation whose DTN is gone is FAILED. One whose path uses a link direction
        that is gone, or that is booked on a direction now below what is booked there (the
        newest first, until none is), moves to the best route that fits; when none does, one
        on a gone link is FAILED, and one over a capacity is cut to what its path still has
        (DEGRADED, or kept SCHEDULED) or FAILED when that is nothing. Each is an event with its
        reason and a `Repair` in `repairs`.
        """
        now = self.clock.now()
        dtns = self.topology.dtns
        stranded = self.ledger.stranded()
        live = sorted(self._live.values(), key=lambda r: (r.created, r.id))
        dtn_gone = [r for r in live if r.request.end > now and (r.request.src not in dtns or r.request.dst not in dtns)]
        failing = {r.id for r in dtn_gone}
        path_gone = [r for r in live if r.id not in failing and (r.route is None or r.id in stranded)]
        if not (dtn_gone or path_gone or self.ledger.overbooked(now)):
            return
        for old in dtn_gone:
            missing = ", ".join(d for d in (old.request.src, old.request.dst) if d not in dtns)
            self._repair_fail(old, "dtn_removed", f"at start-up: topology {self.topology.name} has no dtn {missing}")
        for old in path_gone:
            if old.request.end <= now:  # ended while the controller was down: as a tick would have it
                self._repair_end(old, State.EXPIRED, f"window ended at {format_time(old.request.end)}")
                continue
            gone = ", ".join(stranded.get(old.id, ())) or "of its stored path"
            why = f"at start-up: topology {self.topology.name} has no link direction {gone}"
            try:
                route = self.finder.route(old.request, ignore=old.id)
            except (NoCapacity, FailedPrecondition, InvalidArgument, NotFound) as refusal:
                self._repair_fail(old, "link_removed", f"{why}, and no other path fits: {refusal}")
                continue
            self._repair_move(old, route, "link_removed", f"{why}: moving to {route.primary.describe()}")
        self.ledger.expire(now)  # bookings of ended windows hold nothing any more; the next tick expires them
        # A move books only what fits and a cut frees, so no repair overbooks another direction.
        for direction in [over.direction for over in self.ledger.overbooked(now)]:
            while over := self.ledger.overbooked(now, [direction]):
                victims = [self._live[b] for b in over[0].bookings if b in self._live]
                if not victims:  # held for no live reservation (the loading above frees those)
                    for booking in over[0].bookings:
                        self.ledger.release(booking)
                    continue
                self._relieve_capacity(max(victims, key=lambda r: (r.created, r.id)), over[0])

    def _relieve_capacity(self, old: Reservation, over: Overbooking) -> None:
        """Take `old` off a direction booked beyond its capacity: to another route, or cut down."""
        assert old.route is not None
        direction = self.topology.directions[over.direction]
        link = (f"the access link of dtn {direction.link}" if direction.is_access else f"link {direction.link}")
        why = (f"at start-up: {link} ({direction.id}) has {format_bandwidth(over.capacity)}, "
               f"{format_bandwidth(over.booked)} booked on it {format_window(over.start, over.end)}")
        refused = ""
        try:
            route = self.finder.route(old.request, ignore=old.id)
            if _route_key(route) != _route_key(old.route):
                self._repair_move(old, route, "capacity", f"{why}: moving to {route.primary.describe()}")
                return
        except (NoCapacity, FailedPrecondition, InvalidArgument, NotFound) as refusal:
            refused = f" ({refusal})"
        booking = self.ledger.get(old.id)
        fits = min(self.ledger.free(d, booking.start, booking.end, ignore=old.id) for d in booking.directions)
        wanted = format_bandwidth(old.request.bandwidth)
        if fits <= 0:
            self._repair_fail(old, "capacity", f"{why}; no other path has {wanted} free{refused}, and its own has "
                                               "nothing left for it")
            return
        reason = (f"{why}: cut from {wanted} to {format_bandwidth(fits)}, what its path has left for it; no other "
                  f"path has {wanted} free{refused}")
        new = replace(old, request=replace(old.request, bandwidth=fits), updated=self.clock.now(), reason=reason,
                      state=State.SCHEDULED if old.state is State.SCHEDULED else State.DEGRADED)
        self.ledger.modify(old.id, bandwidth=fits, also=lambda db: self._update_row(db, new))
        self._repaired(old, new, "capacity", "degraded")

    def _repair_move(self, old: Reservation, route: Route, cause: str, reason: str) -> None:
        """Book `route` for `old` instead of its path (nothing is on the switches yet: the plans
        are made after loading, and reconciliation puts them there)."""
        state = old.state if old.state is State.SCHEDULED else State.MOVING if self.provisioning else State.ACTIVE
        new = replace(old, route=route, state=state, updated=self.clock.now(), reason=reason)
        self.ledger.modify(old.id, directions=route.direction_ids, also=lambda db: self._update_row(db, new))
        self._repaired(old, new, cause, "rerouted")

    def _repair_fail(self, old: Reservation, cause: str, reason: str) -> None:
        self._repair_end(old, State.FAILED, reason)
        self.repairs.append(Repair(old.name, cause, "failed", reason))

    def _repair_end(self, old: Reservation, state: State, reason: str) -> None:
        """End `old` in `state` at start-up, releasing its booking."""
        new = replace(old, state=state, updated=self.clock.now(), reason=reason)
        if old.id in self.ledger:
            self.ledger.release(old.id, also=lambda db: self._update_row(db, new))
        else:
            self.ledger.write(lambda db: self._update_row(db, new))
        self._remember(new)
        self._record(old.state, new)

    def _repaired(self, old: Reservation, new: Reservation, cause: str, action: str) -> None:
        self._remember(new)
        self._record(old.state, new)
        self.repairs.append(Repair(new.name, cause, action, new.reason))

    @property
    def ledger_repairs(self) -> collections.Counter[tuple[str, str]]:
        """How many reservations loading repaired, by (cause, action) (see `Repair`)."""
        return collections.Counter((r.cause, r.action) for r in self.repairs)

    def _resume_provisioning(self) -> None:
        """After a restart: plans of reservations on the switches are known again (their ids
        taken). Those caught installing or moving are confirmed once reconciliation has made
        each switch of their plan hold it (`switch_reconciled`)."""
        for reservation in sorted(self._live.values(), key=lambda r: (r.created, r.id)):
            if reservation.state is State.SCHEDULED:
                continue
            assert reservation.route is not None
            q = reservation.request
            plan = plan_for(self.topology, reservation.id, q.src, q.dst, reservation.route, q.bandwidth,
                            self._plan_ids)
            self._plans[reservation.id] = plan
            if reservation.state in (State.PROVISIONING, State.MOVING):
                self._awaiting_reconcile[reservation.id] = set(plan.switches)

    def switch_reconciled(self, switch: str) -> None:
        """The adapter made `switch` hold exactly `switch_plan(switch)`: reservations caught
        mid-change by a restart are confirmed once every switch of theirs was."""
        for reservation_id, waiting in list(self._awaiting_reconcile.items()):
            waiting.discard(switch)
            if not waiting:
                del self._awaiting_reconcile[reservation_id]
                self.provisioned(reservation_id, None)


class Sweeper:
    """The book's sweeps of ended reservations out of memory, as a ticker of the core's worker
    (`sdn_app.worker.Ticker`), so they come due however busy the core is."""

    def __init__(self, book: ReservationBook):
        self.book = book

    def tick(self) -> None:
        """Sweep what is due."""
        self.book.sweep()

    def next_deadline(self) -> float:
        """When the next sweep is due."""
        return self.book.next_sweep()

    def take_events(self) -> list[Event]:
        """None: a sweep changes no reservation."""
        return []


def _deadline(reservation: Reservation) -> float:
    """When the clock next changes a live reservation: its start while SCHEDULED, else its end."""
    return reservation.request.start if reservation.state is State.SCHEDULED else reservation.request.end


def _route_links(route: Route) -> set[str]:
    """Links of the primary and the backup."""
    return set(route.primary.links) | set(route.backup.links if route.backup else ())


def _route_key(route: Route) -> tuple:
    """What identifies a route on the switches (free bandwidth aside)."""
    return route.primary.direction_ids, route.backup.direction_ids if route.backup else None


def _require_role(principal: Principal, what: str) -> None:
    if principal.role not in (Role.ADMIN, Role.SERVICE):
        raise PermissionDenied(f"principal {principal.name!r} (role {principal.role}) may not {what}")


def _check_labels(labels: Mapping[str, str]) -> Mapping[str, str]:
    if len(labels) > MAX_LABELS:
        raise InvalidArgument(f"labels: at most {MAX_LABELS}, got {len(labels)}")
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
            raise InvalidArgument(f"labels: key {validation.shown(key)} must be 1-63 lowercase letters, digits, "
                                  "'.', '_', '-', '/'")
        if not isinstance(value, str) or len(value) > 256 or not value.isprintable():
            raise InvalidArgument(f"labels[{key}]: value must be printable text of at most 256 characters")
    return MappingProxyType(dict(sorted(labels.items())))


def _same_request(a: PathRequest, b: PathRequest) -> bool:
    """Whether a retry asks for the same thing (times may differ: 'now' moves between retries)."""
    keys = ("src", "dst", "bandwidth", "policy", "include", "exclude", "max_hops", "protect")
    return all(getattr(a, k) == getattr(b, k) for k in keys)


def _encode_page_token(query: str, last: Reservation) -> str:
    data = json.dumps({"q": hashlib.sha256(query.encode()).hexdigest()[:16], "c": last.created, "i": last.id})
    return base64.urlsafe_b64encode(data.encode()).decode()


def _decode_page_token(token: str, query: str) -> tuple[float, str]:
    try:
        if len(token) > MAX_PAGE_TOKEN:
            raise ValueError("too long")
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        if data["q"] != hashlib.sha256(query.encode()).hexdigest()[:16]:
            raise InvalidArgument("page_token: it belongs to a listing with other filters")
        created = float(data["c"])
        if not math.isfinite(created):
            raise ValueError("not a time")
        return (-created, str(data["i"]))
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError, OverflowError, RecursionError):
        raise InvalidArgument("page_token: not a token this server gave out") from None


def list_page(query: Query, topology: Topology, principal: Principal, state: State | None = None, dtn: str = "",
          owner: str = "", page_size: int = 0, page_token: str = "",
          remembered: Mapping[str, Reservation] | None = None) -> tuple[list[Reservation], str]:
    """A page of the reservations `principal` may see in the `reservations` table `query` reads, live
    and ended alike, newest first (by creation, then id), and the next page's token; those in
    `remembered` are taken from there."""
    _require_role(principal, "list reservations")
    if owner and owner != principal.name and principal.role is not Role.ADMIN:
        raise PermissionDenied(f"owner: only admins may list reservations of {owner!r}")
    if dtn:
        topology.dtn(dtn)
    if page_size < 0:
        raise InvalidArgument(f"page_size: must not be negative, got {page_size}")
    size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    search = json.dumps([state or "", dtn, owner])
    after = _decode_page_token(page_token, search) if page_token else None
    # Every reservation, live or ended, has its row in the store, written before it is remembered:
    # one ordered query pages through both, whatever left memory between two pages.
    where: list[str] = []
    parameters: list[Any] = []
    whose = owner or ("" if principal.role is Role.ADMIN else principal.name)
    if whose:
        where.append("owner = ?")
        parameters.append(whose)
    if state is not None:
        where.append("state = ?")
        parameters.append(str(state))
    if dtn:
        where.append("(src = ? OR dst = ?)")
        parameters += [dtn, dtn]
    if after is not None:
        created, last = -after[0], after[1]
        where.append("created <= ? AND (created < ? OR id > ?)")
        parameters += [created, created, last]
    condition = " WHERE " + " AND ".join(where) if where else ""
    rows = query(f"SELECT id, body FROM reservations{condition} ORDER BY created DESC, id LIMIT ?",
                 (*parameters, size + 1))
    page = [(remembered or {}).get(found) or _from_json(json.loads(body), topology)
            for found, body in rows[:size]]
    token = _encode_page_token(search, page[-1]) if len(rows) > size else ""
    return page, token


def reservation_id_of(name: str) -> str:
    """The id in a reservation's name (`reservations/{id}` or the id); `InvalidArgument` otherwise."""
    match = _RESERVATION_NAME.fullmatch(name or "")
    if not match:
        raise InvalidArgument(f"name: {validation.shown(name)} is not a reservation name like "
                              "reservations/<32 hex digits>")
    return match["id"]


def read_visible(principal: Principal, name: str, lookup: Callable[[str], Reservation]) -> Reservation:
    """The reservation called `name`, found by id with `lookup`, if `principal` may see it."""
    _require_role(principal, "read reservations")
    reservation = lookup(reservation_id_of(name))
    if not principal.may_see(reservation.owner):
        raise PermissionDenied(f"{reservation.name} belongs to another principal")
    return reservation


def read_row(query: Query, topology: Topology, reservation_id: str) -> Reservation:
    """The reservation `reservation_id` from the `reservations` table `query` reads; `NotFound` if absent."""
    rows = query("SELECT body FROM reservations WHERE id = ?", (reservation_id,))
    if not rows:
        raise NotFound(f"no reservation reservations/{reservation_id}")
    return _from_json(json.loads(rows[0][0]), topology)


def create_table(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE IF NOT EXISTS reservations (
               id TEXT PRIMARY KEY,
               owner TEXT NOT NULL,
               request_id TEXT NOT NULL,
               state TEXT NOT NULL,
               body TEXT NOT NULL,
               created REAL,
               src TEXT,
               dst TEXT,
               ended REAL
           )"""
    )
    # Columns that `list`, `get` and loading query (ended: when a final one ended, NULL while live).
    # A file from before them gets them filled from each row's body, once.
    columns = {row[1] for row in db.execute("PRAGMA table_info(reservations)")}
    missing = [c for c in _QUERY_COLUMNS if c not in columns]
    for column in missing:
        db.execute(f"ALTER TABLE reservations ADD COLUMN {column} {_QUERY_COLUMNS[column]}")
    if missing:
        filled = []
        for reservation_id, body in db.execute("SELECT id, body FROM reservations").fetchall():
            data = json.loads(body)
            filled.append((data["created"], data["request"]["src"], data["request"]["dst"],
                           data["updated"] if State(data["state"]).is_final else None, reservation_id))
        db.executemany("UPDATE reservations SET created=?, src=?, dst=?, ended=? WHERE id=?", filled)
    # Each index costs 30-40 us per create + release (the partial one on `ended` half what a whole one would).
    for name, columns_of in (("created", "created DESC, id"), ("owner", "owner, created DESC, id"),
                             ("state", "state, created DESC, id"), ("request", "owner, request_id"),
                             ("ended", "ended) WHERE (ended IS NOT NULL")):
        db.execute(f"CREATE INDEX IF NOT EXISTS reservations_by_{name} ON reservations ({columns_of})")


_QUERY_COLUMNS = {"created": "REAL", "src": "TEXT", "dst": "TEXT", "ended": "REAL"}


def _insert(db: sqlite3.Connection, r: Reservation) -> None:
    db.execute("INSERT INTO reservations (id, owner, request_id, state, body, created, src, dst, ended) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
               (r.id, r.owner, r.request_id, r.state, json.dumps(_to_json(r)), r.created, r.request.src,
                r.request.dst, r.updated if r.state.is_final else None))


def _update(db: sqlite3.Connection, r: Reservation) -> None:
    db.execute("UPDATE reservations SET state=?, body=?, ended=? WHERE id=?",
               (r.state, json.dumps(_to_json(r)), r.updated if r.state.is_final else None, r.id))


def _path_json(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    return {"directions": list(path.direction_ids), "free_bps": path.free_bps, "bottleneck": path.bottleneck}


def _to_json(r: Reservation) -> dict[str, Any]:
    q = r.request
    return {
        "id": r.id, "owner": r.owner, "state": r.state, "reason": r.reason, "request_id": r.request_id,
        "labels": dict(r.labels), "created": r.created, "updated": r.updated, "fingerprint": r.fingerprint,
        "request": {"src": q.src, "dst": q.dst, "bandwidth": q.bandwidth, "start": q.start,
                    "end": None if math.isinf(q.end) else q.end, "policy": q.policy, "include": list(q.include),
                    "exclude": list(q.exclude), "max_hops": q.max_hops, "protect": q.protect},
        "primary": _path_json(r.route.primary) if r.route else None,
        "backup": _path_json(r.route.backup) if r.route else None,
    }


def _from_json(data: dict[str, Any], topology: Topology) -> Reservation:
    q = data["request"]
    request = PathRequest(q["src"], q["dst"], q["bandwidth"], q["start"], math.inf if q["end"] is None else q["end"],
                          q["policy"], tuple(q["include"]), tuple(q["exclude"]), q["max_hops"], q["protect"])

    final = State(data["state"]).is_final

    def path(p: dict[str, Any] | None) -> Path | None:
        if p is None:
            return None
        try:
            directions = tuple(topology.directions[d] for d in p["directions"])
        except KeyError:
            # On a link since removed: history for a final one; a live one is rerouted at load.
            return None
        return Path(q["src"], q["dst"], directions, p["free_bps"], p["bottleneck"])

    primary, backup = path(data["primary"]), path(data["backup"])
    if not final and data["backup"] is not None and backup is None:
        primary = None  # a live route that lost its backup is found again whole
    route = Route(primary, backup) if primary else None
    return Reservation(data["id"], data["owner"], request, State(data["state"]), route, data["created"],
                       data["updated"], data["reason"], data["request_id"], MappingProxyType(data["labels"]),
                       data.get("fingerprint", ""))
