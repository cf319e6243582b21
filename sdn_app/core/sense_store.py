"""The protocol desks' tables in the ledger's SQLite file: SENSE's instances, service profiles and IPv6
allocations, and NSI's connections (`nsi.NsiDesk`) and WAN segments (`nsi_segments.SegmentDesk`).

    ledger.write(create_tables)                          # an older file without them gets them
    ledger.write(lambda db: save(db, INSTANCES, id, owner, body))   # or inside a reservation's transaction
    for row in load(ledger, INSTANCES): row.reader.text("phase") ...

Each table holds one row per object: its `id` (the key the HA replica stores it under, see
`replication.REPLICATED_TABLES`), its `owner` and the object as JSON in `body`. Rows are written
only inside the ledger's transactions (one writer): an instance's row joins the transaction of
the reservation it books (`SenseDesk` is the book's companion for it), so after a crash at any
point an instance and its reservation agree. `row_fields` reads a body strictly: a missing field or
one of the wrong type raises `CorruptRow` naming the table, the row and the field.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sdn_app.core.ledger import Ledger
from sdn_app.core.row_fields import Fields, read_body

FORMAT = 1  # of the JSON in `body`; a row of another format is refused by name
INSTANCES = "sense_instances"
PROFILES = "sense_profiles"
ADDRESSES = "sense_addresses"
NSI_CONNECTIONS = "nsi_connections"
NSI_SEGMENTS = "nsi_segments"
TABLES = (INSTANCES, PROFILES, ADDRESSES, NSI_CONNECTIONS, NSI_SEGMENTS)


def create_tables(db: sqlite3.Connection) -> None:
    """Create the SENSE and NSI tables unless the file has them."""
    for table in TABLES:
        db.execute(f"""CREATE TABLE IF NOT EXISTS {table} (
                           seq INTEGER PRIMARY KEY AUTOINCREMENT,
                           id TEXT NOT NULL UNIQUE,
                           owner TEXT NOT NULL,
                           body TEXT NOT NULL
                       )""")


def save(db: sqlite3.Connection, table: str, row_id: str, owner: str, body: Mapping[str, Any]) -> None:
    """Insert the row, or replace the stored row of the same id (keeping its place in the order)."""
    if table not in TABLES:
        raise ValueError(f"not a SENSE or NSI table: {table}")
    text = json.dumps({"format": FORMAT, **body}, sort_keys=True, allow_nan=False)
    db.execute(f"INSERT INTO {table} (id, owner, body) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
               "owner=excluded.owner, body=excluded.body", (row_id, owner, text))


def delete(db: sqlite3.Connection, table: str, row_id: str) -> None:
    """Remove the row of `row_id` (none: nothing happens)."""
    if table not in TABLES:
        raise ValueError(f"not a SENSE or NSI table: {table}")
    db.execute(f"DELETE FROM {table} WHERE id=?", (row_id,))


@dataclass(frozen=True)
class Stored:
    """One row read back: its id, owner and a strict reader of its body."""

    id: str
    owner: str
    reader: Fields


def load(ledger: Ledger, table: str) -> list[Stored]:
    """Every row of `table`, oldest first; `CorruptRow` for a body that is not a JSON object of this format."""
    if table not in TABLES:
        raise ValueError(f"not a SENSE or NSI table: {table}")
    rows = []
    for seq, row_id, owner, body in ledger.query(f"SELECT seq, id, owner, body FROM {table} ORDER BY seq"):
        where = f"{ledger.path}: {table} row {seq} (id {row_id!r})"
        hint = (f"; restore the file from a backup, or remove the row "
                f"(sqlite3 FILE \"DELETE FROM {table} WHERE id='{row_id}'\")")
        rows.append(Stored(str(row_id), str(owner), read_body(body, where, hint, FORMAT)))
    return rows


def finite_or_none(value: float) -> float | None:
    """`value` for JSON: an open end (infinity) is written as null."""
    return None if math.isinf(value) else value
