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
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterable, Sequence

from os_ken import cfg
from os_ken.base import app_manager
from os_ken.controller import controller as os_ken_controller
from os_ken.controller.handler import DEAD_DISPATCHER
from os_ken.controller.ofp_handler import OFPHandler
from os_ken.lib import hub

from sdn_app.core.plans import FlowSpec, GroupSpec, MeterSpec, Step, StepKind
from sdn_app.core.topology import Topology
from sdn_app.openflow import encoder
from sdn_app.openflow.app import TsdnOpenFlowApp, Waiter

LOG = logging.getLogger("tsdn.openflow")

APP_MODULE = "sdn_app.openflow.app"
OFP_HANDLER_MODULE = "os_ken.controller.ofp_handler"
START_TIMEOUT = 10.0

_running_lock = threading.Lock()
_running: Fabric | None = None


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


def _step_kind_word(step: Step) -> str:
    spec = step.spec
    return "flow" if isinstance(spec, FlowSpec) else "meter" if isinstance(spec, MeterSpec) else \
        "group" if isinstance(spec, GroupSpec) else "step"


class Fabric:
    """The running OpenFlow side: connected switches, and plan steps applied with barriers."""

    def __init__(self, topology: Topology, scale: float, listen: tuple[str, int]):
        self.topology = topology
        self.scale = scale
        self.listen = listen
        self.app: TsdnOpenFlowApp | None = None
        self._manager: app_manager.AppManager | None = None
        self._handler: _OFPHandler | None = None
        self._apply_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

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

    def _name(self, dpid: int) -> str:
        return self.topology.switch_by_dpid(dpid) or f"{dpid:#x}"

    def _dpid(self, switch: str) -> int:
        return self.topology.switches[switch].dpid

    # -- applying steps ---------------------------------------------------------------------

    def apply(self, steps: Sequence[Step], timeout: float = 5.0) -> str | None:
        """Send `steps` in order, confirming each barrier; None on success, else the reason."""
        if self.app is None or self._stopped.is_set():
            return "the OpenFlow fabric is not running"
        steps = list(steps)
        with self._apply_lock:
            for step in steps:
                if step.kind is not StepKind.BARRIER and step.spec is not None \
                        and step.spec.switch in self.topology.switches \
                        and step.spec.dpid != self._dpid(step.spec.switch):
                    return (f"step {step.describe()}: dpid {step.spec.dpid:#x} is not the dpid of switch "
                            f"{step.spec.switch} in topology {self.topology.name}")
            needed: dict[int, str] = {}
            for step in steps:
                if step.kind is StepKind.BARRIER:
                    for name in step.switches:
                        if name not in self.topology.switches:
                            return f"barrier on switch {name}, which is not in topology {self.topology.name}"
                        needed[self._dpid(name)] = name
                else:
                    assert step.spec is not None
                    needed[step.spec.dpid] = step.spec.switch
            connected = self.connected()
            missing = sorted(d for d in needed if d not in connected)
            if missing:
                return "; ".join(f"switch {needed[d]} (dpid {d:#x}) not connected" for d in missing)
            return self._send_all(steps, timeout)

    def _send_all(self, steps: list[Step], timeout: float) -> str | None:
        assert self.app is not None
        app = self.app
        waiter = app.waiter()
        sent: dict[tuple[int, int], Step] = {}
        touched: dict[int, str] = {}  # since the last barrier
        try:
            for step in [*steps, Step(StepKind.BARRIER, ())]:
                if step.kind is StepKind.BARRIER:
                    dpids = {self._dpid(n): n for n in step.switches}
                    dpids.update(touched)
                    if dpids:
                        reason = self._barrier(waiter, dpids, sent, timeout)
                        if reason is not None:
                            return reason
                    touched = {}
                    continue
                spec = step.spec
                assert spec is not None
                dp = app.datapath(spec.dpid)
                if dp is None:
                    return f"switch {spec.switch} (dpid {spec.dpid:#x}) not connected"
                for msg in encoder.encode_step(dp, step, self.scale):
                    try:
                        xid = app.send(dp, msg, waiter)
                    except ConnectionError:
                        return f"switch {spec.switch} (dpid {spec.dpid:#x}) disconnected"
                    sent[(spec.dpid, xid)] = step
                touched[spec.dpid] = spec.switch
            return None
        finally:
            app.forget(waiter)

    def _barrier(self, waiter: Waiter, dpids: dict[int, str], sent: dict[tuple[int, int], Step],
                 timeout: float) -> str | None:
        assert self.app is not None
        for dpid, name in dpids.items():
            dp = self.app.datapath(dpid)
            if dp is None:
                return f"switch {name} (dpid {dpid:#x}) not connected"
            try:
                self.app.send(dp, encoder.barrier(dp), waiter, barrier=True)
            except ConnectionError:
                return f"switch {name} (dpid {dpid:#x}) disconnected"
        deadline = time.monotonic() + timeout
        with waiter.cond:
            while not waiter.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                waiter.cond.wait(left)
            if waiter.errors:
                return self._refusal(waiter.errors[0], sent)
            if waiter.gone:
                return "; ".join(f"switch {self._name(d)} (dpid {d:#x}) disconnected" for d in sorted(waiter.gone))
            if waiter.barriers:
                late = sorted({self._name(d) for d, _ in waiter.barriers})
                return f"no barrier reply from {', '.join(late)} within {timeout:g}s"
        return None

    def _refusal(self, error: tuple[int, int, int, int], sent: dict[tuple[int, int], Step]) -> str:
        dpid, xid, type_, code = error
        assert self.app is not None
        dp = self.app.datapath(dpid)
        from os_ken.ofproto import ofproto_v1_3

        what = encoder.describe_error(dp.ofproto if dp is not None else ofproto_v1_3, type_, code)
        step = sent.get((dpid, xid))
        if step is None:
            return f"switch {self._name(dpid)} refused a barrier: {what}"
        return f"switch {self._name(dpid)} refused a {_step_kind_word(step)}: {what} ({step.describe()})"

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
                   scale: float = 1.0) -> Fabric:
    """Start os-ken with `TsdnOpenFlowApp` listening on `listen_host:listen_port`; return the Fabric.

    `scale` multiplies meter rates (the emulation scale; 1.0 on real switches). Raises
    `OSError` when the port cannot be bound, `RuntimeError` when a fabric already runs in
    this process or os-ken does not come up within `START_TIMEOUT` seconds.
    """
    global _running
    if scale <= 0:
        raise ValueError(f"emulation scale must be positive, got {scale}")
    with _running_lock:
        if _running is not None:
            raise RuntimeError(f"an OpenFlow fabric already runs in this process (on {_running.listen}); stop it first")
        fabric = Fabric(topology, scale, (listen_host, listen_port))
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
    LOG.info("OpenFlow fabric listening on %s:%s (scale %g)", listen_host, listen_port, scale)
    return fabric
