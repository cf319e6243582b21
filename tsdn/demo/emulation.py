"""One emulated show floor at one scale: a `tsdn controller` process, the topology in Mininet
pointed at it, and `tsdn agent run` in each agent's DTN host.

    emulation = Emulation(loaded, scale, workdir, out_dir, log)
    emulation.start()          # controller, network, every switch connected, every agent online
    emulation.client           # the runner's gRPC client (service token)
    emulation.events           # reservation events of the controller's WatchReservations stream
    emulation.stop()           # agents, cross traffic, Mininet, controller, in that order

Calibration may start several, one scale after another; the timeline runs on the last. The
controller's and agents' logs go to the report folder, each start appending under a header
naming its scale.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sdn_app.core.errors import FailedPrecondition
from tsdn.demo.cross_traffic import CrossTraffic, stop_process
from tsdn.demo.scenario import CongestLinkAction, LoadedScenario

SETUP_DEADLINE = 45.0  # seconds for the controller, the switches and the agents each
BOOTSTRAP_HINT = "run scripts/bootstrap.sh as root first (it installs Mininet and starts Open vSwitch)"


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
    from topologies import open_vswitch

    wrong = open_vswitch.problem()
    if wrong:
        raise SetupError(wrong)


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


class Emulation:
    """The controller, the network and the agents of one run at one emulation scale."""

    def __init__(self, loaded: LoadedScenario, scale: float, workdir: Path, out_dir: Path,
                 log: Callable[[str], None], http: str | None = None):
        """`workdir` holds the tokens file and the agents' tokens (written by the runner); `log`
        records a setup line (the runner's event and console); `http`: the live map's address."""
        self.loaded = loaded
        self.scenario = loaded.scenario
        self.topology = loaded.topology
        self.scale = scale
        self.workdir = workdir
        self.out_dir = out_dir
        self.log = log
        self.http = http
        self.map_url: str | None = None
        self.client = None  # northbound.client.TsdnClient once started
        self.net = None  # topologies.mininet_builder.RunningNetwork
        self.cross: CrossTraffic | None = None
        self.events: queue.Queue = queue.Queue()  # ReservationEvents of the controller's watch stream
        self.controller: subprocess.Popen | None = None
        self.agents: dict[str, subprocess.Popen] = {}
        self._stack = contextlib.ExitStack()
        self._socket = f"unix:{workdir / 'grpc.sock'}"
        self.openflow_port = 0

    # -- start ---------------------------------------------------------------------------

    def start(self) -> None:
        """Controller, network, every switch connected, every agent online, the watch stream open;
        on any failure what was started is stopped again."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        from mininet.log import setLogLevel

        from northbound.client import TsdnClient
        from topologies.mininet_builder import start_network

        setLogLevel("critical")  # TCLink's HTB quantum warnings are noise here
        address = self._start_controller()
        self.client = TsdnClient(address, token=(self.workdir / "service.token").read_text(), timeout=15)
        self._stack.callback(self.client.close)
        began = time.monotonic()
        cross = self.cross_traffic_switches()
        self.net = self._stack.enter_context(start_network(
            self.topology, scale=self.scale, controller=("127.0.0.1", self.openflow_port), cross_traffic=cross))
        self.cross = CrossTraffic(self.net)
        self._stack.callback(self.cross.close)  # before Mininet stops (the stack unwinds in reverse)
        self.log(f"Mininet: {len(self.topology.switches)} switches, {len(self.topology.dtns)} DTN hosts"
                 + (f", {len(cross)} cross-traffic host(s) on {', '.join(cross)}" if cross else "")
                 + f" at scale {self.scale:g} ({time.monotonic() - began:.1f} s)")
        self._wait(self._switches_connected, "every switch to connect to the controller")
        self.log("every switch connected")
        for dtn in self.scenario.agents:
            self._start_agent(dtn)
        self._wait(self._agents_online, "every agent to register")
        self.log(f"{len(self.scenario.agents)} agent(s) online: {', '.join(self.scenario.agents)}")
        threading.Thread(target=self._watch_reservations, daemon=True).start()

    def cross_traffic_switches(self) -> list[str]:
        """The switches at either end of a link some congest_link loads, in file order."""
        ends: set[str] = set()
        links = {link.label: (link.a, link.b) for link in self.topology.spec.links}
        for action in self.scenario.timeline:
            if isinstance(action, CongestLinkAction):
                ends.update(links[action.link])
        return [s.name for s in self.topology.spec.switches if s.name in ends]

    def _log_file(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        log = path.open("a", encoding="utf-8")
        log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} emulation scale {self.scale:g} ===\n")
        log.flush()
        self._stack.callback(log.close)
        return log

    def _start_controller(self) -> str:
        self.openflow_port = free_port()
        http: list[str] = ["--no-http"]
        if self.http and port_is_free(self.http):
            http = ["--listen-http", self.http]
        elif self.http:
            self.log(f"note: {self.http} is busy: no live map this run (--http to pick another address)")
        if "--no-http" in http and self.topology.spec.interdomain:
            # The neighbours' NSI callbacks come to the controller's HTTP side (RequesterService2).
            http = ["--listen-http", f"127.0.0.1:{free_port()}"]
        command = [*tsdn_command(), "controller", "--topology", str(self.loaded.topology_path),
                   "--listen-grpc", "127.0.0.1:0", "--state", str(self.workdir / f"tsdn-{self.scale:g}.db"),
                   "--tokens", str(self.workdir / "tokens.yaml"), "--listen-openflow",
                   f"127.0.0.1:{self.openflow_port}", "--emulation-scale", repr(self.scale),
                   "--also-listen", self._socket, *http]
        log = self._log_file(self.out_dir / "controller.log")
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        self.controller = process
        self._stack.callback(stop_process, process, 10.0)
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
        self.log(f"controller started (gRPC {address}, OpenFlow 127.0.0.1:{self.openflow_port})"
                 + (f", live map {self.map_url}" if self.map_url else ""))
        return address

    def _start_agent(self, dtn: str) -> None:
        assert self.net is not None
        log = self._log_file(self.out_dir / "agents" / f"{dtn}.log")
        process = self.net.host(dtn).popen(
            [*tsdn_command(), "agent", "run", "--controller", self._socket, "--name", dtn,
             "--token-file", str(self.workdir / f"agent-{dtn}.token"), "--heartbeat-interval", "1"],
            stdout=log, stderr=subprocess.STDOUT, text=True)
        self.agents[dtn] = process

    def _wait(self, condition, what: str, timeout: float = SETUP_DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.controller is not None and self.controller.poll() is not None:
                raise SetupError(f"the controller exited (code {self.controller.returncode}) while waiting for "
                                 f"{what}; see {self.out_dir / 'controller.log'}")
            if time.monotonic() > deadline:
                raise SetupError(f"timed out after {timeout:g} s waiting for {what}; logs in {self.out_dir}")
            time.sleep(0.2)  # polling interval of a condition with a deadline

    def _switches_connected(self) -> bool:
        status = self.client.get_topology_status()
        return bool(status.switches) and all(s.connected for s in status.switches)

    def _agents_online(self) -> bool:
        from northbound.proto.tsdn.v1 import agent_pb2

        for dtn, process in self.agents.items():
            if process.poll() is not None:
                raise SetupError(f"the agent of {dtn} exited with code {process.returncode}; see "
                                 f"{self.out_dir / 'agents' / (dtn + '.log')}")
        online = {a.dtn for a in self.client.list_agents() if a.state == agent_pb2.ONLINE}
        return online >= set(self.scenario.agents)

    def _watch_reservations(self) -> None:
        from northbound.client import ApiError

        with contextlib.suppress(ApiError, ValueError):
            for event in self.client.watch(include_existing=True):
                self.events.put(event)

    # -- stop ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Agents first (their hosts vanish with Mininet), then the cross traffic, Mininet and the
        controller: the stack unwinds in reverse order of start."""
        for process in list(self.agents.values()):
            stop_process(process, 10.0)
        self.agents.clear()
        self._stack.close()
