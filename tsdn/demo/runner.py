"""Run a scenario in Mininet: neighbours, calibration, the timeline, teardown, the report.

    runner = DemoRunner(loaded, out_dir, console)
    code = runner.run()   # 0 every expectation held, 1 one failed, 3 setup failed or the machine
                          # is too slow for the scenario, 130 interrupted

Setup: the NSI neighbours the topology names (real OpenNSAs), a tokens file, then an `Emulation`
(a `tsdn controller` process, the Mininet network, `tsdn agent run` in each agent's DTN host) at
the scenario's largest scale. Calibration plays the timeline's heaviest moment on it for a few
seconds and measures what arrives (`calibration`): when it fits, the timeline runs there; when it
does not, the emulation is started again at the scale the measured capacity calls for, and
measured again, down the ladder. The timeline then runs on its own clock (`Player`). At the end
(or on Ctrl-C / SIGTERM) everything is torn down in reverse order and the report written.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tsdn.demo.calibration import (
    MEASURED_REPORTS,
    WARMUP_REPORTS,
    Attempt,
    FlowCarried,
    Peak,
    TooSlow,
    cross_placement,
    ladder,
    next_choice,
    offered,
    peak_load,
)
from tsdn.demo.console import Console
from tsdn.demo.emulation import Emulation, SetupError, check_machine
from tsdn.demo.expectations import evaluate
from tsdn.demo.peers import PeerSetupError, RunningPeers, neighbours, require_recipe
from tsdn.demo.player import ENDED, Player
from tsdn.demo.record import Recording
from tsdn.demo.report import summary, write_report
from tsdn.demo.scenario import CongestLinkAction, LoadedScenario, ReserveAction, TransferAction

EXIT_FAILED = 1
EXIT_SETUP = 3
EXIT_INTERRUPTED = 130
SERVICE_TOKEN_PRINCIPAL = "demo"
CALIBRATION_DEADLINE = 40.0  # seconds one calibration may take to get every transfer's reports
SETTLE_DEADLINE = 20.0  # seconds for a calibration's transfers and reservations to end


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
        self.recording = new_recording(loaded)
        self._peers: RunningPeers | None = None
        self._stack = contextlib.ExitStack()
        self._workdir: Path | None = None
        self.emulation: Emulation | None = None
        self.player: Player | None = None
        self._ignored: frozenset[str] = frozenset()  # reservations and transfers of calibration

    # -- time and events -----------------------------------------------------------------

    @property
    def t0(self) -> float | None:
        """When the timeline started (epoch seconds), None before."""
        return self.player.t0 if self.player is not None else None

    def now(self) -> float:
        """Seconds since the timeline started (0 before)."""
        return self.player.now() if self.player is not None else 0.0

    def setup_event(self, kind: str, message: str, **details: Any) -> None:
        """A line of setup: an event (epoch time, made relative once the timeline starts) and the console."""
        self.recording.event(time.time(), kind, message=message, **details)
        self.console.say(message)

    # -- the whole run -------------------------------------------------------------------

    def run(self) -> int:
        """Set up, run the timeline, tear down, write the report; return the exit code."""
        previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        code = 0
        started = time.time()
        try:
            try:
                self.setup()
                self.player = Player(self.scenario, self.emulation, self.recording, self._ignored)
                self._fix_setup_times()  # setup events now at negative times
                self.player.play(self.console)
            except (KeyboardInterrupt, _Interrupted):
                self.recording.interrupted = True
                self.recording.ended = self.now()
                self.console.say("\ninterrupted: cleaning up")
                code = EXIT_INTERRUPTED
            except (SetupError, TooSlow) as error:
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
        origin = self.t0 if self.t0 is not None else time.time()
        with self.recording._lock:
            self.recording.events = [
                type(e)(e.time - origin, e.kind, e.details) if e.time > 1e9 else e for e in self.recording.events]

    # -- setup ---------------------------------------------------------------------------

    def setup(self) -> None:
        """Neighbours, tokens, then emulations down the ladder until one carries the heaviest moment."""
        check_machine()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._workdir = Path(tempfile.mkdtemp(prefix="tsdn-demo-"))
        self._stack.callback(shutil.rmtree, self._workdir, True)
        if self.topology.spec.interdomain:
            self._start_neighbours()
        self._write_tokens()
        bound = self.scenario.scale_bound
        if not self.scenario.calibrated:
            self._start_emulation(bound)
            self._chosen(bound, f"scale {bound:g}, fixed by the scenario (emulation_scale: {{fixed: {bound:g}}}): "
                                "not calibrated")
            return
        peak = peak_load(self.scenario, {(d.link, d.src): d.capacity for directions in
                                         self.topology.link_directions.values() for d in directions})
        rungs = ladder(bound, [d.capacity for d in self.topology.directions.values() if d.capacity > 0])
        if peak is None:
            self._start_emulation(bound)
            self._chosen(bound, f"scale {bound:g}, the scenario's: its timeline starts no transfer to calibrate with")
            return
        self.setup_event("calibration", f"calibration: {self.scenario.name}'s heaviest moment is {peak.describe()}; "
                                        f"scales tried from {bound:g} down to {rungs[-1]:g}", peak_at=peak.at,
                         offered_bps=peak.offered_bps, ladder=rungs)
        scale = rungs[0]
        while True:
            emulation = self._start_emulation(scale)
            attempt = self._calibrate(emulation, peak)
            self.recording.calibration.append(attempt)
            self.setup_event("calibration", f"calibration: {attempt.describe()}", **attempt_details(attempt))
            choice = next_choice(rungs, self.recording.calibration, self.scenario.name)
            if choice.done:
                self._chosen(choice.scale, choice.why)
                return
            self.setup_event("calibration", f"calibration: {choice.why}", scale=choice.scale)
            emulation.stop()
            self.emulation = None
            scale = choice.scale

    def _chosen(self, scale: float, why: str) -> None:
        self.recording.scale, self.recording.scale_why = scale, why
        self.setup_event("calibration", f"emulation scale {scale:g}: {why}", scale=scale, chosen=True)

    def _start_emulation(self, scale: float) -> Emulation:
        assert self._workdir is not None
        emulation = Emulation(self.loaded, scale, self._workdir, self.out_dir,
                              lambda line: self.setup_event("setup", line), self.http)
        self.emulation = emulation
        self._stack.callback(emulation.stop)
        emulation.start()
        return emulation

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
            self.setup_event("setup", f"neighbour {neighbour.nsa}: OpenNSA on {neighbour.url} with STPs "
                                      f"{', '.join(name for name, *_ in neighbour.stps)} "
                                      f"({time.monotonic() - began:.1f} s)")

    def _stop_neighbours(self) -> None:
        if self._peers is None:
            return
        for nsa in list(self._peers.started):
            with contextlib.suppress(OSError):
                self._peers.keep_log(nsa, self.out_dir)
        self._peers.stop()

    def _write_tokens(self) -> None:
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

    # -- calibration ---------------------------------------------------------------------

    def _calibrate(self, emulation: Emulation, peak: Peak) -> Attempt:
        """Play the heaviest moment on `emulation` until every transfer has its measured reports (or
        the deadline), release it all, and say what was carried."""
        recording = new_recording(self.loaded, f"{self.scenario.name} calibration")
        player = Player(self.scenario, emulation, recording, self._ignored)
        deadline = time.monotonic() + CALIBRATION_DEADLINE
        try:
            for i, action in enumerate((*peak.reservations, *peak.transfers)):
                player.perform(i, calibration_action(action))
            refused = [e.describe() for e in recording.events if e.kind == "refused"]
            if refused:
                raise SetupError(f"calibration could not start the heaviest moment: {'; '.join(refused)}")
            transfers = [recording.flows[t.name] for t in peak.transfers]
            self._wait(player, deadline, lambda: all(
                any(s.flow == f.name for s in recording.rates) or f.state in ENDED for f in transfers))
            notes, cross_start = self._calibration_cross(player, peak, recording)
            measure_from = player.now() + (1.0 if peak.cross else 0.0)
            self._wait(player, deadline, lambda: player.now() >= measure_from)

            def measured(name: str) -> list[float]:
                after = [s.nominal_bps for s in recording.rates if s.flow == name and s.time >= measure_from]
                return after[WARMUP_REPORTS:]

            self._wait(player, deadline, lambda: all(
                len(measured(f.name)) >= MEASURED_REPORTS or f.state in ENDED for f in transfers))
            flows = []
            for transfer in peak.transfers:
                rates = measured(transfer.name)[:MEASURED_REPORTS]
                flows.append(FlowCarried(transfer.name, offered(transfer), sum(rates) / len(rates) if rates else 0.0,
                                         len(rates)))
                if len(rates) < MEASURED_REPORTS:
                    flow = recording.flows[transfer.name]
                    notes.append(f"{transfer.name}: {len(rates)} report(s) measured ({flow.state}"
                                 + (f": {flow.reason}" if flow.reason else "") + ")")
            cross_offered, cross_carried = 0, 0.0
            for direction, rate in cross_start.items():
                loads = sorted(s.measured_bps for s in recording.link_loads
                               if s.direction == direction and s.time >= measure_from)
                cross_offered += rate
                cross_carried += min(rate, loads[len(loads) // 2]) if loads else 0.0
        finally:
            player.finish_flows()
            if emulation.cross is not None:
                emulation.cross.close()
            self._ignored = player.started
            self._wait(player, time.monotonic() + SETTLE_DEADLINE,
                       lambda: all(f.state in ENDED for f in recording.flows.values()))
        return Attempt(emulation.scale, tuple(flows), cross_offered, cross_carried, tuple(notes))

    def _calibration_cross(self, player: Player, peak: Peak, recording: Recording) -> tuple[list[str], dict[str, int]]:
        """Start the heaviest moment's cross traffic where it leaves the transfers measured room
        (`cross_placement`); notes on what could not run as in the timeline, and direction -> rate."""
        data_on: dict[tuple[str, str], int] = {}
        for transfer in peak.transfers:
            path = recording.flows[transfer.name].path
            for a, b in itertools.pairwise(path):
                data_on[(a, b)] = data_on.get((a, b), 0) + offered(transfer)
        notes: list[str] = []
        started: dict[str, int] = {}
        for i, cross in enumerate(peak.cross):
            direction = next(d for d in self.topology.link_directions[cross.link] if d.src == cross.src)
            src, rate = cross_placement(cross, self.recording.links[cross.link], direction.capacity, data_on)
            placed = next(d for d in self.topology.link_directions[cross.link] if d.src == src)
            if rate < cross.rate_bps:
                notes.append(f"cross traffic on {cross.link}: {rate / 1e9:g}G of {cross.rate_bps / 1e9:g}G: the "
                             f"transfers' data leaves no more room either way")
            if rate <= 0:
                continue
            player.perform(len(peak.transfers) + i, CongestLinkAction.model_validate(
                {"at": 0, "action": "congest_link", "link": cross.link, "from": src,
                 "rate": placed.capacity - rate}))
            if placed.id in (player.emulation.cross.streams if player.emulation.cross else {}):
                started[placed.id] = rate
        return notes, started

    def _wait(self, player: Player, deadline: float, condition) -> None:
        """Step `player` until `condition` holds or the deadline passes: not an error here, what
        was measured by then is the answer."""
        while not condition() and time.monotonic() < deadline:
            if self.emulation is not None and self.emulation.controller is not None \
                    and self.emulation.controller.poll() is not None:
                raise SetupError(f"the controller exited (code {self.emulation.controller.returncode}) during "
                                 f"calibration; see {self.out_dir / 'controller.log'}")
            player.step()
            time.sleep(0.1)  # polling interval of a condition with a deadline

    # -- teardown ------------------------------------------------------------------------

    def teardown(self) -> None:
        player = self.player
        if player is not None:
            with contextlib.suppress(Exception):
                player.drain()
            if self.recording.interrupted:
                with contextlib.suppress(Exception):
                    player.finish_flows()
            with contextlib.suppress(Exception):
                player.segments_ended()
        began = time.monotonic()
        self._stack.close()  # the emulations, then the neighbours, in reverse order of start
        if self.emulation is not None:
            self.console.say(f"teardown: agents, Mininet and the controller stopped ({time.monotonic() - began:.1f} s)")


def new_recording(loaded: LoadedScenario, name: str = "") -> Recording:
    """An empty recording of `loaded`'s scenario that knows its topology's links and remote DTNs."""
    topology = loaded.topology
    recording = Recording(name or loaded.scenario.name)
    recording.links = {link.label: (link.a, link.b) for link in topology.spec.links}
    for dtn in topology.spec.dtns:
        if dtn.beyond is not None:
            recording.remote_dtns[dtn.name] = (dtn.beyond, topology.interdomain[dtn.beyond].peer.nsa)
    return recording


def calibration_action(action: TransferAction | ReserveAction) -> TransferAction | ReserveAction:
    """The action as calibration plays it: at once, and a transfer until released (not by size)."""
    if isinstance(action, ReserveAction):
        return action.model_copy(update={"at": 0})
    return action.model_copy(update={"at": 0, "size": None, "until": "release"})


def attempt_details(attempt: Attempt) -> dict[str, Any]:
    """An attempt as the calibration event's details (events.jsonl)."""
    return {"scale": attempt.scale, "fits": attempt.fits, "offered_mbps": round(attempt.offered_mbps, 3),
            "carried_mbps": round(attempt.carried_mbps, 3), "transfers_share": round(attempt.transfers_share, 3),
            "cross_share": round(attempt.cross_share, 3),
            "flows": {f.name: {"offered_bps": f.offered_bps, "carried_bps": round(f.carried_bps), "reports": f.reports}
                      for f in attempt.flows},
            "notes": list(attempt.notes)}
