"""`tsdn bench soak`: the controller's memory over many created and released reservations.

A real `tsdn controller` runs as a subprocess on sc16 (admission only: no switches) with a short
`--keep-ended` (10 s; 5 s with --quick). Client threads (16 by default), each with its own
`TsdnClient`, loop CreateReservation (a random DTN pair, 1G, for an hour) then
DeleteReservation until COUNT pairs are done (100,000; 8,000 with --quick). The controller's
resident set size (RSS, from /proc) is sampled twice a second: the result gives it at the start
(before any call), the middle and the end, its growth per 10,000 pairs (least squares over the
samples after the first 10%), and the pairs per second. At the end a few of the first
reservations (long gone from memory) are read back with GetReservation, and a page of
ListReservations is timed at the front and deep in the history.

Baselines measured in the same run:
- the same soak with `--keep-ended forever` (nothing ever leaves memory, as before retention),
  on a smaller count (20,000; 3,000 with --quick), its growth extrapolated to COUNT and
  labelled so;
- core: tracemalloc of a `ReservationBook` in this process (FakeClock, a SQLite file) over the
  same create + release, with retention 0 and forever: the bytes each ended reservation held in
  memory costs, without gRPC or the allocator's slack.

Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import gc
import itertools
import math
import os
import random
import sqlite3
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.controller_process import ControllerProcess
from benchmarks.northbound import machine, percentile_ms, sc16_dtns
from benchmarks.report import print_result, say
from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.core.clock import FakeClock
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

G = 10**9
HOUR = 3600.0
PRINCIPAL = "soak"
TOKEN = "soak-token-" + "0123456789abcdef" * 2
SAMPLE_SECONDS = 0.5
MB = 1024 * 1024


def rss_mb(pid: int) -> float | None:
    """Resident set size of `pid` in MiB (Linux /proc; None elsewhere or once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x; None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


@dataclass
class Soak:
    """What one soak measured."""

    keep_ended: str
    count: int
    seconds: float = 0.0
    done: int = 0
    errors: int = 0
    failures: list[str] = field(default_factory=list)
    samples: list[tuple[int, float]] = field(default_factory=list)  # (pairs done, rss MiB)
    rss_start: float | None = None
    first_names: list[str] = field(default_factory=list)

    def rss_at(self, fraction: float) -> float | None:
        """RSS at the sample nearest `fraction` of the count."""
        if not self.samples:
            return None
        target = fraction * self.count
        return min(self.samples, key=lambda s: abs(s[0] - target))[1]

    def growth_per_10k(self) -> float | None:
        """MiB per 10,000 pairs, over the samples after the first 10% (warm-up: pools, caches)."""
        kept = [(done, rss) for done, rss in self.samples if done >= 0.1 * self.count]
        rate = slope(kept)
        return round(rate * 10_000, 2) if rate is not None else None


def soak(workdir: Path, keep_ended: str, count: int, clients: int, dtns: list[str], seed: int) -> tuple[Soak, dict]:
    """Run `count` create + release pairs through a controller with `--keep-ended keep_ended`;
    return what it measured and the store's facts and reads at the end."""
    result = Soak(keep_ended, count)
    controller = ControllerProcess(workdir, principal=PRINCIPAL, token=TOKEN,
                                   extra=("--keep-ended", keep_ended, "--no-http"))
    store: dict = {}
    try:
        address = controller.start()
        pid = controller.pid
        assert pid is not None
        result.rss_start = rss_mb(pid)
        lock = threading.Lock()
        tickets = iter(range(count))
        stop = threading.Event()

        def client_loop(i: int) -> None:
            rng = random.Random(seed * 1000 + i)
            with TsdnClient(address, token=TOKEN, timeout=30) as client:
                while not stop.is_set():
                    with lock:
                        ticket = next(tickets, None)
                    if ticket is None:
                        return
                    src, dst = rng.sample(dtns, 2)
                    try:
                        created = client.create_reservation(src, dst, 1 * G, duration=HOUR)
                        client.delete_reservation(created.name)
                    except ApiError as error:
                        with lock:
                            result.errors += 1
                            if len(result.failures) < 5:
                                result.failures.append(str(error))
                        continue
                    with lock:
                        result.done += 1
                        if len(result.first_names) < 5:
                            result.first_names.append(created.name)

        def sampler() -> None:
            while not stop.wait(SAMPLE_SECONDS):
                if (rss := rss_mb(pid)) is not None:
                    result.samples.append((result.done, rss))

        threads = [threading.Thread(target=client_loop, args=(i,), name=f"soak-{i}", daemon=True)
                   for i in range(clients)]
        watcher = threading.Thread(target=sampler, name="soak-rss", daemon=True)
        began = time.perf_counter()
        watcher.start()
        for thread in threads:
            thread.start()
        last_said = began
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(1.0)
            if time.perf_counter() - last_said >= 15:
                last_said = time.perf_counter()
                say(f"  keep-ended {keep_ended}: {result.done}/{count} pairs, controller RSS {rss_mb(pid)} MiB")
        result.seconds = time.perf_counter() - began
        stop.set()
        watcher.join(5)
        if (rss := rss_mb(pid)) is not None:
            result.samples.append((result.done, rss))
        store = reads_at_end(address, result.first_names)
    finally:
        controller.stop()
    store.update(store_facts(workdir / "tsdn.db"))
    return result, store


def reads_at_end(address: str, first: list[str]) -> dict:
    """The first reservations read back (long gone from memory with retention), and pages of 1,000
    from ListReservations timed at the front and ten pages deep."""
    with TsdnClient(address, token=TOKEN, timeout=30) as client:
        read_back = sum(1 for name in first if client.get_reservation(name).state == pb.RELEASED)
        front = [timed_page(client.list_reservations(page_size=1000)) for _ in range(3)]
        pages = client.list_reservations(page_size=1000)
        deep = [timed_page(pages) for _ in range(11)][1:]
    return {"first_reservations_read_back": f"{read_back}/{len(first)}",
            "list_1000_first_page_p50_ms": percentile_ms([t for t in front if t is not None], 0.5),
            "list_1000_deep_page_p50_ms": percentile_ms([t for t in deep if t is not None], 0.5)}


def timed_page(reservations: Iterator) -> float | None:
    """Seconds to take the next 1,000 reservations (one ListReservations page); None when fewer are left."""
    began = time.perf_counter()
    taken = sum(1 for _ in itertools.islice(reservations, 1000))
    return time.perf_counter() - began if taken == 1000 else None


def store_facts(db: Path) -> dict:
    """Rows in the state file and its bytes per row (indexes included)."""
    try:
        with sqlite3.connect(db) as connection:
            rows = connection.execute("SELECT COUNT(*) FROM reservations").fetchone()[0]
            body = connection.execute("SELECT AVG(LENGTH(body)) FROM reservations").fetchone()[0]
        size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
    except (sqlite3.Error, OSError) as error:
        return {"store_error": str(error)}
    return {"store_rows": rows, "store_bytes_per_row": round(size / rows) if rows else None,
            "store_body_bytes_per_row": round(body) if body else None}


def core_memory(workdir: Path, dtns: list[str], count: int, seed: int) -> dict:
    """tracemalloc of an in-process book over `count` create + release, with retention 0 and forever."""
    topology = Topology.load(builtin_topology("sc16"))
    principal = Principal(PRINCIPAL, Role.SERVICE)
    found = {}
    for label, keep in (("forever", math.inf), ("0", 0.0)):
        clock = FakeClock()
        ledger = Ledger(topology.capacities(), workdir / f"core-{label}.db", clock)
        book = ReservationBook(topology, ledger, clock, keep_ended=keep)
        rng = random.Random(seed)
        try:
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for i in range(count):
                src, dst = rng.sample(dtns, 2)
                now = clock.now()
                reservation = book.create(principal, PathRequest(src, dst, 1 * G, now, now + HOUR),
                                          request_id=os.urandom(16).hex())
                book.release(principal, reservation.name)
                book.take_events()
                clock.advance(0.01)
                if i % 100 == 99:  # the worker ticks the book about once a second
                    book.tick()
            book.tick()
            gc.collect()  # count what is held, not cyclic garbage awaiting the collector
            found[label] = (tracemalloc.get_traced_memory()[0] - before) / count
        finally:
            tracemalloc.stop()
            ledger.close()
    return {"core_bytes_per_ended_reservation_kept": round(found["forever"]),
            "core_bytes_per_reservation_with_retention_0": round(found["0"])}


def run(quick: bool = False, count: int | None = None, baseline_count: int | None = None, clients: int = 16,
        keep_ended: str | None = None, seed: int = 16) -> dict:
    """Run the soak, the baseline and the core measurement; return the result object."""
    count = count or (8_000 if quick else 100_000)
    baseline_count = min(count, baseline_count or (3_000 if quick else 20_000))
    keep_ended = keep_ended or ("5s" if quick else "10s")
    dtns = sc16_dtns()
    facts = machine()
    say(f"soak: {clients} clients, create + release {count} pairs with --keep-ended {keep_ended}; baseline "
        f"--keep-ended forever on {baseline_count} pairs" + (" (quick: counts cut)" if quick else ""))
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-soak-") as tmp:
        workdir = Path(tmp)
        core = core_memory(workdir, dtns, 1_500 if quick else 4_000, seed)
        say(f"core (in process, tracemalloc): {core['core_bytes_per_ended_reservation_kept']} B per ended "
            f"reservation kept in memory; {core['core_bytes_per_reservation_with_retention_0']} B with retention 0")
        kept, kept_store = soak(workdir / "retention", keep_ended, count, clients, dtns, seed)
        say(f"retention {keep_ended}: {kept.done} pairs in {kept.seconds:.0f} s, RSS {kept.rss_start} -> "
            f"{kept.rss_at(0.5)} -> {kept.rss_at(1.0)} MiB, {kept.growth_per_10k()} MiB per 10,000")
        base, _ = soak(workdir / "forever", "forever", baseline_count, clients, dtns, seed + 1)
        say(f"forever (baseline): {base.done} pairs in {base.seconds:.0f} s, RSS {base.rss_start} -> "
            f"{base.rss_at(1.0)} MiB, {base.growth_per_10k()} MiB per 10,000")
    base_growth = base.growth_per_10k()
    base_end = base.rss_at(1.0)
    extrapolated = (round(base_end + base_growth * (count - baseline_count) / 10_000, 1)
                    if base_growth is not None and base_end is not None else None)
    result = {
        "bench": "soak",
        "quick": quick,
        "clients": clients,
        "topology": "sc16",
        "count": count,
        "keep_ended": keep_ended,
        "pairs_done": kept.done,
        "errors": kept.errors + base.errors,
        "seconds": round(kept.seconds, 1),
        "pairs_per_s": round(kept.done / kept.seconds, 1) if kept.seconds else None,
        "calls_per_s": round(2 * kept.done / kept.seconds, 1) if kept.seconds else None,
        "rss_mb_start": kept.rss_start,
        "rss_mb_middle": kept.rss_at(0.5),
        "rss_mb_end": kept.rss_at(1.0),
        "rss_mb_growth_per_10k": kept.growth_per_10k(),
        "rss_mb_samples": len(kept.samples),
        **kept_store,
        "baseline": {
            "keep_ended": "forever",
            "count": baseline_count,
            "pairs_done": base.done,
            "pairs_per_s": round(base.done / base.seconds, 1) if base.seconds else None,
            "calls_per_s": round(2 * base.done / base.seconds, 1) if base.seconds else None,
            "rss_mb_start": base.rss_start,
            "rss_mb_end": base_end,
            "rss_mb_growth_per_10k": base_growth,
            f"rss_mb_at_{count}_extrapolated": extrapolated,
        },
        **core,
        "machine": facts,
    }
    for failure in dict.fromkeys(kept.failures + base.failures):
        say(f"error: {failure}")
    say(f"memory with retention: {result['rss_mb_growth_per_10k']} MiB per 10,000 pairs; without (baseline, "
        f"extrapolated to {count}): {base_growth} MiB per 10,000, about {extrapolated} MiB at the end")
    return result


def main(quick: bool = False, count: int | None = None, baseline_count: int | None = None, clients: int = 16,
         keep_ended: str | None = None, seed: int = 16) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    for name, value in (("--count", count), ("--baseline-count", baseline_count), ("--clients", clients)):
        if value is not None and value < 1:
            say(f"tsdn bench soak: {name} must be at least 1")
            return 2
    return print_result("soak", lambda: run(quick, count, baseline_count, clients, keep_ended, seed))
