"""The bandwidth ledger: time-aware bookings per link direction, admission, persistence.

A booking holds a bandwidth on a set of link directions over a window [start, end). For
every direction the ledger keeps the step function of booked bandwidth over time, so
admission checks the worst-case *concurrent* use inside the requested window (two bookings
that touch the window but never overlap each other do not add up), and never lets any
direction exceed its capacity at any instant. Every change is one SQLite transaction;
reopening the database gives back the same bookings.

A booking is constant, or stepped: `reserve(..., steps=...)` books a profile of contiguous
spans, each with a bandwidth of its own (a deadline transfer's schedule, `sdn_app.core.schedules`),
and each span is admitted against what is free in its own span. A stepped booking's `bandwidth`
is its peak and its window the profile's; the profile is stored in the row's `meta` under a
reserved key, so the schema is unchanged and a reader that ignores the key sees a constant
booking at the peak (more than is booked, never less). Its bandwidth and end are its profile's:
only its directions (a move) and metadata change.

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

import contextlib
import json
import math
import sqlite3
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from sdn_app.core.clock import Clock, SystemClock
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NoCapacity, NotFound
from sdn_app.core.replication import Replica, Replication
from sdn_app.core.state_lock import StateLock
from sdn_app.core.units import MAX_BANDWIDTH, format_bandwidth, format_time, format_window

SCHEMA_VERSION = 1

# Extra SQL a caller runs inside a ledger change's transaction (e.g. the reservation row that
# goes with a booking), so the two are committed together or not at all.
AlsoWrite = Callable[[sqlite3.Connection], None]

# The key of a stepped booking's profile in its row's `meta` (callers' meta may not use it).
STEPS_KEY = "__ledger_steps__"


class Span(NamedTuple):
    """`bandwidth` bits/s from `start` up to (not including) `end`: one step of a booking."""

    start: float
    end: float
    bandwidth: int


@dataclass(frozen=True)
class Booking:
    """Bandwidth held on `directions` from `start` up to (not including) `end`: `bandwidth`
    throughout, or, for a stepped booking, the bandwidth of each of its `steps` in its span
    (`bandwidth` is then the peak, `start` and `end` the first step's start and the last one's end)."""

    id: str
    bandwidth: int
    start: float
    end: float
    directions: tuple[str, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)
    steps: tuple[Span, ...] = ()  # empty: constant

    @property
    def stepped(self) -> bool:
        """Whether its bandwidth follows a profile of steps."""
        return bool(self.steps)

    @property
    def segments(self) -> tuple[Span, ...]:
        """What it holds over time, as contiguous spans in time order (one for a constant booking)."""
        return self.steps or (Span(self.start, self.end, self.bandwidth),)

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
        self._times, self._usage = _step_function(self.bookings.values())
        return self._times

    def steps(self) -> list[tuple[float, float, int]]:
        """The step function as (from, until, bandwidth booked) spans, in time order."""
        times = self._times if self._times is not None else self._build()
        return list(zip(times, [*times[1:], math.inf], self._usage, strict=False))  # empty when no bookings

    def max_use(self, start: float, end: float, ignore: str | None = None) -> int:
        """Largest bandwidth booked at any instant of [start, end), optionally ignoring one booking."""
        if ignore is not None and ignore in self.bookings:
            return _max_concurrent(s for b in self.bookings.values() if b.id != ignore and b.overlaps(start, end)
                                   for s in _clipped(b, start, end))
        times = self._times if self._times is not None else self._build()
        if not times:
            return 0
        first = bisect_right(times, start) - 1
        last = bisect_left(times, end)
        window = self._usage[max(first, 0):last]
        return max(window) if window else 0

    def usage(self, start: float, end: float, ignore: str | None = None) -> list[Span]:
        """Bandwidth booked over [start, end) as contiguous spans in time order (0 where nothing
        is), optionally ignoring one booking."""
        if ignore is not None and ignore in self.bookings:
            times, levels = _step_function(b for b in self.bookings.values() if b.id != ignore)
        else:
            times = self._times if self._times is not None else self._build()
            levels = self._usage
        i = bisect_right(times, start)
        spans = [Span(start, end, levels[i - 1] if i else 0)]
        for t, level in zip(times[i:], levels[i:], strict=False):
            if t >= end:
                break
            if level == spans[-1].bandwidth:
                continue
            spans[-1] = spans[-1]._replace(end=t)
            spans.append(Span(t, end, level))
        return spans


def _step_function(bookings: Iterable[Booking]) -> tuple[list[float], list[int]]:
    """Booked bandwidth of `bookings` over time: the times it changes, and its level from each."""
    deltas: dict[float, int] = {}
    for b in bookings:
        for start, end, bandwidth in b.steps or ((b.start, b.end, b.bandwidth),):  # no Span per plain booking
            deltas[start] = deltas.get(start, 0) + bandwidth
            if not math.isinf(end):
                deltas[end] = deltas.get(end, 0) - bandwidth
    times = sorted(deltas)
    usage = []
    level = 0
    for t in times:
        level += deltas[t]
        usage.append(level)
    return times, usage


def _clipped(booking: Booking, start: float, end: float) -> Iterable[Span]:
    """The spans of `booking` within [start, end), cut to it."""
    for s in booking.segments:
        if s.start < end and start < s.end:
            yield Span(max(s.start, start), min(s.end, end), s.bandwidth)


def _max_concurrent(spans: Iterable[Span]) -> int:
    """The peak of the summed bandwidth of `spans` over time."""
    events: list[tuple[float, int]] = []
    for s in spans:
        events.append((s.start, s.bandwidth))
        events.append((s.end, -s.bandwidth))
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
        self._trials = 0  # open `trial` blocks: nothing may be written while one is open
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
        if self._trials:
            raise RuntimeError("a ledger trial is open: nothing may be written until it ends")
        return _Transaction(self._db, self._replication)

    def _load(self) -> None:
        rows = self._db.execute('SELECT id, bandwidth, start, "end", directions, meta FROM bookings').fetchall()
        for booking_id, bandwidth, start, end, directions, meta in rows:
            meta = json.loads(meta)
            steps = tuple(Span(float(s), math.inf if e is None else float(e), int(bw))
                          for s, e, bw in meta.pop(STEPS_KEY, ()))
            booking = Booking(booking_id, bandwidth, start, math.inf if end is None else end,
                              tuple(json.loads(directions)), MappingProxyType(meta), steps)
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
                         if any(s.start < t1 and t0 < s.end for t0, t1, _ in over for s in b.segments))
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

    def usage(self, direction: str, start: float, end: float, ignore: str | None = None) -> list[Span]:
        """Bandwidth booked on `direction` over [start, end), as contiguous spans in time order
        (0 where nothing is booked; a new span wherever the booked bandwidth changes)."""
        return self._timeline(direction).usage(start, end, ignore)

    def _timeline(self, direction: str) -> _Timeline:
        try:
            return self._timelines[direction]
        except KeyError:
            raise NotFound(f"unknown link direction {direction!r}") from None

    # -- changes ---------------------------------------------------------------------------

    def check(self, directions: Iterable[str], bandwidth: int | None, start: float | None, end: float | None,
              ignore: str | None = None, *, steps: Sequence[Any] | None = None) -> None:
        """Raise what `reserve` would raise for this booking, and book nothing (a what-if)."""
        self._check(_new_booking("check", bandwidth, start, end, _unique(directions), MappingProxyType({}), steps),
                    ignore)

    @contextlib.contextmanager
    def trial(self) -> Iterator[Trial]:
        """A what-if over several bookings together: inside the block, `Trial.hold` books in memory
        only, checked as `reserve` checks, so that later checks and path searches see what the
        earlier holds took. Leaving the block, however it is left, removes every hold again.
        Nothing is written meanwhile: a change of the ledger inside the block is a RuntimeError."""
        trial = Trial(self)
        self._trials += 1
        try:
            yield trial
        finally:
            self._trials -= 1
            trial.undo()

    def reserve(self, directions: Iterable[str], bandwidth: int | None, start: float | None, end: float | None,
                booking_id: str | None = None, meta: Mapping[str, Any] | None = None,
                also: AlsoWrite | None = None, *, steps: Sequence[Any] | None = None) -> Booking:
        """Book `bandwidth` on every direction in `directions` for [start, end), or on none.

        With `steps` (a sequence of `(start, end, bandwidth)` spans, or of objects with those
        attributes such as `ScheduleStep`: contiguous, in time order, each bandwidth above 0)
        the booking is stepped: each span's bandwidth is booked in that span. `bandwidth`,
        `start` and `end` may then be None; given, they must be the peak, the first start and
        the last end.

        Raises `InvalidArgument` for a bad window, bandwidth or profile, `AlreadyExists` for a
        taken id, and `NoCapacity` naming the first direction that cannot carry it (and the
        step, for a stepped booking). `also` runs in the same transaction.
        """
        booking_id = uuid.uuid4().hex if booking_id is None else booking_id
        if not isinstance(booking_id, str) or not booking_id:
            raise InvalidArgument(f"a booking id must be a non-empty string, got {booking_id!r}")
        if booking_id in self._bookings:
            raise AlreadyExists(f"booking {booking_id!r} already exists")
        booking = _new_booking(booking_id, bandwidth, start, end, _unique(directions), _json_meta(meta or {}), steps)
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
        form not counted); if it does not fit, the booking is left as it was. A stepped
        booking keeps its steps (a move admits each on the new directions); a bandwidth or end
        other than its own is a `FailedPrecondition`. `also` runs in the same transaction.
        """
        old = self.get(booking_id)
        if old.stepped and bandwidth is not None and bandwidth != old.bandwidth:
            raise FailedPrecondition(
                f"booking {booking_id!r}: a stepped booking's bandwidth is its schedule's "
                f"({format_bandwidth(old.bandwidth)} at peak); release it and reserve the new schedule"
            )
        if old.stepped and end is not None and end != old.end:
            raise FailedPrecondition(
                f"booking {booking_id!r}: a stepped booking's end is its schedule's ({format_time(old.end)}); "
                "release it and reserve the new schedule"
            )
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
        _check_bandwidth(booking.bandwidth)
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
        segments = booking.segments
        for direction in booking.directions:
            for number, (start, end, bandwidth) in enumerate(segments, 1):
                free = self.free(direction, start, end, ignore)
                if free < bandwidth:
                    capacity = self.capacities[direction]
                    step = f" (step {number} of {len(segments)} of its schedule)" if booking.stepped else ""
                    raise NoCapacity(
                        f"link {direction} has {format_bandwidth(max(free, 0))} free of "
                        f"{format_bandwidth(capacity)} {format_window(start, end)}; "
                        f"{format_bandwidth(bandwidth)} requested{step}",
                        bottleneck=direction, free_bps=max(free, 0),
                    )

    def _write(self, booking: Booking) -> None:
        meta = dict(booking.meta)
        if booking.stepped:
            meta[STEPS_KEY] = [[s.start, None if math.isinf(s.end) else s.end, s.bandwidth] for s in booking.steps]
        self._db.execute(
            'INSERT INTO bookings (id, bandwidth, start, "end", directions, meta) VALUES (?, ?, ?, ?, ?, ?)',
            (booking.id, booking.bandwidth, booking.start, None if math.isinf(booking.end) else booking.end,
             json.dumps(list(booking.directions)), json.dumps(meta, sort_keys=True)),
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


class Trial:
    """The bookings held by one `Ledger.trial`, in the ledger's memory only, until it ends."""

    def __init__(self, ledger: Ledger):
        self._ledger = ledger
        self._held: list[Booking] = []

    def hold(self, directions: Iterable[str], bandwidth: int | None, start: float | None, end: float | None, *,
             steps: Sequence[Any] | None = None) -> Booking:
        """Book as `reserve` would (raising what it would), in memory only until the trial ends."""
        booking = _new_booking(f"trial:{len(self._held)}", bandwidth, start, end, _unique(directions),
                               MappingProxyType({}), steps)
        self._ledger._check(booking, ignore=None)
        self._ledger._insert_memory(booking)
        self._held.append(booking)
        return booking

    def undo(self) -> None:
        """Remove every booking held, the latest first."""
        while self._held:
            self._ledger._remove_memory(self._held.pop())


def _check_bandwidth(bandwidth: Any, what: str = "bandwidth") -> None:
    """`InvalidArgument` naming `what` unless `bandwidth` is a whole number of bits/s a booking may hold."""
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, int) or not 0 < bandwidth <= MAX_BANDWIDTH:
        raise InvalidArgument(f"{what} must be a whole number of bits/s from 1 to {MAX_BANDWIDTH}, got {bandwidth!r}")


def _new_booking(booking_id: str, bandwidth: int | None, start: float | None, end: float | None,
                 directions: tuple[str, ...], meta: Mapping[str, Any], steps: Sequence[Any] | None) -> Booking:
    """The booking `reserve` is asked for: constant, or stepped when `steps` is given (its
    window and peak derived from the steps, and checked against `start`, `end` and `bandwidth`
    when those are given too); `InvalidArgument` for a malformed profile."""
    if steps is None:
        if bandwidth is None or start is None or end is None:
            raise InvalidArgument("a booking without steps needs a bandwidth, a start and an end")
        return Booking(booking_id, bandwidth, start, end, directions, meta)
    spans = _spans(steps)
    derived = {"start": spans[0].start, "end": spans[-1].end, "bandwidth": max(s.bandwidth for s in spans)}
    for name, given in (("start", start), ("end", end), ("bandwidth", bandwidth)):
        if given is not None and given != derived[name]:
            raise InvalidArgument(f"{name} ({given!r}) must be its steps' ({derived[name]!r}), or left out")
    return Booking(booking_id, derived["bandwidth"], derived["start"], derived["end"], directions, meta, spans)


def _spans(steps: Sequence[Any]) -> tuple[Span, ...]:
    """`steps` as spans (from `(start, end, bandwidth)` or objects with those attributes), or
    `InvalidArgument` naming the first step that is not part of a contiguous profile in time order."""
    spans: list[Span] = []
    for number, step in enumerate(steps):
        try:
            start, end, bandwidth = ((step.start, step.end, step.bandwidth) if hasattr(step, "bandwidth")
                                     else step)
            start, end = float(start), float(end)
        except (TypeError, ValueError):
            raise InvalidArgument(f"steps[{number}]: expected (start, end, bandwidth), got {step!r}") from None
        _check_bandwidth(bandwidth, f"steps[{number}]: bandwidth")
        if spans and start != spans[-1].end:
            raise InvalidArgument(f"steps[{number}]: starts at {format_time(start)}, not where step "
                                  f"{number - 1} ends ({format_time(spans[-1].end)}): steps must be contiguous")
        if not (math.isfinite(start) and start >= 0):
            raise InvalidArgument(f"steps[{number}]: start must be a finite time, got {start!r}")
        if math.isnan(end) or end <= start or (math.isinf(end) and number < len(steps) - 1):
            raise InvalidArgument(f"steps[{number}]: end ({format_time(end)}) must be after start "
                                  f"({format_time(start)}), and finite but for the last step")
        spans.append(Span(start, end, bandwidth))
    if not spans:
        raise InvalidArgument("steps: a stepped booking needs at least one step")
    return tuple(spans)


def _json_meta(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """`meta` as it reads back from the database (tuples become lists, keys strings), so the
    booking held in memory equals the one a reopened ledger loads, and read-only, so nobody
    changes it behind the database's back; `InvalidArgument` if it is not JSON data."""
    if STEPS_KEY in meta:
        raise InvalidArgument(f"meta: {STEPS_KEY!r} is the ledger's own key")
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
