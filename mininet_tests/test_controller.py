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

TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"
TOKEN = "rucio-token-0123456789abcdef"
SCALE = 0.001  # ring8's 100G links run at 100 Mbit/s
DEADLINE = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(condition, what: str, deadline: float = DEADLINE):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)  # polling interval of a condition with a deadline, not a synchronization sleep
    raise AssertionError(f"timed out after {deadline}s waiting for {what}")


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


@pytest.fixture
def controlled(network, tmp_path) -> Iterator[tuple[object, dict]]:
    """ring8 in Mininet, controlled by a `tsdn controller` process; yields (network, CLI env)."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [{"principal": "rucio", "role": "service", "token": TOKEN}]}))
    tokens.chmod(0o600)
    (tmp_path / "rucio.token").write_text(TOKEN)
    openflow = free_port()
    process = subprocess.Popen(
        [TSDN, "controller", "--topology", "ring8", "--listen-grpc", "127.0.0.1:0", "--state",
         str(tmp_path / "tsdn.db"), "--tokens", str(tokens), "--listen-openflow", f"127.0.0.1:{openflow}",
         "--emulation-scale", str(SCALE)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    log: list[str] = []

    def read() -> None:
        for line in process.stderr:
            log.append(line)
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        address = None
        end = time.monotonic() + DEADLINE
        while address is None and time.monotonic() < end:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                assert process.poll() is None, "controller exited:\n" + "".join(log)
                continue
            if line.startswith("tsdn controller listening on "):
                address = line.rsplit(" ", 1)[1].strip()
        assert address, "controller did not start:\n" + "".join(log)
        net = network("ring8", scale=SCALE, controller=("127.0.0.1", openflow))
        wait_for(lambda: connected_bridges() >= {f"s{i}" for i in range(1, 9)}, "all 8 switches to connect")
        env = {**os.environ, "TSDN_CONTROLLER": address, "TSDN_TOKEN_FILE": str(tmp_path / "rucio.token")}
        yield net, env
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()


def tsdn(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([TSDN, *args], capture_output=True, text=True, timeout=120, env=env)


def test_reservation_opens_the_path_and_release_closes_it(controlled):
    net, env = controlled
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
    wait_for(lambda: not any(tsdn_flows(f"s{i}") for i in range(1, 9)), "every tsdn flow to be removed")
    assert not pings(net, "dtn1", "dtn3")


def test_a_missing_switch_fails_the_reservation_and_leaves_nothing(controlled):
    net, env = controlled
    subprocess.run(["ovs-vsctl", "del-controller", net.topo.mn_name("s2")], check=True, timeout=10)
    wait_for(lambda: "s2" not in connected_bridges(), "s2 to disconnect")
    made = tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json")
    assert made.returncode == 1, made.stderr
    reservation = json.loads(made.stdout)
    assert reservation["state"] == "FAILED" and "s2" in reservation["state_reason"], reservation
    wait_for(lambda: not any(tsdn_flows(f"s{i}") for i in range(1, 9)), "no tsdn flow left anywhere")
    assert not pings(net, "dtn1", "dtn3")
