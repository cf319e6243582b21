"""Link verification: do the real links match the topology file, and which ones are down?

`LinkMonitor` watches every inter-switch link of a `Topology` (DTN access links are not
watched). The OpenFlow adapter feeds it what the switches say, with the time of each
observation (any monotonic clock, in seconds; no threads, no clock of its own):

- `switch_connected(dpid, now)` / `switch_disconnected(dpid, now)`;
- `ports_described(dpid, {port: up}, now)` (a port-description reply) and
  `port_state(dpid, port, up, now)` (a port-status message);
- `lldp_sent(dpid, port, now)` for every LLDP frame sent out of a port (`lldp_targets()`
  says which), and `lldp_seen(src_dpid, src_port, dst_dpid, dst_port, now)` for every LLDP
  frame of ours that a switch hands back;
- `tick(now)`, about once per LLDP interval.

Each of them returns the events it caused: a `LinkChange` when a link goes down or comes up
(each transition once), and a `Mismatch` when LLDP shows wiring the topology does not have
(once per distinct observation, and again only after it was gone for a while).

The rules:
- With no evidence a link counts as up (the routing default); its status is UNVERIFIED
  until LLDP is heard both ways on it, then UP.
- A link goes DOWN on evidence only: a port of either end is down, or LLDP was heard in a
  direction before and then none for `silence_timeout` seconds while both switches were
  connected, both ports up, and LLDP kept being sent out of that direction's source port.
- A switch disconnecting takes none of its links down (fail-secure switches keep
  forwarding): the status of its links is UNKNOWN.
- A DOWN link comes up again once both ports are up and LLDP is heard again in every
  direction it was ever heard in; a link where LLDP was never heard comes up again as soon
  as its ports are up (the no-evidence default).
- A mismatch never takes a link down (a link that loses its LLDP to miswiring goes DOWN by
  silence); it shows in `status` while it keeps being observed.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from sdn_app.core.topology import Topology

A_TO_B, B_TO_A = 0, 1


class LinkState(enum.Enum):
    """What `status` says about one link."""

    UP = "UP"                  # LLDP heard both ways since both switches connected, ports up
    DOWN = "DOWN"              # evidence: a port is down, or LLDP went silent
    UNVERIFIED = "UNVERIFIED"  # no evidence either way yet: counts as up
    UNKNOWN = "UNKNOWN"        # a switch of the link is not connected: last known (up) state holds


@dataclass(frozen=True, slots=True)
class LinkChange:
    """Link `link` went down (`up` False) or came up again, and why, in words."""

    link: str
    up: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Something the switches show that the topology does not have at `at`.

    `expected` is what the topology has there, `observed` what was seen instead; `message`
    says both in one sentence.
    """

    at: str
    expected: str
    observed: str
    message: str
    first_seen: float
    last_seen: float


@dataclass(frozen=True, slots=True)
class SwitchStatus:
    """One switch of the topology: connected or not, since `since` (None: never seen)."""

    name: str
    dpid: int
    connected: bool
    since: float | None


@dataclass(frozen=True, slots=True)
class LinkStatus:
    """One link: its state, why, and seconds since LLDP was last heard each way (None: never)."""

    name: str
    a: str  # "switch:port"
    b: str
    state: LinkState
    reason: str
    lldp_age_ab: float | None
    lldp_age_ba: float | None

    @property
    def up(self) -> bool:
        """Whether routing may use the link."""
        return self.state is not LinkState.DOWN


@dataclass(frozen=True, slots=True)
class NetworkStatus:
    """A snapshot at `now` (the monitor's clock): switches and links in topology order, and the
    mismatches observed now, oldest first."""

    now: float
    switches: tuple[SwitchStatus, ...]
    links: tuple[LinkStatus, ...]
    mismatches: tuple[Mismatch, ...]

    def link(self, name: str) -> LinkStatus:
        """The status of link `name`; KeyError if the topology has no such link."""
        for link in self.links:
            if link.name == name:
                return link
        raise KeyError(f"no link {name!r} in this status")


Event = LinkChange | Mismatch


@dataclass
class _Switch:
    name: str
    dpid: int
    connected: bool = False
    since: float | None = None  # of the current connected/disconnected state
    ever_connected: bool = False


@dataclass
class _End:
    switch: _Switch
    port: int
    up: bool | None = None  # None: no port state seen yet
    down_reason: str = ""
    up_since: float | None = None  # last time it came back up after being down
    sent: deque[float] = field(default_factory=deque)  # recent LLDP sends out of this port

    @property
    def label(self) -> str:
        return f"{self.switch.name}:{self.port}"


@dataclass
class _Link:
    name: str
    ends: tuple[_End, _End]
    heard: list[float | None] = field(default_factory=lambda: [None, None])  # A_TO_B, B_TO_A
    down: bool = False
    down_since: float | None = None
    reason: str = ""


@dataclass
class _Observed:
    mismatch: Mismatch
    expires: bool  # LLDP observations lapse after silence_timeout; switch/port ones are cleared


class LinkMonitor:
    """Link state and wiring checks for the inter-switch links of `topology` (see the module doc)."""

    def __init__(self, topology: Topology, lldp_interval: float = 1.0, silence_timeout: float = 3.5):
        if not lldp_interval > 0:
            raise ValueError(f"lldp_interval must be positive, got {lldp_interval}")
        if not silence_timeout > lldp_interval:
            raise ValueError(f"silence_timeout ({silence_timeout}s) must be longer than lldp_interval "
                             f"({lldp_interval}s): a link would go down between two LLDP frames")
        self.topology = topology
        self.lldp_interval = lldp_interval
        self.silence_timeout = silence_timeout
        # LLDP frames that must have been sent, and had time to arrive, before silence counts
        self._sends_needed = max(1, math.floor(silence_timeout / lldp_interval))
        self._switches = {s.dpid: _Switch(s.name, s.dpid) for s in topology.spec.switches}
        by_name = {s.name: s for s in self._switches.values()}
        self._links: dict[str, _Link] = {}
        self._ends: dict[tuple[int, int], tuple[_Link, int]] = {}  # (dpid, port) -> (link, end index)
        for spec in topology.spec.links:
            ends = (_End(by_name[spec.a], spec.a_port, sent=deque(maxlen=self._sends_needed + 2)),
                    _End(by_name[spec.b], spec.b_port, sent=deque(maxlen=self._sends_needed + 2)))
            link = _Link(spec.label, ends)
            self._links[link.name] = link
            for index, end in enumerate(ends):
                self._ends[(end.switch.dpid, end.port)] = (link, index)
        self._dtn_ports = {(d.switch, d.port): d.name for d in topology.spec.dtns}
        self._observed: dict[tuple, _Observed] = {}

    # -- naming -----------------------------------------------------------------------------

    def _where(self, dpid: int, port: int | None = None) -> str:
        switch = self._switches.get(dpid)
        name = switch.name if switch is not None else f"dpid {dpid:#x}"
        if port is None:
            return name
        return f"{name}:{port}" if switch is not None else f"{name} port {port}"

    # -- observations -----------------------------------------------------------------------

    def switch_connected(self, dpid: int, now: float) -> list[Event]:
        """Switch `dpid` connected (or reconnected). One not in the topology is a mismatch."""
        switch = self._switches.get(dpid)
        if switch is None:
            return self._observe(
                ("switch", dpid), f"dpid {dpid:#x}", f"no switch with this dpid in topology {self.topology.name}",
                "a switch connected with it",
                f"a switch with dpid {dpid:#x} connected, but topology {self.topology.name} has no such switch",
                now, expires=False)
        switch.connected, switch.since, switch.ever_connected = True, now, True
        return []

    def switch_disconnected(self, dpid: int, now: float) -> list[Event]:
        """Switch `dpid` disconnected: its links keep their state (status UNKNOWN)."""
        switch = self._switches.get(dpid)
        if switch is None:
            self._observed.pop(("switch", dpid), None)
            return []
        switch.connected, switch.since = False, now
        for key in [k for k in self._observed if k[0] == "port" and k[1] == dpid]:
            del self._observed[key]  # the next port description says again
        return []

    def port_state(self, dpid: int, port: int, up: bool, now: float, removed: bool = False) -> list[Event]:
        """A port-status message: port `port` of switch `dpid` is up or down (`removed`: deleted).

        Ports on no monitored link (DTN ports, spare ports, unknown switches) are ignored.
        """
        if removed:
            return self._set_port(dpid, port, False, now, "was removed (port status)")
        return self._set_port(dpid, port, up, now, "went down (port status)")

    def ports_described(self, dpid: int, ports: Mapping[int, bool], now: float) -> list[Event]:
        """A port-description reply of switch `dpid`: every port it has, and whether it is up.

        A port of a monitored link that the switch does not have is a mismatch.
        """
        events: list[Event] = []
        for (end_dpid, port), (link, _) in self._ends.items():
            if end_dpid != dpid:
                continue
            key = ("port", dpid, port)
            if port in ports:
                self._observed.pop(key, None)
                events += self._set_port(dpid, port, ports[port], now, "is down (port description)")
            else:
                where = self._where(dpid, port)
                events += self._observe(
                    key, where, f"port {port} for link {link.name}", "the switch has no such port",
                    f"switch {self._where(dpid)} has no port {port}, which link {link.name} uses in "
                    f"topology {self.topology.name}", now, expires=False)
        return events

    def lldp_sent(self, dpid: int, port: int, now: float) -> None:
        """An LLDP frame was sent out of port `port` of switch `dpid` at `now`."""
        found = self._ends.get((dpid, port))
        if found is not None:
            link, index = found
            link.ends[index].sent.append(now)

    def lldp_seen(self, src_dpid: int, src_port: int, dst_dpid: int, dst_port: int, now: float) -> list[Event]:
        """Our LLDP frame sent out of `src_dpid:src_port` arrived at `dst_dpid:dst_port`.

        Where the topology joins exactly those two ports, that direction of the link is heard;
        anything else is a mismatch naming the expected and the observed end.
        """
        found = self._ends.get((dst_dpid, dst_port))
        if found is not None:
            link, index = found
            far = link.ends[1 - index]
            if (far.switch.dpid, far.port) == (src_dpid, src_port):
                link.heard[B_TO_A if index == 0 else A_TO_B] = now
                change = self._update(link, now)
                return [change] if change is not None else []
        return self._lldp_mismatch(src_dpid, src_port, dst_dpid, dst_port, found, now)

    def tick(self, now: float) -> list[Event]:
        """Re-examine every link at `now` (LLDP silence); the transitions that happened."""
        changes = [self._update(link, now) for link in self._links.values()]
        return [c for c in changes if c is not None]

    # -- questions --------------------------------------------------------------------------

    def lldp_targets(self) -> list[tuple[int, int]]:
        """(dpid, port) to send LLDP out of now: link ports of connected switches not known down."""
        return [(end.switch.dpid, end.port) for link in self._links.values() for end in link.ends
                if end.switch.connected and end.up is not False]

    def down_links(self) -> list[LinkChange]:
        """Every link DOWN now, as the change that took it down (for a listener that starts late)."""
        return [LinkChange(link.name, False, link.reason) for link in self._links.values() if link.down]

    def is_up(self, link: str) -> bool:
        """Whether routing may use `link` (KeyError for a link not in the topology)."""
        return not self._links[link].down

    def status(self, now: float) -> NetworkStatus:
        """A snapshot of switches, links and current mismatches at `now`."""
        switches = tuple(SwitchStatus(s.name, s.dpid, s.connected, s.since) for s in self._switches.values())
        links = tuple(self._link_status(link, now) for link in self._links.values())
        current = [o.mismatch for o in self._observed.values() if self._current(o, now)]
        return NetworkStatus(now, switches, links, tuple(sorted(current, key=lambda m: (m.first_seen, m.at))))

    # -- internals --------------------------------------------------------------------------

    def _set_port(self, dpid: int, port: int, up: bool, now: float, down_words: str) -> list[Event]:
        found = self._ends.get((dpid, port))
        if found is None:
            return []
        link, index = found
        end = link.ends[index]
        if up:
            if end.up is False:
                end.up_since = now
            end.up = True
        else:
            if end.up is not False:
                end.down_reason = f"port {end.label} {down_words}"
            end.up = False
        change = self._update(link, now)
        return [change] if change is not None else []

    def _silence(self, link: _Link, now: float) -> str | None:
        """Why LLDP silence is evidence against `link` now, or None."""
        a, b = link.ends
        if not (a.switch.connected and b.switch.connected):
            return None
        for direction, (src, dst) in ((A_TO_B, (a, b)), (B_TO_A, (b, a))):
            last = link.heard[direction]
            if last is None:
                continue
            since = max(t for t in (last, a.switch.since, b.switch.since, a.up_since, b.up_since) if t is not None)
            if now - since < self.silence_timeout:
                continue
            # the frames that should have come back: sent after `since`, each with half an interval to arrive
            sent = sum(1 for t in src.sent if since < t <= now - self.lldp_interval / 2)
            if sent >= self._sends_needed:
                return f"no LLDP from {src.label} on {dst.label} for {self.silence_timeout:g}s"
        return None

    def _evidence(self, link: _Link, now: float) -> str | None:
        """Why `link` is down now, or None when nothing says so."""
        for end in link.ends:
            if end.up is False:
                return end.down_reason
        return self._silence(link, now)

    def _update(self, link: _Link, now: float) -> LinkChange | None:
        """Apply the rules to `link`; the transition, if there is one."""
        why = self._evidence(link, now)
        if not link.down:
            if why is None:
                return None
            link.down, link.down_since, link.reason = True, now, why
            return LinkChange(link.name, False, why)
        if why is not None:
            link.reason = why  # still down, perhaps for another reason now
            return None
        assert link.down_since is not None
        ever = [t for t in link.heard if t is not None]
        # LLDP must be heard after the link went down and after its ports came back up
        after = max(t for t in (link.down_since, *(end.up_since for end in link.ends)) if t is not None)
        if ever and not all(t > after for t in ever):
            return None  # wait for LLDP in every direction it was ever heard in
        link.down, link.down_since = False, None
        link.reason = "LLDP heard again" if ever else "ports up again (no LLDP heard on this link yet)"
        return LinkChange(link.name, True, link.reason)

    def _link_status(self, link: _Link, now: float) -> LinkStatus:
        a, b = link.ends
        ages = [None if t is None else max(0.0, now - t) for t in link.heard]
        absent = [end.switch for end in link.ends if not end.switch.connected]
        gone = "; ".join(f"switch {s.name} {'disconnected' if s.ever_connected else 'not connected yet'}"
                         for s in absent)
        if link.down:
            reason = link.reason
            if not self._evidence(link, now):
                reason += "; waiting for LLDP to come back"
            if gone:
                reason += f" ({gone})"
            state = LinkState.DOWN
        elif absent:
            state, reason = LinkState.UNKNOWN, gone
            if any(s.ever_connected for s in absent):
                reason += ": counted as up (a fail-secure switch keeps forwarding)"
        else:
            since = max(a.switch.since or 0.0, b.switch.since or 0.0)
            fresh = [t is not None and t >= since for t in link.heard]
            if all(fresh):
                state, reason = LinkState.UP, "verified by LLDP both ways"
            elif any(fresh):
                heard_from, silent_from = (a, b) if fresh[A_TO_B] else (b, a)
                state = LinkState.UNVERIFIED
                reason = (f"LLDP heard from {heard_from.label} on {silent_from.label}, "
                          f"none yet from {silent_from.label} on {heard_from.label}")
            else:
                state, reason = LinkState.UNVERIFIED, "no LLDP heard on it yet"
        return LinkStatus(link.name, a.label, b.label, state, reason, ages[A_TO_B], ages[B_TO_A])

    def _lldp_mismatch(self, src_dpid: int, src_port: int, dst_dpid: int, dst_port: int,
                       found: tuple[_Link, int] | None, now: float) -> list[Event]:
        at = self._where(dst_dpid, dst_port)
        src_switch = self._switches.get(src_dpid)
        observed = f"LLDP from {self._where(src_dpid, src_port)}"
        if src_switch is None:
            observed += f", a switch not in topology {self.topology.name}"
        dst_switch = self._switches.get(dst_dpid)
        if found is not None:
            link, index = found
            far = link.ends[1 - index]
            expected = f"{far.label} (link {link.name})"
            message = f"wiring mismatch at {at}: topology {self.topology.name} connects it to {expected}, " \
                      f"but {observed} arrives there"
        elif dst_switch is None:
            expected = f"nothing: dpid {dst_dpid:#x} is not in topology {self.topology.name}"
            message = f"{observed} arrives at {at}, a switch not in topology {self.topology.name}"
        elif (dst_switch.name, dst_port) in self._dtn_ports:
            dtn = self._dtn_ports[(dst_switch.name, dst_port)]
            expected = f"DTN {dtn}"
            message = f"wiring mismatch at {at}: topology {self.topology.name} attaches DTN {dtn} there, " \
                      f"but {observed} arrives there"
        else:
            declared = dst_port in self.topology.switches[dst_switch.name].ports
            expected = "nothing (no link on this port)" if declared else \
                f"nothing (switch {dst_switch.name} has no port {dst_port} in the topology)"
            message = f"wiring mismatch at {at}: topology {self.topology.name} has no link on this port, " \
                      f"but {observed} arrives there"
        return self._observe(("lldp", src_dpid, src_port, dst_dpid, dst_port), at, expected, observed, message,
                             now, expires=True)

    def _current(self, observed: _Observed, now: float) -> bool:
        return not observed.expires or now - observed.mismatch.last_seen <= self.silence_timeout

    def _observe(self, key: tuple, at: str, expected: str, observed: str, message: str, now: float,
                 expires: bool) -> list[Event]:
        """Record a mismatch; it is an event when new, or back after it lapsed."""
        known = self._observed.get(key)
        if known is not None and self._current(known, now):
            m = known.mismatch
            self._observed[key] = _Observed(Mismatch(m.at, m.expected, m.observed, m.message, m.first_seen, now),
                                            expires)
            return []
        mismatch = Mismatch(at, expected, observed, message, now, now)
        self._observed[key] = _Observed(mismatch, expires)
        return [mismatch]
