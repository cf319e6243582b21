"""OpenFlow MASTER and SLAVE on real Open vSwitch: two controllers, every switch connected to both.

Two fabrics in two processes (`mininet_tests/fabric_peer.py`), A and B, on two loopback ports;
a line of two switches in Mininet pointed at both. What an engineer would see:
- the switches hold one connection per controller, each reconnecting within about a second;
- A claims MASTER with generation 1 and B SLAVE with it: A's reservation lands on the
  switches, B's write is refused by B itself and the tables do not change;
- B claims MASTER with generation 2: the switches demote A (A logs it at ERROR, naming the
  switch and the generations), A's own write is refused by A, and a write forced past A's
  guard (a deposed leader that never heard) is refused by the switches themselves
  (OFPBRC_IS_SLAVE), tables unchanged; A claiming MASTER again with generation 1 is answered
  stale; A's connections dropped and made again come back as SLAVE, still fenced; B writes;
- a switch that connects after the claims gets the role before anything writes to it: the
  master's `on_switch_connected` sees the role confirmed, the slave's is never called.
- a leader paused (SIGSTOP) while the other takes over wakes up (SIGCONT) fenced: its write
  does not land, and it learns from the switches that it was deposed.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.report import free_port
from mininet_tests.controlled import tsdn_flows
from mininet_tests.fabric_peer import FabricPeer
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

PAIR = """\
name: pair
description: two switches in a line, one DTN on each
switches:
  - {name: s1, dpid: 0x71, ports: ["1-2"]}
  - {name: s2, dpid: 0x72, ports: ["1-2"]}
links:
  - {name: s1-s2, a: s1, a_port: 1, b: s2, b_port: 1, capacity: 100G, kind: core}
dtns:
  - {name: dtn1, switch: s1, port: 2, ipv4: 10.0.0.1, mac: "02:00:00:00:00:01", nic_speed: 100G, numa_node: 0}
  - {name: dtn2, switch: s2, port: 2, ipv4: 10.0.0.2, mac: "02:00:00:00:00:02", nic_speed: 100G, numa_node: 0}
"""
SWITCHES = ("s1", "s2")
G = 10**9
FIRST = {"rid": "01" * 16, "src": "dtn1", "dst": "dtn2", "bandwidth": 5 * G // 2}
SECOND = {"rid": "02" * 16, "src": "dtn2", "dst": "dtn1", "bandwidth": 1 * G}
NOT_MASTER = "this controller is not the OpenFlow master (role slave, generation {})"


@pytest.fixture
def pair(tmp_path) -> Path:
    path = tmp_path / "pair.yaml"
    path.write_text(PAIR)
    return path


@pytest.fixture
def peers(pair) -> Iterator[tuple[FabricPeer, FabricPeer]]:
    """Controllers A and B, each a fabric process of its own on a free loopback port."""
    started: list[FabricPeer] = []
    try:
        for _ in range(2):
            started.append(FabricPeer(pair, free_port()))
        yield started[0], started[1]
    finally:
        for peer in started:
            peer.stop()


def ofctl(*args: str) -> str:
    done = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"ovs-ofctl {' '.join(args)} failed: {done.stdout}{done.stderr}"
    return done.stdout


def tables(net) -> dict[str, tuple[list[str], list[str]]]:
    """Per switch: its tsdn flows (counters and age left out) and its meters, as ovs-ofctl shows them."""
    out = {}
    for name in SWITCHES:
        bridge = net.switch(name).name
        flows = sorted(re.sub(r"(duration|n_packets|n_bytes)=[^,]+, ", "", line).strip() for line in tsdn_flows(bridge))
        dump = " ".join(ofctl("dump-meters", bridge).split())  # one meter spans two lines
        meters = sorted(f"meter={m.strip()}" for m in dump.split("meter=")[1:])
        out[name] = (flows, meters)
    return out


def cookies(net) -> dict[str, set[str]]:
    return {name: set(re.findall(r"cookie=(0x[0-9a-f]+)", "\n".join(tables(net)[name][0]))) for name in SWITCHES}


def controller_records(net) -> dict[str, list[dict]]:
    """Per switch: the Open vSwitch Controller records of its bridge (target, max_backoff, inactivity_probe)."""
    out = {}
    for name in SWITCHES:
        ids = subprocess.run(["ovs-vsctl", "get", "Bridge", net.switch(name).name, "controller"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip().strip("[]").split(", ")
        listing = json.loads(subprocess.run(
            ["ovs-vsctl", "--format=json", "--columns=target,max_backoff,inactivity_probe", "list", "Controller", *ids],
            capture_output=True, text=True, timeout=10, check=True).stdout)
        out[name] = [dict(zip(listing["headings"], row, strict=True)) for row in listing["data"]]
    return out


def wait_role(peer: FabricPeer, role: str, generation: int, what: str, timeout: float = 5.0) -> dict:
    """Wait until `peer` holds `role` on every switch, confirmed at `generation`; its state."""
    want = {name: [role, generation] for name in SWITCHES}
    return wait_for(lambda: (s := peer.call("state"))["switch_roles"] == want and s, what, timeout, interval=0.1)


def start_pair(pair: Path, *peers: FabricPeer):
    from topologies.mininet_builder import start_network

    return start_network(pair, controllers=[("127.0.0.1", p.port) for p in peers])


def test_one_master_writes_and_a_deposed_master_is_fenced_by_the_switches(clean_mininet, pair, peers):
    a, b = peers
    with start_pair(pair, a, b) as net:
        records = controller_records(net)
        for name in SWITCHES:
            assert sorted(r["target"] for r in records[name]) == sorted(f"tcp:127.0.0.1:{p.port}" for p in peers), \
                records[name]
            assert all(r["max_backoff"] == 1000 and r["inactivity_probe"] == 5000 for r in records[name]), records[name]
        for peer in peers:
            assert peer.call("connected")["ok"], f"not every switch connected to the controller on {peer.port}"

        # A leads (generation 1), B follows.
        assert a.call("claim", leader=True, generation=1)["results"] == {"s1": None, "s2": None}
        assert b.call("claim", leader=False, generation=1)["results"] == {"s1": None, "s2": None}
        assert (a.call("state")["role"], b.call("state")["role"]) == ("master", "slave")

        installed = a.call("install", **FIRST)
        assert installed["reason"] is None
        first = f"{installed['cookie']:#x}"
        assert cookies(net) == {"s1": {first}, "s2": {first}}
        assert any("rate=5000" in meter for meter in tables(net)["s1"][1]), tables(net)["s1"]
        before = tables(net)

        refused = b.call("install", **SECOND)["reason"]
        assert refused == NOT_MASTER.format(1), refused
        assert b.call("reconcile", switch="s1")["reason"] == f"s1: {NOT_MASTER.format(1)}"
        assert tables(net) == before, "a slave's refused write changed a switch"

        # B takes over with generation 2: the switches demote A, and A hears it.
        assert b.call("claim", leader=True, generation=2)["results"] == {"s1": None, "s2": None}
        wait_for(lambda: a.call("state")["role"] == "slave", "A to hear that the switches demoted it", 5, 0.1)
        errors = a.logged("ERROR")
        assert any(re.search(r"switch s[12] \(dpid 0x7[12]\): demoted this controller to SLAVE: another controller "
                             r"claimed MASTER with generation 2.*MASTER claimed with generation 1\) was deposed", line)
                   for line in errors), "".join(errors) or "".join(a.log)

        own = a.call("install", **SECOND)["reason"]
        assert own.startswith(NOT_MASTER.format(1) + ": switch s"), own
        forced = a.call("install", force=True, **SECOND)["reason"]
        assert re.match(r"switch s[12] refused a (meter|flow): it considers this controller a SLAVE: another "
                        r"controller took the OpenFlow MASTER role \(OFPET_BAD_REQUEST/OFPBRC_IS_SLAVE\)", forced), \
            forced
        assert tables(net) == before, "the switches took a write from a deposed master"

        stale = a.call("claim", leader=True, generation=1)["results"]
        assert stale == {name: "stale generation 1: the switch has seen a newer master (generation 2)"
                         for name in SWITCHES}, stale
        assert any("refused OpenFlow MASTER with generation 1 as stale" in line for line in a.logged("ERROR"))
        wait_role(a, "slave", 2, "A to be SLAVE at generation 2 on every switch after its stale claim")

        # A's connections drop and come back (as after a pause): SLAVE again, at once, still fenced.
        assert a.call("drop")["dropped"] == 2
        wait_role(a, "slave", 2, "A's switches to reconnect and confirm it SLAVE at generation 2", timeout=5)
        # the roles A knows may still be the dropped connections' for a moment: a write tried before the
        # switches are back is refused by A itself ("not connected") and changes nothing, so try until
        # they answer
        def forced_write() -> str | None:
            reason = a.call("install", force=True, **SECOND)["reason"]
            return None if reason and "not connected" in reason else reason or "written: the switches took it"
        forced = wait_for(forced_write, "A's switches to be connected again", 5, 0.1)
        assert "OFPBRC_IS_SLAVE" in forced, forced
        assert tables(net) == before, "the switches took a write from a deposed master after it reconnected"

        # The new master writes.
        taken = b.call("install", **SECOND)
        assert taken["reason"] is None
        second = f"{taken['cookie']:#x}"
        assert cookies(net) == {"s1": {first, second}, "s2": {first, second}}


def test_switches_connecting_after_the_claims_get_the_role_before_anything_is_written(clean_mininet, pair, peers):
    a, b = peers
    waiting = {name: f"switch {name} (dpid {dpid}) not connected: {{}} is claimed when it connects"
               for name, dpid in (("s1", "0x71"), ("s2", "0x72"))}
    assert a.call("claim", leader=True, generation=7)["results"] == {n: w.format("MASTER") for n, w in waiting.items()}
    assert b.call("claim", leader=False, generation=7)["results"] == {n: w.format("SLAVE") for n, w in waiting.items()}

    with start_pair(pair, a, b) as net:
        wait_role(a, "master", 7, "the switches to confirm A as MASTER", timeout=15)
        wait_role(b, "slave", 7, "the switches to confirm B as SLAVE", timeout=15)
        # A was told of each switch only once the switch had confirmed it MASTER; B, a slave, never.
        told = wait_for(lambda: len(told := a.call("state")["told"]) >= 2 and told,
                        "A's on_switch_connected for both switches", 5, 0.1)
        assert sorted(told) == [["s1", ["master", 7]], ["s2", ["master", 7]]], told
        assert b.call("state")["told"] == []

        # The base flows come from the master once it is confirmed: default deny, ARP and LLDP to the controller.
        for name in SWITCHES:
            bridge = net.switch(name).name
            wait_for(lambda bridge=bridge: {"priority=0 actions=drop", "priority=1,arp actions=CONTROLLER:65535"}
                     <= {re.sub(r"cookie=\S+ duration=\S+ table=0, n_packets=\d+, n_bytes=\d+, ", "", line.strip())
                         for line in ofctl("dump-flows", bridge).splitlines()},
                     f"the base flows on {name}", 5, 0.1)
        assert a.call("install", **FIRST)["reason"] is None
        assert b.call("install", **FIRST)["reason"] == NOT_MASTER.format(7)


def test_a_leader_paused_while_another_takes_over_wakes_up_fenced(clean_mininet, pair, peers):
    a, b = peers
    with start_pair(pair, a, b) as net:
        for peer in peers:
            assert peer.call("connected")["ok"]
        assert a.call("claim", leader=True, generation=1)["results"] == {"s1": None, "s2": None}
        assert b.call("claim", leader=False, generation=1)["results"] == {"s1": None, "s2": None}
        assert a.call("install", **FIRST)["reason"] is None
        before = tables(net)

        a.process.send_signal(signal.SIGSTOP)
        try:
            assert b.call("claim", leader=True, generation=2)["results"] == {"s1": None, "s2": None}
        finally:
            a.process.send_signal(signal.SIGCONT)

        # Whether A reads the switches' news or its write first, the write does not land.
        reason = a.call("install", **SECOND)["reason"]
        assert reason.startswith(NOT_MASTER.format(1)) or "OFPBRC_IS_SLAVE" in reason, reason
        wait_for(lambda: a.call("state")["role"] == "slave", "A to learn it was demoted", 5, 0.1)
        assert any("generation 2" in line and "deposed" in line for line in a.logged("ERROR")), "".join(a.log)
        assert tables(net) == before, "a leader that woke up after losing MASTER changed a switch"
        assert b.call("install", **SECOND)["reason"] is None
