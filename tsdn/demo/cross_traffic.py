"""Traffic the controller does not own, on chosen link directions: what `congest_link` does in Mininet.

    cross = CrossTraffic(net)                      # a RunningNetwork with cross-traffic hosts
    cross.start(direction, 95 * G)                 # UDP at 95G (nominal) over direction src -> dst
    cross.measure()                                # {direction id: nominal bit/s the link sends now}
    cross.stop(direction)
    cross.close()                                  # stops everything still running

For a direction src -> dst of a link, the cross-traffic hosts of the two switches
(`topologies.mininet_builder`, `cross_traffic=[...]`) exchange packets over exactly that link:
flows on the two switches, installed with `ovs-ofctl` under a cookie outside tsdn's cookie space
(`CROSS_COOKIE_TAG` in the top 16 bits; tsdn's reconciliation touches only its own tag), carry
IPv4 between the two hosts both ways (iperf3's control connection runs back). An iperf3 server
on the destination's host and an iperf3 UDP client on the source's send at the rate asked for,
times the network's emulation scale, counted on the wire (frames with their headers, as the
port counters count them), in jumbo frames (the builder's `CROSS_MTU`) and at a raised CPU
priority, so the tenant keeps its rate while the emulation is short of CPU: with 1500-byte
frames at normal priority, sc16's 900G reached the link as 680G and a TCP transfer sharing it
kept 30-77 Mbit/s of a 200 Mbit/s link where 20 were left; with both, it measured 1T and the
transfer 19 Mbit/s. The switches' port counters see that traffic as they would another
tenant's at a show. `stop` ends the iperf3 pair and, once no direction of the
link is loaded, deletes the link's flows by cookie.

`measure` reads the transmit byte counter of each loaded direction's sending port
(`ovs-ofctl dump-ports`) and returns the rate since the previous reading, all traffic included
(tsdn's own and the cross traffic): what the link really carried.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.topology import LinkDirection

CROSS_COOKIE_TAG = 0xC505
"""Top 16 bits of the cookie of every cross-traffic flow (tsdn's own carry 0x75D5)."""
CROSS_PRIORITY = 500  # the matches (cross-host addresses only) never overlap tsdn's
BASE_PORT = 5300  # iperf3 port of a direction: BASE_PORT + 2 x link index + (0 forward, 1 backward)
READY_DEADLINE = 10.0  # seconds for the iperf3 server to listen and the client to connect
PRIORITY = ("nice", "-n", "-10")  # the tenant's traffic keeps its rate when the emulation is short of CPU
DATAGRAM = 8972  # bytes of UDP payload per datagram: a 9000-byte IP packet (the cross hosts' jumbo MTU)
FRAME_OVERHEAD = 42  # bytes of Ethernet, IPv4 and UDP headers around each (what the port counters count too)
_TX = re.compile(r"tx pkts=\d+, bytes=(\d+)")


def cross_cookie(link_index: int) -> int:
    """The cookie of the cross-traffic flows of the link at `link_index` in the topology file."""
    return CROSS_COOKIE_TAG << 48 | (link_index + 1)


def _ofctl(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], input=stdin, capture_output=True, text=True,
                          timeout=15)
    if done.returncode != 0:
        raise RuntimeError(f"ovs-ofctl {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


@dataclass
class Stream:
    """UDP cross traffic over one link direction."""

    direction: LinkDirection
    rate_bps: int  # nominal
    emulated_bps: int  # on the wire, headers included
    port: int
    server: subprocess.Popen
    client: subprocess.Popen


@dataclass
class _Counter:
    bytes: int
    at: float


@dataclass
class CrossTraffic:
    """The cross traffic of one running network; the runner and the Mininet tests own one each."""

    net: object  # topologies.mininet_builder.RunningNetwork
    streams: dict[str, Stream] = field(default_factory=dict)  # direction id -> stream
    _counters: dict[str, _Counter] = field(default_factory=dict)

    @property
    def scale(self) -> float:
        return self.net.scale

    def _link_index(self, label: str) -> int:
        for i, link in enumerate(self.net.topology.spec.links):
            if link.label == label:
                return i
        raise InvalidArgument(f"no link {label!r} in topology {self.net.topology.name}")

    def _iperf_port(self, direction: LinkDirection) -> int:
        forward, _ = self.net.topology.link_directions[direction.link]
        return BASE_PORT + 2 * self._link_index(direction.link) + (0 if direction.id == forward.id else 1)

    def _bridge(self, switch: str) -> str:
        return self.net.topo.mn_name(switch)

    def flows(self, label: str) -> list[tuple[str, str]]:
        """(bridge, flow) of the link `label`: both cross hosts' IPv4 over exactly that link, both ways."""
        forward, _ = self.net.topology.link_directions[label]
        from topologies.mininet_builder import CROSS_PORT

        a, b = forward.src, forward.dst
        ip_a, ip_b = self.net.cross_ip(a), self.net.cross_ip(b)
        cookie = cross_cookie(self._link_index(label))
        head = f"cookie={cookie:#x},table=0,priority={CROSS_PRIORITY},ip"
        a_to_b, b_to_a = f"nw_src={ip_a},nw_dst={ip_b}", f"nw_src={ip_b},nw_dst={ip_a}"
        return [
            (self._bridge(a), f"{head},in_port={CROSS_PORT},{a_to_b},actions=output:{forward.src_port}"),
            (self._bridge(a), f"{head},in_port={forward.src_port},{b_to_a},actions=output:{CROSS_PORT}"),
            (self._bridge(b), f"{head},in_port={forward.dst_port},{a_to_b},actions=output:{CROSS_PORT}"),
            (self._bridge(b), f"{head},in_port={CROSS_PORT},{b_to_a},actions=output:{forward.dst_port}"),
        ]

    def _install(self, label: str) -> None:
        by_bridge: dict[str, list[str]] = {}
        for bridge, flow in self.flows(label):
            by_bridge.setdefault(bridge, []).append(flow)
        for bridge, lines in by_bridge.items():
            _ofctl("add-flows", bridge, "-", stdin="\n".join(lines) + "\n")

    def _remove(self, label: str) -> None:
        cookie = cross_cookie(self._link_index(label))
        forward, _ = self.net.topology.link_directions[label]
        for switch in (forward.src, forward.dst):
            _ofctl("del-flows", self._bridge(switch), f"cookie={cookie:#x}/-1")

    def start(self, direction: LinkDirection, rate_bps: int) -> Stream:
        """Send UDP at `rate_bps` (nominal) from the cross host of `direction.src` to that of `direction.dst`."""
        if direction.id in self.streams:
            raise InvalidArgument(f"{direction.id} already carries cross traffic")
        if rate_bps <= 0:
            raise InvalidArgument(f"cross traffic on {direction.id}: the rate must be positive, got {rate_bps}")
        if not any(s.direction.link == direction.link for s in self.streams.values()):
            self._install(direction.link)
        src, dst = self.net.cross_host(direction.src), self.net.cross_host(direction.dst)
        port = self._iperf_port(direction)
        emulated = max(1, round(rate_bps * self.scale))
        payload = max(1, round(emulated * DATAGRAM / (DATAGRAM + FRAME_OVERHEAD)))  # iperf3 -b counts payload
        server = dst.popen([*PRIORITY, "iperf3", "-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        client = None
        try:
            self._wait(lambda: bool(dst.cmd(f"ss -Hltn 'sport = :{port}'").strip()), server,
                       f"the iperf3 server on {dst.name} to listen on {port}")
            client = src.popen([*PRIORITY, "iperf3", "-c", self.net.cross_ip(direction.dst), "-p", str(port), "-u",
                                "-b", str(payload), "-t", "86400", "-l", str(DATAGRAM)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self._wait(lambda: bool(dst.cmd(f"ss -Htn state established '( sport = :{port} )'").strip()), client,
                       f"iperf3 on {src.name} to reach {dst.name} over {direction.link}")
        except Exception:
            for process in (client, server):
                if process is not None:
                    stop_process(process)
            if not any(s.direction.link == direction.link for s in self.streams.values()):
                self._remove(direction.link)
            raise
        stream = Stream(direction, rate_bps, emulated, port, server, client)
        self.streams[direction.id] = stream
        self._counters.pop(direction.id, None)
        return stream

    def _wait(self, condition, process: subprocess.Popen, what: str) -> None:
        deadline = time.monotonic() + READY_DEADLINE
        while not condition():
            if process.poll() is not None:
                said = process.stderr.read().strip() if process.stderr is not None else ""
                raise RuntimeError(f"waiting for {what}: iperf3 exited with code {process.returncode}"
                                   + (f": {said}" if said else ""))
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {READY_DEADLINE:g} s waiting for {what}")
            time.sleep(0.05)  # polling interval of a condition with a deadline

    def stop(self, direction: LinkDirection) -> Stream | None:
        """Stop the cross traffic of `direction` (None when it carried none); the link's flows go with
        the last of its directions."""
        stream = self.streams.pop(direction.id, None)
        if stream is None:
            return None
        for process in (stream.client, stream.server):
            stop_process(process)
        self._counters.pop(direction.id, None)
        if not any(s.direction.link == direction.link for s in self.streams.values()):
            self._remove(direction.link)
        return stream

    def close(self) -> None:
        """Stop every stream still running."""
        for stream in list(self.streams.values()):
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError, OSError):  # the network goes anyway
                self.stop(stream.direction)

    def tx_bytes(self, direction: LinkDirection) -> int:
        """Bytes the sending port of `direction` has transmitted so far."""
        out = _ofctl("dump-ports", self._bridge(direction.src), str(direction.src_port))
        found = _TX.search(out)
        if found is None:
            raise RuntimeError(f"ovs-ofctl dump-ports {self._bridge(direction.src)} {direction.src_port}: no tx "
                               f"counter in {out.strip()!r}")
        return int(found.group(1))

    def measure(self) -> dict[str, float]:
        """Nominal bit/s each loaded direction carried since the previous call (first call: nothing yet)."""
        rates: dict[str, float] = {}
        for key, stream in list(self.streams.items()):
            now = time.monotonic()
            count = self.tx_bytes(stream.direction)
            previous = self._counters.get(key)
            self._counters[key] = _Counter(count, now)
            if previous is not None and now > previous.at:
                rates[key] = (count - previous.bytes) * 8 / (now - previous.at) / self.scale
        return rates


def stop_process(process: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(grace)
