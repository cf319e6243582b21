"""`tsdn controller` as a real process controlling ring8 in Mininet, driven through the real CLI.

No connectivity without a reservation; `tsdn path request` returns once every hop is
barrier-confirmed (ACTIVE) and packets then flow; release takes every tsdn flow away; a
switch that is not there makes the reservation FAILED with its name, and nothing is left
installed elsewhere.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.waiting import wait_for

TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"
TOKEN = "rucio-token-0123456789abcdef"
SCALE = 0.001  # ring8's 100G links run at 100 Mbit/s
DEADLINE = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
    """A `tsdn controller` process controlling ring8 over OpenFlow; can be killed and started again."""

    def __init__(self, tmp_path: Path, openflow_port: int):
        self.tmp_path = tmp_path
        self.openflow_port = openflow_port
        self.grpc_address = "127.0.0.1:0"
        self.process: subprocess.Popen | None = None
        self.log: list[str] = []
        tokens = tmp_path / "tokens.yaml"
        tokens.write_text(yaml.safe_dump({"tokens": [{"principal": "rucio", "role": "service", "token": TOKEN}]}))
        tokens.chmod(0o600)
        (tmp_path / "rucio.token").write_text(TOKEN)

    def start(self) -> str:
        """Start it (on the gRPC address it had before, if any); return that address."""
        process = subprocess.Popen(
            [TSDN, "controller", "--topology", "ring8", "--listen-grpc", self.grpc_address, "--state",
             str(self.tmp_path / "tsdn.db"), "--tokens", str(self.tmp_path / "tokens.yaml"),
             "--listen-openflow", f"127.0.0.1:{self.openflow_port}", "--emulation-scale", str(SCALE)],
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


@pytest.fixture
def controlled(network, tmp_path) -> Iterator[tuple[object, dict, ControllerProcess]]:
    """ring8 in Mininet, controlled by a `tsdn controller` process; yields (network, CLI env, process)."""
    controller = ControllerProcess(tmp_path, free_port())
    try:
        address = controller.start()
        net = network("ring8", scale=SCALE, controller=("127.0.0.1", controller.openflow_port))
        wait_for(lambda: connected_bridges() >= ALL_SWITCHES, "all 8 switches to connect", DEADLINE)
        env = {**os.environ, "TSDN_CONTROLLER": address, "TSDN_TOKEN_FILE": str(tmp_path / "rucio.token")}
        yield net, env, controller
    finally:
        controller.stop()


def tsdn(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([TSDN, *args], capture_output=True, text=True, timeout=120, env=env)


def test_reservation_opens_the_path_and_release_closes_it(controlled):
    net, env, _ = controlled
    assert not pings(net, "dtn1", "dtn3"), "DTNs talk without a reservation"
    made = tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json")
    assert made.returncode == 0, made.stderr
    reservation = json.loads(made.stdout)
    assert reservation["state"] == "ACTIVE", reservation
    assert reservation["path"]["route"] == ["dtn1", "s1", "s2", "s3", "dtn3"]
    assert all(tsdn_flows(net.topo.mn_name(s)) for s in ("s1", "s2", "s3"))
    assert not any(tsdn_flows(net.topo.mn_name(s)) for s in ("s4", "s5", "s6", "s7", "s8"))
    assert pings(net, "dtn1", "dtn3")
    assert not pings(net, "dtn1", "dtn4"), "a reservation opened more than its own pair"

    released = tsdn(env, "path", "release", reservation["id"], "--json")
    assert json.loads(released.stdout)["state"] == "RELEASED"
    wait_for(lambda: not any(tsdn_flows(f"s{i}") for i in range(1, 9)), "every tsdn flow to be removed", DEADLINE)
    assert not pings(net, "dtn1", "dtn3")


def test_a_missing_switch_fails_the_reservation_and_leaves_nothing(controlled):
    net, env, _ = controlled
    subprocess.run(["ovs-vsctl", "del-controller", net.topo.mn_name("s2")], check=True, timeout=10)
    wait_for(lambda: "s2" not in connected_bridges(), "s2 to disconnect", DEADLINE)
    made = tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json")
    assert made.returncode == 1, made.stderr
    reservation = json.loads(made.stdout)
    assert reservation["state"] == "FAILED" and "s2" in reservation["state_reason"], reservation
    wait_for(lambda: not any(tsdn_flows(f"s{i}") for i in range(1, 9)), "no tsdn flow left anywhere", DEADLINE)
    assert not pings(net, "dtn1", "dtn3")


def test_traffic_survives_a_controller_crash_and_a_restart_knows_its_flows(controlled):
    net, env, controller = controlled
    made = json.loads(tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json").stdout)
    assert made["state"] == "ACTIVE"
    controller.kill()
    wait_for(lambda: not connected_bridges(), "the switches to notice the controller is gone", DEADLINE)
    assert pings(net, "dtn1", "dtn3"), "fail-mode secure switches must keep forwarding without a controller"
    assert not pings(net, "dtn1", "dtn4")

    controller.start()
    wait_for(lambda: connected_bridges() >= ALL_SWITCHES, "all 8 switches to reconnect", DEADLINE)
    assert pings(net, "dtn1", "dtn3")
    shown = json.loads(tsdn(env, "path", "show", made["id"], "--json").stdout)
    assert shown["state"] == "ACTIVE"
    released = tsdn(env, "path", "release", made["id"], "--json")
    assert json.loads(released.stdout)["state"] == "RELEASED"
    wait_for(lambda: not any(tsdn_flows(f"s{i}") for i in range(1, 9)), "the restarted controller to remove them",
             DEADLINE)
    assert not pings(net, "dtn1", "dtn3")


@pytest.mark.parametrize("cut", [("s1", "s2"), ("s2", "s3")], ids=["at-the-ingress", "downstream"])
def test_protected_reservation_fails_over_with_the_controller_stopped(controlled, cut):
    net, env, controller = controlled
    made = json.loads(tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--protect", "--json").stdout)
    assert made["state"] == "ACTIVE" and made["path"]["route"][1:-1] == ["s1", "s2", "s3"]
    assert made["backup_path"]["route"][1:-1] == ["s1", "s8", "s7", "s6", "s5", "s4", "s3"]
    assert pings(net, "dtn1", "dtn3")
    controller.kill()
    before = backup_packets(net)
    net.mn.configLinkStatus(net.topo.mn_name(cut[0]), net.topo.mn_name(cut[1]), "down")
    # A packet on the wire when the link dies is lost; the ones after it must go around the ring.
    wait_for(lambda: pings(net, "dtn1", "dtn3"), f"traffic to resume with {cut[0]}-{cut[1]} down, no controller",
             timeout=10)
    wait_for(lambda: backup_packets(net) > before, "the traffic to be counted on the backup path", timeout=5)
    assert controller.process.poll() is not None, "the controller must still be down"


def backup_packets(net) -> int:
    """Packets counted by the tsdn flows of s6, a switch only the backup path crosses."""
    return sum(int(part.split("=")[1].rstrip(","))
               for line in tsdn_flows(net.topo.mn_name("s6")) for part in line.split() if part.startswith("n_packets="))
