"""Label-switched paths on real Open vSwitch: ring8 in Mininet under a real `tsdn controller`
(labels, the default flow design, with a 300 s grace so a path left behind stays installed).

- A move onto a path whose label entries are in place changes the ingress switches' tables and
  nothing else: flow, group and meter dumps of all eight switches before and after, counters
  aside, differ on s1 and s3 only, each in its one steer entry.
- A DTN cannot inject labelled frames: frames tagged with the reservation's own label, sent by
  the source DTN and by a DTN on a transit switch, reach nobody (a raw socket at the peer
  counts them), while the same packets untagged get through.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from mininet_tests.conftest import ALL_RING8_SWITCHES, ring8_under_controller
from mininet_tests.controlled import DEADLINE, pings, tsdn
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

_VOLATILE = re.compile(r"(duration|n_packets|n_bytes|idle_age|hard_age|packet_count|byte_count|flow_count|"
                       r"ref_count|packet_in_count|byte_in_count)=[^,\s]*,?\s*")


def dump(bridge: str) -> set[str]:
    """The bridge's flows, groups and meters as OVS shows them, counters and ages removed."""
    out: set[str] = set()
    for what in ("dump-flows", "dump-groups", "dump-meters"):
        shown = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", what, bridge], capture_output=True, text=True,
                               check=True, timeout=10).stdout
        out |= {f"{what}: {_VOLATILE.sub('', line).strip()}" for line in shown.splitlines()
                if line.strip() and "reply" not in line}
    return out


def dumps(net) -> dict[str, set[str]]:
    return {s: dump(net.topo.mn_name(s)) for s in sorted(ALL_RING8_SWITCHES)}


@pytest.fixture
def graced(network, tmp_path):
    """ring8 under a controller whose unused paths stay 300 s; yields (network, CLI env)."""
    with ring8_under_controller(network, tmp_path, label_grace="300s") as (net, env, _):
        yield net, env


def run(env, *args) -> dict:
    done = tsdn(env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def settled(env, rid: str, route: list[str]) -> None:
    def there() -> bool:
        shown = run(env, "path", "show", rid)
        return shown["state"] == "ACTIVE" and shown["path"]["route"][1:-1] == route
    wait_for(there, f"{rid} to be ACTIVE on {route}", DEADLINE)


def test_a_move_onto_an_installed_path_changes_only_the_ingress_switches(graced):
    net, env = graced
    made = run(env, "path", "request", "dtn1", "dtn3", "-b", "10G")
    short, long_way = ["s1", "s2", "s3"], ["s1", "s8", "s7", "s6", "s5", "s4", "s3"]
    settled(env, made["id"], short)
    run(env, "path", "modify", made["id"], "--move", "--exclude", "s2")
    settled(env, made["id"], long_way)  # the short path's entries stay for their grace
    assert pings(net, "dtn1", "dtn3")
    before = dumps(net)
    run(env, "path", "modify", made["id"], "--move", "--include", "s2")
    settled(env, made["id"], short)
    after = dumps(net)
    changed = {s for s in before if before[s] != after[s]}
    assert changed == {"s1", "s3"}, {s: (before[s] ^ after[s]) for s in changed}
    for switch in changed:  # one steer entry (table 1) replaced by its new version, nothing else
        gone, new = before[switch] - after[switch], after[switch] - before[switch]
        assert len(gone) == len(new) == 1, (gone, new)
        assert all("table=1" in line for line in gone | new), (gone, new)
    assert pings(net, "dtn1", "dtn3")
    assert pings(net, "dtn3", "dtn1")


SENDER = r"""
import socket, struct, sys
iface, dst_mac, src_mac, src_ip, dst_ip, vlan = sys.argv[1:7]
mac = lambda m: bytes.fromhex(m.replace(":", ""))
ip = lambda a: socket.inet_aton(a)
payload = b"tsdn-label-probe" * 4
udp = struct.pack("!HHHH", 40000, 40001, 8 + len(payload), 0) + payload
header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, ip(src_ip), ip(dst_ip))
words = struct.unpack("!10H", header)
total = sum(words); total = (total & 0xFFFF) + (total >> 16); total = (total & 0xFFFF) + (total >> 16)
header = header[:10] + struct.pack("!H", ~total & 0xFFFF) + header[12:]
tag = struct.pack("!HH", 0x8100, int(vlan)) if int(vlan) else b""
frame = mac(dst_mac) + mac(src_mac) + tag + b"\x08\x00" + header + udp
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
for _ in range(20):
    s.send(frame)
"""


def received(listener) -> int:
    """Probe datagrams a `listen`er got."""
    return int(listener.communicate(timeout=10)[0].split()[-1])


def listen(net, dtn: str):
    """A UDP listener on `dtn` port 40001 counting probe datagrams until 3 s pass without one,
    bound when this returns."""
    code = ("import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(('0.0.0.0',40001));"
            "s.settimeout(3);n=0;print('ready',flush=True)\n"
            "try:\n while True:\n  s.recv(2048);n+=1\nexcept OSError:\n pass\nprint('count',n)")
    listener = net.host(dtn).popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert listener.stdout.readline().strip() == "ready"
    return listener


def send_probes(net, dtn: str, dst: str, vlan: int) -> None:
    host, peer = net.host(dtn), net.topology.dtns[dst]
    intf = net.host_intf(dtn)
    dst_mac = net.host(dst).MAC()
    out = host.cmd(f"{sys.executable} -c '{SENDER}' {intf} {dst_mac} {host.MAC()} "
                   f"{net.topology.dtns[dtn].ipv4} {peer.ipv4} {vlan}")
    assert "Traceback" not in out, out


def test_a_dtn_cannot_inject_labelled_frames(graced):
    net, env = graced
    made = run(env, "path", "request", "dtn1", "dtn3", "-b", "10G")
    settled(env, made["id"], ["s1", "s2", "s3"])
    flows = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", net.topo.mn_name("s2")],
                           capture_output=True, text=True, check=True).stdout
    labels = {int(v) & 0xFFF for v in re.findall(r"dl_vlan=(\d+)", flows)}
    assert labels, flows
    for label in sorted(labels):
        for sender in ("dtn1", "dtn2"):  # the reservation's own source, and a DTN on the transit switch
            listener = listen(net, "dtn3")
            send_probes(net, sender, "dtn3", label)
            assert received(listener) == 0, f"{sender}'s frames labelled {label} reached dtn3"
    listener = listen(net, "dtn3")
    send_probes(net, "dtn1", "dtn3", 0)
    assert received(listener) == 20  # the same probes untagged: the reservation carries them
