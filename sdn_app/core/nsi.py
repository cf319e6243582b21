"""NSI CS 2.0 connections on the reservation book: tsdn as the provider (uPA) of its own domain, what
an NSI requester (OpenNSA's `onsa`, an aggregator of the AutoGOLE) drives through /NSI/services/CS2
(docs/nsi.md). The SOAP side is `sdn_app.web.nsi`; this module decides.

A connection joins two STPs of this network, `urn:ogf:network:<domain>:topology:<port>?vlan=<N>`,
where a port is a DTN's switch port or an inter-domain port (topology `interdomain:`). It is booked
as a VLAN circuit (`PathRequest` with both ends tagged): every frame with the source VLAN at the
source port goes to the destination port with the destination VLAN, and back.

NSI's three state machines are the book's two-phase reservation seen through NSI's names:

| operation | book | reservation / provision / lifecycle state after |
| --- | --- | --- |
| reserve | `create(hold=True, provision=False)`: HELD | ReserveHeld / Released / Created |
| reserveCommit | `commit`: RESERVED or SCHEDULED | ReserveStart / Released / Created |
| reserveAbort | `abort`: RELEASED | ReserveStart / Released / Created (nothing booked) |
| (hold not committed in `--hold-timeout`) | EXPIRED | ReserveTimeout, notification reserveTimeout |
| provision | `provision`: PROVISIONING, then ACTIVE | ReserveStart / Provisioned / Created |
| release | `unprovision`: RESERVED | ReserveStart / Released / Created |
| terminate | `release` | ReserveStart / Released / Terminated |
| (window ended) | EXPIRED | PassedEndTime |
| (failed, or released by an operator) | FAILED, RELEASED | Failed, notification errorEvent |

The data plane is active while the reservation is ACTIVE, MOVING or DEGRADED: entering or leaving
that is a dataPlaneStateChange notification. Every connection is a row of `nsi_connections`,
written in the ledger transaction of its reservation's row when the operation changes both.
`NsiDesk` is pure and owned by the core thread like the book.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sdn_app.core import sense_store as store
from sdn_app.core import vlans
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NotFound
from sdn_app.core.ledger import AlsoWrite
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Event, Principal, Reservation, Role, State, Terms, require_role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.units import format_time
from sdn_app.core.validation import shown

LABEL = "tsdn/nsi"  # a reservation's label: the NSI connection id it books
NETWORK = "urn:ogf:network:"
MAX_CONNECTIONS = 10_000  # connections kept (terminated ones are forgotten after MAX_KEPT_TERMINATED)
MAX_KEPT_TERMINATED = 1_000
MAX_TEXT = 1024  # characters of a description or an id
PAST_TOLERANCE = 60.0  # seconds a startTime may lie in the past (clock skew) before it is refused
ACTIVE_STATES = frozenset({State.ACTIVE, State.MOVING, State.DEGRADED})
_STP = re.compile(r"^urn:ogf:network:(?P<id>[A-Za-z0-9:._\-/+%]{1,256}?)"
                  r"(?:\?vlan=(?P<vlan>[0-9]{1,4}(?:-[0-9]{1,4})?))?$")
_DOMAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}(?::[A-Za-z0-9._\-]{1,64})*$")
_SERVICE = Principal("tsdn-nsi", Role.ADMIN)


class NsiRefused(FailedPrecondition):
    """A request NSI refuses with a specific error id (`error_id`, GFD.235's numbering: 00100 payload,
    00201 invalid transition, 00203 no such connection, 00600 resources, 00701 unknown STP, 00704 STP
    unavailable, 00706 directionality, 00709 label format)."""

    def __init__(self, message: str, error_id: str):
        super().__init__(message)
        self.error_id = error_id


def nsa_id(domain: str) -> str:
    """The NSA id of the domain `--domain` names: `urn:ogf:network:<domain>:nsa`."""
    return f"{NETWORK}{check_domain(domain)}:nsa"


def network_id(domain: str) -> str:
    """The NML topology (network) id of the domain: `urn:ogf:network:<domain>:topology`."""
    return f"{NETWORK}{check_domain(domain)}:topology"


def check_domain(domain: str) -> str:
    """`domain` if it can name an NSI network (letters, digits, `.`, `_`, `-`, `:` parts)."""
    if not isinstance(domain, str) or not _DOMAIN.match(domain):
        raise InvalidArgument(f"--domain: {shown(domain)} cannot name an NSI network (letters, digits, '.', '_', '-',"
                              " and ':' between parts, e.g. sc16.example.net)")
    return domain


@dataclass(frozen=True)
class Stp:
    """A service termination point: a port of a network and the VLANs asked for there."""

    network: str  # e.g. urn:ogf:network:sc16.tsdn:topology
    port: str
    vlans: tuple[int, int]

    def urn(self, vlan: int | None = None) -> str:
        """The STP as text, with `vlan` (default: the range asked for)."""
        first, last = (vlan, vlan) if vlan is not None else self.vlans
        label = str(first) if first == last else f"{first}-{last}"
        return f"{self.network}:{self.port}?vlan={label}"


def parse_stp(text: str, field: str, network: str) -> Stp:
    """The STP `text` names in `network` (InvalidArgument or NsiRefused naming `field` when not)."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise InvalidArgument(f"{field}: expected an STP URN, got {shown(text)}")
    found = _STP.match(text.strip())
    if found is None:
        raise NsiRefused(f"{field}: {shown(text)} is not an STP (urn:ogf:network:NETWORK:PORT?vlan=N)", "00709")
    if not text.strip().startswith(network + ":"):
        raise NsiRefused(f"{field}: {shown(text)} is not in this network ({network}); this NSA is a uPA and "
                         "books only its own STPs", "00701")
    port = text.strip()[len(network) + 1:].split("?", 1)[0]
    if not port or ":" in port:
        raise NsiRefused(f"{field}: {shown(text)} names no port of {network}", "00701")
    vlan = found.group("vlan")
    if vlan is None:
        raise NsiRefused(f"{field}: {shown(text)} has no VLAN (?vlan=N or ?vlan=FIRST-LAST): this network offers "
                         "Ethernet VLAN circuits (EVTS)", "00709")
    first, _, last = vlan.partition("-")
    vlans = (int(first), int(last or first))
    if not 1 <= vlans[0] <= vlans[1] <= 4094:
        raise NsiRefused(f"{field}: VLAN {vlan} is not a VLAN id or range within 1-4094", "00709")
    return Stp(network, port, vlans)


@dataclass(frozen=True)
class ReserveAsk:
    """What a reserve asks for, as the SOAP side read it (times: seconds since the epoch, None: now /
    open end)."""

    requester_nsa: str
    reply_to: str | None
    correlation_id: str
    global_id: str
    description: str
    source_stp: str
    dest_stp: str
    capacity_mbps: int
    start: float | None
    end: float | None
    directionality: str = "Bidirectional"  # tsdn's circuits are symmetric whatever symmetricPath asks


@dataclass(frozen=True)
class Connection:
    """An NSI connection of this provider and the reservation that books it."""

    id: str
    owner: str  # the tsdn principal the requester authenticated as
    requester_nsa: str
    reply_to: str | None  # where confirmations and notifications go (the last request's replyTo)
    global_id: str
    description: str
    source: str  # the STPs with the VLANs booked
    dest: str
    capacity_mbps: int
    start: float
    end: float
    reservation: str
    created: float
    version: int = 0
    terminated: bool = False

    def row(self) -> dict[str, Any]:
        return {"requester_nsa": self.requester_nsa, "reply_to": self.reply_to, "global_id": self.global_id,
                "description": self.description, "source": self.source, "dest": self.dest,
                "capacity_mbps": self.capacity_mbps, "start": self.start, "end": store.finite_or_none(self.end),
                "reservation": self.reservation, "created": self.created, "version": self.version,
                "terminated": self.terminated}


@dataclass(frozen=True)
class States:
    """A connection's states as NSI names them, and its data plane's."""

    reservation: str
    provision: str
    lifecycle: str
    active: bool
    version: int
    consistent: bool = True


@dataclass(frozen=True)
class Summary:
    """What a query tells about one connection."""

    connection: Connection
    states: States
    reason: str  # the reservation's last reason, for operators


@dataclass(frozen=True)
class Notice:
    """A notification to send the connection's requester: `kind` is dataPlaneStateChange,
    errorEvent (`event`: activateFailed, deactivateFailed, dataplaneError, forcedEnd) or
    reserveTimeout (`timeout`: seconds the hold waited)."""

    kind: str
    connection: Connection
    time: float
    active: bool = False
    event: str = ""
    text: str = ""
    timeout: int = 0


def states_of(connection: Connection, reservation: Reservation | None) -> States:
    """The connection's NSI states, from its reservation (None: forgotten by the book)."""
    lifecycle = "Terminated" if connection.terminated else "Created"
    if reservation is None:
        return States("ReserveStart", "Released", lifecycle, False, connection.version)
    state = reservation.state
    if state is State.HELD:
        return States("ReserveHeld", "Released", lifecycle, False, connection.version)
    if state is State.EXPIRED and reservation.hold_until and reservation.hold_until <= reservation.updated:
        return States("ReserveTimeout", "Released", lifecycle, False, connection.version)
    if state is State.EXPIRED:
        return States("ReserveStart", "Released", "Terminated" if connection.terminated else "PassedEndTime", False,
                      connection.version)
    if not connection.terminated and (state is State.FAILED or (
            state is State.RELEASED and not reservation.reason.startswith("hold aborted"))):
        return States("ReserveStart", "Released", "Failed", False, connection.version)
    provision = "Provisioned" if reservation.provisioned and not state.is_final else "Released"
    return States("ReserveStart", provision, lifecycle, state in ACTIVE_STATES, connection.version)


class NsiDesk:
    """Every NSI connection of this provider; not thread-safe: the core thread calls it."""

    def __init__(self, book: ReservationBook, domain: str):
        """Load the connections kept in the book's ledger and join the book's companion rows."""
        self.book = book
        self.domain = check_domain(domain)
        self.nsa = nsa_id(domain)
        self.network = network_id(domain)
        self.ledger = book.ledger
        self.clock = book.clock
        self.topology = book.topology
        self.ledger.write(store.create_tables)
        self._connections: dict[str, Connection] = {}
        for row in store.load(self.ledger, store.NSI_CONNECTIONS):
            self._connections[row.id] = _read(row)
        # (principal, requester NSA, correlationId) of each reserve since the start -> its connection
        self._asked: dict[tuple[str, str, str], str] = {}
        self._pending: tuple[str, Callable[[Reservation], Connection]] | None = None
        self._written: list[Connection] = []
        self._previous = book.companion
        book.companion = self._companion

    # -- rows ------------------------------------------------------------------------------------

    def _companion(self, reservation: Reservation) -> AlsoWrite | None:
        """The book writes `reservation`'s row: the connection an operation in progress changes joins
        that transaction (after the previous companion's rows)."""
        writes: list[AlsoWrite] = []
        if self._previous is not None and (earlier := self._previous(reservation)) is not None:
            writes.append(earlier)
        if self._pending is not None and reservation.labels.get(LABEL) == self._pending[0]:
            connection = self._pending[1](reservation)
            self._written.append(connection)
            writes.append(_writer(connection))
        if len(writes) < 2:
            return writes[0] if writes else None

        def both(db: Any) -> None:
            for write in writes:
                write(db)
        return both

    def _through_book(self, connection_id: str, after: Callable[[Reservation], Connection],
                      action: Callable[[], Reservation]) -> Connection:
        """Run a book `action`; the connection (`after(reservation)`) is written in the transaction of
        the reservation's row, or on its own when the book wrote no row."""
        self._pending, self._written = (connection_id, after), []
        try:
            reservation = action()
        except BaseException:
            if self._written:  # the book stored a change before it failed: memory follows the file
                self._connections[connection_id] = self._written[-1]
            raise
        finally:
            self._pending = None
        if self._written:
            result = self._written[-1]
        else:
            result = after(reservation)
            self.ledger.write(_writer(result))
        self._connections[connection_id] = result
        return result

    # -- reading ---------------------------------------------------------------------------------

    def connection(self, principal: Principal, connection_id: str) -> Connection:
        """The connection `connection_id`, if the caller may see it (someone else's: as if it did not
        exist)."""
        if not isinstance(connection_id, str) or len(connection_id) > MAX_TEXT:
            raise InvalidArgument(f"connectionId: expected an id, got {shown(connection_id)}")
        found = self._connections.get(connection_id)
        if found is None or not principal.may_see(found.owner):
            raise NsiRefused(f"connectionId {shown(connection_id)}: no such connection at {self.nsa}", "00203")
        return found

    def reservation_of(self, connection: Connection) -> Reservation | None:
        """The reservation booking `connection` (None: the book forgot it)."""
        try:
            return self.book.get(_SERVICE, connection.reservation)
        except NotFound:
            return None

    def states(self, connection: Connection) -> States:
        """The connection's NSI states now."""
        self._catch_up()
        return states_of(connection, self.reservation_of(connection))

    def summaries(self, principal: Principal, connection_ids: tuple[str, ...] = (),
                  global_ids: tuple[str, ...] = ()) -> list[Summary]:
        """The caller's connections among `connection_ids` or `global_ids` (both empty: all of them),
        oldest first; unknown ids are left out, as NSI's querySummary does."""
        self._catch_up()
        wanted = set(connection_ids)
        wanted_global = set(global_ids)
        found = []
        for connection in self._connections.values():
            if not principal.may_see(connection.owner):
                continue
            if (wanted or wanted_global) and connection.id not in wanted and connection.global_id not in wanted_global:
                continue
            reservation = self.reservation_of(connection)
            found.append(Summary(connection, states_of(connection, reservation),
                                 reservation.reason if reservation is not None else ""))
        return sorted(found, key=lambda s: (s.connection.created, s.connection.id))

    def _catch_up(self) -> None:
        """Tick the book when a window or a hold deadline passed, so states are as of now."""
        if self.book.next_deadline() <= self.clock.now():
            self.book.tick()

    # -- the reservation state machine -------------------------------------------------------

    def reserve(self, principal: Principal, ask: ReserveAsk) -> Connection:
        """Hold a new connection between the two STPs `ask` names (ReserveHeld), or refuse with
        nothing booked. A retry of the same request (same requester NSA and correlationId) returns
        the connection the first one made."""
        require_role(principal, "reserve NSI connections")
        self._catch_up()
        if ask.directionality != "Bidirectional":
            raise NsiRefused(f"p2ps.directionality: {shown(ask.directionality)}: this network books Bidirectional "
                             "circuits only", "00706")
        for field, value in (("description", ask.description), ("globalReservationId", ask.global_id),
                             ("requesterNSA", ask.requester_nsa), ("correlationId", ask.correlation_id)):
            if not isinstance(value, str) or len(value) > MAX_TEXT:
                raise InvalidArgument(f"{field}: text of at most {MAX_TEXT} characters, got {shown(value)}")
        if isinstance(ask.capacity_mbps, bool) or not isinstance(ask.capacity_mbps, int) \
                or not 1 <= ask.capacity_mbps <= 10**9:
            raise NsiRefused(f"p2ps.capacity: {shown(ask.capacity_mbps)} Mbit/s is not a capacity above 0", "00100")
        now = self.clock.now()
        start = now if ask.start is None else ask.start
        end = math.inf if ask.end is None else ask.end
        if start < now - PAST_TOLERANCE:
            raise NsiRefused(f"schedule.startTime {format_time(start)} is in the past (now {format_time(now)})",
                             "00100")
        start = max(start, now)
        if end <= start:
            raise NsiRefused(f"schedule.endTime {format_time(end)} is not after the start {format_time(start)}"
                             + (" (it is in the past)" if end <= now else ""), "00100")
        source = parse_stp(ask.source_stp, "p2ps.sourceSTP", self.network)
        dest = parse_stp(ask.dest_stp, "p2ps.destSTP", self.network)
        if source.port == dest.port:
            raise NsiRefused(f"p2ps: source and destination are both port {source.port}: a hairpin is not offered",
                             "00102")
        retry = self._connections.get(self._asked.get((principal.name, ask.requester_nsa, ask.correlation_id), ""))
        if retry is not None:
            return retry  # the same reserve again: its answer again
        if len(self._connections) >= MAX_CONNECTIONS:
            raise NsiRefused(f"{len(self._connections)} connections are kept, the most this provider keeps; "
                             "terminate some", "00600")
        vlans = {}
        for end_name, stp in (("sourceSTP", source), ("destSTP", dest)):
            vlans[end_name] = self._free_vlan(stp, f"p2ps.{end_name}", start, end)
        connection_id = self._new_id()
        if len(self._asked) >= 2 * MAX_CONNECTIONS:
            del self._asked[next(iter(self._asked))]
        self._asked[(principal.name, ask.requester_nsa, ask.correlation_id)] = connection_id
        request = PathRequest(source.port, dest.port, ask.capacity_mbps * 1_000_000, start, end,
                              src_vlan=vlans["sourceSTP"], dst_vlan=vlans["destSTP"])
        fresh = Connection(connection_id, principal.name, ask.requester_nsa, ask.reply_to, ask.global_id,
                           ask.description, source.urn(vlans["sourceSTP"]), dest.urn(vlans["destSTP"]),
                           ask.capacity_mbps, start, end, "", now)
        return self._through_book(
            connection_id, lambda r: replace(fresh, reservation=r.id),
            lambda: self.book.create(principal, request, labels={LABEL: connection_id},
                                     terms=Terms(hold=True, provision=False)))

    def _free_vlan(self, stp: Stp, field: str, start: float, end: float) -> int:
        """The first VLAN of the STP's range that its port offers and no live reservation uses there
        in [start, end); NsiRefused naming what is in the way otherwise."""
        try:
            switch_port = self.topology.endpoint(stp.port)
        except (NotFound, InvalidArgument):
            raise NsiRefused(f"{field}: {stp.urn()}: no port {stp.port!r} in {self.network} (its STPs are the DTN "
                             "and inter-domain ports: see /NSI/discovery.xml)", "00701") from None
        if self.topology.is_remote(stp.port):
            raise NsiRefused(f"{field}: {stp.port} is a DTN of {self.topology.domain_of(stp.port)}, not a port of "
                             f"{self.network}", "00701")
        offered = self.topology.vlan_range(stp.port)
        first, last = max(stp.vlans[0], offered[0]), min(stp.vlans[1], offered[1])
        if first > last:
            raise NsiRefused(f"{field}: VLAN {stp.urn().rsplit('=', 1)[1]} is outside what port {stp.port} offers "
                             f"({offered[0]}-{offered[1]})", "00704")
        used = vlans.users(self.topology, self.book.snapshot(_SERVICE), switch_port, first, last, start, end)
        for vlan in range(first, last + 1):
            if vlan not in used:
                return vlan
        holder = used[first]
        raise NsiRefused(f"{field}: {stp.urn()} is not available: VLAN {first}"
                         + (f"-{last} are" if last > first else " is") + f" taken at port {stp.port} "
                         f"(by {holder.name}{_nsi_name(holder)} until {format_time(holder.request.end)})", "00704")

    def _new_id(self) -> str:
        prefix = self.domain[:2].upper()
        while True:
            candidate = f"{prefix}-{os.urandom(5).hex()}"
            if candidate not in self._connections:
                return candidate

    def commit(self, principal: Principal, connection_id: str) -> Connection:
        """reserveCommit: the held connection becomes a booking (ReserveStart)."""
        connection = self._live(principal, connection_id, "reserveCommit")
        states = self.states(connection)
        if states.reservation == "ReserveTimeout":
            raise NsiRefused(f"{connection_id}: its hold timed out (not committed within {self.book.hold_timeout:g} s) "
                             "and its booking was freed; reserve again", "00201")
        if states.reservation != "ReserveHeld":
            raise NsiRefused(f"{connection_id} is {states.reservation}: only a ReserveHeld connection can be "
                             "committed", "00201")
        return self._through_book(connection.id, lambda r: connection,
                                  lambda: self.book.commit(principal, connection.reservation))

    def abort(self, principal: Principal, connection_id: str) -> Connection:
        """reserveAbort: give up the held connection (ReserveStart, nothing booked)."""
        connection = self._live(principal, connection_id, "reserveAbort")
        states = self.states(connection)
        if states.reservation not in ("ReserveHeld", "ReserveTimeout"):
            raise NsiRefused(f"{connection_id} is {states.reservation}: only a held connection can be aborted", "00201")
        if states.reservation == "ReserveTimeout":
            return connection  # the timeout freed it already
        return self._through_book(connection.id, lambda r: connection,
                                  lambda: self.book.abort(principal, connection.reservation))

    # -- the provision state machine ---------------------------------------------------------------

    def provision(self, principal: Principal, connection_id: str) -> Connection:
        """provision: the data plane goes up now (or at the start of the schedule)."""
        connection = self._live(principal, connection_id, "provision")
        self._committed(connection, "provision")
        return self._through_book(connection.id, lambda r: connection,
                                  lambda: self.book.provision(principal, connection.reservation))

    def release(self, principal: Principal, connection_id: str) -> Connection:
        """release: the data plane goes down; the booking stays."""
        connection = self._live(principal, connection_id, "release")
        self._committed(connection, "release")
        return self._through_book(connection.id, lambda r: connection,
                                  lambda: self.book.unprovision(principal, connection.reservation))

    def _committed(self, connection: Connection, operation: str) -> None:
        self._catch_up()
        reservation = self.reservation_of(connection)
        states = states_of(connection, reservation)
        if states.reservation != "ReserveStart" or states.lifecycle != "Created" \
                or reservation is None or reservation.state.is_final:
            raise NsiRefused(f"{connection.id} is {states.reservation}, {states.lifecycle}: {operation} needs a "
                             "committed connection that is not terminated", "00201")

    # -- the lifecycle ---------------------------------------------------------------------------

    def terminate(self, principal: Principal, connection_id: str) -> Connection:
        """terminate: free whatever the connection books; it stays Terminated for queries."""
        connection = self.connection(principal, connection_id)
        if connection.terminated:
            return connection
        ended = replace(connection, terminated=True)
        reservation = self.reservation_of(connection)
        if reservation is None or reservation.state.is_final:
            self.ledger.write(_writer(ended))
            self._connections[connection.id] = ended
        else:
            self._through_book(connection.id, lambda r: ended,
                               lambda: self.book.release(principal, connection.reservation, "NSI terminate"))
        self._forget_terminated()
        return self._connections[connection.id]

    def _forget_terminated(self) -> None:
        terminated = [c for c in self._connections.values() if c.terminated]
        for old in sorted(terminated, key=lambda c: c.created)[:max(0, len(terminated) - MAX_KEPT_TERMINATED)]:
            self.ledger.write(lambda db, gone=old.id: store.delete(db, store.NSI_CONNECTIONS, gone))
            del self._connections[old.id]

    def _live(self, principal: Principal, connection_id: str, operation: str) -> Connection:
        connection = self.connection(principal, connection_id)
        if connection.terminated:
            raise NsiRefused(f"{connection_id} is Terminated: {operation} is not possible", "00201")
        return connection

    def note_reply_to(self, connection_id: str, reply_to: str | None) -> None:
        """Send the connection's later confirmations and notifications to `reply_to` (the last
        request's; kept in memory: a restart returns to the reserve's)."""
        found = self._connections.get(connection_id)
        if found is not None and reply_to and reply_to != found.reply_to:
            self._connections[connection_id] = replace(found, reply_to=reply_to)

    # -- notifications ---------------------------------------------------------------------------

    def notices(self, events: list[Event]) -> list[Notice]:
        """The notifications the book's `events` mean for NSI requesters."""
        found: list[Notice] = []
        for event in events:
            connection = self._connections.get(event.reservation.labels.get(LABEL, ""))
            if connection is None or event.reservation.id != connection.reservation:
                continue
            found.extend(notices_of(connection, event, self.book.hold_timeout))
        return found


def notices_of(connection: Connection, event: Event, hold_timeout: float) -> list[Notice]:
    """What one reservation event of `connection` tells its requester."""
    new, previous = event.reservation.state, event.previous
    found = []
    was_active, active = previous in ACTIVE_STATES, new in ACTIVE_STATES
    if was_active != active:
        found.append(Notice("dataPlaneStateChange", connection, event.time, active=active))
    if new is State.FAILED:
        starting = previous in (State.PROVISIONING, State.SCHEDULED, State.RESERVED)
        kind = "activateFailed" if starting else "dataplaneError"
        found.append(Notice("errorEvent", connection, event.time, event=kind, text=event.reason))
    elif new is State.DEGRADED and previous is not State.DEGRADED:
        found.append(Notice("errorEvent", connection, event.time, event="dataplaneError", text=event.reason))
    elif new is State.EXPIRED and previous is State.HELD:
        found.append(Notice("reserveTimeout", connection, event.time, text=event.reason, timeout=round(hold_timeout)))
    elif new is State.RELEASED and not connection.terminated and previous is not State.HELD:
        found.append(Notice("errorEvent", connection, event.time, event="forcedEnd", text=event.reason))
    return found


def _nsi_name(reservation: Reservation) -> str:
    connection = reservation.labels.get(LABEL)
    return f", NSI connection {connection}" if connection else ""


def _writer(connection: Connection) -> AlsoWrite:
    return lambda db: store.save(db, store.NSI_CONNECTIONS, connection.id, connection.owner, connection.row())


def _read(row: store.Stored) -> Connection:
    body = row.reader
    return Connection(row.id, row.owner, body.text("requester_nsa"), body.optional_text("reply_to"),
                      body.text("global_id"), body.text("description"), body.text("source"), body.text("dest"),
                      body.integer("capacity_mbps") or 0, body.number("start") or 0.0, body.open_end("end"),
                      body.text("reservation"), body.number("created") or 0.0, body.integer("version") or 0,
                      bool(body.flag("terminated")))
