"""The bandwidth ledger: time-aware bookings per link direction, admission, persistence.

A booking holds a bandwidth on a set of link directions over a window [start, end). For
every direction the ledger keeps the step function of booked bandwidth over time, so
admission checks the worst-case *concurrent* use inside the requested window (two bookings
that touch the window but never overlap each other do not add up), and never lets any
direction exceed its capacity at any instant. Every change is one SQLite transaction;
reopening the database gives back the same bookings.

Reopened over a topology that changed, the ledger loads every booking and says what no longer
fits: `stranded` lists bookings on link directions the topology lacks, `overbooked` the
directions whose capacity is now below what is booked on them. The reservation book repairs
both when it loads. `exclusive=True` (the controller) holds the state file's lock
(`sdn_app.core.state_lock`) from opening to `close`, so a second controller on it refuses.

With a `replica` (several controllers on one shared store, `sdn_app.core.replication`) the
database is kept in memory, filled from the replica, and the rows of every transaction are staged
until `flush` commits them to the replica together.
"""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from sdn_app.core.clock import Clock, SystemClock
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NoCapacity, NotFound
from sdn_app.core.replication import Replica, Replication
from sdn_app.core.state_lock import StateLock
from sdn_app.core.units import MAX_BANDWIDTH, format_bandwidth, format_time, format_window

SCHEMA_VERSION = 1

# Extra SQL a caller runs inside a ledger change's transaction (e.g. the reservation row that
# goes with a booking), so the two are committed together or not at all.
AlsoWrite = Callable[[sqlite3.Connection], None]


@dataclass(frozen=True)
class Booking:
    """Bandwidth held on `directions` from `start` up to (not including) `end`."""

    id: str
    bandwidth: int
    start: float
    end: float
    directions: tuple[str, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def overlaps(self, start: float, end: float) -> bool:
        """Whether this booking is active at some instant of [start, end)."""
        return self.start < end and start < self.end


@dataclass(frozen=True)
class Overbooking:
    """A link direction booked beyond its capacity: `booked` at worst, from `start` until `end`
    (the first and last instant over capacity, from the time asked about on), by `bookings`
    (the ids active at some instant over capacity)."""

    direction: str
    capacity: int
    booked: int
    start: float
    end: float
    bookings: tuple[str, ...]


class _Timeline:
    """Booked bandwidth over time on one link direction, as a cached step function."""

    __slots__ = ("_times", "_usage", "bookings")

    def __init__(self) -> None:
        self.bookings: dict[str, Booking] = {}
        self._times: list[float] | None = None
        self._usage: list[int] = []

    def add(self, booking: Booking) -> None:
        self.bookings[booking.id] = booking
        self._times = None

    def remove(self, booking_id: str) -> None:
        if self.bookings.pop(booking_id, None) is not None:
            self._times = None

    def _build(self) -> list[float]:
        deltas: dict[float, int] = {}
        for b in self.bookings.values():
            deltas[b.start] = deltas.get(b.start, 0) + b.bandwidth
            if not math.isinf(b.end):
                deltas[b.end] = deltas.get(b.end, 0) - b.bandwidth
        times = sorted(deltas)
        usage = []
        level = 0
        for t in times:
            level += deltas[t]
            usage.append(level)
        self._times, self._usage = times, usage
        return times

    def steps(self) -> list[tuple[float, float, int]]:
        """The step function as (from, until, bandwidth booked) spans, in time order."""
        times = self._times if self._times is not None else self._build()
        return list(zip(times, [*times[1:], math.inf], self._usage, strict=False))  # empty when no bookings

    def max_use(self, start: float, end: float, ignore: str | None = None) -> int:
        """Largest bandwidth booked at any instant of [start, end), optionally ignoring one booking."""
        if ignore is not None and ignore in self.bookings:
            # Bookings that each overlap the window and peak together overlap it jointly too
            # (intervals have the Helly property), so no clipping to the window is needed.
            return _max_concurrent(b for b in self.bookings.values() if b.id != ignore and b.overlaps(start, end))
        times = self._times if self._times is not None else self._build()
        if not times:
            return 0
        first = bisect_right(times, start) - 1
        last = bisect_left(times, end)
        window = self._usage[max(first, 0):last]
        return max(window) if window else 0


def _max_concurrent(bookings: Iterable[Booking]) -> int:
    """The peak of the summed bandwidth of `bookings` over time."""
    events: list[tuple[float, int]] = []
    for b in bookings:
        events.append((b.start, b.bandwidth))
        events.append((b.end, -b.bandwidth))
    events.sort(key=lambda e: (e[0], e[1]))  # at one instant, ends (negative) before starts
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


class Ledger:
    """All bookings of one WAN. Not thread-safe: one owner calls it (see DESIGN.md)."""

    def __init__(self, capacities: Mapping[str, int], path: str | Path | None = None,
                 clock: Clock | None = None, *, exclusive: bool = False, replica: Replica | None = None):
        """Open the ledger over `capacities` (direction id -> bits/s), persisted at `path`.

        `path=None` keeps it in memory. Existing bookings in the database are loaded, also
        those that no longer fit `capacities` (see `stranded` and `overbooked`). With
        `exclusive`, the state file's lock is taken first and held until `close`:
        `StateLocked` (a `FailedPrecondition`) names the holder when another has it. With
        `replica`, `path` is ignored: the state is the replica's, held in memory here.
        """
        self.capacities = dict(capacities)
        self.clock = clock or SystemClock()
        self.path = replica.description if replica is not None else str(path) if path is not None else ":memory:"
        self._bookings: dict[str, Booking] = {}
        self._timelines: dict[str, _Timeline] = {d: _Timeline() for d in self.capacities}
        self._lock = StateLock(self.path) if exclusive and replica is None and self.path != ":memory:" else None
        try:
            self._db = sqlite3.connect(":memory:" if replica is not None else self.path,
                                       check_same_thread=False, isolation_level=None)
        except BaseException:
            self._release_lock()
            raise
        self._replication = Replication(self._db, replica) if replica is not None else None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL+NORMAL: durable across process crashes
            self._create_schema()
            self._load()
        except BaseException:
            self._db.close()
            self._release_lock()
            raise

    def _create_schema(self) -> None:
        with self._transaction():
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS ledger_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            self._db.execute(
                """CREATE TABLE IF NOT EXISTS bookings (
                       id TEXT PRIMARY KEY,
                       bandwidth INTEGER NOT NULL CHECK (bandwidth > 0),
                       start REAL NOT NULL,
                       "end" REAL,
                       directions TEXT NOT NULL,
                       meta TEXT NOT NULL
                   )"""
            )
            row = self._db.execute("SELECT value FROM ledger_meta WHERE key='schema_version'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO ledger_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) != SCHEMA_VERSION:
                raise FailedPrecondition(
                    f"{self.path}: ledger schema version {row[0]} is not the supported {SCHEMA_VERSION}"
                )

    def _transaction(self) -> _Transaction:
        """`with self._transaction():` runs its body as one IMMEDIATE transaction (committed to
        the replica first, when there is one)."""
        return _Transaction(self._db, self._replication)

    def _load(self) -> None:
        rows = self._db.execute('SELECT id, bandwidth, start, "end", directions, meta FROM bookings').fetchall()
        for booking_id, bandwidth, start, end, directions, meta in rows:
            booking = Booking(booking_id, bandwidth, start, math.inf if end is None else end,
                              tuple(json.loads(directions)), MappingProxyType(json.loads(meta)))
            self._insert_memory(booking)  # on the directions that exist; `stranded` tells the rest

    def close(self) -> None:
        """Close the database and let the state file's lock go (with `exclusive`)."""
        self._db.close()
        self._release_lock()

    @property
    def replicated(self) -> bool:
        """Whether changes are stored by a replica (and reach it only at `flush`)."""
        return self._replication is not None

    def flush(self) -> None:
        """Store every change since the last flush in the replica, as one transaction (nothing to
        do without a replica: each transaction is in the file when it returns)."""
        if self._replication is not None:
            self._replication.flush()

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()

    # -- queries ---------------------------------------------------------------------------

    def get(self, booking_id: str) -> Booking:
        """Return the booking `booking_id` or raise `NotFound`."""
        try:
            return self._bookings[booking_id]
        except KeyError:
            raise NotFound(f"no booking {booking_id!r}") from None

    def bookings(self) -> list[Booking]:
        """Every booking, sorted by id."""
        return [self._bookings[k] for k in sorted(self._bookings)]

    def __len__(self) -> int:
        return len(self._bookings)

    def __contains__(self, booking_id: object) -> bool:
        return booking_id in self._bookings

    def stranded(self) -> dict[str, tuple[str, ...]]:
        """Bookings on link directions the capacities do not have: id -> those directions."""
        return {b.id: missing for b in self.bookings()
                if (missing := tuple(d for d in b.directions if d not in self.capacities))}

    def overbooked(self, since: float | None = None, directions: Iterable[str] | None = None) -> list[Overbooking]:
        """Directions (of `directions`, default all) booked beyond their capacity at some instant
        from `since` (default: the clock) on, by direction id; empty in a ledger that never had
        its capacities lowered."""
        since = self.clock.now() if since is None else since
        found = []
        for direction in sorted(self._timelines if directions is None else directions):
            capacity = self.capacities[direction]
            timeline = self._timelines[direction]
            over = [(max(t0, since), t1, level) for t0, t1, level in timeline.steps()
                    if level > capacity and t1 > since]
            if not over:
                continue
            ids = sorted(b.id for b in timeline.bookings.values()
                         if any(b.start < t1 and t0 < b.end for t0, t1, _ in over))
            found.append(Overbooking(direction, capacity, max(level for _, _, level in over),
                                     over[0][0], over[-1][1], tuple(ids)))
        return found

    def used(self, direction: str, start: float, end: float, ignore: str | None = None) -> int:
        """Peak bandwidth booked on `direction` at any instant of [start, end)."""
        return self._timeline(direction).max_use(start, end, ignore)

    def free(self, direction: str, start: float, end: float, ignore: str | None = None) -> int:
        """Bandwidth `direction` can still take throughout [start, end); may be negative only
        if the topology's capacity was lowered under existing bookings."""
        timeline = self._timeline(direction)  # first: an unknown direction is NotFound, not KeyError
        return self.capacities[direction] - timeline.max_use(start, end, ignore)

    def _timeline(self, direction: str) -> _Timeline:
        try:
            return self._timelines[direction]
        except KeyError:
            raise NotFound(f"unknown link direction {direction!r}") from None

    # -- changes ---------------------------------------------------------------------------

    def check(self, directions: Iterable[str], bandwidth: int, start: float, end: float,
              ignore: str | None = None) -> None:
        """Raise what `reserve` would raise for this booking, and book nothing (a what-if)."""
        self._check(Booking("check", bandwidth, start, end, _unique(directions)), ignore)

    def reserve(self, directions: Iterable[str], bandwidth: int, start: float, end: float,
                booking_id: str | None = None, meta: Mapping[str, Any] | None = None,
                also: AlsoWrite | None = None) -> Booking:
        """Book `bandwidth` on every direction in `directions` for [start, end), or on none.

        Raises `InvalidArgument` for a bad window or bandwidth, `AlreadyExists` for a taken
        id, and `NoCapacity` naming the first direction that cannot carry it. `also` runs in
        the same transaction.
        """
        booking_id = uuid.uuid4().hex if booking_id is None else booking_id
        if not isinstance(booking_id, str) or not booking_id:
            raise InvalidArgument(f"a booking id must be a non-empty string, got {booking_id!r}")
        if booking_id in self._bookings:
            raise AlreadyExists(f"booking {booking_id!r} already exists")
        booking = Booking(booking_id, bandwidth, start, end, _unique(directions), _json_meta(meta or {}))
        self._check(booking, ignore=None)
        with self._transaction():
            self._write(booking)
            if also:
                also(self._db)
        self._insert_memory(booking)
        return booking

    def modify(self, booking_id: str, bandwidth: int | None = None, end: float | None = None,
               directions: Iterable[str] | None = None, meta: Mapping[str, Any] | None = None,
               also: AlsoWrite | None = None) -> Booking:
        """Change a booking's bandwidth, end time, directions (a new path) or metadata.

        The new form is admitted as a whole against everything else (the booking's own old
        form not counted); if it does not fit, the booking is left as it was. `also` runs in
        the same transaction.
        """
        old = self.get(booking_id)
        new = replace(
            old,
            bandwidth=old.bandwidth if bandwidth is None else bandwidth,
            end=old.end if end is None else end,
            directions=old.directions if directions is None else _unique(directions),
            meta=old.meta if meta is None else _json_meta(meta),
        )
        self._check(new, ignore=booking_id)
        with self._transaction():
            self._db.execute("DELETE FROM bookings WHERE id=?", (booking_id,))
            self._write(new)
            if also:
                also(self._db)
        self._remove_memory(old)
        self._insert_memory(new)
        return new

    def release(self, booking_id: str, also: AlsoWrite | None = None) -> Booking:
        """Remove a booking, freeing its bandwidth; returns what was released. `also` runs in
        the same transaction."""
        booking = self.get(booking_id)
        with self._transaction():
            self._db.execute("DELETE FROM bookings WHERE id=?", (booking_id,))
            if also:
                also(self._db)
        self._remove_memory(booking)
        return booking

    def write(self, also: AlsoWrite) -> None:
        """Run `also` as one transaction on the ledger's database, bookings untouched."""
        with self._transaction():
            also(self._db)

    def query(self, sql: str, parameters: tuple = ()) -> list[tuple]:
        """Rows of a read-only query on the ledger's database (tables of callers sharing it)."""
        return self._db.execute(sql, parameters).fetchall()

    def expire(self, now: float | None = None, also: AlsoWrite | None = None) -> list[Booking]:
        """Remove every booking whose window ended at or before `now` (default: the clock).

        `also` runs in the same transaction when anything expired."""
        now = self.clock.now() if now is None else now
        ended = [b for b in self._bookings.values() if b.end <= now]
        if not ended:
            return []
        with self._transaction():
            self._db.executemany("DELETE FROM bookings WHERE id=?", [(b.id,) for b in ended])
            if also:
                also(self._db)
        for booking in ended:
            self._remove_memory(booking)
        return sorted(ended, key=lambda b: (b.end, b.id))

    # -- internals -------------------------------------------------------------------------

    def _check(self, booking: Booking, ignore: str | None) -> None:
        bandwidth = booking.bandwidth
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, int) or not 0 < bandwidth <= MAX_BANDWIDTH:
            raise InvalidArgument(
                f"bandwidth must be a whole number of bits/s from 1 to {MAX_BANDWIDTH}, got {bandwidth!r}"
            )
        if not (math.isfinite(booking.start) and booking.start >= 0):
            raise InvalidArgument(f"start must be a finite time, got {booking.start!r}")
        if math.isnan(booking.end) or booking.end <= booking.start:
            raise InvalidArgument(
                f"end ({format_time(booking.end)}) must be after start ({format_time(booking.start)})"
            )
        if booking.end <= self.clock.now():
            raise InvalidArgument(f"the window ended already ({format_time(booking.end)})")
        if not booking.directions:
            raise InvalidArgument("a booking needs at least one link direction")
        for direction in booking.directions:
            free = self.free(direction, booking.start, booking.end, ignore)
            if free < booking.bandwidth:
                capacity = self.capacities[direction]
                raise NoCapacity(
                    f"link {direction} has {format_bandwidth(max(free, 0))} free of "
                    f"{format_bandwidth(capacity)} {format_window(booking.start, booking.end)}; "
                    f"{format_bandwidth(booking.bandwidth)} requested",
                    bottleneck=direction, free_bps=max(free, 0),
                )

    def _write(self, booking: Booking) -> None:
        self._db.execute(
            'INSERT INTO bookings (id, bandwidth, start, "end", directions, meta) VALUES (?, ?, ?, ?, ?, ?)',
            (booking.id, booking.bandwidth, booking.start, None if math.isinf(booking.end) else booking.end,
             json.dumps(list(booking.directions)), json.dumps(dict(booking.meta), sort_keys=True)),
        )

    def _insert_memory(self, booking: Booking) -> None:
        self._bookings[booking.id] = booking
        for direction in booking.directions:
            if direction in self._timelines:  # only a stranded booking has others
                self._timelines[direction].add(booking)

    def _remove_memory(self, booking: Booking) -> None:
        del self._bookings[booking.id]
        for direction in booking.directions:
            if direction in self._timelines:
                self._timelines[direction].remove(booking.id)


def _json_meta(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """`meta` as it reads back from the database (tuples become lists, keys strings), so the
    booking held in memory equals the one a reopened ledger loads, and read-only, so nobody
    changes it behind the database's back; `InvalidArgument` if it is not JSON data."""
    try:
        return MappingProxyType(json.loads(json.dumps(dict(meta), sort_keys=True, allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"meta must be JSON data (strings, numbers, lists, mappings): {exc}") from None


def _unique(directions: Iterable[str]) -> tuple[str, ...]:
    """Directions in first-seen order without repeats (a backup path shares the DTN's access link)."""
    return tuple(dict.fromkeys(directions))


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception; the changed rows are staged for
    the replica, when there is one."""

    def __init__(self, db: sqlite3.Connection, replication: Replication | None):
        self._db = db
        self._replication = replication

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._db.execute("ROLLBACK")
            return
        try:
            changes = self._replication.before_commit() if self._replication is not None else []
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")  # e.g. SQLITE_BUSY: leave no transaction open behind us
            raise
        if self._replication is not None:
            self._replication.stage(changes)
