"""The `transfers` table: one row per transfer, in the SQLite file of the ledger and the reservations.

    ledger.write(create_table)                        # an older file without the table gets it
    ledger.write(lambda db: save(db, row))            # or inside a reservation's transaction
    for stored in load(ledger): stored.fields.text("state") ...

A row holds a few columns to query by (id, owner, request_id, reservation_id, state) and the
whole transfer as JSON in `body`; `seq` keeps the order transfers were started in. Rows are
written only inside the ledger's transactions (one writer), so a transfer's row and its
reservation's row are committed together when a change touches both. `Fields` reads a body
strictly: a missing field or one of the wrong type raises `CorruptRow` naming the row, the
field and what was found, never a bare KeyError or TypeError.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sdn_app.core.ledger import Ledger
from sdn_app.core.row_fields import Fields, read_body

FORMAT = 1  # of the JSON in `body`; a row of another format is refused by name


@dataclass(frozen=True)
class Row:
    """A transfer as stored: the columns, and `body` (JSON data, `FORMAT`)."""

    id: str
    owner: str
    request_id: str
    reservation_id: str
    state: str
    body: Mapping[str, Any]


def create_table(db: sqlite3.Connection) -> None:
    """Create the transfers table unless the file has it."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS transfers (
               seq INTEGER PRIMARY KEY AUTOINCREMENT,
               id TEXT NOT NULL UNIQUE,
               owner TEXT NOT NULL,
               request_id TEXT NOT NULL,
               reservation_id TEXT NOT NULL,
               state TEXT NOT NULL,
               body TEXT NOT NULL
           )"""
    )


def save(db: sqlite3.Connection, row: Row) -> None:
    """Insert `row`, or replace the stored row of the same id (keeping its place in the order)."""
    db.execute(
        """INSERT INTO transfers (id, owner, request_id, reservation_id, state, body) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (id) DO UPDATE SET owner=excluded.owner, request_id=excluded.request_id,
               reservation_id=excluded.reservation_id, state=excluded.state, body=excluded.body""",
        (row.id, row.owner, row.request_id, row.reservation_id, row.state,
         json.dumps({"format": FORMAT, **row.body}, sort_keys=True, allow_nan=False)),
    )


def delete(db: sqlite3.Connection, ids: Iterable[str]) -> None:
    """Remove the rows of `ids`."""
    db.executemany("DELETE FROM transfers WHERE id=?", [(i,) for i in ids])


@dataclass(frozen=True)
class Stored:
    """One row read back: its place in the order, its id and a strict reader of its body."""

    seq: int
    id: str
    fields: Fields


def load(ledger: Ledger) -> list[Stored]:
    """Every row, oldest first; `CorruptRow` for a body that is not a JSON object of this format."""
    stored = []
    for seq, transfer_id, body in ledger.query("SELECT seq, id, body FROM transfers ORDER BY seq"):
        where = f"{ledger.path}: transfers row {seq} (id {transfer_id!r})"
        fields = read_body(body, where, HINT.format(id=transfer_id), FORMAT)
        stored.append(Stored(seq, str(transfer_id), fields))
    return stored


HINT = ("; restore the file from a backup, or remove the row "
        "(sqlite3 FILE \"DELETE FROM transfers WHERE id='{id}'\") and release its reservation")


