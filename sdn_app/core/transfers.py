"""Transfers between DTNs, run by their agents on a path the controller books for them.

A service asks for a transfer (`start`); the desk books a reservation between the two DTNs
and, once its flows are in place, hands the destination's agent a RECEIVE job. When that agent
says it listens (`receiver_ready`), the source's agent gets a SEND job with the receiver's
address and port. The sender's rate reports (`report`) feed the reservation book's advisor,
which moves an underperforming reservation; both sides' ends (`finished`) decide how the
transfer ended, and the reservation is released then, or at once when anything fails.

    desk = TransferDesk(book, registry, clock)
    transfer = desk.start(principal, TransferSpec("caltech-dtn1", "ucsd-dtn1", 40 * G, size=50 * 10**9))
    desk.observe(book.take_events())          # the worker does this after every call
    desk.take_events()                       # JobOffers for the agents, TransferEvents for watchers

Pure: the worker owns it, ticks it (start and stall timeouts) and passes it the book's events.
Transfers are kept in memory only (a controller restart forgets them; their reservations
are in the ledger and expire or are released as usual).
"""

from __future__ import annotations

import math
import os
import random
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import PurePosixPath

from dtn_agent.engines import ENGINES
from dtn_agent.reports import RateReport
from sdn_app.core.agents import AgentRegistry, AgentState
from sdn_app.core.clock import Clock
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservations import Event, Principal, ReservationBook, Role, State
from sdn_app.core.units import format_bandwidth

START_TIMEOUT = 30.0  # seconds for the path to be installed, and again for the receiver to listen
STALL_TIMEOUT = 15.0  # seconds without a report from a running sender
PACING_SHARE = 0.95  # senders are paced to this share of the booking, so meters never drop
KEEP_ENDED = 1000  # ended transfers remembered for Get/List
TRANSFER_LABEL = "tsdn/transfer"
MAX_STREAMS = 256
MAX_FILES = 10_000


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
    """Which side of a transfer a job runs, or STOP: end that side now."""

    RECEIVE = "RECEIVE"
    SEND = "SEND"
    STOP = "STOP"


@dataclass(frozen=True)
class TransferSpec:
    """What a service asks for: `bandwidth` from `src` to `dst`, `size` bytes memory-to-memory
    or `files` (absolute paths on `src`) into `destination` (a directory on `dst`)."""

    src: str
    dst: str
    bandwidth: int
    size: int | None = None
    files: tuple[str, ...] = ()
    destination: str = ""
    streams: int = 1
    engine: str = "builtin"
    policy: str = "shortest"

    def check(self) -> None:
        """Raise InvalidArgument naming the first field that is wrong."""
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
    pacing_bps: int | None = None  # as sent on the wire (emulated rate in Mininet)

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
    """Every transfer of one controller run; one owner: the core thread."""

    book: ReservationBook
    agents: AgentRegistry
    clock: Clock
    emulation_scale: float = 1.0
    start_timeout: float = START_TIMEOUT
    stall_timeout: float = STALL_TIMEOUT
    _transfers: OrderedDict[str, Transfer] = field(default_factory=OrderedDict, init=False)
    _by_reservation: dict[str, str] = field(default_factory=dict, init=False)
    _by_request: dict[tuple[str, str], str] = field(default_factory=dict, init=False)
    _jobs: dict[str, dict[JobRole, Job]] = field(default_factory=dict, init=False)  # live transfers' jobs
    # STOPs of ended transfers, kept (until the side reports its end, or start_timeout) for an agent
    # whose job stream was down when they were offered: (transfer, side) -> (job, until)
    _stops: dict[tuple[str, JobRole], tuple[Job, float]] = field(default_factory=dict, init=False)
    _events: list[TransferEvent | JobOffer] = field(default_factory=list, init=False)
    _random: random.Random = field(default_factory=lambda: random.Random(os.urandom(16)), init=False)

    def __post_init__(self) -> None:
        self._release_orphans()

    def _release_orphans(self) -> None:
        """Release the paths of transfers a controller restart forgot: their agents are told to
        stop when they next report (the transfer is unknown), and the bandwidth is free again."""
        for reservation in self.book.snapshot(Principal("tsdn", Role.ADMIN)):
            if TRANSFER_LABEL in reservation.labels and not reservation.state.is_final:
                self.book.release(Principal(reservation.owner, Role.SERVICE), reservation.name,
                                  "its transfer was lost when the controller restarted")

    # -- services ------------------------------------------------------------------------

    def start(self, principal: Principal, spec: TransferSpec, request_id: str = "") -> Transfer:
        """Book a path for `spec` and start it; the same `request_id` again returns the same transfer.

        Nothing is booked when the spec is wrong, an agent of the two DTNs is not online, or
        the path has no room (the book's error says which link, or which host limit).
        """
        if principal.role not in (Role.SERVICE, Role.ADMIN):
            raise PermissionDenied(f"{principal.name} (role {principal.role}) may not start transfers: "
                                   "only service and admin tokens may")
        if request_id and (principal.name, request_id) in self._by_request:
            earlier = self._transfers.get(self._by_request[(principal.name, request_id)])
            if earlier is not None and earlier.spec == spec:
                return earlier
            if earlier is not None:
                raise AlreadyExists(f"request_id {request_id!r} was used for {earlier.name}, a different transfer; "
                                    "use a new request_id for a new transfer")
        spec.check()
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
        now = self.clock.now()
        reservation = self.book.create(
            principal, PathRequest(spec.src, spec.dst, spec.bandwidth, now, math.inf, spec.policy),
            labels={TRANSFER_LABEL: transfer_id})
        transfer = Transfer(transfer_id, principal.name, spec, TransferState.RESERVING,
                            "installing the path", reservation.id, now, now, request_id)
        self._transfers[transfer_id] = transfer
        self._by_reservation[reservation.id] = transfer_id
        if request_id:
            self._by_request[(principal.name, request_id)] = transfer_id
        self._jobs[transfer_id] = {}
        self._emit(None, transfer, f"path booked: {reservation.name}")
        if reservation.state is State.ACTIVE:  # ledger only: nothing to install
            self._start_receiver(transfer)
        return self._transfers[transfer_id]

    def get(self, principal: Principal, name: str) -> Transfer:
        """The transfer `transfers/{id}` (or the id), if the caller may see it."""
        transfer = self._transfers.get(name.removeprefix("transfers/"))
        if transfer is None or not (principal.may_see(transfer.owner)):
            raise NotFound(f"transfer {name!r} not found")
        return transfer

    def list(self, principal: Principal) -> list[Transfer]:
        """The transfers the caller may see, newest first."""
        return [t for t in reversed(self._transfers.values()) if principal.may_see(t.owner)]

    def path(self, transfer: Transfer) -> tuple[str, ...]:
        """The switches the transfer's reservation crosses now (empty once released)."""
        reservation = self.book.get(transfer.acting_owner, transfer.reservation)
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
        the STOPs of recently ended transfers whose side there has not reported its end."""
        self._check_agent(principal, dtn, bound_dtn)
        live = [job for jobs in self._jobs.values() for job in jobs.values() if job.dtn == dtn]
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
            transfer = self._set(transfer, TransferState.RUNNING, f"receiver listens on {address}:{port}",
                                 last_report=now)
            pacing = int(transfer.spec.bandwidth * self.emulation_scale * PACING_SHARE)
            self._offer(Job(transfer.id, JobRole.SEND, transfer.spec.src, transfer.spec,
                            transfer.reservation, address, port, pacing))
        return False, ""

    def report(self, principal: Principal, dtn: str, name: str, role: JobRole, report: RateReport,
               bound_dtn: str | None = None) -> tuple[bool, str]:
        """One interval of one side. The sender's rate (scaled back to nominal) goes to the
        book's advisor. Returns (stop, why): stop when the transfer ended meanwhile."""
        transfer = self._side(principal, dtn, name, role, bound_dtn)
        if transfer.state.ended:
            return True, transfer.reason
        if role is JobRole.RECEIVE:
            self._transfers[transfer.id] = replace(transfer, receiver_rate=report)
            return False, ""
        now = self.clock.now()
        transfer = replace(transfer, rate=report, last_report=now, updated=now)
        self._transfers[transfer.id] = transfer
        self._events.append(TransferEvent(transfer.state, transfer.state, "rate", transfer, now, self.path(transfer)))
        # The book ignores rates while the path is being installed or moved.
        nominal = report.bits_per_second / self.emulation_scale
        self.book.report_rate(transfer.acting_owner, transfer.reservation, nominal)
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
        self._jobs.get(transfer.id, {}).pop(role, None)
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
        return self._transfers[transfer.id]

    # -- the worker ----------------------------------------------------------------------

    def observe(self, events: list[Event]) -> None:
        """Follow the reservations of live transfers: start the receiver once the path is in
        place, fail the transfer when its reservation ends, tell watchers of moves."""
        for event in events:
            transfer_id = self._by_reservation.get(event.reservation.id)
            transfer = self._transfers.get(transfer_id or "")
            if transfer is None or transfer.state.ended:
                continue
            reservation = event.reservation
            if reservation.state is State.ACTIVE and transfer.state is TransferState.RESERVING:
                self._start_receiver(transfer)
            elif reservation.state.is_final:
                self._end(transfer, TransferState.FAILED,
                          f"{reservation.name} {reservation.state}: {reservation.reason}", release=False)
            elif event.previous not in (None, State.SCHEDULED, State.PROVISIONING):  # moved, degraded...
                self._emit(transfer.state, transfer, f"path {reservation.state}: {reservation.reason}")

    def tick(self) -> None:
        """Fail transfers whose path, receiver or sender is overdue."""
        now = self.clock.now()
        for key, (_, until) in list(self._stops.items()):
            if until <= now:
                del self._stops[key]
        for transfer in list(self._transfers.values()):
            if transfer.state.ended or now < self._deadline(transfer):
                continue
            if transfer.state is TransferState.RUNNING and transfer.rate is None \
                    and self.agents.lost_reason(transfer.spec.src) is None:
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
            return transfer.last_report + self.stall_timeout
        return transfer.updated + self.start_timeout

    def _start_receiver(self, transfer: Transfer) -> None:
        transfer = self._set(transfer, TransferState.STARTING, f"path ready; starting the receiver on "
                                                               f"{transfer.spec.dst}")
        self._offer(Job(transfer.id, JobRole.RECEIVE, transfer.spec.dst, transfer.spec,
                        transfer.reservation))

    def _offer(self, job: Job) -> None:
        self._jobs.setdefault(job.transfer_id, {})[job.role] = job
        self._events.append(JobOffer(job))

    def _end(self, transfer: Transfer, state: TransferState, reason: str, release: bool = True) -> None:
        for job in self._jobs.pop(transfer.id, {}).values():
            stop = replace(job, role=JobRole.STOP)
            self._stops[(transfer.id, job.role)] = (stop, self.clock.now() + self.start_timeout)
            self._events.append(JobOffer(stop))
        self._set(transfer, state, reason)
        if release:
            self.book.release(transfer.acting_owner, transfer.reservation)
        ended = [t for t in self._transfers.values() if t.state.ended]
        for old in ended[:max(0, len(ended) - KEEP_ENDED)]:
            del self._transfers[old.id]
            self._by_reservation.pop(old.reservation_id, None)
            self._by_request.pop((old.owner, old.request_id), None)

    def _set(self, transfer: Transfer, state: TransferState, reason: str, **changes: object) -> Transfer:
        new = replace(transfer, state=state, reason=reason, updated=self.clock.now(), **changes)
        self._transfers[new.id] = new
        self._emit(transfer.state, new, reason)
        return new

    def _emit(self, previous: TransferState | None, transfer: Transfer, reason: str) -> None:
        self._events.append(TransferEvent(previous, transfer.state, reason, transfer, self.clock.now(),
                                          self.path(transfer)))

    def _side(self, principal: Principal, dtn: str, name: str, role: JobRole, bound_dtn: str | None) -> Transfer:
        self._check_agent(principal, dtn, bound_dtn)
        transfer = self._transfers.get(name.removeprefix("transfers/"))
        if transfer is None:
            raise NotFound(f"transfer {name!r} not found (the controller may have restarted)")
        expected = transfer.spec.dst if role is JobRole.RECEIVE else transfer.spec.src
        if role is JobRole.STOP or dtn != expected:
            raise PermissionDenied(f"dtn {dtn} is not the {role.lower()} side of {transfer.name}")
        return transfer

    def _check_agent(self, principal: Principal, dtn: str, bound_dtn: str | None) -> None:
        if principal.role not in (Role.AGENT, Role.ADMIN):
            raise PermissionDenied(f"{principal.name} (role {principal.role}): only agent and admin tokens "
                                   "take jobs and report transfers")
        if principal.role is Role.AGENT and bound_dtn is not None and dtn != bound_dtn:
            raise PermissionDenied(f"{principal.name}'s token is bound to dtn {bound_dtn!r}, not {dtn!r}")
