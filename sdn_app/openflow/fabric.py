"""Run the OpenFlow app in this process and apply plan steps to the switches, with barriers.

    fabric = start_openflow(topology, listen_port=6653, scale=network_scale)
    fabric.wait_connected({1, 2, 3}, timeout=10)
    reason = fabric.apply(plan_steps(None, plan))   # None: every switch confirmed every step
    fabric.stop()

`start_openflow` starts os-ken's `AppManager` (a private instance, not the process-wide
singleton) on a daemon thread, so every os-ken thread is a daemon and none blocks process
exit; it returns once the app exists and the OpenFlow port listens. Only one fabric runs per
process at a time (os-ken registers apps by name in a process-wide table); `stop()` closes
the listening socket and the switch connections and unregisters the apps, after which
another may start, on the same port or another.

`Fabric.apply(steps)` is thread-safe (calls are serialized). Before sending anything it
checks that every switch named by the steps is connected; then it sends the steps in order,
and at each BARRIER sends an OFPBarrierRequest to those switches and waits for every reply
(messages sent after the last barrier get one too). It returns None on success, or a
reason a person can act on: `switch s3 (dpid 0x3) not connected`, `switch s3 refused a
flow: OFPET_BAD_ACTION/OFPBAC_BAD_OUT_GROUP (...)`, `no barrier reply from s3 within 5s`.
After a failure the steps before it stay applied (the caller decides what to undo).
`Fabric.apply_many(changes)` applies independent changes together, phase by phase, one
barrier round per phase for all of them (1,000 installs cost a handful of round trips, not
thousands); each change gets the result `apply` would give it alone. With `bundles=True` (the
default of `start_openflow`) each switch gets the flow and group changes of a round in one
OpenFlow bundle (ONF extension of OpenFlow 1.3, `openflow.bundles`), applied atomically;
a switch that refuses bundles gets plain messages and barriers while it stays connected.
`fabric.bundle_support()` and `fabric.bundles_committed()` tell which switches use them.

Reconciliation: `fabric.on_switch_connected = hook` has `hook(switch_name)` called each
time a switch of the topology connects (on an os-ken thread: it must not block).
`fabric.reconcile(switch, expected)` reads the switch's tsdn flows, meters and groups
(multipart requests, every part gathered) and applies `core.reconcile`'s steps, so the
switch holds exactly `expected`; the caller must serialize it with its `apply`s.

Link state: `fabric.link_listener = listener` has `listener(link, up, reason)` called for
every link going down or coming up (on an os-ken thread: it must not block); links already
down when it is set are reported to it at once. `fabric.link_status()` is a thread-safe
snapshot of switches, links and wiring mismatches (`sdn_app.core.links.NetworkStatus`).

Load: the app polls every switch's port counters each second; `fabric.utilization()` is a
thread-safe snapshot of the measured bits/s per link direction (`core.utilization`), with
the emulation scale applied (nominal rate, fraction of capacity x scale). A switch's samples are
dropped when it connects or disconnects, so no rate spans a reconnect.

Roles (several controllers, every switch connected to each): `fabric.claim_role(leader,
generation)` sends OFPRoleRequest MASTER (leader) or SLAVE with the generation to every
connected switch, and to every switch that connects later before `on_switch_connected` is
called for it (which then waits for the switch's MASTER confirmation); it returns, per switch,
None when the switch confirmed or the reason (`stale generation 4: the switch has seen a newer
master (generation 5)`). `fabric.role` is "equal" until then, `fabric.generation` the claim's.
Once a role was claimed, `apply`, `apply_many` and `reconcile` refuse, sending nothing, unless
this controller is master and every switch they touch confirmed it: `this controller is not
the OpenFlow master (role slave, generation 4): ...`. A switch that answers a MASTER claim as
stale, demotes this controller (another controller claimed MASTER) or refuses a write with
OFPBRC_IS_SLAVE deposes it: logged at ERROR, and every write refused until a newer claim. A
slave sends no packet-out (no LLDP, no ARP answers); it still reads port statistics and port
status. Without `claim_role` nothing of this applies: one controller works as before.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

from os_ken import cfg
from os_ken.base import app_manager
from os_ken.controller import controller as os_ken_controller
from os_ken.controller.handler import DEAD_DISPATCHER
from os_ken.controller.ofp_handler import OFPHandler
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_3

from sdn_app.core.links import LinkChange, NetworkStatus
from sdn_app.core.plans import FlowSpec, GroupSpec, MeterSpec, Step, StepKind, SwitchPlan, is_tsdn_cookie
from sdn_app.core.reconcile import Reconciliation, reconcile
from sdn_app.core.topology import Topology
from sdn_app.core.utilization import DirectionLoad, PortCounters, UtilizationMeter
from sdn_app.openflow import bundles as ofbundles
from sdn_app.openflow import encoder
from sdn_app.openflow.app import NO_GENERATION, TsdnOpenFlowApp, Waiter

LOG = logging.getLogger("tsdn.openflow")

APP_MODULE = "sdn_app.openflow.app"
OFP_HANDLER_MODULE = "os_ken.controller.ofp_handler"
START_TIMEOUT = 10.0
LinkListener = Callable[[str, bool, str], None]  # (link name, up, reason)

_running_lock = threading.Lock()
_running: Fabric | None = None


class ReconcileFailed(RuntimeError):
    """A switch could not be reconciled; the message names it and says why."""


class _Datapath(os_ken_controller.Datapath):
    """os-ken's Datapath, reporting a lost connection when it is lost.

    With the native hub, `Datapath.serve` joins its send thread after the receive loop
    ends, but `hub.kill` cannot stop a thread blocked on the empty send queue: the switch
    was reported DEAD only when the next echo request (15 s later) failed. Here the end of
    the receive loop sets DEAD_DISPATCHER at once and wakes the send thread.
    """

    def _recv_loop(self) -> None:
        try:
            super()._recv_loop()
        finally:
            self.set_state(DEAD_DISPATCHER)
            if self.send_q is not None:
                self.send(b"", close_socket=True)


def _connection(sock, address) -> None:
    """os-ken's `datapath_connection_factory` with `_Datapath`."""
    with contextlib.closing(_Datapath(sock, address)) as datapath:
        try:
            datapath.serve()
        except Exception:
            LOG.exception("OpenFlow connection from %s (dpid %s) failed", address,
                          f"{datapath.id:#x}" if datapath.id is not None else "unknown")


class _Controller(os_ken_controller.OpenFlowController):
    """os-ken's OpenFlow listener (plain TCP), keeping its server socket so that it can be closed."""

    def __init__(self) -> None:
        super().__init__()
        self.server: hub.StreamServer | None = None
        self.listening = threading.Event()
        self.failed: BaseException | None = None
        self.closing = False

    def server_loop(self, ofp_tcp_listen_port, ofp_ssl_listen_port) -> None:
        try:
            self.server = hub.StreamServer((cfg.CONF.ofp_listen_host, ofp_tcp_listen_port), _connection)
        except BaseException as exc:
            self.failed = exc
            self.listening.set()
            return
        self.listening.set()
        try:
            self.server.serve_forever()
        except OSError:
            if not self.closing:
                raise

    def close(self) -> None:
        self.closing = True
        if self.server is not None:
            sock = self.server.server
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            sock.close()


class _OFPHandler(OFPHandler):
    """os-ken's OFPHandler (handshake, echo, features) with a closable listener."""

    def start(self):
        app_manager.OSKenApp.start(self)
        self.controller = _Controller()
        return hub.spawn(self.controller)


@dataclass(frozen=True)
class _Phase:
    """Steps a switch may apply in any order, and the switches whose barrier closes them."""

    steps: list[Step]
    switches: dict[int, str]  # dpid -> name


@dataclass
class _Run:
    """One change of an `apply_many` batch: its phases, the next to send, why it stopped."""

    index: int
    phases: list[_Phase]
    next: int = 0
    reason: str | None = None

    def fail(self, reason: str) -> None:
        if self.reason is None:  # the first failure is the one to report
            self.reason = reason


Work = list[tuple[_Run, Step]]  # steps of several runs for one switch, in order


@dataclass
class _Sent:
    """What one attempt of a round sent one switch: messages outside a bundle, and the bundle."""

    plain: dict[int, tuple[_Run, Step]]  # xid -> the step it encodes
    bundled: Work  # the steps in the bundle, in order
    adds: dict[int, tuple[_Run, Step]]  # xid of each bundle ADD (and of its message) -> the step
    open_xid: int | None = None
    commit_xid: int | None = None


@dataclass(frozen=True)
class Reconciled:
    """What reconciling one switch found and did."""

    switch: str
    held: SwitchPlan  # what the switch held of tsdn's entries before (decodable ones)
    done: Reconciliation  # the steps applied
    unreadable: tuple[str, ...] = ()  # tsdn-cookie flows deleted as reported: why each was not decodable

    def summary(self) -> str:
        """`removed 2 stale flows, added 4 missing flows` (or `nothing to change`), for logs."""
        parts = [] if not self.done.changes_anything else [self.done.summary()]
        if self.unreadable:
            parts.append(f"removed {len(self.unreadable)} tsdn flow(s) in a shape tsdn never installs")
        return ", ".join(parts) if parts else "nothing to change"


def _error_words(ofp, type_: int, code: int) -> str:
    """What a switch's error means, for a refusal: a slave's refusal says so in words."""
    what = encoder.describe_error(ofp, type_, code)
    if (type_, code) == (ofp.OFPET_BAD_REQUEST, ofp.OFPBRC_IS_SLAVE):
        return f"it considers this controller a SLAVE: another controller took the OpenFlow MASTER role ({what})"
    return what


def _step_kind_word(step: Step) -> str:
    spec = step.spec
    return "flow" if isinstance(spec, FlowSpec) else "meter" if isinstance(spec, MeterSpec) else \
        "group" if isinstance(spec, GroupSpec) else "step"


def _live(work: Work) -> Work:
    """The steps of `work` whose run has not failed."""
    return [(run, step) for run, step in work if run.reason is None]


def _runs_of(work: Work) -> list[_Run]:
    """The runs of `work`, each once, in order."""
    return list({id(run): run for run, _ in work}.values())


class Fabric:
    """The running OpenFlow side: connected switches, and plan steps applied with barriers."""

    def __init__(self, topology: Topology, scale: float, listen: tuple[str, int], bundles: bool = True):
        self.topology = topology
        self.scale = scale
        self.listen = listen
        self.bundles = bundles  # apply each round's flow and group changes in OpenFlow bundles where taken
        self._bundle_ids = itertools.count(1)  # under _apply_lock
        self._bundle_lock = threading.Lock()
        self._bundle_switches: dict[int, tuple[object, bool]] = {}  # dpid -> (connection, takes bundles)
        self._bundles_committed: dict[str, int] = {}  # switch name -> bundles it committed
        self.app: TsdnOpenFlowApp | None = None
        self._manager: app_manager.AppManager | None = None
        self._handler: _OFPHandler | None = None
        self._apply_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._link_listener: LinkListener | None = None
        self._load_lock = threading.Lock()
        self._meter = UtilizationMeter(topology, scale)  # guarded by _load_lock
        # Called with a switch's name each time it connects (on an os-ken thread: must not block).
        self.on_switch_connected: Callable[[str], None] | None = None

    # -- connections ------------------------------------------------------------------------

    def connected(self) -> set[int]:
        """Dpids of the switches connected now."""
        return self.app.connected() if self.app is not None else set()

    def wait_connected(self, dpids: Iterable[int], timeout: float) -> bool:
        """Wait until every switch in `dpids` is connected; False at the deadline."""
        assert self.app is not None
        wanted = set(dpids)
        deadline = time.monotonic() + timeout
        with self.app.changed:
            while not wanted <= set(self.app.datapaths):
                left = deadline - time.monotonic()
                if left <= 0 or self._stopped.is_set():
                    return False
                self.app.changed.wait(min(left, 0.5))
        return True

    def connected_switches(self) -> set[str]:
        """Names of the topology's switches connected now."""
        return {name for name, s in self.topology.switches.items() if s.dpid in self.connected()}

    def _switch_connected(self, dpid: int) -> None:
        name = self.topology.switch_by_dpid(dpid)
        hook = self.on_switch_connected
        if name is not None and hook is not None:
            hook(name)

    def _name(self, dpid: int) -> str:
        return self.topology.switch_by_dpid(dpid) or f"{dpid:#x}"

    # -- roles ------------------------------------------------------------------------------

    @property
    def role(self) -> str:
        """The role held: "master", "slave", or "equal" before any `claim_role`."""
        return self.app.role if self.app is not None else "equal"

    @property
    def generation(self) -> int:
        """The generation of the last `claim_role` (0 before any)."""
        return self.app.generation if self.app is not None else 0

    def claim_role(self, leader: bool, generation: int, timeout: float = 5.0) -> dict[str, str | None]:
        """Claim OpenFlow MASTER (`leader`) or SLAVE with `generation` on every switch, now and on each
        that connects later; per switch, None when it confirmed, else why not (within `timeout`).

        A SLAVE claim carries the current leader's generation. Serialized with `apply`: no write
        is in flight while the role changes.
        """
        if not 0 <= generation < NO_GENERATION:
            raise ValueError(f"generation id {generation} is not a 64-bit unsigned number below 2^64-1")
        if self.app is None or self._stopped.is_set():
            return {name: "the OpenFlow fabric is not running" for name in self.topology.switches}
        app = self.app
        wanted = "MASTER" if leader else "SLAVE"
        with self._apply_lock:
            requests = app.claim(leader, generation)
            deadline = time.monotonic() + timeout
            with app.changed:
                while not all(r.done for r in requests.values()):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    app.changed.wait(left)
                results: dict[str, str | None] = {
                    self._name(dpid): (r.reason if r.done else f"no role reply within {timeout:g}s")
                    for dpid, r in requests.items()}
        for name, switch in self.topology.switches.items():
            if switch.dpid not in requests:
                results[name] = (f"switch {name} (dpid {switch.dpid:#x}) not connected: {wanted} is claimed when it "
                                 "connects")
        confirmed = sum(1 for why in results.values() if why is None)
        LOG.info("OpenFlow %s claimed with generation %d: confirmed by %d of %d switch(es)", wanted, generation,
                 confirmed, len(results))
        return results

    def _write_refusal(self, dpids: Iterable[int]) -> str | None:
        """Why nothing may be written to switches `dpids` now (roles), or None."""
        return self.app.write_refusal(dpids) if self.app is not None else None

    def _dpid(self, switch: str) -> int:
        return self.topology.switches[switch].dpid

    # -- link state -------------------------------------------------------------------------

    @property
    def link_listener(self) -> LinkListener | None:
        """Called as `listener(link, up, reason)` on each link change, from an os-ken thread."""
        return self._link_listener

    @link_listener.setter
    def link_listener(self, listener: LinkListener | None) -> None:
        app = self.app
        if app is None:
            self._link_listener = listener
            return
        with app.lock:  # no change slips between the replay and the hook
            self._link_listener = listener
            app.link_hook = self._link_changed
            for change in app.links.down_links():
                try:
                    self._link_changed(change)
                except Exception:
                    LOG.exception("the link listener failed on %s", change)

    def _link_changed(self, change: LinkChange) -> None:
        listener = self._link_listener
        if listener is not None:
            listener(change.link, change.up, change.reason)

    def link_status(self) -> NetworkStatus | None:
        """Switches, links and wiring mismatches now; None before the OpenFlow app runs."""
        return self.app.link_status() if self.app is not None else None

    # -- load -------------------------------------------------------------------------------

    def _port_stats(self, dpid: int, counters: list[PortCounters], now: float) -> None:
        name = self.topology.switch_by_dpid(dpid)
        if name is not None:
            with self._load_lock:
                self._meter.observe(name, counters, now)

    def _counters_reset(self, dpid: int) -> None:
        """The switch connected or disconnected: no rate may span that (its counters may restart)."""
        name = self.topology.switch_by_dpid(dpid)
        if name is not None:
            with self._load_lock:
                self._meter.forget(name)

    def utilization(self) -> dict[str, DirectionLoad]:
        """Measured load of every link direction (access links included) now, by direction id."""
        with self._load_lock:
            return self._meter.loads(time.monotonic())

    # -- applying steps ---------------------------------------------------------------------

    def apply(self, steps: Sequence[Step], timeout: float = 5.0) -> str | None:
        """Send `steps` in order, confirming each barrier; None on success, else the reason."""
        return self.apply_many([steps], timeout)[0]

    def apply_many(self, changes: Sequence[Sequence[Step]], timeout: float = 5.0) -> list[str | None]:
        """Apply independent changes (each a list of steps) together; per change, None or the reason.

        Each change gets what `apply` would give it alone, but phase i of every change (its
        steps up to its i-th barrier) is sent together, then one barrier round to the switches
        touched, with `timeout` for its replies. A change the switches refuse (errors are
        matched to it by xid) or that touches a switch that disconnects or does not answer
        stops there; the others go on. Changes touching a switch not connected are refused
        before anything of theirs is sent, and so are, once a role was claimed, changes touching a
        switch that has not confirmed this controller as its OpenFlow master.

        Bundles (`bundles=True`): each switch gets its meter mods of the round first (Open vSwitch
        takes no meter mod in a bundle), then its flow and group mods in one bundle (OPEN, ADDs,
        COMMIT, atomic and ordered) and the barrier; nothing of a bundle applies unless all of it
        does. A bundle holds the messages of every change touching the switch in that round, so
        one change the switch refuses fails the commit for all of them. Policy: the switch names
        the message it refused (by the xid of its ADD); that change fails with the refusal, as
        alone, and nothing of its round is applied on that switch; the other changes of the
        bundle are sent again at once in a new bundle (one more round trip to that switch, and
        one per further refused change). A commit failing without naming a message sends the
        changes again as plain messages with a barrier, so each gets its own result as without
        bundles. A switch that refuses a bundle itself (an error to its OPEN or ADDs such as
        OFPBRC_BAD_EXPERIMENTER) gets the steps the bundle did not apply as plain messages, and
        only plain messages and barriers from then on while it stays connected. A message the
        switch refuses when added rather than at commit (it cannot even decode it) is left out
        of the bundle by the switch while the rest commits: that change fails with the refusal
        and its other messages stay applied, as without bundles.
        """
        if self.app is None or self._stopped.is_set():
            return ["the OpenFlow fabric is not running"] * len(changes)
        results: list[str | None] = [None] * len(changes)
        with self._apply_lock:
            connected = self.connected()
            runs: list[_Run] = []
            for index, steps in enumerate(changes):
                reason, phases = self._phases(list(steps), connected)
                if reason is not None:
                    results[index] = reason
                elif phases:
                    runs.append(_Run(index, phases))
            while runs:
                self._round(runs, timeout)
                for run in runs:
                    if run.reason is not None:
                        results[run.index] = run.reason
                runs = [r for r in runs if r.reason is None and r.next < len(r.phases)]
        return results

    def _phases(self, steps: list[Step], connected: set[int]) -> tuple[str | None, list[_Phase]]:
        """Check `steps` (dpids, switch names, connections) and split them at their barriers."""
        for step in steps:
            if step.kind is not StepKind.BARRIER and step.spec is not None \
                    and step.spec.switch in self.topology.switches \
                    and step.spec.dpid != self._dpid(step.spec.switch):
                return (f"step {step.describe()}: dpid {step.spec.dpid:#x} is not the dpid of switch "
                        f"{step.spec.switch} in topology {self.topology.name}"), []
        needed: dict[int, str] = {}
        phases: list[_Phase] = []
        current: list[Step] = []
        touched: dict[int, str] = {}
        for step in [*steps, Step(StepKind.BARRIER, ())]:
            if step.kind is StepKind.BARRIER:
                for name in step.switches:
                    if name not in self.topology.switches:
                        return f"barrier on switch {name}, which is not in topology {self.topology.name}", []
                    touched[self._dpid(name)] = name
                if touched:
                    phases.append(_Phase(current, touched))
                needed.update(touched)
                current, touched = [], {}
            else:
                assert step.spec is not None
                current.append(step)
                touched[step.spec.dpid] = step.spec.switch
        missing = sorted(d for d in needed if d not in connected)
        if missing:
            return "; ".join(f"switch {needed[d]} (dpid {d:#x}) not connected" for d in missing), []
        refusal = self._write_refusal(needed)
        if refusal is not None:
            return refusal, []
        return None, phases

    def _round(self, runs: list[_Run], timeout: float) -> None:
        """Send the next phase of every run, one barrier to each switch touched, and wait for the
        replies; a run whose messages were refused or whose switches failed gets its reason.

        With bundles, a switch whose bundle did not commit gets its changes again (see
        `apply_many`): one more attempt per such switch, each with `timeout` for its replies.
        """
        work: dict[int, Work] = {}
        waiting_on: dict[int, list[_Run]] = {}  # dpid -> runs whose phase ends with its barrier
        for run in runs:
            phase = run.phases[run.next]
            run.next += 1
            for step in phase.steps:
                assert step.spec is not None
                work.setdefault(step.spec.dpid, []).append((run, step))
            for dpid in phase.switches:
                waiting_on.setdefault(dpid, []).append(run)
        todo = {dpid: (work.get(dpid, []), self._takes_bundles(dpid)) for dpid in waiting_on}
        while todo:
            todo = self._attempt(todo, waiting_on, timeout)
            waiting_on = {dpid: _runs_of(again) for dpid, (again, _) in todo.items()}

    def _attempt(self, todo: dict[int, tuple[Work, bool]], waiting_on: dict[int, list[_Run]],
                 timeout: float) -> dict[int, tuple[Work, bool]]:
        """Send each switch of `todo` its steps (in a bundle where the flag says so) and a barrier,
        wait for the replies and give each run its reason; return what must be sent again."""
        assert self.app is not None
        app = self.app
        waiter = app.waiter()
        sent: dict[int, _Sent] = {}
        barriers: dict[int, int] = {}
        try:
            for dpid, (steps, bundle) in todo.items():
                waiting = waiting_on.get(dpid, [])
                if all(run.reason is not None for run in waiting):
                    continue
                name = self._name(dpid)
                dp = app.datapath(dpid)
                if dp is None:
                    for run in waiting:
                        run.fail(f"switch {name} (dpid {dpid:#x}) not connected")
                    continue
                try:
                    sent[dpid] = self._send_steps(waiter, dp, [(r, s) for r, s in steps if r.reason is None], bundle)
                    barriers[dpid] = app.send(dp, encoder.barrier(dp), waiter, barrier=True)
                except ConnectionError:
                    for run in waiting:
                        run.fail(f"switch {name} (dpid {dpid:#x}) disconnected")
            deadline = time.monotonic() + timeout
            with waiter.cond:
                while any(d not in waiter.gone for d, _ in waiter.barriers):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    waiter.cond.wait(left)
                errors = list(waiter.errors)
                replies = dict(waiter.bundle_replies)
                gone = set(waiter.gone)
                late = {d for d, _ in waiter.barriers if d not in gone}
        finally:
            app.forget(waiter)
        first_error: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        for error in errors:
            dpid, xid = error[0], error[1]
            first_error.setdefault((dpid, xid), error)
            if dpid in sent and xid in sent[dpid].plain:
                run, step = sent[dpid].plain[xid]
                run.fail(self._refusal(error, step))
            elif barriers.get(dpid) == xid:
                for run in waiting_on.get(dpid, []):
                    run.fail(self._refusal(error, None))
        again: dict[int, tuple[Work, bool]] = {}
        for dpid, out in sent.items():
            if out.commit_xid is not None:
                retry = self._read_bundle(dpid, out, first_error, replies, dpid not in gone and dpid not in late)
                if retry is not None:
                    again[dpid] = retry
        switches: dict[int, tuple[_Run, list[int]]] = {}
        for dpid, waiting in waiting_on.items():
            for run in waiting:
                switches.setdefault(id(run), (run, []))[1].append(dpid)
        for run, dpids in switches.values():
            if run.reason is not None:
                continue
            lost = sorted(d for d in dpids if d in gone)
            if lost:
                run.fail("; ".join(f"switch {self._name(d)} (dpid {d:#x}) disconnected" for d in lost))
                continue
            slow = sorted({self._name(d) for d in dpids if d in late})
            if slow:
                run.fail(f"no barrier reply from {', '.join(slow)} within {timeout:g}s")
        return {dpid: (steps, bundle) for dpid, (steps, bundle) in again.items()
                if any(run.reason is None for run, _ in steps)}

    def _send_steps(self, waiter: Waiter, dp, work: Work, bundle: bool) -> _Sent:
        """Send the messages of `work` (steps of several runs) to switch `dp`, in order, as one write;
        with `bundle`, the flow and group mods go in one bundle after the other messages (meter mods).

        Raises ConnectionError when the switch is closing.
        """
        assert self.app is not None
        plain: list[tuple[object, tuple[_Run, Step]]] = []
        bundled: list[tuple[object, tuple[_Run, Step]]] = []
        for run, step in work:
            msgs = encoder.encode_step(dp, step, self.scale)
            into = bundled if bundle and msgs and all(ofbundles.bundlable(dp, m) for m in msgs) else plain
            into.extend((msg, (run, step)) for msg in msgs)
        msgs = [msg for msg, _ in plain]
        if bundled:
            bundle_id = next(self._bundle_ids) % (1 << 32)
            msgs += [ofbundles.open_request(dp, bundle_id),
                     *(ofbundles.add_message(dp, bundle_id, msg) for msg, _ in bundled),
                     ofbundles.commit_request(dp, bundle_id)]
        xids = self.app.send_many(dp, msgs, waiter) if msgs else []
        out = _Sent(plain=dict(zip(xids[:len(plain)], (owner for _, owner in plain), strict=True)), bundled=[], adds={})
        if bundled:
            rest = xids[len(plain):]
            out.open_xid, out.commit_xid = rest[0], rest[-1]
            out.adds = dict(zip(rest[1:-1], (owner for _, owner in bundled), strict=True))
            out.bundled = list({(id(run), id(step)): (run, step) for _, (run, step) in bundled}.values())
        return out

    def _read_bundle(self, dpid: int, out: _Sent, errors: dict[tuple[int, int], tuple[int, int, int, int]],
                     replies: dict[tuple[int, int], int], answered: bool) -> tuple[Work, bool] | None:
        """Give the runs of a bundle sent to `dpid` what the switch answered; return the steps to send
        again and whether in a bundle, or None. Not `answered` (no barrier reply: the switch is gone
        or slow, and its runs fail for that): only the refusals that came are given."""
        ofp = ofproto_v1_3
        name = self._name(dpid)
        committed = ofbundles.is_commit_reply(ofp, replies.get((dpid, out.commit_xid), -1))
        add_errors = {xid: errors[(dpid, xid)] for xid in out.adds if (dpid, xid) in errors}
        not_taken = [xid for xid, e in add_errors.items() if ofbundles.is_bundle_error(ofp, e[2], e[3])]
        opening = errors.get((dpid, out.open_xid))
        if committed:
            self._count_bundle(dpid)
        if not answered:
            if opening is None:
                for xid, error in add_errors.items():
                    if xid not in not_taken:
                        run, step = out.adds[xid]
                        run.fail(self._refusal(error, step))
            return None
        if opening is not None or not_taken:
            # The switch did not take the bundle (or some of its messages) as sent: plain messages,
            # for what the bundle did not apply.
            problem = opening if opening is not None else add_errors[not_taken[0]]
            if not_taken or ofbundles.refuses_bundles(ofp, problem[2], problem[3]):
                self._bundle_support(dpid, False, ofbundles.describe_error(ofp, problem[2], problem[3],
                                                                          encoder.describe_error))
            if not committed:
                return _live(out.bundled), False
            for xid, error in add_errors.items():
                if xid not in not_taken:
                    run, step = out.adds[xid]
                    run.fail(self._refusal(error, step))
            return _live([out.adds[xid] for xid in not_taken]), False
        for xid, error in add_errors.items():
            run, step = out.adds[xid]
            run.fail(self._refusal(error, step))
        if committed:
            self._bundle_support(dpid, True)
            return None
        survivors = _live(out.bundled)
        if not survivors:
            return None
        if add_errors:  # nothing applied; the changes the switch did not blame go again, in a new bundle
            return survivors, True
        failing = errors.get((dpid, out.commit_xid))
        why = ofbundles.describe_error(ofp, failing[2], failing[3], encoder.describe_error) if failing else \
            "no commit reply before the barrier reply"
        LOG.warning("switch %s did not commit a bundle and named no message (%s): its %d step(s) go again "
                    "without a bundle", name, why, len(survivors))
        return survivors, False

    def _takes_bundles(self, dpid: int) -> bool:
        """Whether a round's changes for switch `dpid` go in a bundle: bundles are on and its
        connection has not refused one."""
        if not self.bundles or self.app is None:
            return False
        known = self._bundle_switches.get(dpid)
        return known is None or known[0] is not self.app.datapath(dpid) or known[1]

    def _bundle_support(self, dpid: int, takes: bool, why: str | None = None) -> None:
        """Remember (for its connection) whether switch `dpid` takes bundles; log it once."""
        assert self.app is not None
        dp = self.app.datapath(dpid)
        if dp is None:
            return
        with self._bundle_lock:
            known = self._bundle_switches.get(dpid)
            if known is not None and known[0] is dp and known[1] == takes:
                return
            self._bundle_switches[dpid] = (dp, takes)
        if takes:
            LOG.info("switch %s (dpid %#x) takes OpenFlow bundles (ONF extension): each round's flow and group "
                     "changes apply atomically", self._name(dpid), dpid)
        else:
            LOG.info("switch %s (dpid %#x) refused an OpenFlow bundle (%s): plain messages and barriers while it "
                     "stays connected", self._name(dpid), dpid, why)

    def _count_bundle(self, dpid: int) -> None:
        name = self._name(dpid)
        with self._bundle_lock:
            self._bundles_committed[name] = self._bundles_committed.get(name, 0) + 1

    def bundle_support(self) -> dict[str, bool]:
        """Per connected switch known by now (it was sent a bundle on this connection): whether it
        takes OpenFlow bundles."""
        connected = {dpid: self.app.datapath(dpid) for dpid in self.connected()} if self.app is not None else {}
        with self._bundle_lock:
            return {self._name(dpid): takes for dpid, (dp, takes) in self._bundle_switches.items()
                    if connected.get(dpid) is dp}

    def bundles_committed(self) -> dict[str, int]:
        """Per switch name, how many bundles it committed since this fabric started."""
        with self._bundle_lock:
            return dict(self._bundles_committed)

    def _refusal(self, error: tuple[int, int, int, int], step: Step | None) -> str:
        dpid, _, type_, code = error
        assert self.app is not None
        dp = self.app.datapath(dpid)
        from os_ken.ofproto import ofproto_v1_3

        what = _error_words(dp.ofproto if dp is not None else ofproto_v1_3, type_, code)
        if step is None:
            return f"switch {self._name(dpid)} refused a barrier: {what}"
        return f"switch {self._name(dpid)} refused a {_step_kind_word(step)}: {what} ({step.describe()})"

    # -- reconciliation ---------------------------------------------------------------------

    def read(self, switch: str, timeout: float = 5.0) -> tuple[SwitchPlan, list[tuple[object, str]]]:
        """What `switch` holds now: its tsdn-cookie flows, every meter and every group, as specs;
        and the tsdn-cookie flows whose match no spec can express, as reported, each with why.

        Raises ConnectionError (not connected or gone), TimeoutError (no complete reply within
        `timeout` seconds per request) or RuntimeError (the switch refused a request).
        """
        if self.app is None or self._stopped.is_set():
            raise ConnectionError("the OpenFlow fabric is not running")
        if switch not in self.topology.switches:
            raise ValueError(f"no switch {switch!r} in topology {self.topology.name}")
        dpid = self._dpid(switch)
        dp = self.app.datapath(dpid)
        if dp is None:
            raise ConnectionError(f"switch {switch} (dpid {dpid:#x}) not connected")
        flows: list[FlowSpec] = []
        unreadable: list[tuple[object, str]] = []
        for stats in self.app.request(dp, encoder.flow_stats_request(dp), timeout):
            if not is_tsdn_cookie(stats.cookie):
                continue
            try:
                flows.append(encoder.flow_from_stats(dp, stats, switch))
            except ValueError as why:
                unreadable.append((stats, str(why)))
        meters = [encoder.meter_from_stats(dp, stats, switch, self.scale)
                  for stats in self.app.request(dp, encoder.meter_config_request(dp), timeout)]
        groups = [encoder.group_from_stats(dp, stats, switch)
                  for stats in self.app.request(dp, encoder.group_desc_request(dp), timeout)]
        return SwitchPlan(tuple(flows), tuple(meters), tuple(groups)), unreadable

    def reconcile(self, switch: str, expected: SwitchPlan, timeout: float = 5.0) -> Reconciled:
        """Make `switch` hold exactly `expected` of tsdn's entries (see `core.reconcile`): read it,
        delete what nobody owns, add what is missing, leave what is right untouched.

        Raises `ReconcileFailed` naming the switch and the reason when it cannot be read or
        refuses a step (what was applied before stays applied), or, with a role claimed, when this
        controller is not the switch's master (nothing is read or sent then).
        """
        if switch in self.topology.switches:
            refusal = self._write_refusal([self._dpid(switch)])
            if refusal is not None:
                raise ReconcileFailed(f"{switch}: {refusal}")
        try:
            held, unreadable = self.read(switch, timeout)
        except (ConnectionError, TimeoutError, RuntimeError) as why:
            raise ReconcileFailed(f"{switch}: cannot read its flows, meters and groups: {why}") from why
        if unreadable:
            reason = self._delete_as_held(switch, [stats for stats, _ in unreadable], timeout)
            if reason is not None:
                raise ReconcileFailed(f"{switch}: deleting flows tsdn cannot read: {reason}")
        try:
            done = reconcile(switch, expected, held, partial(encoder.held_meter, scale=self.scale))
        except ValueError as why:
            raise ReconcileFailed(str(why)) from why
        reason = self.apply(done.steps, timeout)
        if reason is not None:
            raise ReconcileFailed(f"{switch}: {reason}")
        return Reconciled(switch, held, done, tuple(why for _, why in unreadable))

    def _delete_as_held(self, switch: str, entries: list, timeout: float) -> str | None:
        """Delete flow entries exactly as `switch` reported them, with a barrier; None or the reason."""
        assert self.app is not None
        dpid = self._dpid(switch)
        dp = self.app.datapath(dpid)
        if dp is None:
            return f"switch {switch} (dpid {dpid:#x}) not connected"
        refusal = self._write_refusal([dpid])
        if refusal is not None:
            return refusal
        waiter = self.app.waiter()
        try:
            try:
                for stats in entries:
                    self.app.send(dp, encoder.delete_flow_as_held(dp, stats), waiter)
                self.app.send(dp, encoder.barrier(dp), waiter, barrier=True)
            except ConnectionError:
                return f"switch {switch} (dpid {dpid:#x}) disconnected"
            deadline = time.monotonic() + timeout
            with waiter.cond:
                while not waiter.done():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return f"no barrier reply from {switch} within {timeout:g}s"
                    waiter.cond.wait(left)
                if waiter.errors:
                    _, _, type_, code = waiter.errors[0]
                    return f"switch {switch} refused a flow delete: {_error_words(dp.ofproto, type_, code)}"
                if waiter.gone:
                    return f"switch {switch} (dpid {dpid:#x}) disconnected"
            return None
        finally:
            self.app.forget(waiter)

    # -- lifecycle --------------------------------------------------------------------------

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listening socket and every switch connection; unregister the apps."""
        global _running
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._handler is not None and isinstance(self._handler.controller, _Controller):
            self._handler.controller.close()
        if self.app is not None:
            with self.app.lock:
                datapaths = list(self.app.datapaths.values())
            for dp in datapaths:
                try:
                    dp.close()
                except Exception:
                    LOG.debug("closing datapath %s failed", dp, exc_info=True)
        if self._manager is not None:
            closer = threading.Thread(target=self._manager.close, name="tsdn-openflow-close", daemon=True)
            closer.start()
            closer.join(timeout)
        with _running_lock:
            if _running is self:
                _running = None

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_openflow(topology: Topology, listen_host: str = "127.0.0.1", listen_port: int = 6653,
                   scale: float = 1.0, bundles: bool = True) -> Fabric:
    """Start os-ken with `TsdnOpenFlowApp` listening on `listen_host:listen_port`; return the Fabric.

    `scale` multiplies meter rates (the emulation scale; 1.0 on real switches). `bundles`: apply
    each switch's flow and group changes of a round in an OpenFlow bundle where the switch takes
    them (False: plain messages and barriers only, as for comparisons). Raises
    `OSError` when the port cannot be bound, `RuntimeError` when a fabric already runs in
    this process or os-ken does not come up within `START_TIMEOUT` seconds.
    """
    global _running
    if scale <= 0:
        raise ValueError(f"emulation scale must be positive, got {scale}")
    with _running_lock:
        if _running is not None:
            raise RuntimeError(f"an OpenFlow fabric already runs in this process (on {_running.listen}); stop it first")
        fabric = Fabric(topology, scale, (listen_host, listen_port), bundles=bundles)
        _running = fabric
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            cfg.CONF(args=["--ofp-listen-host", listen_host, "--ofp-tcp-listen-port", str(listen_port)],
                     project="os_ken")
            manager = app_manager.AppManager()
            manager.load_apps([APP_MODULE])
            if OFP_HANDLER_MODULE in manager.applications_cls:
                manager.applications_cls[OFP_HANDLER_MODULE] = _OFPHandler
            fabric._manager = manager
            contexts = manager.create_contexts()
            threads = manager.instantiate_apps(topology=topology, scale=scale, **contexts)
            fabric.app = manager.applications["TsdnOpenFlowApp"]
            fabric.app.on_connected = fabric._switch_connected
            fabric.app.port_stats_hook = fabric._port_stats
            fabric.app.counters_reset_hook = fabric._counters_reset
            fabric._handler = manager.applications.get("ofp_event")
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            return
        ready.set()
        hub.joinall(threads)

    # A daemon thread: os-ken's native hub threads inherit the flag, so none blocks exit.
    fabric._thread = threading.Thread(target=run, name=f"tsdn-openflow-{listen_port}", daemon=True)
    fabric._thread.start()
    try:
        if not ready.wait(START_TIMEOUT):
            raise RuntimeError(f"os-ken did not start within {START_TIMEOUT:g}s")
        if failure:
            raise failure[0]
        handler = fabric._handler
        if handler is None or not isinstance(handler.controller, _Controller):
            raise RuntimeError("os-ken's OpenFlow handler did not start")
        if not handler.controller.listening.wait(START_TIMEOUT):
            raise RuntimeError(f"os-ken did not listen on {listen_host}:{listen_port} within {START_TIMEOUT:g}s")
        if handler.controller.failed is not None:
            failed = handler.controller.failed
            raise OSError(f"cannot listen for OpenFlow on {listen_host}:{listen_port}: {failed}") from failed
    except BaseException:
        fabric.stop()
        raise
    LOG.info("OpenFlow fabric listening on %s:%s (scale %g, bundles %s)", listen_host, listen_port, scale,
             "on" if bundles else "off")
    return fabric
