"""One OpenFlow fabric in a process of its own, driven over its stdin and stdout: one controller of several.

os-ken allows one fabric per process, so a test that needs two controllers runs two of these.
`FabricPeer(topology_file, port)` starts `python -m mininet_tests.fabric_peer` (os-ken listening
on 127.0.0.1:`port`) and calls it; each call is one JSON line in and one JSON line out:

    peer.call("claim", leader=True, generation=2)      # -> {"results": {switch: None | reason}, ...}
    peer.call("install", rid=..., src="dtn1", dst="dtn2", bandwidth=...)  # -> {"reason": None | reason}

Calls: `connected` (wait until every switch of the topology is connected), `claim`, `state`
(role, generation, what each switch confirmed, switches `on_switch_connected` was told of and
the role each had confirmed then), `install` / `remove` (a reservation's plan from the same
inputs gives the same plan in every peer), `reconcile` (one switch to hold nothing of tsdn's),
`drop` (close every switch connection: they reconnect on their own, as after a controller's
pause or a network blip), `stop`. `install` and `remove` take `force=True` to write past this
controller's own guard: what a deposed leader that never heard of its deposition would send.
The process logs to stderr; `peer.log` holds its lines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

CALL_TIMEOUT = 60.0


class FabricPeer:
    """The test's side: a fabric process on `port` controlling `topology`, and calls to it."""

    def __init__(self, topology: Path | str, port: int, scale: float | None = None):
        command = [sys.executable, "-m", "mininet_tests.fabric_peer", "--topology", str(topology), "--port", str(port)]
        if scale is not None:
            command += ["--scale", repr(scale)]
        self.port = port
        self.log: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        root = Path(__file__).resolve().parent.parent
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=root, bufsize=1)
        threading.Thread(target=self._read_replies, daemon=True).start()
        threading.Thread(target=self._read_log, daemon=True).start()
        ready = self._reply(CALL_TIMEOUT)
        if not ready.get("ready"):
            raise AssertionError(f"fabric peer on port {port} did not start: {ready}\n" + "".join(self.log))

    def _read_replies(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)  # the process ended

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)

    def _reply(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"fabric peer on port {self.port}: no answer within {timeout:g}s\n"
                                 + "".join(self.log)) from None
        if line is None:
            raise AssertionError(f"fabric peer on port {self.port} exited ({self.process.wait(5)}):\n"
                                 + "".join(self.log))
        return json.loads(line)

    def call(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> dict[str, Any]:
        """Send one call and return its answer; fail with the peer's log when it errs or says nothing."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        reply = self._reply(timeout)
        if "error" in reply:
            raise AssertionError(f"fabric peer on port {self.port}: {op} failed: {reply['error']}")
        return reply

    def logged(self, level: str) -> list[str]:
        """The peer's log lines at `level` (ERROR, WARNING, INFO)."""
        return [line for line in self.log if f" {level} " in line]

    def stop(self) -> None:
        """Stop the fabric and the process (killed if it lingers)."""
        if self.process.poll() is None:
            with contextlib.suppress(AssertionError, OSError):  # it may have exited: then it is killed below
                self.call("stop", timeout=15)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(15)


# --- the peer process ------------------------------------------------------------------------


class _Peer:
    """The process's side: the fabric and the calls it answers."""

    def __init__(self, topology_file: str, port: int, scale: float | None):
        from sdn_app.core.plans import IdAllocator
        from sdn_app.core.topology import Topology
        from sdn_app.openflow.fabric import start_openflow
        from topologies.mininet_builder import default_scale

        self.topology = Topology.load(topology_file)
        self.fabric = start_openflow(self.topology, "127.0.0.1", port,
                                     scale if scale is not None else default_scale(self.topology))
        self.ids = IdAllocator()
        self.plans: dict[str, Any] = {}
        self.told: list[tuple[str, list | None]] = []  # (switch, its confirmed role) at each on_switch_connected
        self.fabric.on_switch_connected = self._told

    def _told(self, switch: str) -> None:
        app = self.fabric.app
        dpid = self.topology.switches[switch].dpid
        with app.lock:
            confirmed = app.switch_roles.get(dpid)
        self.told.append((switch, list(confirmed) if confirmed else None))

    def connected(self, timeout: float = 30.0) -> dict[str, Any]:
        dpids = {s.dpid for s in self.topology.switches.values()}
        ok = self.fabric.wait_connected(dpids, timeout)
        return {"ok": ok, "connected": sorted(self.fabric.connected_switches())}

    def claim(self, leader: bool, generation: int, timeout: float = 5.0) -> dict[str, Any]:
        results = self.fabric.claim_role(leader, generation, timeout)
        return {"results": results, **self.state()}

    def state(self) -> dict[str, Any]:
        app = self.fabric.app
        with app.lock:
            roles = {self.topology.switch_by_dpid(d) or hex(d): list(r) for d, r in app.switch_roles.items()}
        return {"role": self.fabric.role, "generation": self.fabric.generation, "switch_roles": roles,
                "told": self.told}

    def _plan(self, rid: str, src: str, dst: str, bandwidth: int):
        from sdn_app.core.paths import PathFinder, PathRequest, Unbooked
        from sdn_app.core.plans import plan_for

        if rid not in self.plans:
            route = PathFinder(self.topology, Unbooked(self.topology)).route(PathRequest(src, dst, bandwidth, 0, 3600))
            self.plans[rid] = plan_for(self.topology, rid, src, dst, route, bandwidth, self.ids)
        return self.plans[rid]

    def _apply(self, steps, force: bool) -> str | None:
        if not force:
            return self.fabric.apply(steps)
        # What a deposed leader that never heard would do: its own guard says yes.
        self.fabric._write_refusal = lambda dpids: None
        try:
            return self.fabric.apply(steps)
        finally:
            del self.fabric._write_refusal

    def install(self, rid: str, src: str, dst: str, bandwidth: int, force: bool = False) -> dict[str, Any]:
        from sdn_app.core.plans import plan_steps

        plan = self._plan(rid, src, dst, bandwidth)
        return {"reason": self._apply(plan_steps(None, plan), force), "cookie": plan.cookie,
                "switches": sorted({f.switch for f in plan.flows})}

    def remove(self, rid: str, force: bool = False) -> dict[str, Any]:
        from sdn_app.core.plans import plan_steps

        return {"reason": self._apply(plan_steps(self.plans[rid], None), force)}

    def reconcile(self, switch: str) -> dict[str, Any]:
        from sdn_app.core.plans import SwitchPlan
        from sdn_app.openflow.fabric import ReconcileFailed

        try:
            return {"reason": None, "summary": self.fabric.reconcile(switch, SwitchPlan((), (), ())).summary()}
        except ReconcileFailed as why:
            return {"reason": str(why)}

    def drop(self) -> dict[str, Any]:
        app = self.fabric.app
        with app.lock:
            datapaths = list(app.datapaths.values())
        for dp in datapaths:
            dp.close()
        return {"dropped": len(datapaths)}

    def serve(self) -> None:
        print(json.dumps({"ready": True, "port": self.fabric.listen[1]}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            op = request.pop("op")
            try:
                if op == "stop":
                    self.fabric.stop()
                    print(json.dumps({"stopped": True}), flush=True)
                    return
                if op not in {"connected", "claim", "state", "install", "remove", "reconcile", "drop"}:
                    raise ValueError(f"no call {op!r}")
                reply = getattr(self, op)(**request)
            except Exception as exc:  # the test sees it as a failed call, with the peer's log
                logging.getLogger("tsdn.peer").exception("%s failed", op)
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(reply), flush=True)
        self.fabric.stop()


def main(argv: list[str] | None = None) -> None:
    """Run one fabric and answer calls on stdin until `stop` or end of input."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--scale", type=float)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _Peer(args.topology, args.port, args.scale).serve()


if __name__ == "__main__":
    main()
