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
import math
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sdn_app.core.errors import FailedPrecondition
from sdn_app.core.ledger import Ledger

FORMAT = 1  # of the JSON in `body`; a row of another format is refused by name


class CorruptRow(FailedPrecondition):
    """A row of the transfers table that cannot be read; the message names the row and the field."""


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
        try:
            data = json.loads(body)
        except (TypeError, ValueError, RecursionError) as error:
            raise CorruptRow(f"{where}: body is not JSON ({error}){HINT.format(id=transfer_id)}") from None
        fields = Fields(data, where, transfer_id)
        if not isinstance(data, dict):
            fields.bad("", f"expected an object, found {json.dumps(data)[:60]}")
        if data.get("format") != FORMAT:
            fields.bad("format", f"{data.get('format')!r} is not the supported {FORMAT}")
        stored.append(Stored(seq, str(transfer_id), fields))
    return stored


HINT = ("; restore the file from a backup, or remove the row "
        "(sqlite3 FILE \"DELETE FROM transfers WHERE id='{id}'\") and release its reservation")


class Fields:
    """Typed reads of one JSON object of a row; `CorruptRow` names the row and the field."""

    def __init__(self, data: Any, where: str, row_id: str, prefix: str = ""):
        self.data = data
        self.where = where
        self.row_id = row_id
        self.prefix = prefix

    def bad(self, key: str, problem: str) -> None:
        """Raise `CorruptRow` about field `key` of this object."""
        field = f"{self.prefix}{key}" if key else self.prefix.rstrip(".") or "body"
        raise CorruptRow(f"{self.where}: field {field}: {problem}{HINT.format(id=self.row_id)}")

    def _get(self, key: str, kinds: tuple[type, ...], what: str, optional: bool) -> Any:
        if not isinstance(self.data, dict) or key not in self.data:
            self.bad(key, "missing")
        value = self.data[key]
        if value is None and optional:
            return None
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            self.bad(key, f"expected {what}{' or null' if optional else ''}, found {json.dumps(value)[:60]}")
        return value

    def text(self, key: str) -> str:
        """A string."""
        return self._get(key, (str,), "a string", False)

    def integer(self, key: str, optional: bool = False) -> int | None:
        """A whole number (None only when `optional` and null)."""
        return self._get(key, (int,), "a whole number", optional)

    def number(self, key: str, optional: bool = False) -> float | None:
        """A finite number (None only when `optional` and null)."""
        value = self._get(key, (int, float), "a number", optional)
        if value is not None and not math.isfinite(value):
            self.bad(key, f"{value} is not a finite number")
        return value if value is None else float(value)

    def flag(self, key: str, optional: bool = False) -> bool | None:
        """true or false (None only when `optional` and null)."""
        return self._get(key, (bool,), "true or false", optional)

    def texts(self, key: str) -> tuple[str, ...]:
        """A list of strings."""
        values = self._get(key, (list,), "a list", False)
        if not all(isinstance(v, str) for v in values):
            self.bad(key, "expected a list of strings")
        return tuple(values)

    def integers(self, key: str) -> tuple[int, ...]:
        """A list of whole numbers."""
        values = self._get(key, (list,), "a list", False)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            self.bad(key, "expected a list of whole numbers")
        return tuple(values)

    def child(self, key: str, optional: bool = False) -> Fields | None:
        """The object under `key` (None only when `optional` and null)."""
        value = self._get(key, (dict,), "an object", optional)
        return None if value is None else Fields(value, self.where, self.row_id, f"{self.prefix}{key}.")

    def children(self, key: str) -> list[Fields]:
        """The objects of the list under `key`."""
        values = self._get(key, (list,), "a list", False)
        children = []
        for i, value in enumerate(values):
            child = Fields(value, self.where, self.row_id, f"{self.prefix}{key}[{i}].")
            if not isinstance(value, dict):
                child.bad("", f"expected an object, found {json.dumps(value)[:60]}")
            children.append(child)
        return children

    def choice(self, key: str, choices: Iterable[str]) -> str:
        """A string that is one of `choices`."""
        value = self.text(key)
        allowed = list(choices)
        if value not in allowed:
            self.bad(key, f"{value!r} is not one of {', '.join(allowed)}")
        return value
