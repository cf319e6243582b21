"""The `reservations` table: one row per reservation, in the SQLite file of the ledger, and its paging.

    ledger.write(create_table)                         # an older file gets the columns it lacks
    ledger.reserve(..., also=lambda db: insert(db, r))  # a row is written inside the ledger's transaction
    page, token = list_page(ledger.query, topology, principal, page_size=50)

A row holds a few columns to query by (id, owner, request_id, state, created, src, dst, and
`ended`: when a final one ended, NULL while live) and the whole reservation as JSON in `body`.
Request fields added later (prefixes, the ends' VLANs, a remote end's inter-domain port) are in
the body only when set, so older rows, without them, load as reservations that do not use them.
Rows are written only inside the ledger's transactions (one writer), so a reservation's row and
its booking are committed together or not at all.

Every reservation, live or ended, has its row here, written before the book remembers it:
`list_page` pages through the table itself, ordered by creation then id, so a page token stays
valid whatever leaves the book's memory between pages. A follower (`northbound.follower`) reads
the same rows with the same functions.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
import sqlite3
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from sdn_app.core import decisions, validation
from sdn_app.core.errors import InvalidArgument, NotFound, PermissionDenied
from sdn_app.core.paths import Path, PathRequest, Route
from sdn_app.core.reservation import Principal, Reservation, Role, ScheduleStep, State, require_role
from sdn_app.core.topology import Topology

Query = Callable[[str, tuple], list[tuple]]  # rows of an SQL query on the state database

_RESERVATION_NAME = re.compile(r"^(reservations/)?(?P<id>[0-9a-f]{32})$")
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_TOKEN = 1024  # ours are about 180 characters
MAX_PAGE_SIZE = 1000


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
    require_role(principal, "list reservations")
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
    require_role(principal, "read reservations")
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


def read_by_request_id(query: Query, topology: Topology, owner: str, request_id: str) -> Reservation | None:
    """The reservation `owner` created with `request_id`, from the table `query` reads, if any."""
    rows = query("SELECT body FROM reservations WHERE owner = ? AND request_id = ? LIMIT 1", (owner, request_id))
    return _from_json(json.loads(rows[0][0]), topology) if rows else None


def read_loaded(query: Query, topology: Topology, keep_ended: float, now: float) -> list[Reservation]:
    """What a book loads at start-up: every live reservation, and those ended within `keep_ended`
    seconds of `now` (`math.inf`: every one); older ones stay in the store only."""
    live = [s.value for s in State if not s.is_final]
    rows = query(f"SELECT body FROM reservations WHERE state IN ({', '.join('?' * len(live))})", tuple(live))
    if math.isinf(keep_ended):
        rows += query("SELECT body FROM reservations WHERE ended IS NOT NULL", ())
    else:  # and ended within keep_ended; older ones stay in the store only
        rows += query("SELECT body FROM reservations WHERE ended > ?", (now - keep_ended,))
    return [_from_json(json.loads(body), topology) for (body,) in rows]


def create_table(db: sqlite3.Connection) -> None:
    """The `reservations` table and its indexes; an older file gets the columns it lacks, filled once."""
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


def insert(db: sqlite3.Connection, r: Reservation) -> None:
    """Inside a ledger transaction: the row of a new reservation."""
    db.execute("INSERT INTO reservations (id, owner, request_id, state, body, created, src, dst, ended) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
               (r.id, r.owner, r.request_id, r.state, _body(r), r.created, r.request.src,
                r.request.dst, r.updated if r.state.is_final else None))


def update(db: sqlite3.Connection, r: Reservation) -> None:
    """Inside a ledger transaction: a reservation's row as it is now."""
    db.execute("UPDATE reservations SET state=?, body=?, ended=? WHERE id=?",
               (r.state, _body(r), r.updated if r.state.is_final else None, r.id))


def _body(r: Reservation) -> str:
    """The row's JSON body, compact (a decision's evidence makes it about 0.5 kB longer)."""
    return json.dumps(_to_json(r), separators=(",", ":"))


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
                    "exclude": list(q.exclude), "max_hops": q.max_hops, "protect": q.protect,
                    # Only when set: rows of reservations without prefixes stay as they were.
                    **({"src_prefix": q.src_prefix, "dst_prefix": q.dst_prefix} if q.src_prefix is not None else {}),
                    **({"src_vlan": q.src_vlan} if q.src_vlan is not None else {}),
                    **({"dst_vlan": q.dst_vlan} if q.dst_vlan is not None else {}),
                    **({"via": q.via} if q.via is not None else {})},
        "primary": _path_json(r.route.primary) if r.route else None,
        "backup": _path_json(r.route.backup) if r.route else None,
        "decision": decisions.to_dict(r.decision) if r.decision is not None else None,
        **_booking_json(r),
    }


def _booking_json(r: Reservation) -> dict[str, Any]:
    """How it is booked, beyond a guaranteed bandwidth: only the fields that differ from the
    defaults, so the rows of plain reservations stay as short as before."""
    extra: dict[str, Any] = {}
    if r.hold_until:
        extra["hold_until"] = r.hold_until
    if not r.provisioned:
        extra["provisioned"] = False
    if r.priority != 1:
        extra["priority"] = r.priority
    if r.ceiling:
        extra["ceiling"] = r.ceiling
    if r.rate:
        extra["rate"] = r.rate
    if r.schedule:
        extra["schedule"] = [[s.start, s.end, s.bandwidth] for s in r.schedule]
    return extra


def _from_json(data: dict[str, Any], topology: Topology) -> Reservation:
    q = data["request"]
    request = PathRequest(q["src"], q["dst"], q["bandwidth"], q["start"], math.inf if q["end"] is None else q["end"],
                          q["policy"], tuple(q["include"]), tuple(q["exclude"]), q["max_hops"], q["protect"],
                          q.get("src_prefix"), q.get("dst_prefix"), q.get("src_vlan"), q.get("dst_vlan"), q.get("via"))

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
                       data.get("fingerprint", ""),
                       decisions.from_dict(data["decision"]) if data.get("decision") else None,
                       hold_until=data.get("hold_until", 0.0), provisioned=data.get("provisioned", True),
                       priority=data.get("priority", 1), ceiling=data.get("ceiling", 0), rate=data.get("rate", 0),
                       schedule=tuple(ScheduleStep(*step) for step in data.get("schedule", ())))
