"""`tsdn bench share`: elastic sharing re-solve time and meter churn, against floors only.

Two networks: sc16.yaml with 1,000 elastic claims, and the largest Internet Topology Zoo WAN
shipped in topologies/zoo (by node count: ESnet, 68 nodes, one 100G DTN per node) with 10,000.
Each claim joins a random pair of DTNs (seeded) on the route `PathFinder` picks on the empty
network, with a floor of 1-40G, extra room above it of 0.5-7 times that (its ceiling), and a
priority of 1, 2, 4 or 8. Floors are cut, claim by claim, to what the most loaded direction of
its route can book at 70% of its capacity, so the floors fit and the network is loaded; the
spare capacity of each direction is its capacity minus the floors booked on it (and minus the
guaranteed bookings the perturbations add).

Then, again and again, one realistic perturbation and a re-solve: a claim added (its floor booked
where it fits) or removed, a claim's priority changed, or a direction's spare capacity changed
(guaranteed bookings on it arriving or ending). Each re-solve is `sharing.solve` over every
claim; the meters it changes are `sharing.changed(the meters, new shares, claims, 0.05, spare)`,
and the meters then hold what the book would give them.
Baseline, on the same perturbations in the same run: every claim gets its floor, no solver
(what a controller without elastic sharing would meter), with its own meter changes counted the
same way (a new claim's meter is one). On sc16, a few re-solves also go through
`method="highs"` (the same rounds as LPs in HiGHS) for comparison: their time, and the largest
difference from the default method's shares.

Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from benchmarks.report import print_result, say
from sdn_app.core.paths import PathFinder, PathRequest, Unbooked
from sdn_app.core.sharing import Claim, changed, solve
from sdn_app.core.topology import Topology
from topologies import TOPOLOGY_DIR, builtin_topology

G = 10**9
FLOORS = tuple(f * G for f in (1, 2, 5, 10, 20, 40))
WEIGHTS = (1, 1, 1, 2, 4, 8)
FILL = 0.7  # floors take at most this share of any direction's capacity
STEP = 0.05  # a meter changes when its share moves by more than this share of the ceiling
KINDS = ("add", "remove", "priority", "spare")
TARGET_MS_P99 = 50.0  # sc16, 1,000 claims
SC16_CLAIMS, ZOO_FACTOR = 1000, 10
HIGHS_SAMPLES = 10


@dataclass
class Network:
    """A topology, its claims between DTN pairs and each direction's spare capacity now."""

    label: str
    topology: Topology
    rng: random.Random
    claims: dict[str, Claim]
    spare: dict[str, int]
    routes: dict[tuple[str, str], tuple[str, ...]]
    made: int = 0

    @classmethod
    def build(cls, label: str, topology: Topology, count: int, seed: int) -> Network:
        """`count` claims on `topology`, their floors cut to fit (see the module's docstring)."""
        network = cls(label, topology, random.Random(seed), {}, dict(topology.capacities()), {})
        drafts = [network._draft() for _ in range(count)]
        load: Counter[str] = Counter()
        for route, floor, _room, _weight in drafts:
            for d in route:
                load[d] += floor
        for route, floor, room, weight in drafts:
            fit = min(1.0, *(FILL * network.spare[d] / load[d] for d in route))
            network._add(route, int(floor * fit), room, weight)
        return network

    def _draft(self) -> tuple[tuple[str, ...], int, int, int]:
        """A route between a random DTN pair, a floor, room above it, and a priority."""
        src, dst = self.rng.sample(sorted(self.topology.dtns), 2)
        route = self.routes.get((src, dst))
        if route is None:
            request = PathRequest(src, dst, 1, 0.0, math.inf)
            route = PathFinder(self.topology, Unbooked(self.topology)).route(request).primary.direction_ids
            self.routes[src, dst] = route
        floor = self.rng.choice(FLOORS)
        return route, floor, int(floor * self.rng.uniform(0.5, 7)), self.rng.choice(WEIGHTS)

    def _add(self, route: tuple[str, ...], floor: int, room: int, weight: int) -> Claim:
        claim = Claim(f"e{self.made}", route, floor, floor + room, weight)
        self.made += 1
        self.claims[claim.id] = claim
        for d in route:
            self.spare[d] -= floor
        return claim

    def perturb(self) -> str:
        """Apply one random perturbation; return its kind."""
        kind = self.rng.choice(KINDS)
        if kind == "add":
            route, floor, room, weight = self._draft()
            floor = min(floor, *(self.spare[d] for d in route))  # a floor the ledger would book
            self._add(route, max(floor, 0), room, weight)
        elif kind == "remove":
            claim = self.claims.pop(self.rng.choice(list(self.claims)))
            for d in claim.directions:
                self.spare[d] += claim.floor
        elif kind == "priority":
            claim = self.claims[self.rng.choice(list(self.claims))]
            weight = self.rng.choice([w for w in set(WEIGHTS) if w != claim.weight])
            self.claims[claim.id] = replace(claim, weight=weight)
        else:
            claim = self.claims[self.rng.choice(list(self.claims))]
            d = self.rng.choice(claim.directions)
            floors = sum(c.floor for c in self.claims.values() if d in c.directions)
            # Guaranteed bookings on d arrive or end: they now take up to three quarters of what floors leave.
            self.spare[d] = int((self.topology.capacities()[d] - floors) * self.rng.uniform(0.25, 1.0))
        return kind


def percentile_ms(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] * 1000, 3)


def run_network(network: Network, resolves: int, highs_samples: int) -> dict:
    """Perturb and re-solve `resolves` times, with the floors-only baseline beside; summarise."""
    at_start = len(network.claims)
    began = time.perf_counter()
    shares = solve(list(network.claims.values()), network.spare)
    first_s = time.perf_counter() - began
    floors = {c.id: c.floor for c in network.claims.values()}
    times: list[float] = []
    baseline_times: list[float] = []
    highs_times: list[float] = []
    moved: list[int] = []
    baseline_moved: list[int] = []
    kinds: Counter[str] = Counter()
    highs_diff = 0
    every = max(1, resolves // highs_samples) if highs_samples else 0
    for n in range(resolves):
        kinds[network.perturb()] += 1
        claims = network.claims
        began = time.perf_counter()
        new = solve(list(claims.values()), network.spare)
        times.append(time.perf_counter() - began)
        meters = changed(shares, new, claims, STEP, network.spare)  # as the book changes them
        moved.append(len(meters))
        shares = {c: meters.get(c, shares.get(c)) for c in new}
        began = time.perf_counter()
        new_floors = {c.id: c.floor for c in claims.values()}
        baseline_times.append(time.perf_counter() - began)
        baseline_moved.append(len(changed(floors, new_floors, claims, STEP)))
        floors = new_floors
        if every and n % every == 0 and len(highs_times) < highs_samples:
            began = time.perf_counter()
            by_highs = solve(list(claims.values()), network.spare, method="highs")
            highs_times.append(time.perf_counter() - began)
            highs_diff = max(highs_diff, max(abs(by_highs[i] - new[i]) for i in new))
    extras = [new[c.id] - c.floor for c in network.claims.values()]
    result = {
        "topology": network.label, "switches": len(network.topology.switches),
        "directions": len(network.topology.directions), "claims_at_start": at_start,
        "claims": len(network.claims), "resolves": resolves,
        "first_solve_ms": round(first_s * 1000, 3),
        "resolve_ms_p50": percentile_ms(times, 0.5), "resolve_ms_p99": percentile_ms(times, 0.99),
        "meters_changed_mean": round(statistics.fmean(moved), 2),
        "baseline_ms_p50": percentile_ms(baseline_times, 0.5), "baseline_ms_p99": percentile_ms(baseline_times, 0.99),
        "baseline_meters_changed_mean": round(statistics.fmean(baseline_moved), 2),
        "highs_ms_p50": percentile_ms(highs_times, 0.5) if highs_times else None,
        "highs_resolves": len(highs_times),
        "highs_max_diff_bps": highs_diff if highs_times else None,
        "extra_gbps": round(sum(extras) / G, 1),
        "claims_at_ceiling": sum(shares[c.id] == c.ceiling for c in network.claims.values()),
        "perturbations": dict(kinds),
    }
    say(f"{network.label}: {result['claims']} claims, {resolves} re-solves: p50 {result['resolve_ms_p50']} ms, "
        f"p99 {result['resolve_ms_p99']} ms, {result['meters_changed_mean']} meters changed per re-solve "
        f"(floors only: {result['baseline_ms_p50']} ms, {result['baseline_meters_changed_mean']}); "
        f"highs p50 {result['highs_ms_p50']} ms")
    return result


def largest_zoo() -> tuple[str, Callable[[], Topology]]:
    """The Topology Zoo WAN shipped with the most nodes, and how to load it with one 100G DTN per node."""
    from topologies.zoo_import import import_zoo

    files = sorted((TOPOLOGY_DIR / "zoo").glob("*.graphml"))
    imported = [(import_zoo(path, 100 * G, with_dtns=True), path) for path in files]
    if not imported:
        raise RuntimeError(f"no Topology Zoo file under {TOPOLOGY_DIR / 'zoo'}")
    zoo, path = max(imported, key=lambda pair: len(pair[0].spec.switches))
    return path.stem, lambda: Topology(zoo.spec, str(path))


def measure(seed: int, sc16_claims: int, zoo_claims: int, sc16_resolves: int, zoo_resolves: int,
            highs_samples: int) -> dict:
    """Both networks, summarised."""
    started = time.perf_counter()
    zoo_label, load_zoo = largest_zoo()
    sc16 = run_network(Network.build("sc16", Topology.load(builtin_topology("sc16")), sc16_claims, seed),
                       sc16_resolves, highs_samples)
    zoo = run_network(Network.build(zoo_label, load_zoo(), zoo_claims, seed), zoo_resolves, 0)
    return {"bench": "share", "seed": seed, "step": STEP, "networks": {"sc16": sc16, "zoo": zoo},
            "resolve_ms_p99": sc16["resolve_ms_p99"], "target_ms_p99": TARGET_MS_P99,
            "meets_target": sc16["resolve_ms_p99"] <= TARGET_MS_P99,
            "seconds": round(time.perf_counter() - started, 1)}


def main(quick: bool = False, seed: int = 16, claims: int | None = None, resolves: int | None = None) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    sc16_claims = claims if claims is not None else SC16_CLAIMS
    sc16_resolves = resolves if resolves is not None else (300 if quick else 2000)
    zoo_resolves = resolves if resolves is not None else (60 if quick else 400)
    return print_result("share", lambda: {**measure(seed, sc16_claims, sc16_claims * ZOO_FACTOR, sc16_resolves,
                                                    zoo_resolves, 3 if quick else HIGHS_SAMPLES), "quick": quick})


if __name__ == "__main__":
    raise SystemExit(main(quick=True))
