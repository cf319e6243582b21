"""Bounded memory: ended reservations leave memory after `keep_ended` and stay readable from the
store (Get, List with filters and paging, request_id retries, the transfer desk), restarts load
only live and recently ended ones; over gRPC and through `tsdn path list`.

Core tests run a `ReservationBook` on a real SQLite file with a FakeClock; the gRPC tests a real
controller on loopback; the CLI test a real `tsdn controller` process."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import bandwidth_pb2_grpc
from sdn_app.core import reservation_memory
from sdn_app.core.agents import AgentFacts, AgentRegistry, NicFacts
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Reservation, Role, State
from sdn_app.core.reservations import ReservationBook, Sweeper
from sdn_app.core.topology import Topology
from sdn_app.core.transfers import TransferDesk, TransferSpec, TransferState
from tests.conftest import TOKENS
from tests.waiting import wait_for
from topologies import builtin_topology
from tsdn.cli.controller import parse_keep_ended

G = 10**9
HOUR = 3600.0
KEEP = 600.0  # keep_ended of the core tests
RING8 = Topology.load(builtin_topology("ring8"))
RUCIO = Principal("rucio", Role.SERVICE)
FTS = Principal("fts", Role.SERVICE)
NOC = Principal("noc", Role.ADMIN)
DTNS = sorted(RING8.dtns)


class Core:
    """A book over a ledger on `db`, with a fake clock, as the controller builds it."""

    def __init__(self, db: Path, clock: FakeClock, keep_ended: float = KEEP):
        self.db, self.clock, self.keep_ended = db, clock, keep_ended
        self.ledger = Ledger(RING8.capacities(), db, clock)
        self.book = ReservationBook(RING8, self.ledger, clock, keep_ended=keep_ended)

    def create(self, principal: Principal = RUCIO, i: int = 0, start: float | None = None, end: float = math.inf,
               request_id: str = "") -> Reservation:
        """A 1G reservation between two DTNs picked by `i` (bookings may overlap: no switches)."""
        now = self.clock.now()
        src, dst = DTNS[i % len(DTNS)], DTNS[(i + 1) % len(DTNS)]
        return self.book.create(principal, PathRequest(src, dst, 1 * G, now if start is None else start, end),
                                request_id=request_id)

    def later(self, seconds: float) -> None:
        """Time passes; the worker ticks the book."""
        self.clock.advance(seconds)
        self.book.tick()

    def restart(self, keep_ended: float | None = None) -> Core:
        self.ledger.close()
        return Core(self.db, self.clock, self.keep_ended if keep_ended is None else keep_ended)

    def stored_ids(self) -> set[str]:
        with sqlite3.connect(self.db) as db:
            return {row[0] for row in db.execute("SELECT id FROM reservations")}


@pytest.fixture
def cores(tmp_path: Path):
    made: list[Core] = []

    def make(keep_ended: float = KEEP, clock: FakeClock | None = None) -> Core:
        core = Core(tmp_path / "t.db", clock or FakeClock(), keep_ended)
        made.append(core)
        return core

    yield make
    for core in made:
        core.ledger.close()


def listed(book: ReservationBook, principal: Principal, between=lambda: None, **filters) -> list[Reservation]:
    """Every page of a listing, calling `between()` between two pages."""
    seen: list[Reservation] = []
    page, token = book.list(principal, **filters)
    seen += page
    while token:
        between()
        page, token = book.list(principal, page_token=token, **filters)
        seen += page
    return seen


def delete_row(db: Path, reservation: Reservation) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM reservations WHERE id = ?", (reservation.id,))


def held(db: Path, book: ReservationBook) -> dict[str, int]:
    """How many reservations `book` holds in memory, `live` and `ended`: those Get still finds while
    their rows are out of the store (only memory has them then). The rows are put back."""
    with contextlib.closing(sqlite3.connect(db)) as connection, connection:
        rows = connection.execute("SELECT * FROM reservations").fetchall()
        connection.execute("DELETE FROM reservations")
    found: list[Reservation] = []
    try:
        for row in rows:
            with contextlib.suppress(NotFound):
                found.append(book.get(NOC, row[0]))
    finally:
        with contextlib.closing(sqlite3.connect(db)) as connection, connection:
            if rows:
                connection.executemany(f"INSERT INTO reservations VALUES ({', '.join('?' * len(rows[0]))})", rows)
    live = sum(not r.state.is_final for r in found)
    return {"live": live, "ended": len(found) - live}


def ended_remembered(controller, names: list[str]) -> int:
    """How many of the reservations `names` a running controller holds in memory though they ended:
    a reservation's history of changes is kept while it is in memory, and leaves with it."""
    def count() -> int:
        ended = [controller.book.get(NOC, name) for name in names]
        return sum(1 for r in ended if r.state.is_final and controller.book.history(r.id))
    return controller.worker.call(count)


# -- leaving memory ------------------------------------------------------------------------------


def test_an_ended_reservation_leaves_memory_after_keep_ended_and_stays_readable(cores):
    core = cores()
    t0 = core.clock.now()
    kept = core.create(i=0)
    core.clock.advance(1)
    released = core.book.release(RUCIO, core.create(i=1).name)  # ends at t0 + 1
    core.clock.advance(1)
    expired = core.create(i=2, end=t0 + 62)
    core.later(60)
    expired = core.book.get(RUCIO, expired.name)
    assert expired.state is State.EXPIRED and expired.updated == t0 + 62
    assert held(core.db, core.book) == {"live": 1, "ended": 2}

    core.clock.set(t0 + 1 + KEEP - 1)
    core.book.tick()
    assert held(core.db, core.book) == {"live": 1, "ended": 2}  # not yet
    core.later(1)
    assert held(core.db, core.book) == {"live": 1, "ended": 1}  # the released one left
    core.clock.set(t0 + 62 + KEEP)
    core.book.tick()
    assert held(core.db, core.book) == {"live": 1, "ended": 0}

    assert core.book.get(RUCIO, released.name) == released
    assert core.book.get(RUCIO, expired.id) == expired
    assert core.book.get(NOC, released.name) == released
    with pytest.raises(PermissionDenied, match="another principal"):
        core.book.get(FTS, released.name)
    assert core.book.list(RUCIO)[0] == [expired, released, kept]
    assert core.book.list(RUCIO, state=State.RELEASED)[0] == [released]
    assert core.book.release(RUCIO, released.name) == released  # final: unchanged, nothing written
    with pytest.raises(FailedPrecondition, match="only live reservations can be modified"):
        core.book.modify(RUCIO, released.name, bandwidth=2 * G)
    assert held(core.db, core.book) == {"live": 1, "ended": 0}

    # What Get returns now comes from the store: without the row there is nothing.
    delete_row(core.db, released)
    with pytest.raises(NotFound, match=released.id):
        core.book.get(RUCIO, released.name)
    # The live one is held in memory (and still there without its row).
    delete_row(core.db, kept)
    assert core.book.get(RUCIO, kept.name) == kept


def test_keep_ended_zero_and_forever(cores, tmp_path):
    core = cores(keep_ended=0)
    gone = core.book.release(RUCIO, core.create().name)
    core.later(0)
    assert held(core.db, core.book) == {"live": 0, "ended": 0}
    assert core.book.get(RUCIO, gone.name) == gone
    core.ledger.close()

    forever = Core(tmp_path / "forever.db", FakeClock(), keep_ended=math.inf)
    try:
        for i in range(5):
            forever.book.release(RUCIO, forever.create(i=i).name)
        forever.later(365 * 24 * HOUR)
        assert held(forever.db, forever.book) == {"live": 0, "ended": 5}
    finally:
        forever.ledger.close()

    for bad in (-1, math.nan, "1h", True):
        with pytest.raises(InvalidArgument, match="keep_ended"):
            ReservationBook(RING8, Ledger(RING8.capacities()), FakeClock(), keep_ended=bad)


def test_the_sweeper_is_due_when_ended_reservations_should_leave_memory_batched(cores):
    """A busy worker ticks only what is due: the sweeper says when ended reservations must leave."""
    core = cores(keep_ended=10)
    sweeper = Sweeper(core.book)
    t0 = core.clock.now()
    assert sweeper.next_deadline() == math.inf and sweeper.take_events() == []
    core.book.release(RUCIO, core.create(i=0).name)
    core.clock.advance(3)
    core.book.release(RUCIO, core.create(i=1).name)
    core.clock.advance(0.5)
    core.book.release(RUCIO, core.create(i=2).name)
    assert sweeper.next_deadline() == t0 + 10
    core.clock.set(t0 + 10)
    sweeper.tick()
    assert held(core.db, core.book) == {"live": 0, "ended": 2}
    assert sweeper.next_deadline() == t0 + 13
    core.clock.set(t0 + 13)
    sweeper.tick()
    assert held(core.db, core.book) == {"live": 0, "ended": 1}
    # the next one is due at t0 + 13.5, but sweeps come at most one per EVICTION_INTERVAL
    assert sweeper.next_deadline() == t0 + 13 + reservation_memory.EVICTION_INTERVAL
    core.clock.set(t0 + 14)
    sweeper.tick()
    assert held(core.db, core.book) == {"live": 0, "ended": 0} and sweeper.next_deadline() == math.inf
    assert len(listed(core.book, NOC, page_size=1)) == 3


# -- listing across memory and the store ---------------------------------------------------------


def test_pages_give_every_reservation_once_while_evictions_happen_between_pages(cores):
    core = cores(keep_ended=30)
    made: dict[str, Reservation] = {}
    for i in range(40):
        r = core.create(RUCIO if i % 3 else FTS, i=i)
        made[r.id] = core.book.release(NOC, r.name) if i % 4 == 0 else r
        if i % 5 == 4:  # five at a time share a creation time: the id orders them
            core.clock.advance(10)
    core.book.tick()
    assert 0 < held(core.db, core.book)["ended"] < 10  # the oldest ended ones left memory already

    for principal, filters in ((NOC, {}), (NOC, {"state": State.RELEASED}), (NOC, {"owner": "fts"}),
                               (NOC, {"dtn": "dtn3", "state": State.ACTIVE}), (RUCIO, {})):
        for r in [r for r in made.values() if not r.state.is_final][:2]:  # two more end just before
            made[r.id] = core.book.release(NOC, r.name)
        assert held(core.db, core.book)["ended"] >= 2
        expected = sorted((r for r in made.values()
                           if principal.may_see(r.owner) and filters.get("owner", r.owner) == r.owner
                           and filters.get("state", r.state) == r.state
                           and filters.get("dtn", r.request.src) in (r.request.src, r.request.dst)),
                          key=lambda r: (-r.created, r.id))
        assert len(expected) >= 5
        # Between two pages time passes (20 s a page, longer than keep_ended in all): they leave memory.
        got = listed(core.book, principal, between=lambda: core.later(20), page_size=2, **filters)
        assert [r.id for r in got] == [r.id for r in expected], filters
        assert got == expected
        assert held(core.db, core.book)["ended"] == 0, filters

    # What the pages return is what Get returns, from memory or from the store alike.
    assert listed(core.book, NOC, page_size=1000) == sorted(made.values(), key=lambda r: (-r.created, r.id))
    assert all(core.book.get(NOC, r.name) == r for r in made.values())


def test_a_page_token_is_checked_whatever_memory_holds(cores):
    core = cores(keep_ended=0)
    for i in range(3):
        core.book.release(RUCIO, core.create(i=i).name)
        core.clock.advance(1)
    _, token = core.book.list(RUCIO, page_size=1)
    core.later(1)
    assert held(core.db, core.book)["ended"] == 0
    assert len(core.book.list(RUCIO, page_size=1, page_token=token)[0]) == 1
    with pytest.raises(InvalidArgument, match="page_token: it belongs to a listing with other filters"):
        core.book.list(RUCIO, page_token=token, state=State.RELEASED)
    forged = base64.urlsafe_b64encode(json.dumps({"q": "0" * 16, "c": "x", "i": 1}).encode()).decode()
    for bad in (forged, "%%%", token[:-4]):
        with pytest.raises(InvalidArgument, match="page_token"):
            core.book.list(RUCIO, page_token=bad)


# -- restarts ------------------------------------------------------------------------------------


def test_a_restart_loads_only_live_and_recently_ended_reservations(cores):
    core = cores()
    live = core.create(i=0, request_id="live-1")
    core.clock.advance(1)
    scheduled = core.create(i=1, start=core.clock.now() + 2 * HOUR, end=core.clock.now() + 3 * HOUR)
    core.clock.advance(1)
    old = core.book.release(RUCIO, core.create(i=2, request_id="old-1").name)
    core.clock.advance(KEEP)
    recent = core.book.release(RUCIO, core.create(i=3, request_id="recent-1").name)
    core.clock.advance(1)

    again = core.restart()
    assert held(again.db, again.book) == {"live": 2, "ended": 1}  # `old` ended KEEP + 1 s ago
    assert again.book.get(RUCIO, old.name) == old
    assert again.book.get(RUCIO, recent.name) == recent
    assert [r.id for r in again.book.snapshot(NOC)] == [live.id, scheduled.id]  # watchers: live ones
    assert [r.id for r in listed(again.book, NOC, page_size=2)] == [recent.id, old.id, scheduled.id, live.id]

    # Retries of a request_id find the reservation, in memory or only in the store; nothing is booked again.
    retry = PathRequest(old.request.src, old.request.dst, old.request.bandwidth, again.clock.now(), math.inf)
    assert again.book.create(RUCIO, retry, request_id="old-1") == old
    with pytest.raises(AlreadyExists, match="old-1"):
        again.book.create(RUCIO, PathRequest("dtn5", "dtn6", 1 * G, again.clock.now(), math.inf),
                          request_id="old-1")
    assert again.book.create(RUCIO, replace_now(live.request, again), request_id="live-1") == live
    assert again.book.create(FTS, retry, request_id="old-1").id not in (old.id, live.id)  # another owner's key
    assert len(again.ledger.bookings()) == 3

    # A longer keep_ended after a restart brings the ones ended within it back into memory.
    longer = again.restart(keep_ended=math.inf)
    assert held(longer.db, longer.book) == {"live": 3, "ended": 2}


def replace_now(request: PathRequest, core: Core) -> PathRequest:
    return PathRequest(request.src, request.dst, request.bandwidth, core.clock.now(), request.end)


def test_a_state_file_from_before_the_query_columns_is_upgraded(cores, tmp_path):
    core = cores(keep_ended=math.inf)
    ended = core.book.release(RUCIO, core.create(i=0).name)
    core.clock.advance(1)
    live = core.create(i=1)
    core.ledger.close()
    with sqlite3.connect(core.db) as db:  # the table as it was: no created, src, dst, ended
        rows = db.execute("SELECT id, owner, request_id, state, body FROM reservations").fetchall()
        for index in [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index' "
                                               "AND name LIKE 'reservations_by_%'")]:
            db.execute(f"DROP INDEX {index}")
        db.execute("DROP TABLE reservations")
        db.execute("CREATE TABLE reservations (id TEXT PRIMARY KEY, owner TEXT NOT NULL, request_id TEXT NOT NULL, "
                   "state TEXT NOT NULL, body TEXT NOT NULL)")
        db.executemany("INSERT INTO reservations VALUES (?, ?, ?, ?, ?)", rows)
    core.clock.advance(2 * KEEP)
    upgraded = Core(core.db, core.clock)
    try:
        assert held(upgraded.db, upgraded.book) == {"live": 1, "ended": 0}
        assert upgraded.book.list(NOC)[0] == [live, ended]
        assert upgraded.book.list(NOC, state=State.RELEASED, dtn=ended.request.src)[0] == [ended]
        assert upgraded.book.get(NOC, ended.name) == ended
    finally:
        upgraded.ledger.close()


# -- the transfer desk ---------------------------------------------------------------------------


def test_the_transfer_desk_reads_an_evicted_reservation_from_the_store(tmp_path):
    clock = FakeClock()
    ledger = Ledger(RING8.capacities(), tmp_path / "t.db", clock)
    book = ReservationBook(RING8, ledger, clock, keep_ended=60)
    agents = AgentRegistry(RING8, clock, heartbeat_timeout=HOUR, emulation_scale=1.0)
    facts = AgentFacts(nics=(NicFacts("ens1f0", speed_bps=100 * G, capacity_bps=100 * G, limit="NIC 100G"),))
    for dtn in ("dtn1", "dtn3"):
        agents.register(Principal("dtn-agent", Role.AGENT), dtn, facts)
    desk = TransferDesk(book, agents, clock)
    try:
        transfer = desk.start(RUCIO, TransferSpec("dtn1", "dtn3", 10 * G, size=50 * G))
        cancelled = desk.cancel(RUCIO, transfer.name)
        assert cancelled.state is TransferState.CANCELLED
        clock.advance(61)
        book.tick()
        assert held(tmp_path / "t.db", book) == {"live": 0, "ended": 0}
        assert desk.path(cancelled) == ()
        assert book.get(NOC, cancelled.reservation).state is State.RELEASED
        assert desk.get(RUCIO, transfer.name) == cancelled
    finally:
        ledger.close()


# -- the option ----------------------------------------------------------------------------------


def test_the_keep_ended_option_reads_durations_zero_and_forever():
    assert parse_keep_ended("5m") == 300 and parse_keep_ended("1h30m") == 5400 and parse_keep_ended("90") == 90
    assert parse_keep_ended("0") == 0 and parse_keep_ended("0s") == 0
    assert parse_keep_ended("forever") == math.inf
    for bad in ("-5m", "soon", "inf", "nan"):
        with pytest.raises(InvalidArgument, match="--keep-ended"):
            parse_keep_ended(bad)


# -- over gRPC ----------------------------------------------------------------------------------


def test_grpc_list_pages_through_live_and_evicted_and_refuses_bad_tokens(start_controller, tokens_file):
    controller = start_controller(tokens=tokens_file, keep_ended=0.0)
    channel = grpc.insecure_channel(controller.address)
    stub = bandwidth_pb2_grpc.BandwidthServiceStub(channel)
    metadata = (("authorization", f"Bearer {TOKENS['rucio'][1]}"),)
    try:
        dtns = ["caltech-a-dtn1", "starlight-dtn1", "dell-dtn1", "ucsd-dtn1"]
        made = []
        for i in range(7):
            request = pb.CreateReservationRequest(source_dtn=dtns[i % 4], destination_dtn=dtns[(i + 1) % 4],
                                                  bandwidth_bps=1 * G, request_id=f"grpc-{i}")
            request.duration.FromSeconds(3600)
            created = stub.CreateReservation(request, metadata=metadata)
            if i % 2 == 0:
                created = stub.DeleteReservation(pb.DeleteReservationRequest(name=created.name), metadata=metadata)
            made.append(created)

        def ended_in_memory() -> int:
            return ended_remembered(controller, [r.name for r in made])
        wait_for(lambda: ended_in_memory() == 0, "the released reservations to leave memory")

        names, token, pages = [], "", 0
        while True:
            page = stub.ListReservations(pb.ListReservationsRequest(page_size=2, page_token=token), metadata=metadata)
            names += [r.name for r in page.reservations]
            pages += 1
            if pages == 2:  # one more ends between two pages, and leaves memory
                stub.DeleteReservation(pb.DeleteReservationRequest(name=made[1].name), metadata=metadata)
                wait_for(lambda: ended_in_memory() == 0, "the last release to leave memory")
            token = page.next_page_token
            if not token:
                break
        assert pages == 4 and sorted(names) == sorted(r.name for r in made) and len(set(names)) == 7

        released = stub.ListReservations(pb.ListReservationsRequest(state=pb.RELEASED, page_size=1000),
                                         metadata=metadata)
        assert {r.name for r in released.reservations} == {made[i].name for i in (0, 1, 2, 4, 6)}
        got = stub.GetReservation(pb.GetReservationRequest(name=made[0].name), metadata=metadata)
        assert got.state == pb.RELEASED and got.name == made[0].name
        again = pb.CreateReservationRequest(source_dtn=dtns[0], destination_dtn=dtns[1], bandwidth_bps=1 * G,
                                            request_id="grpc-0")
        again.duration.FromSeconds(3600)
        assert stub.CreateReservation(again, metadata=metadata).name == made[0].name  # a retry, from the store

        first = stub.ListReservations(pb.ListReservationsRequest(page_size=1), metadata=metadata)
        for bad, why in ((first.next_page_token[:-3] + "x", "not a token this server gave out"),
                         ("garbage!", "not a token this server gave out"),
                         ("A" * 2000, "not a token this server gave out")):
            with pytest.raises(grpc.RpcError) as caught:
                stub.ListReservations(pb.ListReservationsRequest(page_token=bad), metadata=metadata)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details().startswith("page_token:") and why in caught.value.details()
        with pytest.raises(grpc.RpcError) as caught:
            stub.ListReservations(pb.ListReservationsRequest(state=pb.ACTIVE, page_token=first.next_page_token),
                                  metadata=metadata)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token: it belongs to a listing with other filters" in caught.value.details()
    finally:
        channel.close()


# -- tsdn path list --------------------------------------------------------------------------------


def test_path_list_pages_through_everything_with_a_limit(start_controller, tokens_file, tmp_path):
    controller = start_controller(tokens=tokens_file, keep_ended=0.0)
    token_file = tmp_path / "rucio.token"
    token_file.write_text(TOKENS["rucio"][1] + "\n")
    env = {**os.environ, "TSDN_CONTROLLER": controller.address, "TSDN_TOKEN_FILE": str(token_file)}
    with TsdnClient(controller.address, token=TOKENS["rucio"][1], timeout=10) as client:
        made = []
        for i in range(5):
            r = client.create_reservation("caltech-a-dtn1", "starlight-dtn1", 1 * G, duration=HOUR)
            if i < 3:
                r = client.delete_reservation(r.name)
            made.append(r)
    wait_for(lambda: ended_remembered(controller, [r.name for r in made]) == 0,
             "the released reservations to leave memory")

    def tsdn(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tsdn", "path", "list", *args], capture_output=True,
                              text=True, timeout=60, env=env)

    everything = tsdn("--json", "--limit", "0")
    assert everything.returncode == 0, everything.stderr
    assert [r["id"] for r in json.loads(everything.stdout)] == [r.id for r in reversed(made)]
    assert everything.stderr == ""
    newest = tsdn("--json", "--limit", "2")
    assert [r["id"] for r in json.loads(newest.stdout)] == [made[4].id, made[3].id]
    assert "the newest 2 shown, there are more" in newest.stderr
    released = tsdn("--state", "RELEASED")
    assert released.returncode == 0 and released.stdout.count("RELEASED") == 3
    assert all(r.id in released.stdout for r in made[:3])
    bad = tsdn("--limit", "-1")
    assert bad.returncode == 2 and "--limit" in bad.stderr


# -- tsdn bench soak ------------------------------------------------------------------------------


def test_bench_soak_prints_its_result_last(capsys):
    """Tiny counts: the shape of the JSON line (no memory or timing asserts: a benchmark is not pass/fail)."""
    from benchmarks import soak

    assert soak.main(quick=True, count=300, baseline_count=150, clients=4, keep_ended="1s") == 0
    out, err = capsys.readouterr()
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["bench"], result["quick"], result["count"], result["keep_ended"]) == ("soak", True, 300, "1s")
    assert result["pairs_done"] == 300 and result["errors"] == 0, err
    assert result["store_rows"] == 300 and result["first_reservations_read_back"] == "5/5"
    for key in ("rss_mb_start", "rss_mb_middle", "rss_mb_end", "pairs_per_s", "calls_per_s", "store_bytes_per_row",
                "core_bytes_per_ended_reservation_kept"):
        assert isinstance(result[key], int | float) and result[key] > 0, key
    baseline = result["baseline"]
    assert (baseline["keep_ended"], baseline["count"], baseline["pairs_done"]) == ("forever", 150, 150)
    assert "rss_mb_at_300_extrapolated" in baseline
    assert soak.main(count=0) == 2 and soak.main(clients=0) == 2
