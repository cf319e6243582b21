"""The topology-file-to-Mininet builder on real Open vSwitch (userspace datapath).

What a network must look like: the file's dpids, port numbers and wiring, OVS in secure
fail mode speaking only OpenFlow 1.3 on the netdev datapath, hosts with the file's IP and
MAC and no transmit checksum offload, every direction shaped to capacity x scale. Then
traffic: nothing passes without flows (default deny), everything passes with `normal`
flows, and iperf3 measures the scaled bottleneck, not more.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mininet_tests.traffic import iperf3
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

from sdn_app.core.errors import InvalidArgument, NotFound
from sdn_app.core.topology import Topology
from topologies import builtin_topology
from topologies.mininet_builder import (
    DEFAULT_TOP_MBPS,
    MAX_INTF_NAME,
    TsdnTopo,
    default_scale,
    host_prefix_length,
    start_network,
)

# Mininet 2.3 compares OVS versions with distutils' StrictVersion, hundreds of times per network.

REPO = Path(__file__).resolve().parent.parent
BUILDER = REPO / "topologies" / "mininet_builder.py"

# Two switches, one asymmetric link, a DTN name too long for Mininet, addresses whose
# smallest covering prefix (/25) would make 192.168.7.127 its broadcast address.
PAIR_YAML = """
name: pair
switches:
  - {name: left-switch, dpid: "00:00:00:00:00:00:0a:01", ports: [1, 7]}
  - {name: right-switch, dpid: "0xa02", ports: ["1-9"]}
links:
  - {name: lr, a: left-switch, a_port: 7, b: right-switch, b_port: 9, capacity_ab: 40G, capacity_ba: 10G}
dtns:
  - {name: left-dtn-with-a-long-name, switch: left-switch, port: 1, ipv4: 192.168.7.1,
     mac: "02:aa:00:00:00:01", nic_speed: 25G}
  - {name: right-dtn, switch: right-switch, port: 1, ipv4: 192.168.7.127, mac: "02:aa:00:00:00:02",
     nic_speed: 100G}
"""


def sh(*args: str) -> str:
    """Run a command in the root namespace; fail the test with its output when it fails."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{' '.join(args)} failed ({done.returncode}): {done.stdout}{done.stderr}"
    return done.stdout


def wait_until(predicate, timeout: float, what: str):
    """Poll `predicate` until it returns something true; fail naming `what` at the deadline."""
    return wait_for(predicate, what, timeout, interval=0.1)


def tc_rate_mbps(tc_output: str) -> float:
    """Read the HTB rate out of `tc class show` output."""
    match = re.search(r"\brate (\d+(?:\.\d+)?)([KMG]?)bit\b", tc_output)
    assert match, f"no HTB rate in tc output: {tc_output!r}"
    factor = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}[match[2]]
    return float(match[1]) * factor


def leftovers() -> tuple[list[str], list[str]]:
    """Bridges and `*-eth<N>` interfaces present in the root namespace."""
    bridges = sh("ovs-vsctl", "list-br").split()
    links = re.findall(r"^\d+: ([\w.-]+-eth\d+)[@:]", sh("ip", "-o", "link", "show"), re.MULTILINE)
    return bridges, links


def root_links() -> dict[str, str | None]:
    """Root-namespace interface -> its veth peer's name when the peer is here too."""
    peers: dict[str, str | None] = {}
    for match in re.finditer(r"^\d+: ([^:@\s]+)(?:@([^:\s]+))?:", sh("ip", "-o", "link", "show"), re.MULTILINE):
        peers[match[1]] = match[2]
    return peers


def read_sys(path: str) -> str:
    return Path(path).read_text().strip()


def assert_network_matches_file(net) -> None:
    """Every switch, port, link, DTN and rate of the file, checked on the running system."""
    topology, topo = net.topology, net.topo
    listing = json.loads(sh("ovs-vsctl", "--format=json", "--columns=name,datapath_id,datapath_type,fail_mode,"
                            "protocols", "list", "Bridge"))
    bridges = {row[0]: dict(zip(listing["headings"], row, strict=True)) for row in listing["data"]}
    assert sorted(bridges) == sorted(topo.mn_name(s) for s in topology.switches)
    for switch in topology.spec.switches:
        bridge = topo.mn_name(switch.name)
        row = bridges[bridge]
        assert row["datapath_id"] == f"{switch.dpid:016x}", switch.name
        assert row["datapath_type"] == "netdev", switch.name
        assert row["fail_mode"] == "secure", switch.name
        assert row["protocols"] == "OpenFlow13", switch.name
        shown = sh("ovs-ofctl", "-O", "OpenFlow13", "show", bridge)
        assert re.search(rf"dpid:{switch.dpid:016x}\b", shown), shown
        ports = {int(n): name for n, name in re.findall(r"^\s*(\d+)\(([^)]+)\):", shown, re.MULTILINE)}
        expected = {link.a_port: topo.switch_intf(switch.name, link.a_port)
                    for link in topology.spec.links if link.a == switch.name}
        expected |= {link.b_port: topo.switch_intf(switch.name, link.b_port)
                     for link in topology.spec.links if link.b == switch.name}
        expected |= {dtn.port: topo.switch_intf(switch.name, dtn.port)
                     for dtn in topology.spec.dtns if dtn.switch == switch.name}
        assert ports == expected, f"OpenFlow ports of {switch.name}"

    peers = root_links()
    for link in topology.spec.links:
        a_intf, b_intf = topo.switch_intf(link.a, link.a_port), topo.switch_intf(link.b, link.b_port)
        assert peers.get(a_intf) == b_intf and peers.get(b_intf) == a_intf, f"wiring of link {link.label}"
        forward, backward = topology.link_directions[link.label]
        assert tc_rate_mbps(sh("tc", "class", "show", "dev", a_intf)) == pytest.approx(topo.mbps[forward.id], rel=0.01)
        assert tc_rate_mbps(sh("tc", "class", "show", "dev", b_intf)) == pytest.approx(topo.mbps[backward.id], rel=0.01)

    for dtn in topology.spec.dtns:
        host, intf = net.host(dtn.name), net.host_intf(dtn.name)
        switch_intf = topo.switch_intf(dtn.switch, dtn.port)
        out = host.cmd(f"ip -o -4 addr show dev {intf}; cat /sys/class/net/{intf}/address "
                       f"/sys/class/net/{intf}/ifindex /sys/class/net/{intf}/iflink; "
                       f"ethtool -k {intf} | grep '^tx-checksumming:'; tc class show dev {intf}")
        assert f"inet {dtn.ipv4}/{topo.prefix_length} " in out, f"address of {dtn.name}: {out}"
        lines = out.splitlines()
        mac, ifindex, iflink = lines[1].strip(), lines[2].strip(), lines[3].strip()
        assert mac == dtn.mac, dtn.name
        assert iflink == read_sys(f"/sys/class/net/{switch_intf}/ifindex"), f"{dtn.name} is not wired to {switch_intf}"
        assert ifindex == read_sys(f"/sys/class/net/{switch_intf}/iflink"), f"{dtn.name} is not wired to {switch_intf}"
        assert "tx-checksumming: off" in out, f"transmit checksum offload still on for {dtn.name}: {out}"
        up, down = topology.access(dtn.name)
        assert tc_rate_mbps(out) == pytest.approx(topo.mbps[up.id], rel=0.01), dtn.name
        assert tc_rate_mbps(sh("tc", "class", "show", "dev", switch_intf)) == pytest.approx(
            topo.mbps[down.id], rel=0.01), dtn.name


def add_normal_flows_without_loops(net) -> None:
    """`actions=normal` on every ring8 switch; link s8-s1 drops everything so floods cannot loop."""
    for switch in net.topology.switches:
        sh("ovs-ofctl", "-O", "OpenFlow13", "add-flow", net.topo.mn_name(switch), "priority=1,actions=normal")
    link = net.topology.links["s8-s1"]
    for end, port in ((link.a, link.a_port), (link.b, link.b_port)):
        flow = f"priority=10,in_port={port},actions=drop"
        sh("ovs-ofctl", "-O", "OpenFlow13", "add-flow", net.topo.mn_name(end), flow)


# --- the builder's decisions, no network needed -------------------------------------------------


def test_mininet_names_are_short_two_way_and_in_file_order():
    topo = TsdnTopo("sc16")
    spec = topo.topology.spec
    assert [topo.mn_name(s.name) for s in spec.switches] == [f"s{i}" for i in range(1, len(spec.switches) + 1)]
    assert [topo.mn_name(d.name) for d in spec.dtns] == [f"h{i}" for i in range(1, len(spec.dtns) + 1)]
    assert topo.mn_name("caltech-a") == "s1" and topo.topo_name("s1") == "caltech-a"
    assert topo.mn_name("caltech-a-dtn1") == "h1" and topo.topo_name("h1") == "caltech-a-dtn1"
    assert all(topo.topo_name(mn) == name for name, mn in topo.mininet_names().items())
    assert TsdnTopo("sc16").mininet_names() == topo.mininet_names()
    names = [topo.host_intf(d.name) for d in spec.dtns]
    names += [topo.switch_intf(link.a, link.a_port) for link in spec.links]
    names += [topo.switch_intf(d.switch, d.port) for d in spec.dtns]
    assert max(len(n) for n in names) <= MAX_INTF_NAME
    with pytest.raises(NotFound, match="nowhere"):
        topo.mn_name("nowhere")
    with pytest.raises(NotFound, match="s99"):
        topo.topo_name("s99")


def test_default_scale_puts_the_largest_capacity_at_the_default_rate():
    ring8, sc16 = Topology.load(builtin_topology("ring8")), Topology.load(builtin_topology("sc16"))
    assert default_scale(ring8) == pytest.approx(DEFAULT_TOP_MBPS / 100e3)
    assert default_scale(sc16) == pytest.approx(DEFAULT_TOP_MBPS / 1e6)
    topo = TsdnTopo(sc16)
    assert topo.scale == default_scale(sc16)
    assert max(topo.mbps.values()) == pytest.approx(DEFAULT_TOP_MBPS)
    assert topo.mbps[sc16.access("dell-dtn2")[0].id] == pytest.approx(25e9 * topo.scale / 1e6)


def test_hosts_share_the_smallest_prefix_that_covers_every_dtn(tmp_path):
    assert host_prefix_length(Topology.load(builtin_topology("ring8"))) == 24
    assert host_prefix_length(Topology.load(builtin_topology("sc16"))) == 19
    pair = tmp_path / "pair.yaml"
    pair.write_text(PAIR_YAML)
    assert host_prefix_length(Topology.load(pair)) == 24  # /25 would make .127 a broadcast address


def test_a_port_open_vswitch_cannot_number_is_refused(tmp_path):
    path = tmp_path / "bigport.yaml"
    path.write_text(PAIR_YAML.replace('ports: ["1-9"]', "ports: [1, 70000]").replace("b_port: 9", "b_port: 70000"))
    with pytest.raises(InvalidArgument, match=r"lr: port 70000 of switch right-switch"):
        TsdnTopo(path)


# --- running networks ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ring8", "sc16"])
def test_network_matches_the_file_at_the_default_scale(network, name):
    net = network(name)
    assert net.scale == pytest.approx(default_scale(net.topology))
    assert sh("ovs-vsctl", "get-controller", net.topo.mn_name(net.topology.spec.switches[0].name)).strip() == ""
    assert_network_matches_file(net)


def test_default_deny_without_a_controller(network):
    net = network("ring8")
    for switch in net.topology.switches:
        flows = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", net.topo.mn_name(switch))
        assert "actions=" not in flows, f"{switch} has flows: {flows}"
    out, err, code = net.host("dtn1").pexec("ping", "-c", "3", "-i", "0.2", "-W", "1", net.topology.dtn("dtn2").ipv4)
    assert code != 0 and " 0 received" in out, f"ping got through an empty fabric: {out}{err}"


def test_normal_flows_carry_ping_and_iperf3_at_the_scaled_bottleneck(network, rate_scale):
    scale = 0.5 * rate_scale  # 100G -> 50 Mbit/s at 0.001: half of what the session measured carried
    net = network("ring8", scale=scale)
    add_normal_flows_without_loops(net)
    client, server = net.host("dtn1"), net.host("dtn3")
    server_ip = net.topology.dtn("dtn3").ipv4
    wait_until(lambda: client.pexec("ping", "-c", "1", "-W", "1", server_ip)[2] == 0, 15, "dtn1 to ping dtn3")

    path = [net.topology.access("dtn1")[0], net.topology.link_directions["s1-s2"][0],
            net.topology.link_directions["s2-s3"][0], net.topology.access("dtn3")[1]]
    bottleneck = min(net.topo.mbps[d.id] for d in path)
    assert bottleneck == pytest.approx(100e9 * scale / 1e6)

    received = iperf3(client, server, server_ip)
    print(f"iperf3 dtn1 -> dtn3 through 3 switches: {received:.1f} Mbit/s, bottleneck {bottleneck:g} Mbit/s")
    assert received <= 1.1 * bottleneck, f"{received:.1f} Mbit/s is more than the {bottleneck:g} Mbit/s shaped"
    assert received >= 0.5 * bottleneck, f"{received:.1f} Mbit/s is far below the {bottleneck:g} Mbit/s shaped"


@pytest.mark.parametrize(("scale", "rate"), [(0.02, "2000 Mbit/s"), (0, "0 Mbit/s")])
def test_a_scale_outside_tclink_range_is_refused_naming_the_link(network, scale, rate):
    with pytest.raises(InvalidArgument, match=rf"link s1-s2 \(s1:1->s2:2\): 100G x scale .* = {rate}, outside"):
        network("ring8", scale=scale)
    assert leftovers() == ([], [])


def test_asymmetric_link_rates_and_cleanup_after_an_error(tmp_path, clean_mininet):
    path = tmp_path / "pair.yaml"
    path.write_text(PAIR_YAML)
    controller = ("127.0.0.1", 6653)  # nothing listens there: the switches keep retrying, tables stay empty
    boom = pytest.raises(RuntimeError, match="raised inside the network")
    with boom, start_network(path, controller=controller) as net:
        assert net.scale == pytest.approx(DEFAULT_TOP_MBPS / 100e3)  # the 100G NIC is the largest capacity
        assert_network_matches_file(net)
        # 40G one way and 10G back, each shaped on its own sending side
        assert tc_rate_mbps(sh("tc", "class", "show", "dev", net.switch_intf("left-switch", 7))) == pytest.approx(80)
        assert tc_rate_mbps(sh("tc", "class", "show", "dev", net.switch_intf("right-switch", 9))) == pytest.approx(20)
        assert net.switch("left-switch").dpid == "0000000000000a01"
        assert net.host("left-dtn-with-a-long-name").name == "h1"
        for bridge in ("s1", "s2"):
            assert sh("ovs-vsctl", "get-controller", bridge).split() == ["tcp:127.0.0.1:6653"]
        assert leftovers()[0] == ["s1", "s2"]
        raise RuntimeError("raised inside the network")
    assert leftovers() == ([], [])


def test_mn_custom_builds_the_file(tmp_path, clean_mininet):
    post = tmp_path / "post.cli"
    post.write_text("sh ovs-vsctl --columns=name,datapath_id,datapath_type,fail_mode,protocols list Bridge s3\n"
                    "sh tc class show dev s3-eth1\n"
                    "h3 ip -o -4 addr show dev h3-eth0\n"
                    "h3 cat /sys/class/net/h3-eth0/address\n"
                    "h3 ethtool -k h3-eth0\n")
    done = subprocess.run(
        [sys.executable, shutil.which("mn"), "--custom", str(BUILDER), "--topo", "tsdn,ring8,0.001",
         "--switch", "ovs,datapath=user,protocols=OpenFlow13", "--controller", "remote,ip=127.0.0.1,port=6653",
         "--test", "none", "--post", str(post)],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Caught exception" not in out, out
    assert re.search(r'datapath_id\s*: "0000000000000003"', out), out
    assert re.search(r"datapath_type\s*: netdev", out) and re.search(r"fail_mode\s*: secure", out), out
    assert re.search(r"protocols\s*: \[OpenFlow13\]", out), out
    assert "rate 100Mbit" in out, out  # 100G x 0.001
    assert "inet 10.0.0.3/24" in out and "02:00:00:00:00:03" in out and "tx-checksumming: off" in out, out
    assert leftovers() == ([], [])
