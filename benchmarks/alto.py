"""`tsdn bench alto`: ALTO endpoint cost queries per second against a real controller.

A real `tsdn controller` runs as a subprocess on sc16 (admission only: no switches) with its HTTP
side on a loopback port and a tokens file, so every request is authenticated as a service
(`Authorization: Bearer`). Client processes (so the clients' own Python is not what is measured)
each run threads with a keep-alive HTTP/1.1 connection (the standard library's `http.client`),
`--clients` in all, posting endpoint cost requests (application/alto-endpointcostparams+json,
one source and one destination DTN address drawn from every ordered sc16 DTN pair, the
bw-available metric) for the measured phase: queries per second, p50/p99 latency. A second ALTO
phase asks one source against every DTN at once (26 pairs a request): pairs per second.

Baselines measured in the same run, on the same pairs:
- gRPC: the same clients (same processes and threads, a `TsdnClient` each) calling
  QueryAvailability for each pair (a window of one minute, one path): what a service asks tsdn
  today for the same answer (its `max_bandwidth_bps` is ALTO's bw-residual);
- networkx: `networkx.shortest_path` between the pairs' switches in this process, one thread, on
  the topology's own graph: plain path computation with no server at all.

Before the phases, every pair's bw-residual and hop count from one ALTO request are checked
against QueryAvailability's answer (`agree`). Human lines go to stderr; the last line printed to
stdout is one JSON object.
"""

from __future__ import annotations

import http.client
import json
import math
import multiprocessing
import os
import random
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import networkx as nx

from benchmarks.controller_process import ControllerProcess
from benchmarks.northbound import (
    Operation,
    cpu_use,
    drive,
    latency_summary,
    machine,
    percentile_ms,
    sc16_dtns,
    timed,
)
from benchmarks.report import free_port, print_result, say
from northbound.client import TsdnClient
from sdn_app.core.topology import Topology
from topologies import builtin_topology

PRINCIPAL = "bench"
TOKEN = "bench-token-" + "0123456789abcdef" * 2
ECS_PARAMS = "application/alto-endpointcostparams+json"
ECS = "application/alto-endpointcost+json"
ERROR = "application/alto-error+json"
METRIC = "bw-available"
WINDOW = 60.0  # seconds: the QueryAvailability window of the gRPC baseline
READY_TIMEOUT = 30.0


def addresses() -> dict[str, str]:
    """sc16's DTN names -> their IPv4 addresses."""
    return {name: dtn.ipv4 for name, dtn in Topology.load(builtin_topology("sc16")).dtns.items()}


def ecs_body(metric: str, srcs: list[str], dsts: list[str]) -> bytes:
    """An endpoint cost request for `srcs` x `dsts` (IPv4 addresses)."""
    return json.dumps({"cost-type": {"cost-mode": "numerical", "cost-metric": metric},
                       "endpoints": {"srcs": [f"ipv4:{a}" for a in srcs],
                                     "dsts": [f"ipv4:{a}" for a in dsts]}}).encode()


def post_ecs(port: int, body: bytes) -> dict:
    """One endpoint cost request; its endpoint cost map."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/alto/endpointcost", data=body, method="POST",
                                     headers={"Content-Type": ECS_PARAMS, "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())["endpoint-cost-map"]


def wait_for_http(port: int) -> None:
    """Until the ALTO directory answers (the HTTP side is served once the controller started)."""
    deadline = time.monotonic() + READY_TIMEOUT
    request = urllib.request.Request(f"http://127.0.0.1:{port}/alto/directory",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError) as why:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the controller's ALTO directory did not answer within {READY_TIMEOUT:.0f} s: "
                                   f"{why}") from None
        time.sleep(0.1)  # polled until the deadline above


def agreement(port: int, grpc_address: str, names: dict[str, str]) -> dict:
    """bw-residual and hop count of every DTN pair from ALTO (two requests) against QueryAvailability."""
    dtns = sorted(names)
    everyone = [names[d] for d in dtns]
    residual = post_ecs(port, ecs_body("bw-residual", everyone, everyone))
    hops = post_ecs(port, ecs_body("hopcount", everyone, everyone))
    client = TsdnClient(grpc_address, token=TOKEN, timeout=30)
    differ: list[str] = []
    checked = 0
    try:
        for src in dtns:
            for dst in dtns:
                if src == dst:
                    continue
                widest = client.query_availability(src, dst, duration=WINDOW, max_paths=1)
                shortest = client.query_availability(src, dst, duration=WINDOW, max_paths=1, policy="shortest")
                alto = (residual[f"ipv4:{names[src]}"][f"ipv4:{names[dst]}"],
                        hops[f"ipv4:{names[src]}"][f"ipv4:{names[dst]}"])
                grpc = (widest.max_bandwidth_bps, shortest.paths[0].hop_count)
                checked += 1
                if alto != grpc and len(differ) < 5:
                    differ.append(f"{src}->{dst}: ALTO {alto}, QueryAvailability {grpc}")
    finally:
        client.close()
    return {"checked_pairs": checked, "agree": not differ, "differences": differ}


def _alto_process(port: int, bodies: list[bytes], threads: int, warmup: float, seconds: float, seed: int) -> dict:
    """A client process: `threads` keep-alive connections posting endpoint cost requests."""
    failures: list[str] = []

    def make(_: int) -> tuple[Operation, Callable[[], None]]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Content-Type": ECS_PARAMS, "Accept": f"{ECS},{ERROR}", "Authorization": f"Bearer {TOKEN}"}

        def query(rng: random.Random) -> list[tuple[str, float, float, str]]:
            body = bodies[rng.randrange(len(bodies))]

            def call() -> bytes:
                try:
                    connection.request("POST", "/alto/endpointcost", body, headers)
                    reply = connection.getresponse()
                    data = reply.read()
                except (OSError, http.client.HTTPException):
                    connection.close()  # reconnects on the next request
                    raise
                if reply.status != 200:
                    raise RuntimeError(f"HTTP {reply.status}: {data[:200]!r}")
                return data
            record, _ = timed("ecs", call, failures)
            return [record]
        return query, connection.close
    tally = drive(make, threads, warmup, seconds, seed)
    return {"latencies": [r.latency for r in tally.of("ecs", "ok")], "errors": len(tally.of("ecs", "error")),
            "failures": failures}


def _grpc_process(address: str, pairs: list[tuple[str, str]], threads: int, warmup: float, seconds: float,
                  seed: int) -> dict:
    """A client process: `threads` gRPC clients calling QueryAvailability for the same pairs."""
    failures: list[str] = []

    def make(_: int) -> tuple[Operation, Callable[[], None]]:
        client = TsdnClient(address, token=TOKEN, timeout=10)

        def query(rng: random.Random) -> list[tuple[str, float, float, str]]:
            src, dst = pairs[rng.randrange(len(pairs))]
            record, _ = timed("query", lambda: client.query_availability(src, dst, duration=WINDOW, max_paths=1),
                              failures)
            return [record]
        return query, client.close
    tally = drive(make, threads, warmup, seconds, seed)
    return {"latencies": [r.latency for r in tally.of("query", "ok")], "errors": len(tally.of("query", "error")),
            "failures": failures}


def spread(clients: int) -> list[int]:
    """Threads per client process: `clients` in all, over at most half the CPUs (at least one)."""
    processes = max(1, min(clients, (os.cpu_count() or 2) // 2))
    return [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]


def in_processes(target: Callable[..., dict], clients: int, args: Callable[[int, int], tuple]) -> dict:
    """Run `target(*args(threads, i))` in each client process at once; their records together."""
    shares = spread(clients)
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(shares)) as pool:
        results = pool.starmap(target, [args(threads, i) for i, threads in enumerate(shares)])
    return {"latencies": [x for r in results for x in r["latencies"]], "errors": sum(r["errors"] for r in results),
            "failures": [f for r in results for f in r["failures"]][:5], "processes": len(shares)}


def networkx_phase(pairs: list[tuple[str, str]], seconds: float, seed: int) -> dict:
    """`networkx.shortest_path` between the pairs' switches, one thread, for `seconds`."""
    topology = Topology.load(builtin_topology("sc16"))
    switch = {name: dtn.switch for name, dtn in topology.dtns.items()}
    rng = random.Random(seed)
    done = 0
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        for _ in range(100):
            src, dst = pairs[rng.randrange(len(pairs))]
            nx.shortest_path(topology.graph, switch[src], switch[dst])
        done += 100
    return {"networkx_shortest_paths_per_s": round(done / (time.perf_counter() - began), 1)}


def run(quick: bool = False, clients: int = 16, seconds: float | None = None, seed: int = 16) -> dict:
    """Every phase; the result object."""
    if seconds is None:
        seconds = 3.0 if quick else 15.0
    warmup = min(1.0 if quick else 2.0, seconds)
    names = addresses()
    dtns = sc16_dtns()
    pairs = [(a, b) for a in dtns for b in dtns if a != b]
    single = [ecs_body(METRIC, [names[a]], [names[b]]) for a, b in pairs]
    batched = [ecs_body(METRIC, [names[a]], [names[d] for d in dtns]) for a in dtns]
    facts = machine()
    cpu: dict[str, dict] = {}
    say(f"alto: {clients} clients in {len(spread(clients))} processes, sc16 ({len(dtns)} DTNs, {len(pairs)} pairs), "
        f"{METRIC}; phases {seconds:g} s after {warmup:g} s warm-up")
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-alto-") as tmp:
        port = free_port()
        controller = ControllerProcess(Path(tmp), principal=PRINCIPAL, token=TOKEN,
                                       extra=("--listen-http", f"127.0.0.1:{port}"))
        try:
            address = controller.start()
            wait_for_http(port)
            say(f"controller subprocess: gRPC on {address}, ALTO on http://127.0.0.1:{port}/alto")
            pid = controller.pid
            checked = agreement(port, address, names)
            say(f"ALTO against QueryAvailability on {checked['checked_pairs']} pairs: "
                f"{'agree' if checked['agree'] else 'DIFFER: ' + '; '.join(checked['differences'])}")
            with cpu_use(pid, cpu, "alto"):
                alto = in_processes(_alto_process, clients, lambda n, i: (port, single, n, warmup, seconds, seed + i))
            with cpu_use(pid, cpu, "alto_batched"):
                wide = in_processes(_alto_process, clients,
                                    lambda n, i: (port, batched, n, min(warmup, 1.0), seconds, seed + 100 + i))
            with cpu_use(pid, cpu, "grpc"):
                grpc = in_processes(_grpc_process, clients,
                                    lambda n, i: (address, pairs, n, warmup, seconds, seed + 200 + i))
        finally:
            controller.stop()
    baseline = networkx_phase(pairs, seconds, seed)
    alto_latency, grpc_latency = latency_summary(alto["latencies"]), latency_summary(grpc["latencies"])
    alto_rate = round(len(alto["latencies"]) / seconds, 1)
    grpc_rate = round(len(grpc["latencies"]) / seconds, 1)
    result = {
        "bench": "alto",
        "quick": quick,
        "clients": clients,
        "client_processes": alto["processes"],
        "topology": "sc16",
        "pairs": len(pairs),
        "metric": METRIC,
        "seconds": seconds,
        "warmup_s": warmup,
        "ecs_queries_per_s": alto_rate,
        "ecs_p50_ms": alto_latency["p50_ms"],
        "ecs_p99_ms": alto_latency["p99_ms"],
        "ecs_max_ms": alto_latency["max_ms"],
        "ecs_errors": alto["errors"],
        "ecs_batched_pairs_per_request": len(dtns),
        "ecs_batched_requests_per_s": round(len(wide["latencies"]) / seconds, 1),
        "ecs_batched_pairs_per_s": round(len(wide["latencies"]) * len(dtns) / seconds, 1),
        "ecs_batched_p99_ms": percentile_ms(wide["latencies"], 0.99),
        "grpc_query_availability_per_s": grpc_rate,
        "grpc_p50_ms": grpc_latency["p50_ms"],
        "grpc_p99_ms": grpc_latency["p99_ms"],
        "grpc_errors": grpc["errors"],
        **baseline,
        "ecs_over_grpc": round(alto_rate / grpc_rate, 2) if grpc_rate else None,
        "agree": checked["agree"],
        "checked_pairs": checked["checked_pairs"],
        "differences": checked["differences"],
        "failures": [*alto["failures"], *wide["failures"], *grpc["failures"]][:5],
        "controller_cpu_cores_busy": {phase: use["controller"] for phase, use in cpu.items()},
        "machine": facts,
    }
    say(f"ALTO endpoint cost: {alto_rate}/s (p50 {alto_latency['p50_ms']} ms, p99 {alto_latency['p99_ms']} ms), "
        f"errors {alto['errors']}; {result['ecs_batched_pairs_per_s']} pairs/s asked {len(dtns)} at a time")
    say(f"gRPC QueryAvailability, same pairs: {grpc_rate}/s (p50 {grpc_latency['p50_ms']} ms, "
        f"p99 {grpc_latency['p99_ms']} ms); networkx shortest_path in-process: "
        f"{baseline['networkx_shortest_paths_per_s']}/s")
    say(f"controller CPU cores busy: {result['controller_cpu_cores_busy']}")
    return result


def main(quick: bool = False, clients: int = 16, seconds: float | None = None, seed: int = 16) -> int:
    """`tsdn bench alto`: the result as the last stdout line."""
    if clients < 1 or (seconds is not None and (not math.isfinite(seconds) or seconds <= 0)):
        say("tsdn bench alto: --clients at least 1 and --seconds above 0")
        return 2
    return print_result("alto", lambda: run(quick=quick, clients=clients, seconds=seconds, seed=seed))
