"""Measured load per link direction, from the switches' cumulative port byte counters.

The OpenFlow adapter polls every switch for port statistics (about once a second) and
hands each reply here as `PortCounters`; `UtilizationMeter.loads(now)` turns the last two
samples of each port into bits/s per link direction of the topology:

- a switch-to-switch direction `a:pa -> b:pb` is what port `pa` of `a` transmits (or, when
  `a` has not answered lately, what port `pb` of `b` receives);
- a DTN's access link: DTN -> switch is what the switch port receives from it, switch -> DTN
  what the port transmits.

First sample of a port: no rate yet. A counter that goes backwards (a switch restarted, a
port was recreated): the sample becomes the new base, no rate for that interval. A port not
heard from for `stale_after` seconds (missing replies, switch gone): its rate is unknown
(None) rather than the last value forever.

Emulation: Mininet links run at nominal capacity x `scale`, so the fraction used is
measured / (capacity x scale), and the nominal rate (what the same load would be on the
real network) is measured / scale.

>>> from sdn_app.core.topology import Topology
>>> from sdn_app.core.topology_schema import load_topology_spec
>>> topo = Topology(load_topology_spec("topologies/ring8.yaml"))
>>> meter = UtilizationMeter(topo, scale=0.001)
>>> meter.observe("s1", [PortCounters(1, tx_bytes=0, rx_bytes=0)], now=10.0)
>>> meter.observe("s1", [PortCounters(1, tx_bytes=6_250_000, rx_bytes=0)], now=11.0)
>>> load = meter.loads(11.5)["s1:1->s2:2"]
>>> load.measured_bps, load.nominal_bps, load.fraction
(50000000.0, 50000000000.0, 0.5)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sdn_app.core.topology import LinkDirection, Topology

DEFAULT_STALE_AFTER = 3.5  # seconds: more than three missed polls of one second


@dataclass(frozen=True, slots=True)
class PortCounters:
    """One port's cumulative byte counters, as a switch reports them."""

    port: int
    tx_bytes: int
    rx_bytes: int


@dataclass(frozen=True, slots=True)
class DirectionLoad:
    """The load measured on one link direction now; rates are None while unknown."""

    direction: str  # direction id, e.g. "s1:1->s2:2"
    link: str
    src: str
    dst: str
    capacity: int  # nominal bits/s, from the topology
    kind: str  # core, wan, booth or access
    measured_bps: float | None  # as seen on the (possibly emulated) wire
    nominal_bps: float | None  # measured / scale
    fraction: float | None  # measured / (capacity x scale), 0..1 (may exceed 1 briefly)

    @property
    def is_access(self) -> bool:
        return self.kind == "access"


@dataclass(slots=True)
class _Port:
    time: float
    tx_bytes: int
    rx_bytes: int
    tx_bps: float | None = None
    rx_bps: float | None = None
    rate_time: float | None = None  # when the rates were last computed


class UtilizationMeter:
    """Samples of port counters in, bits/s per link direction out. Not thread-safe: one owner."""

    def __init__(self, topology: Topology, scale: float = 1.0, stale_after: float = DEFAULT_STALE_AFTER):
        if scale <= 0:
            raise ValueError(f"emulation scale must be positive, got {scale}")
        self.topology = topology
        self.scale = scale
        self.stale_after = stale_after
        self._ports: dict[tuple[str, int], _Port] = {}

    def observe(self, switch: str, counters: Iterable[PortCounters], now: float) -> None:
        """Record the counters of `switch`'s ports sampled at `now` (seconds, monotonic)."""
        for sample in counters:
            key = (switch, sample.port)
            last = self._ports.get(key)
            if last is None or sample.tx_bytes < last.tx_bytes or sample.rx_bytes < last.rx_bytes:
                # first sample, or the counters were reset: a new base, no rate for this interval
                self._ports[key] = _Port(now, sample.tx_bytes, sample.rx_bytes)
                continue
            elapsed = now - last.time
            if elapsed <= 0:
                continue
            last.tx_bps = (sample.tx_bytes - last.tx_bytes) * 8 / elapsed
            last.rx_bps = (sample.rx_bytes - last.rx_bytes) * 8 / elapsed
            last.rate_time = now
            last.time, last.tx_bytes, last.rx_bytes = now, sample.tx_bytes, sample.rx_bytes

    def forget(self, switch: str) -> None:
        """Drop every sample of `switch` (it disconnected: its counters may restart from 0)."""
        for key in [k for k in self._ports if k[0] == switch]:
            del self._ports[key]

    def _rate(self, switch: str, port: int, tx: bool, now: float) -> float | None:
        state = self._ports.get((switch, port))
        if state is None or state.rate_time is None or now - state.rate_time > self.stale_after:
            return None
        return state.tx_bps if tx else state.rx_bps

    def _measured(self, direction: LinkDirection, now: float) -> float | None:
        if direction.is_access:
            if direction.src in self.topology.switches:  # switch -> DTN: what the port sends
                return self._rate(direction.src, direction.src_port, True, now)
            return self._rate(direction.dst, direction.dst_port, False, now)  # DTN -> switch: what it receives
        sent = self._rate(direction.src, direction.src_port, True, now)
        return sent if sent is not None else self._rate(direction.dst, direction.dst_port, False, now)

    def load(self, direction: LinkDirection, now: float) -> DirectionLoad:
        """The load of one direction at `now`."""
        measured = self._measured(direction, now)
        nominal = None if measured is None else measured / self.scale
        fraction = None if measured is None or direction.capacity <= 0 else \
            measured / (direction.capacity * self.scale)
        return DirectionLoad(direction.id, direction.link, direction.src, direction.dst, direction.capacity,
                             direction.kind, measured, nominal, fraction)

    def loads(self, now: float) -> dict[str, DirectionLoad]:
        """Every direction of the topology (access links included), by direction id."""
        return {d.id: self.load(d, now) for d in self.topology.directions.values()}


def aggregate_bps(loads: Iterable[DirectionLoad]) -> float:
    """Nominal bits/s delivered to DTNs (switch -> DTN access directions), the booth's "total
    throughput": each transfer counted once however many links it crosses, and only what got
    through (traffic a meter drops at the ingress is not counted)."""
    # An access direction is named after its DTN; the switch -> DTN one ends at the DTN.
    return sum(load.nominal_bps or 0.0 for load in loads if load.is_access and load.dst == load.link)
