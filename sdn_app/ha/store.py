"""The controllers' shared state in etcd: every replicated row a key, every commit one fenced transaction.

    /tsdn/<namespace>/rows/<table>/<id>   the row as JSON (bookings, reservations, transfers)
    /tsdn/<namespace>/leader              the elected leader (sdn_app.ha.election), on its lease

A commit is one etcd transaction: it applies only while the leader key is still the one this
controller created when it was elected (same create revision: the election's generation). A
deposed leader's commit fails that compare and writes nothing (`Fenced`); so two controllers can
never both book the same capacity, whatever their clocks or pauses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from sdn_app.core.errors import Fenced, TsdnError, Unavailable
from sdn_app.core.replication import REPLICATED_TABLES, RowChange
from sdn_app.ha.etcd import Ambiguous, Etcd, b64, prefix_end, unb64

MAX_TXN_OPS = 10_000  # etcd must run with --max-txn-ops at least this (its default, 128, is too few)


def namespace_prefix(namespace: str) -> str:
    """The key prefix of a deployment's state: `/tsdn/<namespace>/`."""
    return f"/tsdn/{namespace}/"


def leader_key(namespace: str) -> str:
    """The key the elected leader holds."""
    return namespace_prefix(namespace) + "leader"


def row_prefix(namespace: str, table: str = "") -> str:
    """The prefix of the rows of `table` (of every table when empty)."""
    return namespace_prefix(namespace) + "rows/" + (f"{table}/" if table else "")


def decode_row(value: bytes, key: str) -> dict[str, Any]:
    """A stored row's columns; `Unavailable` naming the key when it is not a JSON object."""
    try:
        row = json.loads(value)
    except ValueError as error:
        raise Unavailable(f"etcd key {key}: not a JSON row ({error}); restore from a snapshot or delete it") from None
    if not isinstance(row, dict):
        raise Unavailable(f"etcd key {key}: not a JSON object; restore from a snapshot or delete it")
    return row


def load_rows(etcd: Etcd, namespace: str) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Every stored row by table, and the revision they were read at."""
    prefix = row_prefix(namespace)
    kvs, revision = etcd.range(prefix, prefix_end(prefix), "read the stored state")
    rows: dict[str, list[dict[str, Any]]] = {table: [] for table in REPLICATED_TABLES}
    for kv in kvs:
        key = unb64(kv["key"]).decode()
        table = key[len(prefix):].split("/", 1)[0]
        if table in rows:
            rows[table].append(decode_row(unb64(kv.get("value", "")), key))
    return rows, revision


class EtcdReplica:
    """The `Replica` of a leader elected with `generation` (its leader key's create revision)."""

    def __init__(self, etcd: Etcd, namespace: str, generation: int, on_fenced: Callable[[str], None] = lambda _: None):
        """Read every stored row now: the state this leader starts from. `on_fenced(why)` is told
        when a commit finds this controller may no longer write."""
        self.etcd = etcd
        self._on_fenced = on_fenced
        self.namespace = namespace
        self.generation = generation
        self.description = f"{etcd.url} (namespace {namespace})"
        self._rows, self.revision = load_rows(etcd, namespace)
        self.fenced: str | None = None  # why this replica refuses every commit, once it does

    def rows(self, table: str) -> list[dict[str, Any]]:
        """The rows of `table` as read when the replica was opened."""
        return self._rows.get(table, [])

    def commit(self, changes: Sequence[RowChange]) -> None:
        """Write `changes` in one transaction guarded by the leader key's generation."""
        if self.fenced is not None:
            raise Fenced(self.fenced)
        if not changes:
            return
        if len(changes) > MAX_TXN_OPS:
            self._fence(f"{len(changes)} changed rows, more than one etcd transaction takes ({MAX_TXN_OPS}); "
                        "nothing was stored")
        success = []
        for change in changes:
            key = b64(row_prefix(self.namespace, change.table) + change.key)
            if change.row is None:
                success.append({"request_delete_range": {"key": key}})
            else:
                value = json.dumps(dict(change.row), sort_keys=True, allow_nan=False)
                success.append({"request_put": {"key": key, "value": b64(value)}})
        leader = leader_key(self.namespace)
        compare = [{"key": b64(leader), "target": "CREATE", "result": "EQUAL",
                    "create_revision": str(self.generation)}]
        try:
            response = self.etcd.txn(compare, success, [{"request_range": {"key": b64(leader)}}],
                                     what=f"commit {len(changes)} row(s)")
        except Ambiguous as error:
            # Applied or not, this controller no longer knows the store's state: it must not write again.
            self._fence(f"the shared state may have changed without this controller knowing: {error}")
        except TsdnError as error:
            # Not stored, but already applied here (and answered to nobody): this copy is no longer
            # the store's, so this controller must not go on from it.
            self._fence(f"{len(changes)} changed row(s) could not be stored: {error}")
        if not response["succeeded"]:
            self._fence(f"this controller is no longer the leader (elected with generation {self.generation}; "
                        f"{_holder(response)}): it writes nothing more")

    def _fence(self, why: str) -> None:
        self.fenced = why
        self._on_fenced(why)
        raise Fenced(why)


def _holder(response: dict) -> str:
    """Who holds the leader key, from a failed transaction's range response."""
    for item in response.get("responses", []):
        kvs = item.get("response_range", {}).get("kvs", [])
        if kvs:
            try:
                who = json.loads(unb64(kvs[0].get("value", "")))
                return f"now led by {who.get('address', '?')} with generation {kvs[0].get('create_revision')}"
            except ValueError:
                return f"the leader key holds generation {kvs[0].get('create_revision')}"
    return "nobody holds the leader key"
