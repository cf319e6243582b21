"""`tsdn bench failover`: kill -9 of the leader of three controllers sharing etcd, ring8 in Mininet.

Three `tsdn controller --store etcd://...` processes (each its own OpenFlow and gRPC port) run
over a real etcd (one member, or three with `--etcd-cluster 3`); every ring8 switch connects to
all three. Once the elected leader is MASTER on every switch, 100 reservations are made (and two
more carrying a `ping -i 0.01` between two DTNs), then the leader is killed with SIGKILL. Measured
from the kill:

- leader_kill_to_master_ms: until every switch answered the new leader's MASTER claim (its
  OFPRoleReply), as the new leader logs it (millisecond timestamps, same host); and
  leader_kill_to_master_in_ovsdb_ms, until Open vSwitch's own `role` column says so for every
  switch (polled every 10 ms; ovs-vswitchd writes that column lazily, up to seconds later);
- leader_kill_to_first_admission_ms: until a create, retried every 20 ms by a client given all
  three addresses, is admitted;
- reservations_lost: of the 102 made before (ACTIVE, or SCHEDULED for a later window: ring8 has
  56 DTN pairs and one reservation per pair at a time), those the new leader does not hold in the
  same state on the same path;
- pings_lost: probes without a reply from 1 s before the kill to 3 s after the first admission
  (the flows stay in the switches: traffic must not stop);
- overbooked: link directions booked beyond capacity at some instant, recomputed from the
  booking rows read straight from etcd after the run.

Baseline in the same run: admissions per second through the gRPC API of one controller with
SQLite (`--state`) against one with etcd (`--store`), on sc16 without switches, the same creates
from four client threads, interleaved rounds.

Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import datetime
import itertools
import json
import math
import os
import re
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.controller_process import ControllerProcess
from benchmarks.etcd_cluster import EtcdCluster
from benchmarks.northbound import machine
from benchmarks.report import free_port, print_result, say
from benchmarks.setup import ensure_ovs_without_network, mininet_missing, mn_clean, ovs
from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.core.topology import Topology
from sdn_app.ha.etcd import Etcd, b64, prefix_end, unb64
from sdn_app.ha.store import leader_key, load_rows, namespace_prefix
from topologies import builtin_topology
from tsdn.ha_controller import MASTER_CONFIRMED

M = 10**6
TOPOLOGY = "ring8"
CONTROLLERS = 3
RESERVATIONS = 100
BANDWIDTH = 100 * M
PING_BANDWIDTH = 10_000 * M  # 20 Mbit/s emulated: far above 10 ms probes
PING_INTERVAL_S = 0.01
PING_PAIR = ("dtn1", "dtn5")
RATE_TOPOLOGY = "sc16"
RATE_CLIENTS = 4
PRINCIPAL = "bench"
TOKEN = "bench-token-" + "0123456789abcdef" * 2
TARGETS = {"leader_kill_to_master_ms": 2000, "leader_kill_to_first_admission_ms": 3000, "etcd_vs_sqlite": 0.5}
TIMEOUT = 60.0
_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from .* icmp_seq=(\d+)")


def admissions_per_s(workdir: Path, store: str | None, count: int) -> float:
    """Creates admitted per second by one controller on `RATE_TOPOLOGY` (SQLite, or `store`)."""
    topology = Topology.load(builtin_topology(RATE_TOPOLOGY))
    dtns = sorted(topology.dtns)
    pairs = [(a, b) for a in dtns for b in dtns if a != b]
    controller = ControllerProcess(workdir, None, principal=PRINCIPAL, token=TOKEN, topology=RATE_TOPOLOGY,
                                   store=store, extra=("--no-http",))
    try:
        address = controller.start()
        clients = [TsdnClient(address, token=TOKEN, timeout=30) for _ in range(RATE_CLIENTS)]
        clients[0].create_reservation(*pairs[0], M)  # warm: the leader is elected, channels connected

        def make(index: int) -> None:
            src, dst = pairs[index % len(pairs)]
            clients[index % RATE_CLIENTS].create_reservation(src, dst, M)

        began = time.perf_counter()
        with ThreadPoolExecutor(RATE_CLIENTS) as pool:
            list(pool.map(make, range(1, count + 1)))
        took = time.perf_counter() - began
        for client in clients:
            client.close()
        return count / took
    finally:
        controller.stop()


def leader_address(etcd: Etcd) -> str:
    """The gRPC address the leader key names ('' when nobody leads)."""
    kvs, _ = etcd.range(leader_key(TOPOLOGY))
    return json.loads(unb64(kvs[0]["value"]))["address"] if kvs else ""


def masters() -> dict[str, str]:
    """Per bridge, the target of the controller it has as MASTER (absent: none)."""
    rows = json.loads(ovs("--format=json", "--columns=_uuid,target,role", "list", "Controller") or '{"data": []}')
    master_of = {row[0][1]: row[1] for row in rows["data"] if row[2] == "master"}
    found = {}
    for bridge in ovs("list-br").split():
        for uuid in re.findall(r"[0-9a-f-]{36}", ovs("get", "Bridge", bridge, "controller")):
            if uuid in master_of:
                found[bridge] = master_of[uuid]
    return found


def connections() -> int:
    """Controller connections that are up, over every bridge."""
    rows = json.loads(ovs("--format=json", "--columns=is_connected", "list", "Controller") or '{"data": []}')
    return sum(1 for row in rows["data"] if row[0] is True)


def wait_for(condition, what: str, timeout: float = TIMEOUT, interval: float = 0.05):
    """Poll `condition` until it returns something true; RuntimeError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:g} s")
        time.sleep(interval)  # polling a condition with a deadline
    return result


def overbookings(bookings: Iterable[Mapping[str, Any]], capacities: Mapping[str, int]) -> list[str]:
    """Every link direction that stored booking rows (bandwidth, start, end or None: until released,
    directions as JSON) book beyond its capacity at some instant: how much, and when first."""
    events: dict[str, list[tuple[float, int]]] = {}
    for row in bookings:
        end = math.inf if row["end"] is None else float(row["end"])
        for direction in json.loads(row["directions"]):
            events.setdefault(direction, []).extend([(float(row["start"]), row["bandwidth"]),
                                                     (end, -row["bandwidth"])])
    found = []
    for direction, changes in sorted(events.items()):
        level = 0
        for at, delta in sorted(changes):  # [start, end): at one instant, ends (negative) first
            level += delta
            capacity = capacities.get(direction, 0)
            if level > capacity:
                found.append(f"{direction}: {level / 1e9:g}G booked at {at} (capacity {capacity / 1e9:g}G)")
                break
    return found


class Admitter(threading.Thread):
    """Once `go` is set, tries a create every 20 ms until one is admitted; `admitted` is its time."""

    def __init__(self, addresses: list[str]):
        super().__init__(name="bench-admitter", daemon=True)
        self.client = TsdnClient(",".join(addresses), token=TOKEN, timeout=1.0, retries=0)
        self.admitted: float | None = None
        self.made: pb.Reservation | None = None
        self.go = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        self.go.wait()
        deadline = time.monotonic() + TIMEOUT
        tomorrow = time.time() + 86400
        while time.monotonic() < deadline:
            try:  # a window of its own each time: an attempt that timed out may have been admitted
                self.made = self.client.create_reservation("dtn2", "dtn6", BANDWIDTH,
                                                           start=tomorrow + 120 * len(self.errors), duration=60)
                self.admitted = time.time()
                return
            except ApiError as error:
                self.errors.append(error.code.name)
                time.sleep(0.02)  # the next attempt, as a data-management service would retry


def run(quick: bool = False, etcd_members: int = 1) -> dict:
    """The failover in Mininet and the admission-rate baseline; return the result object."""
    missing = mininet_missing()
    if missing:
        raise RuntimeError("tsdn bench failover needs " + ", ".join(missing))
    if etcd_members not in (1, 3):
        raise ValueError(f"--etcd-cluster: 1 or 3 members, got {etcd_members}")
    from mininet.log import setLogLevel

    from topologies.mininet_builder import default_scale, start_network

    setLogLevel("critical")
    topology = Topology.load(builtin_topology(TOPOLOGY))
    scale = default_scale(topology)
    facts = machine()
    ensure_ovs_without_network()
    rate_count = 150 if quick else 400
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-failover-") as tmp:
        workdir = Path(tmp)
        cluster = EtcdCluster(etcd_members, workdir / "etcd")
        try:
            etcd = Etcd(cluster.url)
            sqlite_rates, etcd_rates = [], []
            for n in range(rounds):  # interleaved: loopback and disk speed drift within minutes
                sqlite_rates.append(admissions_per_s(workdir / f"rate-sqlite-{n}", None, rate_count))
                etcd_rates.append(admissions_per_s(workdir / f"rate-etcd-{n}", cluster.url, rate_count))
                rate_keys = namespace_prefix(RATE_TOPOLOGY)  # the next round starts from an empty store
                etcd.txn([], [{"request_delete_range": {"key": b64(rate_keys),
                                                        "range_end": b64(prefix_end(rate_keys))}}])
            sqlite_rate, etcd_rate = statistics.median(sqlite_rates), statistics.median(etcd_rates)
            say(f"admissions per second: SQLite {sqlite_rate:.0f}, etcd ({etcd_members} member(s)) {etcd_rate:.0f} "
                f"(medians of {rounds}; {rate_count} creates from {RATE_CLIENTS} clients each)")
            failover = measure_failover(workdir, cluster, etcd, topology, scale, start_network)
        finally:
            cluster.close()
            mn_clean()
    ratio = round(etcd_rate / sqlite_rate, 3)
    result = {
        "bench": "failover",
        **failover,
        "admissions_per_s_etcd": round(etcd_rate, 1),
        "admissions_per_s_sqlite": round(sqlite_rate, 1),
        "etcd_vs_sqlite": ratio,
        "quick": quick,
        "etcd_members": etcd_members,
        "controllers": CONTROLLERS,
        "topology": TOPOLOGY,
        "emulation_scale": scale,
        "lease_ttl_s": 2,
        "targets": TARGETS,
        "machine": {**facts, "datapath": "userspace (netdev)"},
    }
    result["meets_targets"] = (
        failover["leader_kill_to_master_ms"] <= TARGETS["leader_kill_to_master_ms"]
        and failover["leader_kill_to_first_admission_ms"] <= TARGETS["leader_kill_to_first_admission_ms"]
        and failover["reservations_lost"] == failover["pings_lost"] == failover["overbooked"] == 0
        and ratio >= TARGETS["etcd_vs_sqlite"])
    say(f"targets (MASTER <= 2 s, first admission <= 3 s, nothing lost, etcd >= 0.5x SQLite): "
        f"{'met' if result['meets_targets'] else 'missed'}")
    return result


def measure_failover(workdir: Path, cluster: EtcdCluster, etcd: Etcd, topology: Topology, scale: float,
                     start_network) -> dict:
    """Three controllers, ring8, 100 reservations and a 10 ms ping; kill -9 the leader; what it cost."""
    of_ports = [free_port() for _ in range(CONTROLLERS)]
    controllers = [ControllerProcess(workdir / f"controller-{i}", ("127.0.0.1", port), scale, principal=PRINCIPAL,
                                     token=TOKEN, topology=TOPOLOGY, store=cluster.url, extra=("--no-http",))
                   for i, port in enumerate(of_ports)]
    try:
        addresses = [controller.start() for controller in controllers]
        with start_network(TOPOLOGY, scale, controllers=[("127.0.0.1", port) for port in of_ports]) as net:
            bridges = len(topology.switches)
            wait_for(lambda: connections() == bridges * CONTROLLERS, "every switch connected to every controller")
            leader = addresses.index(wait_for(lambda: leader_address(etcd), "a leader elected"))
            leader_target = f"tcp:127.0.0.1:{of_ports[leader]}"
            wait_for(lambda: list(masters().values()) == [leader_target] * bridges, "the leader MASTER everywhere")
            say(f"failover: {TOPOLOGY} in Mininet, {CONTROLLERS} controllers on etcd, controller {leader} leads; "
                f"making {RESERVATIONS} reservations")
            client = TsdnClient(",".join(addresses), token=TOKEN, timeout=10)
            dtns = sorted(topology.dtns)
            pairs = [(a, b) for a in dtns for b in dtns if a != b and {a, b} != set(PING_PAIR)]
            made = [client.create_reservation(*PING_PAIR, PING_BANDWIDTH),
                    client.create_reservation(*reversed(PING_PAIR), PING_BANDWIDTH)]
            # One reservation per DTN pair at a time: beyond ring8's 54 other pairs, the next ones are
            # booked for later windows (SCHEDULED), as a day's plan of transfers would be.
            start = time.time()
            made += [client.create_reservation(*pairs[i % len(pairs)], BANDWIDTH,
                                               start=None if i < len(pairs) else start + 3600 * (i // len(pairs)),
                                               duration=1800)
                     for i in range(RESERVATIONS)]
            names = [r.name for r in made]
            expected = {r.name: pb.ACTIVE if r.state in (pb.ACTIVE, pb.PROVISIONING) else r.state for r in made}
            wait_for(lambda: all(client.get_reservation(n).state == expected[n] for n in names),
                     "every reservation ACTIVE (or SCHEDULED for later)", interval=0.2)
            paths = {r.name: tuple(client.get_reservation(r.name).path.links) for r in made}
            output = workdir / "ping.txt"
            with output.open("w") as sink:
                ping = net.host(PING_PAIR[0]).popen(["ping", "-D", "-n", "-i", f"{PING_INTERVAL_S:g}",
                                                     topology.dtns[PING_PAIR[1]].ipv4], stdout=sink)
            admitter = Admitter(addresses)
            admitter.start()
            try:
                wait_for(lambda: len(_replies(output)) >= 100, "a second of ping replies before the kill")
                killed = time.time()
                os.kill(controllers[leader].pid, signal.SIGKILL)
                admitter.go.set()
                others = {f"tcp:127.0.0.1:{port}" for i, port in enumerate(of_ports) if i != leader}
                confirmed = wait_for(lambda: _master_confirmed(controllers, leader, bridges),
                                     "the new leader's MASTER confirmed by every switch", interval=0.01)
                found = wait_for(lambda: _all_master(others, bridges), "a new MASTER in every switch's OVSDB",
                                 interval=0.01)
                in_ovsdb = time.time()
                admitter.join(TIMEOUT)
                if admitter.admitted is None:
                    raise RuntimeError(f"no create admitted within {TIMEOUT:g} s of the kill: {admitter.errors[-5:]}")
                settle = admitter.admitted + 3.0
                wait_for(lambda: time.time() >= settle, "3 s of ping after the first admission", interval=0.1)
            finally:
                ping.send_signal(signal.SIGINT)
                ping.wait(10)
            new_leader = leader_address(etcd)
            lost = [name for name in names if (r := client.get_reservation(name)).state != expected[name]
                    or tuple(r.path.links) != paths[name]]
            stamps = _replies(output)
            window = [seq for stamp, seq in stamps if killed - 1.0 <= stamp <= settle]
            pings_lost = (max(window) - min(window) + 1 - len(set(window))) if window else -1
            gaps = [b - a for (a, _), (b, _) in itertools.pairwise(stamps) if a >= killed - 1.0]
            say(f"failover: new leader {new_leader} ({next(iter(set(found.values())))} MASTER) confirmed by every "
                f"switch {(confirmed - killed) * 1000:.0f} ms after the kill (in OVSDB after "
                f"{(in_ovsdb - killed) * 1000:.0f} ms), first admission after "
                f"{(admitter.admitted - killed) * 1000:.0f} ms ({len(admitter.errors)} refused before); "
                f"{len(lost)} reservation(s) lost, {pings_lost} ping(s) lost, longest gap "
                f"{max(gaps, default=0) * 1000:.0f} ms")
            client.close()
            admitter.client.close()
            return {
                "leader_kill_to_master_ms": round((confirmed - killed) * 1000, 1),
                "leader_kill_to_master_in_ovsdb_ms": round((in_ovsdb - killed) * 1000, 1),
                "leader_kill_to_first_admission_ms": round((admitter.admitted - killed) * 1000, 1),
                "reservations_lost": len(lost),
                "pings_lost": pings_lost,
                "overbooked": len(overbookings(load_rows(etcd, TOPOLOGY)[0]["bookings"], topology.capacities())),
                "reservations": len(names),
                "ping_interval_ms": PING_INTERVAL_S * 1000,
                "longest_ping_gap_ms": round(max(gaps, default=0) * 1000, 1),
                "refused_before_first_admission": len(admitter.errors),
            }
    finally:
        for controller in controllers:
            controller.stop()


def _master_confirmed(controllers: list[ControllerProcess], killed: int, bridges: int) -> float | None:
    """When a surviving controller logged that every switch confirmed its MASTER claim (epoch s)."""
    for i, controller in enumerate(controllers):
        for line in list(controller.tail) if i != killed else ():
            if MASTER_CONFIRMED in line and f" {bridges} of {bridges} " in line:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                return stamp.timestamp()  # naive: local time, as logging writes it
    return None


def _all_master(targets: set[str], bridges: int) -> dict[str, str] | None:
    found = masters()
    return found if len(found) == bridges and set(found.values()) <= targets and len(set(found.values())) == 1 \
        else None


def _replies(output: Path) -> list[tuple[float, int]]:
    return [(float(m.group(1)), int(m.group(2))) for line in output.read_text().splitlines()
            if (m := _REPLY.match(line))]


def main(quick: bool = False, etcd_members: int = 1) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    return print_result("failover", lambda: run(quick=quick, etcd_members=etcd_members))
