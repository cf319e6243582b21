"""`tsdn bench advisor`: rate-driven rerouting judged against each episode's ground truth.

The pure core (`ReservationBook` with `provisioning=False`, a real `Ledger` in a temporary
SQLite file, `FakeClock`) runs on sc16 through generated episodes, one fresh book each. An
episode is a few reservations between sc16 DTNs (bookings 10G-400G) for 30-42 simulated
seconds; each second the bench measures every link direction as the switches' port counters
would (each transfer's traffic on its path, 1.5% of it as acks on the reverse directions, and
the episode's traffic that no reservation owns), feeds that to `observe_loads`, and reports each
transfer's rate and health with `report_rate`. A transfer's rate comes from a small model of
the network: what its hosts can send, cut where the unowned traffic leaves its path less room
than the reservations there want, cut by ack loss where its reverse direction is saturated,
and zero across a link that is down.

Episode kinds, each with its ground truth (which reservation must move, from when, and where
it may go):

- host-limited: a paced sender well below its booking, links at most half loaded: no move;
- sender-limited: the sender's CPU at 100%, no retransmits: no move;
- forward: unowned traffic fills one link of the path, the transfer's rate drops: it must move;
- reverse: unowned traffic fills the reverse direction of one link (its acks): it must move;
- rearrangement: Caltech A -> Caltech B (250-350G) congested on tbit-tcp, while the only other
  way (the DCI through SCinet) has too little left; moving a smaller reservation off the DCI
  makes room. The relieved one must move; the displaced one's move is correct only as part of
  the rearrangement announced for it;
- oscillating: unowned traffic cycling 85% / 95% / 75% of one link every 3-5 s: at most one
  move, never back;
- failure: one link of the path congested, another link of it goes down 1-2 s later: the
  transfer must end up off both (a move off the failed link counts);
- blip: one to three 2-second congestion blips: no move.

A move is correct when the ground truth asks for it (or allows it: a rearrangement announced
for a reservation that must move, a move off a failed link, one move in an oscillating episode),
at or after the onset, and its new path crosses no congested or failed link and has room for
the booking as measured (the unowned traffic plus what the other transfers there send).
precision = correct moves / moves; recall = required moves made within the episode / required
moves; flaps = moves back onto a path left in the same episode, plus every congestion move after
the first in an oscillating episode. decision_ms: wall time of the `report_rate` calls that ended
in a decision (an event: moved, rearranged, or told why not).

Baseline, on the same episodes in the same run: the previous policy, a tiny simulation on a
book of its own: after 3 reports in a row below 80% of the booking, move the reservation to the
best path that avoids every link of its current path (ledger bookings only), whatever the cause.

Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path as FilePath

from benchmarks.report import print_result, say
from sdn_app.core.clock import FakeClock
from sdn_app.core.decisions import Decision, Kind
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import Path, PathFinder, PathRequest
from sdn_app.core.rerouting.advisor import Health
from sdn_app.core.reservation import Event, PathChoice, Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.core.utilization import DirectionLoad
from topologies import builtin_topology

G = 10**9
TOPOLOGY = "sc16"
KINDS = ("host-limited", "sender-limited", "forward", "reverse", "rearrangement", "oscillating", "failure", "blip")
SERVICE = Principal("bench", Role.SERVICE)
AGENT = Principal("bench-agent", Role.AGENT)
ACK_SHARE = 0.015  # acks on the reverse direction, as a share of the data rate
BOOKINGS = tuple(b * G for b in (10, 20, 25, 40, 50, 100, 200, 300, 400))
TARGETS = {"precision": 1.0, "recall": 0.95, "flaps": 0, "decision_ms_p99": 5.0}
LOW = 0.8  # the baseline's threshold: below this share of the booking is low ...
LOW_REPORTS = 3  # ... for this many reports in a row
WINDOW = 3600.0


@dataclass(frozen=True)
class Transfer:
    """One reservation of an episode and what its hosts can do."""

    src: str
    dst: str
    booking: int
    exclude: tuple[str, ...] = ()  # the service's own constraint
    host_share: float = 1.0  # the share of the booking the hosts can send
    cpu_percent: float = 60.0


@dataclass(frozen=True)
class Cross:
    """Unowned traffic on one direction: `shares` of its capacity in turn, `period` s each, in [start, end)."""

    direction: str
    start: int
    end: float
    shares: tuple[float, ...]
    period: int = 1

    def share_at(self, t: int) -> float:
        if not self.start <= t < self.end:
            return 0.0
        return self.shares[((t - self.start) // self.period) % len(self.shares)]


@dataclass(frozen=True)
class Episode:
    """Transfers, unowned traffic and failures over `length` seconds, with the ground truth:
    `required` (transfer index -> onset: it must move from then), `optional` (may move once),
    `hot` (links a move may never go onto), from `onset` on."""

    kind: str
    number: int
    length: int
    transfers: tuple[Transfer, ...]
    cross: tuple[Cross, ...]
    hot: frozenset[str] = frozenset()
    failures: tuple[tuple[int, str], ...] = ()
    required: dict[int, int] = field(default_factory=dict)
    optional: frozenset[int] = frozenset()
    onset: int = 0  # when the network trouble starts (0: never)


@dataclass
class Move:
    """One move seen: second, transfer, old and new path, its reason, and the typed decision it
    was (what the judging reads; None: no decision, e.g. a move asked for)."""

    t: int
    index: int
    old: Path
    new: Path
    reason: str
    correct: bool = False
    why: str = ""
    decision: Decision | None = None

    def is_a(self, *kinds: Kind) -> bool:
        return self.decision is not None and self.decision.kind in kinds


@dataclass
class Outcome:
    """What one policy did in one episode."""

    moves: list[Move] = field(default_factory=list)
    made: set[int] = field(default_factory=set)  # required transfers that made a correct move
    flaps: int = 0
    decisions_s: list[float] = field(default_factory=list)
    reports_s: list[float] = field(default_factory=list)


class Network:
    """The world of one episode: rates the transfers achieve and the loads the switches measure."""

    def __init__(self, topology: Topology, episode: Episode, seed: int):
        self.topology = topology
        self.episode = episode
        self.seed = seed
        self._cross: dict[str, list[Cross]] = {}
        for c in episode.cross:
            self._cross.setdefault(c.direction, []).append(c)
        self.down: set[str] = set()

    def cross(self, direction: str, t: int) -> float:
        """Unowned traffic offered on `direction` at second `t` (bits/s)."""
        capacity = self.topology.directions[direction].capacity
        return min(1.0, sum(c.share_at(t) for c in self._cross.get(direction, ()))) * capacity

    def rates(self, t: int, paths: Sequence[Path]) -> tuple[list[float], list[Health]]:
        """What each transfer achieves at second `t` on `paths`, and the health its agent reports."""
        noise = random.Random(f"{self.seed}/{self.episode.number}/{t}")
        transfers = self.episode.transfers
        demand = [tr.booking * tr.host_share * noise.uniform(0.98, 1.0) for tr in transfers]
        wanted: dict[str, float] = {}
        for i, path in enumerate(paths):
            for d in path.direction_ids:
                wanted[d] = wanted.get(d, 0.0) + demand[i]
        rates, health = [], []
        for i, path in enumerate(paths):
            rate, lossy = demand[i], False
            if set(path.links) & self.down:
                rate, lossy = 0.0, True
            for d in path.direction_ids:
                room = self.topology.directions[d].capacity - self.cross(d, t)
                if wanted[d] > room:
                    rate, lossy = min(rate, demand[i] * max(0.0, room) / wanted[d]), True
            for d in path.directions[1:-1]:
                back = self._reverse(d.id)
                if self.cross(back, t) >= 0.9 * self.topology.directions[back].capacity:
                    rate, lossy = rate * 0.3, True  # acks lost: the sender backs off
            cpu = transfers[i].cpu_percent
            retransmits = noise.randint(200, 5000) if lossy else 0
            rtt = 1.0 + (noise.uniform(2.0, 8.0) if lossy else noise.uniform(0.0, 0.3))
            rates.append(rate)
            health.append(Health(retransmits=retransmits, rtt_ms=round(rtt, 2), cpu_percent=cpu))
        return rates, health

    def loads(self, t: int, paths: Sequence[Path], rates: Sequence[float]) -> dict[str, DirectionLoad]:
        """Every direction as the switches' port counters see it at second `t`."""
        owned: dict[str, float] = {}
        for path, rate in zip(paths, rates, strict=True):
            for d in path.directions:
                owned[d.id] = owned.get(d.id, 0.0) + rate
                back = self._reverse(d.id)
                owned[back] = owned.get(back, 0.0) + ACK_SHARE * rate
        out = {}
        for d in self.topology.directions.values():
            bps = 0.0 if d.link in self.down else min(float(d.capacity), self.cross(d.id, t) + owned.get(d.id, 0.0))
            out[d.id] = DirectionLoad(d.id, d.link, d.src, d.dst, d.capacity, d.kind, bps, bps, bps / d.capacity)
        return out

    def fits(self, t: int, index: int, paths: Sequence[Path], rates: Sequence[float]) -> str:
        """Why transfer `index`'s path `paths[index]` is no place for it at `t` ("" when it is):
        a hot or failed link, or too little room as measured (unowned traffic plus what the
        other transfers there send) for its booking."""
        path = paths[index]
        bad = sorted(set(path.links) & (self.episode.hot | self.down))
        if bad:
            return f"onto {'failed' if set(bad) & self.down else 'congested'} link {', '.join(bad)}"
        for d in path.directions:
            others = sum(r for j, (p, r) in enumerate(zip(paths, rates, strict=True))
                         if j != index and d.id in p.direction_ids)
            load = self.cross(d.id, t) + others + self.episode.transfers[index].booking
            if load > d.capacity * 1.001:
                return f"onto {d.id} without room: {load / d.capacity:.0%} of its capacity"
        return ""

    def _reverse(self, direction: str) -> str:
        d = self.topology.directions[direction]
        pair = self.topology.access(d.link) if d.is_access else self.topology.link_directions[d.link]
        return next(x.id for x in pair if x.id != d.id)


# -- episodes ------------------------------------------------------------------------------


class Generator:
    """Seeded episodes of every kind on sc16, with their ground truth."""

    def __init__(self, topology: Topology, seed: int):
        self.topology = topology
        self.rng = random.Random(seed)
        self.dtns = sorted(d.name for d in topology.spec.dtns)
        self.nic = {d.name: d.nic_speed for d in topology.spec.dtns}

    def episode(self, kind: str, number: int) -> Episode:
        """One episode of `kind`; drawn again until its ground truth is sound."""
        make = getattr(self, "_" + kind.replace("-", "_"))
        for _ in range(200):
            episode = make(number)
            if episode is not None and self._calm(episode):
                return episode
        raise RuntimeError(f"could not generate a {kind} episode")

    def _calm(self, episode: Episode) -> bool:
        """Whether, on their first paths, only the episode's target is ever held back by the
        network (and only from its onset on), and no direction but the hot ones is near
        congestion with unowned traffic: the ground truth names every reservation that has a
        network cause to move."""
        placed = self._place(list(episode.transfers))
        if placed is None:
            return False
        paths = placed[1]
        network = Network(self.topology, episode, 0)
        for t in range(1, episode.length + 1):
            network.down = {link for when, link in episode.failures if when <= t}
            rates, health = network.rates(t, paths)
            for i, h in enumerate(health):
                if h.retransmits and not (i == 0 and episode.onset and t >= episode.onset):
                    return False
            for load in network.loads(t, paths, rates).values():
                if load.link not in episode.hot and load.fraction is not None and load.fraction >= 0.85 \
                        and network.cross(load.direction, t) >= 0.05 * load.capacity:
                    return False
        return True

    # Each maker returns None when its draw does not give a sound episode.

    def _host_limited(self, n: int) -> Episode | None:
        return self._limited(n, "host-limited", self.rng.uniform(0.3, 0.6), self.rng.uniform(20, 50))

    def _sender_limited(self, n: int) -> Episode | None:
        return self._limited(n, "sender-limited", self.rng.uniform(0.4, 0.75), 100.0)

    def _limited(self, n: int, kind: str, share: float, cpu: float) -> Episode | None:
        target = self._transfer(host_share=share, cpu_percent=cpu)
        placed = self._place([target, *self._bystanders()])
        if placed is None:
            return None
        transfers, paths = placed
        # The path is loaded, but well clear of congestion.
        cross = [Cross(d, 0, math.inf, (self.rng.uniform(0.1, 0.45),)) for d in paths[0].direction_ids[1:-1]
                 if self.rng.random() < 0.5]
        return self._sound(Episode(kind, n, 30, tuple(transfers), tuple(cross)), paths)

    def _forward(self, n: int) -> Episode | None:
        return self._congested(n, "forward", reverse=False)

    def _reverse(self, n: int) -> Episode | None:
        return self._congested(n, "reverse", reverse=True)

    def _congested(self, n: int, kind: str, reverse: bool) -> Episode | None:
        placed = self._place([self._transfer(limit=200 * G), *self._bystanders()])
        if placed is None:
            return None
        transfers, paths = placed
        link, direction = self._hot_direction(paths[0], reverse)
        if link is None or self._crossed_by_others(link, paths):
            return None
        onset = self.rng.randint(4, 10)
        capacity = self.topology.directions[direction].capacity
        share = (self.rng.uniform(0.92, 0.99) if reverse
                 else 1.0 - self.rng.uniform(0.2, 0.6) * transfers[0].booking / capacity)
        if share < 0.9:
            return None
        cross = (Cross(direction, onset, math.inf, (share,)), *self._background(paths, {link}))
        return self._sound(Episode(kind, n, onset + 25, tuple(transfers), cross, frozenset({link}),
                                   required={0: onset}, onset=onset), paths)

    def _rearrangement(self, n: int) -> Episode | None:
        rng = self.rng
        a, b = rng.choice([("caltech-a-dtn1", "caltech-b-dtn1"), ("caltech-a-dtn2", "caltech-b-dtn2")])
        relieved = rng.choice((200, 250, 280, 300, 320)) * G  # more than a 100G booth fibre carries
        mover = rng.choice((40, 50, 60, 80, 100)) * G  # fits a 100G booth fibre: it can go round
        room = 400 * G - relieved  # what the DCI to Caltech B must have free for the relieved one
        # Together they leave too little on that DCI; without the mover, enough.
        fixed = rng.choice([f * G for f in (50, 80, 100, 120, 150, 200) if f * G <= room < f * G + mover] or [0])
        if not fixed:
            return None
        other_b = "caltech-b-dtn2" if b == "caltech-b-dtn1" else "caltech-b-dtn1"
        transfers = [Transfer(a, b, relieved),
                     Transfer("scinet-dtn1", rng.choice(("caltech-b-dtn3", "caltech-b-dtn4")), mover),
                     Transfer(rng.choice(("starlight-dtn1", "starlight-dtn2")), other_b, fixed, exclude=("tbit-tcp",))]
        placed = self._place(transfers)
        if placed is None:
            return None
        transfers, paths = placed
        if paths[0].links != ("tbit-tcp",) or "dci-caltech-b" not in paths[1].links \
                or "dci-caltech-b" not in paths[2].links:
            return None
        onset = rng.randint(4, 10)
        direction = paths[0].directions[1].id
        share = 1.0 - rng.uniform(0.2, 0.6) * relieved / self.topology.directions[direction].capacity
        return Episode("rearrangement", n, onset + 25, tuple(transfers), (Cross(direction, onset, math.inf, (share,)),),
                       frozenset({"tbit-tcp"}), required={0: onset}, onset=onset)

    def _oscillating(self, n: int) -> Episode | None:
        placed = self._place([self._transfer(), *self._bystanders()])
        if placed is None:
            return None
        transfers, paths = placed
        link, direction = self._hot_direction(paths[0], reverse=False)
        if link is None or self._crossed_by_others(link, paths):
            return None
        capacity = self.topology.directions[direction].capacity
        # Full rate at 85%, clearly low at 95%: 0.0625 x capacity < booking <= 0.15 x capacity.
        fitting = [b for b in BOOKINGS if 0.0625 * capacity < b <= 0.15 * capacity
                   and b <= min(self.nic[transfers[0].src], self.nic[transfers[0].dst])]
        if not fitting:
            return None
        transfers[0] = replace(transfers[0], booking=self.rng.choice(fitting))
        placed = self._place(transfers)
        if placed is None or placed[1][0].direction_ids != paths[0].direction_ids:
            return None
        transfers, paths = placed
        onset = self.rng.randint(3, 6)
        shares = (0.85, 0.95, 0.75)
        cross = (Cross(direction, onset, math.inf, shares, self.rng.randint(3, 5)), *self._background(paths, {link}))
        return self._sound(Episode("oscillating", n, onset + 36, tuple(transfers), cross, frozenset({link}),
                                   optional=frozenset({0}), onset=onset), paths)

    def _failure(self, n: int) -> Episode | None:
        placed = self._place([self._transfer(limit=100 * G), *self._bystanders()])
        if placed is None:
            return None
        transfers, paths = placed
        links = paths[0].links
        if len(links) < 2:
            return None
        hot, failed = self.rng.sample(links, 2)
        if self._crossed_by_others(hot, paths) or self._crossed_by_others(failed, paths):
            return None
        direction = paths[0].directions[1 + links.index(hot)].id
        capacity = self.topology.directions[direction].capacity
        share = 1.0 - self.rng.uniform(0.2, 0.6) * transfers[0].booking / capacity
        if share < 0.9:
            return None
        onset = self.rng.randint(4, 10)
        cross = (Cross(direction, onset, math.inf, (share,)), *self._background(paths, {hot, failed}))
        return self._sound(Episode("failure", n, onset + 25, tuple(transfers), cross, frozenset({hot}),
                                   failures=((onset + self.rng.randint(1, 2), failed),), required={0: onset},
                                   onset=onset),
                           paths, also_down=frozenset({failed}))

    def _blip(self, n: int) -> Episode | None:
        placed = self._place([self._transfer(limit=200 * G), *self._bystanders()])
        if placed is None:
            return None
        transfers, paths = placed
        link, direction = self._hot_direction(paths[0], reverse=False)
        if link is None or self._crossed_by_others(link, paths):
            return None
        capacity = self.topology.directions[direction].capacity
        share = 1.0 - self.rng.uniform(0.2, 0.6) * transfers[0].booking / capacity
        if share < 0.9:
            return None
        cross, t = [], self.rng.randint(3, 8)
        for _ in range(self.rng.randint(1, 3)):
            cross.append(Cross(direction, t, t + 2, (share,)))
            t += 2 + self.rng.randint(3, 6)
        return Episode("blip", n, t + 10, tuple(transfers), tuple(cross), frozenset({link}), onset=cross[0].start)

    # -- helpers --

    def _transfer(self, limit: int = 400 * G, **more: float) -> Transfer:
        src, dst = self.rng.sample(self.dtns, 2)
        fitting = [b for b in BOOKINGS if b <= min(self.nic[src], self.nic[dst], limit)]
        return Transfer(src, dst, self.rng.choice(fitting), **more)  # type: ignore[arg-type]

    def _bystanders(self) -> list[Transfer]:
        return [self._transfer(limit=100 * G) for _ in range(self.rng.randint(1, 3))]

    def _place(self, transfers: list[Transfer]) -> tuple[list[Transfer], list[Path]] | None:
        """The transfers' initial paths (as the book will choose them), or None when one does not fit."""
        clock = FakeClock()
        ledger = Ledger(self.topology.capacities(), None, clock)
        try:
            book = ReservationBook(self.topology, ledger, clock)
            pairs, paths = set(), []
            for tr in transfers:
                if (tr.src, tr.dst) in pairs:
                    return None
                pairs.add((tr.src, tr.dst))
                try:
                    r = book.create(SERVICE, request(clock, tr))
                except (NoCapacity, FailedPrecondition, InvalidArgument):
                    return None
                assert r.route is not None
                paths.append(r.route.primary)
            return transfers, paths
        finally:
            ledger.close()

    def _hot_direction(self, path: Path, reverse: bool) -> tuple[str | None, str]:
        inner = path.directions[1:-1]
        if not inner:
            return None, ""
        d = self.rng.choice(inner)
        if not reverse:
            return d.link, d.id
        return d.link, next(x.id for x in self.topology.link_directions[d.link] if x.id != d.id)

    @staticmethod
    def _crossed_by_others(link: str, paths: list[Path]) -> bool:
        return any(link in p.links for p in paths[1:])

    def _background(self, paths: list[Path], avoid: set[str]) -> list[Cross]:
        """Light unowned traffic (5-30%) on a few links no transfer of the episode crosses."""
        used = {link for p in paths for link in p.links} | avoid
        free = sorted(d.id for d in self.topology.directions.values() if not d.is_access and d.link not in used)
        return [Cross(d, 0, math.inf, (self.rng.uniform(0.05, 0.3),)) for d in self.rng.sample(free, 3)]

    def _sound(self, episode: Episode, paths: list[Path], also_down: frozenset[str] = frozenset()) -> Episode | None:
        """The episode, when every required move has somewhere acceptable to go without moving others."""
        if not episode.required:
            return episode
        network = Network(self.topology, episode, 0)
        network.down = set(also_down)
        rates, _ = network.rates(episode.length, paths)
        clock = FakeClock()
        room = _Room(network, episode.length, paths, rates)
        finder = PathFinder(self.topology, room)
        finder.down_links = set(also_down)
        for index in episode.required:
            room.moving = index
            tr = episode.transfers[index]
            req = replace(request(clock, tr), exclude=(*tr.exclude, *sorted(episode.hot)))
            try:
                finder.route(req)
            except (NoCapacity, FailedPrecondition, InvalidArgument):
                return None
        return episode


class _Room:
    """Free bandwidth per direction as the ground truth sees it: capacity minus unowned traffic
    minus what the other transfers send there."""

    def __init__(self, network: Network, t: int, paths: list[Path], rates: list[float]):
        self.network, self.t, self.paths, self.rates = network, t, paths, rates
        self.moving = 0

    def free(self, direction: str, start: float, end: float, ignore: str | None = None) -> int:
        others = sum(r for j, (p, r) in enumerate(zip(self.paths, self.rates, strict=True))
                     if j != self.moving and direction in p.direction_ids)
        capacity = self.network.topology.directions[direction].capacity
        return max(0, int(capacity - self.network.cross(direction, self.t) - others))


def request(clock: FakeClock, tr: Transfer) -> PathRequest:
    """The transfer's reservation request: from now, for an hour."""
    return PathRequest(tr.src, tr.dst, tr.booking, clock.now(), clock.now() + WINDOW, exclude=tr.exclude)


# -- running and judging -------------------------------------------------------------------


def run_core(topology: Topology, episode: Episode, directory: FilePath, seed: int) -> Outcome:
    """The episode through the new core: observe_loads and report_rate every second."""
    return _run(topology, episode, directory, seed, core=True)


def run_baseline(topology: Topology, episode: Episode, directory: FilePath, seed: int) -> Outcome:
    """The episode through the previous policy: 3 low reports -> away from every link of the path."""
    return _run(topology, episode, directory, seed, core=False)


def _run(topology: Topology, episode: Episode, directory: FilePath, seed: int, core: bool) -> Outcome:
    clock = FakeClock()
    ledger = Ledger(topology.capacities(), directory / f"{'core' if core else 'baseline'}-{episode.number}.db", clock)
    try:
        book = ReservationBook(topology, ledger, clock, provisioning=False)
        return _drive(topology, episode, book, clock, seed, core=core)
    finally:
        ledger.close()


def _drive(topology: Topology, episode: Episode, book: ReservationBook, clock: FakeClock, seed: int,
           core: bool) -> Outcome:
    network = Network(topology, episode, seed)
    names = [book.create(SERVICE, request(clock, tr)).name for tr in episode.transfers]
    index_of = {name.removeprefix("reservations/"): i for i, name in enumerate(names)}
    paths = [_path(book, name) for name in names]
    book.take_events()
    outcome = Outcome()
    low = [0] * len(names)

    def seen(t: int, told: dict[int, tuple[str, Decision | None]], rates: list[float]) -> None:
        """Note every transfer whose path changed, with the reason and the decision given for it."""
        now = [_path(book, name) for name in names]
        for i, (old, new) in enumerate(zip(paths, now, strict=True)):
            if old.direction_ids != new.direction_ids:
                reason, decision = told.get(i, ("", None))
                outcome.moves.append(Move(t, i, old, new, reason, decision=decision))
        for move in outcome.moves:
            if move.t == t and not move.why:
                move.correct, move.why = judge(network, episode, move, now, rates, index_of)
                move.why = move.why or "correct"
        paths[:] = now

    def told(events: list[Event]) -> dict[int, tuple[str, Decision | None]]:
        return {index_of[e.reservation.id]: (e.reason, e.decision) for e in events if e.reservation.id in index_of}

    for t in range(1, episode.length + 1):
        clock.advance(1)
        for when, link in episode.failures:
            if when == t:
                network.down.add(link)
                book.set_link_state(link, up=False)
                seen(t, told(book.take_events()), network.rates(t, paths)[0])
        rates, health = network.rates(t, paths)
        if core:
            book.observe_loads(network.loads(t, paths, rates))
        for i, name in enumerate(names):
            if core:
                start = time.perf_counter()
                book.report_rate(AGENT, name, rates[i], health[i])
                elapsed = time.perf_counter() - start
                events = book.take_events()
                outcome.reports_s.append(elapsed)
                if any(e.decision is not None for e in events):
                    outcome.decisions_s.append(elapsed)
                reasons = told(events)
            else:
                reasons = {}
                low[i] = low[i] + 1 if rates[i] < LOW * episode.transfers[i].booking else 0
                if low[i] >= LOW_REPORTS:
                    avoid = tuple(sorted(set(paths[i].links)))
                    try:
                        book.modify(SERVICE, name, path=PathChoice(exclude=avoid))
                    except (NoCapacity, FailedPrecondition, InvalidArgument):
                        pass
                    else:
                        low[i] = 0
                        reasons[i] = (f"congested: low for {LOW_REPORTS} reports (baseline)", Decision(Kind.MOVED))
                    book.take_events()
            seen(t, reasons, rates)
    outcome.flaps = _flaps(episode, outcome.moves)
    outcome.made = {m.index for m in outcome.moves if m.correct and m.index in episode.required
                    and not m.is_a(Kind.DISPLACED)}
    return outcome


def judge(network: Network, episode: Episode, move: Move, paths: list[Path], rates: list[float],
          index_of: dict[str, int]) -> tuple[bool, str]:
    """Whether a move is right by the episode's ground truth, and why not."""
    i, t, decision = move.index, move.t, move.decision
    where = network.fits(t, i, paths, rates)
    if where:
        return False, where
    if decision is not None and decision.kind is Kind.LINK and not decision.link_up:
        if set(move.old.links) & network.down:
            return True, ""
        return False, "moved for a failure its path did not cross"
    if decision is not None and decision.kind is Kind.DISPLACED:
        relieved = index_of.get(decision.relieves.removeprefix("reservations/"))
        if relieved is not None and relieved in episode.required and t >= episode.required[relieved]:
            return True, ""
        return False, "displaced for a reservation that did not need to move"
    if decision is None or decision.cause != "congestion":
        return False, f"moved for no network cause: {move.reason[:80]}"
    if i in episode.required and t >= episode.required[i]:
        return True, ""
    if i in episode.optional:
        return True, ""
    return False, "moved with no congestion or failure on its path"


def _flaps(episode: Episode, moves: list[Move]) -> int:
    flaps = 0
    left: dict[int, set[tuple[str, ...]]] = {}
    for move in moves:
        been = left.setdefault(move.index, set())
        if move.new.direction_ids in been:
            flaps += 1
            move.correct, move.why = False, "back onto a path it left"
        been.add(move.old.direction_ids)
    if episode.kind == "oscillating":
        congestion = [m for m in moves if m.decision is not None and m.decision.cause == "congestion"]
        for extra in congestion[1:]:
            if extra.why != "back onto a path it left":
                flaps += 1
            extra.correct, extra.why = False, "more than one move in an oscillating episode"
    return flaps


def _path(book: ReservationBook, name: str) -> Path:
    route = book.get(SERVICE, name).route
    assert route is not None
    return route.primary


# -- the whole run -------------------------------------------------------------------------


@dataclass
class Tally:
    """Moves and required moves of one policy, per kind and in all."""

    by_kind: dict[str, Counter] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)
    decisions_s: list[float] = field(default_factory=list)
    reports_s: list[float] = field(default_factory=list)

    def add(self, episode: Episode, outcome: Outcome) -> None:
        c = self.by_kind.setdefault(episode.kind, Counter())
        c["episodes"] += 1
        c["moves"] += len(outcome.moves)
        c["correct"] += sum(m.correct for m in outcome.moves)
        c["required"] += len(episode.required)
        c["made"] += len(outcome.made)
        c["flaps"] += outcome.flaps
        c["rearranged"] += sum(m.is_a(Kind.DISPLACED) for m in outcome.moves)
        for m in outcome.moves:
            if not m.correct:
                self.wrong.append(f"{episode.kind} #{episode.number} t={m.t}: {m.why}; {m.reason[:160]}")
        for i in episode.required:
            if i not in outcome.made:
                self.wrong.append(f"{episode.kind} #{episode.number}: required move of transfer {i} not made")
        self.decisions_s += outcome.decisions_s
        self.reports_s += outcome.reports_s

    def total(self, key: str) -> int:
        return sum(c[key] for c in self.by_kind.values())

    def summary(self) -> dict:
        moves, required = self.total("moves"), self.total("required")
        return {"precision": round(self.total("correct") / moves, 4) if moves else 1.0,
                "recall": round(self.total("made") / required, 4) if required else 1.0,
                "flaps": self.total("flaps"), "moves": moves, "correct_moves": self.total("correct"),
                "required_moves": required, "required_made": self.total("made")}


def percentile_ms(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000, 3)


def measure(episodes: int, seed: int) -> dict:
    """Generate `episodes` episodes (the kinds in turn), run both policies, and summarise."""
    if episodes < len(KINDS):
        raise RuntimeError(f"--episodes: at least {len(KINDS)} (one of each kind), got {episodes}")
    topology = Topology.load(builtin_topology(TOPOLOGY))
    generator = Generator(topology, seed)
    core, baseline = Tally(), Tally()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-advisor-") as tmp:
        directory = FilePath(tmp)
        for number in range(episodes):
            episode = generator.episode(KINDS[number % len(KINDS)], number)
            core.add(episode, run_core(topology, episode, directory, seed))
            baseline.add(episode, run_baseline(topology, episode, directory, seed))
            for db in directory.glob("*.db*"):
                db.unlink()
    elapsed = time.perf_counter() - started
    for line in core.wrong[:20]:
        say(f"  core: {line}")
    for line in baseline.wrong[:5]:
        say(f"  baseline: {line}")
    summary = core.summary()
    result = {"bench": "advisor", "topology": TOPOLOGY, "episodes": episodes, "seed": seed,
              "precision": summary["precision"], "recall": summary["recall"], "flaps": summary["flaps"],
              "decision_ms_p50": percentile_ms(core.decisions_s, 0.5),
              "decision_ms_p99": percentile_ms(core.decisions_s, 0.99),
              "decisions": len(core.decisions_s),
              "report_ms_p99": percentile_ms(core.reports_s, 0.99),
              "moves": summary["moves"], "required_moves": summary["required_moves"],
              "required_made": summary["required_made"],
              "kinds": {k: dict(c) for k, c in core.by_kind.items()},
              "baseline": {**baseline.summary(), "kinds": {k: dict(c) for k, c in baseline.by_kind.items()}},
              "targets": TARGETS, "seconds": round(elapsed, 1)}
    result["meets_targets"] = (result["precision"] >= TARGETS["precision"] and result["recall"] >= TARGETS["recall"]
                               and result["flaps"] <= TARGETS["flaps"]
                               and (result["decision_ms_p99"] or 0.0) <= TARGETS["decision_ms_p99"])
    say(f"advisor: {episodes} episodes in {elapsed:.1f} s: precision {result['precision']}, recall "
        f"{result['recall']}, {result['flaps']} flaps, decision p99 {result['decision_ms_p99']} ms; baseline "
        f"precision {result['baseline']['precision']}, recall {result['baseline']['recall']}, "
        f"{result['baseline']['flaps']} flaps")
    return result


def main(quick: bool = False, seed: int = 16, episodes: int | None = None) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    count = episodes if episodes is not None else (48 if quick else 240)
    return print_result("advisor", lambda: {**measure(count, seed), "quick": quick})


if __name__ == "__main__":
    raise SystemExit(main(quick=True))
