"""`tsdn bench sense`: SENSE service instances created, provisioned and cancelled per second by 16
concurrent clients against a real controller, and the time from provision to flows installed,
against tsdn's own gRPC path (a held reservation committed, then released) in the same run.

A real `tsdn controller` subprocess on sc16 serves /sense/api (`--listen-http`, `--domain`,
`--hold-timeout 600`, a tokens file with the bench's service token). Each of `clients` threads is
a `sense-o-api` client of its own (`WorkflowCombinedApi` over a `RequestWrapper` given the token
as ACCESS_TOKEN: like the Rucio-SENSE DMM, a new HTTP connection per call), and works through its
share of the instances, each on its own ordered DTN pair at 100 Mbit/s (guaranteedCapped, a plain
dnc intent), one step at a time for all of them, each step timed from its first call to its last
answer:

- create: `GET /instance` and `POST /instance/UUID` (CREATE - COMPILED: a held reservation);
- provision: `PUT /instance/UUID/provision?sync=true`, as the DMM provisions: answered CREATE -
  READY once every hop answered its barrier (at once on a ledger-only controller), so the call is
  the time from provision to flows installed; the arrival of the reservation's ACTIVE event on one
  WatchReservations stream opened before anything is measured (the approach of `tsdn bench
  setup`) is shown too (`provision_to_active_event_ms_*`);
- cancel: `PUT /instance/UUID/cancel?sync=true` (CANCEL - READY: released);
- delete: `PUT /instance/UUID/delete` (not a target; its rate is shown).

Baseline, same pairs, same threads (each a `TsdnClient`): CreateReservation with `hold`
(create), CommitReservation (provision: it has no sync, so each client waits for the ACTIVE
event on the stream before its next commit, one provisioning in flight per client as with
sync=true; the time runs from the call to that event), DeleteReservation (cancel).

Two runs: on a ledger-only controller (`--no-openflow`: the API's own cost), and, when the machine
has root, Mininet and Open vSwitch (`tsdn bench setup`'s needs), sc16 in Mininet with the
controller on its switches (flows, meters and barriers on real Open vSwitch); `--ledger-only`
skips that one. With switches a DTN pair takes one reservation without prefixes at a time: every
instance of a step has its own pair (sc16: 650 ordered pairs; more instances are cut to that).

Human lines go to stderr; the last line printed to stdout is one JSON object:
`{"bench": "sense", "created_per_s": ..., "provisioned_per_s": ..., "cancelled_per_s": ...,
"provision_to_flows_ms_p50": ..., "grpc": {...}, ...}`.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory

from benchmarks.controller_process import ControllerProcess
from benchmarks.northbound import latency_summary, machine, percentile_ms
from benchmarks.report import free_port, print_result, say
from benchmarks.setup import (
    Arrival,
    Watcher,
    ensure_ovs_without_network,
    mininet_missing,
    on_switches,
    ordered_pairs,
)
from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.core.topology import Topology
from topologies import builtin_topology

M = 10**6
MBPS = 100  # each instance (and reservation): 100 Mbit/s
TOPOLOGY = "sc16"
DOMAIN = "bench.sense.example.net"
PRINCIPAL = "bench"
TOKEN = "bench-sense-token-" + "0123456789abcdef" * 2
ARRIVAL_TIMEOUT = 60.0
INSTANCES, QUICK_INSTANCES = 600, 96


class SenseWatcher(Watcher):
    """`tsdn bench setup`'s watch (each reservation's first ACTIVE or FAILED event, by reservation
    id in `arrivals`), indexing them by SENSE instance (the `tsdn/sense` label) in `by_instance` too."""

    def __init__(self, address: str):
        super().__init__(address, token=TOKEN, include_existing=False)
        self.by_instance: dict[str, Arrival] = {}

    def arrived(self, event: pb.ReservationEvent, arrival: Arrival) -> None:
        if (instance := event.reservation.labels.get("tsdn/sense")):
            self.by_instance.setdefault(instance, arrival)

    def warm_up(self, pair: tuple[str, str]) -> None:
        """Once a reservation made now arrives, the stream is subscribed (and, with switches, the
        path is warm); it is released before anything is measured."""
        for _ in range(int(ARRIVAL_TIMEOUT / 0.5)):
            made = self.client.create_reservation(*pair, MBPS * M)
            if self.wait([made.id], 0.5):
                self.client.delete_reservation(made.id)
                return
            self.client.delete_reservation(made.id)  # made before the stream was up: try again
        raise RuntimeError(f"the watch stream saw none of its warm-up reservations within {ARRIVAL_TIMEOUT:g} s")

    def to_active(self, began: dict[str, float], index: dict[str, Arrival]) -> tuple[list[float], int, bool]:
        """Wait for every key of `began` in `index`: (seconds from its `began` to its ACTIVE event,
        for each ACTIVE one; how many are not ACTIVE; whether all arrived)."""
        arrived = self.wait(list(began), ARRIVAL_TIMEOUT, index)
        with self.cond:
            active = [index[k].at - began[k] for k in began if k in index and index[k].state == pb.ACTIVE]
        return active, len(began) - len(active), arrived


@dataclass
class Step:
    """One step for every instance: each call's start and end, errors, the wall time."""

    name: str
    began: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0

    def rate(self) -> float | None:
        done = len(self.latencies)
        return round(done / self.wall, 1) if done and self.wall > 0 else None

    def summary(self) -> dict:
        return {"per_s": self.rate(), "ok": len(self.latencies), "errors": len(self.errors),
                "first_error": self.errors[0] if self.errors else None, **latency_summary(self.latencies)}


def run_step(name: str, items: list, clients: int, call: Callable[[int, object], None]) -> Step:
    """`call(thread, item)` for every item, `clients` threads each taking its share in order."""
    step = Step(name)
    lock = threading.Lock()
    shares = [items[i::clients] for i in range(clients)]

    def work(thread: int) -> None:
        for item in shares[thread]:
            began = time.perf_counter()
            try:
                call(thread, item)
            except Exception as error:  # a refused call is counted and named, the run goes on
                with lock:
                    step.errors.append(f"{type(error).__name__}: {str(error)[:300]}")
                continue
            with lock:
                step.began.append(began)
                step.latencies.append(time.perf_counter() - began)
    started = time.perf_counter()
    with ThreadPoolExecutor(clients, thread_name_prefix=f"bench-{name}") as pool:
        list(pool.map(work, range(clients)))
    step.wall = time.perf_counter() - started
    return step


def dnc_intent(topology_urn: Callable[[str], str], src: str, dst: str) -> str:
    return json.dumps({"service": "dnc", "alias": f"bench {src} {dst}", "data": {"connections": [{
        "name": "Connection 1", "bandwidth": {"qos_class": "guaranteedCapped", "capacity": str(MBPS)},
        "terminals": [{"uri": topology_urn(src), "vlan_tag": "any"}, {"uri": topology_urn(dst), "vlan_tag": "any"}]}]}})


def sense_run(base: str, watcher: SenseWatcher, pairs: list[tuple[str, str]], clients: int) -> dict:
    """Create, provision (to ACTIVE), cancel and delete one instance per pair through the SENSE API."""
    from sense.client.requestwrapper import RequestWrapper
    from sense.client.workflow_combined_api import WorkflowCombinedApi

    config = {"AUTH_ENDPOINT": f"{base}/auth/token", "API_ENDPOINT": base, "CLIENT_ID": "bench", "SECRET": "unused",
              "ACCESS_TOKEN": TOKEN, "verify": False}
    apis = [WorkflowCombinedApi(req_wrapper=RequestWrapper(config=dict(config))) for _ in range(clients)]
    uuids: dict[tuple[str, str], str] = {}
    lock = threading.Lock()

    def urn(dtn: str) -> str:
        return f"urn:ogf:network:{DOMAIN}:{dtn}"

    def create(thread: int, pair: tuple[str, str]) -> None:
        api = apis[thread]
        uuid = api.instance_new()
        answer = api.instance_create(dnc_intent(urn, *pair), si_uuid=uuid)
        if answer.get("state") != "CREATE - COMPILED":
            raise RuntimeError(f"created {answer.get('state')}")
        with lock:
            uuids[pair] = uuid
    created = run_step("create", pairs, clients, create)
    live = [p for p in pairs if p in uuids]
    provision_began: dict[str, float] = {}

    def provision(thread: int, pair: tuple[str, str]) -> None:
        began = time.perf_counter()
        with lock:
            provision_began[uuids[pair]] = began
        status = apis[thread].instance_operate("provision", si_uuid=uuids[pair], sync="true")
        if status != "CREATE - READY":  # sync=true: answered once every hop is confirmed
            raise RuntimeError(f"provisioned: {status}")
    provisioned = run_step("provision", live, clients, provision)
    event, not_active, arrived = watcher.to_active(provision_began, watcher.by_instance)

    def cancel(thread: int, pair: tuple[str, str]) -> None:
        status = apis[thread].instance_operate("cancel", si_uuid=uuids[pair], sync="true", force="true")
        if status != "CANCEL - READY":
            raise RuntimeError(f"cancelled: {status}")
    cancelled = run_step("cancel", live, clients, cancel)
    deleted = run_step("delete", live, clients, lambda thread, pair: apis[thread].instance_delete(si_uuid=uuids[pair]))
    return result_of(created, provisioned, provisioned.latencies, event, not_active, arrived, cancelled, deleted)


def grpc_run(address: str, watcher: SenseWatcher, pairs: list[tuple[str, str]], clients: int) -> dict:
    """The same work over gRPC: a held reservation per pair, committed (to ACTIVE), released."""
    tsdn = [TsdnClient(address, token=TOKEN, timeout=30) for _ in range(clients)]
    names: dict[tuple[str, str], str] = {}
    lock = threading.Lock()
    try:
        def create(thread: int, pair: tuple[str, str]) -> None:
            reservation = tsdn[thread].create_reservation(*pair, MBPS * M, hold=True)
            with lock:
                names[pair] = reservation.id
        created = run_step("create", pairs, clients, create)
        live = [p for p in pairs if p in names]
        commit_began: dict[str, float] = {}

        def commit(thread: int, pair: tuple[str, str]) -> None:
            """Committed, then waited for like sync=true: one provisioning in flight per client."""
            reservation = names[pair]
            began = time.perf_counter()
            with lock:
                commit_began[reservation] = began
            tsdn[thread].commit_reservation(reservation)
            if not watcher.wait([reservation], ARRIVAL_TIMEOUT):
                raise RuntimeError(f"{reservation}: no ACTIVE event within {ARRIVAL_TIMEOUT:g} s")
            if watcher.arrivals[reservation].state != pb.ACTIVE:
                raise RuntimeError(f"{reservation}: FAILED")
        provisioned = run_step("provision", live, clients, commit)
        to_flows, not_active, arrived = watcher.to_active(commit_began, watcher.arrivals)
        cancelled = run_step("cancel", live, clients, lambda thread, pair: tsdn[thread].delete_reservation(names[pair]))
        return result_of(created, provisioned, to_flows, to_flows, not_active, arrived, cancelled, None)
    finally:
        for client in tsdn:
            client.close()


def result_of(created: Step, provisioned: Step, to_flows: list[float], to_event: list[float], not_active: int,
              arrived: bool, cancelled: Step, deleted: Step | None) -> dict:
    """One run's figures: `to_flows`, each provisioning's seconds to flows installed; `to_event`, to
    its ACTIVE event on the watch."""
    active = len(to_flows)
    out = {
        "created_per_s": created.rate(),
        "provisioned_per_s": round(active / provisioned.wall, 1) if active and provisioned.wall > 0 else None,
        "cancelled_per_s": cancelled.rate(),
        "provision_to_flows_ms_p50": percentile_ms(to_flows, 0.5),
        "provision_to_flows_ms_p99": percentile_ms(to_flows, 0.99),
        "provision_to_flows_ms_max": percentile_ms(to_flows, 1.0),
        "active": active, "not_active": not_active, "all_arrived": arrived,
        "steps": {s.name: s.summary() for s in (created, provisioned, cancelled, deleted) if s is not None},
    }
    if deleted is not None:
        out["deleted_per_s"] = deleted.rate()
    out["provision_to_active_event_ms_p50"] = percentile_ms(to_event, 0.5)
    out["provision_to_active_event_ms_p99"] = percentile_ms(to_event, 0.99)
    return out


def both(address: str, base: str, pairs: list[tuple[str, str]], spare: tuple[str, str], clients: int,
         settle: Callable[[], object] | None, label: str) -> dict:
    """The SENSE run and its gRPC baseline on one controller, one watch open throughout (`spare`: a
    pair for the watch's warm-up)."""
    watcher = SenseWatcher(address)
    watcher.start()
    try:
        watcher.warm_up(spare)
        if settle is not None:
            settle()
        say(f"{label}: SENSE: {len(pairs)} instances, {clients} sense-o-api clients")
        sense = sense_run(base, watcher, pairs, clients)
        say(f"  {sense['created_per_s']} created/s, {sense['provisioned_per_s']} provisioned/s (sync=true: to "
            f"READY), {sense['cancelled_per_s']} cancelled/s; provision to flows p50 "
            f"{sense['provision_to_flows_ms_p50']} ms, p99 {sense['provision_to_flows_ms_p99']} ms (to the ACTIVE "
            f"event p50 {sense['provision_to_active_event_ms_p50']} ms)")
        if settle is not None:
            settle()
        say(f"{label}: gRPC baseline: {len(pairs)} held reservations, committed, released, {clients} clients")
        grpc = grpc_run(address, watcher, pairs, clients)
        say(f"  {grpc['created_per_s']} created/s, {grpc['provisioned_per_s']} committed/s (each to its ACTIVE event), "
            f"{grpc['cancelled_per_s']} released/s; commit to flows p50 {grpc['provision_to_flows_ms_p50']} ms, "
            f"p99 {grpc['provision_to_flows_ms_p99']} ms")
        if settle is not None:
            settle()
        return {"sense": sense, "grpc": grpc}
    finally:
        watcher.stop()


def controller_args(http: int) -> tuple[str, ...]:
    return ("--listen-http", f"127.0.0.1:{http}", "--domain", DOMAIN, "--hold-timeout", "600")


def run(quick: bool = False, instances: int | None = None, clients: int = 16, seed: int = 16,
        ledger_only: bool = False) -> dict:
    topology = Topology.load(builtin_topology(TOPOLOGY))
    every_pair = ordered_pairs(sorted(topology.dtns), random.Random(seed))
    asked = instances or (QUICK_INSTANCES if quick else INSTANCES)
    spare = every_pair[-1]  # the watch's warm-up (released before anything is measured)
    pairs = every_pair[:asked]
    if len(pairs) < asked:
        say(f"sense: {asked} instances asked, but {TOPOLOGY} has only {len(every_pair)} ordered DTN pairs (one "
            f"reservation without prefixes each at a time with switches): {len(pairs)}")
    results: dict = {}
    skipped = None
    with TemporaryDirectory(prefix="tsdn-bench-sense-") as tmp:
        workdir = Path(tmp)
        http = free_port()
        ledger = ControllerProcess(workdir / "ledger", principal=PRINCIPAL, token=TOKEN, topology=TOPOLOGY,
                                   extra=controller_args(http))
        try:
            address = ledger.start()
            results["ledger_only"] = both(address, f"http://127.0.0.1:{http}/sense/api", pairs, spare, clients, None,
                                          "ledger only")
        finally:
            ledger.stop()
        missing = mininet_missing()
        if ledger_only or missing:
            skipped = "--ledger-only" if ledger_only else "needs " + ", ".join(missing)
            say(f"sense: no run on switches ({skipped})")
        else:
            results["openflow"] = switched(workdir, topology, pairs, spare, clients)
    return summary(results, skipped, asked, len(pairs), clients, quick)


def switched(workdir: Path, topology: Topology, pairs: list[tuple[str, str]], spare: tuple[str, str],
             clients: int) -> dict:
    """The same runs with sc16 in Mininet under the controller (real flows, meters, barriers)."""
    from mininet.log import setLogLevel

    from topologies.mininet_builder import default_scale

    setLogLevel("critical")
    scale = default_scale(topology)
    ensure_ovs_without_network()
    http = free_port()
    with on_switches(workdir / "openflow", topology, scale, principal=PRINCIPAL, token=TOKEN,
                     extra=controller_args(http)) as running:
        outcome = both(running.address, f"http://127.0.0.1:{http}/sense/api", pairs, spare, clients,
                       running.settle, f"{TOPOLOGY} in Mininet (scale {scale:g})")
    outcome["scale"] = scale
    return outcome


def summary(results: dict, skipped: str | None, asked: int, instances: int, clients: int, quick: bool) -> dict:
    ledger = results["ledger_only"]
    flows = results.get("openflow") or ledger
    headline = {key: ledger["sense"][key] for key in ("created_per_s", "provisioned_per_s", "cancelled_per_s")}
    return {
        "bench": "sense", "quick": quick, "clients": clients, "instances": instances, "instances_asked": asked,
        "mbps_each": MBPS, "topology": TOPOLOGY, **headline,
        "provision_to_flows_ms_p50": flows["sense"]["provision_to_flows_ms_p50"],
        "provision_to_flows_ms_p99": flows["sense"]["provision_to_flows_ms_p99"],
        "provision_to_flows_measured_on": "openflow" if "openflow" in results else "ledger_only",
        "grpc": {key: ledger["grpc"][key] for key in ("created_per_s", "provisioned_per_s", "cancelled_per_s")}
        | {"provision_to_flows_ms_p50": flows["grpc"]["provision_to_flows_ms_p50"],
           "provision_to_flows_ms_p99": flows["grpc"]["provision_to_flows_ms_p99"]},
        "ledger_only": ledger, "openflow": results.get("openflow"), "openflow_skipped": skipped,
        "machine": machine(),
    }


def main(quick: bool = False, instances: int | None = None, clients: int = 16, seed: int = 16,
         ledger_only: bool = False) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    for name, value in (("--instances", instances), ("--clients", clients)):
        if value is not None and value < 1:
            say(f"tsdn bench sense: {name} must be at least 1")
            return 2
    began = time.perf_counter()

    def produce() -> dict:
        result = run(quick=quick, instances=instances, clients=clients, seed=seed, ledger_only=ledger_only)
        result["seconds"] = round(time.perf_counter() - began, 1)
        say(f"tsdn bench sense: done in {result['seconds']:.0f} s")
        return result
    return print_result("sense", produce)
