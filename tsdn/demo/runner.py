"""Run a scenario in Mininet: controller process, network, agents, timeline, teardown.

    runner = DemoRunner(loaded, out_dir, console)
    code = runner.run()        # 0 every expectation held, 1 one failed, 3 setup failed, 130 interrupted

Setup: a `tsdn controller` process (tokens for a service and one agent per DTN, the scenario's
emulation scale, a unix socket the Mininet hosts reach, the live map if asked), the Mininet
network of the topology pointed at it, and `tsdn agent run` in each agent's DTN host. The
timeline then runs on its own clock; every second the runner samples the controller's bookings
and redraws the console, while watch streams record every transfer's rate reports and every
reservation's changes. At the end (or on Ctrl-C / SIGTERM) everything is torn down in reverse
order and the report written.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from sdn_app.core import decisions
from sdn_app.core.errors import FailedPrecondition
from sdn_app.core.nsi import nsa_id
from sdn_app.core.nsi_segments import SEGMENT_LABEL, SEGMENT_NOTE
from sdn_app.core.units import format_bandwidth
from sdn_app.core.validation import default_domain
from tsdn.demo.console import Console
from tsdn.demo.cross_traffic import CrossTraffic
from tsdn.demo.expectations import evaluate
from tsdn.demo.peers import PeerSetupError, RunningPeers, lifecycles, neighbours, require_recipe
from tsdn.demo.record import BookingSample, Flow, LinkSample, NsiSegment, RateSample, Recording
from tsdn.demo.report import summary, write_report
from tsdn.demo.scenario import (
    ClearLinkAction,
    CongestLinkAction,
    FailLinkAction,
    LoadedScenario,
    ReleaseAction,
    ReserveAction,
    RestoreLinkAction,
    TransferAction,
    transfer_bytes,
)

SETUP_DEADLINE = 45.0  # seconds for the controller, the switches and the agents each
TICK = 0.1  # the timeline clock's resolution
SAMPLE_EVERY = 1.0
BOOTSTRAP_HINT = "run scripts/bootstrap.sh as root first (it installs Mininet and starts Open vSwitch)"
EXIT_FAILED = 1
EXIT_SETUP = 3
EXIT_INTERRUPTED = 130
SERVICE_TOKEN_PRINCIPAL = "demo"
SEGMENT_END_DEADLINE = 45.0  # seconds the neighbours get, after the last release, to have terminated every segment


class SetupError(FailedPrecondition):
    """The demo could not be set up; says what to do."""


def check_machine() -> None:
    """Root, Mininet and a running Open vSwitch, or a SetupError saying to bootstrap."""
    if os.geteuid() != 0:
        raise SetupError(f"tsdn demo needs root (Mininet): {BOOTSTRAP_HINT}, then run tsdn demo as root")
    try:
        import mininet  # noqa: F401
    except ImportError:
        raise SetupError(f"the mininet Python package is missing: {BOOTSTRAP_HINT}") from None
    try:
        probe = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True, timeout=15)
        running = probe.returncode == 0
    except FileNotFoundError:
        raise SetupError(f"Open vSwitch is not installed: {BOOTSTRAP_HINT}") from None
    except subprocess.TimeoutExpired:
        running = False
    if not running:
        raise SetupError(f"Open vSwitch is not running: {BOOTSTRAP_HINT}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def port_is_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError:
            return False
    return True


def tsdn_command() -> list[str]:
    """How to run the `tsdn` CLI of this very installation (also inside Mininet hosts)."""
    return [sys.executable, "-m", "tsdn"]


class _Interrupted(Exception):
    pass


class DemoRunner:
    """One run of one scenario."""

    def __init__(self, loaded: LoadedScenario, out_dir: Path, console: Console, http: str | None = "127.0.0.1:8080"):
        self.loaded = loaded
        self.scenario = loaded.scenario
        self.topology = loaded.topology
        self.out_dir = out_dir
        self.console = console
        self.http = http
        self.recording = Recording(self.scenario.name)
        self.recording.links = {link.label: (link.a, link.b) for link in self.topology.spec.links}
        for link in self.topology.spec.links:
            self.recording.links[link.label] = (link.a, link.b)
        for dtn in self.topology.spec.dtns:
            if dtn.beyond is not None:
                self.recording.remote_dtns[dtn.name] = (dtn.beyond, self.topology.interdomain[dtn.beyond].peer.nsa)
        self._peers: RunningPeers | None = None
        self.t0: float | None = None
        self._setup_start = time.time()
        self._stack = contextlib.ExitStack()
        self._workdir: Path | None = None
        self._controller: subprocess.Popen | None = None
        self._agents: dict[str, subprocess.Popen] = {}
        self._net = None
        self._cross: CrossTraffic | None = None
        self._client = None
        self._raw: queue.Queue = queue.Queue()  # (kind, payload) from the watch threads
        self._reservation_paths: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}  # id -> (switches, links)
        self._reservation_states: dict[str, int] = {}
        self._by_reservation: dict[str, str] = self.recording.reservation_flows  # reservation id -> flow name
        self._by_transfer: dict[str, str] = {}  # transfer id -> flow name
        self._link_state: dict[str, str] = {}
        self.map_url: str | None = None

    # -- time and events -----------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the timeline started (negative during setup)."""
        return time.time() - (self.t0 if self.t0 is not None else self._setup_start)

    def rel(self, epoch: float) -> float:
        return epoch - (self.t0 if self.t0 is not None else self._setup_start)

    def event(self, kind: str, message: str, **details: Any) -> None:
        # During setup: epoch times, made relative to the timeline start once it is known.
        self.recording.event(self.now() if self.t0 is not None else time.time(), kind, message=message, **details)

    # -- the whole run -------------------------------------------------------------------

    def run(self) -> int:
        """Set up, run the timeline, tear down, write the report; return the exit code."""
        previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        code = 0
        started = time.time()
        try:
            try:
                self.setup()
                self.timeline()
            except (KeyboardInterrupt, _Interrupted):
                self.recording.interrupted = True
                self.recording.ended = self.now() if self.t0 is not None else 0.0
                self.console.say("\ninterrupted: cleaning up")
                code = EXIT_INTERRUPTED
            except SetupError as error:
                self.recording.error = f"setup failed: {error}"
                self.console.say(f"tsdn demo: setup failed: {error}")
                code = EXIT_SETUP
            except Exception as error:  # report what ran, whatever broke
                self.recording.error = f"{type(error).__name__}: {error}"
                self.console.say(f"tsdn demo: error: {error}")
                code = EXIT_SETUP if self.t0 is None else EXIT_FAILED
        finally:
            self._ignore_signals()
            try:
                self.teardown()
            finally:
                signal.signal(signal.SIGTERM, previous)
        self._fix_setup_times()
        self.console.finish(self.recording)
        results = evaluate(self.scenario, self.recording)
        report = write_report(self.out_dir, self.scenario, self.recording, results, self.t0 or started)
        self.console.say("\n" + summary(results))
        self.console.say(f"\nreport: {report}")
        if code:
            return code
        return 0 if all(r.passed for r in results) else EXIT_FAILED

    def _on_sigterm(self, *_: object) -> None:
        raise _Interrupted()

    def _ignore_signals(self) -> None:
        """During teardown, a second Ctrl-C must not leave Mininet half removed."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def _fix_setup_times(self) -> None:
        """Setup events were stamped with epoch times; make them relative to the timeline start."""
        origin = self.t0 if self.t0 is not None else self._setup_start
        with self.recording._lock:
            self.recording.events = [
                type(e)(e.time - origin, e.kind, e.details) if e.time > 1e9 else e for e in self.recording.events]

    # -- setup ---------------------------------------------------------------------------

    def setup(self) -> None:
        check_machine()
        from mininet.log import setLogLevel

        from northbound.client import TsdnClient
        from topologies.mininet_builder import start_network

        setLogLevel("critical")  # TCLink's HTB quantum warnings are noise here
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._workdir = Path(tempfile.mkdtemp(prefix="tsdn-demo-"))
        self._stack.callback(shutil.rmtree, self._workdir, True)
        if self.topology.spec.interdomain:
            self._start_neighbours()
        tokens = self._write_tokens()
        address = self._start_controller(tokens)
        self._client = TsdnClient(address, token=(self._workdir / "service.token").read_text(), timeout=15)
        self._stack.callback(self._client.close)
        self.console.say(f"controller: gRPC {address}, OpenFlow 127.0.0.1:{self._openflow_port}"
                         + (f", live map {self.map_url}" if self.map_url else ""))
        began = time.monotonic()
        cross = self.cross_traffic_switches()
        self._net = self._stack.enter_context(start_network(
            self.topology, scale=self.scenario.emulation_scale, controller=("127.0.0.1", self._openflow_port),
            cross_traffic=cross))
        self._cross = CrossTraffic(self._net)
        self._stack.callback(self._cross.close)  # before Mininet stops (the stack unwinds in reverse)
        self.event("setup", f"Mininet: {len(self.topology.switches)} switches, {len(self.topology.dtns)} DTN hosts"
                            + (f", {len(cross)} cross-traffic host(s) on {', '.join(cross)}" if cross else "")
                            + f" at scale {self.scenario.emulation_scale:g} ({time.monotonic() - began:.1f} s)")
        self.console.say(self.recording.events[-1].details["message"])
        self._wait(self._switches_connected, "every switch to connect to the controller")
        self.event("setup", "every switch connected")
        for dtn in self.scenario.agents:
            self._start_agent(dtn)
        self._wait(self._agents_online, "every agent to register")
        self.event("setup", f"{len(self.scenario.agents)} agent(s) online: {', '.join(self.scenario.agents)}")
        self.console.say(self.recording.events[-1].details["message"])
        threading.Thread(target=self._watch_reservations, daemon=True).start()

    def cross_traffic_switches(self) -> list[str]:
        """The switches at either end of a link some congest_link loads, in file order."""
        ends: set[str] = set()
        for action in self.scenario.timeline:
            if isinstance(action, CongestLinkAction):
                ends.update(self.recording.links[action.link])
        return [s.name for s in self.topology.spec.switches if s.name in ends]

    def _start_neighbours(self) -> None:
        """An OpenNSA for each neighbour NSA of the inter-domain ports, before the controller (stopped after it)."""
        try:
            wanted = neighbours(self.topology)
            self._peers = RunningPeers(require_recipe())
        except PeerSetupError as error:
            raise SetupError(str(error)) from None
        peers = self._peers
        self._stack.callback(self._stop_neighbours)
        for neighbour in wanted:
            began = time.monotonic()
            try:
                peers.start(neighbour, self.out_dir)
            except PeerSetupError as error:
                raise SetupError(str(error)) from None
            self.event("setup", f"neighbour {neighbour.nsa}: OpenNSA on {neighbour.url} with STPs "
                                f"{', '.join(name for name, *_ in neighbour.stps)} "
                                f"({time.monotonic() - began:.1f} s)")
            self.console.say(self.recording.events[-1].details["message"])

    def _stop_neighbours(self) -> None:
        if self._peers is None:
            return
        for nsa in list(self._peers.started):
            with contextlib.suppress(OSError):
                self._peers.keep_log(nsa, self.out_dir)
        self._peers.stop()

    def _write_tokens(self) -> Path:
        assert self._workdir is not None
        service = os.urandom(16).hex()
        entries = [{"principal": SERVICE_TOKEN_PRINCIPAL, "role": "service", "token": service}]
        for dtn in self.scenario.agents:
            token = f"agent-{dtn}-{os.urandom(8).hex()}"
            entries.append({"principal": f"agent-{dtn}", "role": "agent", "token": token, "dtn": dtn})
            path = self._workdir / f"agent-{dtn}.token"
            path.write_text(token)
            path.chmod(0o600)
        (self._workdir / "service.token").write_text(service)
        tokens = self._workdir / "tokens.yaml"
        tokens.write_text(yaml.safe_dump({"tokens": entries}))
        tokens.chmod(0o600)
        return tokens

    def _start_controller(self, tokens: Path) -> str:
        assert self._workdir is not None
        self._openflow_port = free_port()
        self._socket = f"unix:{self._workdir / 'grpc.sock'}"
        http: list[str] = ["--no-http"]
        if self.http and port_is_free(self.http):
            http = ["--listen-http", self.http]
        elif self.http:
            self.console.say(f"note: {self.http} is busy: no live map this run (--http to pick another address)")
        if "--no-http" in http and self.topology.spec.interdomain:
            # The neighbours' NSI callbacks come to the controller's HTTP side (RequesterService2).
            http = ["--listen-http", f"127.0.0.1:{free_port()}"]
        command = [*tsdn_command(), "controller", "--topology", str(self.loaded.topology_path),
                   "--listen-grpc", "127.0.0.1:0", "--state", str(self._workdir / "tsdn.db"), "--tokens", str(tokens),
                   "--listen-openflow", f"127.0.0.1:{self._openflow_port}",
                   "--emulation-scale", repr(self.scenario.emulation_scale), "--also-listen", self._socket, *http]
        log = (self.out_dir / "controller.log").open("w", encoding="utf-8")
        self._stack.callback(log.close)
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        self._controller = process
        self._stack.callback(self._stop_process, process, "controller")
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                log.write(line)
                log.flush()
                lines.put(line)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + SETUP_DEADLINE
        address = None
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if process.poll() is not None:
                    raise SetupError(f"the controller exited with code {process.returncode}; see "
                                     f"{self.out_dir / 'controller.log'}") from None
                if address is not None:
                    break
                continue
            if line.startswith("tsdn live map on "):
                self.map_url = line.rsplit(" ", 1)[1].strip()
                break
            if line.startswith("tsdn controller listening on "):
                address = line.rsplit(" ", 1)[1].strip()
                if "--no-http" in http:
                    break
        if address is None:
            raise SetupError(f"the controller did not start within {SETUP_DEADLINE:g} s; see "
                             f"{self.out_dir / 'controller.log'}")
        self.event("setup", f"controller started (gRPC {address})" + (f", live map {self.map_url}"
                                                                         if self.map_url else ""))
        return address

    def _start_agent(self, dtn: str) -> None:
        assert self._net is not None and self._workdir is not None
        logs = self.out_dir / "agents"
        logs.mkdir(exist_ok=True)
        log = (logs / f"{dtn}.log").open("w", encoding="utf-8")
        self._stack.callback(log.close)
        process = self._net.host(dtn).popen(
            [*tsdn_command(), "agent", "run", "--controller", self._socket, "--name", dtn,
             "--token-file", str(self._workdir / f"agent-{dtn}.token"), "--heartbeat-interval", "1"],
            stdout=log, stderr=subprocess.STDOUT, text=True)
        self._agents[dtn] = process
        self._stack.callback(self._stop_process, process, f"agent of {dtn}")

    def _stop_process(self, process: subprocess.Popen, what: str) -> None:
        if process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def _wait(self, condition, what: str, timeout: float = SETUP_DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self._controller is not None and self._controller.poll() is not None:
                raise SetupError(f"the controller exited (code {self._controller.returncode}) while waiting for "
                                 f"{what}; see {self.out_dir / 'controller.log'}")
            if time.monotonic() > deadline:
                raise SetupError(f"timed out after {timeout:g} s waiting for {what}; logs in {self.out_dir}")
            time.sleep(0.2)  # polling interval of a condition with a deadline

    def _switches_connected(self) -> bool:
        status = self._client.get_topology_status()
        return bool(status.switches) and all(s.connected for s in status.switches)

    def _agents_online(self) -> bool:
        from northbound.proto.tsdn.v1 import agent_pb2

        for dtn, process in self._agents.items():
            if process.poll() is not None:
                raise SetupError(f"the agent of {dtn} exited with code {process.returncode}; see "
                                 f"{self.out_dir / 'agents' / (dtn + '.log')}")
        online = {a.dtn for a in self._client.list_agents() if a.state == agent_pb2.ONLINE}
        return online >= set(self.scenario.agents)

    # -- watching ------------------------------------------------------------------------

    def _watch_reservations(self) -> None:
        from northbound.client import ApiError

        with contextlib.suppress(ApiError, ValueError):
            for event in self._client.watch(include_existing=True):
                self._raw.put(("reservation", event))

    def _watch_transfer(self, name: str, transfer: str) -> None:
        from northbound.client import ApiError

        with contextlib.suppress(ApiError, ValueError):
            for event in self._client.watch_transfer(transfer):
                self._raw.put(("transfer", (name, event)))

    def _drain(self) -> None:
        """Turn what the watch threads saw into the recording (names resolved now)."""
        from northbound.convert import decision_in
        from northbound.proto.tsdn.v1 import bandwidth_pb2, transfer_pb2

        while True:
            try:
                kind, payload = self._raw.get_nowait()
            except queue.Empty:
                return
            if kind == "transfer":
                name, event = payload
                transfer = event.transfer
                flow = self.recording.flows.get(name)
                at = self._stamp(event)
                state = transfer_pb2.TransferState.Name(transfer.state).removeprefix("TRANSFER_")
                if event.reason == "rate" and event.previous_state == event.state:
                    self.recording.rate(RateSample(at, name, transfer.nominal_bps, transfer.bandwidth_bps,
                                                   tuple(transfer.path), state))
                    continue
                if flow is not None:
                    flow.state, flow.reason = state, transfer.reason
                    if transfer.path:
                        flow.path = tuple(transfer.path)
                if event.previous_state != event.state or event.reason:
                    self.recording.event(at, "transfer", message=f"{name}: {state}: {event.reason}", flow=name,
                                         state=state)
            else:
                reservation = payload.reservation
                name = self._by_reservation.get(reservation.id) or self._by_transfer.get(
                    reservation.labels.get("tsdn/transfer", "")) or f"reservation {reservation.id[:8]}"
                at = self._stamp(payload)
                state = bandwidth_pb2.ReservationState.Name(reservation.state)
                path = tuple(reservation.path.route[1:-1]) if reservation.path.route else ()
                links = tuple(reservation.path.links)
                decision = decision_in(payload.decision) if payload.HasField("decision") else None
                typed: dict[str, Any] = {"decision": decisions.to_dict(decision)} if decision is not None else {}
                flow = self.recording.flows.get(name)
                if flow is not None:
                    if flow.kind == "reservation":
                        flow.state, flow.reason = state, reservation.state_reason
                    if path:
                        flow.path = path
                previous = self._reservation_paths.get(reservation.id)
                if path:
                    self._reservation_paths[reservation.id] = (path, links)
                # A move between parallel links keeps the switches: the links tell it.
                if previous and previous[0] and path and (path, links) != previous:
                    previous_path, previous_links = previous
                    extra: dict[str, Any] = {}
                    if decision is not None and decision.relieves:
                        relieved = decision.relieves.removeprefix("reservations/")
                        extra["relieves"] = self._by_reservation.get(relieved, decision.relieves)
                    self.recording.event(at, "reroute", message=f"{name}: {' '.join(previous_path)} -> "
                                         f"{' '.join(path)} ({payload.reason})", flow=name,
                                         old=list(previous_path), new=list(path), reason=payload.reason,
                                         old_links=list(previous_links), new_links=list(links),
                                         cause=decision.cause if decision is not None else None, **extra, **typed)
                if SEGMENT_LABEL in reservation.labels:
                    self._segment_seen(name, reservation, payload.reason, at)
                if self._reservation_states.get(reservation.id) != reservation.state:
                    self._reservation_states[reservation.id] = reservation.state
                    self.recording.event(at, "reservation", message=f"{name}: {state}: {payload.reason}", flow=name,
                                         state=state, path=list(path), links=list(links), **typed)

    def _segment_seen(self, name: str, reservation, reason: str, at: float) -> None:
        """A reservation with a remote end: once its reason names its WAN segment (the neighbour
        confirmed it and the controller committed the local part), record it and deliver the circuit
        to the remote DTN, as the neighbour's edge would."""
        found = SEGMENT_NOTE.search(reservation.state_reason) or SEGMENT_NOTE.search(reason)
        if found is None:
            return
        known = self.recording.segments.get(name)
        if known is not None and known.connection_id == found["connection"] and known.reservation == reservation.id:
            return
        flow = self.recording.flows.get(name)
        ends = (flow.src, flow.dst) if flow is not None else ()
        remote = next((d for d in ends if d in self.recording.remote_dtns), "")
        segment = NsiSegment(name, reservation.id, remote, found["nsa"], found["connection"], found["port"],
                             int(found["vlan"]), at)
        self.recording.segments[name] = segment
        delivered = ""
        if remote:
            try:
                delivered = f"; {self._deliver(remote, segment.vlan)}"
            except (RuntimeError, OSError, subprocess.SubprocessError) as error:
                delivered = f"; the circuit could not be delivered to {remote}: {error}"
        self.recording.event(at, "nsi_segment", message=f"{name}: WAN segment {segment.connection_id} at {segment.nsa} "
                             f"via {segment.interdomain}, VLAN {segment.vlan}{delivered}", flow=name,
                             connection=segment.connection_id, nsa=segment.nsa, port=segment.interdomain,
                             vlan=segment.vlan, remote_dtn=remote)

    def _deliver(self, dtn: str, vlan: int) -> str:
        """Make the remote DTN's port on its WAN bridge an access port of `vlan`: the bridge strips the
        circuit's VLAN towards the DTN and adds it from the DTN (no 802.1Q needed in the host)."""
        if self._net is None:
            raise RuntimeError("no Mininet network")
        intf = self._net.host(dtn).defaultIntf()
        link = intf.link
        if link is None:
            raise RuntimeError(f"{intf.name} of {dtn} is not cabled")
        bridge_port = link.intf2 if link.intf1 is intf else link.intf1
        done = subprocess.run(["ovs-vsctl", "--timeout=10", "set", "port", bridge_port.name, f"tag={vlan}"],
                              capture_output=True, text=True, timeout=20, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"ovs-vsctl set port {bridge_port.name} tag={vlan}: {done.stderr.strip()}")
        return f"{bridge_port.name} (the neighbour's edge towards {dtn}) is an access port of VLAN {vlan}"

    def _segments_ended(self) -> None:
        """After the last release: wait until each neighbour says every segment's connection is
        terminated (querySummarySync), or the deadline; record what each said."""
        if not self.recording.segments:
            return
        requester = nsa_id(default_domain(self.topology.name))  # the controller runs without --domain
        urls = {p.peer.nsa: p.peer.url or "" for p in self.topology.spec.interdomain}
        deadline = time.monotonic() + SEGMENT_END_DEADLINE
        pending = {s.flow: s for s in self.recording.segments.values()}
        while pending:
            by_nsa: dict[str, list[NsiSegment]] = {}
            for segment in pending.values():
                by_nsa.setdefault(segment.nsa, []).append(segment)
            for nsa, segments in by_nsa.items():
                try:
                    said = lifecycles(urls.get(nsa, ""), nsa, requester, [s.connection_id for s in segments])
                except Exception as error:  # whatever the query raised is the answer recorded
                    said = {s.connection_id: f"query failed: {error}" for s in segments}
                for segment in segments:
                    segment.end = said.get(segment.connection_id, f"unknown to {nsa}")
                    if segment.end == "Terminated":
                        segment.ended = self.now()
                        del pending[segment.flow]
                        self.recording.event(self.now(), "nsi_segment_end",
                                             message=f"{segment.flow}: {segment.connection_id} at {nsa} terminated "
                                                     "(the neighbour's querySummarySync)",
                                             flow=segment.flow, connection=segment.connection_id, nsa=nsa,
                                             lifecycle=segment.end)
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # polling interval of the neighbours' answer, with a deadline
        for segment in pending.values():
            self.recording.event(self.now(), "nsi_segment_end",
                                 message=f"{segment.flow}: {segment.connection_id} at {segment.nsa} not terminated "
                                         f"{SEGMENT_END_DEADLINE:g} s after the end: {segment.end}",
                                 flow=segment.flow, connection=segment.connection_id, nsa=segment.nsa,
                                 lifecycle=segment.end)

    def _stamp(self, event) -> float:
        """An event's time on the timeline clock (snapshots carry none: now)."""
        micros = event.time.ToMicroseconds() if event.HasField("time") else 0
        return self.rel(micros / 1e6) if micros > 0 else self.now()

    def _sample_bookings(self) -> None:
        topology = self._client.get_topology()
        at = self.rel(topology.time.ToMicroseconds() / 1e6) if topology.HasField("time") else self.now()
        directions = []
        for link in topology.links:
            directions += [link.a_to_b, link.b_to_a]
        for dtn in topology.dtns:
            directions += [dtn.uplink, dtn.downlink]
        directions = [d for d in directions if d.capacity_bps]
        if not directions:
            return
        fullest = max(directions, key=lambda d: d.booked_bps / d.capacity_bps)
        over = tuple((d.id, d.booked_bps, d.capacity_bps) for d in directions if d.booked_bps > d.capacity_bps)
        self.recording.booking(BookingSample(at, fullest.id, fullest.booked_bps / fullest.capacity_bps, over))

    # -- the timeline --------------------------------------------------------------------

    def timeline(self) -> None:
        self.t0 = time.time()
        self._fix_setup_times()  # setup events now at negative times
        actions = self.scenario.ordered()
        end = self.scenario.end
        next_sample = 0.0
        self.console.say(f"timeline: {len(actions)} action(s) over {end:g} s")
        while True:
            now = self.now()
            while actions and actions[0][1].at <= now:
                index, action = actions.pop(0)
                self._perform(index, action)
            self._drain()
            if now >= next_sample:
                next_sample += SAMPLE_EVERY
                with contextlib.suppress(Exception):
                    self._sample_bookings()
                self._sample_cross_traffic()
                self.console.update(self.recording, now, end, self.map_url or "", self._links_line())
            if now >= end and not actions:
                break
            time.sleep(TICK)  # the timeline's own clock
        self.recording.ended = self.now()
        self._finish_flows()

    def _sample_cross_traffic(self) -> None:
        """What each direction loaded with cross traffic transmitted since the last sample."""
        if self._cross is None or not self._cross.streams:
            return
        try:
            measured = self._cross.measure()
        except (RuntimeError, subprocess.SubprocessError, OSError) as error:
            self.recording.event(self.now(), "note", message=f"could not measure the congested links: {error}")
            return
        at = self.now()
        for direction_id, bps in measured.items():
            stream = self._cross.streams.get(direction_id)
            if stream is not None:
                self.recording.link_load(LinkSample(at, stream.direction.link, direction_id, bps,
                                                    stream.direction.capacity, stream.rate_bps))

    def _links_line(self) -> str:
        if not self._link_state:
            return ""
        return "links: " + ", ".join(f"{link} {state}" for link, state in sorted(self._link_state.items()))

    def _perform(self, index: int, action) -> None:
        from northbound.client import ApiError

        what = action.action
        name = getattr(action, "name", "") or getattr(action, "link", "")
        started = self.now()  # a failure or congestion begins as the action starts
        try:
            done = getattr(self, f"_do_{what}")(action)
        except ApiError as error:
            self.recording.event(self.now(), "refused", message=f"{what} {name}: {error.message}", action=what,
                                 name=name, timeline=index, code=error.code.name)
            if isinstance(action, TransferAction | ReserveAction):
                self.recording.flows[action.name].state = "REFUSED"
                self.recording.flows[action.name].reason = error.message
            return
        except (subprocess.SubprocessError, OSError, RuntimeError) as error:
            self.recording.event(self.now(), "refused", message=f"{what} {name}: {error}", action=what, name=name,
                                 timeline=index)
            return
        message, extra = done if isinstance(done, tuple) else (done, {})
        details: dict[str, Any] = {"timeline": index, "message": message}
        if hasattr(action, "link"):
            details["link"] = action.link
            details["ends"] = list(self.recording.links[action.link])
        if hasattr(action, "name"):
            details["name"] = action.name
        self.recording.event(started, what, **details, **extra)

    def _do_transfer(self, action: TransferAction) -> str:
        flow = Flow(action.name, "transfer", action.src, action.dst, action.bandwidth, state="REQUESTED")
        self.recording.flows[action.name] = flow
        size = transfer_bytes(action, self.scenario.emulation_scale, self.scenario.end - action.at)
        transfer = self._client.start_transfer(action.src, action.dst, action.bandwidth, size=size,
                                               streams=action.streams, engine=action.engine, policy=action.policy,
                                               pace=action.pace)
        flow.transfer = transfer.name
        flow.reservation = transfer.reservation
        flow.state = "RESERVING"
        transfer_id = transfer.name.removeprefix("transfers/")
        self._by_transfer[transfer_id] = action.name
        self._by_reservation[transfer.reservation.removeprefix("reservations/")] = action.name
        threading.Thread(target=self._watch_transfer, args=(action.name, transfer.name), daemon=True).start()
        return (f"transfer {action.name}: {action.src} -> {action.dst} {format_bandwidth(action.bandwidth)} "
                f"{action.policy}, {action.streams} stream(s), {action.engine}"
                + (f", sender paced at {format_bandwidth(action.pace)}" if action.pace else ""))

    def _do_reserve(self, action: ReserveAction) -> str:
        flow = Flow(action.name, "reservation", action.src, action.dst, action.bandwidth, state="REQUESTED")
        self.recording.flows[action.name] = flow
        reservation = self._client.create_reservation(action.src, action.dst, action.bandwidth,
                                                      policy=action.policy, protect=action.protect,
                                                      labels={"tsdn/demo": action.name})
        flow.reservation = reservation.name
        self._by_reservation[reservation.id] = action.name
        flow.state = bandwidth_state(reservation.state)
        if reservation.path.route:
            flow.path = tuple(reservation.path.route[1:-1])
        return f"reserve {action.name}: {action.src} -> {action.dst} {format_bandwidth(action.bandwidth)}"

    def _do_release(self, action: ReleaseAction) -> str:
        flow = self.recording.flows.get(action.name)
        if flow is None or flow.state == "REFUSED":
            return f"release {action.name}: nothing to release"
        if flow.kind == "transfer":
            result = self._client.cancel_transfer(flow.transfer)
            from northbound.proto.tsdn.v1 import transfer_pb2

            flow.state = transfer_pb2.TransferState.Name(result.state).removeprefix("TRANSFER_")
        else:
            result = self._client.delete_reservation(flow.reservation)
            flow.state = bandwidth_state(result.state)
        return f"release {action.name}"

    def _link(self, label: str):
        link = next(spec for spec in self.topology.spec.links if spec.label == label)
        a, b = self._net.switch(link.a), self._net.switch(link.b)
        intf_a = self._net.switch_intf(link.a, link.a_port)
        for candidate in self._net.mn.linksBetween(a, b):
            if intf_a in (candidate.intf1.name, candidate.intf2.name):
                return link, candidate
        raise RuntimeError(f"link {label}: not found in the Mininet network")

    def _do_fail_link(self, action: FailLinkAction) -> str:
        _, mn_link = self._link(action.link)
        mn_link.intf1.ifconfig("down")
        mn_link.intf2.ifconfig("down")
        self._link_state[action.link] = "DOWN"
        return f"link {action.link} cut"

    def _do_restore_link(self, action: RestoreLinkAction) -> str:
        _, mn_link = self._link(action.link)
        mn_link.intf1.ifconfig("up")
        mn_link.intf2.ifconfig("up")
        self._link_state.pop(action.link, None)
        return f"link {action.link} repaired"

    def _directions(self, label: str, side: str | None):
        self._link(label)  # raises when the network lacks it
        return [d for d in self.topology.link_directions[label] if side is None or d.src == side]

    def _do_congest_link(self, action: CongestLinkAction) -> tuple[str, dict[str, Any]]:
        """Cross traffic over each direction named: capacity minus what is left for others."""
        assert self._cross is not None
        done, rates = [], {}
        for direction in self._directions(action.link, action.from_):
            left = action.rate if action.rate is not None else int(direction.capacity * (action.fraction or 1))
            stream = self._cross.start(direction, direction.capacity - left)
            rates[direction.id] = stream.rate_bps
            done.append(f"{direction.src}->{direction.dst} {format_bandwidth(stream.rate_bps)} of cross traffic "
                        f"({stream.emulated_bps / 1e6:g} Mbit/s emulated), {format_bandwidth(left)} left")
        self._link_state[action.link] = "CONGESTED"
        return (f"link {action.link} congested: {', '.join(done)}",
                {"directions": list(rates), "cross_traffic_bps": rates})

    def _do_clear_link(self, action: ClearLinkAction) -> tuple[str, dict[str, Any]]:
        """Stop the cross traffic of each direction named."""
        assert self._cross is not None
        done, rates = [], {}
        for direction in self._directions(action.link, action.from_):
            stream = self._cross.stop(direction)
            if stream is not None:
                rates[direction.id] = stream.rate_bps
                done.append(f"{direction.src}->{direction.dst} {format_bandwidth(stream.rate_bps)} stopped")
        if not self._cross.streams or all(s.direction.link != action.link for s in self._cross.streams.values()):
            self._link_state.pop(action.link, None)
        return (f"link {action.link} clear: {', '.join(done) or 'no cross traffic was running'}",
                {"directions": list(rates), "cross_traffic_bps": rates})

    def _finish_flows(self) -> None:
        """End of the timeline: cancel transfers and release reservations still live."""
        from northbound.client import ApiError

        live = [f for f in self.recording.flows.values()
                if f.state not in ("CANCELLED", "SUCCEEDED", "FAILED", "RELEASED", "EXPIRED", "REFUSED")]
        for flow in live:
            with contextlib.suppress(ApiError):
                if flow.kind == "transfer" and flow.transfer:
                    self._client.cancel_transfer(flow.transfer)
                    flow.state = "CANCELLED"
                elif flow.reservation:
                    self._client.delete_reservation(flow.reservation)
                    flow.state = "RELEASED"
                self.recording.event(self.now(), "release", message=f"end of the timeline: {flow.name} released",
                                     name=flow.name)
        self._drain()

    # -- teardown ------------------------------------------------------------------------

    def teardown(self) -> None:
        if self.t0 is not None and self._client is not None:
            with contextlib.suppress(Exception):
                self._drain()
            if self.recording.interrupted:
                with contextlib.suppress(Exception):
                    self._finish_flows()
            with contextlib.suppress(Exception):
                self._segments_ended()
        # Agents first (their hosts vanish with Mininet), then Mininet, then the controller:
        # the ExitStack unwinds in reverse order of setup.
        for dtn, process in list(self._agents.items()):
            self._stop_process(process, f"agent of {dtn}")
        began = time.monotonic()
        self._stack.close()
        if self._net is not None:
            self.console.say(f"teardown: agents, Mininet and the controller stopped ({time.monotonic() - began:.1f} s)")


def bandwidth_state(state: int) -> str:
    from northbound.proto.tsdn.v1 import bandwidth_pb2

    return bandwidth_pb2.ReservationState.Name(state)
