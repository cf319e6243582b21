"""The SENSE API's tables in the ledger's SQLite file: instances, service profiles, IPv6 allocations.

    ledger.write(create_tables)                          # an older file without them gets them
    ledger.write(lambda db: save(db, INSTANCES, id, owner, body))   # or inside a reservation's transaction
    for row in load(ledger, INSTANCES): row.reader.text("phase") ...

Each table holds one row per object: its `id` (the key the HA replica stores it under, see
`replication.REPLICATED_TABLES`), its `owner` and the object as JSON in `body`. Rows are written
only inside the ledger's transactions (one writer): an instance's row joins the transaction of
the reservation it books (`SenseDesk` is the book's companion for it), so after a crash at any
point an instance and its reservation agree. `Reader` reads a body strictly: a missing field or
one of the wrong type raises `CorruptRow` naming the table, the row and the field.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sdn_app.core.errors import FailedPrecondition
from sdn_app.core.ledger import Ledger

FORMAT = 1  # of the JSON in `body`; a row of another format is refused by name
INSTANCES = "sense_instances"
PROFILES = "sense_profiles"
ADDRESSES = "sense_addresses"
TABLES = (INSTANCES, PROFILES, ADDRESSES)


class CorruptRow(FailedPrecondition):
    """A row of a SENSE table that cannot be read; the message names the table, the row and the field."""


def create_tables(db: sqlite3.Connection) -> None:
    """Create the SENSE tables unless the file has them."""
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
        raise ValueError(f"not a SENSE table: {table}")
    text = json.dumps({"format": FORMAT, **body}, sort_keys=True, allow_nan=False)
    db.execute(f"INSERT INTO {table} (id, owner, body) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
               "owner=excluded.owner, body=excluded.body", (row_id, owner, text))


def delete(db: sqlite3.Connection, table: str, row_id: str) -> None:
    """Remove the row of `row_id` (none: nothing happens)."""
    if table not in TABLES:
        raise ValueError(f"not a SENSE table: {table}")
    db.execute(f"DELETE FROM {table} WHERE id=?", (row_id,))


@dataclass(frozen=True)
class Stored:
    """One row read back: its id, owner and a strict reader of its body."""

    id: str
    owner: str
    reader: Reader


def load(ledger: Ledger, table: str) -> list[Stored]:
    """Every row of `table`, oldest first; `CorruptRow` for a body that is not a JSON object of this format."""
    if table not in TABLES:
        raise ValueError(f"not a SENSE table: {table}")
    rows = []
    for seq, row_id, owner, body in ledger.query(f"SELECT seq, id, owner, body FROM {table} ORDER BY seq"):
        where = f"{ledger.path}: {table} row {seq} (id {row_id!r})"
        hint = (f"; restore the file from a backup, or remove the row "
                f"(sqlite3 FILE \"DELETE FROM {table} WHERE id='{row_id}'\")")
        try:
            data = json.loads(body)
        except (TypeError, ValueError, RecursionError) as error:
            raise CorruptRow(f"{where}: body is not JSON ({error}){hint}") from None
        reader = Reader(data, where, hint)
        if not isinstance(data, dict):
            reader.bad("", f"expected an object, found {json.dumps(data)[:60]}")
        if data.get("format") != FORMAT:
            reader.bad("format", f"{data.get('format')!r} is not the supported {FORMAT}")
        rows.append(Stored(str(row_id), str(owner), reader))
    return rows


class Reader:
    """Typed reads of one JSON object of a row; `CorruptRow` names the row and the field."""

    def __init__(self, data: Any, where: str, hint: str, prefix: str = ""):
        self.data = data
        self.where = where
        self.hint = hint
        self.prefix = prefix

    def bad(self, key: str, problem: str) -> None:
        """Raise `CorruptRow` about field `key` of this object."""
        field = f"{self.prefix}{key}" if key else self.prefix.rstrip(".") or "body"
        raise CorruptRow(f"{self.where}: field {field}: {problem}{self.hint}")

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

    def optional_text(self, key: str) -> str | None:
        """A string or null."""
        return self._get(key, (str,), "a string", True)

    def integer(self, key: str) -> int:
        """A whole number."""
        return self._get(key, (int,), "a whole number", False)

    def number(self, key: str) -> float:
        """A number; null reads as infinity (an open end)."""
        value = self._get(key, (int, float), "a number", True)
        if value is None:
            return math.inf
        if not math.isfinite(value):
            self.bad(key, f"{value} is not a finite number")
        return float(value)

    def flag(self, key: str) -> bool:
        """true or false."""
        return self._get(key, (bool,), "true or false", False)

    def value(self, key: str) -> Any:
        """Any JSON value."""
        if not isinstance(self.data, dict) or key not in self.data:
            self.bad(key, "missing")
        return self.data[key]

    def child(self, key: str, optional: bool = False) -> Reader | None:
        """The object under `key` (None only when `optional` and null)."""
        value = self._get(key, (dict,), "an object", optional)
        return None if value is None else Reader(value, self.where, self.hint, f"{self.prefix}{key}.")

    def children(self, key: str) -> list[Reader]:
        """The objects of the list under `key`."""
        values = self._get(key, (list,), "a list", False)
        children = []
        for i, value in enumerate(values):
            child = Reader(value, self.where, self.hint, f"{self.prefix}{key}[{i}].")
            if not isinstance(value, dict):
                child.bad("", f"expected an object, found {json.dumps(value)[:60]}")
            children.append(child)
        return children


def finite_or_none(value: float) -> float | None:
    """`value` for JSON: an open end (infinity) is written as null."""
    return None if math.isinf(value) else value
