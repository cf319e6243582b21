"""`tsdn bench reroute`: from a link going down to every affected reservation barrier-confirmed
on its new path, on sc16 in Mininet; and the data-plane gap of a protected reservation.

sc16 runs in Mininet (userspace Open vSwitch, `default_scale`) under a real `tsdn controller`
subprocess; one watch stream on every reservation notes when each event arrives. A link is cut
with Mininet's `configLinkStatus(a, b, "down")` (both veth ends down, so Open vSwitch sends
port-status messages, as a fibre cut would); each sample runs from just before that call to the
arrival of the reservation's ACTIVE event after its MOVING (the controller sends ACTIVE only
once every hop of the new path answered its barrier). The call itself (two `ip link` commands
in the Mininet nodes) is inside the measurement.

- reroute_1: one reservation (100 Mbit/s) across the 1 Tbit/s `tbit-tcp` link; the link of its
  current path is cut, the reservation moves, the link is restored (and seen UP), and the next
  cut is on the path it moved to: rounds alternate between the two. 20 rounds (--quick 5).
- reroute_100: 100 reservations between distinct DTN pairs whose path crosses `tbit-tcp`; the
  link is cut; per reservation, time to ACTIVE on its new path (p50, p99) and until the last
  one. 3 rounds (--quick 1), made afresh each round.
- ff_gap: measured in the data plane, one way, with sequence-numbered UDP probes
  (`benchmarks.probes`): a protected reservation (10 Gbit/s, a 2 Mbit/s meter at sc16's scale)
  from caltech-a-dtn1 to starlight-dtn1; a receiver in the destination's Mininet host records
  each probe's sequence number, send time and kernel arrival time (CLOCK_MONOTONIC, one clock
  for every namespace); a sender in the source's host sends one every 500 µs (58-byte frames,
  about 0.93 Mbit/s, under half the meter's rate) under SCHED_FIFO, so the 2-core machine
  does not hold probes back. A second into the stream the controller is paused (SIGSTOP: the
  data plane alone) and the primary's first switch-to-switch link is cut. The gap (`ff_gap_ms`)
  is the longest time between two consecutive arrivals from the cut on, minus the send
  interval; the probes lost (`ff_probes_lost`, all rounds), and the send time the longest run
  of lost ones took out of the stream (`ff_loss_gap_ms`: sequence numbers, not arrival times),
  come from the same records, with the interval asked and sent (`ff_probe_interval_us`,
  `ff_probe_achieved_interval_us`). 3 rounds (--quick 1), the worst reported.

Both flow designs are measured, each with its own controller and network: label-switched paths
(`--flow-design labels`, the default; the keys without a prefix) and every reservation's flows on
every hop (`--flow-design per-hop`, the design before labels: `per_hop_*`); and labels again with
`--no-bundles` (plain flow-mods and barriers instead of OpenFlow bundles: `no_bundles_*`). The
controllers keep
unused paths for the default grace, as at a show: once both routes of reroute_1 were used, a move
between them is one steer entry per direction at the ingress. `flow_mods_per_move` counts the
messages of each moved reservation's own change (the core's, as the provisioner sends them);
`new_path_entries` the entries of the paths the 100 moves needed that were not installed yet,
installed once for all of them.

Baselines in the same run: the per-hop design, the core alone (`ReservationBook.set_link_state` on the same 100
reservations in this process, no switches), the decision's share of reroute_100; and the
longest gap between probe arrivals in the second before the cut, from the same probe stream
(`ff_gap_without_cut_ms`: the noise of a 2-core machine running the whole network in userspace).

Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import probes
from benchmarks.northbound import machine, percentile_ms
from benchmarks.report import print_result, say
from benchmarks.setup import ensure_ovs_without_network, mininet_missing, on_switches
from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb
from sdn_app.core.clock import FakeClock
from sdn_app.core.installs import LABELS, PER_HOP
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathFinder, PathRequest, Unbooked
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

M = 10**6
BANDWIDTH = 100 * M
FF_BANDWIDTH = 10_000 * M  # 2 Mbit/s emulated at sc16's scale (0.0002)
TOPOLOGY = "sc16"
LINK = "tbit-tcp"  # the link most DTN pairs cross on sc16 (198 ordered pairs)
PRINCIPAL = "bench"
TOKEN = "bench-token-" + "0123456789abcdef" * 2
TARGETS = {"reroute_100_p50_ms": 50, "ff_gap_ms": 10, "flow_mods_per_direction": 1}
DESIGNS = (LABELS, PER_HOP)  # the design measured, then the baseline
NO_BUNDLES = "labels-no-bundles"  # labels again, with flow-mods and barriers instead of OpenFlow bundles
RUNS = {LABELS: ("--flow-design", LABELS), PER_HOP: ("--flow-design", PER_HOP),
        NO_BUNDLES: ("--flow-design", LABELS, "--no-bundles")}
EVENT_TIMEOUT = 30.0
FF_PAIR = ("caltech-a-dtn1", "starlight-dtn1")
FF_PROBE_INTERVAL_US = 500
FF_PROBE_SECONDS = 3.0  # per round: a second before the cut, two after
FF_QUIET_NS = 1_000_000_000  # probes before the cut: the baseline window
FF_PROBE_PORT = 5301
FF_PROBE_PRIORITY = 10  # SCHED_FIFO for the sender
FF_METER_SHARE = 0.5  # the probes' rate at most this share of the meter's
FF_RECEIVER_IDLE_S = 1.0
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Rounds:
    """How many of each measurement."""

    single: int
    hundred: int
    ff: int
    affected: int = 100

    @classmethod
    def for_run(cls, quick: bool) -> Rounds:
        return cls(5, 1, 1) if quick else cls(20, 3, 3)


class EventLog:
    """One WatchReservations stream on every reservation: (state, arrival) per reservation."""

    def __init__(self, address: str):
        self.client = TsdnClient(address, token=TOKEN, timeout=10)
        self.cond = threading.Condition()
        self.events: dict[str, list[tuple[int, float]]] = {}
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="event-log", daemon=True)
        self._stopping = False

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self.client.watch(include_existing=True):
                with self.cond:
                    self.events.setdefault(event.reservation.id, []).append((event.state, time.perf_counter()))
                    self.cond.notify_all()
        except ApiError as error:
            if not self._stopping:
                self.error = str(error)

    def confirmed_after(self, ids: list[str], since: float, timeout: float = EVENT_TIMEOUT) -> dict[str, float]:
        """Seconds from `since` to each reservation's first ACTIVE after a MOVING at or after `since`."""
        deadline = time.monotonic() + timeout
        found: dict[str, float] = {}
        with self.cond:
            while True:
                for rid in ids:
                    if rid in found:
                        continue
                    moving = False
                    for state, at in self.events.get(rid, ()):
                        if at < since:
                            continue
                        moving = moving or state == pb.MOVING
                        if moving and state == pb.ACTIVE:
                            found[rid] = at - since
                            break
                left = deadline - time.monotonic()
                if len(found) == len(ids) or left <= 0:
                    return found
                self.cond.wait(min(left, 1.0))

    def stop(self) -> None:
        self._stopping = True
        self.client.close()
        self._thread.join(5)


def pairs_across(topology: Topology, link: str) -> list[tuple[str, str]]:
    """Ordered DTN pairs whose route on an empty network crosses `link`."""
    finder = PathFinder(topology, Unbooked(topology))
    found = []
    for src in sorted(topology.dtns):
        for dst in sorted(topology.dtns):
            if src != dst and link in finder.route(PathRequest(src, dst, BANDWIDTH, 0, math.inf)).primary.links:
                found.append((src, dst))
    return found


@dataclass(frozen=True)
class CoreMoves:
    """The core alone moving the reservations off `LINK`: how long it took, and the OpenFlow
    messages its changes hold (what the provisioner then sends)."""

    seconds: float
    moves: int
    flow_mods_per_move: float  # the reservations' own changes (both directions), per reservation
    max_flow_mods_per_move: int
    path_messages: int  # entries of new shared paths (labels), installed once for every move on them


def core_baseline(topology: Topology, pairs: list[tuple[str, str]], workdir: Path, design: str) -> CoreMoves:
    """The core alone (`design` flows) moving the reservations of `pairs` off `LINK`."""
    clock = FakeClock(time.time())
    ledger = Ledger(topology.capacities(), workdir / f"core-{design}.db", clock)
    try:
        book = ReservationBook(topology, ledger, clock, provisioning=True, flow_design=design)
        admin = Principal("bench", Role.ADMIN)
        for src, dst in pairs:
            book.create(admin, PathRequest(src, dst, BANDWIDTH, clock.now(), math.inf))
        book.take_changes()
        began = time.perf_counter()
        book.set_link_state(LINK, up=False)
        changes = book.take_changes()
        took = time.perf_counter() - began
        moves = [c for c in changes if c.confirm]
        if len(moves) != len(pairs):
            raise RuntimeError(f"core baseline ({design}): {len(moves)} moves for {len(pairs)} reservations")
        counts = [sum(1 for step in c.steps if step.spec is not None) for c in moves]
        path_messages = sum(1 for c in changes if not c.confirm for step in c.steps if step.spec is not None)
        return CoreMoves(took, len(moves), sum(counts) / len(counts), max(counts), path_messages)
    finally:
        ledger.close()


class Bench:
    """The running network, controller and client of one benchmark run."""

    def __init__(self, net, topology: Topology, client: TsdnClient, log: EventLog, controller_pid: int):
        self.net, self.topology, self.client, self.log = net, topology, client, log
        self.controller_pid = controller_pid

    def ends(self, link: str) -> tuple[str, str]:
        spec = self.topology.links[link]
        return self.net.topo.mn_name(spec.a), self.net.topo.mn_name(spec.b)

    def cut(self, link: str) -> float:
        """Take `link` down; return perf_counter just before."""
        began = time.perf_counter()
        self.net.mn.configLinkStatus(*self.ends(link), "down")
        return began

    def restore(self, link: str) -> None:
        """Bring `link` up and wait until the controller has it UP again."""
        self.net.mn.configLinkStatus(*self.ends(link), "up")
        deadline = time.monotonic() + EVENT_TIMEOUT
        while self.link_state(link) != topo_pb.LinkStatus.UP:
            if time.monotonic() > deadline:
                raise RuntimeError(f"link {link} not seen UP within {EVENT_TIMEOUT:g} s after restoring it")
            time.sleep(0.1)  # polling a condition with a deadline

    def link_state(self, link: str) -> int:
        return next(s.state for s in self.client.get_topology_status().links if s.name == link)

    def create(self, src: str, dst: str, protect: bool = False, bandwidth: int = BANDWIDTH) -> pb.Reservation:
        made = self.client.create_reservation(src, dst, bandwidth, protect=protect)
        deadline = time.monotonic() + EVENT_TIMEOUT
        while made.state != pb.ACTIVE:
            if made.state == pb.FAILED or time.monotonic() > deadline:
                raise RuntimeError(f"{src} -> {dst}: {pb.ReservationState.Name(made.state)} {made.state_reason}")
            time.sleep(0.01)  # polling a condition with a deadline
            made = self.client.get_reservation(made.name)
        return made

    def wait_all_active(self, names: list[str]) -> None:
        deadline = time.monotonic() + EVENT_TIMEOUT
        while any(self.client.get_reservation(n).state != pb.ACTIVE for n in names):
            if time.monotonic() > deadline:
                raise RuntimeError("reservations not ACTIVE again after the link came back")
            time.sleep(0.1)  # polling a condition with a deadline

    def release(self, names: list[str]) -> None:
        for name in names:
            self.client.delete_reservation(name)


def reroute_one(bench: Bench, rounds: int) -> list[float]:
    """Seconds from cut to confirmed, one reservation, alternating between two links."""
    src, dst = pairs_across(bench.topology, LINK)[0]
    made = bench.create(src, dst)
    samples = []
    link = LINK
    try:
        for _ in range(rounds):
            began = bench.cut(link)
            took = bench.log.confirmed_after([made.id], began).get(made.id)
            if took is None:
                raise RuntimeError(f"{made.name} not ACTIVE on a new path within {EVENT_TIMEOUT:g} s of cutting {link}")
            samples.append(took)
            bench.restore(link)
            now = bench.client.get_reservation(made.name)
            link = now.path.links[0]  # switch-to-switch links only
    finally:
        bench.release([made.name])
    return samples


def reroute_hundred(bench: Bench, rounds: int, count: int) -> tuple[list[float], list[float]]:
    """Per-reservation seconds from cut to confirmed, and each round's time to the last one."""
    pairs = pairs_across(bench.topology, LINK)[:count]
    per_reservation: list[float] = []
    last: list[float] = []
    for _ in range(rounds):
        made = [bench.create(src, dst) for src, dst in pairs]
        try:
            began = bench.cut(LINK)
            found = bench.log.confirmed_after([r.id for r in made], began)
            if len(found) < len(made):
                raise RuntimeError(f"only {len(found)} of {len(made)} reservations were confirmed on a new path "
                                   f"within {EVENT_TIMEOUT:g} s of cutting {LINK}")
            per_reservation += found.values()
            last.append(max(found.values()))
            bench.restore(LINK)
        finally:
            bench.release([r.name for r in made])
    return per_reservation, last


@dataclass(frozen=True)
class FfRound:
    """One fast-failover round, read from the probe receiver's records."""

    gap_s: float  # longest silence between arrivals from the cut on, beyond the send interval
    quiet_s: float  # the same in the second before the cut
    lost: int
    loss_gap_s: float  # send time the longest run of lost probes took out of the stream (0: none lost)
    achieved_interval_us: float
    longest_send_gap_us: float
    receive_clock: str


def _json_line(process: subprocess.Popen, what: str, timeout: float) -> dict:
    """The next stdout line of `process` as JSON; RuntimeError with its stderr if none comes in time."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else b""
    if not line:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        err = process.stderr.read().decode(errors="replace").strip()
        raise RuntimeError(f"{what}: no line within {timeout:g} s{': ' + err if err else ''}")
    return json.loads(line)


def probe_share(scale: float) -> float:
    """The probes' rate as a share of the reservation meter's (both emulated at `scale`)."""
    frame_bits = (probes.FRAME_BYTES + 4) * 8  # with room for a VLAN tag
    return frame_bits / (FF_PROBE_INTERVAL_US / 1e6) / (FF_BANDWIDTH * scale)


def ff_round(bench: Bench, made: pb.Reservation, out: Path) -> FfRound:
    """Cut the first switch-to-switch link of `made`'s primary under a stream of one-way probes,
    the controller paused; restore it."""
    src, dst = FF_PAIR
    link = made.path.links[0]
    target = f"{bench.topology.dtns[dst].ipv4}:{FF_PROBE_PORT}"
    count = round(FF_PROBE_SECONDS * 1e6 / FF_PROBE_INTERVAL_US)
    module = [sys.executable, "-m", "benchmarks.probes"]
    receiver = bench.net.host(dst).popen([*module, "receive", "--listen", target, "--out", str(out),
                                          "--idle-timeout", f"{FF_RECEIVER_IDLE_S:g}"], cwd=ROOT)
    sender = None
    try:
        _json_line(receiver, f"probe receiver in {dst}", 30)
        sender = bench.net.host(src).popen([*module, "send", "--to", target, "--count", str(count),
                                            "--interval-us", str(FF_PROBE_INTERVAL_US),
                                            "--priority", str(FF_PROBE_PRIORITY)], cwd=ROOT)
        started = _json_line(sender, f"probe sender in {src}", 30)["started"]
        os.kill(bench.controller_pid, signal.SIGSTOP)  # the data plane alone, as with the controller down
        try:
            # When to cut, on the probes' schedule (not a wait for a condition).
            time.sleep(max(0.0, (started + FF_QUIET_NS - time.monotonic_ns()) / 1e9))
            cut_ns = time.monotonic_ns()
            bench.cut(link)
            sender.wait(FF_PROBE_SECONDS + 30)
        finally:
            os.kill(bench.controller_pid, signal.SIGCONT)
        if sender.returncode != 0:
            raise RuntimeError(f"probe sender in {src} failed: {sender.stderr.read().decode(errors='replace')}")
        sent = json.loads(sender.stdout.read().decode().strip().splitlines()[-1])
        receiver.wait(FF_RECEIVER_IDLE_S + 30)  # it stops by itself once the probes stop
    except subprocess.TimeoutExpired as error:
        raise RuntimeError(f"probes: {' '.join(map(str, error.cmd))} did not end within {error.timeout:g} s") from None
    finally:
        for process in (sender, receiver):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
    if receiver.returncode != 0 or not out.exists():
        raise RuntimeError(f"probe receiver in {dst} failed: {receiver.stderr.read().decode(errors='replace')}")
    records, document = probes.load(out)
    interval_ns = FF_PROBE_INTERVAL_US * 1000
    after = probes.longest_gap(records, interval_ns, after_ns=cut_ns)
    quiet = probes.longest_gap(records, interval_ns, after_ns=cut_ns - FF_QUIET_NS, until_ns=cut_ns)
    lost = probes.lost(records, sent["sent"])
    if after is None:
        raise RuntimeError(f"no probe arrived in {dst} after cutting {link} ({len(records)} of {sent['sent']} "
                           "arrived before): fast failover did not carry them")
    if quiet is None or lost > sent["sent"] // 2:
        raise RuntimeError(f"only {len(records)} of {sent['sent']} probes arrived in {dst} (the booking must carry "
                           f"one every {FF_PROBE_INTERVAL_US} µs)")
    loss = probes.longest_loss_gap(records, interval_ns, after_ns=cut_ns)
    loss_gap = loss.gap_ns(interval_ns) if loss else None
    bench.restore(link)
    bench.wait_all_active([made.name])
    return FfRound(after.extra_ns / 1e9, quiet.extra_ns / 1e9, lost, (loss_gap or 0) / 1e9,
                   sent["achieved_interval_us"], sent["longest_send_gap_us"], document["receive_clock"])


def ff_gap(bench: Bench, rounds: int, workdir: Path, scale: float) -> list[FfRound]:
    """Per round, the data-plane gap of a protected reservation when its primary's first link is
    cut, measured with one-way sequence-numbered probes (see the module's docstring)."""
    share = probe_share(scale)
    if share > FF_METER_SHARE:
        raise RuntimeError(f"probes every {FF_PROBE_INTERVAL_US} µs would take {share:.0%} of the "
                           f"{FF_BANDWIDTH * scale / 1e6:g} Mbit/s meter at scale {scale:g} "
                           f"(at most {FF_METER_SHARE:.0%})")
    made = bench.create(*FF_PAIR, protect=True, bandwidth=FF_BANDWIDTH)
    found = []
    try:
        for n in range(rounds):
            made = bench.client.get_reservation(made.name)
            found.append(ff_round(bench, made, workdir / f"probes-{n}.json"))
    finally:
        bench.release([made.name])
    return found


def measured(design: str, topology: Topology, rounds: Rounds, workdir: Path,
             scale: float) -> tuple[list[float], list[float], list[float], list[FfRound]]:
    """reroute_1, reroute_100 (each reservation's and each round's last) and the fast-failover
    rounds on sc16 in Mininet under a controller with the arguments of `RUNS[design]`."""
    with on_switches(workdir / f"controller-{design}", topology, scale, principal=PRINCIPAL, token=TOKEN,
                     extra=RUNS[design]) as running:
        net, address, controller = running.net, running.address, running.controller
        client = TsdnClient(address, token=TOKEN, timeout=10)
        log = EventLog(address)
        log.start()
        bench = Bench(net, topology, client, log, controller.pid)
        try:
            single = reroute_one(bench, rounds.single)
            say(f"{design}: reroute_1: p50 {percentile_ms(single, 0.5)} ms, p99 {percentile_ms(single, 0.99)} ms "
                f"over {len(single)} cuts")
            hundred, last = reroute_hundred(bench, rounds.hundred, rounds.affected)
            say(f"{design}: reroute_100: p50 {percentile_ms(hundred, 0.5)} ms, p99 "
                f"{percentile_ms(hundred, 0.99)} ms, last one after {[round(x * 1000, 1) for x in last]} ms")
            ff = ff_gap(bench, rounds.ff, workdir / f"controller-{design}", scale)
            say(f"{design}: fast failover: longest gap after the cut {[round(r.gap_s * 1000, 2) for r in ff]} ms, "
                f"in the second before it {[round(r.quiet_s * 1000, 2) for r in ff]} ms; probes lost "
                f"{[r.lost for r in ff]}, their gap {[round(r.loss_gap_s * 1000, 2) for r in ff]} ms; "
                f"one every {FF_PROBE_INTERVAL_US} µs asked, {[r.achieved_interval_us for r in ff]} µs sent, "
                f"longest send gap {[r.longest_send_gap_us for r in ff]} µs; arrival times from the "
                f"{'/'.join(sorted({r.receive_clock for r in ff}))}")
        finally:
            log.stop()
            client.close()
    return single, hundred, last, ff


def run(quick: bool = False) -> dict:
    """Start sc16 in Mininet under a controller process and measure; return the result object."""
    missing = mininet_missing()
    if missing:
        raise RuntimeError("tsdn bench reroute needs " + ", ".join(missing))
    from mininet.log import setLogLevel

    from topologies.mininet_builder import default_scale

    setLogLevel("critical")
    rounds = Rounds.for_run(quick)
    topology = Topology.load(builtin_topology(TOPOLOGY))
    scale = default_scale(topology)
    facts = machine()
    ensure_ovs_without_network()
    with tempfile.TemporaryDirectory(prefix="tsdn-bench-reroute-") as tmp:
        workdir = Path(tmp)
        pairs = pairs_across(topology, LINK)[:rounds.affected]
        core = {design: core_baseline(topology, pairs, workdir, design) for design in DESIGNS}
        say(f"reroute: {TOPOLOGY} in Mininet at scale {scale:g}; {len(pairs)} pairs cross {LINK}; the core alone "
            f"moves them in {core[LABELS].seconds * 1000:.1f} ms with labels ({core[LABELS].flow_mods_per_move:g} "
            f"flow-mods per move, {core[LABELS].path_messages} entries of new paths for all of them), "
            f"{core[PER_HOP].seconds * 1000:.1f} ms per-hop ({core[PER_HOP].flow_mods_per_move:g} per move)")
        runs = {name: measured(name, topology, rounds, workdir, scale) for name in RUNS}
    single, hundred, last, ff = runs[LABELS]
    result = {
        "bench": "reroute",
        "reroute_1_p50_ms": percentile_ms(single, 0.5),
        "reroute_1_p99_ms": percentile_ms(single, 0.99),
        "reroute_100_p50_ms": percentile_ms(hundred, 0.5),
        "reroute_100_p99_ms": percentile_ms(hundred, 0.99),
        "reroute_100_last_ms": percentile_ms(last, 1.0),
        "ff_gap_ms": round(max(r.gap_s for r in ff) * 1000, 3),
        "ff_gap_without_cut_ms": round(max(r.quiet_s for r in ff) * 1000, 3),
        "ff_probes_lost": sum(r.lost for r in ff),
        "ff_loss_gap_ms": round(max(r.loss_gap_s for r in ff) * 1000, 3),
        "ff_probe_interval_us": FF_PROBE_INTERVAL_US,
        "ff_probe_achieved_interval_us": max((r.achieved_interval_us for r in ff),
                                             key=lambda a: abs(a - FF_PROBE_INTERVAL_US)),
        "quick": quick,
        "topology": TOPOLOGY,
        "link": LINK,
        "emulation_scale": scale,
        "rounds": {"reroute_1": rounds.single, "reroute_100": rounds.hundred, "ff_gap": rounds.ff},
        "affected": len(pairs),
        "flow_design": LABELS,
        "flow_mods_per_move": round(core[LABELS].flow_mods_per_move, 2),
        "max_flow_mods_per_move": core[LABELS].max_flow_mods_per_move,
        "new_path_entries": core[LABELS].path_messages,
        "per_hop_reroute_1_p50_ms": percentile_ms(runs[PER_HOP][0], 0.5),
        "per_hop_reroute_100_p50_ms": percentile_ms(runs[PER_HOP][1], 0.5),
        "per_hop_reroute_100_p99_ms": percentile_ms(runs[PER_HOP][1], 0.99),
        "per_hop_reroute_100_last_ms": percentile_ms(runs[PER_HOP][2], 1.0),
        "per_hop_ff_gap_ms": round(max(r.gap_s for r in runs[PER_HOP][3]) * 1000, 3),
        "per_hop_flow_mods_per_move": round(core[PER_HOP].flow_mods_per_move, 2),
        "no_bundles_reroute_1_p50_ms": percentile_ms(runs[NO_BUNDLES][0], 0.5),
        "no_bundles_reroute_100_p50_ms": percentile_ms(runs[NO_BUNDLES][1], 0.5),
        "no_bundles_reroute_100_p99_ms": percentile_ms(runs[NO_BUNDLES][1], 0.99),
        "no_bundles_ff_gap_ms": round(max(r.gap_s for r in runs[NO_BUNDLES][3]) * 1000, 3),
        "core_only_reroute_100_ms": round(core[LABELS].seconds * 1000, 3),
        "per_hop_core_only_reroute_100_ms": round(core[PER_HOP].seconds * 1000, 3),
        "targets": TARGETS,
        "meets_targets": percentile_ms(hundred, 0.5) <= TARGETS["reroute_100_p50_ms"]
        and max(r.gap_s for r in ff) * 1000 <= TARGETS["ff_gap_ms"]
        and core[LABELS].max_flow_mods_per_move <= 2 * TARGETS["flow_mods_per_direction"],
        "machine": {**facts, "datapath": "userspace (netdev)"},
    }
    say(f"targets (reroute of 100 p50 <= {TARGETS['reroute_100_p50_ms']} ms, fast-failover gap <= "
        f"{TARGETS['ff_gap_ms']} ms): {'met' if result['meets_targets'] else 'missed'}")
    return result


def main(quick: bool = False) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    return print_result("reroute", lambda: run(quick=quick))
