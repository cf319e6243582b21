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

Checksums. With the userspace datapath, TCP stalls unless transmit checksum offload is off
on every host interface: the DTN side of each access link is configured with `txo=False`
and `start_network` runs `ethtool -K <intf> tx off` again after start.

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
from collections.abc import Iterator
from pathlib import Path

from mininet.link import TCLink
from mininet.net import Mininet
from mininet.node import Host, OVSSwitch, RemoteController
from mininet.topo import Topo

from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NotFound
from sdn_app.core.topology import Topology
from sdn_app.core.units import format_bandwidth
from topologies import resolve_topology

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

OVS_START_HINT = "/usr/share/openvswitch/scripts/ovs-ctl start --system-id=random --no-monitor"


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

    def __init__(self, topology: Topology | str | Path, scale: float | None = None, **opts):
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
        self._to_topo = {mn: name for name, mn in self._to_mn.items()}
        self.mbps = self._emulated_rates()
        self._check_ports()
        super().__init__(**opts)

    def _emulated_rates(self) -> dict[str, float]:
        """Direction id -> emulated Mbit/s; refuse any outside what TCLink can shape."""
        rates: dict[str, float] = {}
        largest = max_capacity(self.topology)
        for direction in self.topology.directions.values():
            mbps = emulated_mbps(direction.capacity, self.scale)
            if not MIN_TCLINK_MBPS <= mbps <= MAX_TCLINK_MBPS * (1 + 1e-9):
                what = "DTN access link" if direction.is_access else "link"
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
        used += [(dtn.switch, dtn.port, f"DTN {dtn.name}") for dtn in self.topology.spec.dtns]
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

    def build(self, *args, **params) -> None:
        """Add the file's switches, DTNs, links and access links."""
        spec = self.topology.spec
        for switch in spec.switches:
            self.addSwitch(self.mn_name(switch.name), cls=OVSSwitch, dpid=f"{switch.dpid:016x}",
                           failMode="secure", datapath="user", protocols="OpenFlow13")
        for dtn in spec.dtns:
            self.addHost(self.mn_name(dtn.name), ip=f"{dtn.ipv4}/{self.prefix_length}", mac=dtn.mac)
        for link in spec.links:
            forward, backward = self.topology.link_directions[link.label]
            self.addLink(self.mn_name(link.a), self.mn_name(link.b), port1=link.a_port, port2=link.b_port,
                         cls=TCLink, params1={"bw": self.mbps[forward.id]}, params2={"bw": self.mbps[backward.id]})
        for dtn in spec.dtns:
            up, down = self.topology.access(dtn.name)
            self.addLink(self.mn_name(dtn.name), self.mn_name(dtn.switch), port1=0, port2=dtn.port, cls=TCLink,
                         params1={"bw": self.mbps[up.id], "txo": False}, params2={"bw": self.mbps[down.id]})

    def mn_name(self, name: str) -> str:
        """Return the Mininet node name (`s3`, `h7`) of switch or DTN `name` of the file."""
        try:
            return self._to_mn[name]
        except KeyError:
            raise NotFound(f"no switch or DTN {name!r} in topology {self.topology.name}") from None

    def topo_name(self, mn_name: str) -> str:
        """Return the file's name of the switch or DTN that Mininet calls `mn_name`."""
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
        """Return the whole mapping, file name -> Mininet name, switches then DTNs in file order."""
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

    def host_intf(self, dtn: str) -> str:
        """Return the interface name of DTN `dtn` inside its host."""
        return self.topo.host_intf(dtn)


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
    if switches:
        command = ["ovs-vsctl", "--timeout=10"]
        for name in switches:
            command += ["--", "--if-exists", "del-br", name]
        subprocess.run(command, capture_output=True, timeout=30, check=False)
    listing = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=10, check=False)
    prefixes = tuple(f"{name}-eth" for name in topo.mininet_names().values())
    for line in listing.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@", 1)[0]
        if name.startswith(prefixes):
            subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=10, check=False)


@contextlib.contextmanager
def start_network(topology: Topology | str | Path, scale: float | None = None,
                  controller: tuple[str, int] | None = None) -> Iterator[RunningNetwork]:
    """Build and start the network of `topology`, yield a `RunningNetwork`, stop it on exit.

    `topology` is a `Topology`, a file path or a built-in name; `scale` defaults to
    `default_scale(topology)`; `controller=(ip, port)` points every switch at a remote
    OpenFlow controller, `None` leaves them without one (secure fail mode: empty tables,
    nothing forwarded). Bad input raises before anything is created; on exit, even after
    an error, the network is stopped and its bridges and interfaces removed.
    """
    topo = TsdnTopo(topology, scale)
    _require_system()
    net = Mininet(topo=topo, build=False, switch=OVSSwitch, host=Host, link=TCLink, controller=None,
                  autoSetMacs=False, cleanup=False)
    try:
        if controller is not None:
            ip, port = controller
            net.addController(RemoteController("c0", ip=ip, port=int(port)))
        net.build()
        net.start()
        disable_tx_checksum_offload(net)
        yield RunningNetwork(net, topo)
    finally:
        try:
            net.stop()
        finally:
            _remove_leftovers(topo)


topos = {"tsdn": TsdnTopo}
"""For `mn --custom topologies/mininet_builder.py --topo tsdn,<file or name>[,<scale>]`."""
