"""A `tsdn controller` as a real process, the CLI that drives it, and what the switches hold.

Shared by the system tests that run the controller against Mininet: `ControllerProcess`
starts, kills and restarts it; `tsdn(env, ...)` runs the CLI against it; `tsdn_flows`,
`connected_bridges` and `pings` read what Open vSwitch and the hosts see.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"
TOKEN = "rucio-token-0123456789abcdef"
SCALE = 0.001  # ring8's 100G links run at 100 Mbit/s
DEADLINE = 30.0



def connected_bridges() -> set[str]:
    out = subprocess.run(["ovs-vsctl", "--format=json", "--columns=_uuid,is_connected", "list", "Controller"],
                         capture_output=True, text=True, timeout=10).stdout
    controllers = {row[0][1] for row in json.loads(out)["data"] if row[1] is True}
    bridges = set()
    for name in subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, timeout=10).stdout.split():
        ids = subprocess.run(["ovs-vsctl", "get", "Bridge", name, "controller"], capture_output=True, text=True,
                             timeout=10).stdout
        if any(c in ids for c in controllers):
            bridges.add(name)
    return bridges


def tsdn_flows(bridge: str) -> list[str]:
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge], capture_output=True, text=True,
                         timeout=10).stdout
    return [line for line in out.splitlines() if "cookie=0x75d5" in line]


def pings(net, src: str, dst: str) -> bool:
    address = net.topology.dtns[dst].ipv4
    return " 0% packet loss" in net.host(src).cmd(f"ping -c 2 -i 0.2 -W 1 {address}")


class ControllerProcess:
    """A `tsdn controller` process controlling `topology` over OpenFlow; can be killed and started again."""

    def __init__(self, tmp_path: Path, openflow_port: int, topology: str = "ring8", scale: float = SCALE,
                 extra: tuple[str, ...] = (), agents: tuple[str, ...] = (), priority: int = 1,
                 label_grace: str = "0s"):
        """`agents`: DTNs that get an agent token bound to them (`agent_token(dtn)`), and the
        controller also listens on `agent_socket`, which Mininet hosts reach. `priority`: the
        service principal's (rucio's) in the tokens file. `label_grace`: `--label-grace`; 0s by
        default, so a path nobody uses leaves the switches at once and a test sees what a release
        or a move left behind (tests/test_label_plans.py covers the grace)."""
        self.tmp_path = tmp_path
        self.openflow_port = openflow_port
        self.topology = topology
        self.scale = scale
        self.extra = (*extra, "--label-grace", label_grace)
        self.grpc_address = "127.0.0.1:0"
        self.agent_socket = f"unix:{tmp_path / 'grpc.sock'}"
        self.process: subprocess.Popen | None = None
        self.log: list[str] = []
        entries = [{"principal": "rucio", "role": "service", "token": TOKEN, "priority": priority}]
        for dtn in agents:
            token = f"agent-{dtn}-{os.urandom(8).hex()}"
            entries.append({"principal": f"agent-{dtn}", "role": "agent", "token": token, "dtn": dtn})
            self.agent_token(dtn).write_text(token)
        if agents:
            self.extra = (*self.extra, "--also-listen", self.agent_socket)
        tokens = tmp_path / "tokens.yaml"
        tokens.write_text(yaml.safe_dump({"tokens": entries}))
        tokens.chmod(0o600)
        (tmp_path / "rucio.token").write_text(TOKEN)

    def agent_token(self, dtn: str) -> Path:
        """The token file of the agent of `dtn`."""
        return self.tmp_path / f"agent-{dtn}.token"

    def start(self) -> str:
        """Start it (on the gRPC address it had before, if any); return that address."""
        process = subprocess.Popen(
            [TSDN, "controller", "--topology", self.topology, "--listen-grpc", self.grpc_address, "--state",
             str(self.tmp_path / "tsdn.db"), "--tokens", str(self.tmp_path / "tokens.yaml"),
             "--listen-openflow", f"127.0.0.1:{self.openflow_port}", "--emulation-scale", str(self.scale), *self.extra],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.process = process
        lines: queue.Queue = queue.Queue()

        def read() -> None:
            for line in process.stderr:
                self.log.append(line)
                lines.put(line)

        threading.Thread(target=read, daemon=True).start()
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                assert process.poll() is None, "controller exited:\n" + "".join(self.log)
                continue
            if line.startswith("tsdn controller listening on "):
                self.grpc_address = line.rsplit(" ", 1)[1].strip()
                return self.grpc_address
        raise AssertionError("controller did not start:\n" + "".join(self.log))

    def kill(self) -> None:
        """SIGKILL: a crash, no clean shutdown."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(15)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()


ALL_SWITCHES = {f"s{i}" for i in range(1, 9)}


def cli_env(address: str, tmp_path: Path) -> dict[str, str]:
    """Environment for `tsdn` CLI calls against the controller at `address` with the test's token."""
    return {**os.environ, "TSDN_CONTROLLER": address, "TSDN_TOKEN_FILE": str(tmp_path / "rucio.token")}


def tsdn(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([TSDN, *args], capture_output=True, text=True, timeout=120, env=env)
