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
(None) rather than the last value forever. A switch that reconnects may restart its counters
from anything, even a value above the old base: the adapter calls `forget(switch)` on each
connect and disconnect, so its first sample after a reconnect is a new base.

Counters a switch cannot give: OpenFlow marks an unavailable counter as all ones (2^64 - 1),
and Open vSwitch reports that for a port being removed. A sample with a tx or rx counter
outside 0..2^64-2 (`COUNTER_MAX`) is unknown, not load: the port's rate is None at once
and its base is dropped, so the next valid sample is a new base and the one after it gives
the next rate.

Impossible rates: a rate above `PLAUSIBLE_FACTOR` times what the port can carry (the
capacity of its link direction in the topology, times `scale`) is no measurement either; the
port's rate is None and that sample is the new base. The factor is 2, not just above 1,
because a sample is timed when its reply is handled, not when the switch read its counters: a
reply handled late followed by one on time shortens the interval, and a full link polled each
second with one reply half a second late reads twice its capacity. Between 1 and 2 the rate
is shown as measured. A direction whose sending port is unknown falls back to what the
receiving port counted, as it does when the sender is not heard from.

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

import math
from collections.abc import Iterable
from dataclasses import dataclass

from sdn_app.core.topology import LinkDirection, Topology

DEFAULT_STALE_AFTER = 3.5  # seconds: more than three missed polls of one second
COUNTER_MAX = 2**64 - 2  # the largest real counter: all ones (2^64 - 1) means unavailable
PLAUSIBLE_FACTOR = 2.0  # a rate above this many times what the port can carry is not believed


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
    fraction: float | None  # measured / (capacity x scale), 0..1 (may exceed 1 briefly, at most PLAUSIBLE_FACTOR)

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
        # (switch, port) -> the highest believable bits/s it sends / receives on the wire; a port
        # on no link of the topology has no limit (and no direction reports it)
        self._tx_most: dict[tuple[str, int], float] = {}
        self._rx_most: dict[tuple[str, int], float] = {}
        for d in topology.directions.values():
            if d.capacity > 0 and d.src in topology.switches:
                self._tx_most[(d.src, d.src_port)] = PLAUSIBLE_FACTOR * d.capacity * scale
            if d.capacity > 0 and d.dst in topology.switches:
                self._rx_most[(d.dst, d.dst_port)] = PLAUSIBLE_FACTOR * d.capacity * scale

    def observe(self, switch: str, counters: Iterable[PortCounters], now: float) -> None:
        """Record the counters of `switch`'s ports sampled at `now` (seconds, monotonic).

        A port whose counters are unavailable (all ones) or imply a rate beyond what it can
        carry gets an unknown rate (see the module docstring).
        """
        for sample in counters:
            key = (switch, sample.port)
            if not (_real(sample.tx_bytes) and _real(sample.rx_bytes)):
                self._ports.pop(key, None)  # unknown now; the next real sample is a new base
                continue
            last = self._ports.get(key)
            if last is None or sample.tx_bytes < last.tx_bytes or sample.rx_bytes < last.rx_bytes:
                # first sample, or the counters were reset: a new base, no rate for this interval
                self._ports[key] = _Port(now, sample.tx_bytes, sample.rx_bytes)
                continue
            elapsed = now - last.time
            if elapsed <= 0:
                continue
            tx_bps = (sample.tx_bytes - last.tx_bytes) * 8 / elapsed
            rx_bps = (sample.rx_bytes - last.rx_bytes) * 8 / elapsed
            if tx_bps > self._tx_most.get(key, math.inf) or rx_bps > self._rx_most.get(key, math.inf):
                self._ports[key] = _Port(now, sample.tx_bytes, sample.rx_bytes)  # not believed: unknown, new base
                continue
            last.tx_bps, last.rx_bps, last.rate_time = tx_bps, rx_bps, now
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


def _real(counter: int) -> bool:
    """Whether `counter` is a value a switch measured (not all ones, its "unavailable")."""
    return isinstance(counter, int) and 0 <= counter <= COUNTER_MAX


def aggregate_bps(loads: Iterable[DirectionLoad]) -> float:
    """Nominal bits/s delivered to DTNs (switch -> DTN access directions), the booth's "total
    throughput": each transfer counted once however many links it crosses, and only what got
    through (traffic a meter drops at the ingress is not counted). A direction whose load is
    unknown adds nothing."""
    # An access direction is named after its DTN; the switch -> DTN one ends at the DTN.
    return sum(load.nominal_bps or 0.0 for load in loads if load.is_access and load.dst == load.link)
