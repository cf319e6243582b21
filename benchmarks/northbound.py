"""`tsdn bench northbound`: reservations admitted per second over gRPC by concurrent clients.

A real `tsdn controller` runs as a subprocess on sc16 (admission only: no switches), with a
tokens file, so every call is authenticated as a service. N client threads (default 16),
each with its own `TsdnClient`, loop CreateReservation (a random DTN pair, 1G, for an hour)
then DeleteReservation; after a warm-up, the measured phase gives admissions per second,
p50/p99 latency of CreateReservation, and the same for every RPC. A second phase sends
QueryAvailability from the same clients.

Baselines measured in the same run:
- core: the same create + release called directly on a `ReservationBook` in this process
  (SQLite file as the controller uses; no gRPC, no serialization, one thread), so the cost of
  the northbound layer is visible;
- health: the same clients calling the gRPC health service's Check, which never reaches the
  core: the ceiling of this transport with these clients on this machine.

Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.controller_process import ControllerProcess
from benchmarks.report import print_result, say
from northbound.client import ApiError, TsdnClient
from sdn_app.core.clock import SystemClock
from sdn_app.core.errors import TsdnError
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservations import Principal, ReservationBook, Role
from sdn_app.core.topology import Topology
from topologies import builtin_topology

G = 10**9
HOUR = 3600.0
BANDWIDTH = 1 * G
PRINCIPAL = "bench"
TOKEN = "bench-token-" + "0123456789abcdef" * 2
TARGETS = {"admissions_per_s": 1000, "p99_ms": 20}


@dataclass(frozen=True)
class Phases:
    """How long each phase runs, in seconds."""

    core: float
    health: float
    warmup: float
    admissions: float
    availability: float

    @classmethod
    def for_run(cls, quick: bool, seconds: float | None) -> Phases:
        """Quick: about 20 s in all; full: `seconds` (default 20) per measured phase."""
        if seconds is None:
            seconds = 4.0 if quick else 20.0
        warmup = min(1.0 if quick else 3.0, seconds)
        return cls(core=min(seconds, 2.0 if quick else 10.0), health=min(seconds, 3.0 if quick else 10.0),
                   warmup=warmup, admissions=seconds, availability=seconds)


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


def run(quick: bool = False, clients: int = 16, seconds: float | None = None, seed: int = 16) -> dict:
    """Run every phase and return the result object."""
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
        controller = ControllerProcess(workdir, principal=PRINCIPAL, token=TOKEN)
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
        finally:
            controller.stop()
    creates = [r.latency for r in admissions.of("create", "ok")]
    everything = [r.latency for r in admissions.records if r.outcome != "error"]
    create_latency = latency_summary(creates)
    rpc_latency = latency_summary(everything)
    delete_latency = latency_summary([r.latency for r in admissions.of("delete", "ok")])
    query_latency = latency_summary([r.latency for r in availability.of("query", "ok")])
    errors = sum(len(t.of(outcome="error")) for t in (health, admissions, availability))
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
        **core,
        "targets": TARGETS,
        "meets_targets": (admissions.rate("create", "ok") >= TARGETS["admissions_per_s"]
                          and create_latency["p99_ms"] is not None and create_latency["p99_ms"] <= TARGETS["p99_ms"]),
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
    for failure in dict.fromkeys(failures):
        say(f"error: {failure}")
    say(f"targets (>= {TARGETS['admissions_per_s']} admissions/s, p99 <= {TARGETS['p99_ms']} ms): "
        f"{'met' if result['meets_targets'] else 'missed'} on {os.cpu_count()} CPUs")
    return result


def main(quick: bool = False, clients: int = 16, seconds: float | None = None, seed: int = 16) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    if clients < 1:
        say("tsdn bench northbound: --clients must be at least 1")
        return 2
    if seconds is not None and seconds <= 0:
        say("tsdn bench northbound: --seconds must be positive")
        return 2
    return print_result("northbound", lambda: run(quick=quick, clients=clients, seconds=seconds, seed=seed))

