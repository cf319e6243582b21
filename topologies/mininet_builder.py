"""Build a Mininet network from a tsdn topology file.

Every switch of the file becomes an Open vSwitch bridge on the userspace datapath
(`datapath_type=netdev`: the kernel here has no openvswitch module) with the file's dpid,
OpenFlow 1.3 only and `fail_mode=secure` (default deny; flows stay when the controller
dies). Every link joins the file's port numbers; every DTN becomes a host with the file's
IPv4 address and MAC, wired to its switch port. Links and DTN NICs are shaped with
`TCLink` (HTB), per direction, to the nominal capacity times the emulation scale.

Names. Linux interface names have at most 15 characters and Mininet names them
`<node>-eth<port>`, so `caltech-a-dtn1` cannot be a Mininet node. Switches become `s1`,
`s2`, ... and DTNs `h1`, `h2`, ... in file order; `TsdnTopo.mn_name("caltech-a")` and
`TsdnTopo.topo_name("s1")` translate both ways. A DTN's interface is `h<i>-eth0`, a switch
port `s<i>-eth<port>` (OpenFlow port number = the file's port number).

Scale. A 1 Tbit/s link cannot run on 2 cores, and Mininet's TCLink shapes only 0..1000
Mbit/s (it ignores larger values with a mere log line). The emulated rate of every link
direction and NIC is `nominal bit/s x scale`; the builder refuses, naming the link, any
direction that lands outside (0, 1000] Mbit/s. `default_scale(topology)` maps the largest
capacity (links and NICs) to `DEFAULT_TOP_MBPS` = 200 Mbit/s: userspace OVS on 2 cores
forwards a few hundred Mbit/s in all (ENVIRONMENT.md: about 220 Mbit/s through 3
switches), so at 200 Mbit/s the shaping, not the CPU, is the bottleneck of a single
transfer. In emulation the controller and Mininet share that one scale: TCLinks and
meters carry nominal rate x scale, while the API, the CLI and the map speak nominal
rates (`RunningNetwork.scale` is the number to give the controller's
`--emulation-scale`).

Addresses. The file gives addresses, not a prefix: every DTN gets the longest prefix (at
most /24) that covers all DTN addresses, widened while a DTN address would be the
prefix's broadcast address. ring8 gets 10.0.0.0/24, sc16 10.16.0.0/19: all DTNs share one
L2/L3 segment and reach each other by ARP through the fabric.

Domains. Each interdomain port is cabled (a TCLink shaped to the port's capacity, per direction)
to port 1 of a bridge of its own, `w1`, `w2`, ... in file order: a plain Open vSwitch bridge on the
userspace datapath in standalone mode (`fail_mode=standalone`, no controller, so its one flow is
NORMAL: MAC learning that passes any VLAN), standing in for the neighbour's WAN; tsdn does not
control it. Each remote DTN beyond that port is a host on that bridge (ports 2, 3, ... in file
order), with the file's address and MAC on an untagged, unshaped interface `h<i>-eth0`: tagging
is the test's business (a VLAN subinterface, with its transmit checksum offload off too, where the
kernel has 802.1Q; this machine's has none, so mininet_tests/test_interdomain_builder.py sends
tagged frames from raw sockets). `TsdnTopo.mn_name("to-rnp")` names the bridge of port to-rnp.

Checksums. With the userspace datapath, TCP stalls unless transmit checksum offload is off
on every host interface: the DTN side of each access link is configured with `txo=False`
and `start_network` runs `ethtool -K <intf> tx off` again after start.

Control frames. Switches at a show send the controller's LLDP from their CPU ahead of data, so
a link full of other tenants' traffic still carries it. Here every shaped switch-to-switch
interface gives LLDP (ethertype 0x88cc) an HTB class of its own beside the link's (`LLDP_RATE`,
about a hundred times what LLDP sends); without it, a link congested by cross traffic drops the
LLDP frames with the data (seen: tbit-tcp declared down after 3.5 s without LLDP while
congested on sc16).

Cross traffic. `cross_traffic=[switch, ...]` attaches to each named switch a host that is no
DTN, for traffic the controller does not own (a show floor's other tenants): `x<i>` on
switch `s<i>`, wired to port `CROSS_PORT` (65000; a topology declaring that port is refused),
with an address in `CROSS_NETWORK` (198.18.0.0/15, the range RFC 2544 sets aside for
benchmarking; a DTN address inside it is refused), a locally administered MAC, transmit
checksum offload off, and static ARP entries for every other cross host (nothing answers ARP
for them: the controller's default deny drops whatever no flow claims). Their access links
are not shaped. They send jumbo frames (`CROSS_MTU`, as show-floor traffic does): their
interfaces, and both ends of every link between two switches with a cross host, get MTU 9000,
so the userspace switches forward a sixth of the packets for the same load (at 1500 bytes,
sc16's 900G of cross traffic alone took most of what the switches forward on 2 cores). DTN
interfaces keep MTU 1500. Nothing forwards their packets until flows outside tsdn's cookie space say so
(`tsdn.demo.cross_traffic`).

As a library (root, Open vSwitch running)::

    from topologies.mininet_builder import start_network

    with start_network("ring8", controller=("127.0.0.1", 6653)) as net:
        print(net.host("dtn1").cmd("ping -c 1 10.0.0.2"))

With `mn` (the venv's python sees both mininet and tsdn; the YAML path, or a built-in name,
then an optional scale, positional or `scale=`)::

    sudo .venv/bin/python /usr/bin/mn --custom topologies/mininet_builder.py \\
        --topo tsdn,topologies/ring8.yaml \\
        --switch ovs,datapath=user,protocols=OpenFlow13 \\
        --controller remote,ip=127.0.0.1,port=6653

Several controllers (high availability: every switch connects to each, one takes the
OpenFlow MASTER role): `start_network(..., controllers=[("127.0.0.1", 6653), ("127.0.0.1",
6633)])`, or one `--controller` option per controller: `mn` appends them all and points
every switch at each::

    sudo .venv/bin/python /usr/bin/mn --custom topologies/mininet_builder.py \\
        --topo tsdn,topologies/ring8.yaml \\
        --controller remote,ip=127.0.0.1,port=6653 \\
        --controller remote,ip=127.0.0.1,port=6633

Keep the controllers off ports 6654 and up: `mn` (not `start_network`) also makes every
switch listen for `ovs-ofctl` on its own port, from 6654 up, one per switch (`--listenport`).
Each switch has one Open vSwitch Controller record per controller, with `max_backoff`
`MAX_BACKOFF_MS` (a controller that comes up, or back, is connected within about a second;
Open vSwitch's own default backs off to 8 s) and `inactivity_probe` `INACTIVITY_PROBE_MS`
(Open vSwitch's default, set explicitly: an idle connection is probed after 5 s and dropped
5 s later, so a controller paused longer than that reconnects when it wakes up, with a new
connection whose role is EQUAL until it claims one).

The switches are OVS userspace bridges whatever `--switch` says (the topology sets their
class and options), and links are TCLinks whatever `--link` says. Add `--test none` to
build, start and stop the network (ring8: about 2 s, sc16: about 6 s). Every other `--test`
(pingall, iperf) first waits until every switch has connected to the controller, so it
needs the controller running; without one it waits forever. Without a controller the
tables stay empty, because fail_mode is secure and nothing is forwarded (default deny).
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from mininet.link import TCLink
from mininet.net import Mininet
from mininet.node import Host, OVSBridge, OVSSwitch, RemoteController
from mininet.topo import Topo

from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NotFound
from sdn_app.core.topology import Topology
from sdn_app.core.units import format_bandwidth
from topologies import open_vswitch, resolve_topology

DEFAULT_TOP_MBPS = 200
"""Emulated rate of the largest capacity of a topology under `default_scale`."""

MAX_TCLINK_MBPS = 1000
"""Mininet's TCIntf.bwParamMax: TCLink ignores larger `bw` values."""

MIN_TCLINK_MBPS = 0.001
"""Below 1 kbit/s, tc is handed a rate that prints as 0 ("%fMbit")."""

MAX_OFPORT = 65279
"""The highest port number Open vSwitch accepts in `ofport_request`."""

MAX_INTF_NAME = 15
"""Linux IFNAMSIZ - 1."""

OVS_START_HINT = "python -m topologies.open_vswitch (as root; scripts/bootstrap.sh runs it)"

CROSS_PORT = 65000
"""The switch port of a cross-traffic host (no topology port may use it)."""

CROSS_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
"""Addresses of the cross-traffic hosts (RFC 2544's benchmarking range; no DTN may use it)."""

CROSS_MTU = 9000
"""MTU of the cross-traffic hosts and of the links they can load."""

LLDP_RATE = "100kbit"
"""Rate of the HTB class that carries LLDP on each switch-to-switch interface."""

MAX_BACKOFF_MS = 1000
"""Longest wait between a switch's attempts to connect to a controller (OVS `max_backoff`)."""

INACTIVITY_PROBE_MS = 5000
"""Idle time before a switch probes a controller connection, and drops it after as long again."""


class TsdnSwitch(OVSSwitch):
    """Mininet's OVSSwitch whose Controller records also get `INACTIVITY_PROBE_MS` (Mininet sets only
    `max_backoff`, from `reconnectms`)."""

    def start(self, controllers) -> None:
        """Create the bridge and its controller records; then tune the records unless batched."""
        super().start(controllers)
        if not self.batch:
            tune_controllers([self.name])

    @classmethod
    def batchStartup(cls, switches, run=None):
        """Start `switches` in one ovs-vsctl call (Mininet's batch startup); then tune their records."""
        started = super().batchStartup(switches) if run is None else super().batchStartup(switches, run)
        tune_controllers([switch.name for switch in started])
        return started


def tune_controllers(bridges: list[str]) -> None:
    """Set `inactivity_probe` and `max_backoff` on every Controller record of `bridges` (two ovs-vsctl calls)."""
    if not bridges:
        return
    get = ["ovs-vsctl", "--timeout=10"]
    for bridge in bridges:
        get += ["--", "get", "Bridge", bridge, "controller"]
    listed = subprocess.run(get, capture_output=True, text=True, timeout=60)
    if listed.returncode != 0:
        raise RuntimeError(f"listing the controllers of {', '.join(bridges)} failed: {listed.stderr.strip()}")
    command = ["ovs-vsctl", "--timeout=10"]
    for line in listed.stdout.splitlines():  # one "[uuid, uuid]" per bridge
        for uuid in filter(None, (u.strip() for u in line.strip().strip("[]").split(","))):
            command += ["--", "set", "Controller", uuid, f"inactivity_probe={INACTIVITY_PROBE_MS}",
                        f"max_backoff={MAX_BACKOFF_MS}"]
    if len(command) == 2:
        return
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"setting the controllers of {', '.join(bridges)} failed: {done.stderr.strip()}")


def _load(topology: Topology | str | Path) -> Topology:
    if isinstance(topology, Topology):
        return topology
    return Topology.load(resolve_topology(str(topology)))


def max_capacity(topology: Topology) -> int:
    """Return the largest capacity in bit/s over every link direction and DTN NIC."""
    return max(topology.capacities().values(), default=0)


def default_scale(topology: Topology, top_mbps: float = DEFAULT_TOP_MBPS) -> float:
    """Return the scale that emulates the largest capacity of `topology` at `top_mbps` Mbit/s.

    ring8 (100G everywhere): 0.002, so 100G runs at 200 Mbit/s; sc16 (1T links, 25G NICs):
    0.0002, so 1T runs at 200 Mbit/s and 25G at 5 Mbit/s.
    """
    largest = max_capacity(topology)
    if largest <= 0:
        raise InvalidArgument(f"topology {topology.name} has no link or NIC capacity to scale")
    return top_mbps * 1e6 / largest


def emulated_mbps(capacity_bps: int, scale: float) -> float:
    """Return the emulated rate in Mbit/s of a nominal `capacity_bps` under `scale`."""
    return capacity_bps * scale / 1e6


def host_prefix_length(topology: Topology) -> int:
    """Return the prefix length given to every DTN address.

    The longest prefix, at most /24, covering every DTN address; widened while some DTN
    address would be that prefix's broadcast address.
    """
    addresses = [int(ipaddress.IPv4Address(d.ipv4)) for d in topology.spec.dtns]
    if not addresses:
        return 24
    prefix = min(24, 32 - (min(addresses) ^ max(addresses)).bit_length())
    while prefix > 1 and any(a | ((1 << (32 - prefix)) - 1) == a for a in addresses):
        prefix -= 1
    return prefix


class TsdnTopo(Topo):
    """The Mininet topology of a tsdn topology file, with emulated rates `capacity x scale`.

    Everything is checked when the object is made, before Mininet touches the system:
    a link or NIC whose emulated rate is outside (0, 1000] Mbit/s, a port number OVS
    cannot take, or an interface name longer than 15 characters raises `InvalidArgument`.
    """

    def __init__(self, topology: Topology | str | Path, scale: float | None = None,
                 cross_traffic: Iterable[str] = (), **opts):
        self.topology = _load(topology)
        if scale is None:
            scale = default_scale(self.topology)
        try:
            scale = float(scale)
        except (TypeError, ValueError):
            raise InvalidArgument(f"emulation scale {scale!r} is not a number") from None
        if not math.isfinite(scale):
            raise InvalidArgument(f"emulation scale {scale} is not a finite number")
        self.scale = scale
        self.prefix_length = host_prefix_length(self.topology)
        spec = self.topology.spec
        self._to_mn: dict[str, str] = {}
        for i, switch in enumerate(spec.switches, 1):
            self._to_mn[switch.name] = f"s{i}"
        for i, dtn in enumerate(spec.dtns, 1):
            self._to_mn[dtn.name] = f"h{i}"
        for i, port in enumerate(spec.interdomain, 1):
            self._to_mn[port.name] = f"w{i}"
        self._to_topo = {mn: name for name, mn in self._to_mn.items()}
        self.mbps = self._emulated_rates()
        self._check_ports()
        self.cross_switches = self._check_cross(cross_traffic)
        super().__init__(**opts)

    def _emulated_rates(self) -> dict[str, float]:
        """Direction id -> emulated Mbit/s; refuse any outside what TCLink can shape."""
        rates: dict[str, float] = {}
        largest = max_capacity(self.topology)
        for direction in self.topology.directions.values():
            mbps = emulated_mbps(direction.capacity, self.scale)
            if not MIN_TCLINK_MBPS <= mbps <= MAX_TCLINK_MBPS * (1 + 1e-9):
                what = "interdomain port" if direction.is_interdomain else \
                    "DTN access link" if direction.is_access else "link"
                hint = ""
                if largest > 0:
                    hint = (f"; scales up to {MAX_TCLINK_MBPS * 1e6 / largest:.6g} keep every link of "
                            f"{self.topology.name} at or below {MAX_TCLINK_MBPS} Mbit/s "
                            f"(default {default_scale(self.topology):.6g})")
                raise InvalidArgument(
                    f"{what} {direction.link} ({direction.id}): {format_bandwidth(direction.capacity)} x scale "
                    f"{self.scale:g} = {mbps:g} Mbit/s, outside what Mininet's TCLink can shape "
                    f"({MIN_TCLINK_MBPS:g}..{MAX_TCLINK_MBPS} Mbit/s){hint}"
                )
            rates[direction.id] = mbps
        return rates

    def _check_ports(self) -> None:
        used = [(link.a, link.a_port, link.label) for link in self.topology.spec.links]
        used += [(link.b, link.b_port, link.label) for link in self.topology.spec.links]
        used += [(dtn.switch, dtn.port, f"DTN {dtn.name}") for dtn in self.topology.spec.dtns if dtn.beyond is None]
        used += [(port.switch, port.port, f"interdomain port {port.name}") for port in self.topology.spec.interdomain]
        for switch, port, owner in used:
            if port > MAX_OFPORT:
                raise InvalidArgument(
                    f"{owner}: port {port} of switch {switch} is above {MAX_OFPORT}, the highest port "
                    "number Open vSwitch can emulate"
                )
            name = self.switch_intf(switch, port)
            if len(name) > MAX_INTF_NAME:
                raise InvalidArgument(
                    f"{owner}: interface name {name} for port {port} of switch {switch} is longer than "
                    f"{MAX_INTF_NAME} characters"
                )

    def _check_cross(self, switches: Iterable[str]) -> tuple[str, ...]:
        """The switches that get a cross-traffic host, in file order; refuse what would collide."""
        if isinstance(switches, str):
            raise InvalidArgument(f"cross_traffic: a list of switch names, got the string {switches!r}")
        wanted = set(switches)
        unknown = sorted(wanted - set(self.topology.switches))
        if unknown:
            raise InvalidArgument(f"cross_traffic: {', '.join(map(repr, unknown))} not a switch of topology "
                                  f"{self.topology.name}")
        if not wanted:
            return ()
        for switch in self.topology.spec.switches:
            if CROSS_PORT in switch.ports:
                raise InvalidArgument(f"switch {switch.name} declares port {CROSS_PORT}, which the builder keeps for "
                                      "its cross-traffic host")
        for dtn in self.topology.spec.dtns:
            if ipaddress.IPv4Address(dtn.ipv4) in CROSS_NETWORK:
                raise InvalidArgument(f"DTN {dtn.name}: address {dtn.ipv4} is inside {CROSS_NETWORK}, which the "
                                      "builder keeps for its cross-traffic hosts")
            if dtn.mac.lower() in {self.cross_mac(s) for s in wanted}:
                raise InvalidArgument(f"DTN {dtn.name}: MAC {dtn.mac} is the one of a cross-traffic host")
        return tuple(s.name for s in self.topology.spec.switches if s.name in wanted)

    def wan_dpids(self) -> dict[str, str]:
        """Interdomain port -> dpid (hex) of its WAN bridge: 0xffff000000000001 up, none a switch's."""
        taken = {switch.dpid for switch in self.topology.spec.switches}
        dpids: dict[str, str] = {}
        number = 0xFFFF << 48
        for port in self.topology.spec.interdomain:
            number += 1
            while number in taken:
                number += 1
            dpids[port.name] = f"{number:016x}"
        return dpids

    def build(self, *args, **params) -> None:
        """Add the file's switches, DTNs, links and access links, a WAN bridge per interdomain port
        with the remote DTNs beyond it, and the cross-traffic hosts asked for."""
        spec = self.topology.spec
        for switch in spec.switches:
            self.addSwitch(self.mn_name(switch.name), cls=TsdnSwitch, dpid=f"{switch.dpid:016x}",
                           failMode="secure", datapath="user", protocols="OpenFlow13", reconnectms=MAX_BACKOFF_MS)
        for port, dpid in self.wan_dpids().items():  # OVSBridge: standalone, ignores every controller
            self.addSwitch(self.mn_name(port), cls=OVSBridge, dpid=dpid, datapath="user")
        for dtn in spec.dtns:
            self.addHost(self.mn_name(dtn.name), ip=f"{dtn.ipv4}/{self.prefix_length}", mac=dtn.mac)
        for link in spec.links:
            forward, backward = self.topology.link_directions[link.label]
            self.addLink(self.mn_name(link.a), self.mn_name(link.b), port1=link.a_port, port2=link.b_port,
                         cls=TCLink, params1={"bw": self.mbps[forward.id]}, params2={"bw": self.mbps[backward.id]})
        for port in spec.interdomain:
            inward, outward = self.topology.access(port.name)
            self.addLink(self.mn_name(port.switch), self.mn_name(port.name), port1=port.port, port2=1, cls=TCLink,
                         params1={"bw": self.mbps[outward.id]}, params2={"bw": self.mbps[inward.id]})
            for j, name in enumerate(self.topology.remote_site_dtns(port.name), 2):
                self.addLink(self.mn_name(name), self.mn_name(port.name), port1=0, port2=j, cls=TCLink,
                             params1={"txo": False})
        for dtn in spec.dtns:
            if dtn.beyond is not None:
                continue
            up, down = self.topology.access(dtn.name)
            self.addLink(self.mn_name(dtn.name), self.mn_name(dtn.switch), port1=0, port2=dtn.port, cls=TCLink,
                         params1={"bw": self.mbps[up.id], "txo": False}, params2={"bw": self.mbps[down.id]})
        for switch in self.cross_switches:
            host = self.cross_name(switch)
            self.addHost(host, ip=f"{self.cross_ip(switch)}/{CROSS_NETWORK.prefixlen}", mac=self.cross_mac(switch))
            self.addLink(host, self.mn_name(switch), port1=0, port2=CROSS_PORT, cls=TCLink, params1={"txo": False})

    def _index(self, switch: str) -> int:
        if switch not in self.topology.switches:
            raise NotFound(f"no switch {switch!r} in topology {self.topology.name}")
        return int(self.mn_name(switch).removeprefix("s"))

    def cross_name(self, switch: str) -> str:
        """Return the Mininet name of the cross-traffic host of switch `switch` (`x3` on `s3`)."""
        return f"x{self._index(switch)}"

    def cross_ip(self, switch: str) -> str:
        """Return the IPv4 address of the cross-traffic host of switch `switch`."""
        return str(CROSS_NETWORK.network_address + self._index(switch))

    def cross_mac(self, switch: str) -> str:
        """Return the MAC address of the cross-traffic host of switch `switch` (locally administered)."""
        index = self._index(switch)
        return f"02:c5:00:{index >> 16 & 0xff:02x}:{index >> 8 & 0xff:02x}:{index & 0xff:02x}"

    def mn_name(self, name: str) -> str:
        """Return the Mininet node name (`s3`, `h7`, `w1`) of switch, DTN or interdomain port (its WAN
        bridge) `name` of the file."""
        try:
            return self._to_mn[name]
        except KeyError:
            raise NotFound(f"no switch, DTN or interdomain port {name!r} in topology {self.topology.name}") from None

    def topo_name(self, mn_name: str) -> str:
        """Return the file's name of the switch, DTN or interdomain port that Mininet calls `mn_name`."""
        try:
            return self._to_topo[mn_name]
        except KeyError:
            raise NotFound(f"no Mininet node {mn_name!r} in the network of topology {self.topology.name}") from None

    def switch_intf(self, switch: str, port: int) -> str:
        """Return the interface name of port `port` of the file's switch `switch`."""
        return f"{self.mn_name(switch)}-eth{port}"

    def host_intf(self, dtn: str) -> str:
        """Return the interface name of DTN `dtn` inside its host."""
        self.topology.dtn(dtn)
        return f"{self.mn_name(dtn)}-eth0"

    def mininet_names(self) -> dict[str, str]:
        """Return the whole mapping, file name -> Mininet name: switches, DTNs, interdomain ports, in file order."""
        return dict(self._to_mn)


class RunningNetwork:
    """A started Mininet network of a topology file; lookups take the file's names."""

    def __init__(self, mn: Mininet, topo: TsdnTopo):
        self.mn = mn
        self.topo = topo
        self.topology = topo.topology
        self.scale = topo.scale

    def host(self, dtn: str) -> Host:
        """Return the Mininet host of DTN `dtn`."""
        self.topology.dtn(dtn)
        return self.mn.get(self.topo.mn_name(dtn))

    def switch(self, name: str) -> OVSSwitch:
        """Return the Open vSwitch bridge of the file's switch `name`."""
        if name not in self.topology.switches:
            raise NotFound(f"no switch {name!r} in topology {self.topology.name}")
        return self.mn.get(self.topo.mn_name(name))

    def switch_intf(self, switch: str, port: int) -> str:
        """Return the interface name of port `port` of switch `switch`."""
        return self.topo.switch_intf(switch, port)

    def wan_bridge(self, port: str) -> OVSBridge:
        """Return the standalone bridge standing in for the neighbour's WAN beyond interdomain port `port`."""
        if port not in self.topology.interdomain:
            raise NotFound(f"no interdomain port {port!r} in topology {self.topology.name}")
        return self.mn.get(self.topo.mn_name(port))

    def host_intf(self, dtn: str) -> str:
        """Return the interface name of DTN `dtn` inside its host."""
        return self.topo.host_intf(dtn)

    @property
    def cross_switches(self) -> tuple[str, ...]:
        """The switches that have a cross-traffic host."""
        return self.topo.cross_switches

    def cross_host(self, switch: str) -> Host:
        """Return the cross-traffic host of switch `switch`; NotFound when it has none."""
        if switch not in self.topo.cross_switches:
            raise NotFound(f"switch {switch!r} has no cross-traffic host (start_network(..., cross_traffic=[...]) "
                           f"names {', '.join(self.topo.cross_switches) or 'none'})")
        return self.mn.get(self.topo.cross_name(switch))

    def cross_ip(self, switch: str) -> str:
        """Return the address of the cross-traffic host of switch `switch`."""
        return self.topo.cross_ip(switch)


def prioritize_lldp(net: RunningNetwork) -> None:
    """Give LLDP a class of its own on every switch-to-switch interface (see the module's docstring)."""
    for link in net.topology.spec.links:
        for switch, port in ((link.a, link.a_port), (link.b, link.b_port)):
            intf = net.switch_intf(switch, port)
            for command in (["tc", "class", "add", "dev", intf, "parent", "5:0", "classid", "5:2", "htb", "rate",
                             LLDP_RATE, "burst", "15k", "prio", "0"],
                            ["tc", "filter", "add", "dev", intf, "parent", "5:0", "protocol", "0x88cc", "prio", "1",
                             "u32", "match", "u32", "0", "0", "classid", "5:2"]):
                done = subprocess.run(command, capture_output=True, text=True, timeout=10)
                if done.returncode != 0:
                    raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")


def set_cross_mtu(net: RunningNetwork) -> None:
    """Jumbo frames for the cross traffic: its hosts, their switch ports, and every link between two
    switches that have a cross host."""
    names = []
    for switch in net.cross_switches:
        host = net.cross_host(switch)
        out, err, code = host.pexec("ip", "link", "set", "dev", host.defaultIntf().name, "mtu", str(CROSS_MTU))
        if code != 0:
            raise RuntimeError(f"MTU {CROSS_MTU} on {host.name} failed: {(err or out).strip()}")
        names.append(net.switch_intf(switch, CROSS_PORT))
    for link in net.topology.spec.links:
        if link.a in net.cross_switches and link.b in net.cross_switches:
            names += [net.switch_intf(link.a, link.a_port), net.switch_intf(link.b, link.b_port)]
    for name in names:
        done = subprocess.run(["ip", "link", "set", "dev", name, "mtu", str(CROSS_MTU)], capture_output=True,
                              text=True, timeout=10)
        if done.returncode != 0:
            raise RuntimeError(f"MTU {CROSS_MTU} on {name} failed: {done.stderr.strip()}")


def set_static_arp(net: RunningNetwork) -> None:
    """Give every cross-traffic host a permanent neighbour entry for every other one."""
    for switch in net.cross_switches:
        host = net.cross_host(switch)
        intf = host.defaultIntf().name
        for other in net.cross_switches:
            if other == switch:
                continue
            out, err, code = host.pexec("ip", "neigh", "replace", net.topo.cross_ip(other), "lladdr",
                                        net.topo.cross_mac(other), "dev", intf, "nud", "permanent")
            if code != 0:
                raise RuntimeError(f"static ARP on {host.name} for {other}'s cross host failed: {(err or out).strip()}")


def _require_system() -> None:
    if os.geteuid() != 0:
        raise FailedPrecondition("Mininet needs root: run as root (sudo)")
    try:
        probe = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True, timeout=15)
    except FileNotFoundError:
        raise FailedPrecondition("Open vSwitch is not installed (Debian package openvswitch-switch)") from None
    except subprocess.TimeoutExpired:
        probe = None
    if probe is None or probe.returncode != 0:
        raise FailedPrecondition(f"Open vSwitch is not running: start it with {OVS_START_HINT}")
    wrong = open_vswitch.problem()
    if wrong:
        raise FailedPrecondition(wrong)


def disable_tx_checksum_offload(net: Mininet) -> None:
    """Run `ethtool -K <intf> tx off` on every interface of every host (the userspace datapath trap)."""
    for host in net.hosts:
        for intf in host.intfList():
            if intf.name == "lo":
                continue
            out, err, code = host.pexec("ethtool", "-K", intf.name, "tx", "off")
            if code != 0:
                raise RuntimeError(f"ethtool -K {intf.name} tx off failed on {host.name}: {(err or out).strip()}")


def _remove_leftovers(topo: TsdnTopo) -> None:
    """Delete this network's bridges and root-namespace interfaces if `Mininet.stop` left any."""
    switches = [topo.mn_name(s.name) for s in topo.topology.spec.switches]
    switches += [topo.mn_name(p.name) for p in topo.topology.spec.interdomain]
    if switches:
        command = ["ovs-vsctl", "--timeout=10"]
        for name in switches:
            command += ["--", "--if-exists", "del-br", name]
        subprocess.run(command, capture_output=True, timeout=30, check=False)
    listing = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10, check=False)
    prefixes = tuple(f"{name}-eth" for name in [*topo.mininet_names().values(),
                                                  *(topo.cross_name(s) for s in topo.cross_switches)])
    for line in listing.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@", 1)[0]
        if name.startswith(prefixes):
            subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=10, check=False)


def _controller_targets(controller: tuple[str, int] | None,
                       controllers: Iterable[tuple[str, int]] | None) -> list[tuple[str, int]]:
    """The (ip, port) of every controller the switches connect to; refuse what cannot be one."""
    if controller is not None and controllers is not None:
        raise InvalidArgument("give controller=(ip, port) or controllers=[(ip, port), ...], not both")
    wanted = [controller] if controller is not None else list(controllers or ())
    targets: list[tuple[str, int]] = []
    for target in wanted:
        try:
            ip, port = target
            port = int(port)
        except (TypeError, ValueError):
            raise InvalidArgument(f"controller {target!r}: expected (ip, port)") from None
        if not 0 < port < 65536:
            raise InvalidArgument(f"controller {ip}:{port}: port outside 1..65535")
        if (ip, port) in targets:
            raise InvalidArgument(f"controller {ip}:{port} given twice")
        targets.append((str(ip), port))
    return targets


@contextlib.contextmanager
def start_network(topology: Topology | str | Path, scale: float | None = None,
                  controller: tuple[str, int] | None = None,
                  cross_traffic: Iterable[str] = (),
                  controllers: Iterable[tuple[str, int]] | None = None) -> Iterator[RunningNetwork]:
    """Build and start the network of `topology`, yield a `RunningNetwork`, stop it on exit.

    `topology` is a `Topology`, a file path or a built-in name; `scale` defaults to
    `default_scale(topology)`; `controller=(ip, port)` points every switch at a remote
    OpenFlow controller, `controllers=[(ip, port), ...]` at each of several (give one or
    the other), neither leaves them without one (secure fail mode: empty tables, nothing
    forwarded); `cross_traffic` names the switches that get a cross-traffic host.
    Bad input raises before anything is created; on exit, even after an error, the network
    is stopped and its bridges and interfaces removed.
    """
    targets = _controller_targets(controller, controllers)
    topo = TsdnTopo(topology, scale, cross_traffic)
    _require_system()
    net = Mininet(topo=topo, build=False, switch=OVSSwitch, host=Host, link=TCLink, controller=None,
                  autoSetMacs=False, cleanup=False)
    try:
        for index, (ip, port) in enumerate(targets):
            net.addController(RemoteController(f"c{index}", ip=ip, port=port))
        net.build()
        net.start()
        disable_tx_checksum_offload(net)
        running = RunningNetwork(net, topo)
        prioritize_lldp(running)
        set_cross_mtu(running)
        set_static_arp(running)
        yield running
    finally:
        try:
            net.stop()
        finally:
            _remove_leftovers(topo)


topos = {"tsdn": TsdnTopo}
"""For `mn --custom topologies/mininet_builder.py --topo tsdn,<file or name>[,<scale>]`."""
