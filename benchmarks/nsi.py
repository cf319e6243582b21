"""`tsdn bench nsi`: reserve-to-provisioned time and connections per second through tsdn's NSI CS 2.0
provider (/NSI/services/CS2) for 16 concurrent requesters, against tsdn's own gRPC path (a held
reservation committed to ACTIVE) in the same run, on the same controller.

A real `tsdn controller` subprocess on sc16 serves NSI (`--listen-http`, `--domain`, `--hold-timeout
600`, a tokens file with the bench's service token). Each of `clients` requesters is an `NsiPeer`
(sdn_app.web.nsi_requester: SOAP built with lxml, `Authorization: Bearer` with the token) with a
requester NSA id of its own and its own `CallbackReceiver`, served by an aiohttp server on a free
loopback port of this process (its replyTo). Every connection joins the ports of its own ordered DTN
pair, `urn:ogf:network:<domain>:topology:<dtn>?vlan=N`, with a VLAN per port that no other
connection uses there, at 100 Mbit/s. Each requester works through its share one cycle at a time:

- cycle: reserve -> reserveConfirmed, reserveCommit -> reserveCommitConfirmed, provision ->
  provisionConfirmed, then the dataPlaneStateChange active=true notification. Reserve-to-provisioned
  runs from the reserve call to that notification (the data plane is up); reserve to
  provisionConfirmed is shown too, and so is reserve to the reservation's ACTIVE event on one
  WatchReservations stream opened before anything is measured. Connections per second: completed
  cycles per wall second of the phase.
- teardown (a second phase): release -> releaseConfirmed, terminate -> terminateConfirmed, for
  every connection reserved; terminated per second.

Baseline, same pairs, same number of clients (threads, each a `TsdnClient`): CreateReservation with
`hold`, CommitReservation, and the reservation's ACTIVE event on the stream (reserve-to-provisioned;
the CommitReservation reply stands for provisionConfirmed), then DeleteReservation (terminated).

A small sample of full cycles with the real `onsa` command line of OpenNSA (env TSDN_ONSA, else
../shared/tools/opennsa/onsa beside the repository; it needs the venv and source its setup.sh
builds): `onsa reserve` (reserve and commit) then `onsa provision`, one process each, timed from
the start of the first to the end of the second and to the connection's ACTIVE event; then `onsa
release` and `onsa terminate`. Each onsa command is a process of its own, so its start (Python,
Twisted) is in those times: the sample checks the order of magnitude a real requester sees. It is
skipped, saying why, when onsa cannot run here.

Two runs: on a ledger-only controller (`--no-openflow`: the protocol's own cost), and, when the
machine has root, Mininet and Open vSwitch, sc16 in Mininet with the controller on its switches
(VLAN circuits as flows, meters and barriers on real Open vSwitch); `--ledger-only` skips that one.
The headline rates are the ledger-only run's, the headline times the switches' when they ran.

Human lines go to stderr; the last line printed to stdout is one JSON object:
`{"bench": "nsi", "connections_per_s": ..., "terminated_per_s": ..., "reserve_to_provisioned_ms_p50":
..., "grpc": {...}, "onsa": {...}, ...}`.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import re
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory

from aiohttp import web

from benchmarks.controller_process import ControllerProcess
from benchmarks.northbound import latency_summary, machine, percentile_ms
from benchmarks.report import free_port, print_result, say
from benchmarks.sense import Step, run_step
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
from sdn_app.web.nsi_requester import CallbackReceiver, DataPlaneStateChange, ErrorEvent, NsiPeer
from topologies import builtin_topology

M = 10**6
MBPS = 100  # each connection (and reservation): 100 Mbit/s
TOPOLOGY = "sc16"
DOMAIN = "bench.nsi.example.net"
PRINCIPAL = "bench"
TOKEN = "bench-nsi-token-" + "0123456789abcdef" * 2
NSI_LABEL = "tsdn/nsi"  # the label of a reservation booking an NSI connection: its connection id
RECEIVER_PATH = "/NSI/services/RequesterService2"
ARRIVAL_TIMEOUT = 60.0  # seconds a data plane or ACTIVE event may take
CALLBACK_TIMEOUT = 60.0
ONSA_TIMEOUT = 180.0  # onsa waits 130 s for a confirmation itself
FIRST_VLAN = 1000
CONNECTIONS, QUICK_CONNECTIONS = 600, 96
ONSA_SAMPLE = 5
REPO = Path(__file__).resolve().parents[1]


class Vlans:
    """Hands out VLANs so that no two connections use the same VLAN on the same port."""

    def __init__(self, first: int = FIRST_VLAN):
        self.first = first
        self.next: dict[str, int] = {}

    def take(self, port: str) -> int:
        """A VLAN on `port` not handed out before."""
        vlan = self.next.get(port, self.first)
        if vlan > 4094:
            raise RuntimeError(f"no VLAN left on {port} above {self.first}")
        self.next[port] = vlan + 1
        return vlan


class NsiWatcher(Watcher):
    """`tsdn bench setup`'s watch (each reservation's first ACTIVE or FAILED event by reservation id in
    `arrivals`), indexing NSI connections' reservations by connection id in `by_connection` too."""

    def __init__(self, address: str):
        super().__init__(address, token=TOKEN, include_existing=False)
        self.by_connection: dict[str, Arrival] = {}

    def arrived(self, event: pb.ReservationEvent, arrival: Arrival) -> None:
        if (connection := event.reservation.labels.get(NSI_LABEL)):
            self.by_connection.setdefault(connection, arrival)

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

    def seconds_to_active(self, began: dict[str, float]) -> tuple[list[float], int, bool]:
        """Wait for every connection id of `began` in `by_connection`: (seconds from its `began` to its
        reservation's ACTIVE event, for each ACTIVE one; how many are not ACTIVE; whether all arrived)."""
        arrived = self.wait(list(began), ARRIVAL_TIMEOUT, self.by_connection)
        with self.cond:
            active = [self.by_connection[k].at - began[k] for k in began
                      if k in self.by_connection and self.by_connection[k].state == pb.ACTIVE]
        return active, len(began) - len(active), arrived


@dataclass
class Cycle:
    """One connection's reserve-to-provisioned cycle: perf_counter times, None until reached."""

    pair: tuple[str, str]
    stps: tuple[str, str]
    connection_id: str = ""
    owner: int = -1  # the requester that reserved it
    began: float = 0.0
    reserved: float | None = None
    committed: float | None = None
    provision_confirmed: float | None = None
    data_plane_up: float | None = None


@dataclass
class Requester:
    """One NSI requester of the bench: its peer, the aiohttp server its callbacks come to, and what
    its notifications said (data plane up, error events) by connection id."""

    index: int
    peer: NsiPeer
    runner: web.AppRunner
    up: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, asyncio.Future[None]] = field(default_factory=dict)

    def notified(self, callback: object) -> None:
        """A notification: a data plane up or an error event settles the cycle waiting for it."""
        if isinstance(callback, DataPlaneStateChange) and callback.active:
            self.up.setdefault(callback.connection_id, time.perf_counter())
        elif isinstance(callback, ErrorEvent):
            self.errors.setdefault(callback.connection_id, f"errorEvent {callback.event}: "
                                   f"{callback.error.text if callback.error else ''}")
        else:
            return
        future = self.waiting.get(callback.connection_id)
        if future is not None and not future.done():
            future.set_result(None)

    async def data_plane_up(self, connection_id: str, timeout: float) -> float:
        """The perf_counter time the data plane of `connection_id` came up (RuntimeError when an error
        event came instead, or nothing within `timeout`)."""
        if connection_id not in self.up and connection_id not in self.errors:
            future = self.waiting[connection_id] = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(future, timeout)
            except TimeoutError:
                raise RuntimeError(f"{connection_id}: no dataPlaneStateChange active=true within {timeout:g} s") \
                    from None
            finally:
                self.waiting.pop(connection_id, None)
        if connection_id in self.up:
            return self.up[connection_id]
        raise RuntimeError(f"{connection_id}: {self.errors[connection_id]}")


def provider_nsa() -> str:
    return f"urn:ogf:network:{DOMAIN}:nsa"


def stp(dtn: str, vlan: int) -> str:
    """The STP of DTN `dtn`'s port with `vlan` in the bench's domain."""
    return f"urn:ogf:network:{DOMAIN}:topology:{dtn}?vlan={vlan}"


async def start_requester(index: int, http: int) -> Requester:
    """Requester `index` of the provider on HTTP port `http`, its callback server listening."""
    nsa = f"urn:ogf:network:requester{index}.{DOMAIN}:nsa"
    receiver = CallbackReceiver(nsa)
    app = web.Application()
    app.router.add_post(RECEIVER_PATH, receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    peer = NsiPeer(provider_nsa(), f"http://127.0.0.1:{http}/NSI/services/CS2", nsa,
                   f"http://127.0.0.1:{port}{RECEIVER_PATH}", receiver, authorization=f"Bearer {TOKEN}",
                   callback_timeout=CALLBACK_TIMEOUT)
    requester = Requester(index, peer, runner)
    peer.notify = requester.notified
    return requester


async def run_async_step(name: str, shares: list[list], requesters: list[Requester],
                         call: Callable[[Requester, object], Awaitable[None]],
                         give_up: Callable[[Step], str | None] | None = None) -> Step:
    """`call(requester, item)` for every item, each requester working through its share (`shares`, one
    list per requester) in order, all at once; `give_up(step)`: a reason to stop starting items (they
    are counted as errors), else None."""
    step = Step(name)

    async def work(requester: Requester, share: list) -> None:
        for item in share:
            if give_up is not None and (reason := give_up(step)):
                step.errors.append(f"not tried: {reason}")
                continue
            began = time.perf_counter()
            try:
                await call(requester, item)
            except Exception as error:  # a refused call is counted and named, the run goes on
                step.errors.append(f"{type(error).__name__}: {str(error)[:300]}")
                continue
            step.began.append(began)
            step.latencies.append(time.perf_counter() - began)
    started = time.perf_counter()
    await asyncio.gather(*(work(r, share) for r, share in zip(requesters, shares, strict=True)))
    step.wall = time.perf_counter() - started
    return step


def hopeless(step: Step, clients: int) -> str | None:
    """Why to stop a phase where every one of the first cycles failed (with switches that do not bring
    circuits up, each would wait its full timeout), else None."""
    if not step.latencies and len(step.errors) >= max(clients, 8):
        return f"the first {len(step.errors)} cycles all failed, the first with: {step.errors[0]}"
    return None


async def nsi_phases(http: int, watcher: NsiWatcher, cycles: list[Cycle], clients: int) -> dict:
    """Reserve, commit and provision every cycle's connection to data plane up, then release and
    terminate them, through `clients` NSI requesters."""
    requesters = [await start_requester(i, http) for i in range(clients)]
    try:
        end = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)

        async def cycle(requester: Requester, item: object) -> None:
            assert isinstance(item, Cycle)
            peer = requester.peer
            item.owner = requester.index
            item.began = time.perf_counter()
            confirmed = await peer.reserve(*item.stps, MBPS, end, description=f"bench {item.pair[0]} {item.pair[1]}")
            item.connection_id = confirmed.connection_id
            item.reserved = time.perf_counter()
            await peer.commit(item.connection_id)
            item.committed = time.perf_counter()
            await peer.provision(item.connection_id)
            item.provision_confirmed = time.perf_counter()
            item.data_plane_up = await requester.data_plane_up(item.connection_id, ARRIVAL_TIMEOUT)
        provisioned = await run_async_step("reserve_to_provisioned", [cycles[i::clients] for i in range(clients)],
                                           requesters, cycle, lambda step: hopeless(step, clients))
        began = {c.connection_id: c.began for c in cycles if c.data_plane_up is not None}
        to_event, not_active, arrived = watcher.seconds_to_active(began)

        async def teardown(requester: Requester, item: object) -> None:
            assert isinstance(item, Cycle)
            if item.provision_confirmed is not None:
                await requester.peer.release(item.connection_id)
            await requester.peer.terminate(item.connection_id)
        # each connection is torn down by the requester that reserved it (only its requester sees it)
        shares = [[c for c in cycles if c.connection_id and c.owner == i] for i in range(clients)]
        terminated = await run_async_step("release_terminate", shares, requesters, teardown)
        return nsi_result(cycles, provisioned, to_event, not_active, arrived, terminated)
    finally:
        for requester in requesters:
            await requester.peer.close()
            await requester.runner.cleanup()


def nsi_result(cycles: list[Cycle], provisioned: Step, to_event: list[float], not_active: int, arrived: bool,
               terminated: Step) -> dict:
    """The NSI run's figures."""
    done = [c for c in cycles if c.data_plane_up is not None]
    to_plane = [c.data_plane_up - c.began for c in done]
    to_confirmed = [c.provision_confirmed - c.began for c in done]
    operations = {
        "reserve": [c.reserved - c.began for c in done],
        "reserve_commit": [c.committed - c.reserved for c in done],
        "provision": [c.provision_confirmed - c.committed for c in done],
        "provision_to_data_plane": [c.data_plane_up - c.provision_confirmed for c in done],
    }
    return figures(len(done), provisioned, to_plane, to_confirmed, to_event, not_active, arrived, terminated) | {
        "operations_ms": {name: latency_summary(values) for name, values in operations.items()}}


def figures(done: int, provisioned: Step, to_plane: list[float], to_confirmed: list[float], to_event: list[float],
            not_active: int, arrived: bool, terminated: Step) -> dict:
    """One run's figures, NSI or gRPC alike."""
    return {
        "connections_per_s": round(done / provisioned.wall, 1) if done and provisioned.wall > 0 else None,
        "terminated_per_s": terminated.rate(),
        "reserve_to_provisioned_ms_p50": percentile_ms(to_plane, 0.5),
        "reserve_to_provisioned_ms_p99": percentile_ms(to_plane, 0.99),
        "reserve_to_provisioned_ms_max": percentile_ms(to_plane, 1.0),
        "reserve_to_provision_confirmed_ms_p50": percentile_ms(to_confirmed, 0.5),
        "reserve_to_provision_confirmed_ms_p99": percentile_ms(to_confirmed, 0.99),
        "reserve_to_active_event_ms_p50": percentile_ms(to_event, 0.5),
        "reserve_to_active_event_ms_p99": percentile_ms(to_event, 0.99),
        "provisioned": done, "not_active": not_active, "all_arrived": arrived,
        "steps": {s.name: s.summary() for s in (provisioned, terminated)},
    }


def grpc_run(address: str, watcher: NsiWatcher, pairs: list[tuple[str, str]], clients: int) -> dict:
    """The same work over gRPC: a held reservation per pair, committed, to its ACTIVE event; deleted."""
    tsdn = [TsdnClient(address, token=TOKEN, timeout=30) for _ in range(clients)]
    names: dict[tuple[str, str], str] = {}
    times: dict[str, tuple[float, float]] = {}  # reservation -> (began, commit replied)
    lock = threading.Lock()
    failures: list[str] = []

    def cycle(thread: int, pair: tuple[str, str]) -> None:
        if not times and len(failures) >= max(clients, 8):
            raise RuntimeError(f"not tried: the first {len(failures)} cycles all failed, the first with: "
                               f"{failures[0]}")
        began = time.perf_counter()
        try:
            reservation = tsdn[thread].create_reservation(*pair, MBPS * M, hold=True).id
            with lock:
                names[pair] = reservation
            tsdn[thread].commit_reservation(reservation)
            replied = time.perf_counter()
            if not watcher.wait([reservation], ARRIVAL_TIMEOUT):
                raise RuntimeError(f"{reservation}: no ACTIVE event within {ARRIVAL_TIMEOUT:g} s")
            arrival = watcher.arrivals[reservation]
            if arrival.state != pb.ACTIVE:
                raise RuntimeError(f"{reservation}: FAILED: {arrival.reason}")
        except Exception as error:
            with lock:
                failures.append(f"{type(error).__name__}: {str(error)[:300]}")
            raise
        with lock:
            times[reservation] = (began, replied)
    try:
        provisioned = run_step("reserve_to_provisioned", pairs, clients, cycle)
        with watcher.cond:
            to_plane = [watcher.arrivals[r].at - began for r, (began, _) in times.items()]
        to_confirmed = [replied - began for began, replied in times.values()]
        live = [p for p in pairs if p in names]
        terminated = run_step("delete", live, clients,
                              lambda thread, pair: tsdn[thread].delete_reservation(names[pair]))
        return figures(len(times), provisioned, to_plane, to_confirmed, to_plane, len(names) - len(times),
                       len(times) == len(names), terminated)
    finally:
        for client in tsdn:
            client.close()


# -- the onsa sample ------------------------------------------------------------------------

def onsa_command() -> Path:
    """Where the onsa wrapper is: env TSDN_ONSA, else ../shared/tools/opennsa/onsa beside the repository."""
    return Path(os.environ.get("TSDN_ONSA") or REPO.parent / "shared" / "tools" / "opennsa" / "onsa")


def onsa_missing() -> str | None:
    """Why onsa cannot run here, or None."""
    command = onsa_command()
    if not command.is_file() or not os.access(command, os.X_OK):
        return f"no onsa at {command} (set TSDN_ONSA to OpenNSA's onsa wrapper)"
    venv = Path(os.environ.get("OPENNSA_VENV", "/tmp/opennsa-venv"))
    source = Path(os.environ.get("OPENNSA_SRC", "/tmp/opennsa-src"))
    if not (venv / "bin" / "python").exists() or not (source / "onsa").is_file():
        return (f"onsa needs OpenNSA's venv {venv} and source {source}: run {command.parent / 'setup.sh'} "
                "(or set OPENNSA_VENV and OPENNSA_SRC)")
    return None


def onsa(args: list[str], defaults: Path, http: int, expect: str) -> tuple[str, float]:
    """Run one onsa command against the bench's provider: (its output, seconds); RuntimeError naming
    what it said when `expect` (a regular expression) is not in its output."""
    command = [str(onsa_command()), args[0], "-f", str(defaults), "-u", f"http://127.0.0.1:{http}/NSI/services/CS2",
               "-p", f"{DOMAIN}:nsa", "-r", f"onsa.{DOMAIN}:nsa", "-h", "127.0.0.1", "-o", str(free_port()),
               "-m", f"Bearer {TOKEN}", *args[1:]]
    began = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=ONSA_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"onsa {args[0]} did not finish within {ONSA_TIMEOUT:g} s") from None
    seconds = time.perf_counter() - began
    output = done.stdout + done.stderr
    if done.returncode != 0 or not re.search(expect, output):
        lines = [line for line in output.splitlines() if line.strip() and "factory" not in line and "Port" not in line]
        raise RuntimeError(f"onsa {args[0]} (exit {done.returncode}): " + " | ".join(lines[-4:])[:400])
    return output, seconds


def onsa_sample(workdir: Path, http: int, watcher: NsiWatcher, pairs: list[tuple[str, str]], vlans: Vlans) -> dict:
    """Full cycles with the real onsa, one at a time: reserve (and commit), provision, release, terminate."""
    defaults = workdir / "onsa-defaults"  # empty: onsa reads no ~/.opennsa-cli
    defaults.write_text("")
    to_confirmed: list[float] = []
    began_of: dict[str, float] = {}
    commands: dict[str, list[float]] = {"reserve": [], "provision": [], "release": [], "terminate": []}
    errors: list[str] = []
    for src, dst in pairs:
        began = time.perf_counter()
        try:
            end = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")
            ends = [f"{DOMAIN}:topology:{dtn}#vlan={vlans.take(dtn)}" for dtn in (src, dst)]
            output, seconds = onsa(["reserve", "-s", ends[0], "-d", ends[1], "-b", str(MBPS), "-e", end], defaults,
                                   http, r"Reservation committed at")
            commands["reserve"].append(seconds)
            found = re.search(r"held\. Id (\S+) at", output)
            if found is None:
                raise RuntimeError(f"onsa reserve named no connection id: {output[-300:]!r}")
            connection = found.group(1)
            _, seconds = onsa(["provision", "-c", connection], defaults, http, rf"Connection {connection} provisioned")
            commands["provision"].append(seconds)
            to_confirmed.append(time.perf_counter() - began)
            began_of[connection] = began
            for operation in ("release", "terminate"):
                _, seconds = onsa([operation, "-c", connection], defaults, http,
                                  rf"Connection {connection} {operation}d")
                commands[operation].append(seconds)
        except RuntimeError as error:
            errors.append(str(error))
    to_event, not_active, arrived = watcher.seconds_to_active(began_of) if began_of else ([], 0, True)
    return {
        "cycles": len(pairs), "ok": len(to_confirmed), "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "reserve_to_provision_confirmed_ms_p50": percentile_ms(to_confirmed, 0.5),
        "reserve_to_provision_confirmed_ms_max": percentile_ms(to_confirmed, 1.0),
        "reserve_to_active_event_ms_p50": percentile_ms(to_event, 0.5),
        "reserve_to_active_event_ms_max": percentile_ms(to_event, 1.0),
        "not_active": not_active, "all_arrived": arrived,
        "command_ms_p50": {name: percentile_ms(values, 0.5) for name, values in commands.items()},
        "note": "each onsa command is a process of its own: its start (Python, Twisted) is in these times",
    }


# -- the runs ---------------------------------------------------------------------------------

def both(workdir: Path, address: str, http: int, pairs: list[tuple[str, str]], spare: tuple[str, str],
         clients: int, onsa_pairs: list[tuple[str, str]], settle: Callable[[], object] | None, label: str) -> dict:
    """The NSI run, its gRPC baseline and the onsa sample on one controller, one watch open throughout
    (`spare`: a pair for the watch's warm-up)."""
    watcher = NsiWatcher(address)
    watcher.start()
    vlans = Vlans()
    try:
        watcher.warm_up(spare)
        if settle is not None:
            settle()
        say(f"{label}: NSI: {len(pairs)} connections, {clients} requesters")
        cycles = [Cycle(pair, (stp(pair[0], vlans.take(pair[0])), stp(pair[1], vlans.take(pair[1]))))
                  for pair in pairs]
        nsi = asyncio.run(nsi_phases(http, watcher, cycles, clients))
        say(f"  {nsi['connections_per_s']} connections/s reserved to provisioned, {nsi['terminated_per_s']} "
            f"terminated/s; reserve to data plane up p50 {nsi['reserve_to_provisioned_ms_p50']} ms, p99 "
            f"{nsi['reserve_to_provisioned_ms_p99']} ms (to provisionConfirmed p50 "
            f"{nsi['reserve_to_provision_confirmed_ms_p50']} ms)")
        _say_errors(nsi)
        if settle is not None:
            settle()
        say(f"{label}: gRPC baseline: {len(pairs)} held reservations, committed to ACTIVE, deleted, {clients} clients")
        grpc = grpc_run(address, watcher, pairs, clients)
        say(f"  {grpc['connections_per_s']} reservations/s created to ACTIVE, {grpc['terminated_per_s']} deleted/s; "
            f"create to ACTIVE p50 {grpc['reserve_to_provisioned_ms_p50']} ms, p99 "
            f"{grpc['reserve_to_provisioned_ms_p99']} ms")
        _say_errors(grpc)
        if settle is not None:
            settle()
        out: dict = {"nsi": nsi, "grpc": grpc, "onsa": None, "onsa_skipped": onsa_missing()}
        if not onsa_pairs:
            out["onsa_skipped"] = "no onsa sample asked"
        elif out["onsa_skipped"] is None:
            say(f"{label}: onsa: {len(onsa_pairs)} full cycles, one at a time")
            out["onsa"] = onsa_sample(workdir, http, watcher, onsa_pairs, vlans)
            say(f"  reserve to provisionConfirmed p50 {out['onsa']['reserve_to_provision_confirmed_ms_p50']} ms, to "
                f"ACTIVE p50 {out['onsa']['reserve_to_active_event_ms_p50']} ms ({out['onsa']['ok']} of "
                f"{len(onsa_pairs)} cycles)" + (f"; {out['onsa']['first_error']}" if out['onsa']['errors'] else ""))
            if settle is not None:
                settle()
        else:
            say(f"{label}: no onsa sample: {out['onsa_skipped']}")
        return out
    finally:
        watcher.stop()


def _say_errors(run: dict) -> None:
    for name, step in run["steps"].items():
        if step["errors"]:
            say(f"  {name}: {step['errors']} failed, the first: {step['first_error']}")


def controller_args(http: int) -> tuple[str, ...]:
    return ("--listen-http", f"127.0.0.1:{http}", "--domain", DOMAIN, "--hold-timeout", "600")


def run(quick: bool = False, connections: int | None = None, clients: int = 16, seed: int = 16,
        ledger_only: bool = False, onsa_cycles: int = ONSA_SAMPLE) -> dict:
    topology = Topology.load(builtin_topology(TOPOLOGY))
    every_pair = ordered_pairs(sorted(topology.dtns), random.Random(seed))
    asked = connections or (QUICK_CONNECTIONS if quick else CONNECTIONS)
    spare = every_pair[-1]  # the watch's warm-up (released before anything is measured)
    pairs = every_pair[:min(asked, len(every_pair) - 1)]
    if len(pairs) < asked:
        say(f"nsi: {asked} connections asked, but {TOPOLOGY} has only {len(every_pair)} ordered DTN pairs (one "
            f"for the watch's warm-up): {len(pairs)}")
    onsa_pairs = pairs[:onsa_cycles]  # after the measured runs released them
    results: dict = {}
    skipped = None
    with TemporaryDirectory(prefix="tsdn-bench-nsi-") as tmp:
        workdir = Path(tmp)
        http = free_port()
        ledger = ControllerProcess(workdir / "ledger", principal=PRINCIPAL, token=TOKEN, topology=TOPOLOGY,
                                   extra=controller_args(http))
        try:
            address = ledger.start()
            results["ledger_only"] = both(workdir, address, http, pairs, spare, clients, onsa_pairs, None,
                                          "ledger only")
        finally:
            ledger.stop()
        missing = mininet_missing()
        if ledger_only or missing:
            skipped = "--ledger-only" if ledger_only else "needs " + ", ".join(missing)
            say(f"nsi: no run on switches ({skipped})")
        else:
            results["openflow"] = switched(workdir, topology, pairs, spare, clients, onsa_pairs)
    return summary(results, skipped, asked, len(pairs), clients, quick)


def switched(workdir: Path, topology: Topology, pairs: list[tuple[str, str]], spare: tuple[str, str],
             clients: int, onsa_pairs: list[tuple[str, str]]) -> dict:
    """The same runs with sc16 in Mininet under the controller (real flows, meters, barriers)."""
    from mininet.log import setLogLevel

    from topologies.mininet_builder import default_scale

    setLogLevel("critical")
    scale = default_scale(topology)
    ensure_ovs_without_network()
    http = free_port()
    with on_switches(workdir / "openflow", topology, scale, principal=PRINCIPAL, token=TOKEN,
                     extra=controller_args(http)) as running:
        outcome = both(workdir, running.address, http, pairs, spare, clients, onsa_pairs, running.settle,
                       f"{TOPOLOGY} in Mininet (scale {scale:g})")
    outcome["scale"] = scale
    return outcome


HEADLINE_RATES = ("connections_per_s", "terminated_per_s")
HEADLINE_TIMES = ("reserve_to_provisioned_ms_p50", "reserve_to_provisioned_ms_p99", "reserve_to_provisioned_ms_max",
                  "reserve_to_provision_confirmed_ms_p50", "reserve_to_provision_confirmed_ms_p99")


def summary(results: dict, skipped: str | None, asked: int, connections: int, clients: int, quick: bool) -> dict:
    ledger = results["ledger_only"]
    flows = results.get("openflow") or ledger
    return {
        "bench": "nsi", "quick": quick, "clients": clients, "connections": connections,
        "connections_asked": asked, "mbps_each": MBPS, "topology": TOPOLOGY,
        **{key: ledger["nsi"][key] for key in HEADLINE_RATES},
        **{key: flows["nsi"][key] for key in HEADLINE_TIMES},
        "times_measured_on": "openflow" if "openflow" in results else "ledger_only",
        "grpc": {key: ledger["grpc"][key] for key in HEADLINE_RATES}
        | {key: flows["grpc"][key] for key in HEADLINE_TIMES},
        "onsa": flows["onsa"], "onsa_skipped": flows["onsa_skipped"],
        "ledger_only": ledger, "openflow": results.get("openflow"), "openflow_skipped": skipped,
        "machine": machine(),
    }


def main(quick: bool = False, connections: int | None = None, clients: int = 16, seed: int = 16,
         ledger_only: bool = False, onsa_cycles: int = ONSA_SAMPLE) -> int:
    """Run the benchmark and print its JSON line; return the exit code. `onsa_cycles`: how many full
    cycles the real onsa makes (0: none)."""
    for name, value, least in (("--connections", connections, 1), ("--clients", clients, 1),
                               ("onsa cycles", onsa_cycles, 0)):
        if value is not None and value < least:
            say(f"tsdn bench nsi: {name} must be at least {least}, got {value}")
            return 2
    began = time.perf_counter()

    def produce() -> dict:
        result = run(quick=quick, connections=connections, clients=clients, seed=seed, ledger_only=ledger_only,
                     onsa_cycles=onsa_cycles)
        result["seconds"] = round(time.perf_counter() - began, 1)
        say(f"tsdn bench nsi: done in {result['seconds']:.0f} s")
        return result
    return print_result("nsi", produce)
