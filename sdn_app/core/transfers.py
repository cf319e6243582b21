"""Transfers between DTNs, run by their agents on a path the controller books for them.

A service asks for a transfer (`start`); the desk books a reservation between the two DTNs
and, once its flows are in place, hands the destination's agent a RECEIVE job. When that agent
says it listens (`receiver_ready`), the source's agent gets a SEND job with the receiver's
address and port. The sender's rate reports (`report`) feed the reservation book's advisor,
which moves an underperforming reservation; both sides' ends (`finished`) decide how the
transfer ended, and the reservation is released then, or at once when anything fails.

The sender is paced just under its reservation's meter (`Reservation.meter_bps`). The meter can
change while it sends (an elastic share re-solved, a deadline schedule's next step): the desk
sees it in the book's events and hands the sender's agent a PACE job with the new pacing.

With a deadline the book schedules the bandwidth (`ReservationBook.book_by_deadline`); each
sender report projects the finish from the rate of the last few reports, and watchers are told
once when the projection passes the deadline (the transfer falls behind), and once when it is
back on schedule.

    desk = TransferDesk(book, registry, clock)
    transfer = desk.start(principal, TransferSpec("caltech-dtn1", "ucsd-dtn1", 40 * G, size=50 * 10**9))
    desk.observe(book.take_events())          # the worker does this after every call
    desk.take_events()                       # JobOffers for the agents, TransferEvents for watchers

Pure: the worker owns it, ticks it (start and stall timeouts) and passes it the book's events.

Stored with the reservations: every transfer is a row of the `transfers` table in the ledger's
SQLite file (`transfer_store`), written in the ledger's transactions. A transfer's row is
written with its reservation's row in one transaction whenever a change touches both (the
transfer started with its booking; ended with its release; failed because its reservation
ended), so after a crash at any point a live transfer has a live reservation and an ended one
a final reservation. Other changes (a state, a side's end) are written as they happen, the
sender's rates at most every `RATE_WRITE_INTERVAL` seconds.

A desk over a file that holds transfers picks them up (a controller restart):
- RUNNING: keeps running; its agents keep reporting to the new controller, and their jobs are
  handed out again to agents that reconnect (an agent runs each side once);
- STARTING: waits again for the receiver to listen, its RECEIVE job handed out again;
- RESERVING: starts the receiver when the path is ACTIVE, else waits for the switches to
  confirm it (the book does that once each switch is reconciled);
- with its reservation ended or gone, or a DTN the topology no longer has: FAILED with a reason
  that says the controller restarted, its path released, its agents told to STOP;
- ended: kept for Get and List (the last `KEEP_ENDED`).
The timeouts of the transfers picked up count from the restart, and wait up to `RESTART_GRACE`
for the agent they need to register again (agents are not stored; they register again within a
heartbeat once their connection is back). A row that cannot be read stops the desk with
`CorruptRow`, naming the row and the field.
"""

from __future__ import annotations

import math
import os
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any

from sdn_app.core import transfer_store as store
from sdn_app.core import validation
from sdn_app.core.agents import Agent, AgentRegistry, AgentState
from sdn_app.core.clock import Clock
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from sdn_app.core.ledger import AlsoWrite
from sdn_app.core.paths import PathRequest
from sdn_app.core.reports import ENGINES, Pinning, RateReport, StreamRate
from sdn_app.core.rerouting.advisor import Health
from sdn_app.core.reservation import Event, Principal, Reservation, Role, ScheduleStep, State, Terms
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.units import format_bandwidth, format_bytes, format_time

START_TIMEOUT = 30.0  # seconds for the path to be installed, and again for the receiver to listen
STALL_TIMEOUT = 15.0  # seconds without a report from a running sender
RESTART_GRACE = 150.0  # seconds a transfer picked up at a restart waits for its agent to register again
RATE_WRITE_INTERVAL = 5.0  # seconds between writes of a running transfer's latest rates
PACING_SHARE = 0.95  # senders are paced to this share of the reservation's meter, so meters never drop
PROJECTION_REPORTS = 5  # a deadline transfer's finish is projected from the rate over this many reports
MIN_PROJECTION_REPORTS = 3  # and judged against its deadline only from this many (past the ramp-up)
# Back on schedule only once the projection is this share of the time left before the deadline:
# the smoothed rate still wobbles by a few percent, and a projection hovering at the deadline
# would otherwise cross it on every report.
RECOVERY_MARGIN = 0.02
KEEP_ENDED = 1000  # ended transfers remembered for Get/List
TRANSFER_LABEL = "tsdn/transfer"
MAX_STREAMS = 256
MAX_FILES = 10_000
_CONTROLLER = Principal("tsdn", Role.ADMIN)  # the desk reading any reservation


class TransferState(StrEnum):
    """Where a transfer is."""

    RESERVING = "RESERVING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def ended(self) -> bool:
        """Whether nothing more happens to the transfer."""
        return self in (TransferState.SUCCEEDED, TransferState.FAILED, TransferState.CANCELLED)


class JobRole(StrEnum):
    """Which side of a transfer a job runs; STOP: end that side now; PACE: hold the running
    sender to a new `pacing_bps` (its reservation's meter changed)."""

    RECEIVE = "RECEIVE"
    SEND = "SEND"
    STOP = "STOP"
    PACE = "PACE"


SIDES = (JobRole.RECEIVE, JobRole.SEND)


@dataclass(frozen=True)
class TransferSpec:
    """What a service asks for: `bandwidth` from `src` to `dst`, `size` bytes memory-to-memory
    or `files` (absolute paths on `src`) into `destination` (a directory on `dst`).

    With a `deadline` (epoch seconds) the book schedules the bandwidth so that `size` bytes arrive
    by then: `bandwidth` is 0 (the schedule sets it) and `size` is required."""

    src: str
    dst: str
    bandwidth: int
    size: int | None = None
    files: tuple[str, ...] = ()
    destination: str = ""
    streams: int = 1
    engine: str = "builtin"
    policy: str = "shortest"
    pace: int | None = None  # nominal bit/s the sender is held to, below the booking (a slow disk)
    deadline: float | None = None  # epoch seconds by which `size` bytes must have arrived
    ceiling: int = 0  # elastic: `bandwidth` is the floor, the share grows up to this by priority (0: guaranteed)
    priority: int = 0  # 0: the caller's own

    def check(self) -> None:
        """Raise InvalidArgument naming the first field that is wrong (a deadline in the past is
        the desk's to refuse: it knows the time)."""
        if self.deadline is not None:
            self._check_deadline()
        elif self.bandwidth <= 0:
            raise InvalidArgument(f"bandwidth_bps: must be greater than zero, got {self.bandwidth} (or give a "
                                  "deadline and let the schedule set it)")
        if (self.size is None) == (not self.files):
            raise InvalidArgument("give exactly one of size_bytes (memory-to-memory) and files (disk-to-disk)")
        if self.size is not None and self.size <= 0:
            raise InvalidArgument(f"size_bytes: must be positive, got {self.size}")
        if len(self.files) > MAX_FILES:
            raise InvalidArgument(f"files: {len(self.files)} paths, at most {MAX_FILES}")
        for path in self.files:
            if not PurePosixPath(path).is_absolute() or "\0" in path:
                raise InvalidArgument(f"files: {path!r} is not an absolute path on the source DTN")
        if self.files and not PurePosixPath(self.destination).is_absolute():
            raise InvalidArgument(f"destination: {self.destination!r} is not an absolute directory on the "
                                  "destination DTN (files need one)")
        if self.size is not None and self.destination:
            raise InvalidArgument("destination: only for files; a memory-to-memory transfer writes nothing")
        if not 1 <= self.streams <= MAX_STREAMS:
            raise InvalidArgument(f"streams: must be between 1 and {MAX_STREAMS}, got {self.streams}")
        if self.engine not in ENGINES:
            raise InvalidArgument(f"engine {self.engine!r}: unknown; one of {', '.join(ENGINES)}")
        if self.pace is not None and self.deadline is None and not 0 < self.pace < self.bandwidth:
            raise InvalidArgument(f"pace_bps: {format_bandwidth(self.pace)} must be above 0 and below the booked "
                                  f"bandwidth_bps ({format_bandwidth(self.bandwidth)}); leave it unset to send at "
                                  "the booking")

    def _check_deadline(self) -> None:
        assert self.deadline is not None
        if not math.isfinite(self.deadline):
            raise InvalidArgument(f"deadline: {self.deadline!r} is not a point in time")
        if self.files:
            raise InvalidArgument("files: a transfer with a deadline needs size_bytes: the controller cannot know "
                                  "the size of files on the source DTN to schedule them; send them without a "
                                  "deadline, or give the size as a memory-to-memory transfer")
        if self.size is None:
            raise InvalidArgument("size_bytes: a transfer with a deadline needs its size, to schedule the bandwidth")
        if self.bandwidth != 0:
            raise InvalidArgument(f"bandwidth_bps: leave it 0 with a deadline (got {format_bandwidth(self.bandwidth)})"
                                  ": the schedule sets the bandwidth")
        if self.pace is not None:
            raise InvalidArgument("pace_bps: not with a deadline: the schedule sets the sender's rate, and one held "
                                  "below it would miss the schedule")
        if self.ceiling:
            raise InvalidArgument("ceiling_bps: not with a deadline: the schedule sets the bandwidth")


@dataclass(frozen=True)
class Job:
    """One side of a transfer for the agent of `dtn`."""

    transfer_id: str
    role: JobRole
    dtn: str
    spec: TransferSpec
    reservation: str = ""
    peer_host: str = ""  # SEND: the receiver's address
    peer_port: int = 0  # SEND: the receiver's port
    pacing_bps: int | None = None  # SEND, PACE: as sent on the wire (emulated rate in Mininet)

    @property
    def transfer(self) -> str:
        """The API name of the transfer."""
        return f"transfers/{self.transfer_id}"


@dataclass(frozen=True)
class Transfer:
    """A transfer as the desk knows it."""

    id: str
    owner: str
    spec: TransferSpec
    state: TransferState
    reason: str
    reservation_id: str
    created: float
    updated: float
    request_id: str = ""
    rate: RateReport | None = None  # the sender's latest report
    receiver_rate: RateReport | None = None
    checksums_verified: bool | None = None
    sides_done: frozenset[JobRole] = frozenset()
    last_report: float = 0.0  # when the sender last reported (or the sender started)
    # The jobs handed to the agents so far: RECEIVE, then SEND, then the latest PACE (if any).
    handed: tuple[Job, ...] = ()
    paced_meter: int = 0  # the reservation's meter_bps (nominal) the sender was last paced at; 0: no sender yet
    schedule: tuple[ScheduleStep, ...] = ()  # a deadline transfer's steps, as its reservation has them
    projected_finish: float | None = None  # a deadline transfer: when it will finish at its recent rate
    behind: bool = False  # a deadline transfer projected to finish after its deadline

    @property
    def name(self) -> str:
        """The API name, `transfers/{id}`."""
        return f"transfers/{self.id}"

    @property
    def reservation(self) -> str:
        """The API name of its reservation."""
        return f"reservations/{self.reservation_id}"

    @property
    def acting_owner(self) -> Principal:
        """Who the desk acts as on the transfer's reservation (the book checks ownership)."""
        return Principal(self.owner, Role.SERVICE)

    @property
    def unfinished(self) -> tuple[Job, ...]:
        """The sides (RECEIVE, SEND jobs) handed out that have not reported their end."""
        return tuple(job for job in self.handed if job.role in SIDES and job.role not in self.sides_done)

    @property
    def live_jobs(self) -> tuple[Job, ...]:
        """The jobs an agent that reconnects is handed again: the unfinished sides, and the
        latest PACE while the sender has not ended."""
        sending = any(job.role is JobRole.SEND for job in self.unfinished)
        return self.unfinished + tuple(job for job in self.handed if job.role is JobRole.PACE and sending)

    @property
    def pacing(self) -> int | None:
        """The pacing (on the wire) the sender was last handed; None before its SEND."""
        paced = [job for job in self.handed if job.role in (JobRole.SEND, JobRole.PACE)]
        return paced[-1].pacing_bps if paced else None

    @property
    def bandwidth(self) -> int:
        """The bandwidth booked: the spec's, or the peak of a deadline transfer's schedule."""
        return self.spec.bandwidth or max((step.bandwidth for step in self.schedule), default=0)


@dataclass(frozen=True)
class TransferEvent:
    """A transfer changed state, or (previous == state) reported its rate."""

    previous: TransferState | None
    state: TransferState
    reason: str
    transfer: Transfer
    time: float
    path: tuple[str, ...] = ()  # the switches its reservation crossed then


@dataclass(frozen=True)
class JobOffer:
    """A job handed to the agent of `job.dtn`."""

    job: Job


@dataclass
class TransferDesk:
    """Every transfer of the controller's state file; one owner: the core thread.

    Constructing it loads the transfers stored in the book's ledger file and picks up the live
    ones (see the module's docstring); `CorruptRow` when a stored row cannot be read.
    """

    book: ReservationBook
    agents: AgentRegistry
    clock: Clock
    emulation_scale: float = 1.0
    start_timeout: float = START_TIMEOUT
    stall_timeout: float = STALL_TIMEOUT
    _transfers: OrderedDict[str, Transfer] = field(default_factory=OrderedDict, init=False)
    _by_reservation: dict[str, str] = field(default_factory=dict, init=False)
    _by_request: dict[tuple[str, str], str] = field(default_factory=dict, init=False)
    # STOPs of ended transfers, kept (until the side reports its end, or start_timeout) for an agent
    # whose job stream was down when they were offered: (transfer, side) -> (job, until)
    _stops: dict[tuple[str, JobRole], tuple[Job, float]] = field(default_factory=dict, init=False)
    # Rows to write in the transaction of the reservation's next row (`_companion`): transfer id -> row
    _staged: dict[str, Transfer] = field(default_factory=dict, init=False)
    _recovered: dict[str, float] = field(default_factory=dict, init=False)  # picked up at a restart -> when
    _rates_written: dict[str, float] = field(default_factory=dict, init=False)  # transfer -> when rates were
    # A deadline transfer's latest sender reports: transfer -> (end, bytes_total) of each
    _recent: dict[str, deque[tuple[float, int]]] = field(default_factory=dict, init=False)
    _events: list[TransferEvent | JobOffer] = field(default_factory=list, init=False)
    _random: random.Random = field(default_factory=lambda: random.Random(os.urandom(16)), init=False)

    def __post_init__(self) -> None:
        self.book.ledger.write(store.create_table)
        self.book.companion = self._companion
        self._load()

    # -- services ------------------------------------------------------------------------

    def start(self, principal: Principal, spec: TransferSpec, request_id: str = "") -> Transfer:
        """Book a path for `spec` and start it; the same `request_id` again returns the same transfer.

        Nothing is booked when the spec is wrong (a deadline that is not in the future too), an
        agent of the two DTNs is not online, or the path has no room (the book's error says which
        link, or which host limit; for a deadline, when it could be met at the earliest).
        """
        if principal.role not in (Role.SERVICE, Role.ADMIN):
            raise PermissionDenied(f"{principal.name} (role {principal.role}) may not start transfers: "
                                   "only service and admin tokens may")
        validation.request_id(request_id)
        if request_id and (principal.name, request_id) in self._by_request:
            earlier = self._transfers.get(self._by_request[(principal.name, request_id)])
            if earlier is not None and earlier.spec == spec:
                return earlier
            if earlier is not None:
                raise AlreadyExists(f"request_id {request_id!r} was used for {earlier.name}, a different transfer; "
                                    "use a new request_id for a new transfer")
        spec.check()
        now = self.clock.now()
        if spec.deadline is not None and spec.deadline <= now:
            raise InvalidArgument(f"deadline: {format_time(spec.deadline)} is not in the future (now "
                                  f"{format_time(now)})")
        for dtn, side in ((spec.src, "source"), (spec.dst, "destination")):
            if dtn not in self.book.topology.dtns:
                raise InvalidArgument(f"{side} dtn {dtn!r}: not a DTN of topology {self.book.topology.name}")
            try:
                agent = self.agents.get(dtn)
            except NotFound:
                raise FailedPrecondition(f"{side} dtn {dtn}: no agent has registered; start `tsdn agent run` "
                                         "there first") from None
            if agent.state is not AgentState.ONLINE:
                raise FailedPrecondition(f"{side} dtn {dtn}: its agent is {agent.state} ({agent.reason})")
        transfer_id = f"{self._random.getrandbits(128):032x}"
        transfer = Transfer(transfer_id, principal.name, spec, TransferState.RESERVING, "installing the path", "",
                            now, now, request_id)
        self._staged[transfer_id] = transfer  # its row is written with the reservation's
        try:
            reservation = self._book(principal, spec, transfer_id, now)
        finally:
            unwritten = self._staged.pop(transfer_id, None)
        transfer = replace(transfer, reservation_id=reservation.id, schedule=reservation.schedule)
        if unwritten is not None:  # another desk took the book's companion (tests): write it alone
            self._write(transfer)
        self._transfers[transfer_id] = transfer
        self._by_reservation[reservation.id] = transfer_id
        if request_id:
            self._by_request[(principal.name, request_id)] = transfer_id
        self._emit(None, transfer, f"path booked: {reservation.name}")
        if reservation.state is State.ACTIVE:  # ledger only: nothing to install
            self._start_receiver(transfer, f"path ready; starting the receiver on {spec.dst}")
        return self._transfers[transfer_id]

    def _book(self, principal: Principal, spec: TransferSpec, transfer_id: str, now: float) -> Reservation:
        """The reservation of a new transfer: open-ended at its bandwidth, or scheduled to its deadline."""
        labels = {TRANSFER_LABEL: transfer_id}
        terms = Terms(priority=spec.priority, ceiling=spec.ceiling)
        if spec.deadline is None:
            return self.book.create(principal, PathRequest(spec.src, spec.dst, spec.bandwidth, now, math.inf,
                                                           spec.policy), labels=labels, terms=terms)
        assert spec.size is not None
        # The book schedules the meter's nominal bandwidth. The sender moves PACING_SHARE of it, and on
        # emulated links `emulation_scale` of that: the bits booked are what the real bytes take then.
        size_bits = math.ceil(spec.size * 8 / (self.emulation_scale * PACING_SHARE))
        return self.book.book_by_deadline(principal, spec.src, spec.dst, size_bits, spec.deadline, spec.policy,
                                          labels=labels, terms=terms)

    def get(self, principal: Principal, name: str) -> Transfer:
        """The transfer `transfers/{id}` (or the id), if the caller may see it."""
        transfer = self._transfers.get(name.removeprefix("transfers/"))
        if transfer is None or not (principal.may_see(transfer.owner)):
            raise NotFound(f"transfer {validation.shown(name)} not found")
        return transfer

    def list(self, principal: Principal) -> list[Transfer]:
        """The transfers the caller may see, newest first."""
        return [t for t in reversed(self._transfers.values()) if principal.may_see(t.owner)]

    def path(self, transfer: Transfer) -> tuple[str, ...]:
        """The switches the transfer's reservation crosses now (empty once released or gone)."""
        try:
            reservation = self.book.get(_CONTROLLER, transfer.reservation)
        except (NotFound, InvalidArgument):
            return ()
        if reservation.state.is_final or reservation.route is None:
            return ()
        return tuple(hop.switch for hop in reservation.route.primary.hops)

    def cancel(self, principal: Principal, name: str) -> Transfer:
        """Stop both sides and release the path; an ended transfer is returned unchanged."""
        transfer = self.get(principal, name)  # agents see no transfers: NotFound
        if not transfer.state.ended:
            self._end(transfer, TransferState.CANCELLED, f"cancelled by {principal.name}")
        return self._transfers[transfer.id]

    # -- agents --------------------------------------------------------------------------

    def jobs_for(self, principal: Principal, dtn: str, bound_dtn: str | None = None) -> list[Job]:
        """The jobs of live transfers handed to the agent of `dtn` and not yet ended there, and
        the STOPs of recently ended transfers whose side there has not reported its end.
        NotFound for a DTN the topology does not have (no job could ever come), InvalidArgument
        for an empty or over-long name."""
        self._check_agent(principal, dtn, bound_dtn)
        validation.known_dtn(self.book.topology.dtns, dtn, "dtn", self.book.topology.name)
        live = [job for transfer in self._transfers.values() if not transfer.state.ended
                for job in transfer.live_jobs if job.dtn == dtn]
        return live + [job for job, _ in self._stops.values() if job.dtn == dtn]

    def receiver_ready(self, principal: Principal, dtn: str, name: str, port: int, host: str = "",
                       bound_dtn: str | None = None) -> tuple[bool, str]:
        """The receiver listens on `port`: hand the sender its job. Returns (stop, why).

        The sender connects to the destination DTN's address in the topology, which the
        reservation's flows match; `host` (where the receiver says it listens) is used instead
        only when no switch is controlled (ledger only), where no flow needs to match."""
        transfer = self._side(principal, dtn, name, JobRole.RECEIVE, bound_dtn)
        if transfer.state.ended:
            return True, transfer.reason
        if not 0 < port <= 65535:
            raise InvalidArgument(f"listening_port: must be between 1 and 65535, got {port}")
        if transfer.state is TransferState.STARTING:
            now = self.clock.now()
            address = str(self.book.topology.dtns[transfer.spec.dst].ipv4)
            if host and not self.book.provisioning:
                address = host
            meter = self._meter(transfer)
            pacing = pacing_bps(transfer.spec, meter, self.emulation_scale)
            send = Job(transfer.id, JobRole.SEND, transfer.spec.src, transfer.spec, transfer.reservation, address,
                       port, pacing)
            self._recovered.pop(transfer.id, None)
            self._set(transfer, TransferState.RUNNING, f"receiver listens on {address}:{port}", last_report=now,
                      handed=(*transfer.handed, send), paced_meter=meter)
            self._events.append(JobOffer(send))
        return False, ""

    def report(self, principal: Principal, dtn: str, name: str, role: JobRole, report: RateReport,
               bound_dtn: str | None = None) -> tuple[bool, str]:
        """One interval of one side. The sender's rate (scaled back to nominal) goes to the
        book's advisor. Returns (stop, why): stop when the transfer ended meanwhile."""
        transfer = self._side(principal, dtn, name, role, bound_dtn)
        if transfer.state.ended:
            return True, transfer.reason
        _check_rate(report, "rate")
        now = self.clock.now()
        if role is JobRole.RECEIVE:
            self._transfers[transfer.id] = transfer = replace(transfer, receiver_rate=report)
            self._write_rates(transfer, now)
            return False, ""
        self._recovered.pop(transfer.id, None)
        transfer = replace(transfer, rate=report, last_report=now, updated=now)
        crossed = ""
        if transfer.spec.deadline is not None:
            transfer, crossed = self._project(transfer, report, now)
        self._transfers[transfer.id] = transfer
        if crossed:  # stored at once: told once per crossing, also across a restart
            self._write(transfer)
            self._rates_written[transfer.id] = now
        else:
            self._write_rates(transfer, now)
        self._events.append(TransferEvent(transfer.state, transfer.state, "rate", transfer, now, self.path(transfer)))
        if crossed:
            self._emit(transfer.state, transfer, crossed)
        # The book ignores rates while the path is being installed or moved.
        nominal = report.bits_per_second / self.emulation_scale
        self.book.report_rate(transfer.acting_owner, transfer.reservation, nominal,
                              Health(report.retransmits, report.rtt_ms, report.cpu_percent))
        return False, ""

    def finished(self, principal: Principal, dtn: str, name: str, role: JobRole, ok: bool, error: str,
                 checksums_verified: bool | None, final: RateReport | None,
                 bound_dtn: str | None = None) -> Transfer:
        """One side ended. A failure fails the transfer; both sides ending well end it SUCCEEDED
        (for files only when the receiver verified every checksum). Either way the path is released."""
        transfer = self._side(principal, dtn, name, role, bound_dtn)
        self._stops.pop((transfer.id, role), None)
        if transfer.state.ended:
            return transfer
        if final is not None:
            _check_rate(final, "final")
        side = "sender" if role is JobRole.SEND else "receiver"
        if final is not None:
            transfer = replace(transfer, **({"rate": final} if role is JobRole.SEND else {"receiver_rate": final}))
        if role is JobRole.RECEIVE and checksums_verified is not None:
            transfer = replace(transfer, checksums_verified=checksums_verified)
        transfer = replace(transfer, sides_done=transfer.sides_done | {role})
        self._transfers[transfer.id] = transfer
        if not ok:
            self._end(transfer, TransferState.FAILED, f"{side} on {dtn} failed: {error or 'no reason given'}")
        elif role is JobRole.RECEIVE and transfer.spec.files and checksums_verified is not True:
            self._end(transfer, TransferState.FAILED, f"receiver on {dtn}: checksums not verified")
        elif transfer.sides_done >= {JobRole.SEND, JobRole.RECEIVE}:
            rate = transfer.rate
            achieved = f" at {format_bandwidth(rate.bits_per_second / self.emulation_scale)}" if rate else ""
            verdict = {True: ", checksums verified", False: ", checksums FAILED", None: ""}[
                transfer.checksums_verified]
            self._end(transfer, TransferState.SUCCEEDED, f"done{achieved}{verdict}")
        else:
            self._write(transfer)  # a restart must not hand this side its job again
        return self._transfers[transfer.id]

    # -- the worker ----------------------------------------------------------------------

    def observe(self, events: list[Event]) -> None:
        """Follow the reservations of live transfers: start the receiver once the path is in
        place, fail the transfer when its reservation ends, tell watchers of moves, and hand a
        running sender a PACE job when its reservation's meter changes."""
        for event in events:
            transfer_id = self._by_reservation.get(event.reservation.id)
            transfer = self._transfers.get(transfer_id or "")
            if transfer is None or transfer.state.ended:
                continue
            reservation = event.reservation
            if reservation.schedule != transfer.schedule:  # stored with its next write
                transfer = self._transfers[transfer.id] = replace(transfer, schedule=reservation.schedule)
            if reservation.state is State.ACTIVE and transfer.state is TransferState.RESERVING:
                self._start_receiver(transfer, f"path ready; starting the receiver on {transfer.spec.dst}")
            elif reservation.state.is_final:
                self._end(transfer, TransferState.FAILED, _path_ended(reservation), release=False)
            else:
                repaced = self._repace(transfer, reservation.meter_bps, event.reason)
                if event.previous not in (None, State.SCHEDULED, State.PROVISIONING) \
                        and not (repaced and event.previous is reservation.state):  # moved, degraded...
                    self._emit(transfer.state, self._transfers[transfer.id],
                               f"path {reservation.state}: {reservation.reason}")

    def tick(self) -> None:
        """Fail transfers whose path, receiver or sender is overdue."""
        now = self.clock.now()
        for key, (_, until) in list(self._stops.items()):
            if until <= now:
                del self._stops[key]
        for transfer in list(self._transfers.values()):
            if transfer.state.ended or now < self._deadline(transfer):
                continue
            if transfer.state is TransferState.RUNNING and transfer.rate is None and self._online(transfer.spec.src):
                # Its engine reports only at the end (iperf3 before 3.17): while the sender's agent
                # lives, it will report the end, whatever it is.
                self._transfers[transfer.id] = replace(transfer, last_report=now)
                continue
            if transfer.state is TransferState.RESERVING:
                why = f"the path was not installed within {self.start_timeout:g} s"
            elif transfer.state is TransferState.STARTING:
                why = f"the receiver on {transfer.spec.dst} did not listen within {self.start_timeout:g} s"
            else:
                why = f"no report from the sender on {transfer.spec.src} for {self.stall_timeout:g} s"
            since, awaited = self._recovered.get(transfer.id), _awaited(transfer)
            if since is not None:
                why += f" after the controller restarted {now - since:.0f} s ago"
                if awaited is not None and self._agent(awaited) is None:
                    why += f"; the agent of {awaited} has not registered since"
            for dtn in (transfer.spec.src, transfer.spec.dst):
                lost = self.agents.lost_reason(dtn)
                if lost is not None:
                    why += f"; the agent of {dtn} is LOST ({lost})"
            self._end(transfer, TransferState.FAILED, why)

    def next_deadline(self) -> float:
        """When the next live transfer is overdue or kept STOP expires (epoch seconds); inf when none."""
        return min([*(self._deadline(t) for t in self._transfers.values() if not t.state.ended),
                    *(until for _, until in self._stops.values())], default=math.inf)

    def take_events(self) -> list[TransferEvent | JobOffer]:
        """Transfer events and job offers since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    # -- inside --------------------------------------------------------------------------

    def _deadline(self, transfer: Transfer) -> float:
        if transfer.state is TransferState.RUNNING:
            timeout, deadline = self.stall_timeout, transfer.last_report + self.stall_timeout
        else:
            timeout, deadline = self.start_timeout, transfer.updated + self.start_timeout
        since, awaited = self._recovered.get(transfer.id), _awaited(transfer)
        if since is None or awaited is None:
            return deadline
        # Picked up at a restart: the timeout counts from when the agent it waits for is back.
        agent = self._agent(awaited)
        back = agent.registered if agent is not None else since + RESTART_GRACE - timeout
        return max(deadline, back + timeout)

    def _agent(self, dtn: str) -> Agent | None:
        try:
            return self.agents.get(dtn)
        except NotFound:
            return None

    def _online(self, dtn: str) -> bool:
        agent = self._agent(dtn)
        return agent is not None and agent.state is AgentState.ONLINE

    def _meter(self, transfer: Transfer) -> int:
        """What the transfer's reservation's meter allows now (nominal bit/s)."""
        try:
            return self.book.get(_CONTROLLER, transfer.reservation).meter_bps
        except NotFound:  # released under it: the desk hears of it with the book's next events
            return transfer.paced_meter or transfer.bandwidth

    def _repace(self, transfer: Transfer, meter: int, cause: str) -> bool:
        """Hand the running sender of `transfer` a PACE job when `meter` is not what it was paced
        at; whether its pacing changed (an event tells watchers why)."""
        sending = any(job.role is JobRole.SEND for job in transfer.unfinished)
        if not sending or meter == transfer.paced_meter or meter <= 0:
            return False
        was = transfer.paced_meter or transfer.bandwidth
        pacing = pacing_bps(transfer.spec, meter, self.emulation_scale)
        if pacing == transfer.pacing:  # held to its own `pace`, below both meters
            self._transfers[transfer.id] = transfer = replace(transfer, paced_meter=meter)
            self._write(transfer)
            return False
        pace = Job(transfer.id, JobRole.PACE, transfer.spec.src, transfer.spec, transfer.reservation,
                   pacing_bps=pacing)
        handed = (*(job for job in transfer.handed if job.role is not JobRole.PACE), pace)
        transfer = replace(transfer, paced_meter=meter, handed=handed, updated=self.clock.now())
        self._transfers[transfer.id] = transfer
        self._write(transfer)
        self._events.append(JobOffer(pace))
        self._emit(transfer.state, transfer,
                   f"pacing {format_bandwidth(_nominal_pacing(transfer.spec, was))}bit/s -> "
                   f"{format_bandwidth(_nominal_pacing(transfer.spec, meter))}bit/s: the meter changed "
                   f"({cause or f'{format_bandwidth(was)} -> {format_bandwidth(meter)}'})")
        return True

    def _project(self, transfer: Transfer, report: RateReport, now: float) -> tuple[Transfer, str]:
        """A deadline transfer with its finish projected from its recent rate, and why it falls
        behind or is back on schedule when the projection crossed the deadline ("" otherwise)."""
        deadline, size = transfer.spec.deadline, transfer.spec.size
        assert deadline is not None and size is not None
        if report.final:
            return transfer, ""
        recent = self._recent.setdefault(transfer.id, deque(maxlen=PROJECTION_REPORTS))
        if recent and report.end <= recent[-1][0]:  # an engine's clock restarted (a resumed side): begin again
            recent.clear()
        recent.append((report.end, report.bytes_total))
        (first_end, first_bytes), (last_end, last_bytes) = recent[0], recent[-1]
        if len(recent) > 1 and last_end > first_end:
            bits_per_second = (last_bytes - first_bytes) * 8 / (last_end - first_end)
        else:
            bits_per_second = report.bits_per_second
        left = max(0, size - report.bytes_total)
        finish = now + left * 8 / bits_per_second if bits_per_second > 0 else math.inf
        transfer = replace(transfer, projected_finish=finish if math.isfinite(finish) else None)
        if len(recent) < MIN_PROJECTION_REPORTS or not left:
            return transfer, ""
        achieved = (f"achieving {format_bandwidth(bits_per_second / self.emulation_scale)}bit/s over the last "
                    f"{len(recent)} reports of the {format_bandwidth(transfer.paced_meter)}bit/s its meter allows; "
                    f"{format_bytes(left)} left")
        when = format_time(finish) if math.isfinite(finish) else "never (nothing moves)"
        if not transfer.behind and finish > deadline:
            return replace(transfer, behind=True), (f"falls behind: projected to finish at {when}, after its "
                                                    f"deadline {format_time(deadline)} ({achieved})")
        if transfer.behind and finish <= deadline - RECOVERY_MARGIN * max(0.0, deadline - now):
            return replace(transfer, behind=False), (f"back on schedule: projected to finish at {when}, before "
                                                     f"its deadline {format_time(deadline)} ({achieved})")
        return transfer, ""

    def _start_receiver(self, transfer: Transfer, reason: str) -> None:
        receive = Job(transfer.id, JobRole.RECEIVE, transfer.spec.dst, transfer.spec, transfer.reservation)
        self._set(transfer, TransferState.STARTING, reason, handed=(*transfer.handed, receive))
        self._events.append(JobOffer(receive))

    def _end(self, transfer: Transfer, state: TransferState, reason: str, release: bool = True) -> None:
        """End `transfer`: its row (with the reservation's release, when `release`), STOPs for the
        sides handed a job that have not ended, an event, and room for it among the ended."""
        now = self.clock.now()
        path = self.path(transfer)
        ended = replace(transfer, state=state, reason=reason, updated=now)
        unwritten: Transfer | None = ended
        if release:
            self._staged[transfer.id] = ended  # written in the release's transaction
            try:
                self.book.release(transfer.acting_owner, transfer.reservation)
            finally:
                unwritten = self._staged.pop(transfer.id, None)
        if unwritten is not None:  # the reservation was final already
            self._write(ended)
        for job in transfer.unfinished:
            stop = replace(job, role=JobRole.STOP)
            self._stops[(transfer.id, job.role)] = (stop, now + self.start_timeout)
            self._events.append(JobOffer(stop))
        self._transfers[transfer.id] = ended
        self._recovered.pop(transfer.id, None)
        self._rates_written.pop(transfer.id, None)
        self._recent.pop(transfer.id, None)
        self._emit(transfer.state, ended, reason, path)
        self._forget_oldest_ended()

    def _forget_oldest_ended(self) -> None:
        ended = [t for t in self._transfers.values() if t.state.ended]
        old = ended[:max(0, len(ended) - KEEP_ENDED)]
        if not old:
            return
        self.book.ledger.write(lambda db: store.delete(db, [t.id for t in old]))
        for transfer in old:
            self._forget(transfer)

    def _forget(self, transfer: Transfer) -> None:
        del self._transfers[transfer.id]
        self._by_reservation.pop(transfer.reservation_id, None)
        self._by_request.pop((transfer.owner, transfer.request_id), None)
        for role in SIDES:
            self._stops.pop((transfer.id, role), None)

    def _set(self, transfer: Transfer, state: TransferState, reason: str, **changes: Any) -> Transfer:
        new = replace(transfer, state=state, reason=reason, updated=self.clock.now(), **changes)
        self._write(new)
        self._transfers[new.id] = new
        self._emit(transfer.state, new, reason)
        return new

    def _emit(self, previous: TransferState | None, transfer: Transfer, reason: str,
              path: tuple[str, ...] | None = None) -> None:
        self._events.append(TransferEvent(previous, transfer.state, reason, transfer, self.clock.now(),
                                          self.path(transfer) if path is None else path))

    def _side(self, principal: Principal, dtn: str, name: str, role: JobRole, bound_dtn: str | None) -> Transfer:
        self._check_agent(principal, dtn, bound_dtn)
        transfer = self._transfers.get(name.removeprefix("transfers/"))
        if transfer is None:
            raise NotFound(f"transfer {validation.shown(name)} not found (the controller may have restarted)")
        expected = transfer.spec.dst if role is JobRole.RECEIVE else transfer.spec.src
        if role not in SIDES or dtn != expected:
            raise PermissionDenied(f"dtn {dtn} is not the {role.lower()} side of {transfer.name}")
        return transfer

    def _check_agent(self, principal: Principal, dtn: str, bound_dtn: str | None) -> None:
        if principal.role not in (Role.AGENT, Role.ADMIN):
            raise PermissionDenied(f"{principal.name} (role {principal.role}): only agent and admin tokens "
                                   "take jobs and report transfers")
        if principal.role is Role.AGENT and bound_dtn is not None and dtn != bound_dtn:
            raise PermissionDenied(f"{principal.name}'s token is bound to dtn {bound_dtn!r}, not {dtn!r}")

    # -- the state file ------------------------------------------------------------------

    def _write(self, transfer: Transfer) -> None:
        """Store `transfer` in a transaction of its own."""
        row = _row(transfer)
        self.book.ledger.write(lambda db: store.save(db, row))

    def _write_rates(self, transfer: Transfer, now: float) -> None:
        """Store a running transfer's latest rates, at most every RATE_WRITE_INTERVAL seconds."""
        if now - self._rates_written.get(transfer.id, -math.inf) >= RATE_WRITE_INTERVAL:
            self._write(transfer)
            self._rates_written[transfer.id] = now

    def _companion(self, reservation: Reservation) -> AlsoWrite | None:
        """The book writes `reservation`'s row: the transfer's row to write in the same transaction.

        A row the desk staged (a transfer starting, or ending with its release); or, when the
        reservation of a live transfer ends by itself (released by its owner, expired, failed),
        the transfer FAILED, as `observe` will record it."""
        transfer_id = reservation.labels.get(TRANSFER_LABEL)
        if transfer_id is None:
            return None
        transfer = self._staged.pop(transfer_id, None)
        if transfer is not None:
            transfer = replace(transfer, reservation_id=reservation.id)
        else:
            live = self._transfers.get(transfer_id)
            if live is None or live.state.ended or not reservation.state.is_final:
                return None
            transfer = replace(live, state=TransferState.FAILED, reason=_path_ended(reservation),
                               updated=self.clock.now())
        row = _row(transfer)
        return lambda db: store.save(db, row)

    def _load(self) -> None:
        """Read the stored transfers and pick up the live ones (a controller restart)."""
        now = self.clock.now()
        loaded = [_transfer_from(stored) for stored in store.load(self.book.ledger)]  # all read before any change
        ended = [t for t in loaded if t.state.ended]
        old = {t.id for t in ended[:max(0, len(ended) - KEEP_ENDED)]}
        if old:
            self.book.ledger.write(lambda db: store.delete(db, old))
        for transfer in loaded:
            if transfer.id in old:
                continue
            self._transfers[transfer.id] = transfer
            self._by_reservation[transfer.reservation_id] = transfer.id
            if transfer.request_id:
                self._by_request[(transfer.owner, transfer.request_id)] = transfer.id
            if transfer.state.ended and transfer.updated + self.start_timeout > now:
                for job in transfer.unfinished:  # STOPs it may not have delivered before the restart
                    stop = replace(job, role=JobRole.STOP)
                    self._stops[(transfer.id, job.role)] = (stop, transfer.updated + self.start_timeout)
        for reservation in self.book.snapshot(_CONTROLLER):
            if TRANSFER_LABEL not in reservation.labels or reservation.state.is_final:
                continue
            owner = self._transfers.get(self._by_reservation.get(reservation.id, ""))
            if owner is None or owner.state.ended:  # a file from before transfers were stored
                self.book.release(Principal(reservation.owner, Role.SERVICE), reservation.name,
                                  "its transfer was lost when the controller restarted")
        for transfer in [t for t in self._transfers.values() if not t.state.ended]:
            self._pick_up(transfer, now)

    def _pick_up(self, transfer: Transfer, now: float) -> None:
        """Continue a live transfer found at start-up, or end it saying why it cannot go on."""
        try:
            reservation: Reservation | None = self.book.get(_CONTROLLER, transfer.reservation)
        except NotFound:
            reservation = None
        if reservation is None or reservation.state.is_final:
            found = "no longer exists" if reservation is None else f"{reservation.state}: {reservation.reason}"
            self._end(transfer, TransferState.FAILED,
                      f"the controller restarted and found its path {transfer.reservation} {found}", release=False)
            return
        gone = [dtn for dtn in (transfer.spec.src, transfer.spec.dst) if dtn not in self.book.topology.dtns]
        if gone:
            self._end(transfer, TransferState.FAILED, f"the controller restarted on topology "
                                                      f"{self.book.topology.name}, which has no dtn {', '.join(gone)}")
            return
        self._recovered[transfer.id] = now
        if transfer.state is TransferState.RUNNING:
            self._transfers[transfer.id] = transfer = replace(transfer, last_report=now)
            if reservation.schedule != transfer.schedule:
                self._transfers[transfer.id] = transfer = replace(transfer, schedule=reservation.schedule)
                self._write(transfer)
            self._repace(transfer, reservation.meter_bps,
                         f"found so when the controller restarted: {reservation.name} {reservation.reason}")
        elif transfer.state is TransferState.STARTING:
            self._set(transfer, TransferState.STARTING,
                      f"the controller restarted; waiting for the receiver on {transfer.spec.dst} to listen")
        elif reservation.state is State.ACTIVE:
            self._start_receiver(transfer, f"the controller restarted; path ready: starting the receiver on "
                                           f"{transfer.spec.dst}")
        else:
            self._set(transfer, TransferState.RESERVING,
                      f"the controller restarted; waiting for the path ({reservation.name} {reservation.state})")


def pacing_bps(spec: TransferSpec, meter_bps: int, emulation_scale: float) -> int:
    """The rate the sender is held to on the wire while its reservation's meter allows `meter_bps`
    (nominal): its `pace` when given and below the meter, else just under the meter."""
    return max(1, int(_nominal_pacing(spec, meter_bps) * emulation_scale))


def _nominal_pacing(spec: TransferSpec, meter_bps: int) -> float:
    if spec.pace is not None and spec.pace < meter_bps:
        return spec.pace
    return meter_bps * PACING_SHARE


def _awaited(transfer: Transfer) -> str | None:
    """The DTN whose agent a live transfer waits for: the sender's while RUNNING, the receiver's
    while STARTING (None while RESERVING: the switches)."""
    if transfer.state is TransferState.RUNNING:
        return transfer.spec.src
    if transfer.state is TransferState.STARTING:
        return transfer.spec.dst
    return None


def _check_rate(report: RateReport, what: str) -> None:
    """InvalidArgument naming the first field of `report` outside its limits (none is stored)."""
    report.check(what)


def _path_ended(reservation: Reservation) -> str:
    """Why a transfer failed when its reservation ended under it."""
    return f"{reservation.name} {reservation.state}: {reservation.reason}"


# -- rows of the transfers table ----------------------------------------------------------------


def _row(t: Transfer) -> store.Row:
    """The stored form of a transfer."""
    s = t.spec
    body = {
        "id": t.id, "owner": t.owner, "request_id": t.request_id, "reservation_id": t.reservation_id,
        "state": t.state.value, "reason": t.reason, "created": t.created, "updated": t.updated,
        "spec": {"src": s.src, "dst": s.dst, "bandwidth": s.bandwidth, "size": s.size, "files": list(s.files),
                 "destination": s.destination, "streams": s.streams, "engine": s.engine, "policy": s.policy,
                 "pace": s.pace, "deadline": s.deadline, "ceiling": s.ceiling, "priority": s.priority},
        "rate": _rate_json(t.rate), "receiver_rate": _rate_json(t.receiver_rate),
        "checksums_verified": t.checksums_verified, "sides_done": sorted(role.value for role in t.sides_done),
        "last_report": t.last_report,
        "handed": [{"role": j.role.value, "peer_host": j.peer_host, "peer_port": j.peer_port,
                    "pacing_bps": j.pacing_bps} for j in t.handed],
        "paced_meter": t.paced_meter,
        "schedule": [{"start": step.start, "end": step.end, "bandwidth": step.bandwidth} for step in t.schedule],
        "projected_finish": t.projected_finish, "behind": t.behind,
    }
    return store.Row(t.id, t.owner, t.request_id, t.reservation_id, t.state.value, body)


def _rate_json(r: RateReport | None) -> dict[str, Any] | None:
    if r is None:
        return None
    p = r.pinning
    return {"transfer_id": r.transfer_id, "engine": r.engine, "start": r.start, "end": r.end,
            "bits_per_second": r.bits_per_second, "bytes_total": r.bytes_total,
            "streams": [{"stream": s.stream, "bits_per_second": s.bits_per_second, "bytes_total": s.bytes_total,
                         "retransmits": s.retransmits, "rtt_ms": s.rtt_ms} for s in r.streams],
            "retransmits": r.retransmits, "rtt_ms": r.rtt_ms, "cpu_percent": r.cpu_percent,
            "pinning": {"cpus": list(p.cpus), "numa_node": p.numa_node, "method": p.method, "note": p.note},
            "final": r.final}


def _transfer_from(stored: store.Stored) -> Transfer:
    """The transfer of a stored row; `CorruptRow` naming the field that cannot be read."""
    f = stored.fields
    if f.text("id") != stored.id:
        f.bad("id", f"{f.text('id')!r} is not the row's id")
    s = f.child("spec")
    assert s is not None
    spec = TransferSpec(src=s.text("src"), dst=s.text("dst"), bandwidth=s.integer("bandwidth"),
                        size=s.integer("size", optional=True), files=s.texts("files"),
                        destination=s.text("destination"), streams=s.integer("streams"), engine=s.text("engine"),
                        policy=s.text("policy"), pace=s.integer("pace", optional=True) if "pace" in s.data else None,
                        deadline=s.number("deadline", optional=True) if "deadline" in s.data else None,
                        ceiling=s.integer("ceiling") or 0 if "ceiling" in s.data else 0,
                        priority=s.integer("priority") or 0 if "priority" in s.data else 0)
    state = TransferState(f.choice("state", TransferState))
    reservation_id = f.text("reservation_id")
    handed = []
    for h in f.children("handed"):
        role = JobRole(h.choice("role", (*SIDES, JobRole.PACE)))
        handed.append(Job(stored.id, role, spec.dst if role is JobRole.RECEIVE else spec.src, spec,
                          f"reservations/{reservation_id}", h.text("peer_host"), h.integer("peer_port"),
                          h.integer("pacing_bps", optional=True)))
    sides = f.texts("sides_done")
    for side in sides:
        if side not in SIDES:
            f.bad("sides_done", f"{side!r} is not RECEIVE or SEND")
    # Rows written before pacing followed the meter, or deadlines existed, lack these fields.
    schedule = tuple(ScheduleStep(step.number("start"), step.number("end"), step.integer("bandwidth"))
                     for step in (f.children("schedule") if "schedule" in f.data else ()))
    return Transfer(
        id=stored.id, owner=f.text("owner"), spec=spec, state=state, reason=f.text("reason"),
        reservation_id=reservation_id, created=f.number("created"), updated=f.number("updated"),
        request_id=f.text("request_id"), rate=_rate_from(f.child("rate", optional=True)),
        receiver_rate=_rate_from(f.child("receiver_rate", optional=True)),
        checksums_verified=f.flag("checksums_verified", optional=True),
        sides_done=frozenset(JobRole(side) for side in sides), last_report=f.number("last_report"),
        handed=tuple(handed), paced_meter=f.integer("paced_meter") if "paced_meter" in f.data else 0,
        schedule=schedule,
        projected_finish=f.number("projected_finish", optional=True) if "projected_finish" in f.data else None,
        behind=bool(f.flag("behind")) if "behind" in f.data else False)


def _rate_from(f: store.Fields | None) -> RateReport | None:
    if f is None:
        return None
    p = f.child("pinning")
    assert p is not None
    pinning = Pinning(p.integers("cpus"), p.integer("numa_node", optional=True), p.text("method"), p.text("note"))
    streams = tuple(StreamRate(s.integer("stream"), s.number("bits_per_second"), s.integer("bytes_total"),
                               s.integer("retransmits", optional=True), s.number("rtt_ms", optional=True))
                    for s in f.children("streams"))
    return RateReport(f.text("transfer_id"), f.text("engine"), f.number("start"), f.number("end"),
                      f.number("bits_per_second"), f.integer("bytes_total"), streams,
                      f.integer("retransmits", optional=True), f.number("rtt_ms", optional=True),
                      f.number("cpu_percent", optional=True), pinning, f.flag("final"))
