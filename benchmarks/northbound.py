"""`tsdn bench northbound`: reservations admitted per second over gRPC by concurrent clients.

A real `tsdn controller` runs as a subprocess on sc16 (admission only: no switches), with a
tokens file, so every call is authenticated as a service. N client threads (default 16),
each with its own `TsdnClient`, loop CreateReservation (a random DTN pair, 1G, for an hour)
then DeleteReservation; after a warm-up, the measured phase gives admissions per second,
p50/p99 latency of CreateReservation, and the same for every RPC. A second phase sends
QueryAvailability from the same clients.

Campaigns (`CreateReservations`, many reservations in one call) against single calls, in rounds:
in each round every client admits `BATCH_SIZE` reservations (a random DTN pair each, 100M for an
hour) at once with the others, through one CreateReservations (`batch_admissions_per_s`) or
through `BATCH_SIZE` CreateReservation calls in a row (`single_admissions_per_s`, the same load
as single calls); a round's admissions over the time from its start to its last answer, summed
over the rounds (the deletes between rounds are not timed). `batch_1000_ms`: one
CreateReservations of 1,000 requests from one client (admission only: no switches here).

A last pair of phases asks whether open streams starve unary calls: 4 clients each run a round
of CreateReservation, DeleteReservation, Heartbeat and the health Check every 0.1 s (160 calls/s
offered, a busy show), first with no stream open (the baseline), then with 1,000 real server
streams held open by a client process of their own (`benchmarks.stream_holder`, on asyncio):
WatchReservations (10 by the principal that creates, so every create and delete reaches them),
WatchAgents, WatchTransfer (of two transfers whose sender reports a rate every second) and
TakeJobs, spread over principals within the controller's default stream limits.
`unary_p99_ms_with_1000_streams` is the p99 of the creates, heartbeats and health checks then.

Baselines measured in the same run:
- core: the same create + release called directly on a `ReservationBook` in this process
  (SQLite file as the controller uses; no gRPC, no serialization, one thread), so the cost of
  the northbound layer is visible;
- health: the same clients calling the gRPC health service's Check, which never reaches the
  core: the ceiling of this transport with these clients on this machine.

Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.controller_process import ControllerProcess
from benchmarks.report import print_result, say
from northbound.client import ApiError, TsdnClient, reservation_request
from northbound.proto.tsdn.v1 import agent_pb2
from sdn_app.core.clock import SystemClock
from sdn_app.core.errors import TsdnError
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

G = 10**9
HOUR = 3600.0
BANDWIDTH = 1 * G
PRINCIPAL = "bench"
TOKEN = "bench-token-" + "0123456789abcdef" * 2
TARGETS = {"admissions_per_s": 1000, "p99_ms": 20, "unary_p99_ms_with_1000_streams": 50}
BATCH_SIZE = 100  # reservations each client admits per round of the batch phases
CAMPAIGN = 1000  # requests of the one big CreateReservations timed
BATCH_BANDWIDTH = 100 * 10**6  # small: rounds of thousands of reservations fit sc16 without refusals
STREAMS = 1000  # streams held open in the streams phase
STREAM_CLIENTS = 4  # unary clients of the streams phases, each paced at one round every ROUND_S
ROUND_S = 0.1  # create, delete, heartbeat, health Check: 4 clients offer 160 calls/s (40 creates/s)
UNARY_KINDS = ("create", "heartbeat", "check")  # the calls whose latency the streams phase reports
# The other principals of the streams phase (none holds more than the default --max-streams-per-principal).
AGENTS = tuple(f"bench-agent-{i}" for i in range(6))
WATCHERS = tuple(f"bench-watcher-{i}" for i in range(5))
NOC = "bench-noc"


def token_of(principal: str) -> str:
    """The bench's token of `principal` (at least 16 characters)."""
    return f"{principal}-token-0123456789abcdef"


MORE_TOKENS = (*({"principal": a, "role": "agent", "token": token_of(a)} for a in AGENTS),
               *({"principal": w, "role": "service", "token": token_of(w)} for w in WATCHERS),
               {"principal": NOC, "role": "admin", "token": token_of(NOC)})


@dataclass(frozen=True)
class Phases:
    """How long each phase runs, in seconds."""

    core: float
    health: float
    warmup: float
    admissions: float
    availability: float
    streams: float = 0.0  # each of the two streams phases
    batch: float = 0.0  # each of the two batch phases (at least one round each)

    @classmethod
    def for_run(cls, quick: bool, seconds: float | None) -> Phases:
        """Quick: about 20 s in all; full: `seconds` (default 20) per measured phase."""
        if seconds is None:
            seconds = 4.0 if quick else 20.0
        warmup = min(1.0 if quick else 3.0, seconds)
        return cls(core=min(seconds, 2.0 if quick else 10.0), health=min(seconds, 3.0 if quick else 10.0),
                   warmup=warmup, admissions=seconds, availability=seconds,
                   streams=min(seconds, 3.0 if quick else 10.0), batch=min(seconds, 1.0 if quick else 10.0))


@dataclass
class Record:
    """One call: when it finished (perf_counter), how long it took, and how it ended."""

    kind: str
    done: float
    latency: float
    outcome: str  # "ok", "refused" (RESOURCE_EXHAUSTED) or "error"


@dataclass
class Tally:
    """The records of one phase's measured window (`window` seconds from `start`, perf_counter)."""

    window: float
    records: list[Record]
    start: float = 0.0

    def of(self, kind: str | None = None, outcome: str | None = None) -> list[Record]:
        return [r for r in self.records
                if (kind is None or r.kind == kind) and (outcome is None or r.outcome == outcome)]

    def rate(self, kind: str | None = None, outcome: str | None = None) -> float:
        return round(len(self.of(kind, outcome)) / self.window, 1) if self.window > 0 else 0.0

    def rates_by_part(self, parts: int, kind: str, outcome: str = "ok") -> list[float]:
        """The rate in each of `parts` equal slices of the window: does it hold up as state grows?"""
        counts = [0] * parts
        for record in self.of(kind, outcome):
            counts[min(parts - 1, int((record.done - self.start) / self.window * parts))] += 1
        return [round(count * parts / self.window, 1) for count in counts]


def percentile_ms(latencies: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of latencies (seconds) in milliseconds; None when there are none."""
    if not latencies:
        return None
    ordered = sorted(latencies)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))] * 1000, 3)


def latency_summary(latencies: list[float]) -> dict:
    """p50/p99/max in milliseconds."""
    return {"p50_ms": percentile_ms(latencies, 0.5), "p99_ms": percentile_ms(latencies, 0.99),
            "max_ms": percentile_ms(latencies, 1.0)}


def sc16_dtns() -> list[str]:
    """The DTN names of sc16, sorted."""
    return sorted(Topology.load(builtin_topology("sc16")).dtns)


# -- the controller under test ------------------------------------------------------------


# -- driving clients ----------------------------------------------------------------------


Operation = Callable[[random.Random], list[tuple[str, float, float, str]]]


def drive(make_operation: Callable[[int], tuple[Operation, Callable[[], None]]], clients: int,
          warmup: float, seconds: float, seed: int) -> Tally:
    """Run `clients` threads calling their operation in a loop for warmup + seconds.

    `make_operation(i)` returns (operation, close) for thread i; the operation returns
    (kind, finished_at, latency, outcome) per call it made. Only calls finishing inside the
    measured window [start + warmup, start + warmup + seconds) are kept.
    """
    prepared = [make_operation(i) for i in range(clients)]
    ready = threading.Barrier(clients + 1)
    stop = threading.Event()
    per_thread: list[list[Record]] = [[] for _ in range(clients)]

    def loop(i: int) -> None:
        operation, _ = prepared[i]
        rng = random.Random(seed * 1000 + i)
        out = per_thread[i]
        ready.wait()
        while not stop.is_set():
            out.extend(Record(*call) for call in operation(rng))

    threads = [threading.Thread(target=loop, args=(i,), name=f"client-{i}", daemon=True) for i in range(clients)]
    try:
        for thread in threads:
            thread.start()
        ready.wait()
        began = time.perf_counter()
        time.sleep(warmup + seconds)
        stop.set()
        for thread in threads:
            thread.join(30)
    finally:
        stop.set()
        for _, close in prepared:
            close()
    window_start, window_end = began + warmup, began + warmup + seconds
    kept = [r for records in per_thread for r in records if window_start <= r.done < window_end]
    return Tally(seconds, kept, window_start)


def timed(kind: str, call: Callable[[], object], failures: list[str]) -> tuple[tuple[str, float, float, str], object]:
    """Call once; the record and the result (None when it failed)."""
    began = time.perf_counter()
    try:
        result = call()
        outcome = "ok"
    except ApiError as error:
        result = None
        outcome = "refused" if error.code is grpc.StatusCode.RESOURCE_EXHAUSTED else "error"
        if outcome == "error" and len(failures) < 5:
            failures.append(f"{kind}: {error}")
    except Exception as error:  # anything else is an error of this call, not the end of the run
        result, outcome = None, "error"
        if len(failures) < 5:
            failures.append(f"{kind}: {type(error).__name__}: {error}")
    done = time.perf_counter()
    return (kind, done, done - began, outcome), result


def health_phase(address: str, clients: int, seconds: float, seed: int, failures: list[str]) -> Tally:
    """gRPC health Check from each client: the transport's ceiling (never reaches the core)."""
    def make(_: int) -> tuple[Operation, Callable[[], None]]:
        channel = grpc.insecure_channel(address)
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")

        def check(_: random.Random) -> list[tuple[str, float, float, str]]:
            record, _ = timed("check", lambda: _health_call(stub, request), failures)
            return [record]
        return check, channel.close
    return drive(make, clients, min(1.0, seconds), seconds, seed)


def _health_call(stub: health_pb2_grpc.HealthStub, request: health_pb2.HealthCheckRequest) -> object:
    try:
        return stub.Check(request, timeout=10)
    except grpc.RpcError as error:
        raise ApiError(error.code(), error.details() or error.code().name) from None


def admission_phase(address: str, clients: int, dtns: list[str], warmup: float, seconds: float, seed: int,
                    failures: list[str]) -> Tally:
    """Each client: CreateReservation (random DTN pair, 1G, one hour), then DeleteReservation."""
    def make(_: int) -> tuple[Operation, Callable[[], None]]:
        client = TsdnClient(address, token=TOKEN, timeout=10)

        def admit(rng: random.Random) -> list[tuple[str, float, float, str]]:
            src, dst = rng.sample(dtns, 2)
            created, reservation = timed(
                "create", lambda: client.create_reservation(src, dst, BANDWIDTH, duration=HOUR), failures)
            if reservation is None:
                return [created]
            deleted, _ = timed("delete", lambda: client.delete_reservation(reservation.name), failures)
            return [created, deleted]
        return admit, client.close
    return drive(make, clients, warmup, seconds, seed)


def availability_phase(address: str, clients: int, dtns: list[str], warmup: float, seconds: float, seed: int,
                       failures: list[str]) -> Tally:
    """Each client: QueryAvailability between a random DTN pair for the next hour."""
    def make(_: int) -> tuple[Operation, Callable[[], None]]:
        client = TsdnClient(address, token=TOKEN, timeout=10)

        def query(rng: random.Random) -> list[tuple[str, float, float, str]]:
            src, dst = rng.sample(dtns, 2)
            record, _ = timed("query", lambda: client.query_availability(src, dst, duration=HOUR), failures)
            return [record]
        return query, client.close
    return drive(make, clients, warmup, seconds, seed + 1)


@dataclass
class Rounds:
    """The timed part of the rounds of a batch phase: admissions, refusals, and the seconds from
    each round's start to its last answer, summed."""

    admitted: int = 0
    refused: int = 0
    errors: int = 0  # calls that failed otherwise (deletes included)
    seconds: float = 0.0
    rounds: int = 0

    @property
    def rate(self) -> float | None:
        """Admissions per second over the timed parts."""
        return round(self.admitted / self.seconds, 1) if self.seconds > 0 else None


def batch_requests(rng: random.Random, dtns: list[str], count: int) -> list:
    """`count` requests between random DTN pairs, BATCH_BANDWIDTH for an hour."""
    return [reservation_request(*rng.sample(dtns, 2), BATCH_BANDWIDTH, duration=HOUR) for _ in range(count)]


def batch_phase(address: str, clients: int, dtns: list[str], seconds: float, seed: int, failures: list[str],
                batch: bool) -> Rounds:
    """Rounds until `seconds` passed (one at least): every client admits BATCH_SIZE reservations at
    once with the others, in one CreateReservations (`batch`) or in CreateReservation calls, then
    deletes them (untimed)."""
    sessions = [TsdnClient(address, token=TOKEN, timeout=60) for _ in range(clients)]
    rngs = [random.Random(seed * 1000 + i + (500 if batch else 0)) for i in range(clients)]
    tally = Rounds()

    def admit(i: int) -> tuple[list[str], collections.Counter[str]]:
        """(names admitted, outcomes counted: refused, error) of client i's part of a round."""
        counted: collections.Counter[str] = collections.Counter()
        if batch:
            requests = batch_requests(rngs[i], dtns, BATCH_SIZE)
            (_, _, _, outcome), response = timed("batch", lambda: sessions[i].create_reservations(requests), failures)
            if response is None:
                counted[outcome] += 1
                return [], counted
            counted["refused"] += response.refused
            return [r.reservation.name for r in response.results if r.HasField("reservation")], counted
        names = []
        for _ in range(BATCH_SIZE):
            src, dst = rngs[i].sample(dtns, 2)
            (_, _, _, outcome), reservation = timed("create", lambda s=src, d=dst: sessions[i].create_reservation(
                s, d, BATCH_BANDWIDTH, duration=HOUR), failures)
            if reservation is None:
                counted[outcome] += 1
            else:
                names.append(reservation.name)
        return names, counted

    def delete(i: int, names: list[str]) -> int:
        """Client i deletes `names`; how many deletes failed."""
        return sum(timed("delete", lambda n=name: sessions[i].delete_reservation(n), failures)[0][3] == "error"
                   for name in names)

    try:
        with ThreadPoolExecutor(clients) as pool:
            ends = time.perf_counter() + seconds
            while tally.rounds == 0 or time.perf_counter() < ends:
                began = time.perf_counter()
                outcomes = list(pool.map(admit, range(clients)))
                tally.seconds += time.perf_counter() - began
                tally.rounds += 1
                tally.admitted += sum(len(names) for names, _ in outcomes)
                tally.refused += sum(counted["refused"] for _, counted in outcomes)
                tally.errors += sum(counted["error"] for _, counted in outcomes)
                tally.errors += sum(pool.map(delete, range(clients), [names for names, _ in outcomes]))
    finally:
        for session in sessions:
            session.close()
    return tally


def campaign_phase(address: str, dtns: list[str], seed: int, failures: list[str], clients: int) -> tuple[dict, int]:
    """One CreateReservations of CAMPAIGN requests from one client: its latency and outcome (the
    reservations are deleted after, by `clients` threads), and how many calls failed."""
    session = TsdnClient(address, token=TOKEN, timeout=120)
    try:
        requests = batch_requests(random.Random(seed + 3), dtns, CAMPAIGN)
        (_, _, latency, outcome), response = timed("campaign", lambda: session.create_reservations(requests),
                                                   failures)
    finally:
        session.close()
    names = [r.reservation.name for r in response.results if r.HasField("reservation")] if response else []
    deleters = [TsdnClient(address, token=TOKEN, timeout=10) for _ in range(clients)]
    try:
        with ThreadPoolExecutor(clients) as pool:
            deletes = [record for records in pool.map(
                lambda i: [timed("delete", lambda n=name: deleters[i].delete_reservation(n), failures)[0]
                           for name in names[i::clients]], range(clients)) for record in records]
    finally:
        for deleter in deleters:
            deleter.close()
    errors = (outcome == "error") + sum(record[3] == "error" for record in deletes)
    return {"batch_1000_ms": round(latency * 1000, 1) if response is not None else None,
            "batch_1000_admitted": response.admitted if response is not None else 0,
            "batch_1000_refused": response.refused if response is not None else None}, errors


def core_phase(workdir: Path, dtns: list[str], seconds: float, seed: int) -> dict:
    """The same create + release on a `ReservationBook` in this process: no gRPC, one thread."""
    topology = Topology.load(builtin_topology("sc16"))
    clock = SystemClock()
    ledger = Ledger(topology.capacities(), workdir / "core.db", clock)
    book = ReservationBook(topology, ledger, clock)
    principal = Principal(PRINCIPAL, Role.SERVICE)
    rng = random.Random(seed)
    latencies: list[float] = []
    admitted = refused = 0
    try:
        deadline = time.perf_counter() + seconds
        began = time.perf_counter()
        while time.perf_counter() < deadline:
            src, dst = rng.sample(dtns, 2)
            start = time.perf_counter()
            now = clock.now()
            try:
                reservation = book.create(principal, PathRequest(src, dst, BANDWIDTH, now, now + HOUR),
                                          request_id=os.urandom(16).hex())
                book.release(principal, reservation.name)
                admitted += 1
            except TsdnError:
                refused += 1
            book.take_events()  # as the worker does after every call
            latencies.append(time.perf_counter() - start)
        elapsed = time.perf_counter() - began
    finally:
        ledger.close()
    return {"core_admissions_per_s": round(admitted / elapsed, 1) if elapsed else None,
            "core_p50_ms": percentile_ms(latencies, 0.5), "core_p99_ms": percentile_ms(latencies, 0.99),
            "core_refused": refused}


# -- streams: do open streams starve unary calls? ---------------------------------------------


def stream_plan(count: int, dtns: list[str], transfers: list[str]) -> list[dict]:
    """`count` streams for `benchmarks.stream_holder`: 1% WatchReservations by the creating
    principal (each gets every event of the unary load), 29% by other services, 20% WatchAgents,
    20% WatchTransfer (by an admin, of `transfers`), the rest TakeJobs (agents, every DTN in turn)."""
    wanted: collections.Counter[tuple[str, str, str]] = collections.Counter()
    mine, others, agents = count // 100, count * 29 // 100, count // 5
    watching = count // 5 if transfers else 0
    wanted["watch", PRINCIPAL, "{}"] += mine
    for i in range(others):
        wanted["watch", WATCHERS[i % len(WATCHERS)], "{}"] += 1
    for i in range(agents):
        wanted["agents", WATCHERS[i % len(WATCHERS)], "{}"] += 1
    for i in range(watching):
        wanted["transfer", NOC, json.dumps({"name": transfers[i % len(transfers)]})] += 1
    for i in range(count - mine - others - agents - watching):
        wanted["jobs", AGENTS[i % len(AGENTS)], json.dumps({"dtn": dtns[i % len(dtns)]})] += 1
    return [{"kind": kind, "token": TOKEN if principal == PRINCIPAL else token_of(principal), "count": n,
             "fields": json.loads(fields)} for (kind, principal, fields), n in wanted.items() if n]


class Show:
    """What the streams phases run against, as at a show: an agent registered (and heartbeating)
    on every DTN, and two transfers whose sender reports a rate every second."""

    def __init__(self, address: str, dtns: list[str], failures: list[str]):
        self.address, self.dtns, self.failures = address, dtns, failures
        self.agent = TsdnClient(address, token=token_of(AGENTS[0]), timeout=10)
        self.service = TsdnClient(address, token=TOKEN, timeout=10)
        self.transfers: list[tuple[str, str]] = []  # (name, sending DTN)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="show-background", daemon=True)

    def start(self) -> list[str]:
        """Register the agents, start the transfers; the names of the transfers."""
        for dtn in self.dtns:
            self.agent.register_agent(dtn, agent_pb2.HostFacts())
        for src, dst in (self.dtns[0:2], self.dtns[2:4]):
            transfer = self.service.start_transfer(src, dst, BANDWIDTH, size=10**15)
            self.agent.report_transfer(agent_pb2.TransferReport(transfer=transfer.name, dtn=dst,
                                                                role=agent_pb2.RECEIVE, listening_port=5201))
            self.transfers.append((transfer.name, src))
        self._thread.start()
        return [name for name, _ in self.transfers]

    def _run(self) -> None:
        second = 0
        while not self._stop.wait(1.0):
            second += 1
            try:
                for name, src in self.transfers:
                    rate = agent_pb2.RateReport(start=second - 1.0, end=float(second), bits_per_second=float(BANDWIDTH),
                                                bytes_total=BANDWIDTH // 8 * second, engine="builtin")
                    self.agent.report_transfer(agent_pb2.TransferReport(transfer=name, dtn=src,
                                                                        role=agent_pb2.SEND, rate=rate))
                if second % 5 == 0:
                    for dtn in self.dtns:
                        self.agent.heartbeat(dtn)
            except ApiError as error:
                if len(self.failures) < 5:
                    self.failures.append(f"show background: {error}")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(10)
        self.agent.close()
        self.service.close()


def unary_phase(address: str, clients: int, dtns: list[str], warmup: float, seconds: float, seed: int,
                failures: list[str], every: float = ROUND_S) -> Tally:
    """Each client, one round `every` seconds (at once when late): CreateReservation,
    DeleteReservation, Heartbeat (the agent of a random DTN) and the health Check. The same
    offered load with and without streams: their latencies compare."""
    def make(_: int) -> tuple[Operation, Callable[[], None]]:
        next_round = [0.0]
        service = TsdnClient(address, token=TOKEN, timeout=10, retries=0)
        agent = TsdnClient(address, token=token_of(AGENTS[-1]), timeout=10, retries=0)
        channel = grpc.insecure_channel(address)
        health = health_pb2_grpc.HealthStub(channel)
        check = health_pb2.HealthCheckRequest(service="")

        def calls(rng: random.Random) -> list[tuple[str, float, float, str]]:
            now = time.perf_counter()
            if next_round[0] > now:
                time.sleep(next_round[0] - now)  # pacing the load generator
            next_round[0] = max(next_round[0] + every, now)
            src, dst = rng.sample(dtns, 2)
            created, reservation = timed(
                "create", lambda: service.create_reservation(src, dst, BANDWIDTH, duration=HOUR), failures)
            records = [created]
            if reservation is not None:
                records.append(timed("delete", lambda: service.delete_reservation(reservation.name), failures)[0])
            records.append(timed("heartbeat", lambda: agent.heartbeat(rng.choice(dtns)), failures)[0])
            records.append(timed("check", lambda: _health_call(health, check), failures)[0])
            return records

        def close() -> None:
            service.close()
            agent.close()
            channel.close()
        return calls, close
    return drive(make, clients, warmup, seconds, seed + 2)


class StreamHolder:
    """`benchmarks.stream_holder` in a subprocess, holding `plan` open on `address`."""

    def __init__(self, address: str, plan: list[dict]):
        self.process = subprocess.Popen([sys.executable, "-m", "benchmarks.stream_holder", address],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"channels": 8, "deadline": 120, "streams": plan}) + "\n")
        self.process.stdin.flush()

    def _line(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the stream holder exited ({self.process.wait()}) without a report")
        return json.loads(line)

    def opened(self) -> dict:
        """Wait until every stream is open or refused: {"open", "refused", "seconds"}."""
        return self._line()

    def close(self) -> dict:
        """Cancel every stream: {"messages", "ended_early"} (empty when the holder had died)."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.close()
            return self._line()
        except (OSError, RuntimeError, ValueError):
            return {}
        finally:
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def unary_summary(tally: Tally) -> dict:
    """p50/p99 of the creates, heartbeats and health checks together, per kind, and calls per second."""
    together = [r.latency for r in tally.records if r.kind in UNARY_KINDS and r.outcome == "ok"]
    return {"p50_ms": percentile_ms(together, 0.5), "p99_ms": percentile_ms(together, 0.99),
            "calls_per_s": round(len(tally.of(outcome="ok")) / tally.window, 1) if tally.window else None,
            "errors": len(tally.of(outcome="error")),
            "by_kind": {kind: latency_summary([r.latency for r in tally.of(kind, "ok")])
                        for kind in (*UNARY_KINDS, "delete")}}


def streams_phases(address: str, count: int, dtns: list[str], warmup: float, seconds: float, seed: int,
                   failures: list[str], pid: int | None, cpu: dict) -> dict:
    """The unary calls with no stream open, then with `count` streams open: their latencies and what
    the stream holder saw."""
    show = Show(address, dtns, failures)
    try:
        transfers = show.start()
        with cpu_use(pid, cpu, "unary_baseline"):
            baseline = unary_phase(address, STREAM_CLIENTS, dtns, warmup, seconds, seed, failures)
        holder = StreamHolder(address, stream_plan(count, dtns, transfers))
        try:
            opened = holder.opened()
            with cpu_use(pid, cpu, "unary_with_streams"):
                loaded = unary_phase(address, STREAM_CLIENTS, dtns, warmup, seconds, seed, failures)
        finally:
            held = holder.close()
    finally:
        show.stop()
    return {"baseline": unary_summary(baseline), "with_streams": unary_summary(loaded),
            "streams": {"requested": count, "open": opened.get("open"), "refused": opened.get("refused", {}),
                        "open_s": opened.get("seconds"), "messages": held.get("messages"),
                        "ended_early": held.get("ended_early"), "clients": STREAM_CLIENTS, "seconds": seconds}}


# -- the benchmark ------------------------------------------------------------------------


def process_cpu(pid: int | None = None) -> float | None:
    """CPU seconds (user + system) used so far by this process or by `pid` (Linux /proc; else None)."""
    if pid is None:
        return sum(os.times()[:2])
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def cpu_use(pid: int | None, into: dict, key: str):
    """Record into[key] = {"client": cores, "controller": cores} busy on average while the block runs."""
    began, client, controller = time.perf_counter(), process_cpu(), process_cpu(pid)
    yield
    wall = time.perf_counter() - began
    client_after, controller_after = process_cpu(), process_cpu(pid)
    into[key] = {
        "client": round((client_after - client) / wall, 2) if client is not None and client_after is not None
        else None,
        "controller": round((controller_after - controller) / wall, 2)
        if controller is not None and controller_after is not None else None,
    }


def machine() -> dict:
    """Facts about where this ran."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"cpu_count": os.cpu_count(), "load_average_1m": round(load[0], 2) if load else None,
            "python": platform.python_version(), "grpcio": grpc.__version__,
            "platform": platform.platform(terse=True)}


def run(quick: bool = False, clients: int = 16, seconds: float | None = None, seed: int = 16,
        streams: int = STREAMS) -> dict:
    """Run every phase and return the result object; `streams` are held open in the streams phase."""
    phases = Phases.for_run(quick, seconds)
    dtns = sc16_dtns()
    failures: list[str] = []
    cpu: dict[str, dict] = {}
    facts = machine()  # the load average before this benchmark adds to it
    say(f"northbound: {clients} clients, sc16 ({len(dtns)} DTNs), {BANDWIDTH // G}G for 1 h per reservation; "
        f"phases {phases.admissions:g} s after {phases.warmup:g} s warm-up")
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-nb-") as tmp:
        workdir = Path(tmp)
        core = core_phase(workdir, dtns, phases.core, seed)
        say(f"core (in-process ReservationBook, 1 thread): {core['core_admissions_per_s']} admissions/s "
            f"(create+release p50 {core['core_p50_ms']} ms, p99 {core['core_p99_ms']} ms)")
        controller = ControllerProcess(workdir, principal=PRINCIPAL, token=TOKEN, more_tokens=MORE_TOKENS)
        try:
            address = controller.start()
            say(f"controller subprocess listening on {address}")
            pid = controller.process.pid if controller.process else None
            with cpu_use(pid, cpu, "health"):
                health = health_phase(address, clients, phases.health, seed, failures)
            health_latency = latency_summary([r.latency for r in health.of("check", "ok")])
            say(f"health Check: {health.rate('check', 'ok')} RPC/s (p50 {health_latency['p50_ms']} ms, "
                f"p99 {health_latency['p99_ms']} ms)")
            with cpu_use(pid, cpu, "admissions"):
                admissions = admission_phase(address, clients, dtns, phases.warmup, phases.admissions, seed,
                                             failures)
            with cpu_use(pid, cpu, "availability"):
                availability = availability_phase(address, clients, dtns, min(1.0, phases.warmup),
                                                  phases.availability, seed, failures)
            batched = batch_phase(address, clients, dtns, phases.batch, seed, failures, batch=True)
            singles = batch_phase(address, clients, dtns, phases.batch, seed, failures, batch=False)
            campaign, campaign_errors = campaign_phase(address, dtns, seed, failures, clients)
            say(f"campaigns: {batched.rate} admissions/s through CreateReservations of {BATCH_SIZE} "
                f"({batched.rounds} round(s) of {clients} clients at once), {singles.rate}/s through "
                f"CreateReservation ({singles.rounds} round(s)); one CreateReservations of {CAMPAIGN}: "
                f"{campaign['batch_1000_ms']} ms, {campaign['batch_1000_admitted']} admitted")
            say(f"unary calls from {STREAM_CLIENTS} clients, then again with {streams} streams open ...")
            starved = streams_phases(address, streams, dtns, min(1.0, phases.warmup), phases.streams, seed,
                                     failures, pid, cpu)
        finally:
            controller.stop()
    creates = [r.latency for r in admissions.of("create", "ok")]
    everything = [r.latency for r in admissions.records if r.outcome != "error"]
    create_latency = latency_summary(creates)
    rpc_latency = latency_summary(everything)
    delete_latency = latency_summary([r.latency for r in admissions.of("delete", "ok")])
    query_latency = latency_summary([r.latency for r in availability.of("query", "ok")])
    errors = sum(len(t.of(outcome="error")) for t in (health, admissions, availability))
    errors += starved["baseline"]["errors"] + starved["with_streams"]["errors"] + batched.errors + singles.errors
    errors += campaign_errors
    with_streams, baseline = starved["with_streams"], starved["baseline"]
    all_open = starved["streams"]["open"] == streams
    result = {
        "bench": "northbound",
        "quick": quick,
        "clients": clients,
        "topology": "sc16",
        "seconds": phases.admissions,
        "warmup_s": phases.warmup,
        "admissions_per_s": admissions.rate("create", "ok"),
        "admissions_per_s_by_quarter": admissions.rates_by_part(4, "create"),
        "p50_ms": create_latency["p50_ms"],
        "p99_ms": create_latency["p99_ms"],
        "max_ms": create_latency["max_ms"],
        "rpcs_per_s": round(len([r for r in admissions.records if r.outcome != "error"]) / admissions.window, 1),
        "rpc_p50_ms": rpc_latency["p50_ms"],
        "rpc_p99_ms": rpc_latency["p99_ms"],
        "delete_p50_ms": delete_latency["p50_ms"],
        "delete_p99_ms": delete_latency["p99_ms"],
        "refused": len(admissions.of("create", "refused")),
        "errors": errors,
        "availability_queries_per_s": availability.rate("query", "ok"),
        "availability_p50_ms": query_latency["p50_ms"],
        "availability_p99_ms": query_latency["p99_ms"],
        "health_rpcs_per_s": health.rate("check", "ok"),
        "health_p50_ms": health_latency["p50_ms"],
        "health_p99_ms": health_latency["p99_ms"],
        # Campaigns: rounds of BATCH_SIZE reservations per client at once, in one CreateReservations
        # or in single calls (see the module's docstring); the single-call loop above is admissions_per_s.
        "batch_size": BATCH_SIZE,
        "batch_admissions_per_s": batched.rate,
        "single_admissions_per_s": singles.rate,
        "batch_rounds": batched.rounds,
        "single_rounds": singles.rounds,
        "batch_refused": batched.refused + singles.refused,
        **campaign,
        **core,
        # Unary calls (create, heartbeat, health Check) from STREAM_CLIENTS clients with no stream open,
        # then with `streams` open (the 1000 key: None unless 1000 were asked for and all opened).
        "unary_p50_ms_baseline": baseline["p50_ms"],
        "unary_p99_ms_baseline": baseline["p99_ms"],
        "unary_p50_ms_with_streams": with_streams["p50_ms"],
        "unary_p99_ms_with_streams": with_streams["p99_ms"],
        "unary_p50_ms_with_1000_streams": with_streams["p50_ms"] if streams == 1000 and all_open else None,
        "unary_p99_ms_with_1000_streams": with_streams["p99_ms"] if streams == 1000 and all_open else None,
        "unary_calls_per_s_baseline": baseline["calls_per_s"],
        "unary_calls_per_s_with_streams": with_streams["calls_per_s"],
        "unary_by_kind": {"baseline": baseline["by_kind"], "with_streams": with_streams["by_kind"]},
        "streams": starved["streams"],
        "targets": TARGETS,
        "meets_targets": (admissions.rate("create", "ok") >= TARGETS["admissions_per_s"]
                          and create_latency["p99_ms"] is not None and create_latency["p99_ms"] <= TARGETS["p99_ms"]
                          and all_open and with_streams["p99_ms"] is not None
                          and with_streams["p99_ms"] <= TARGETS["unary_p99_ms_with_1000_streams"]),
        "meets_streams_target": (all_open and with_streams["p99_ms"] is not None
                                 and with_streams["p99_ms"] <= TARGETS["unary_p99_ms_with_1000_streams"]),
        "cpu_cores_busy": cpu,
        "machine": facts,
    }
    say(f"admissions: {result['admissions_per_s']}/s (CreateReservation p50 {result['p50_ms']} ms, "
        f"p99 {result['p99_ms']} ms); {result['rpcs_per_s']} RPC/s with deletes; "
        f"refused {result['refused']}, errors {errors}")
    say(f"admissions/s in each quarter of the phase: {result['admissions_per_s_by_quarter']}")
    say(f"CPU cores busy during admissions: client process {cpu['admissions']['client']}, "
        f"controller {cpu['admissions']['controller']} (of {os.cpu_count()})")
    say(f"QueryAvailability: {result['availability_queries_per_s']}/s (p50 {query_latency['p50_ms']} ms, "
        f"p99 {query_latency['p99_ms']} ms)")
    if result["core_admissions_per_s"] and result["admissions_per_s"]:
        say(f"over gRPC: {result['admissions_per_s'] / result['core_admissions_per_s']:.0%} of the core's rate; "
            f"health Check ceiling {result['health_rpcs_per_s']} RPC/s")
    held = starved["streams"]
    say(f"unary calls (create, heartbeat, health Check) from {STREAM_CLIENTS} clients: p50 {baseline['p50_ms']} ms, "
        f"p99 {baseline['p99_ms']} ms with no stream open; p50 {with_streams['p50_ms']} ms, "
        f"p99 {with_streams['p99_ms']} ms with {held['open']} of {streams} streams open "
        f"(opened in {held['open_s']} s, refused {held['refused'] or 'none'}, "
        f"{held['messages']} messages carried, ended early {held['ended_early'] or 'none'})")
    for failure in dict.fromkeys(failures):
        say(f"error: {failure}")
    say(f"targets (>= {TARGETS['admissions_per_s']} admissions/s, p99 <= {TARGETS['p99_ms']} ms, unary p99 <= "
        f"{TARGETS['unary_p99_ms_with_1000_streams']} ms with 1000 streams open): "
        f"{'met' if result['meets_targets'] else 'missed'} on {os.cpu_count()} CPUs "
        f"(streams target {'met' if result['meets_streams_target'] else 'missed'})")
    return result


def main(quick: bool = False, clients: int = 16, seconds: float | None = None, seed: int = 16,
         streams: int = STREAMS) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    if clients < 1:
        say("tsdn bench northbound: --clients must be at least 1")
        return 2
    if not 1 <= streams <= 2000:
        say("tsdn bench northbound: --streams must be from 1 to 2000 (the controller's default --max-streams)")
        return 2
    if seconds is not None and seconds <= 0:
        say("tsdn bench northbound: --seconds must be positive")
        return 2
    return print_result("northbound", lambda: run(quick=quick, clients=clients, seconds=seconds, seed=seed,
                                                  streams=streams))

