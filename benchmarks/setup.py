"""`tsdn bench setup`: from CreateReservation to every hop barrier-confirmed, on sc16 in Mininet.

sc16 runs in Mininet (userspace Open vSwitch, `default_scale`), controlled by a real `tsdn
controller` subprocess (`--listen-openflow`, `--emulation-scale`, a tokens file with a service
token); the benchmark waits until all 14 switches are connected. One watch on every
reservation (`include_existing`) is opened before anything is measured; a reservation's setup
time runs from the CreateReservation call to the arrival of its ACTIVE event on that watch
(the controller sends ACTIVE only once every hop has answered its barrier).

One live reservation per ordered DTN pair: with switches the controller refuses a second
reservation for a pair that already has one overlapping in time (FAILED_PRECONDITION: the
switches tell reservations apart by the pair's addresses). So every reservation alive at the
same time gets its own ordered pair, drawn from the pairs shuffled with the seed (sc16: 26 DTNs,
650 ordered pairs), and each phase's reservations are released before the next phase begins:

- warm-up: 10 (--quick 3) made ACTIVE one by one (switches may still be finishing their
  handshake), then released; with switches, the benchmark waits until their flows are gone;
- sequential: N reservations (200; --quick 50) one after the other, each between its own DTN
  pair at 100 Mbit/s, kept until the phase ends, so the flow tables grow as the phase runs (the
  p50 of each quarter shows whether that costs anything); then all N are released at once from
  the client threads (timed, not a target: `release_all_s`), and the benchmark waits until every
  tsdn flow is gone (`flows_gone_after_release_s`);
- batch: M more (1000; --quick 200) submitted at once by 16 client threads, on M distinct pairs
  (shuffled again); the total time until every one is ACTIVE (or FAILED: counted), and each
  one's own setup time. sc16 has only 650 ordered pairs: asked for more (the default 1000), the
  batch is as many as there are pairs, `batch` says how many, and `batch_1000_s` is the batch's
  time scaled linearly to 1,000 (`batch_1000_s_extrapolated` true, and said on stderr; also
  with --quick or --batch other than 1000). Then these are released too (`batch_release_s`),
  and the flows left at the end are counted (`flows_left_after_release`, 0 when all is well).
--sequential beyond the number of pairs is cut to it the same way.

The Mininet phases run twice, each on a fresh network and controller: with label-switched paths
(`--flow-design labels`, the default: the keys without a prefix), with every reservation's
flows on every hop (`--flow-design per-hop`, the design before labels: the `per_hop_*` keys), and
with labels but plain flow-mods and barriers instead of OpenFlow bundles (`--no-bundles`: the
`no_bundles_*` keys).
Both controllers run with `--label-grace 0s`, so the entries of a released phase are gone before
the next and every phase pays for installing its paths (the worst case for labels).

Baselines in the same run: the per-hop design, and the same phases, on the same pairs, on a
controller without --listen-openflow (ledger only: ACTIVE at once, no switches), so the share of
the switches is visible.

- campaign: 1,000 (--quick 200) more in one CreateReservations call (the batch RPC, waiting
  for the flows), random pairs with IPv6 prefixes of their own (several per DTN pair, as a
  Rucio campaign has), from the call to its answer with every admitted one ACTIVE or FAILED
  (`campaign_1000_s`, the issue's target: at most 1 s); then released.

Where the time goes, per reservation: `rpc` (the CreateReservation round trip), `after_reply`
(reply to ACTIVE event), and from the controller's own timestamps (same machine, same wall
clock): `server_provision` (the reservation's create_time to its ACTIVE event's time: the
provisioner queue, flow-mods and barriers, the report back through the core) and `delivery`
(ACTIVE event time to its arrival here).

Human lines go to stderr; the last line printed to stdout is one JSON object:
`{"bench": "setup", "p50_ms": ..., "p99_ms": ..., "batch_1000_s": ..., ...}`.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.controller_process import ControllerProcess
from benchmarks.northbound import latency_summary, machine, percentile_ms, process_cpu
from benchmarks.report import free_port, print_result, say
from northbound.client import ApiError, TsdnClient, reservation_request
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.core.topology import Topology
from topologies import builtin_topology, open_vswitch

M = 10**6
BANDWIDTH = 100 * M
TOPOLOGY = "sc16"
PRINCIPAL = "bench"
TOKEN = "bench-token-" + "fedcba9876543210" * 2
TARGETS = {"p50_ms": 5, "p99_ms": 20, "campaign_1000_s": 1.0}
ONOS_MS_PER_INTENT = 15.5
CONNECT_TIMEOUT = 60.0
SETUP_TIMEOUT = 30.0
FINAL = (pb.ACTIVE, pb.FAILED)
DESIGNS = ("labels", "per-hop", "labels-no-bundles")  # the design measured, then the baselines
RUNS = {"labels": ("--flow-design", "labels"), "per-hop": ("--flow-design", "per-hop"),
        "labels-no-bundles": ("--flow-design", "labels", "--no-bundles")}


@dataclass(frozen=True)
class Sizes:
    """How many reservations each phase makes."""

    sequential: int
    batch: int
    warmup: int
    sequential_asked: int
    batch_asked: int
    campaign: int = 1000

    @classmethod
    def for_run(cls, quick: bool, sequential: int | None, batch: int | None, pairs: int) -> Sizes:
        """The phases' sizes, each cut to `pairs` (one live reservation per ordered DTN pair)."""
        sequential = sequential if sequential is not None else 50 if quick else 200
        batch = batch if batch is not None else 200 if quick else 1000
        return cls(sequential=min(sequential, pairs), batch=min(batch, pairs), warmup=min(3 if quick else 10, pairs),
                   sequential_asked=sequential, batch_asked=batch, campaign=200 if quick else 1000)


Pair = tuple[str, str]


def ordered_pairs(dtns: list[str], rng: random.Random) -> list[Pair]:
    """Every ordered pair of distinct DTNs, shuffled by `rng`."""
    pairs = [(src, dst) for src in dtns for dst in dtns if src != dst]
    rng.shuffle(pairs)
    return pairs


# -- the controller under test ------------------------------------------------------------




# -- Mininet and Open vSwitch -------------------------------------------------------------


def mininet_missing() -> list[str]:
    """What this machine lacks to run sc16 in Mininet."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    if importlib.util.find_spec("mininet") is None:
        missing.append("the mininet Python package")
    missing += [f"{tool}" for tool in ("mn", "ovs-vsctl", "ovs-ofctl") if shutil.which(tool) is None]
    return missing


def ovs(*args: str, timeout: float = 10) -> str:
    return subprocess.run(["ovs-vsctl", "--timeout=5", *args], capture_output=True, text=True,
                          timeout=timeout).stdout


def ensure_ovs_without_network() -> None:
    """`ensure_ovs`, then RuntimeError when Open vSwitch already has bridges (another network runs)."""
    ensure_ovs()
    bridges = ovs("list-br").split()
    if bridges:
        raise RuntimeError(f"Open vSwitch already has bridges ({', '.join(bridges)}): another Mininet network "
                           "is running; stop it (or run `mn -c` if it is a leftover) and try again")


def ensure_ovs() -> None:
    """Open vSwitch in userspace, with its packet socket as the emulation needs it (topologies.open_vswitch)."""
    open_vswitch.ensure()


def connected_bridges() -> set[str]:
    """Bridges whose controller connection is up."""
    rows = json.loads(ovs("--format=json", "--columns=_uuid,is_connected", "list", "Controller") or '{"data": []}')
    controllers = {row[0][1] for row in rows["data"] if row[1] is True}
    bridges = set()
    for name in ovs("list-br").split():
        if any(c in ovs("get", "Bridge", name, "controller") for c in controllers):
            bridges.add(name)
    return bridges


def ovs_vswitchd_pid() -> int | None:
    for path in ("/var/run/openvswitch/ovs-vswitchd.pid", "/run/openvswitch/ovs-vswitchd.pid"):
        with contextlib.suppress(OSError, ValueError):
            return int(Path(path).read_text().strip())
    return None


def mn_clean() -> None:
    """`mn -c`: every bridge, `*-eth*` link and Mininet process goes (also /tmp/*.log and /tmp/*.out)."""
    subprocess.run(["mn", "-c"], capture_output=True, timeout=120, check=False)


@contextlib.contextmanager
def cpu_use(pids: dict[str, int | None], into: dict, key: str):
    """into[key] = {name: CPU cores busy on average while the block runs}; None pid: this process."""
    began = time.perf_counter()
    before = {name: process_cpu(pid) for name, pid in pids.items()}
    yield
    wall = time.perf_counter() - began
    after = {name: process_cpu(pid) for name, pid in pids.items()}
    into[key] = {name: round((after[name] - before[name]) / wall, 2)
                 if before[name] is not None and after[name] is not None and wall > 0 else None for name in pids}


# -- watching for ACTIVE ------------------------------------------------------------------


def seconds_of(stamp) -> float:
    return stamp.seconds + stamp.nanos / 1e9


@dataclass(frozen=True)
class Arrival:
    """A reservation's first ACTIVE or FAILED event, as it arrived here."""

    state: int
    at: float  # perf_counter here
    wall: float  # time.time() here
    server_time: float  # the event's time at the controller
    reason: str


class Watcher:
    """One WatchReservations stream on every reservation, noting each one's first ACTIVE/FAILED
    arrival by reservation id (`arrivals`); `arrived` is called for each such event, so a subclass
    can index them by something else too (`tsdn bench sense`: the SENSE instance)."""

    def __init__(self, address: str, token: str = TOKEN, include_existing: bool = True):
        self.client = TsdnClient(address, token=token, timeout=10)
        self.include_existing = include_existing
        self.cond = threading.Condition()
        self.arrivals: dict[str, Arrival] = {}
        self.error: str | None = None
        self.events = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def arrived(self, event: pb.ReservationEvent, arrival: Arrival) -> None:
        """Called (holding `cond`) for every ACTIVE or FAILED event, after `arrivals` has noted it."""

    def _run(self) -> None:
        try:
            for event in self.client.watch(include_existing=self.include_existing):
                at, wall = time.perf_counter(), time.time()
                self.events += 1
                # A snapshot (include_existing) can only be a warm-up reservation made before the
                # stream was up: once anything has arrived, the subscription exists, and every later
                # reservation arrives as a live event.
                if event.state in FINAL:
                    arrival = Arrival(event.state, at, wall, seconds_of(event.time), event.reason)
                    with self.cond:
                        self.arrivals.setdefault(event.reservation.id, arrival)
                        self.arrived(event, arrival)
                        self.cond.notify_all()
        except (ApiError, ValueError) as error:
            if not self._stopping:
                self.error = str(error)
        finally:
            with self.cond:
                self.cond.notify_all()

    def wait(self, keys: set[str] | list[str], timeout: float, index: dict[str, Arrival] | None = None) -> bool:
        """Wait until every one of `keys` is in `index` (default `arrivals`: reservation ids); False at
        the deadline or when the stream ended."""
        table = self.arrivals if index is None else index
        wanted = set(keys)
        deadline = time.monotonic() + timeout
        with self.cond:
            while not wanted <= table.keys():
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self.cond.wait(min(left, 1.0))
        return True

    def stop(self) -> None:
        self._stopping = True
        self.client.close()  # ends the stream (CANCELLED)
        self._thread.join(5)


# -- phases -------------------------------------------------------------------------------


@dataclass
class Sample:
    """One reservation: when it was asked for and what came back."""

    id: str = ""
    began: float = 0.0  # perf_counter at the call
    began_wall: float = 0.0
    replied: float = 0.0  # perf_counter at the reply
    reply_state: int = 0
    create_time: float = 0.0  # at the controller
    hops: int = 0
    error: str = ""


@dataclass
class Phase:
    """What one phase measured."""

    samples: list[Sample]
    arrivals: dict[str, Arrival]
    began: float = 0.0
    wall: float | None = None  # first call to the last arrival (batch)
    submitted: float | None = None  # first call to the last reply (batch)
    timed_out: int = 0
    errors: list[str] = field(default_factory=list)

    def ok(self) -> list[tuple[Sample, Arrival]]:
        return [(s, self.arrivals[s.id]) for s in self.samples
                if s.id in self.arrivals and self.arrivals[s.id].state == pb.ACTIVE]

    def failed(self) -> int:
        return sum(1 for s in self.samples if not s.id or (s.id in self.arrivals
                                                            and self.arrivals[s.id].state != pb.ACTIVE))

    def setup(self) -> list[float]:
        return [a.at - s.began for s, a in self.ok()]

    def parts(self) -> dict:
        """Where the time goes: medians (and p99) of each part, in ms."""
        ok = self.ok()

        def summary(values: list[float]) -> dict:
            return {"p50_ms": percentile_ms(values, 0.5), "p99_ms": percentile_ms(values, 0.99)}
        return {
            "rpc": summary([s.replied - s.began for s, _ in ok]),
            "after_reply": summary([max(0.0, a.at - s.replied) for s, a in ok]),
            "to_server": summary([s.create_time - s.began_wall for s, _ in ok]),
            "server_provision": summary([a.server_time - s.create_time for s, a in ok]),
            "delivery": summary([a.wall - a.server_time for _, a in ok]),
        }


def create(client: TsdnClient, pair: Pair) -> Sample:
    src, dst = pair
    sample = Sample(began_wall=time.time(), began=time.perf_counter())
    try:
        reservation = client.create_reservation(src, dst, BANDWIDTH)
    except ApiError as error:
        sample.replied = time.perf_counter()
        sample.error = str(error)
        return sample
    sample.replied = time.perf_counter()
    sample.id = reservation.id
    sample.reply_state = reservation.state
    sample.create_time = seconds_of(reservation.create_time)
    sample.hops = len(reservation.path.hops)
    return sample


def warm_up(client: TsdnClient, watcher: Watcher, pairs: list[Pair], count: int, alive: list[str],
            deadline_s: float = 60.0) -> int:
    """Make `count` reservations ACTIVE (switches may still be finishing their handshake), each on
    the next pair of `pairs` (taken round: a FAILED one holds no pair); each one still live is
    added to `alive`. Returns how many failed on the way."""
    failed, active = 0, 0
    deadline = time.monotonic() + deadline_s
    while active < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"warm-up: only {active} of {count} reservations became ACTIVE in {deadline_s:g} s "
                               f"({failed} failed); watch error: {watcher.error}")
        sample = create(client, pairs[(active + failed) % len(pairs)])
        if not sample.id:
            raise RuntimeError(f"warm-up: CreateReservation failed: {sample.error}")
        alive.append(sample.id)
        if not watcher.wait([sample.id], SETUP_TIMEOUT):
            raise RuntimeError(f"warm-up: no ACTIVE/FAILED event for {sample.id} within {SETUP_TIMEOUT:g} s; "
                               f"watch error: {watcher.error}")
        if watcher.arrivals[sample.id].state == pb.ACTIVE:
            active += 1
        else:
            alive.remove(sample.id)  # FAILED is final: nothing to release
            failed += 1
            time.sleep(0.5)  # a switch still connecting: give it a moment, then try again
    return failed


def sequential_phase(client: TsdnClient, watcher: Watcher, pairs: list[Pair], alive: list[str]) -> Phase:
    """One reservation per pair (distinct pairs), one at a time: the next is asked for once the
    previous one is ACTIVE or FAILED. Every one made is added to `alive`: all are kept."""
    phase = Phase([], watcher.arrivals, began=time.perf_counter())
    for pair in pairs:
        sample = create(client, pair)
        phase.samples.append(sample)
        if sample.id:
            alive.append(sample.id)
        if not sample.id:
            if len(phase.errors) < 5:
                phase.errors.append(sample.error)
            continue
        if not watcher.wait([sample.id], SETUP_TIMEOUT):
            phase.timed_out += 1
            if len(phase.errors) < 5:
                phase.errors.append(f"{sample.id}: no ACTIVE/FAILED within {SETUP_TIMEOUT:g} s")
    return phase


def batch_phase(address: str, watcher: Watcher, pairs: list[Pair], clients: int, alive: list[str]) -> Phase:
    """One reservation per pair (distinct pairs), all at once from `clients` threads; waits for
    every ACTIVE/FAILED. Every one made is added to `alive`."""
    count = len(pairs)
    clients = max(1, min(clients, count))
    shares = [pairs[i::clients] for i in range(clients)]
    per_thread: list[list[Sample]] = [[] for _ in range(clients)]
    connections = [TsdnClient(address, token=TOKEN, timeout=30) for _ in range(clients)]
    for connection in connections:  # connect before the clock starts
        with contextlib.suppress(ApiError):
            connection.get_reservation("none")
    ready = threading.Barrier(clients + 1)

    def submit(i: int) -> None:
        ready.wait()
        per_thread[i] = [create(connections[i], pair) for pair in shares[i]]

    threads = [threading.Thread(target=submit, args=(i,), name=f"batch-{i}", daemon=True) for i in range(clients)]
    try:
        for thread in threads:
            thread.start()
        ready.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join(120)
        samples = [s for share in per_thread for s in share]
        ids = [s.id for s in samples if s.id]
        alive += ids
        complete = watcher.wait(ids, max(60.0, count * 0.5))
    finally:
        for connection in connections:
            connection.close()
    phase = Phase(samples, watcher.arrivals, began=began)
    phase.errors = list(dict.fromkeys(s.error for s in samples if s.error))[:5]
    phase.timed_out = sum(1 for i in ids if i not in watcher.arrivals)
    if samples:
        phase.submitted = max(s.replied for s in samples) - began
    if complete and ids:
        phase.wall = max(watcher.arrivals[i].at for i in ids) - began
    return phase


def release_all(address: str, ids: list[str], clients: int) -> tuple[float, int]:
    """DeleteReservation for every id from `clients` threads: (seconds, failures)."""
    work: queue.SimpleQueue[str] = queue.SimpleQueue()
    for rid in ids:
        work.put(rid)
    failures = [0] * clients

    def drain(i: int) -> None:
        with TsdnClient(address, token=TOKEN, timeout=30) as client:
            while True:
                try:
                    rid = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    client.delete_reservation(rid)
                except ApiError:
                    failures[i] += 1

    began = time.perf_counter()
    threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return time.perf_counter() - began, sum(failures)


@dataclass
class Released:
    """One phase's release: the DeleteReservation RPCs, then (with switches) its flows going."""

    count: int
    seconds: float
    failures: int
    flows_left: int | None = None  # tsdn flows still on the switches when the wait ended
    flows_gone_s: float | None = None  # release done to the last tsdn flow gone


@dataclass
class RunOf:
    """Both phases on one controller."""

    sequential: Phase
    batch: Phase
    warmup_failures: int
    warmup_release: Released
    sequential_release: Released
    batch_release: Released
    watch_events: int
    watch_error: str | None
    campaign: Campaign | None = None

    def release_failures(self) -> int:
        return sum(r.failures for r in (self.warmup_release, self.sequential_release, self.batch_release))


Settle = Callable[[], tuple[int, float | None]]


def release_phase(address: str, alive: list[str], clients: int, settle: Settle | None) -> Released:
    """Release every id in `alive` (emptied), then wait for the switches (`settle`)."""
    ids = list(alive)
    alive.clear()
    seconds, failures = release_all(address, ids, clients)
    released = Released(len(ids), seconds, failures)
    if settle is not None:
        released.flows_left, released.flows_gone_s = settle()
    return released


def run_phases(address: str, dtns: list[str], sizes: Sizes, clients: int, seed: int, pids: dict[str, int | None],
               cpu: dict, label: str, settle: Settle | None = None) -> RunOf:
    """Warm up, then the sequential and the batch phase, releasing each before the next, so no
    two live reservations share an ordered DTN pair. The pairs depend only on the seed: the
    ledger-only run and the Mininet run use the same ones."""
    order = ordered_pairs(dtns, random.Random(seed))
    sequential_pairs = order[:sizes.sequential]
    warmup_pairs = order[::-1]  # from the other end: none reused by the sequential phase unless it takes nearly all
    batch_pairs = ordered_pairs(dtns, random.Random(seed + 1))[:sizes.batch]
    watcher = Watcher(address)
    watcher.start()
    alive: list[str] = []  # made and not yet released
    try:
        with TsdnClient(address, token=TOKEN, timeout=30) as client:
            warmup_failures = warm_up(client, watcher, warmup_pairs, sizes.warmup, alive)
            warmup_release = release_phase(address, alive, clients, settle)
            with cpu_use(pids, cpu, f"{label}_sequential"):
                sequential = sequential_phase(client, watcher, sequential_pairs, alive)
        sequential_release = release_phase(address, alive, clients, settle)
        with cpu_use(pids, cpu, f"{label}_batch"):
            batch = batch_phase(address, watcher, batch_pairs, clients, alive)
        batch_release = release_phase(address, alive, clients, settle)
    finally:
        if alive:  # an error on the way: release what is left
            release_all(address, alive, clients)
        watcher.stop()
    return RunOf(sequential, batch, warmup_failures, warmup_release, sequential_release, batch_release,
                 watcher.events, watcher.error)


def by_quarter(phase: Phase) -> list[float | None]:
    """p50 setup time (ms) of each quarter of the sequential phase, in order: growth shows here."""
    ok = {s.id for s, _ in phase.ok()}
    samples = [s for s in phase.samples if s.id in ok]
    quarter = max(1, len(samples) // 4)
    chunks = [samples[i * quarter:(i + 1) * quarter if i < 3 else len(samples)] for i in range(4)]
    return [percentile_ms([phase.arrivals[s.id].at - s.began for s in chunk], 0.5) for chunk in chunks]


# -- the benchmark ------------------------------------------------------------------------


def run(quick: bool = False, sequential: int | None = None, batch: int | None = None, clients: int = 16,
        seed: int = 16) -> dict:
    """Run the baseline and the Mininet phases and return the result object."""
    missing = mininet_missing()
    if missing:
        raise RuntimeError("tsdn bench setup needs " + ", ".join(missing))
    from mininet.log import setLogLevel

    from topologies.mininet_builder import default_scale

    setLogLevel("critical")  # not a line per shaped link ("sch_htb: quantum ... is big"); failures still raise

    topology = Topology.load(builtin_topology(TOPOLOGY))
    dtns = sorted(topology.dtns)
    pairs = len(dtns) * (len(dtns) - 1)
    sizes = Sizes.for_run(quick, sequential, batch, pairs)
    scale = default_scale(topology)
    facts = machine()
    cpu: dict[str, dict] = {}
    say(f"setup: {TOPOLOGY} ({len(topology.switches)} switches, {len(dtns)} DTNs, {pairs} ordered pairs) in Mininet "
        f"at scale {scale:g}; {sizes.warmup} warm-up, {sizes.sequential} sequential (kept until the phase ends), "
        f"{sizes.batch} at once from {clients} clients, {BANDWIDTH // M}M each, one live reservation per ordered "
        "DTN pair: each phase released before the next")
    if sizes.sequential < sizes.sequential_asked:
        say(f"  sequential: {sizes.sequential_asked} asked, but {TOPOLOGY} has only {pairs} ordered DTN pairs and "
            f"they are all kept: {sizes.sequential}")
    if sizes.batch < sizes.batch_asked:
        say(f"  batch: {sizes.batch_asked} asked, but {TOPOLOGY} has only {pairs} ordered DTN pairs (one live "
            f"reservation each): {sizes.batch} at once, and batch_1000_s is their time extrapolated linearly")
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-setup-") as tmp:
        workdir = Path(tmp)
        ledger = ControllerProcess(workdir / "ledger", principal=PRINCIPAL, token=TOKEN)
        try:
            address = ledger.start()
            say(f"ledger-only controller on {address}")
            base = run_phases(address, dtns, sizes, clients, seed, {"bench": None, "controller": ledger.pid}, cpu,
                              "ledger_only")
        finally:
            ledger.stop()
        say(f"ledger only: setup p50 {percentile_ms(base.sequential.setup(), 0.5)} ms, "
            f"p99 {percentile_ms(base.sequential.setup(), 0.99)} ms; {sizes.batch} at once in "
            f"{base.batch.wall and round(base.batch.wall, 3)} s")

        ensure_ovs_without_network()
        switched = {design: switched_run(design, topology, workdir, scale, dtns, sizes, clients, seed, cpu)
                    for design in DESIGNS}
    return result_of(sizes, clients, scale, topology, base, switched[DESIGNS[0]], cpu, facts, quick,
                     switched[DESIGNS[1]], switched[DESIGNS[2]])


@dataclass(frozen=True)
class OnSwitches:
    """A controller process running `topology` in Mininet, every switch connected: its gRPC
    address, the process, the network, and `settle()`, which waits until the switches hold no
    flows of it."""

    address: str
    controller: ControllerProcess
    net: Any
    settle: Callable[[], object]


@contextlib.contextmanager
def on_switches(workdir: Path, topology: Topology, scale: float, *, principal: str, token: str,
                extra: tuple[str, ...] = (), topology_name: str = TOPOLOGY):
    """A `tsdn controller` process (`extra` arguments) with `topology_name` in Mininet at `scale` pointed
    at it; yields an `OnSwitches` once every switch is connected; stops both after."""
    from topologies.mininet_builder import start_network

    port = free_port()
    controller = ControllerProcess(workdir, ("127.0.0.1", port), scale, principal=principal, token=token,
                                   topology=topology_name, extra=extra)
    started_network = False
    try:
        address = controller.start()
        say(f"controller on {address}, OpenFlow on 127.0.0.1:{port}, --emulation-scale {scale:g}")
        began = time.perf_counter()
        started_network = True
        with start_network(topology_name, scale, controller=("127.0.0.1", port)) as net:
            wanted = {net.topo.mn_name(s) for s in topology.switches}
            deadline = time.monotonic() + CONNECT_TIMEOUT
            while not wanted <= (connected := connected_bridges()):
                if time.monotonic() > deadline or controller.process.poll() is not None:
                    raise RuntimeError(f"switches not connected within {CONNECT_TIMEOUT:g} s: "
                                       f"{sorted(wanted - connected)}\n" + "".join(controller.tail))
                time.sleep(0.2)  # polling a condition with a deadline
            say(f"Mininet up and all {len(wanted)} switches connected in {time.perf_counter() - began:.1f} s")
            bridges = [net.topo.mn_name(s) for s in topology.switches]
            yield OnSwitches(address, controller, net, lambda: flows_gone(bridges))
    finally:
        controller.stop()
        if started_network:
            mn_clean()


def switched_run(design: str, topology: Topology, workdir: Path, scale: float, dtns: list[str], sizes: Sizes,
                 clients: int, seed: int, cpu: dict) -> RunOf:
    """The phases on sc16 in Mininet under a controller with `--flow-design design` (and no grace
    for unused paths, so each phase's entries are gone before the next, as with per-hop flows:
    every phase pays for installing its paths)."""
    say(f"{design}:")
    with on_switches(workdir / f"openflow-{design}", topology, scale, principal=PRINCIPAL, token=TOKEN,
                     extra=(*RUNS[design], "--label-grace", "0s")) as running:
        pids = {"bench": None, "controller": running.controller.pid, "ovs-vswitchd": ovs_vswitchd_pid()}
        phases = run_phases(running.address, dtns, sizes, clients, seed, pids, cpu, design.replace("-", "_"),
                            settle=running.settle)
        phases.campaign = campaign_phase(running.address, dtns, sizes.campaign, seed, clients, settle=running.settle)
        return phases


@dataclass
class Campaign:
    """One CreateReservations call of a whole campaign: how long until it answered with every
    admitted reservation's flows confirmed, and how many came out ACTIVE."""

    count: int
    seconds: float
    active: int
    refused: int
    installing: int
    release: Released | None = None


def campaign_requests(dtns: list[str], count: int, seed: int) -> list[pb.CreateReservationRequest]:
    """`count` requests between random ordered DTN pairs (seeded), each with IPv6 prefixes of its
    own (a /64 per end, one Rucio rule each), so several share a DTN pair, as a campaign does."""
    rng = random.Random(seed + 2)
    out = []
    for n in range(count):
        src, dst = rng.sample(dtns, 2)
        out.append(reservation_request(src, dst, BANDWIDTH, src_prefix=f"fd01:0:{n:x}::/64",
                                       dst_prefix=f"fd02:0:{n:x}::/64"))
    return out


def campaign_phase(address: str, dtns: list[str], count: int, seed: int, clients: int,
                   settle: Settle | None) -> Campaign:
    """The campaign in one CreateReservations call (waiting for the flows), then released."""
    requests = campaign_requests(dtns, count, seed)
    with TsdnClient(address, token=TOKEN, timeout=60) as client:
        client.get_topology_status()  # connected before the clock starts
        began = time.perf_counter()
        answer = client.create_reservations(requests, wait_timeout=120)
        seconds = time.perf_counter() - began
    made = [r.reservation for r in answer.results if r.HasField("reservation")]
    campaign = Campaign(count, seconds, sum(1 for r in made if r.state == pb.ACTIVE), answer.refused,
                        answer.installing)
    campaign.release = release_phase(address, [r.id for r in made], clients, settle)
    return campaign


def flows_gone(bridges: list[str], timeout: float = 60.0) -> tuple[int, float | None]:
    """Wait until no tsdn flow is left on `bridges`: (flows left, seconds it took or None)."""
    began = time.perf_counter()
    deadline = time.monotonic() + timeout
    while (left := sum(_flow_count(b) for b in bridges)) and time.monotonic() < deadline:
        time.sleep(0.2)  # polling a condition with a deadline
    return left, (time.perf_counter() - began if not left else None)


def _flow_count(bridge: str) -> int:
    """tsdn flows still on `bridge` (cookie 0x75d5...) after the release."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge], capture_output=True, text=True,
                         timeout=10).stdout
    return sum(1 for line in out.splitlines() if "cookie=0x75d5" in line)


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def result_of(sizes: Sizes, clients: int, scale: float, topology: Topology, base: RunOf, switched: RunOf,
              cpu: dict, facts: dict, quick: bool, per_hop: RunOf, no_bundles: RunOf) -> dict:
    seq, bat = switched.sequential, switched.batch
    seq_release, bat_release = switched.sequential_release, switched.batch_release
    setup = latency_summary(seq.setup())
    base_setup = latency_summary(base.sequential.setup())
    batch_setup = latency_summary(bat.setup())
    batch_1000 = None
    if bat.wall is not None:
        batch_1000 = round(bat.wall * 1000 / sizes.batch, 3)
    hops = [s.hops for s, _ in seq.ok()]
    result = {
        "bench": "setup",
        "p50_ms": setup["p50_ms"],
        "p99_ms": setup["p99_ms"],
        "batch_1000_s": batch_1000,
        "batch_1000_s_extrapolated": sizes.batch != 1000,
        "quick": quick,
        "topology": TOPOLOGY,
        "switches": len(topology.switches),
        "emulation_scale": scale,
        "bandwidth_bps": BANDWIDTH,
        "sequential": sizes.sequential,
        "max_ms": setup["max_ms"],
        "p50_by_quarter_ms": by_quarter(seq),
        "hops_mean": round(statistics.fmean(hops), 2) if hops else None,
        "failures": seq.failed() + seq.timed_out,
        "parts_ms": seq.parts(),
        "batch": sizes.batch,
        "batch_asked": sizes.batch_asked,
        "distinct_pairs": True,
        "clients": clients,
        "batch_s": round(bat.wall, 3) if bat.wall is not None else None,
        "batch_submitted_s": round(bat.submitted, 3) if bat.submitted is not None else None,
        "batch_active_per_s": round(len(bat.ok()) / bat.wall, 1) if bat.wall else None,
        "batch_setup_p50_ms": batch_setup["p50_ms"],
        "batch_setup_p99_ms": batch_setup["p99_ms"],
        "batch_failures": bat.failed() + bat.timed_out,
        "batch_parts_ms": bat.parts(),
        "warmup": sizes.warmup,
        "warmup_failures": switched.warmup_failures,
        "release_all_s": round(seq_release.seconds, 3),
        "release_failures": switched.release_failures(),
        "flows_gone_after_release_s": _round(seq_release.flows_gone_s),
        "flows_left_after_sequential_release": seq_release.flows_left,
        "batch_release_s": round(bat_release.seconds, 3),
        "batch_flows_gone_after_release_s": _round(bat_release.flows_gone_s),
        "flows_left_after_release": bat_release.flows_left,
        "campaign_1000_s": _campaign_1000(switched.campaign),
        "campaign": _campaign_facts(switched.campaign),
        "per_hop_campaign_1000_s": _campaign_1000(per_hop.campaign),
        "per_hop_campaign": _campaign_facts(per_hop.campaign),
        "no_bundles_p50_ms": latency_summary(no_bundles.sequential.setup())["p50_ms"],
        "no_bundles_p99_ms": latency_summary(no_bundles.sequential.setup())["p99_ms"],
        "no_bundles_campaign_1000_s": _campaign_1000(no_bundles.campaign),
        "flow_design": DESIGNS[0],
        "per_hop_p50_ms": latency_summary(per_hop.sequential.setup())["p50_ms"],
        "per_hop_p99_ms": latency_summary(per_hop.sequential.setup())["p99_ms"],
        "per_hop_batch_1000_s": (round(per_hop.batch.wall * 1000 / sizes.batch, 3)
                                 if per_hop.batch.wall is not None else None),
        "per_hop_failures": per_hop.sequential.failed() + per_hop.batch.failed() + per_hop.sequential.timed_out
        + per_hop.batch.timed_out,
        "ledger_only_p50_ms": base_setup["p50_ms"],
        "ledger_only_p99_ms": base_setup["p99_ms"],
        "ledger_only_max_ms": base_setup["max_ms"],
        "ledger_only_rpc_p50_ms": base.sequential.parts()["rpc"]["p50_ms"],
        "ledger_only_batch_s": round(base.batch.wall, 3) if base.batch.wall is not None else None,
        "ledger_only_failures": base.sequential.failed() + base.batch.failed() + base.sequential.timed_out
        + base.batch.timed_out,
        "ledger_only_release_failures": base.release_failures(),
        "errors": list(dict.fromkeys(seq.errors + bat.errors + base.sequential.errors + base.batch.errors))[:5],
        "watch_error": switched.watch_error or base.watch_error,
        "onos_ms_per_intent": ONOS_MS_PER_INTENT,
        "targets": TARGETS,
        "meets_targets": (setup["p50_ms"] is not None and setup["p50_ms"] <= TARGETS["p50_ms"]
                          and setup["p99_ms"] is not None and setup["p99_ms"] <= TARGETS["p99_ms"]
                          and _campaign_1000(switched.campaign) is not None
                          and _campaign_1000(switched.campaign) <= TARGETS["campaign_1000_s"]),
        "cpu_cores_busy": cpu,
        "machine": {**facts, "ovs": _first_line(["ovs-vswitchd", "--version"]), "datapath": "userspace (netdev)"},
    }
    parts = result["parts_ms"]
    say(f"sequential ({sizes.sequential}): setup p50 {setup['p50_ms']} ms, p99 {setup['p99_ms']} ms, "
        f"max {setup['max_ms']} ms over {result['hops_mean']} switches on average; failures {result['failures']}")
    say(f"  p50 by quarter (tables growing): {result['p50_by_quarter_ms']} ms")
    say(f"  parts (p50): CreateReservation RPC {parts['rpc']['p50_ms']} ms, reply to ACTIVE "
        f"{parts['after_reply']['p50_ms']} ms; controller: booked to ACTIVE {parts['server_provision']['p50_ms']} ms, "
        f"event delivery {parts['delivery']['p50_ms']} ms")
    say(f"  ledger only: p50 {base_setup['p50_ms']} ms, p99 {base_setup['p99_ms']} ms; per-hop flows (the design "
        f"before labels): p50 {result['per_hop_p50_ms']} ms, p99 {result['per_hop_p99_ms']} ms, 1,000 at once "
        f"{result['per_hop_batch_1000_s']} s")
    say(f"batch ({sizes.batch} from {clients} clients): all ACTIVE in {result['batch_s']} s "
        f"(replies in {result['batch_submitted_s']} s; {result['batch_active_per_s']} ACTIVE/s), "
        f"failures {result['batch_failures']}; ledger only {result['ledger_only_batch_s']} s")
    if sizes.batch != 1000:
        why = (f" ({TOPOLOGY} has only {sizes.batch} ordered DTN pairs for {sizes.batch_asked})"
               if sizes.batch < sizes.batch_asked else "")
        say(f"  1,000 extrapolated linearly from {sizes.batch}{why}: {batch_1000} s")
    say(f"release of the {seq_release.count} sequential: {result['release_all_s']} s (RPCs); every tsdn flow gone "
        f"{result['flows_gone_after_release_s']} s after that; of the {bat_release.count} batch: "
        f"{result['batch_release_s']} s, flows gone {result['batch_flows_gone_after_release_s']} s after; "
        f"left at the end: {result['flows_left_after_release']}; release failures {result['release_failures']}")
    say(f"  labels without bundles: p50 {result['no_bundles_p50_ms']} ms, p99 {result['no_bundles_p99_ms']} ms, "
        f"campaign of 1,000 {result['no_bundles_campaign_1000_s']} s")
    for name, facts_of in (("labels", result["campaign"]), ("per-hop", result["per_hop_campaign"])):
        if facts_of is not None:
            say(f"campaign ({name}): {facts_of['count']} reservations in one CreateReservations call, answered with "
                f"{facts_of['active']} ACTIVE (every hop confirmed) in {facts_of['seconds']} s; refused "
                f"{facts_of['refused']}, still installing {facts_of['installing_when_answered']}")
    say(f"CPU cores busy (of {os.cpu_count()}): {cpu}")
    for error in result["errors"]:
        say(f"error: {error}")
    say(f"targets (p50 <= {TARGETS['p50_ms']} ms, p99 <= {TARGETS['p99_ms']} ms, 1,000 in <= "
        f"{TARGETS['campaign_1000_s']:g} s): {'met' if result['meets_targets'] else 'missed'}; "
        f"ONOS reports {ONOS_MS_PER_INTENT} ms per intent with simulated switches")
    return result


def _campaign_1000(campaign: Campaign | None) -> float | None:
    """The campaign's time scaled to 1,000 reservations (it is 1,000 unless asked otherwise)."""
    return round(campaign.seconds * 1000 / campaign.count, 3) if campaign is not None and campaign.count else None


def _campaign_facts(campaign: Campaign | None) -> dict | None:
    if campaign is None:
        return None
    return {"count": campaign.count, "seconds": round(campaign.seconds, 3), "active": campaign.active,
            "refused": campaign.refused, "installing_when_answered": campaign.installing,
            "flows_left_after_release": campaign.release.flows_left if campaign.release else None}


def _first_line(command: list[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def main(quick: bool = False, sequential: int | None = None, batch: int | None = None, clients: int = 16,
         seed: int = 16) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    for name, value in (("--sequential", sequential), ("--batch", batch), ("--clients", clients)):
        if value is not None and value < 1:
            say(f"tsdn bench setup: {name} must be at least 1")
            return 2
    began = time.perf_counter()

    def produce() -> dict:
        result = run(quick=quick, sequential=sequential, batch=batch, clients=clients, seed=seed)
        say(f"tsdn bench setup: done in {time.perf_counter() - began:.0f} s")
        return result
    return print_result("setup", produce)
