"""Replication of the state database to a shared store, for several controllers on one state.

The ledger's SQLite database stays the one place every module reads and writes with SQL. With a
`Replica` (the etcd store, `sdn_app.ha.etcd_store`), that database lives in memory: it is filled
from the replica's snapshot as each replicated table is created, and every transaction hands the
replica the rows it changed before it commits. The replica commits them as one transaction of its
own, guarded so that only the leader's writes land, or raises `Fenced`: then the local
transaction rolls back and nothing changed anywhere.

Rows are captured by temporary triggers (one row key per changed row), so the modules that write
SQL (the ledger, the reservation book, the transfer store) do not know whether they are
replicated.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# The tables held in the shared store, each keyed by its `id` column.
REPLICATED_TABLES = ("bookings", "reservations", "transfers", "agents")
_CHANGED = "tsdn_changed"  # a temporary table


@dataclass(frozen=True)
class RowChange:
    """One row of `table` as a transaction left it: its columns, or None when it was deleted."""

    table: str
    key: str
    row: Mapping[str, Any] | None


class Replica(Protocol):
    """A shared store the ledger's database is replicated to."""

    description: str  # where it is, for messages: "etcd://127.0.0.1:2379"

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The rows of `table` in the store, as read when the replica was opened."""
        ...

    def commit(self, changes: Sequence[RowChange]) -> None:
        """Write `changes` as one transaction, or raise (`Fenced` when this controller may no
        longer write); nothing is written when it raises."""
        ...


class Replication:
    """The replication of one SQLite connection to `replica`: loading tables, capturing changes."""

    def __init__(self, db: sqlite3.Connection, replica: Replica):
        self.db = db
        self.replica = replica
        self._loaded: set[str] = set()
        db.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_CHANGED} (tbl TEXT NOT NULL, id TEXT NOT NULL, "
                   "PRIMARY KEY (tbl, id)) WITHOUT ROWID")

    def load_new_tables(self) -> None:
        """Fill each replicated table created since the last call from the replica, then start
        capturing its changes (inside the transaction that created it)."""
        if len(self._loaded) == len(REPLICATED_TABLES):
            return
        existing = {name for (name,) in self.db.execute("SELECT name FROM main.sqlite_master WHERE type='table'")}
        for table in REPLICATED_TABLES:
            if table in existing and table not in self._loaded:
                self._fill(table)
                for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("UPDATE", "OLD"), ("DELETE", "OLD")):
                    self.db.execute(
                        f"CREATE TEMP TRIGGER IF NOT EXISTS tsdn_{table}_{event.lower()}_{row.lower()} "
                        f"AFTER {event} ON main.{table} BEGIN "
                        f"INSERT OR IGNORE INTO {_CHANGED} VALUES ('{table}', {row}.id); END")
                self._loaded.add(table)

    def _fill(self, table: str) -> None:
        rows = self.replica.rows(table)
        if not rows:
            return
        columns = [row[1] for row in self.db.execute(f"PRAGMA main.table_info({table})")]
        self.db.executemany(
            f"INSERT INTO main.{table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            [tuple(row.get(column) for column in columns) for row in rows])

    def take_changes(self) -> list[RowChange]:
        """The rows changed in the open transaction, as they are now, and forget them."""
        keys = self.db.execute(f"SELECT tbl, id FROM {_CHANGED} ORDER BY tbl, id").fetchall()
        if not keys:
            return []
        self.db.execute(f"DELETE FROM {_CHANGED}")
        changes = []
        cursor = self.db.cursor()
        for table, key in keys:
            cursor.execute(f"SELECT * FROM main.{table} WHERE id = ?", (key,))
            found = cursor.fetchone()
            row = None if found is None else dict(zip([d[0] for d in cursor.description], found, strict=True))
            changes.append(RowChange(table, key, row))
        return changes

    def before_commit(self) -> None:
        """Inside the open transaction: load tables it created, then commit its changed rows to
        the replica (raising, and so rolling back, when the replica refuses them)."""
        self.load_new_tables()
        changes = self.take_changes()
        if changes:
            self.replica.commit(changes)
