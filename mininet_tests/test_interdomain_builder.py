"""The builder's stand-in for a neighbouring domain, on real Open vSwitch (userspace datapath).

An interdomain port is cabled to a plain OVS bridge in standalone mode (the neighbour's WAN,
not tsdn's): it has no controller and forwards NORMAL, passing any VLAN. The remote DTNs beyond
the port are hosts on that bridge, with the file's addresses on untagged interfaces. Two of
them reach each other with frames tagged with a VLAN of the port's range while the tsdn switch,
without a controller, holds no flow at all.

This machine's kernel has no 802.1Q support (CONFIG_VLAN_8021Q is not set, and no bridge VLAN
filtering): `ip link add ... type vlan` fails with "Unknown device type". So the hosts send
tagged frames from a raw socket and read the tag a receiving raw socket reports (the kernel
moves a received tag into the packet's metadata, PACKET_AUXDATA).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

from sdn_app.core.topology import Topology

VLAN = 1785  # in the port's range

TWO_DOMAINS = """
name: twodomain
switches:
  - {name: edge, dpid: "0xd01", ports: ["1-4"]}
dtns:
  - {name: local-dtn, switch: edge, port: 1, ipv4: 10.77.0.1, mac: "02:77:00:00:00:01", nic_speed: 10G}
  - {name: far-dtn1, beyond: to-peer, stp: "urn:ogf:network:peer.test:topology:far", ipv4: 10.77.0.11,
     mac: "02:77:00:00:00:11", nic_speed: 10G}
  - {name: far-dtn2, beyond: to-peer, stp: "urn:ogf:network:peer.test:topology:far", ipv4: 10.77.0.12,
     mac: "02:77:00:00:00:12", nic_speed: 10G}
interdomain:
  - name: to-peer
    switch: edge
    port: 3
    capacity: 10G
    vlans: 1780-1799
    peer: {nsa: "urn:ogf:network:peer.test:nsa", stp: "urn:ogf:network:peer.test:topology:edge"}
"""


def sh(*args: str) -> str:
    """Run a command in the root namespace; fail the test with its output when it fails."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}"
    return done.stdout


def peer_of(intf: str) -> str:
    """The name of the other end of veth `intf` in the root namespace."""
    iflink = Path(f"/sys/class/net/{intf}/iflink").read_text().strip()
    for line in sh("ip", "-o", "link", "show").splitlines():
        index, name = line.split(":", 2)[:2]
        if index.strip() == iflink:
            return name.strip().split("@", 1)[0]
    return ""


def tc_rate_mbps(intf: str) -> float:
    """The HTB rate shaping `intf`, in Mbit/s."""
    match = re.search(r"\brate (\d+(?:\.\d+)?)([KMG]?)bit\b", sh("tc", "class", "show", "dev", intf))
    assert match, f"no HTB rate on {intf}"
    return float(match[1]) * {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}[match[2]]


# Sends `count` frames tagged `vlan` (ethertype 0x88b5, local experimental) with a marker payload.
SENDER = r"""
import socket, struct, sys
iface, dst_mac, src_mac, vlan, count = sys.argv[1:6]
mac = lambda m: bytes.fromhex(m.replace(":", ""))
frame = mac(dst_mac) + mac(src_mac) + struct.pack("!HHH", 0x8100, int(vlan), 0x88B5) + b"tsdn-interdomain" * 4
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
for _ in range(int(count)):
    s.send(frame)
print("sent")
"""

# Counts marker frames arriving on `iface` tagged `vlan` until 3 s pass without one; prints "ready" once bound.
LISTENER = r"""
import socket, struct, sys
iface, vlan = sys.argv[1], int(sys.argv[2])
SOL_PACKET, PACKET_AUXDATA, TP_STATUS_VLAN_VALID = 263, 8, 0x10
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
s.bind((iface, 0))
s.settimeout(3)
print("ready", flush=True)
count = 0
try:
    while True:
        data, ancillary, _, address = s.recvmsg(2048, socket.CMSG_SPACE(20))
        if address[2] == socket.PACKET_OUTGOING or b"tsdn-interdomain" not in data:
            continue
        tag = None
        for level, kind, value in ancillary:
            if level == SOL_PACKET and kind == PACKET_AUXDATA:
                status, _, _, _, _, tci = struct.unpack("IIIHHH", value[:18])
                if status & TP_STATUS_VLAN_VALID:
                    tag = tci & 0xFFF
        if tag is None and data[12:14] == b"\x81\x00":  # a tag the kernel left in the frame
            tag = struct.unpack("!H", data[14:16])[0] & 0xFFF
        if tag == vlan:
            count += 1
except OSError:
    pass
print("count", count)
"""


def tagged_frames_pass(net, src: str, dst: str, vlan: int, count: int = 20) -> int:
    """Send `count` frames tagged `vlan` from remote DTN `src`'s host to `dst`'s; return how many
    `dst` received with that tag."""
    sender, receiver = net.host(src), net.host(dst)
    listener = receiver.popen([sys.executable, "-c", LISTENER, receiver.defaultIntf().name, str(vlan)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "ready"
        out = sender.cmd(f"{sys.executable} -c '{SENDER}' {sender.defaultIntf().name} {receiver.MAC()} "
                         f"{sender.MAC()} {vlan} {count}")
        assert "sent" in out, out
        words = listener.communicate(timeout=20)[0].split()
    finally:
        if listener.poll() is None:
            listener.kill()
    assert words[-2:-1] == ["count"], words
    return int(words[-1])


def test_remote_dtns_reach_each_other_over_a_vlan_through_the_standalone_bridge(network, tmp_path):
    path = tmp_path / "twodomain.yaml"
    path.write_text(TWO_DOMAINS)
    topology = Topology.load(path)
    net = network(topology)
    topo = net.topo
    bridge = topo.mn_name("to-peer")
    assert net.wan_bridge("to-peer").name == bridge

    listing = json.loads(sh("ovs-vsctl", "--format=json", "--columns=name,fail_mode,datapath_type,controller",
                            "list", "Bridge", bridge))
    row = dict(zip(listing["headings"], listing["data"][0], strict=True))
    assert row["fail_mode"] == "standalone"
    assert row["datapath_type"] == "netdev"
    assert row["controller"] == ["set", []], "the neighbour's bridge must not be controlled by anyone"
    edge = topo.mn_name("edge")
    assert sh("ovs-vsctl", "get", "Bridge", edge, "fail_mode").strip() == "secure"

    # Wiring: edge port 3 to bridge port 1, the remote DTNs on bridge ports 2 and 3.
    shown = sh("ovs-ofctl", "show", bridge)
    ports = {int(n): name for n, name in re.findall(r"^\s*(\d+)\(([^)]+)\):", shown, re.MULTILINE)}
    assert ports == {1: f"{bridge}-eth1", 2: f"{bridge}-eth2", 3: f"{bridge}-eth3"}
    assert peer_of(topo.switch_intf("edge", 3)) == f"{bridge}-eth1"
    for number, dtn in ((2, "far-dtn1"), (3, "far-dtn2")):
        host = net.host(dtn)
        spec = topology.dtn(dtn)
        out = host.cmd(f"ip -o -4 addr show dev {host.defaultIntf().name}; "
                       f"cat /sys/class/net/{host.defaultIntf().name}/address")
        assert f"inet {spec.ipv4}/{topo.prefix_length} " in out and spec.mac in out, out
        port_index = Path(f"/sys/class/net/{bridge}-eth{number}/ifindex").read_text().strip()
        assert host.cmd(f"cat /sys/class/net/{host.defaultIntf().name}/iflink").strip() == port_index, \
            f"{dtn} not on bridge port {number}"
    # The cable is shaped to the port's capacity x scale, per direction.
    inward, outward = topology.access("to-peer")
    assert tc_rate_mbps(topo.switch_intf("edge", 3)) == pytest.approx(topo.mbps[outward.id], rel=0.01)
    assert tc_rate_mbps(f"{bridge}-eth1") == pytest.approx(topo.mbps[inward.id], rel=0.01)

    assert tagged_frames_pass(net, "far-dtn1", "far-dtn2", VLAN) == 20
    assert tagged_frames_pass(net, "far-dtn2", "far-dtn1", VLAN) == 20
    # No controller flow made that happen: the tsdn switch has none, the bridge only its own NORMAL.
    assert "actions=" not in sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", edge)
    flows = [line for line in sh("ovs-ofctl", "dump-flows", bridge).splitlines() if "actions=" in line]
    assert all(line.strip().endswith("actions=NORMAL") for line in flows), flows
    # The tagged frames went through the neighbour's bridge, learnt there on VLAN 1785.
    macs = sh("ovs-appctl", "fdb/show", bridge)
    assert re.search(rf"^\s*2\s+{VLAN}\s+{topology.dtn('far-dtn1').mac}", macs, re.MULTILINE), macs
    # And nothing reaches our own DTN without tsdn's flows (default deny on the tsdn switch).
    out = net.host("far-dtn1").cmd(f"ping -c 1 -W 1 {topology.dtn('local-dtn').ipv4}")
    assert " 100% packet loss" in out, out
