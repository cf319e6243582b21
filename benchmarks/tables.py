"""`tsdn bench tables`: flow-table entries per switch with 10,000 reservations on sc16, label-switched
paths against the per-hop design (the baseline), in the same run.

Each design gets its own `ReservationBook` on sc16 (provisioning, a SQLite ledger in a temporary
directory). The same 10,000 reservations are made in both: random ordered DTN pairs (seeded), 20
Mbit/s each, each with IPv6 prefixes of its own (one /64 per end, as a Rucio rule per site has),
so any number of them can share a DTN pair; one in ten asks for protection. Switches are given
65,536 meter ids (`--max-meters`; the default 1,024 would cap each switch at 1,024 reservation
ingresses in both designs, which is a limit of its own, not the table's). sc16 is "scaled":
its links are the show's (100G to 1T), so 10,000 x 20 Mbit/s fits. Then, per switch, what the
book wants there (`switch_plan`: flows, groups and meters, every table) is counted, as the
switch would hold it: the fullest switch of each design and every switch's count side by side.
A hardware OpenFlow agent holds a few thousand entries (Kuzniar et al. 2018): the count on the
fullest switch is what caps the reservations a ring can carry.

Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from benchmarks.report import print_result, say
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import TsdnError
from sdn_app.core.installs import LABELS, PER_HOP
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

TOPOLOGY = "sc16"
COUNT = 10_000
BANDWIDTH = 20 * 10**6
PROTECTED_EVERY = 10
MAX_METERS = 65_536  # the default 1,024 caps a switch at 1,024 reservation ingresses, whatever the design
HARDWARE_TCAM = 2_000  # entries a hardware OpenFlow agent holds, order of magnitude (Kuzniar et al. 2018)


def requests(topology: Topology, count: int, seed: int) -> list[tuple[PathRequest, bool]]:
    """`count` requests between random ordered DTN pairs, each with /64s of its own, for an hour."""
    rng = random.Random(seed)
    dtns = sorted(topology.dtns)
    out = []
    for n in range(count):
        src, dst = rng.sample(dtns, 2)
        high, low = n >> 16, n & 0xFFFF
        out.append((PathRequest(src, dst, BANDWIDTH, 0.0, 3600.0, src_prefix=f"fd01:{high:x}:{low:x}::/64",
                                dst_prefix=f"fd02:{high:x}:{low:x}::/64"), n % PROTECTED_EVERY == 0))
    return out


def entries(topology: Topology, design: str, made: list[tuple[PathRequest, bool]], workdir: Path) -> dict:
    """Make the reservations in a book of `design`; entries per switch and what it took."""
    clock = FakeClock(0.0)
    ledger = Ledger(topology.capacities(), workdir / f"{design}.db", clock)
    try:
        book = ReservationBook(topology, ledger, clock, provisioning=True, flow_design=design, max_meters=MAX_METERS)
        admin = Principal("bench", Role.ADMIN)
        refused = 0
        began = time.perf_counter()
        for request, protect in made:
            try:
                book.create(admin, PathRequest(request.src, request.dst, request.bandwidth, request.start,
                                               request.end, protect=protect, src_prefix=request.src_prefix,
                                               dst_prefix=request.dst_prefix))
            except TsdnError:
                refused += 1
        took = time.perf_counter() - began
        changes = book.take_changes()
        per_switch = {}
        for switch in sorted(topology.switches):
            plan = book.switch_plan(switch)
            per_switch[switch] = len(plan.flows) + len(plan.groups) + len(plan.meters)
        messages = sum(1 for c in changes for s in c.steps if s.spec is not None)
        paths = len(book.installs.paths) if book.installs.paths is not None else None
        return {"per_switch": per_switch, "refused": refused, "core_s": round(took, 3), "messages": messages,
                "paths": paths}
    finally:
        ledger.close()


def main(count: int = COUNT, seed: int = 16) -> int:
    """Run both designs and print the result (last line JSON)."""
    return print_result("tables", lambda: run(count, seed))


def run(count: int, seed: int) -> dict:
    """Both designs' entries per switch, as the result object."""
    topology = Topology.load(builtin_topology(TOPOLOGY))
    made = requests(topology, count, seed)
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-tables-") as tmp:
        runs = {design: entries(topology, design, made, Path(tmp)) for design in (LABELS, PER_HOP)}
    labels, per_hop = runs[LABELS], runs[PER_HOP]
    fullest = {d: max(r["per_switch"].items(), key=lambda kv: kv[1]) for d, r in runs.items()}
    say(f"tables: {count} reservations on {TOPOLOGY} ({len(topology.switches)} switches), 1 in {PROTECTED_EVERY} "
        f"protected; refused: labels {labels['refused']}, per-hop {per_hop['refused']}")
    say(f"{'switch':>14} {'labels':>8} {'per-hop':>8}")
    for switch in sorted(topology.switches, key=lambda s: -per_hop["per_switch"][s]):
        say(f"{switch:>14} {labels['per_switch'][switch]:>8} {per_hop['per_switch'][switch]:>8}")
    say(f"fullest switch: labels {fullest[LABELS][0]} {fullest[LABELS][1]} entries ({labels['paths']} labelled "
        f"route directions), per-hop {fullest[PER_HOP][0]} {fullest[PER_HOP][1]}; a hardware agent holds about "
        f"{HARDWARE_TCAM}")
    result = {
        "bench": "tables",
        "topology": TOPOLOGY,
        "reservations": count,
        "protected_every": PROTECTED_EVERY,
        "fullest_switch_labels": fullest[LABELS][1],
        "fullest_switch_labels_name": fullest[LABELS][0],
        "fullest_switch_per_hop": fullest[PER_HOP][1],
        "fullest_switch_per_hop_name": fullest[PER_HOP][0],
        "entries_labels": labels["per_switch"],
        "entries_per_hop": per_hop["per_switch"],
        "total_labels": sum(labels["per_switch"].values()),
        "total_per_hop": sum(per_hop["per_switch"].values()),
        "labelled_route_directions": labels["paths"],
        "install_messages_labels": labels["messages"],
        "install_messages_per_hop": per_hop["messages"],
        "refused_labels": labels["refused"],
        "refused_per_hop": per_hop["refused"],
        "core_s_labels": labels["core_s"],
        "core_s_per_hop": per_hop["core_s"],
        "hardware_tcam_entries": HARDWARE_TCAM,
        "max_meters": MAX_METERS,
        "seed": seed,
    }
    return result
