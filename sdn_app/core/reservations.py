"""The reservation book: bandwidth principals hold between two DTNs, and the life of each.

`ReservationBook` is the one owner of reservation state. It decides admission (through
`PathFinder` and the `Ledger`), moves reservations through their states (`reservation.State`)
as the clock passes their windows, keeps the idempotency index of `request_id`s, and records
every change as an `Event` for watchers. Each change is one SQLite transaction shared with the
ledger, so a reservation row (`reservation_store`) and its booking are committed together or
not at all; rows of another table that go with a reservation (a transfer's) join that
transaction through `companion`. With switches, its `Installs` plan each reservation's flows and queue
the OpenFlow changes (`take_changes`) that the provisioner applies and confirms (`provisioned`).
Rate reports and measured loads go to its `Rerouter` (`core.rerouting`), which moves
reservations through the book; loading repairs what no longer fits the topology (`ledger_repair`).

Links: the adapter reports links going down and coming back (`set_link_state`); `link_repair`
moves the reservations they affect, and retries DEGRADED ones whenever capacity returns.

Booking terms (`Terms`): a request may be held (HELD until `commit`, `abort` or its hold times
out in `tick`), provisioned by hand (`provision`, `unprovision`: the flows apart from the
booking), carry a priority and be elastic. After every change that moves capacity the elastic
shares are re-solved (`shares`), and the meters that moved are changed in place. A deadline
transfer is booked as a stepped schedule (`book_by_deadline`, `schedules`), its meter following
each step.

Memory (`reservation_memory`): live reservations are held in memory; an ended one only for
`keep_ended` seconds after it ended, then only in the store. `get` (and `request_id` retries)
read a reservation no longer in memory from the store; `list` pages through the store itself, so
a page token stays valid whatever leaves memory between pages. A restart loads the live ones and
those ended within `keep_ended`.
"""

from __future__ import annotations

import collections
import functools
import ipaddress
import math
import os
import random
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from sdn_app.core import reservation_store as store
from sdn_app.core import schedules, validation, vlans
from sdn_app.core.clock import Clock
from sdn_app.core.decisions import Decision, Kind, ShareChange, Trigger, render
from sdn_app.core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    PermissionDenied,
    TsdnError,
)
from sdn_app.core.installs import LABELS, Installs
from sdn_app.core.labels import DEFAULT_GRACE, DEFAULT_LABELS
from sdn_app.core.ledger import AlsoWrite, Ledger
from sdn_app.core.ledger_repair import LedgerRepair
from sdn_app.core.link_repair import LinkRepair
from sdn_app.core.nsi_segments import PRINCIPAL as SEGMENT_PRINCIPAL
from sdn_app.core.nsi_segments import SEGMENT_LABEL
from sdn_app.core.paths import PathFinder, PathRequest, Route
from sdn_app.core.plans import COOKIE_ID_MASK, DEFAULT_MAX_METER_ID, SwitchPlan, clash, is_path_cookie_bits
from sdn_app.core.prefix_index import PrefixIndex
from sdn_app.core.rerouting.advisor import Health, RateAdvisor
from sdn_app.core.rerouting.congestion import Condition
from sdn_app.core.rerouting.rerouter import Fleet, Rerouter
from sdn_app.core.reservation import (
    Availability,
    Change,
    Event,
    HistoryEntry,
    HostLimit,
    PathChoice,
    Principal,
    Repair,
    Reservation,
    Role,
    ScheduleStep,
    State,
    Terms,
    check_terms,
    require_role,
    route_key,
    step_at,
    step_rate,
)
from sdn_app.core.reservation_memory import Memory, deadline
from sdn_app.core.shares import DEFAULT_SHARE_STEP, Shares
from sdn_app.core.topology import Topology
from sdn_app.core.units import MAX_BANDWIDTH, format_bandwidth, format_time, format_window
from sdn_app.core.utilization import DirectionLoad

LEDGER_ONLY = "booked in the ledger only: no OpenFlow switches are controlled"
CONFIRMED = "every hop confirmed by barrier replies"
_LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$")
MAX_LABELS = 32
# Seconds an ended reservation stays in memory after it ended (`keep_ended`); then only the store
# holds it. Memory at most: reservations ending per second x this x about 1.6 kB (the process's RSS).
DEFAULT_KEEP_ENDED = 300.0
DEFAULT_HOLD_TIMEOUT = 120.0  # seconds a two-phase hold waits for its commit (OpenNSA and SuPA: 120 s)
MAX_BATCH = 1000  # requests in one `create_many` (a campaign)


@dataclass(frozen=True)
class BatchItem:
    """One request of a `create_many` batch: what `create` takes, less `validate_only` (the batch's)."""

    request: PathRequest
    labels: Mapping[str, str] | None = None
    request_id: str = ""
    fingerprint: str = ""
    terms: Terms | None = None


class BatchAborted(TsdnError):
    """A request of an all-or-nothing batch that was not booked because another one was refused."""

    code = "ABORTED"


class ReservationBook:
    """Every reservation of one controller; not thread-safe: one owner calls it."""

    def __init__(self, topology: Topology, ledger: Ledger, clock: Clock, provisioning: bool = False,
                 advisor: RateAdvisor | None = None, keep_ended: float = DEFAULT_KEEP_ENDED,
                 hold_timeout: float = DEFAULT_HOLD_TIMEOUT, share_step: float = DEFAULT_SHARE_STEP,
                 share_solver: str = "filling", flow_design: str = LABELS,
                 path_labels: tuple[int, int] = DEFAULT_LABELS, label_grace: float = DEFAULT_GRACE,
                 max_meters: int = DEFAULT_MAX_METER_ID):
        """Load the reservations kept in the ledger's database and reconcile them with it.

        With `provisioning`, switches are controlled: a reservation whose window starts waits in
        PROVISIONING until the adapter confirms its flows (`take_changes`, then `provisioned`).
        Without, it is booked in the ledger only and ACTIVE at once.

        An ended reservation stays in memory `keep_ended` seconds (`math.inf`: for good), then
        only in the database, where `get` and `list` still find it; loading reads only the live
        ones and those ended within `keep_ended`.

        A held request waits `hold_timeout` seconds for its commit. Elastic reservations' meters
        change when a re-solve moves their share by more than `share_step` x their ceiling;
        `share_solver` solves the rounds of the sharing (`sharing.METHODS`).

        `flow_design` is how reservations are put on the switches (`installs.FLOW_DESIGNS`):
        label-switched paths with VLAN ids from `path_labels`, kept `label_grace` seconds after
        their last user left, or every reservation's flows on every hop. `max_meters`: the meter
        ids a switch has (a reservation takes one per direction at its ingress).
        """
        if isinstance(hold_timeout, bool) or not isinstance(hold_timeout, int | float) \
                or not 0 < hold_timeout <= 86400:
            raise InvalidArgument(f"hold_timeout: seconds, above 0 and at most a day, got {hold_timeout!r}")
        self.hold_timeout = float(hold_timeout)
        if isinstance(keep_ended, bool) or not isinstance(keep_ended, int | float) or math.isnan(keep_ended) \
                or keep_ended < 0:
            raise InvalidArgument(f"keep_ended: seconds, zero or more, got {keep_ended!r}")
        self.keep_ended = float(keep_ended)
        self.topology = topology
        self.ledger = ledger
        self.clock = clock
        self.provisioning = provisioning
        self.finder = PathFinder(topology, ledger)
        self.host_limits: Callable[[str], HostLimit | None] | None = None  # what a DTN's host can carry
        # Rows of another table that go with a reservation's row (a transfer's), written in the same
        # transaction each time the book writes that reservation: None when nothing goes with it.
        self.companion: Callable[[Reservation], AlsoWrite | None] | None = None
        self.refusals: collections.Counter[str] = collections.Counter()  # admissions refused, by kind
        self.repairs: list[Repair] = []  # what loading changed so the ledger fits the topology
        # with switches: the flows each reservation wants there
        self.installs = Installs(topology, clock, flow_design, path_labels, label_grace, max_meters)
        self._memory = Memory(self.keep_ended)
        self._reservations = self._memory.known  # in memory, live and recently ended
        self._live = self._memory.live  # not final: what ticks and deadlines look at
        self._events: list[Event] = []
        self._random = random.Random(os.urandom(16))  # ids need to be unique, not secret: owners are checked
        self._sequence = 0
        # Rate-driven rerouting: it sees the reservations and moves them through the book.
        self.rerouter = Rerouter(topology, ledger, clock, advisor or RateAdvisor(), self.finder.down_links,
                                 Fleet(MappingProxyType(self._live), MappingProxyType(self._reservations),
                                       self._move, self._commit, self._confirming))
        self.links = LinkRepair(topology, self.finder, MappingProxyType(self._live), self._memory.degraded,
                                self.rerouter.measured_route, self._move, self._commit)
        self.shares = Shares(topology, ledger, MappingProxyType(self._live), self._memory.elastic,
                             lambda: self.finder.down_links, share_step, share_solver)
        # reservation id -> how its re-homed WAN segment is told once its move is confirmed
        self._rehomed: dict[str, str] = {}
        self.ledger.write(store.create_table)
        self._load()

    # -- reading -------------------------------------------------------------------------

    def get(self, principal: Principal, name: str) -> Reservation:
        """The reservation called `name` (`reservations/{id}` or the id), if the caller may see it."""
        return store.read_visible(principal, name, self._lookup)

    def _current(self, principal: Principal, name: str) -> Reservation:
        """`get`, after ticking if the clock passed this reservation's window start or end."""
        reservation = self.get(principal, name)
        if not reservation.state.is_final and deadline(reservation) <= self.clock.now():
            self.tick()
            reservation = self._lookup(reservation.id)
        return reservation

    def list(self, principal: Principal, state: State | None = None, dtn: str = "", owner: str = "",
             page_size: int = 0, page_token: str = "") -> tuple[list[Reservation], str]:
        """A page of the reservations the caller may see, live and ended alike, newest first (by
        creation, then id), and the next page's token."""
        return store.list_page(self.ledger.query, self.topology, principal, state, dtn, owner, page_size,
                               page_token, self._reservations)

    def availability(self, principal: Principal, request: PathRequest, max_paths: int = 3) -> Availability:
        """The largest bandwidth bookable for `request`'s DTNs and window, and candidate paths."""
        require_role(principal, "query availability")
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

    def history(self, reservation_id: str) -> list[HistoryEntry]:
        """The last `HISTORY_LENGTH` changes of a reservation, oldest first: every decision about
        it, typed, with its reason. Empty once it left memory, and for changes before a restart."""
        return self._memory.history(reservation_id)

    def conditions(self) -> list[Condition]:
        """The congestion verdict of every measured link direction, as last measured."""
        return self.rerouter.conditions()

    def snapshot(self, principal: Principal, name: str = "") -> list[Reservation]:
        """Live reservations the caller may see (one, when `name` is given), oldest first."""
        require_role(principal, "watch reservations")
        if name:
            return [self.get(principal, name)]
        return sorted((r for r in self._live.values() if principal.may_see(r.owner)), key=lambda r: (r.created, r.id))

    # -- changing ------------------------------------------------------------------------

    def create(self, principal: Principal, request: PathRequest, labels: Mapping[str, str] | None = None,
               request_id: str = "", validate_only: bool = False, fingerprint: str = "",
               terms: Terms | None = None) -> Reservation:
        """Admit `request` for the caller, or raise why not (counted in `refusals`); idempotent
        per `request_id`. `terms`: held or not, provisioned at its start or by hand, priority,
        elastic ceiling (default: a guaranteed bandwidth, provisioned, at the caller's priority).

        A request with `src_prefix` and `dst_prefix` (IPv6 networks, stored in canonical text)
        is a reservation whose traffic is the IPv6 packets between those prefixes: with switches,
        several such reservations between the same DTNs are held at once as long as their
        prefixes keep apart (`plans.clash`)."""
        try:
            return self._admit(principal, request, labels, request_id, validate_only, fingerprint,
                               terms or Terms())
        except NoCapacity:
            self.refusals["no_capacity"] += 1
            raise
        except FailedPrecondition:
            self.refusals["failed_precondition"] += 1
            raise

    def create_many(self, principal: Principal, items: Sequence[BatchItem], all_or_nothing: bool = False,
                    validate_only: bool = False) -> list[Reservation | TsdnError]:
        """Admit a batch of requests (a campaign) in order, each as `create` would: the reservation
        or the error that refused it, per item. Later items see the capacity earlier ones took.

        With `all_or_nothing`, nothing is booked, stored, installed or announced unless every item
        would be admitted: a trial first admits each against the bookings of the items before it,
        held in memory only, and undone whatever happens; one refused, the others are
        `BatchAborted` naming it. `validate_only`: the answer the batch would get, nothing booked.
        1 to `MAX_BATCH` items; an item's `request_id` is used as `create` uses it (a retried batch
        returns the same reservations), and may not repeat within the batch. InvalidArgument for
        the whole batch when an item's request id, labels or prefixes are malformed."""
        require_role(principal, "create reservations")
        if not items:
            raise InvalidArgument(f"requests: an empty batch; give 1 to {MAX_BATCH:,} requests")
        if len(items) > MAX_BATCH:
            raise InvalidArgument(f"requests: {len(items):,} in one batch, at most {MAX_BATCH:,}")
        _check_batch(items)
        if not (all_or_nothing or validate_only):
            return [self._create_item(principal, item) for item in items]
        trial = self._trial(principal, items)
        refused = next((i for i, outcome in enumerate(trial) if isinstance(outcome, TsdnError)), None)
        if all_or_nothing and refused is not None:
            return _aborted(items, trial, refused)
        if validate_only:
            return trial
        admitted: list[Reservation | TsdnError] = []
        for index, (item, checked) in enumerate(zip(items, trial, strict=True)):
            assert isinstance(checked, Reservation)
            outcome = self._create_item(principal, item, checked.route)
            if isinstance(outcome, TsdnError):  # the trial said it fits: only a bug gets here
                new = [r for r, t in zip(admitted, trial, strict=False)
                       if isinstance(r, Reservation) and isinstance(t, Reservation) and not t.id]
                self._undo_batch(principal, new, f"all_or_nothing: {_item_name(index, item)} was refused after "
                                                 f"its trial: {outcome}")
                return _aborted(items, [*trial[:index], outcome, *trial[index + 1:]], index)
            admitted.append(outcome)
        return admitted

    def _create_item(self, principal: Principal, item: BatchItem,
                     planned: Route | None = None) -> Reservation | TsdnError:
        """`create` of one batch item (on `planned`, its trial's route, when given): the reservation,
        or the error that refused it."""
        try:
            if planned is None:
                return self.create(principal, item.request, item.labels, item.request_id, False, item.fingerprint,
                                   item.terms)
            return self._admit(principal, item.request, item.labels, item.request_id, False, item.fingerprint,
                               item.terms or Terms(), planned)
        except TsdnError as error:
            return error

    def _trial(self, principal: Principal, items: Sequence[BatchItem]) -> list[Reservation | TsdnError]:
        """Each item checked as `create` with `validate_only` checks it, against the bookings of
        the items admitted before it, held in the ledger's memory only: undone at the end."""
        outcomes: list[Reservation | TsdnError] = []
        earlier = _BatchSoFar()
        with self.ledger.trial() as trial:
            for index, item in enumerate(items):
                try:
                    checked = self._admit(principal, item.request, item.labels, item.request_id, True,
                                          item.fingerprint, item.terms or Terms(), batch=earlier)
                    if not checked.id:  # a new one (not a retry of an earlier request): its booking is held
                        assert checked.route is not None
                        schedule = item.terms.schedule if item.terms is not None else ()
                        trial.hold(checked.route.direction_ids, checked.request.bandwidth, checked.request.start,
                                   checked.request.end, steps=[(s.start, s.end, s.bandwidth) for s in schedule]
                                   if schedule else None)
                        earlier.add(index, checked.request)
                    outcomes.append(checked)
                except TsdnError as error:
                    if isinstance(error, NoCapacity | FailedPrecondition):  # counted as `create` counts them
                        self.refusals["no_capacity" if isinstance(error, NoCapacity) else "failed_precondition"] += 1
                    outcomes.append(error)
        return outcomes

    def _undo_batch(self, principal: Principal, admitted: list[Reservation], why: str) -> None:
        """Release the reservations an all-or-nothing batch admitted before one of its items failed."""
        for reservation in reversed(admitted):
            self.release(principal, reservation.name, why)

    def book_by_deadline(self, principal: Principal, src: str, dst: str, size_bits: int, deadline: float,
                         policy: str = "shortest", labels: Mapping[str, str] | None = None, request_id: str = "",
                         fingerprint: str = "", terms: Terms | None = None) -> Reservation:
        """Book a schedule that carries `size_bits` from DTN `src` to DTN `dst` by `deadline`: a few
        steps of constant bandwidth from now (`schedules.plan`: the earliest finish, then the
        lowest peak) on the candidate path that finishes first. `DeadlineMissed` names the
        earliest finish any candidate allows and the bandwidth it would take."""
        require_role(principal, "create reservations")
        validation.request_id(request_id)
        if request_id and (earlier := self._by_request_id(principal.name, request_id)) is not None:
            if fingerprint and fingerprint == earlier.fingerprint:
                return earlier
            raise AlreadyExists(f"request_id {request_id!r} was used for {earlier.name}, a different request; "
                                "use a new request_id for a new request")
        now = self.clock.now()
        if isinstance(size_bits, bool) or not isinstance(size_bits, int) or size_bits <= 0:
            raise InvalidArgument(f"size_bytes: must be positive, got {size_bits!r}")
        if not math.isfinite(deadline) or deadline <= now:
            raise InvalidArgument(f"deadline: {format_time(deadline)} is not in the future")
        schedule, route = self._plan_deadline(src, dst, size_bits, now, deadline, policy)
        schedule = schedules.with_grace(self.ledger, schedule, route, deadline)
        request = PathRequest(src, dst, max(s.bandwidth for s in schedule), now, schedule[-1].end, policy)
        try:
            return self._admit(principal, request, labels, request_id, False, fingerprint,
                               replace(terms or Terms(), schedule=schedule), route)
        except NoCapacity:
            self.refusals["no_capacity"] += 1
            raise

    def earliest_finish(self, principal: Principal, src: str, dst: str, size_bits: int, start: float,
                        policy: str = "shortest") -> tuple[ScheduleStep, ...]:
        """By when `size_bits` could get from `src` to `dst` starting at `start`: the schedule that
        would finish first (its last step's end), booking nothing."""
        require_role(principal, "query availability")
        if isinstance(size_bits, bool) or not isinstance(size_bits, int) or size_bits <= 0:
            raise InvalidArgument(f"size_bytes: must be positive, got {size_bits!r}")
        try:
            return self._plan_deadline(src, dst, size_bits, start, start + schedules.LOOKAHEAD - 1, policy)[0]
        except schedules.DeadlineMissed as missed:
            if missed.schedule:
                return missed.schedule
            raise

    def _plan_deadline(self, src: str, dst: str, size_bits: int, start: float, deadline: float,
                       policy: str) -> tuple[tuple[ScheduleStep, ...], Route]:
        """The best deadline schedule on the candidate paths, within what the DTNs' hosts carry."""
        cap = min([MAX_BANDWIDTH] + [limit.capacity_bps for dtn in (src, dst)
                                     if self.host_limits is not None and (limit := self.host_limits(dtn))])
        return schedules.plan_on_paths(self.finder, self.ledger, PathRequest(src, dst, 1, start, deadline, policy),
                                       size_bits, cap)

    def _admit(self, principal: Principal, request: PathRequest, labels: Mapping[str, str] | None,
               request_id: str, validate_only: bool, fingerprint: str, terms: Terms,
               planned: Route | None = None, batch: _BatchSoFar | None = None) -> Reservation:
        """Admit `request` for the caller, or raise why not; idempotent per `request_id`.

        A retry with a `request_id` already used by this caller returns that reservation
        (whatever its state now) instead of booking again. `fingerprint` identifies the request
        as sent (an adapter's hash of it): a retry must match it; without one, the request's
        fields other than its times must match (a "now" start moves between retries).
        """
        require_role(principal, "create reservations")
        labels = _check_labels(labels or {})
        validation.request_id(request_id)
        src_prefix, dst_prefix = validation.prefix_pair(request.src_prefix, request.dst_prefix)
        src_vlan = validation.vlan_id(request.src_vlan, "src_vlan")
        dst_vlan = validation.vlan_id(request.dst_vlan, "dst_vlan")
        if src_vlan is not None and dst_vlan is not None and src_prefix is not None:
            raise InvalidArgument("src_prefix: a VLAN circuit (src_vlan and dst_vlan) carries every frame of its "
                                  "VLANs; leave the prefixes out")
        if (src_vlan is not None or dst_vlan is not None) and self.installs.design != LABELS:
            raise FailedPrecondition(f"src_vlan/dst_vlan: VLANs at a reservation's ends need the label flow design "
                                     f"(--flow-design {LABELS}); this controller runs {self.installs.design}")
        request = replace(request, src_prefix=src_prefix, dst_prefix=dst_prefix)
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
        priority = check_terms(principal, request, terms)
        if request.end <= now:
            raise InvalidArgument(f"end: the window ended already ({format_time(request.end)})")
        request, labels, terms, remote_route = self._remote_end(request, labels, terms)
        self._check_apart(request, batch=batch)
        self._check_hosts(request)
        route = planned or remote_route or self.finder.route(request)
        if self.provisioning:
            self.installs.check_room(route, request.src_vlan, request.dst_vlan)
        if SEGMENT_LABEL in labels:
            state, reason = State.HELD, (f"held until {format_time(now + self.hold_timeout)}: waiting for its WAN "
                                         f"segment from {labels[SEGMENT_LABEL]} (NSI)")
        elif terms.hold:
            state, reason = State.HELD, f"held until {format_time(now + self.hold_timeout)}: commit or abort"
        else:
            state, reason = (State.SCHEDULED, "") if request.start > now else self._started(terms.provision)
        if validate_only:
            self.ledger.check(route.direction_ids, request.bandwidth, request.start, request.end)
            return Reservation("", principal.name, request, state, route, now, now,
                               "validate_only: checked, nothing was booked", request_id, labels,
                               priority=priority, ceiling=terms.ceiling, provisioned=terms.provision)
        reservation = Reservation(self._new_id(), principal.name, request, state, route,
                                  now, now, reason, request_id, labels, fingerprint,
                                  hold_until=now + self.hold_timeout if terms.hold else 0.0,
                                  provisioned=terms.provision, priority=priority, ceiling=terms.ceiling,
                                  schedule=terms.schedule, rate=step_rate(terms.schedule, now))
        self.ledger.reserve(route.direction_ids, request.bandwidth, request.start, request.end,
                            booking_id=reservation.id, also=lambda db: self._insert_row(db, reservation),
                            **({"steps": [(s.start, s.end, s.bandwidth) for s in terms.schedule]}
                               if terms.schedule else {}))
        self._remember(reservation)
        return self._begin(None, reservation, f"{reservation.name} admitted")

    def _remote_end(self, request: PathRequest, labels: Mapping[str, str],
                    terms: Terms) -> tuple[PathRequest, Mapping[str, str], Terms, Route | None]:
        """A request to a DTN beyond an inter-domain port: a hold labelled with the neighbour's NSA
        (its WAN segment is booked over NSI before it is committed: `nsi_segments`), through the
        first of the DTN's ports (`beyond`, then `also_beyond`; or the `via` asked for) that is up
        and has a free VLAN and a route with room, tagged there with the first VLAN of the port's
        range free in its window (or the one asked for); with the route found. None of them: the
        first port's refusal."""
        remote = [(end, name) for end, name in (("src", request.src), ("dst", request.dst))
                  if self.topology.is_remote(name)]
        if not remote:
            if SEGMENT_LABEL in labels:
                raise InvalidArgument(f"labels: {SEGMENT_LABEL} is set by tsdn on reservations to remote DTNs")
            return request, labels, terms, None
        if len(remote) == 2:
            raise InvalidArgument(f"{request.src} and {request.dst} are both beyond inter-domain ports: tsdn books "
                                  "paths that start or end on its own network")
        end, name = remote[0]
        ports = (self.topology.via(name, request.via),) if request.via is not None else \
            self.topology.remote_ports(name)
        request, route = self._pick_port(request, end, name, [p for p in ports if p is not None])
        port = self.topology.interdomain[request.via or ""]
        return request, {**labels, SEGMENT_LABEL: port.peer.nsa}, replace(terms, hold=True), route

    def _pick_port(self, request: PathRequest, end: str, name: str, ports: Sequence[str],
                   ignore: str = "") -> tuple[PathRequest, Route]:
        """`request` through the first of `ports` (inter-domain ports reaching remote DTN `name`,
        its `end`) that is up, has a VLAN free in its window (the one asked for, or the first one)
        and a route with room, with that route; not counting reservation `ignore`. None: the
        first port's refusal."""
        refusals: list[TsdnError] = []
        for port_name in ports:
            port = self.topology.interdomain[port_name]
            first, last = port.vlans
            asked = getattr(request, f"{end}_vlan")
            try:
                if port.name in self.finder.down_links:
                    raise FailedPrecondition(f"{name}: inter-domain port {port.name} towards {port.peer.nsa} is down")
                if asked is not None and not first <= asked <= last:
                    raise InvalidArgument(f"{end}_vlan: {asked} is outside the VLANs {first}-{last} that inter-domain "
                                          f"port {port.name} offers")
                vlan = asked
                if vlan is None:
                    taken = vlans.users(self.topology, [r for r in self._live.values() if r.id != ignore],
                                        self.topology.endpoint(port.name), first, last, request.start, request.end)
                    vlan = next((v for v in range(first, last + 1) if v not in taken), None)
                    if vlan is None:
                        raise NoCapacity(f"{name}: every VLAN {first}-{last} of inter-domain port {port.name} towards "
                                         f"{port.peer.nsa} is taken in that window")
                candidate = replace(request, via=port.name, **{f"{end}_vlan": vlan})
                return candidate, self.finder.route(candidate, ignore=ignore or None)
            except (NoCapacity, FailedPrecondition, InvalidArgument) as refusal:
                refusals.append(refusal)
        if not refusals:
            raise FailedPrecondition(f"{name}: no inter-domain port reaches it")
        raise refusals[0]

    # -- re-homing a WAN segment (nsi_segments) ----------------------------------------------

    def rehome_choice(self, reservation_id: str, failed_port: str) -> PathRequest:
        """The request of live reservation `reservation_id` moved off inter-domain port
        `failed_port` (where its WAN segment failed) to the first other port that reaches its
        remote DTN and is up, with a free VLAN and a route with room (`via` and the VLAN set);
        raises why there is none."""
        old = self._lookup(reservation_id)
        if old.state.is_final:
            raise FailedPrecondition(f"{old.name} is {old.state}; there is nothing to re-home")
        request = old.request
        end, name = ("dst", request.dst) if self.topology.is_remote(request.dst) else ("src", request.src)
        others = [p for p in self.topology.remote_ports(name) if p != failed_port]
        if not others:
            raise FailedPrecondition(f"no other inter-domain port reaches {name}")
        asked = replace(request, via=None, **{f"{end}_vlan": None})
        return self._pick_port(asked, end, name, others, ignore=old.id)[0]

    def rehoming(self, reservation_id: str, failed_port: str, reason: str) -> Reservation:
        """The WAN segment of `reservation_id` through inter-domain port `failed_port` failed and
        another one is being booked: DEGRADED with `reason` (before its window or with its data
        plane released: its state stays, with that reason); no route of it uses `failed_port`
        until `rehome` or `fail`."""
        old = self._lookup(reservation_id)
        if old.state.is_final:
            return old
        self.finder.avoid[old.id] = failed_port
        return self._commit(old, reason, old.state if old.state.booked_only else State.DEGRADED)

    def rehome(self, reservation_id: str, via: str, vlan: int, note: str) -> Reservation:
        """The new WAN segment of `reservation_id` (`note` names it) is booked through inter-domain
        port `via` on VLAN `vlan`: move the local segment there, make-before-break (the new paths'
        entries, then the steer changes at the ingresses, then the old ones let go), its ledger
        booking moved onto the new directions; ACTIVE again once every hop confirms."""
        old = self._lookup(reservation_id)
        if old.state.is_final:
            raise FailedPrecondition(f"{old.name} is {old.state} ({old.reason}); its segment cannot be re-homed")
        q = old.request
        end = "dst" if self.topology.is_remote(q.dst) else "src"
        request = replace(q, via=via, **{f"{end}_vlan": vlan})
        self._check_vlans(request, ignore=old.id)
        route = self.finder.route(request, ignore=old.id)
        self.finder.avoid.pop(old.id, None)
        told = f"re-homed through inter-domain port {via} ({note})"
        installed = old.id in self.installs
        new = self._move(old, route, f"{told}: moving to {route.primary.describe()}", request)
        if installed:
            self._rehomed[old.id] = told
        elif new.state is State.DEGRADED:
            new = self._commit(new, told, State.ACTIVE)
        else:
            new = self._commit(new, told)
        self._reshare(f"{old.name} re-homed")
        return self._reservations[new.id]

    def _begin(self, previous: State | None, reservation: Reservation, cause: str) -> Reservation:
        """Record a reservation that was just created, committed or provisioned (state and reason
        set), re-solve the elastic shares and install its flows when its window started. Elastic
        reservations that shrink for it are named in its own event: one announced decision."""
        shares = self.shares.changes(self.clock.now())  # a hold, too, takes capacity now
        if reservation.id in shares:  # elastic: its flows start at its share
            reservation = replace(reservation, rate=shares.pop(reservation.id))
            self.ledger.write(lambda db: self._update_row(db, reservation))
            self._remember(reservation)
        shrunk = tuple(_share_change(self._live[rid], share) for rid, share in sorted(shares.items())
                       if share < self._live[rid].meter_bps)
        decision = Decision(Kind.ADMITTED, trigger=reservation.reason, shares=shrunk) if shrunk else None
        if decision is not None:
            reservation = replace(reservation, reason=render(decision), decision=decision)
            self.ledger.write(lambda db: self._update_row(db, reservation))
            self._remember(reservation)
        if reservation.state is State.ACTIVE:  # ledger only: confirmed at once
            self._record(previous, replace(reservation, state=State.PROVISIONING, reason="window started"))
            self._record(State.PROVISIONING, reservation, decision)
        else:
            self._record(previous, reservation, decision)
        self._apply_shares(shares, cause)  # shrunk meters first, then the new flows go in
        if reservation.state is State.PROVISIONING:
            try:
                self.installs.install(reservation)
            except NoCapacity as full:  # a window that starts (or a commit) when the switches are full
                self.provisioned(reservation.id, str(full))
                return self._reservations[reservation.id]
        return reservation

    def _reshare(self, cause: str) -> None:
        """Re-solve the elastic reservations' shares after `cause`, and change the meters that moved
        by more than the step."""
        self._apply_shares(self.shares.changes(self.clock.now()), cause)

    def _apply_shares(self, shares: Mapping[str, int], cause: str) -> None:
        """Give each reservation in `shares` its new share: stored together, one event each, and its
        meter modified in place (its traffic keeps flowing)."""
        if not shares:
            return
        now = self.clock.now()
        changed = []
        for rid, share in sorted(shares.items()):
            old = self._live[rid]
            decision = Decision(Kind.SHARED, trigger=cause, shares=(_share_change(old, share),))
            changed.append((old, replace(old, rate=share, updated=now, reason=render(decision), decision=decision)))

        def write_all(db: sqlite3.Connection) -> None:
            for _, new in changed:
                self._update_row(db, new)
        self.ledger.write(write_all)
        for old, new in changed:
            self._remember(new)
            self._record(old.state, new, new.decision)
            if new.id in self.installs:
                self.installs.resize(new)

    def _check_apart(self, request: PathRequest, ignore: str = "", batch: _BatchSoFar | None = None) -> None:
        """With switches, refuse a request whose flows would collide with those of a live
        reservation (other than `ignore`) whose window overlaps its own (`plans.clash`): without
        prefixes, one reservation per ordered DTN pair at a time, since the switches tell them
        apart by the pair's addresses; with prefixes, prefixes that keep apart from every other
        reservation's. (Bookings alone, without switches, may overlap.) `batch`: the requests of a
        `create_many` trial admitted so far, kept apart from in the same way.

        A VLAN at an end's switch port is held by one live reservation at a time, with or without
        switches (`_check_vlans`)."""
        self._check_vlans(request, ignore, batch)
        if not self.provisioning:
            return
        may_clash = _clash_filter(request)
        for index, q in batch.candidates(request) if batch is not None else ():
            if q.start < request.end and request.start < q.end and may_clash(q) \
                    and (why := clash(request, q)) is not None:
                raise FailedPrecondition(
                    f"{why}, as requests[{index}] of this batch ({q.src} -> {q.dst}, {format_window(q.start, q.end)})"
                    ": the switches could not tell the two reservations' traffic apart; give each IPv6 prefixes "
                    "of its own, or windows apart")
        if request.src_prefix is None:
            others = [r for r in self._memory.on_pair(request.src, request.dst) if r.request.src_prefix is None]
        else:
            assert request.dst_prefix is not None
            others = self._memory.with_prefixes(near=(request.src_prefix, request.dst_prefix))
        near = [r for r in others if r.id != ignore and r.request.start < request.end
                and request.start < r.request.end and may_clash(r.request)]
        for other in sorted(near, key=lambda r: (r.created, r.id)):
            q = other.request
            why = clash(request, q)
            if why is None:
                continue
            window = format_window(q.start, q.end)
            if request.src_prefix is None:
                raise FailedPrecondition(
                    f"{request.src} -> {request.dst} already has {other.name} {window}; one reservation per DTN "
                    "pair at a time (or give each IPv6 prefixes): modify its bandwidth or end instead, or ask for "
                    "a window after it")
            raise FailedPrecondition(
                f"{why} of {other.name} ({q.src} -> {q.dst}, {window}): the switches could not tell the two "
                "reservations' traffic apart; use prefixes of its own, or a window after it")

    def _check_vlans(self, request: PathRequest, ignore: str = "", batch: _BatchSoFar | None = None) -> None:
        """Refuse a request that would use a VLAN at a switch port (its ends' `src_vlan` and
        `dst_vlan`) that a live reservation other than `ignore`, or an earlier request of
        `batch`, uses there in an overlapping window."""
        mine = _vlan_ports(self.topology, request)
        if not mine:
            return
        holders = [(f"requests[{index}] of this batch", q) for index, q in batch.tagged()] if batch is not None else []
        tagged = [r for r in self._live.values()
                  if r.id != ignore and (r.request.src_vlan is not None or r.request.dst_vlan is not None)]
        holders += [(r.name, r.request) for r in sorted(tagged, key=lambda r: (r.created, r.id))]
        for holder, q in holders:
            if not (q.start < request.end and request.start < q.end):
                continue
            theirs = _vlan_ports(self.topology, q)
            for place, (field, end) in mine.items():
                if place in theirs:
                    switch, port, vlan = place
                    raise FailedPrecondition(
                        f"{field}: VLAN {vlan} at {switch} port {port} ({end}) is held by {holder} ({q.src} -> "
                        f"{q.dst}, {format_window(q.start, q.end)}); one reservation per VLAN at a port at a time: "
                        "pick another VLAN, or a window after it")

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

    def _started(self, provision: bool = True) -> tuple[State, str]:
        """State and reason of a reservation whose window has just started (`provision`: its flows
        are wanted)."""
        if not provision:
            return State.RESERVED, "window started: booked, its data plane waits to be provisioned"
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
        if not self.installs.is_current(reservation_id, token):
            return
        assert old.route is not None
        down = self.links.down_on(old.route)
        if error is None and old.state is State.PROVISIONING and down:
            self._commit(old, f"installed, but link {', '.join(down)} is down and no alternate path fits",
                         State.DEGRADED)
        elif error is None:
            told = self._rehomed.pop(reservation_id, "")
            self._commit(old, CONFIRMED if old.state is State.PROVISIONING
                         else (f"{told}; " if told else "") + f"moved to {old.route.primary.describe()}: "
                         f"{CONFIRMED}", State.ACTIVE)
            self.rerouter.confirmed(reservation_id)
        elif old.state is State.MOVING:
            self._rehomed.pop(reservation_id, None)
            self._commit(old, f"moving failed: {error}", State.DEGRADED)
            self.rerouter.move_failed(old, error)
        else:
            new = replace(old, state=State.FAILED, updated=self.clock.now(), reason=f"provisioning failed: {error}")
            self.ledger.release(old.id, also=lambda db: self._update_row(db, new))
            self._uninstall(old.id)
            self._remember(new)
            self._record(old.state, new)

    # -- rates ---------------------------------------------------------------------------

    def report_rate(self, principal: Principal, name: str, achieved_bps: float,
                    health: Health | None = None) -> Reservation:
        """One per-second report of the rate a transfer on reservation `name` achieves; the
        reservation as it is after it.

        An ACTIVE reservation's report goes to the `Rerouter`: reports in a row below its booking,
        attributed to a congested link on its path, move it (or rearrange others to make room)
        within the stability rules; a shortfall at the hosts never moves it. Each decision, moved
        or not, is an event carrying a typed `Decision` with its evidence (the reason rendered
        from it); a verdict that stays the same is told once.
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
        return self.rerouter.report_rate(reservation, achieved_bps, health)

    def observe_loads(self, loads: Mapping[str, DirectionLoad]) -> list[Condition]:
        """One round of measured link loads (the switches' port counters, every tenant's traffic):
        return the link directions that became congested or clear."""
        return self.rerouter.observe_loads(loads)

    def _commit(self, old: Reservation, reason: str | Decision, state: State | None = None) -> Reservation:
        """Give `old` a new reason, or a decision and the reason rendered from it (and `state`,
        when given): stored, remembered, one event."""
        decision, text = _told(reason)
        new = replace(old, state=old.state if state is None else state, updated=self.clock.now(), reason=text,
                      decision=decision)
        self.ledger.write(lambda db: self._update_row(db, new))
        self._remember(new)
        self._record(old.state, new, decision)
        return new

    # -- links ---------------------------------------------------------------------------

    def set_link_state(self, link: str, up: bool, reason: str = "") -> None:
        """A link went down or came back (as the switches report it): move what it affects.

        Down: every live reservation whose primary or backup crosses `link` is moved to the
        best route that fits, or becomes DEGRADED. Up: DEGRADED reservations are retried.
        """
        self.links.set_link_state(link, up, reason)
        self._reshare(f"link {link} {'came back' if up else 'went down'}")

    def down_links(self) -> frozenset[str]:
        """Links reported down now."""
        return frozenset(self.finder.down_links)

    def _move(self, old: Reservation, route: Route, reason: str | Decision,
              request: PathRequest | None = None) -> Reservation:
        """Book `route` (and `request`, when it changes) for `old` and move its flows there,
        make-before-break, with `reason` (or a decision, its reason rendered from it); ACTIVE
        again when every hop confirms."""
        request = request or old.request
        now = self.clock.now()
        installed = old.id in self.installs
        self.rerouter.path_changed(old.id)  # its rates so far were on the old path
        state = State.MOVING if installed else old.state
        decision, text = _told(reason)
        new = replace(old, request=request, route=route, state=state, updated=now, reason=text, decision=decision)
        self.ledger.modify(old.id, bandwidth=request.bandwidth, end=request.end, directions=route.direction_ids,
                           also=lambda db: self._update_row(db, new))
        self._remember(new)
        self._record(old.state, new, decision)
        if installed:
            self.installs.move(new)
        return new

    def switch_plan(self, switch: str) -> SwitchPlan:
        """Every flow, meter and group the reservations on the switches want on `switch` now
        (what reconciliation makes the switch hold)."""
        return self.installs.switch_plan(switch)

    def take_changes(self) -> list[Change]:
        """OpenFlow changes decided since the last call, in the order they must be applied."""
        return self.installs.take_changes()

    def _uninstall(self, reservation_id: str) -> None:
        self.installs.uninstall(reservation_id)
        self.rerouter.forget(reservation_id)

    def modify(self, principal: Principal, name: str, bandwidth: int | None = None, end: float | None = None,
               validate_only: bool = False, path: PathChoice | None = None, priority: int | None = None,
               ceiling: int | None = None) -> Reservation:
        """Change bandwidth (an elastic one's floor), end (`math.inf`: until released), the path,
        priority and/or an elastic one's ceiling, all or nothing.

        Without `path` the reservation stays on its path. With it, a new route is computed
        under those constraints (they replace the old ones) and the reservation moves there
        make-before-break (MOVING, then ACTIVE when every hop confirms). Elastic shares are
        re-solved after any change.
        """
        old = self._current(principal, name)
        if old.state.is_final:
            raise FailedPrecondition(f"{old.name} is {old.state}; only live reservations can be modified")
        if bandwidth is None and end is None and path is None and priority is None and ceiling is None:
            raise InvalidArgument("give a new bandwidth_bps, end time, path, priority or ceiling_bps")
        if old.schedule and (bandwidth is not None or end is not None):
            raise FailedPrecondition(f"{old.name} follows a deadline schedule: its bandwidth and end are the "
                                     "schedule's; cancel the transfer and book again")
        if ceiling is not None and not old.elastic:
            raise InvalidArgument(f"ceiling_bps: {old.name} is guaranteed, not elastic")
        terms = Terms(priority=old.priority if priority is None else priority,
                      ceiling=old.ceiling if ceiling is None else ceiling)
        check_terms(principal, replace(old.request, bandwidth=old.request.bandwidth if bandwidth is None
                                        else bandwidth), terms)
        changes = []
        if terms.priority != old.priority:
            changes.append(f"priority {old.priority} -> {terms.priority}")
        if terms.ceiling != old.ceiling:
            changes.append(f"ceiling {format_bandwidth(old.ceiling)} -> {format_bandwidth(terms.ceiling)}")
        old = replace(old, priority=terms.priority, ceiling=terms.ceiling)
        if old.state in (State.PROVISIONING, State.MOVING) and path is not None:
            raise FailedPrecondition(f"{old.name} is {old.state}; move it once its flows are confirmed")
        request = replace(old.request, bandwidth=old.request.bandwidth if bandwidth is None else bandwidth,
                          end=old.request.end if end is None else end)
        if path is not None:
            request = replace(request, policy=path.policy, include=path.include, exclude=path.exclude,
                              max_hops=path.max_hops)
        if end is not None and end <= self.clock.now():
            raise InvalidArgument(f"end_time: {format_time(end)} is already past")
        if request.end > old.request.end:
            self._check_apart(request, ignore=old.id)
        if request.bandwidth > old.request.bandwidth:
            self._check_hosts(request)
        assert old.route is not None
        route = self.finder.route(request, ignore=old.id) if path is not None else old.route
        if validate_only:
            self.ledger.check(route.direction_ids, request.bandwidth, request.start, request.end, ignore=old.id)
            return replace(old, request=request, route=route, reason="validate_only: checked, nothing was changed")
        if request.bandwidth != old.request.bandwidth:
            changes.append(f"bandwidth {format_bandwidth(old.request.bandwidth)} -> "
                           f"{format_bandwidth(request.bandwidth)}")
        if request.end != old.request.end:
            changes.append(f"end {format_time(old.request.end)} -> {format_time(request.end)}")
        if route_key(route) != route_key(old.route):
            changes.append(f"path -> {route.primary.describe()}")
        reason = "modified: " + ", ".join(changes) if changes else "modified: nothing changed"
        if route_key(route) != route_key(old.route):
            new = self._move(old, route, reason, request)
        else:
            new = replace(old, request=request, updated=self.clock.now(), reason=reason)
            self.ledger.modify(old.id, bandwidth=request.bandwidth, end=request.end,
                               also=lambda db: self._update_row(db, new))
            self._remember(new)
            self._record(old.state, new)
            if request.bandwidth != old.request.bandwidth:
                self.installs.resize(new)
        if request.bandwidth < old.request.bandwidth or request.end < old.request.end:
            self.links.retry_degraded(Trigger(text=f"{old.name} shrank"))
        self._reshare(f"{old.name} modified")
        return self._reservations[new.id]

    def release(self, principal: Principal, name: str, why: str = "") -> Reservation:
        """Release a reservation and its bandwidth; a final one is returned unchanged."""
        old = self._current(principal, name)
        if old.state.is_final:
            return old
        reason = f"released by {principal.name}" + (f": {why}" if why else "")
        self.finder.avoid.pop(old.id, None)
        self._rehomed.pop(old.id, None)
        new = replace(old, state=State.RELEASED, updated=self.clock.now(), reason=reason)
        self.ledger.release(old.id, also=lambda db: self._update_row(db, new))
        self._remember(new)
        self._record(old.state, new)
        self._uninstall(old.id)
        self.links.retry_degraded(Trigger(text=f"{old.name} released"))
        self._reshare(f"{old.name} released")
        return new

    # -- two phases, and the data plane ------------------------------------------------------

    def commit(self, principal: Principal, name: str, note: str = "") -> Reservation:
        """Make a held reservation a normal one (flows at its window's start, unless it is
        provisioned by hand); a retry on a committed one returns it unchanged. `note` joins the
        reason (e.g. the WAN segment that was booked with it)."""
        require_role(principal, "commit reservations")
        old = self._current(principal, name)
        if old.state is State.EXPIRED and old.hold_until and old.hold_until <= old.updated:
            raise FailedPrecondition(f"{old.name}: its hold expired at {format_time(old.hold_until)} and its "
                                     "booking was freed; reserve again")
        if old.state.is_final:
            raise FailedPrecondition(f"{old.name} is {old.state} ({old.reason}); only a held reservation can be "
                                     "committed")
        if old.state is not State.HELD:
            return old  # committed already: a retry
        if SEGMENT_LABEL in old.labels and principal.name != SEGMENT_PRINCIPAL.name:
            raise FailedPrecondition(f"{old.name} waits for its WAN segment from {old.labels[SEGMENT_LABEL]}: tsdn "
                                     "commits it once the neighbour confirmed the segment")
        now = self.clock.now()
        if old.request.start > now:
            state, reason = State.SCHEDULED, ""
        else:
            state, reason = self._started(old.provisioned)
        reason = f"committed by {principal.name}" + (f" ({note})" if note else "") + (f"; {reason}" if reason else "")
        new = replace(old, state=state, updated=now, reason=reason, hold_until=0.0,
                      rate=step_rate(old.schedule, now))
        self.ledger.write(lambda db: self._update_row(db, new))
        self._remember(new)
        return self._begin(State.HELD, new, f"{old.name} committed")

    def abort(self, principal: Principal, name: str) -> Reservation:
        """Give up a held reservation: its booking is freed (RELEASED)."""
        require_role(principal, "abort reservations")
        old = self._current(principal, name)
        if old.state is not State.HELD:
            raise FailedPrecondition(f"{old.name} is {old.state}, not HELD: only a held reservation can be aborted"
                                     + ("" if old.state.is_final else "; release it instead"))
        new = replace(old, state=State.RELEASED, updated=self.clock.now(), reason=f"hold aborted by {principal.name}")
        self.ledger.release(old.id, also=lambda db: self._update_row(db, new))
        self._changed(old.state, new)
        self.links.retry_degraded(Trigger(text=f"{old.name} aborted"))
        self._reshare(f"{old.name} aborted")
        return new

    def provision(self, principal: Principal, name: str) -> Reservation:
        """Want the reservation's flows: installed now when its window runs, else at its start."""
        require_role(principal, "provision reservations")
        old = self._data_plane_change(principal, name)
        if old.provisioned:
            return old
        now = self.clock.now()
        if old.state is State.RESERVED:
            state, reason = self._started()
            new = replace(old, state=state, updated=now, provisioned=True,
                          reason=f"provisioned by {principal.name}; {reason}")
            self.ledger.write(lambda db: self._update_row(db, new))
            self._remember(new)
            return self._begin(State.RESERVED, new, f"{old.name} provisioned")
        return self._commit(replace(old, provisioned=True),
                            f"provisioned by {principal.name}: its flows go in at its window's start")

    def unprovision(self, principal: Principal, name: str) -> Reservation:
        """Remove the reservation's flows and keep its booking (NSI's release): RESERVED until it is
        provisioned again or its window ends."""
        require_role(principal, "release data planes")
        old = self._data_plane_change(principal, name)
        if not old.provisioned:
            return old
        if old.state is State.SCHEDULED:
            return self._commit(replace(old, provisioned=False),
                                f"data plane released by {principal.name}: no flows at its window's start")
        new = self._commit(replace(old, provisioned=False, rate=old.rate if old.schedule else 0),
                           f"data plane released by {principal.name}: flows removed, booking kept until "
                           f"{format_time(old.request.end)}", State.RESERVED)
        self._uninstall(old.id)
        self._reshare(f"{old.name}'s data plane released")
        return new

    def fail(self, reservation_id: str, reason: str) -> Reservation:
        """The reservation cannot go on (its WAN segment was refused or failed): FAILED with `reason`,
        its booking freed and its flows removed; a final one is returned unchanged."""
        old = self._lookup(reservation_id)
        self.finder.avoid.pop(old.id, None)
        self._rehomed.pop(old.id, None)
        if old.state.is_final:
            return old
        new = replace(old, state=State.FAILED, updated=self.clock.now(), reason=reason)
        self.ledger.release(old.id, also=lambda db: self._update_row(db, new))
        self._remember(new)
        self._record(old.state, new)
        self._uninstall(old.id)
        self.links.retry_degraded(Trigger(text=f"{old.name} failed"))
        self._reshare(f"{old.name} failed")
        return new

    def _data_plane_change(self, principal: Principal, name: str) -> Reservation:
        """The reservation whose data plane the caller changes, if it can be changed."""
        old = self._current(principal, name)
        if old.state is State.HELD:
            raise FailedPrecondition(f"{old.name} is HELD: commit it first")
        if old.state.is_final:
            raise FailedPrecondition(f"{old.name} is {old.state}; its booking is gone")
        return old

    def tick(self) -> None:
        """Start the windows that began and expire those that ended, by the clock; reservations
        ended more than `keep_ended` ago leave memory (the store keeps them)."""
        now = self.clock.now()
        self._memory.sweep(now)
        starting = [r for r in self._live.values() if r.state is State.SCHEDULED and r.request.start <= now]
        for old in sorted(starting, key=lambda r: (r.request.start, r.id)):
            if old.route is not None and self.links.down_on(old.route) and old.request.end > now:
                self.links.reroute(old, Trigger(text="its path crosses a link that is down"))
                old = self._reservations[old.id]
            if old.state is State.SCHEDULED and old.request.start <= now < old.request.end:
                state, reason = self._started(old.provisioned)
                new = replace(old, state=state, updated=now, reason=reason, rate=step_rate(old.schedule, now))
                self.ledger.write(lambda db, new=new: self._update_row(db, new))
                self._remember(new)
                self._begin(State.SCHEDULED, new, f"{old.name}'s window started")
        timed_out = [r for r in self._live.values() if r.state is State.HELD and r.hold_until <= now < r.request.end]
        for old in sorted(timed_out, key=lambda r: (r.hold_until, r.id)):
            new = replace(old, state=State.EXPIRED, updated=now, reason=(
                f"hold timed out at {format_time(old.hold_until)}: not committed within "
                f"{old.hold_until - old.created:.0f} s; its booking is freed"))
            self.ledger.release(old.id, also=lambda db, new=new: self._update_row(db, new))
            self._changed(old.state, new)
        if timed_out:
            self.links.retry_degraded(Trigger(text="holds timed out"))
            self._reshare(f"{len(timed_out)} hold{'s' if len(timed_out) > 1 else ''} timed out")
        self._next_steps(now)
        self.installs.expire_paths()
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
        self.links.retry_degraded(Trigger(text="reservations ended"))
        self._reshare(", ".join(r.name for r in ending[:3]) + (f" and {len(ending) - 3} more" if len(ending) > 3
                                                                 else "") + " ended")

    def _next_steps(self, now: float) -> None:
        """Reservations with a schedule whose next step began: their meter follows it."""
        for old in [self._live[i] for i in self._memory.scheduled if not self._live[i].state.booked_only]:
            step = step_at(old.schedule, now)
            if step is not None and step.bandwidth != old.rate:
                new = replace(old, rate=step.bandwidth, updated=now, reason=(
                    f"schedule: {format_bandwidth(old.meter_bps)} -> {format_bandwidth(step.bandwidth)} "
                    f"{format_window(step.start, step.end)}"))
                self.ledger.write(lambda db, new=new: self._update_row(db, new))
                self._changed(old.state, new)
                if new.id in self.installs:
                    self.installs.resize(new)

    def next_deadline(self) -> float:
        """When `tick` next has something to do (math.inf when nothing is pending)."""
        return min(self._memory.next_deadline(), self.installs.next_path_expiry())

    def sweep(self) -> None:
        """Forget the ended reservations held in memory for `keep_ended` (`tick` does it too)."""
        self._memory.sweep(self.clock.now())

    def next_sweep(self) -> float:
        """When `sweep` next has something to do, at least EVICTION_INTERVAL after the last one
        (math.inf: nothing held to forget)."""
        return self._memory.next_sweep()

    # -- internals -----------------------------------------------------------------------

    def _new_id(self) -> str:
        """A fresh reservation id whose cookie bits are not those of a shared path's entries."""
        while True:
            value = self._random.getrandbits(128)
            if not is_path_cookie_bits(value & COOKIE_ID_MASK):
                return f"{value:032x}"

    def _find(self, name: str) -> Reservation:
        return self._lookup(store.reservation_id_of(name))

    def _lookup(self, reservation_id: str) -> Reservation:
        """The reservation `reservation_id`: from memory, else (ended and swept out) from the store."""
        found = self._reservations.get(reservation_id)
        if found is not None:
            return found
        return store.read_row(self.ledger.query, self.topology, reservation_id)

    def _by_request_id(self, owner: str, request_id: str) -> Reservation | None:
        """The reservation `owner` created with `request_id`, in memory or (swept out) in the store."""
        known = self._memory.by_request(owner, request_id)
        if known is not None:
            return self._lookup(known)
        return store.read_by_request_id(self.ledger.query, self.topology, owner, request_id)

    def _remember(self, reservation: Reservation) -> None:
        self._memory.remember(reservation)

    def _insert_row(self, db: sqlite3.Connection, reservation: Reservation) -> None:
        """Inside a ledger transaction: the new reservation's row, and its companion's rows."""
        store.insert(db, reservation)
        self._companion_rows(db, reservation)

    def _update_row(self, db: sqlite3.Connection, reservation: Reservation) -> None:
        """Inside a ledger transaction: the reservation's row as it is now, and its companion's rows."""
        store.update(db, reservation)
        self._companion_rows(db, reservation)

    def _companion_rows(self, db: sqlite3.Connection, reservation: Reservation) -> None:
        if self.companion is not None and (write := self.companion(reservation)) is not None:
            write(db)

    def _changed(self, previous: State | None, reservation: Reservation, decision: Decision | None = None) -> None:
        """A reservation changed (its row is written): remembered, and one event (with `decision`)."""
        self._remember(reservation)
        self._record(previous, reservation, decision)

    def _confirming(self, reservation_id: str) -> bool:
        """Whether a change of the reservation's flows waits for the switches to confirm it."""
        return self.provisioning and reservation_id in self.installs

    def _record(self, previous: State | None, reservation: Reservation, decision: Decision | None = None) -> None:
        self._sequence += 1
        now = self.clock.now()
        self._events.append(Event(self._sequence, now, previous, reservation, reservation.reason, decision))
        self._memory.note(reservation.id, HistoryEntry(now, reservation.state, reservation.reason, decision))

    def _load(self) -> None:
        now = self.clock.now()
        for reservation in store.read_loaded(self.ledger.query, self.topology, self.keep_ended, now):
            self._remember(reservation)
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
        self.repairs = LedgerRepair(self.topology, self.ledger, self.finder, self.clock, self.provisioning,
                                    self._live, self._update_row, self._changed).fit()
        if self.provisioning:
            self._resume_provisioning()
        self._reshare("the controller started")

    def _resume_provisioning(self) -> None:
        """After a restart: plans of reservations on the switches are known again (their ids
        taken). Those caught installing or moving are confirmed once reconciliation has made
        each switch of their plan hold it (`switch_reconciled`)."""
        for reservation in sorted(self._live.values(), key=lambda r: (r.created, r.id)):
            if reservation.state.booked_only:
                continue
            self.installs.resume(reservation, reservation.state in (State.PROVISIONING, State.MOVING))

    def switch_reconciled(self, switch: str) -> None:
        """The adapter made `switch` hold exactly `switch_plan(switch)`: reservations caught
        mid-change by a restart are confirmed once every switch of theirs was."""
        for reservation_id in self.installs.reconciled(switch):
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


def _told(reason: str | Decision) -> tuple[Decision | None, str]:
    """(the decision, the reason people read) of a change told as text or as a decision."""
    if isinstance(reason, Decision):
        return reason, render(reason)
    return None, reason


def _share_change(r: Reservation, share: int) -> ShareChange:
    """An elastic reservation's meter going to `share`, with its terms."""
    return ShareChange(r.name, r.meter_bps, share, r.request.bandwidth, r.ceiling, r.priority)


class _BatchSoFar:
    """The requests of a `create_many` trial admitted so far (booked nowhere but in the trial), by
    what `_check_apart` compares: per DTN pair those without prefixes, and those with."""

    def __init__(self) -> None:
        self._on_pair: dict[tuple[str, str], list[tuple[int, PathRequest]]] = {}
        self._prefixed: dict[int, PathRequest] = {}
        self._prefixes = PrefixIndex()
        self._tagged: list[tuple[int, PathRequest]] = []

    def add(self, index: int, request: PathRequest) -> None:
        """Item `index` of the batch was admitted in the trial as `request`."""
        if request.src_vlan is not None or request.dst_vlan is not None:
            self._tagged.append((index, request))
        if request.src_prefix is None or request.dst_prefix is None:
            self._on_pair.setdefault((request.src, request.dst), []).append((index, request))
        else:
            self._prefixed[index] = request
            self._prefixes.add(index, (request.src_prefix, request.dst_prefix))

    def tagged(self) -> list[tuple[int, PathRequest]]:
        """(index, request) of the admitted ones with a VLAN at an end."""
        return list(self._tagged)

    def candidates(self, request: PathRequest) -> list[tuple[int, PathRequest]]:
        """(index, request) of the admitted ones whose flows `request`'s could collide with."""
        if request.src_prefix is None or request.dst_prefix is None:
            return self._on_pair.get((request.src, request.dst), [])
        near = self._prefixes.candidates((request.src_prefix, request.dst_prefix))
        return sorted((index, self._prefixed[index]) for index in near)  # type: ignore[index]


def _vlan_ports(topology: Topology, request: PathRequest) -> dict[tuple[str, int, int], tuple[str, str]]:
    """(switch, port, VLAN) of each tagged end of `request` -> (its field, the end's name)."""
    found = {}
    for field, end, vlan in (("src_vlan", request.src, request.src_vlan), ("dst_vlan", request.dst, request.dst_vlan)):
        if vlan is not None:
            up, _ = topology.access(end, request.via)
            found[(up.dst, up.dst_port, vlan)] = (field, end)
    return found


def _clash_filter(new: PathRequest) -> Callable[[PathRequest], bool]:
    """A test that is False for a request `plans.clash` would surely find no clash with (no prefix
    of it overlaps a prefix of `new`), on cached address ranges: a request is compared with
    thousands of others without parsing their prefixes again each time."""
    if new.src_prefix is None or new.dst_prefix is None:
        return lambda other: True
    (a_low, a_high), (b_low, b_high) = _prefix_range(new.src_prefix), _prefix_range(new.dst_prefix)

    def may_clash(other: PathRequest) -> bool:
        if other.src_prefix is None or other.dst_prefix is None:
            return True
        c_low, c_high = _prefix_range(other.src_prefix)
        d_low, d_high = _prefix_range(other.dst_prefix)
        return ((a_low <= c_high and c_low <= a_high) or (a_low <= d_high and d_low <= a_high)
                or (b_low <= c_high and c_low <= b_high) or (b_low <= d_high and d_low <= b_high))
    return may_clash


@functools.lru_cache(maxsize=1 << 15)
def _prefix_range(prefix: str) -> tuple[int, int]:
    """The first and last address of an IPv6 prefix (canonical text), as integers."""
    network = ipaddress.IPv6Network(prefix)
    return int(network.network_address), int(network.broadcast_address)


def _item_name(index: int, item: BatchItem) -> str:
    """`requests[3] (request_id 'abc')`: a batch item as messages name it."""
    return f"requests[{index}]" + (f" (request_id {validation.shown(item.request_id)})" if item.request_id else "")


def _check_batch(items: Sequence[BatchItem]) -> None:
    """InvalidArgument naming the first item whose request id, labels or prefixes are malformed, or
    whose request id an earlier item of the batch has."""
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        try:
            validation.request_id(item.request_id)
            _check_labels(item.labels or {})
            validation.prefix_pair(item.request.src_prefix, item.request.dst_prefix)
        except InvalidArgument as error:
            raise InvalidArgument(f"{_item_name(index, item)}: {error}") from None
        if item.request_id in seen:
            raise InvalidArgument(f"{_item_name(index, item)}: the same request_id as "
                                  f"requests[{seen[item.request_id]}]; each request of a batch needs its own")
        if item.request_id:
            seen[item.request_id] = index


def _aborted(items: Sequence[BatchItem], outcomes: list[Reservation | TsdnError],
             refused: int) -> list[Reservation | TsdnError]:
    """The answer of an all-or-nothing batch whose item `refused` (the first) was refused: each
    refused item its own error, every other one `BatchAborted` naming that first refusal."""
    first = outcomes[refused]
    why = (f"not booked: all_or_nothing, and {_item_name(refused, items[refused])} was refused "
           f"({first.code}: {first})")
    return [outcome if isinstance(outcome, TsdnError) else BatchAborted(why) for outcome in outcomes]


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
    keys = ("src", "dst", "bandwidth", "policy", "include", "exclude", "max_hops", "protect", "src_prefix",
            "dst_prefix", "src_vlan", "dst_vlan")
    return all(getattr(a, k) == getattr(b, k) for k in keys)
