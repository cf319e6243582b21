"""Replication of the state database to a shared store, for several controllers on one state.

The ledger's SQLite database stays the one place every module reads and writes with SQL. With a
`Replica` (the etcd store, `sdn_app.ha.store`), that database lives in memory: it is filled from
the replica's snapshot as each replicated table is created, and the rows each transaction changed
are staged; `flush` hands the replica everything staged since the last flush (the last form of
each row) to commit as one transaction of its own, guarded so that only the leader's writes land.
The core worker flushes after each batch of calls, before any answer, event or switch change of
the batch goes out (group commit: one round trip to the store for every call queued meanwhile;
each change is in exactly one store transaction, whole). A flush the replica refuses raises
(`Fenced`): what the batch changed here was never stored, so this controller must not go on with
it, and steps down (its state is reloaded from the store by whoever leads next).

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
REPLICATED_TABLES = ("bookings", "reservations", "transfers", "agents",
                     "sense_instances", "sense_profiles", "sense_addresses",  # these four: sense_store
                     "nsi_connections", "nsi_segments")
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
        """Write `changes` (maybe none) as one transaction, or raise (`Fenced` when this controller
        may no longer write, and from then on); nothing is written when it raises."""
        ...


class Replication:
    """The replication of one SQLite connection to `replica`: loading tables, capturing changes."""

    def __init__(self, db: sqlite3.Connection, replica: Replica):
        self.db = db
        self.replica = replica
        self._loaded: set[str] = set()
        self._staged: list[RowChange] = []
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
                        # not INSERT OR IGNORE: an upsert's ON CONFLICT (the outer statement's
                        # policy) would override the IGNORE and fail on a row changed twice
                        f"INSERT INTO {_CHANGED} SELECT '{table}', {row}.id WHERE NOT EXISTS "
                        f"(SELECT 1 FROM {_CHANGED} WHERE tbl='{table}' AND id={row}.id); END")
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

    def before_commit(self) -> list[RowChange]:
        """Inside the open transaction: load tables it created; the rows it changed, for `stage`."""
        self.load_new_tables()
        return self.take_changes()

    def stage(self, changes: list[RowChange]) -> None:
        """Once their transaction committed here: `changes` go to the replica at the next flush."""
        self._staged.extend(changes)

    def flush(self) -> None:
        """Commit every row staged since the last flush to the replica, in one transaction (each
        row in its last form); raises what the replica raises, and then nothing is staged. With
        nothing staged the replica is still asked: one that refused a flush refuses every later
        one, so that nothing read from a copy it no longer vouches for goes out."""
        latest = {(change.table, change.key): change for change in self._staged}
        self._staged = []
        self.replica.commit(list(latest.values()))
