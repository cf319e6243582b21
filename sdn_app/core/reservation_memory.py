"""The reservations a book holds in memory, and the indexes it looks them up by.

Live reservations are held for as long as they live; an ended one only for `keep_ended` seconds
after it ended (`math.inf`: for good), then only in the store (each row about 1.5 kB with its
indexes). Each reservation in memory also keeps its last `HISTORY_LENGTH` changes (`history`:
about 120 bytes each plus its reason, 2.5 to 7.5 kB when full), which leave memory with it.
"""

from __future__ import annotations

import collections
import heapq
import math

from sdn_app.core.prefix_index import PrefixIndex
from sdn_app.core.reservation import HistoryEntry, Reservation, State

EVICTION_INTERVAL = 1.0  # seconds at least between sweeps of ended reservations out of memory (batched)
HISTORY_LENGTH = 20  # changes of a reservation held for `history` while it is in memory


class Memory:
    """Reservations in memory by id (`known`; the live ones also in `live`), by request id and by
    DTN pair, the heap of their next deadlines, and their recent history."""

    def __init__(self, keep_ended: float):
        self.keep_ended = keep_ended
        self.known: dict[str, Reservation] = {}
        self.live: dict[str, Reservation] = {}  # not final: what ticks and deadlines look at
        self.degraded: set[str] = set()
        self.elastic: set[str] = set()  # live elastic ones: what a re-solve of the shares looks at
        self.scheduled: set[str] = set()  # live ones with a deadline schedule: their steps follow the clock
        self.prefixed: set[str] = set()  # live ones with IPv6 prefixes: what a new one's prefixes must keep apart from
        self._prefixes = PrefixIndex()  # the same, by the /48s of their prefixes
        self._by_request: dict[tuple[str, str], str] = {}
        self._by_pair: dict[tuple[str, str], set[str]] = {}  # (src, dst) -> live reservations
        self._deadlines: list[tuple[float, str]] = []  # heap of (window start or end, id); stale entries skipped
        self._leaving: list[tuple[float, str]] = []  # heap of (when it leaves memory, id) of ended reservations
        self._next_sweep = -math.inf  # sweeps out of memory are batched, EVICTION_INTERVAL apart
        self._histories: dict[str, collections.deque[HistoryEntry]] = {}

    def remember(self, reservation: Reservation) -> None:
        """Hold the reservation as it is now, and index it."""
        earlier = self.known.get(reservation.id)
        self.known[reservation.id] = reservation
        pair = (reservation.request.src, reservation.request.dst)
        if reservation.state.is_final:
            if (earlier is None or not earlier.state.is_final) and math.isfinite(self.keep_ended):
                heapq.heappush(self._leaving, (reservation.updated + self.keep_ended, reservation.id))
            self.live.pop(reservation.id, None)
            same = self._by_pair.get(pair)
            if same is not None:
                same.discard(reservation.id)
                if not same:
                    del self._by_pair[pair]
        else:
            previous = self.live.get(reservation.id)
            self.live[reservation.id] = reservation
            self._by_pair.setdefault(pair, set()).add(reservation.id)
            if len(self._deadlines) > 2 * len(self.live) + 64:  # mostly stale entries: rebuild, keep it bounded
                self._deadlines = [(deadline(r), r.id) for r in self.live.values()]
                heapq.heapify(self._deadlines)
            elif previous is None or deadline(previous) != deadline(reservation):
                heapq.heappush(self._deadlines, (deadline(reservation), reservation.id))
        if reservation.state is State.DEGRADED:
            self.degraded.add(reservation.id)
        else:
            self.degraded.discard(reservation.id)
        for index, member in ((self.elastic, reservation.elastic), (self.scheduled, bool(reservation.schedule)),
                              (self.prefixed, reservation.request.src_prefix is not None)):
            if member and not reservation.state.is_final:
                index.add(reservation.id)
            else:
                index.discard(reservation.id)
        q = reservation.request
        if reservation.id in self.prefixed and q.src_prefix is not None and q.dst_prefix is not None:
            self._prefixes.add(reservation.id, (q.src_prefix, q.dst_prefix))
        else:
            self._prefixes.discard(reservation.id)
        if reservation.request_id:
            self._by_request[(reservation.owner, reservation.request_id)] = reservation.id

    def note(self, reservation_id: str, entry: HistoryEntry) -> None:
        """Add a change to the reservation's history (the last `HISTORY_LENGTH` are kept)."""
        history = self._histories.get(reservation_id)
        if history is None:
            history = self._histories[reservation_id] = collections.deque(maxlen=HISTORY_LENGTH)
        history.append(entry)

    def history(self, reservation_id: str) -> list[HistoryEntry]:
        """The reservation's last changes, oldest first (empty once it left memory)."""
        return list(self._histories.get(reservation_id, ()))

    def by_request(self, owner: str, request_id: str) -> str | None:
        """The id of the reservation in memory `owner` created with `request_id`."""
        return self._by_request.get((owner, request_id))

    def on_pair(self, src: str, dst: str) -> list[Reservation]:
        """The live reservations from `src` to `dst`."""
        return [self.live[i] for i in self._by_pair.get((src, dst), ())]

    def with_prefixes(self, near: tuple[str, str] | None = None) -> list[Reservation]:
        """The live reservations whose traffic is named by IPv6 prefixes; with `near`, only those
        with a prefix that may overlap one of these (`PrefixIndex.candidates`)."""
        ids = self.prefixed if near is None else self._prefixes.candidates(near)
        return [self.live[i] for i in ids]

    def sweep(self, now: float) -> None:
        """Forget the ended reservations whose time in memory is up."""
        leaving = self._leaving
        while leaving and leaving[0][0] <= now:
            _, reservation_id = heapq.heappop(leaving)
            gone = self.known.pop(reservation_id, None)
            self._histories.pop(reservation_id, None)
            if gone is not None and gone.request_id \
                    and self._by_request.get((gone.owner, gone.request_id)) == reservation_id:
                del self._by_request[(gone.owner, gone.request_id)]
        self._next_sweep = now + EVICTION_INTERVAL

    def next_deadline(self) -> float:
        """The earliest window start or end of a live reservation (math.inf: none)."""
        heap = self._deadlines
        while heap:
            when, reservation_id = heap[0]
            live = self.live.get(reservation_id)
            if live is not None and deadline(live) == when:
                return when
            heapq.heappop(heap)  # stale: the reservation ended or its deadline moved
        return math.inf

    def next_sweep(self) -> float:
        """When `sweep` next has something to do, at least EVICTION_INTERVAL after the last one
        (math.inf: nothing held to forget)."""
        return max(self._leaving[0][0], self._next_sweep) if self._leaving else math.inf


def deadline(reservation: Reservation) -> float:
    """When the clock next changes a live reservation: its hold's timeout while HELD, its start
    while SCHEDULED, else its schedule's next step or its end."""
    request = reservation.request
    if reservation.state is State.HELD:
        return min(reservation.hold_until, request.end)
    if reservation.state is State.SCHEDULED:
        return request.start
    return min((s.start for s in reservation.schedule if s.start > reservation.updated), default=request.end)
