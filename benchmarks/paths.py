"""`tsdn bench paths`: requests routed and admitted per second, against plain networkx.

Three networks: sc16.yaml; ESnet from the Internet Topology Zoo (68 nodes); a generated
1,000-switch WAN (a rewired ring lattice, like research WANs with shortcuts) carrying
10,000 existing bookings. On each, the same random requests (random DTN pairs, 1-20G,
overlapping windows within the next day; 1 in 4 widest, 1 in 10 protected) go through
`PathFinder.route` + `Ledger.reserve` (SQLite file, as the controller runs it), and then
through a plain networkx baseline in the same process: `nx.shortest_path` over a
`subgraph_view` whose edge filter sums the bookings that overlap the window, then the
booking appended to each edge. The last line printed is one JSON object.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import NoCapacity, TsdnError
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathFinder, PathRequest
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import TopologySpec
from topologies import TOPOLOGY_DIR, builtin_topology

ZOO_DIR = TOPOLOGY_DIR / "zoo"
G = 10**9
HOUR = 3600.0


@dataclass
class Result:
    """Timings of one implementation on one network."""

    latencies: list[float]
    admitted: int
    refused: int

    def summary(self) -> dict:
        total = sum(self.latencies)
        ordered = sorted(self.latencies)
        return {
            "requests_per_s": round(len(ordered) / total, 1) if total else None,
            "p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p99_ms": round(ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)] * 1000, 3),
            "admitted": self.admitted,
            "refused": self.refused,
        }


def generated_wan(switches: int, seed: int) -> TopologySpec:
    """A connected WAN of `switches` switches: a ring lattice with 10% rewired shortcuts, one DTN each."""
    rng = random.Random(seed)
    graph = nx.connected_watts_strogatz_graph(switches, 4, 0.1, seed=seed)
    next_port = dict.fromkeys(graph.nodes, 1)
    links = []
    for u, v in sorted(graph.edges):
        links.append({"a": f"s{u}", "a_port": next_port[u], "b": f"s{v}", "b_port": next_port[v],
                      "capacity": rng.choice([100 * G, 100 * G, 400 * G]), "kind": "wan",
                      "latency_ms": round(rng.uniform(1, 25), 2)})
        next_port[u] += 1
        next_port[v] += 1
    dtns = [{"name": f"d{n}", "switch": f"s{n}", "port": next_port[n], "ipv4": f"10.{n // 250}.{n % 250}.1",
             "mac": f"02:00:00:00:{n // 256:02x}:{n % 256:02x}", "nic_speed": 100 * G} for n in graph.nodes]
    spec = {
        "name": f"generated-{switches}",
        "switches": [{"name": f"s{n}", "dpid": n + 1, "ports": [f"1-{next_port[n]}"]} for n in graph.nodes],
        "links": links,
        "dtns": dtns,
    }
    return TopologySpec.model_validate(spec)


def esnet() -> Topology:
    """ESnet imported from the shipped Topology Zoo sample, with one DTN per node."""
    from topologies.zoo_import import import_zoo

    path = ZOO_DIR / "Esnet.graphml"
    return Topology(import_zoo(path, 100 * G, with_dtns=True).spec, str(path))


def random_requests(topology: Topology, count: int, now: float, rng: random.Random) -> list[PathRequest]:
    """Requests between random DTN pairs with overlapping windows in the next day."""
    dtns = sorted(topology.dtns)
    requests = []
    for i in range(count):
        src, dst = rng.sample(dtns, 2)
        start = now + rng.uniform(0, 12 * HOUR)
        requests.append(PathRequest(
            src, dst, rng.choice([1, 2, 5, 10, 20]) * G, start, start + rng.uniform(1, 6) * HOUR,
            policy="widest" if i % 4 == 0 else "shortest", protect=i % 10 == 0,
        ))
    return requests


def preload(topology: Topology, ledger: Ledger, count: int, now: float, rng: random.Random) -> int:
    """Put `count` bookings on random loop-free walks, as earlier reservations would have."""
    switches = sorted(topology.switches)
    made = attempts = 0
    while made < count and attempts < count * 3:
        attempts += 1
        at = rng.choice(switches)
        walk, seen = [], {at}
        for _ in range(rng.randint(2, 12)):
            options = [d for ds in topology.adjacency[at].values() for d in ds if d.dst not in seen]
            if not options:
                break
            step = rng.choice(options)
            walk.append(step.id)
            seen.add(step.dst)
            at = step.dst
        if not walk:
            continue
        start = now + rng.uniform(0, 12 * HOUR)
        try:
            ledger.reserve(walk, rng.choice([1, 2, 5]) * G, start, start + rng.uniform(1, 8) * HOUR)
        except NoCapacity:
            continue
        made += 1
    return made


def run_tsdn(topology: Topology, ledger: Ledger, requests: list[PathRequest]) -> Result:
    """Route and admit each request through the core, timing each."""
    finder = PathFinder(topology, ledger)
    latencies: list[float] = []
    admitted = refused = 0
    for request in requests:
        began = time.perf_counter()
        try:
            route = finder.route(request)
            ledger.reserve(route.direction_ids, request.bandwidth, request.start, request.end)
            admitted += 1
        except TsdnError:
            refused += 1
        latencies.append(time.perf_counter() - began)
    return Result(latencies, admitted, refused)


def run_baseline(topology: Topology, ledger: Ledger, requests: list[PathRequest]) -> Result:
    """The same requests with plain networkx: filter edges by summed overlapping bookings, BFS."""
    on_direction: dict[str, list[tuple[float, float, int]]] = {}
    for booking in ledger.bookings():
        for direction_id in booking.directions:
            on_direction.setdefault(direction_id, []).append((booking.start, booking.end, booking.bandwidth))
    graph = nx.DiGraph()
    for direction in topology.directions.values():
        if not direction.is_access:
            graph.add_edge(direction.src, direction.dst, capacity=direction.capacity,
                           bookings=on_direction.get(direction.id, []))
    latencies: list[float] = []
    admitted = refused = 0
    for request in requests:
        began = time.perf_counter()

        def has_room(u: str, v: str, r: PathRequest = request) -> bool:
            edge = graph[u][v]
            used = sum(bw for s, e, bw in edge["bookings"] if s < r.end and r.start < e)
            return edge["capacity"] - used >= r.bandwidth

        view = nx.subgraph_view(graph, filter_edge=has_room)
        try:
            nodes = nx.shortest_path(view, topology.dtns[request.src].switch, topology.dtns[request.dst].switch)
            for u, v in itertools.pairwise(nodes):
                graph[u][v]["bookings"].append((request.start, request.end, request.bandwidth))
            admitted += 1
        except nx.NetworkXNoPath:
            refused += 1
        latencies.append(time.perf_counter() - began)
    return Result(latencies, admitted, refused)


def bench_network(label: str, topology: Topology, requests: int, bookings: int, seed: int) -> dict:
    """Measure tsdn and the baseline on one network, from the same starting bookings."""
    rng = random.Random(seed)
    clock = FakeClock()
    now = clock.now()
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-") as tmp:
        ledger = Ledger(topology.capacities(), Path(tmp) / "ledger.db", clock)
        existing = preload(topology, ledger, bookings, now, rng) if bookings else 0
        batch = random_requests(topology, requests, now, rng)
        baseline = run_baseline(topology, ledger, batch)  # reads the ledger before tsdn adds to it
        ours = run_tsdn(topology, ledger, batch)
        ledger.close()
    result = {"topology": label, "switches": len(topology.switches), "links": len(topology.links),
              "bookings": existing, "requests": requests, **ours.summary()}
    base = baseline.summary()
    result.update({"baseline_requests_per_s": base["requests_per_s"], "baseline_p50_ms": base["p50_ms"],
                   "baseline_p99_ms": base["p99_ms"], "baseline_admitted": base["admitted"]})
    print(f"{label}: {len(topology.switches)} switches, {existing} bookings: "
          f"{result['requests_per_s']} req/s (p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms), "
          f"admitted {result['admitted']}/{requests}; plain networkx {base['requests_per_s']} req/s",
          file=sys.stderr, flush=True)
    return result


def main(quick: bool = False, seed: int = 16) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    sizes = {"sc16": 300, "esnet": 300, "wan": 150} if quick else {"sc16": 2000, "esnet": 2000, "wan": 1000}
    results = [bench_network("sc16", Topology.load(builtin_topology("sc16")), sizes["sc16"], 0, seed)]
    results.append(bench_network("Esnet.graphml", esnet(), sizes["esnet"], 0, seed))
    wan = Topology(generated_wan(1000, seed), "generated")
    results.append(bench_network("generated-1000", wan, sizes["wan"], 10_000, seed))
    print(json.dumps({"bench": "paths", "quick": quick, "seed": seed,
                      "mix": "75% shortest, 25% widest, 10% protected; 1-20G; windows overlapping over 18 h",
                      "results": results}))
    return 0
