"""The SENSE orchestrator's service instances, on the reservation book: what the Rucio-SENSE DMM (and
any `sense-o-api` client) drives through /sense/api (docs/sense.md).

An instance is named by a UUID the client asked for (`GET /instance`). `create` compiles an
intent (a dnc connection, or a service profile edited by the intent's queries: `sense_intents`)
into a two-phase hold: the book's reservation is HELD (booked, no flows). `provision` commits it
(PROVISIONING, then ACTIVE once every switch confirmed its flows); `modify` changes its bandwidth,
QoS terms or end; `cancel` releases it; `reprovision` books the same connection again; `delete`
forgets the instance. With prefixes (the /64s the address pools handed out, `address_pool`) the
reservation's flows match them, so two rules between the same DTNs are two reservations.

Statuses (`SUPER - SUB`, exactly as clients and the DMM compare them) follow from the instance's
phase (the last operation: CREATE, MODIFY, CANCEL, REINSTATE) and its reservation's state:

| reservation | status |
| --- | --- |
| HELD (CREATE, not provisioned yet) | CREATE - COMPILED |
| not held any more (`--hold-timeout`), not provisioned | CREATE - COMPILED (provision books it again) |
| SCHEDULED (its window has not started) | PHASE - COMMITTED |
| PROVISIONING | PHASE - COMMITTING |
| ACTIVE, MOVING, DEGRADED | PHASE - READY |
| FAILED | PHASE - FAILED |
| released or expired (cancelled, or its window ended) | CANCEL - READY |

`SenseDesk` is pure and owned by the core thread like the book. It writes each instance's row
in the very ledger transaction that writes its reservation's row (the book's `companion`), so
after a crash the two agree; profiles and address allocations are rows of their own
(`sense_store`). Every operation checks the whole request before the book changes anything: a
refusal leaves the instance, its reservation and the pools as they were.
"""

from __future__ import annotations

import ipaddress
import json
import re
import uuid as uuids
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sdn_app.core import sense_store as store
from sdn_app.core.address_pool import AddressPools
from sdn_app.core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    NotFound,
)
from sdn_app.core.ledger import AlsoWrite
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Reservation, Role, State, require_role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.sense_discovery import Discovery
from sdn_app.core.sense_intents import (
    Connection,
    Intent,
    Query,
    Terminal,
    Urns,
    apply_edits,
    booking_for,
    elastic_for,
    read_intent,
    resolve,
)
from sdn_app.core.sense_profiles import ServiceProfiles
from sdn_app.core.units import format_bandwidth, format_time, parse_duration, parse_time
from sdn_app.core.validation import shown

LABEL = "tsdn/sense"  # the label of an instance's reservations: the instance's UUID
MAX_INSTANCES = 10_000  # instances kept (deleted ones are forgotten)
MAX_INTENTS_KEPT = 10  # the last intents of an instance shown by /intent/instance/UUID
PHASES = ("CREATE", "MODIFY", "CANCEL", "REINSTATE")
ACTIONS = ("provision", "cancel", "reprovision")
QUERY_ASKS = ("edit", "maximum-bandwidth", "total-block-maximum-bandwidth", "extract-result-values")
# The variables `extract-result-values` answers (SPARQL is not evaluated: docs/sense.md).
RESULT_VARIABLES = ("ipv6_subnet_uri", "ipv6_subnet", "uri", "dtn")
_SELECT = re.compile(r"SELECT\s+(?:DISTINCT\s+)?((?:\?\w+\s*)+)\s*WHERE", re.IGNORECASE)


@dataclass(frozen=True)
class Status:
    """`SUPER - SUB` and what it means for this instance now."""

    superstate: str
    substate: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.superstate} - {self.substate}"


@dataclass(frozen=True)
class IntentRecord:
    """One intent an instance was given (created or modified with)."""

    uuid: str
    created: float
    intent: Mapping[str, Any]

    def as_json(self, instance: str) -> dict[str, Any]:
        return {"uuid": self.uuid, "serviceUUID": instance, "created": format_time(self.created),
                "json": json.dumps(self.intent, sort_keys=True)}


@dataclass(frozen=True)
class Instance:
    """A service instance: its connection, its phase and the reservation that books it."""

    uuid: str
    owner: str
    alias: str
    created: float
    updated: float
    phase: str
    committed: bool  # the phase's operation reached the book (False: CREATE compiled, not provisioned)
    reservation: str  # the current reservation's id ("": none yet)
    connection: Connection
    generation: int = 0  # reservations made for it so far (their request ids count them)
    intents: tuple[IntentRecord, ...] = ()
    note: str = ""  # what the last operation did, in words

    def row(self) -> dict[str, Any]:
        return {"alias": self.alias, "created": self.created, "updated": self.updated, "phase": self.phase,
                "committed": self.committed, "reservation": self.reservation, "generation": self.generation,
                "connection": self.connection.as_json(), "note": self.note,
                "intents": [{"uuid": i.uuid, "created": i.created, "intent": i.intent} for i in self.intents]}


@dataclass(frozen=True)
class View:
    """An instance as a client sees it: with its status and reservation."""

    instance: Instance
    status: Status
    reservation: Reservation | None

    def as_json(self) -> dict[str, Any]:
        """The instance as `GET /instance/UUID` and `/discover/service/instances` show it."""
        i, r, c = self.instance, self.reservation, self.instance.connection
        out: dict[str, Any] = {
            "referenceUUID": i.uuid, "alias": i.alias, "owner": i.owner, "state": str(self.status),
            "superState": self.status.superstate, "lastState": self.status.substate, "detail": self.status.detail,
            "creationTime": format_time(i.created), "lastModified": format_time(i.updated), "note": i.note,
            "connection": {"name": c.name, "source": c.src.uri, "destination": c.dst.uri,
                           "source_prefix": c.src.prefix, "destination_prefix": c.dst.prefix,
                           "qos_class": c.qos_class, "capacity_mbps": _mbps(c.capacity),
                           "start": format_time(c.start), "end": format_time(c.end)},
            "intents": [record.as_json(i.uuid) for record in i.intents],
        }
        if r is not None:
            out["reservation"] = {"name": r.name, "state": str(r.state), "reason": r.reason,
                                  "bandwidth_bps": r.request.bandwidth, "ceiling_bps": r.ceiling,
                                  "meter_bps": r.meter_bps, "priority": r.priority,
                                  "route": list((r.route.primary.src, *r.route.primary.switches, r.route.primary.dst))
                                  if r.route is not None else []}
        return out


@dataclass(frozen=True)
class Answer:
    """What create and modify return: the instance, the intent's UUID and each query's results."""

    view: View
    intent_uuid: str
    queries: tuple[tuple[str, tuple[Any, ...]], ...]

    def as_json(self) -> dict[str, Any]:
        return {"service_uuid": self.view.instance.uuid, "intent_uuid": self.intent_uuid,
                "queries": [{"asked": ask, "results": list(results)} for ask, results in self.queries],
                "state": str(self.view.status)}


def instance_uuid(value: str) -> str:
    """A service instance's UUID in its canonical form; `InvalidArgument` for anything else."""
    try:
        parsed = uuids.UUID(value)
    except (ValueError, AttributeError, TypeError):
        raise InvalidArgument(f"{shown(value)} is not a service instance UUID (GET /instance gives one)") from None
    return str(parsed)


def _mbps(bps: int) -> str:
    """Bits/s as SENSE's Mbit/s text."""
    return str(bps // 10**6) if bps % 10**6 == 0 else f"{bps / 10**6:.6f}".rstrip("0")


def status_of(instance: Instance, reservation: Reservation | None) -> Status:
    """The instance's status, from its phase and its reservation (the module's table)."""
    phase = instance.phase
    if reservation is None:
        if phase == "CANCEL":
            return Status("CANCEL", "READY", "cancelled")
        if phase == "CREATE" and not instance.committed:
            return Status("CREATE", "COMPILED", "compiled; nothing is held: provision books it")
        return Status(phase, "FAILED", "its reservation is gone from the state file")
    state, reason = reservation.state, reservation.reason
    if phase == "CANCEL":
        return Status("CANCEL", "READY" if state.is_final else "COMMITTING", reason)
    if phase == "CREATE" and not instance.committed:
        if state is State.HELD:
            return Status("CREATE", "COMPILED", f"held until {format_time(reservation.hold_until)}")
        if state is State.FAILED:
            return Status("CREATE", "FAILED", reason)
        return Status("CREATE", "COMPILED", f"compiled; its hold ended ({reason}): provision books it again")
    if state is State.FAILED:
        return Status(phase, "FAILED", reason)
    if state.is_final:
        return Status("CANCEL", "READY", reason)
    if state is State.PROVISIONING:
        return Status(phase, "COMMITTING", reason)
    if state in (State.SCHEDULED, State.RESERVED, State.HELD):
        return Status(phase, "COMMITTED", reason or f"its window starts {format_time(reservation.request.start)}")
    return Status(phase, "READY", reason)


Pending = tuple[Callable[[Reservation], bool], Callable[[Reservation], "Instance | None"]]


class SenseDesk:
    """Every service instance, profile and address pool of one controller; not thread-safe: the core
    thread calls it (`await worker.call_async(...)`)."""

    def __init__(self, book: ReservationBook, domain: str):
        """Load the SENSE tables of the book's ledger, and become the book's companion for the rows
        of instances (after any companion set before: the transfer desk's)."""
        self.book = book
        self.ledger = book.ledger
        self.clock = book.clock
        self.topology = book.topology
        self.urns = Urns(domain, book.topology)
        self.ledger.write(store.create_tables)
        self.pools = AddressPools(book.topology, book.ledger, book.clock, self.urns)
        self.pools.in_use = self._prefix_user
        self.profiles = ServiceProfiles(book.ledger, book.clock, domain)
        self.discovery = Discovery(self.urns, book.topology, self.pools)
        self._instances: dict[str, Instance] = {}
        for row in store.load(self.ledger, store.INSTANCES):
            self._instances[row.id] = self._read_instance(row)
        self._pending: Pending | None = None
        self._written: list[Instance | None] = []
        self._previous = book.companion
        book.companion = self._companion

    # -- rows ----------------------------------------------------------------------------------

    def _companion(self, reservation: Reservation) -> AlsoWrite | None:
        """The book writes `reservation`'s row: the instance an operation in progress changes with
        it joins that transaction (and the previous companion's rows, as before)."""
        writes: list[AlsoWrite] = []
        if self._previous is not None and (earlier := self._previous(reservation)) is not None:
            writes.append(earlier)
        if self._pending is not None and self._pending[0](reservation):
            instance = self._pending[1](reservation)
            self._written.append(instance)
            writes.append(self._writer(instance, reservation))
        if len(writes) < 2:
            return writes[0] if writes else None

        def both(db: Any) -> None:
            for write in writes:
                write(db)
        return both

    def _writer(self, instance: Instance | None, reservation: Reservation | None = None) -> AlsoWrite:
        if instance is None:  # deleted: the row of the instance the reservation is labelled with
            gone = reservation.labels.get(LABEL, "") if reservation is not None else ""
            return lambda db: store.delete(db, store.INSTANCES, gone)
        return lambda db: store.save(db, store.INSTANCES, instance.uuid, instance.owner, instance.row())

    def _through_book(self, match: Callable[[Reservation], bool], after: Callable[[Reservation], Instance | None],
                      action: Callable[[], Reservation], uuid: str) -> Instance | None:
        """Run a book `action`, the instance (`after(reservation)`, None: deleted) written in the
        transaction of the reservation's row; written on its own when the book wrote no row."""
        self._pending, self._written = (match, after), []
        try:
            reservation = action()
        except BaseException:
            if self._written:  # the book stored a change before it failed: memory follows the file
                self._remember(uuid, self._written[-1])
            raise
        finally:
            self._pending = None
        if self._written:
            result = self._written[-1]
        else:
            result = after(reservation)
            if result is None:
                self.ledger.write(lambda db: store.delete(db, store.INSTANCES, uuid))
            else:
                self.ledger.write(self._writer(result))
        self._remember(uuid, result)
        return result

    def _remember(self, uuid: str, instance: Instance | None) -> None:
        if instance is None:
            self._instances.pop(uuid, None)
        else:
            self._instances[instance.uuid] = instance

    def _save(self, instance: Instance) -> Instance:
        """Store an instance whose change touched no reservation."""
        self.ledger.write(self._writer(instance))
        self._instances[instance.uuid] = instance
        return instance

    def _read_instance(self, row: store.Stored) -> Instance:
        body = row.reader
        raw = body.child("connection")
        assert raw is not None
        ends = []
        for key in ("src", "dst"):
            end = raw.child(key)
            assert end is not None
            ends.append(Terminal(end.text("uri"), end.text("dtn"), end.optional_text("prefix"), end.text("vlan_tag")))
        connection = Connection(raw.text("name"), ends[0], ends[1], raw.text("qos_class"), raw.integer("capacity"),
                                raw.open_end("start"), raw.open_end("end"))
        phase = body.text("phase")
        if phase not in PHASES:
            body.bad("phase", f"{phase!r} is not one of {', '.join(PHASES)}")
        intents = []
        for record in body.children("intents"):
            intent = record.value("intent")
            if not isinstance(intent, dict):
                record.bad("intent", "expected an object")
            intents.append(IntentRecord(record.text("uuid"), record.number("created"), intent))
        return Instance(row.id, row.owner, body.text("alias"), body.number("created"), body.number("updated"), phase,
                        body.flag("committed"), body.text("reservation"), connection, body.integer("generation"),
                        tuple(intents), body.text("note"))

    # -- reading ---------------------------------------------------------------------------------

    def _instance(self, principal: Principal, uuid: str) -> Instance:
        """The instance `uuid`, if the caller may see it (someone else's: as if it did not exist)."""
        uuid = instance_uuid(uuid)
        instance = self._instances.get(uuid)
        if instance is None or not principal.may_see(instance.owner):
            raise NotFound(f"service instance {uuid}: no such instance (create it with POST /instance/{uuid})")
        return instance

    def _reservation(self, instance: Instance) -> Reservation | None:
        if not instance.reservation:
            return None
        try:
            return self.book.get(Principal("tsdn-sense", Role.ADMIN), instance.reservation)
        except NotFound:
            return None

    def _catch_up(self) -> None:
        """Tick the book when a window or a hold deadline passed (as the worker would in a moment),
        so that statuses and operations see the book as of now."""
        if self.book.next_deadline() <= self.clock.now():
            self.book.tick()

    def view(self, principal: Principal, uuid: str) -> View:
        """The instance `uuid` with its status."""
        self._catch_up()
        return self._view(self._instance(principal, uuid))

    def _view(self, instance: Instance) -> View:
        reservation = self._reservation(instance)
        return View(instance, status_of(instance, reservation), reservation)

    def views(self, principal: Principal, search: str = "") -> list[View]:
        """The instances the caller may see (whose alias or UUID contains `search`), oldest first."""
        self._catch_up()
        found = [i for i in self._instances.values() if principal.may_see(i.owner)
                 and (not search or search in i.alias or search in i.uuid)]
        return [self._view(i) for i in sorted(found, key=lambda i: (i.created, i.uuid))]

    def intents(self, principal: Principal, uuid: str) -> list[dict[str, Any]]:
        """The intents an instance was given, oldest first."""
        instance = self._instance(principal, uuid)
        return [record.as_json(instance.uuid) for record in instance.intents]

    def intent(self, principal: Principal, intent_uuid: str) -> dict[str, Any]:
        """One intent by its UUID."""
        for instance in self._instances.values():
            if principal.may_see(instance.owner):
                for record in instance.intents:
                    if record.uuid == intent_uuid:
                        return record.as_json(instance.uuid)
        raise NotFound(f"intent {shown(intent_uuid)}: no such intent")

    def _prefix_user(self, prefix: str) -> str | None:
        """The instance whose live reservation matches `prefix` (None: none)."""
        for instance in self._instances.values():
            if prefix in (instance.connection.src.prefix, instance.connection.dst.prefix):
                reservation = self._reservation(instance)
                if reservation is not None and not reservation.state.is_final:
                    return instance.uuid
        return None

    # -- compiling ------------------------------------------------------------------------------

    def _compile(self, principal: Principal, body: Any) -> tuple[Intent, Connection]:
        """The intent read, its profile edited, its connection resolved and checked against the
        pools; nothing changed."""
        intent = read_intent(body)
        for i, query in enumerate(intent.queries):
            if query.ask not in QUERY_ASKS:
                raise InvalidArgument(f"queries[{i}].ask: {shown(query.ask)}: tsdn answers {', '.join(QUERY_ASKS)}")
            if query.ask == "extract-result-values":
                for j, option in enumerate(query.options):
                    _selected(option, f"queries[{i}].options[{j}]")
        if intent.profile:
            profile = self.profiles.get(principal, intent.profile)
            data = apply_edits(profile.template, intent.queries, profile.rules, profile.editable, profile.name)
            if data.get("service", "dnc") != "dnc":
                raise InvalidArgument(f"profile {profile.name}: service {shown(data.get('service'))}: tsdn provides "
                                      "the dnc service only")
            connection_data = data.get("data")
            if intent.alias == "" and isinstance(data.get("alias"), str):
                intent = replace(intent, alias=data["alias"][:256])
        else:
            if any(q.ask == "edit" for q in intent.queries):
                raise InvalidArgument("queries: edit queries change a service profile; this intent has no "
                                      "service_profile_uuid (edit its data instead)")
            connection_data = intent.data
        connection = resolve(connection_data, self.urns, self.clock.now())
        for i, end in enumerate((connection.src, connection.dst)):
            if end.prefix is None:
                continue
            where = f"data.connections[0].terminals[{i}].ipv6_prefix_list"
            pool = self.pools.pool_of(end.dtn)
            if pool is None:
                raise InvalidArgument(f"{where}: {end.dtn} has no ipv6_pool in the topology file, so none of its "
                                      "prefixes can be allocated")
            if not ipaddress.IPv6Network(end.prefix).subnet_of(pool):
                raise InvalidArgument(f"{where}: {end.prefix} is not in {end.dtn}'s pool {pool}")
            allocation = self.pools.holding(end.dtn, end.prefix)
            if allocation is None:
                raise FailedPrecondition(f"{where}: {end.prefix} is not allocated: allocate it first (POST "
                                         f"/address/allocate/{end.dtn})")
            if not principal.may_see(allocation.owner):
                raise FailedPrecondition(f"{where}: {end.prefix} is allocated to another principal")
        return intent, connection

    def _request(self, connection: Connection) -> PathRequest:
        booking = booking_for(connection, self.topology)
        return PathRequest(connection.src.dtn, connection.dst.dtn, booking.bandwidth, connection.start, connection.end,
                           src_prefix=connection.src.prefix, dst_prefix=connection.dst.prefix)

    def _book(self, principal: Principal, instance: Instance, hold: bool) -> Reservation:
        """Book the instance's connection (held or not) under its next request id."""
        booking = booking_for(instance.connection, self.topology)
        return self.book.create(principal, self._request(instance.connection), labels={LABEL: instance.uuid},
                                request_id=_request_id(instance), terms=booking.terms(hold))

    def _record(self, instance: Instance, intent: Intent) -> tuple[Instance, str]:
        record = IntentRecord(str(uuids.uuid4()), self.clock.now(), intent.as_json())
        return replace(instance, intents=(*instance.intents, record)[-MAX_INTENTS_KEPT:]), record.uuid

    # -- instances ----------------------------------------------------------------------------

    def create(self, principal: Principal, uuid: str, body: Any) -> Answer:
        """`POST /instance/UUID`: compile an intent into a hold (CREATE - COMPILED). On an instance
        that is CREATE - COMPILED already the new intent replaces the old one (compiled again:
        what the DMM does to set the bandwidth before it provisions)."""
        require_role(principal, "create service instances")
        uuid = instance_uuid(uuid)
        self._catch_up()
        intent, connection = self._compile(principal, body)
        existing = self._instances.get(uuid)
        if existing is not None:
            if not principal.may_see(existing.owner):
                raise AlreadyExists(f"service instance {uuid} exists; ask GET /instance for a new UUID")
            status = status_of(existing, self._reservation(existing))
            if (status.superstate, status.substate) != ("CREATE", "COMPILED"):
                raise FailedPrecondition(f"service instance {uuid} is {status}: only a CREATE - COMPILED instance "
                                         "takes a new intent; modify it (POST /instance/UUID/modify) or create "
                                         "another")
            instance = self._recompile(principal, existing, intent, connection)
        else:
            if len(self._instances) >= MAX_INSTANCES:
                raise NoCapacity(f"{len(self._instances)} service instances are kept, the most tsdn keeps; delete "
                                 "cancelled ones (PUT /instance/UUID/delete)")
            now = self.clock.now()
            fresh = Instance(uuid, principal.name, intent.alias, now, now, "CREATE", False, "", connection,
                             note="compiled: held until provisioned")
            fresh, _ = self._record(fresh, intent)
            instance = self._hold(principal, fresh)
        return self._answer(principal, instance, intent)

    def _hold(self, principal: Principal, instance: Instance) -> Instance:
        """Book `instance` as a hold; the instance is written with the reservation's row."""
        numbered = replace(instance, generation=instance.generation + 1)
        result = self._through_book(_made_for(numbered), lambda r: replace(numbered, reservation=r.id),
                                    lambda: self._book(principal, numbered, hold=True), instance.uuid)
        assert result is not None
        return result

    def _recompile(self, principal: Principal, old: Instance, intent: Intent, connection: Connection) -> Instance:
        """A compiled instance given a new intent: its hold modified in place when the traffic and the
        kind of booking stay, else the old hold given up for a new one (the old one booked again
        if the new one does not fit, so a refusal changes nothing)."""
        now = self.clock.now()
        new, _ = self._record(replace(old, alias=intent.alias or old.alias, connection=connection, updated=now,
                                      note="compiled again with a new intent"), intent)
        held = self._reservation(old)
        live = held is not None and held.state is State.HELD
        if live and held is not None and self._modifiable(old.connection, connection, held):
            changes = self._changes(old.connection, connection, held)
            if not changes:
                return self._save(new)
            return self._through_book(_is(held.id), lambda r: new, lambda: self.book.modify(
                principal, held.id, **changes), old.uuid) or new
        if live and held is not None:
            self._through_book(_is(held.id), lambda r: replace(old, note="compiling again"),
                               lambda: self.book.abort(principal, held.id), old.uuid)
        try:
            return self._hold(principal, new)
        except Exception:
            if live:  # nothing changed after all: the old connection held again
                self._hold(principal, replace(self._instances[old.uuid], note="compiled; a new intent was refused"))
            raise

    def _modifiable(self, old: Connection, new: Connection, reservation: Reservation) -> bool:
        return (old.same_traffic(new) and old.start == new.start and reservation.request.start == new.start
                and elastic_for(old, self.topology) == elastic_for(new, self.topology))

    def _changes(self, old: Connection, new: Connection, reservation: Reservation) -> dict[str, Any]:
        """The book's modify arguments that take `reservation` from `old`'s terms to `new`'s."""
        booking = booking_for(new, self.topology)
        changes: dict[str, Any] = {}
        if booking.bandwidth != reservation.request.bandwidth:
            changes["bandwidth"] = booking.bandwidth
        if new.end != reservation.request.end:
            changes["end"] = new.end
        if booking.ceiling and booking.ceiling != reservation.ceiling:
            changes["ceiling"] = booking.ceiling
        priority = booking.priority or None
        if priority is not None and priority != reservation.priority:
            changes["priority"] = priority
        return changes

    def operate(self, principal: Principal, uuid: str, action: str, force: bool = False) -> View:
        """`PUT /instance/UUID/ACTION`: provision (commit the hold), cancel (release), reprovision
        (book a cancelled instance again)."""
        require_role(principal, "operate service instances")
        if action not in ACTIONS:
            raise InvalidArgument(f"action: {shown(action)}: one of {', '.join(ACTIONS)}")
        self._catch_up()
        instance = self._instance(principal, uuid)
        reservation = self._reservation(instance)
        status = status_of(instance, reservation)
        now = self.clock.now()
        if action == "provision":
            return self._provision(principal, instance, reservation, status, now)
        if action == "cancel":
            return self._cancel(principal, instance, reservation, status, force, now)
        if status.superstate == "REINSTATE":
            return self._view(instance)  # a retry
        if str(status) != "CANCEL - READY":
            raise FailedPrecondition(f"service instance {instance.uuid} is {status}: only a CANCEL - READY instance "
                                     "can be reprovisioned")
        again = replace(instance, phase="REINSTATE", committed=True, updated=now, note="reprovisioned: booked again")
        numbered = replace(again, generation=again.generation + 1)
        result = self._through_book(_made_for(numbered), lambda r: replace(numbered, reservation=r.id),
                                    lambda: self._book(principal, numbered, hold=False), instance.uuid)
        assert result is not None
        return self._view(result)

    def _provision(self, principal: Principal, instance: Instance, reservation: Reservation | None, status: Status,
                   now: float) -> View:
        if instance.phase == "CREATE" and instance.committed and status.substate != "FAILED":
            return self._view(instance)  # a retry
        if (status.superstate, status.substate) != ("CREATE", "COMPILED"):
            raise FailedPrecondition(f"service instance {instance.uuid} is {status}: only a CREATE - COMPILED "
                                     "instance can be provisioned")
        committed = replace(instance, committed=True, updated=now, note="provisioned: committed")
        if reservation is not None and reservation.state is State.HELD:
            result = self._through_book(_is(reservation.id), lambda r: committed,
                                        lambda: self.book.commit(principal, reservation.id), instance.uuid)
        else:  # the hold ended before the commit: booked afresh (refused, nothing changes)
            numbered = replace(committed, generation=committed.generation + 1,
                               note="provisioned: its hold had ended, booked afresh")
            result = self._through_book(_made_for(numbered), lambda r: replace(numbered, reservation=r.id),
                                        lambda: self._book(principal, numbered, hold=False), instance.uuid)
        assert result is not None
        return self._view(result)

    def _cancel(self, principal: Principal, instance: Instance, reservation: Reservation | None, status: Status,
                force: bool, now: float) -> View:
        if instance.phase == "CANCEL":
            return self._view(instance)  # a retry
        if status.substate == "FAILED" and not force:
            raise FailedPrecondition(f"service instance {instance.uuid} is {status}: cancel a failed instance with "
                                     "force=true")
        cancelled = replace(instance, phase="CANCEL", committed=True, updated=now, note="cancelled")
        if reservation is None or reservation.state.is_final:
            return self._view(self._save(cancelled))
        held = reservation.state is State.HELD

        def action() -> Reservation:
            if held:
                return self.book.abort(principal, reservation.id)
            return self.book.release(principal, reservation.id, "cancelled through the SENSE API")
        result = self._through_book(_is(reservation.id), lambda r: cancelled, action, instance.uuid)
        assert result is not None
        return self._view(result)

    def modify(self, principal: Principal, uuid: str, body: Any) -> Answer:
        """`POST /instance/UUID/modify`: a new intent for a provisioned instance: its bandwidth, QoS
        class (within guaranteed or within elastic) or end change in place (MODIFY - READY);
        the terminals and prefixes stay."""
        require_role(principal, "modify service instances")
        self._catch_up()
        instance = self._instance(principal, uuid)
        reservation = self._reservation(instance)
        status = status_of(instance, reservation)
        if status.superstate not in ("CREATE", "MODIFY", "REINSTATE") or status.substate not in ("READY", "COMMITTED"):
            raise FailedPrecondition(f"service instance {instance.uuid} is {status}: only a READY (or COMMITTED) "
                                     "instance can be modified")
        assert reservation is not None
        intent, connection = self._compile(principal, body)
        old = instance.connection
        if not old.same_traffic(connection):
            raise InvalidArgument("modify: the terminals and their prefixes cannot change; cancel this instance and "
                                  "create another")
        if connection.start != old.start and reservation.request.start <= self.clock.now():
            connection = replace(connection, start=old.start)  # a running connection keeps its start
        if connection.start != old.start:
            raise InvalidArgument("modify: data.connections[0].schedule.start cannot change")
        if elastic_for(old, self.topology) != elastic_for(connection, self.topology):
            raise InvalidArgument(f"modify: qos_class {old.qos_class} -> {connection.qos_class} would turn a "
                                  f"{'n elastic' if elastic_for(old, self.topology) else ' guaranteed'} reservation "
                                  "into the other kind; cancel and create another instance")
        now = self.clock.now()
        changes = self._changes(old, connection, reservation)
        note = "modified: " + (", ".join(f"{k} {format_bandwidth(v) if k in ('bandwidth', 'ceiling') else v}"
                                         for k, v in changes.items()) or "nothing changed")
        modified, intent_uuid = self._record(replace(instance, phase="MODIFY", committed=True, connection=connection,
                                                     alias=intent.alias or instance.alias, updated=now, note=note),
                                             intent)
        if changes:
            result = self._through_book(_is(reservation.id), lambda r: modified, lambda: self.book.modify(
                principal, reservation.id, **changes), instance.uuid) or modified
        else:
            result = self._save(modified)
        return self._answer(principal, result, intent, intent_uuid)

    def delete(self, principal: Principal, uuid: str) -> None:
        """`PUT /instance/UUID/delete`: forget a cancelled, compiled or failed instance (a compiled
        one's hold is given up)."""
        require_role(principal, "delete service instances")
        self._catch_up()
        instance = self._instance(principal, uuid)
        reservation = self._reservation(instance)
        status = status_of(instance, reservation)
        if not (str(status) in ("CANCEL - READY", "CREATE - COMPILED") or status.substate == "FAILED"):
            raise FailedPrecondition(f"service instance {instance.uuid} is {status}: cancel it first (PUT "
                                     "/instance/UUID/cancel)")
        if reservation is not None and reservation.state is State.HELD:
            self._through_book(_is(reservation.id), lambda r: None, lambda: self.book.abort(principal, reservation.id),
                               instance.uuid)
        elif reservation is not None and not reservation.state.is_final:
            self._through_book(_is(reservation.id), lambda r: None, lambda: self.book.release(
                principal, reservation.id, "instance deleted through the SENSE API"), instance.uuid)
        else:
            self.ledger.write(lambda db: store.delete(db, store.INSTANCES, instance.uuid))
            self._instances.pop(instance.uuid, None)

    # -- queries ----------------------------------------------------------------------------------

    def _answer(self, principal: Principal, instance: Instance, intent: Intent, intent_uuid: str = "") -> Answer:
        view = self._view(instance)
        answers = tuple((q.ask, tuple(self._query(q, view))) for q in intent.queries)
        return Answer(view, intent_uuid or (instance.intents[-1].uuid if instance.intents else ""), answers)

    def _query(self, query: Query, view: View) -> list[Any]:
        connection = view.instance.connection
        ignore = view.reservation.id if view.reservation is not None else None
        if query.ask == "edit":
            return []
        if query.ask == "maximum-bandwidth":
            return [{"name": o.get("name", connection.name), "bandwidth": str(self._widest(
                connection, connection.start, connection.end, ignore))} for o in query.options or [{}]]
        if query.ask == "total-block-maximum-bandwidth":
            results = []
            for i, option in enumerate(query.options or [{}]):
                now = self.clock.now()
                start = parse_time(_option(option, "start", "now"), now, f"total-block-maximum-bandwidth[{i}].start")
                if "end-before" in option:
                    end = parse_time(_option(option, "end-before", ""), start,
                                     f"total-block-maximum-bandwidth[{i}].end-before")
                elif "duration" in option:
                    end = start + parse_duration(_option(option, "duration", ""),
                                                 f"total-block-maximum-bandwidth[{i}].duration")
                else:
                    end = connection.end
                bandwidth = self._widest(connection, max(start, now), end, ignore) if end > start else 0
                results.append({"name": option.get("name", connection.name), "bandwidth": str(bandwidth),
                                "start": format_time(start), "end": format_time(end)})
            return results
        results = []
        for j, option in enumerate(query.options):
            names = _selected(option, f"extract-result-values[{j}]")
            for end in (connection.src, connection.dst):
                if "ipv6_subnet" in names and end.prefix is None:
                    continue
                values = {"ipv6_subnet_uri": self.prefix_list_uri(end, view.instance.uuid),
                          "ipv6_subnet": end.prefix or "", "uri": end.uri, "dtn": end.dtn}
                results.append({name: values[name] for name in names})
        return results

    def prefix_list_uri(self, end: Terminal, instance: str) -> str:
        """The URI of an instance's prefix list at a terminal (what its address is affiliated with)."""
        return f"{self.urns.of(end.dtn)}:service+{instance}:ipv6-prefix-list"

    def _widest(self, connection: Connection, start: float, end: float, ignore: str | None) -> int:
        """The most one reservation could book between the connection's terminals over [start, end),
        its own booking (`ignore`) not counted."""
        probe = replace(self._request(connection), bandwidth=1, start=start, end=end, policy="widest")
        try:
            return self.book.finder.route(probe, ignore=ignore).primary.free_bps
        except (NoCapacity, FailedPrecondition):
            return 0


def _request_id(instance: Instance) -> str:
    return f"sense-{instance.uuid}-{instance.generation}"


def _made_for(instance: Instance) -> Callable[[Reservation], bool]:
    """Matches the reservation booked under the instance's current request id."""
    request_id = _request_id(instance)
    return lambda r: r.request_id == request_id


def _is(reservation_id: str) -> Callable[[Reservation], bool]:
    return lambda r: r.id == reservation_id


def _option(option: Mapping[str, Any], key: str, default: str) -> str:
    value = option.get(key, default)
    if isinstance(value, bool) or not isinstance(value, str | int | float) or len(str(value)) > 64:
        raise InvalidArgument(f"{key}: a time like now, +24h or 2026-11-21T18:00:00Z, got {shown(value)}")
    return str(value)


def _selected(option: Mapping[str, Any], where: str) -> list[str]:
    """The variables an `extract-result-values` SPARQL query selects (those tsdn can answer)."""
    sparql = option.get("sparql")
    if not isinstance(sparql, str) or len(sparql) > 4096:
        raise InvalidArgument(f"{where}.sparql: a SELECT query of at most 4096 characters")
    match = _SELECT.search(sparql)
    if match is None:
        raise InvalidArgument(f"{where}.sparql: no SELECT ?variable ... WHERE; tsdn answers the variables "
                              f"{', '.join(RESULT_VARIABLES)} (SPARQL itself is not evaluated)")
    names = [n.lstrip("?") for n in match[1].split()]
    unknown = [n for n in names if n not in RESULT_VARIABLES]
    if unknown:
        raise InvalidArgument(f"{where}.sparql: ?{unknown[0]}: tsdn answers only {', '.join(RESULT_VARIABLES)}")
    return names
