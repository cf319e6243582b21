"""What the live map shows, gathered once a second and pushed to every open page.

`LiveMap` reads the core only through the worker (`worker.call` for a snapshot of the live
reservations and the links the core holds down; a subscription to `worker.hub` for
reservation events), and the switches only through the fabric's thread-safe snapshots
(`fabric.utilization()`, `fabric.link_status()`). It owns nothing the core decides with.

Congestion is the core's own verdict (`ReservationBook.conditions`, read through the worker
with the snapshot): each congested link direction is marked with its measured load and the part
that is not the controller's; each reservation carries the reason of its last move, and the
typed decision of its last change (`core.decisions`: the verdict shown is the record's, never
read from the reason text).

Domains: the snapshot's topology lists the interdomain ports and the neighbouring domains' remote
sites (placed in the WAN's area by `layout`). A reservation with a remote end carries the remote
part of its route (its switch, the interdomain port, the remote site) and, in `nsi`, what was
requested over NSI: the neighbour's NSA and, once both segments are booked, the remote connection
id, port and VLAN read back from its reason (`nsi_segments.SEGMENT_NOTE`); a reservation booked by
another domain through tsdn's NSI provider carries its NSI connection id.

Threads: one follows the reservation events, one ticks every `interval` seconds (loads, link
states, throughput history, metrics). Each page's server-sent-events stream is a queue fed by
both: `subscribe()` returns the queue, whose first message is the full snapshot; then
`reservation`, `link` and `tick` messages; None at shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from sdn_app.core.decisions import Kind, to_dict
from sdn_app.core.nsi import LABEL as NSI_LABEL
from sdn_app.core.nsi_segments import SEGMENT_LABEL, SEGMENT_NOTE
from sdn_app.core.rerouting.congestion import Condition
from sdn_app.core.reservation import Event, Principal, Reservation, Role, State
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import format_vlans
from sdn_app.core.units import format_bandwidth
from sdn_app.core.utilization import DirectionLoad, UtilizationMeter, aggregate_bps
from sdn_app.web.layout import MapLayout, map_layout, nsa_short
from sdn_app.web.metrics import ControllerMetrics, reroute_cause

log = logging.getLogger("tsdn.web")
INTERVAL = 1.0  # seconds between ticks
HISTORY_SECONDS = 300  # the throughput chart's span
RECENT_EVENTS = 200
CLIENT_BACKLOG = 1000  # messages a slow page may fall behind before it is dropped
VIEWER = Principal("live-map", Role.ADMIN)  # read-only: the map only lists


def _rate(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def load_json(load: DirectionLoad) -> dict[str, Any]:
    return {"id": load.direction, "src": load.src, "dst": load.dst, "capacity_bps": load.capacity,
            "measured_bps": _rate(load.measured_bps), "nominal_bps": _rate(load.nominal_bps),
            "fraction": _ratio(load.fraction)}


class Domains:
    """Where the neighbouring domains are on the map: each remote DTN's interdomain port, switch and
    remote site (`layout.remote`)."""

    def __init__(self, topology: Topology, layout: MapLayout):
        self.topology = topology
        self._site = {dtn: point.name for point in layout.remote for dtn in point.dtns}

    def remote_parts(self, r: Reservation) -> list[dict[str, Any]]:
        """The parts of `r`'s route beyond tsdn's domain: per remote end, from the interdomain
        port's switch across the port to the remote site."""
        parts = []
        for end in (r.request.src, r.request.dst):
            used = self.topology.via(end, r.request.via)  # the port the reservation uses now (re-homed: not beyond)
            if used is None:
                continue
            port = self.topology.interdomain[used]
            parts.append({"end": end, "port": port.name, "switch": port.switch, "site": self._site.get(end),
                          "domain": port.peer.nsa, "domain_name": nsa_short(port.peer.nsa)})
        return parts


def nsi_json(r: Reservation) -> dict[str, Any] | None:
    """What of `r` is NSI's: `requested` (tsdn asked a neighbour for its WAN segment: the
    neighbour's NSA and, once booked, the remote connection id, port and VLAN), `provided` (another
    domain booked it through tsdn's NSI provider: its connection id), or None; `text` says it."""
    peer = r.labels.get(SEGMENT_LABEL)
    if peer:
        short = nsa_short(peer)
        found = SEGMENT_NOTE.search(r.reason or "")
        if found is not None and found["nsa"] == peer:
            return {"kind": "requested", "nsa": peer, "domain_name": short, "connection_id": found["connection"],
                    "port": found["port"], "vlan": int(found["vlan"]),
                    "text": f"NSI {found['connection']} at {short}, VLAN {found['vlan']}"}
        vlan = r.request.dst_vlan if r.request.dst_vlan is not None else r.request.src_vlan
        return {"kind": "requested", "nsa": peer, "domain_name": short, "connection_id": None, "port": None,
                "vlan": vlan, "text": f"NSI segment at {short}: " + ("requesting" if not r.state.is_final
                                                                      else r.state.value.lower())}
    connection = r.labels.get(NSI_LABEL)
    if connection:
        return {"kind": "provided", "connection_id": connection,
                "text": f"NSI {connection}, booked through tsdn by {r.owner}"}
    return None


def reservation_json(r: Reservation, last_move: dict[str, Any] | None = None,
                     domains: Domains | None = None) -> dict[str, Any]:
    """A live reservation for the page, with the typed decision of its last change (its `verdict`
    is shown); `last_move`: when, why and the reason of its last move; its `nsi` part (`nsi_json`)
    and, with `domains`, the `remote` parts of its route."""
    decision = r.decision
    primary = r.route.primary if r.route is not None else None
    backup = r.route.backup if r.route is not None else None
    return {"id": r.id, "name": r.name, "owner": r.owner, "src": r.request.src, "dst": r.request.dst,
            "bandwidth_bps": r.request.bandwidth, "bandwidth": format_bandwidth(r.request.bandwidth),
            "state": r.state.value, "reason": r.reason, "verdict": decision.verdict if decision else None,
            "decision": to_dict(decision) if decision else None,
            "switches": list(primary.switches) if primary else [], "links": list(primary.links) if primary else [],
            "backup_links": list(backup.links) if backup else [], "labels": dict(r.labels), "last_move": last_move,
            "priority": r.priority, "floor_bps": r.request.bandwidth if r.elastic else None,
            "ceiling_bps": r.ceiling or None, "share_bps": r.meter_bps, "share": format_bandwidth(r.meter_bps),
            "terms": _terms_text(r), "nsi": nsi_json(r),
            "remote": domains.remote_parts(r) if domains is not None else []}


def _terms_text(r: Reservation) -> str:
    """How it is booked, as the legend shows it: "elastic 10G-100G, share 30G, priority 3"."""
    if r.elastic:
        return (f"elastic {format_bandwidth(r.request.bandwidth)}-{format_bandwidth(r.ceiling)}, share "
                f"{format_bandwidth(r.meter_bps)}, priority {r.priority}")
    if r.schedule:
        return f"deadline schedule, now {format_bandwidth(r.meter_bps)}, priority {r.priority}"
    return f"guaranteed, priority {r.priority}"


def congestion_text(c: Condition) -> str:
    """e.g. "97% of 1T, 560G not ours"."""
    return f"{c.fraction:.0%} of {format_bandwidth(c.capacity)}, {format_bandwidth(int(c.unowned_bps))} not ours"


def condition_json(c: Condition) -> dict[str, Any]:
    return {"id": c.direction, "link": c.link, "congested": c.congested, "measured_bps": _rate(c.measured_bps),
            "unowned_bps": _rate(c.unowned_bps), "fraction": _ratio(c.fraction), "since": c.since,
            "text": congestion_text(c)}


def event_verb(event: Event) -> str:
    """One word for the events feed: created, active, moving, moved, rerouted, degraded, ..."""
    state = event.reservation.state
    if event.previous is None:
        return "created"
    if reroute_cause(event) is not None:
        return "moving" if state is State.MOVING else "rerouted"
    if event.decision is not None and event.decision.kind is Kind.SHARED:
        return "reshared"
    if state is State.ACTIVE and event.previous is State.MOVING:
        return "moved"
    if state is State.ACTIVE and event.previous is State.DEGRADED:
        return "restored"
    return state.value.lower()


def event_json(event: Event) -> dict[str, Any]:
    r = event.reservation
    verb = event_verb(event)
    decision = event.decision
    return {"kind": "reservation", "time": event.time, "sequence": event.sequence, "verb": verb,
            "id": r.id, "src": r.request.src, "dst": r.request.dst, "state": r.state.value,
            "previous": event.previous.value if event.previous else None, "reason": event.reason,
            "decision": to_dict(decision) if decision else None,
            "links": list(r.route.primary.links) if r.route is not None else [],
            "text": f"{r.request.src}\u2192{r.request.dst} {format_bandwidth(r.request.bandwidth)} {verb}"
                    + (f": {event.reason}" if event.reason else "")}


class LiveMap:
    """The live map's state and its feeds (SSE queues, Prometheus metrics)."""

    def __init__(self, worker: Any, topology: Topology, fabric: Any | None = None, scale: float = 1.0,
                 interval: float = INTERVAL, wall_clock: Callable[[], float] = time.time):
        self.worker = worker
        self.topology = topology
        self.fabric = fabric
        self.scale = scale
        self.interval = interval
        self.wall_clock = wall_clock
        self.metrics = ControllerMetrics()
        self.layout = map_layout(topology)
        self.domains = Domains(topology, self.layout)
        self._shown_directions = {d.id: (d.link, d.src, d.dst) for d in topology.directions.values()
                                  if not d.is_access}
        self._congested: list[dict[str, Any]] = []  # every congested direction, access links included
        self._idle_meter = UtilizationMeter(topology, scale)  # no samples: every load unknown
        self._lock = threading.Lock()
        self._clients: set[Any] = set()
        self._reservations: dict[str, dict[str, Any]] = {}
        self._links: dict[str, dict[str, Any]] = {}
        self._last_moves: dict[str, dict[str, Any]] = {}  # live reservation -> its last move
        self._conditions: dict[str, Condition] = {}  # the core's congestion verdicts at the last tick
        self._events: deque[dict[str, Any]] = deque(maxlen=RECENT_EVENTS)
        self._history: deque[dict[str, Any]] = deque(maxlen=max(2, int(HISTORY_SECONDS / interval)))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._subscription = None
        self._tick_once(core=False)  # a page opened before the first tick sees the links already

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._subscription = self.worker.hub.subscribe(lambda event: True)
        for target, name in ((self._follow_events, "tsdn-web-events"), (self._tick_loop, "tsdn-web-tick")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._subscription is not None:
            self.worker.hub.unsubscribe(self._subscription)
        for thread in self._threads:
            thread.join(timeout)
        with self._lock:
            clients, self._clients = self._clients, set()
        for client in clients:
            with contextlib.suppress(queue.Full):
                client.put_nowait(None)

    # -- feeds ------------------------------------------------------------------------------

    def subscribe(self, client: Any = None) -> Any:
        """Feed (kind, data) messages for one page into `client` (anything with a thread-safe
        `put_nowait` that raises `queue.Full`; default a new bounded queue.Queue), the snapshot
        first; return it."""
        if client is None:
            client = queue.Queue(maxsize=CLIENT_BACKLOG)
        with self._lock:
            client.put_nowait(("snapshot", self._snapshot_locked()))
            self._clients.add(client)
        return client

    def unsubscribe(self, client: Any) -> None:
        with self._lock:
            self._clients.discard(client)

    def _broadcast(self, kind: str, data: dict[str, Any]) -> None:
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            try:
                client.put_nowait((kind, data))
            except queue.Full:  # too slow: drop it; its page reconnects and gets a fresh snapshot
                self.unsubscribe(client)
                with contextlib.suppress(queue.Full):
                    client.put_nowait(None)

    def _follow_events(self) -> None:
        subscription = self._subscription
        assert subscription is not None
        while not self._stop.is_set():
            try:
                event = subscription.events.get(timeout=0.5)
            except queue.Empty:  # an overflowed subscription's end marker may not have fitted
                event = None
                if not subscription.overflowed:
                    continue
            if event is None:
                if self._stop.is_set() or not subscription.overflowed:
                    return
                # A burst left this thread too far behind and the hub let it go: follow again. The
                # next tick reloads the reservations from the core; the events in between are lost.
                log.warning("live map: fell more than %d reservation events behind; some are missing from the "
                            "events feed, the reservations are reloaded at the next tick", subscription.events.maxsize)
                subscription = self._subscription = self.worker.hub.subscribe(lambda event: True)
                continue
            try:
                self._reservation_event(event)
            except Exception:
                log.exception("live map: reservation event %s failed", event)

    def _reservation_event(self, event: Event) -> None:
        self.metrics.observe_events([event])
        data = event_json(event)
        r = event.reservation
        cause = reroute_cause(event)
        with self._lock:
            self._events.append(data)
            if r.state.is_final:
                self._last_moves.pop(r.id, None)
            elif cause is not None:
                self._last_moves[r.id] = {"time": event.time, "cause": cause, "reason": event.reason,
                                          "links": list(r.route.primary.links) if r.route is not None else []}
            shown = reservation_json(r, self._last_moves.get(r.id), self.domains)
            if r.state.is_final:
                self._reservations.pop(r.id, None)
            else:
                self._reservations[r.id] = shown
        self._broadcast("reservation", {"event": data, "reservation": shown})

    # -- the tick ---------------------------------------------------------------------------

    def _tick_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick_once()
            except Exception:
                log.exception("live map tick failed")
            self._stop.wait(self.interval)

    def _core_view(self) -> tuple[list[Reservation], frozenset[str], dict[str, int], list[Condition]] | None:
        if not getattr(self.worker, "running", True):
            return None
        book = self.worker.book

        def view() -> tuple[list[Reservation], frozenset[str], dict[str, int], list[Condition]]:
            return book.snapshot(VIEWER), book.down_links(), dict(book.refusals), book.conditions()

        try:
            return self.worker.call(view, timeout=5.0)
        except Exception as why:  # shutting down, or the core is busy: try again next tick
            log.debug("live map: no core snapshot this tick: %s", why)
            return None

    def _tick_once(self, core: bool = True) -> None:
        now = self.wall_clock()
        loads = self.fabric.utilization() if self.fabric is not None else self._idle_meter.loads(time.monotonic())
        status = self.fabric.link_status() if self.fabric is not None else None
        observed = {link.name: link for link in status.links} if status is not None else {}
        core = self._core_view() if core else None
        down_in_core = core[1] if core is not None else frozenset(
            name for name, link in self._links.items() if link["state"] == "down")
        conditions = {c.direction: c for c in core[3]} if core is not None else self._conditions
        by_link: dict[str, list[DirectionLoad]] = {}
        for load in loads.values():
            if not load.is_access:
                by_link.setdefault(load.link, []).append(load)
        links: dict[str, dict[str, Any]] = {}
        changes: list[dict[str, Any]] = []
        for name, spec in self.topology.links.items():
            seen = observed.get(name)
            if name in down_in_core or (seen is not None and not seen.up):
                state = "down"
            else:
                state = seen.state.value.lower() if seen is not None else "up"
            reason = seen.reason if seen is not None else ("reported down" if state == "down" else "")
            forward, backward = self.topology.link_directions[name]
            directions = [load_json(loads[d.id]) for d in (forward, backward) if d.id in loads]
            for direction in directions:
                condition = conditions.get(direction["id"])
                direction["congested"] = condition is not None and condition.congested
                direction["congestion"] = condition_json(condition) if condition is not None else None
            congested = [d["congestion"]["text"] for d in directions if d["congested"]]
            peak = max((d["fraction"] or 0.0 for d in directions), default=0.0)
            links[name] = {"name": name, "a": spec.a, "b": spec.b, "kind": spec.kind, "state": state,
                           "reason": reason, "fraction": round(peak, 4), "directions": directions,
                           "congested": bool(congested), "congestion": "; ".join(congested)}
            before = self._links.get(name)
            if before is not None and (before["state"] == "down") != (state == "down"):
                changes.append({"kind": "link", "time": now, "link": name, "up": state != "down",
                                "verb": "up" if state != "down" else "down",
                                "text": f"link {name} {'up' if state != 'down' else 'down'}"
                                        + (f": {reason}" if reason else "")})
        congested = [condition_json(c) for c in sorted(conditions.values(), key=lambda c: c.direction)
                     if c.congested]
        measured = aggregate_bps(loads.values())
        with self._lock:
            self._conditions = conditions
            self._congested = congested
            if core is not None:
                self._reservations = {r.id: reservation_json(r, self._last_moves.get(r.id), self.domains)
                                      for r in core[0]}
            reserved = sum(r["bandwidth_bps"] for r in self._reservations.values()
                           if r["state"] in ("ACTIVE", "MOVING", "DEGRADED"))
            point = {"time": now, "measured_bps": round(measured, 1), "reserved_bps": reserved}
            self._history.append(point)
            self._links = links
            self._events.extend(changes)
            counts: dict[str, int] = {}
            for r in self._reservations.values():
                counts[r["state"]] = counts.get(r["state"], 0) + 1
            tick = {"time": now, "links": list(links.values()), "reservations": list(self._reservations.values()),
                    "congested": congested, "throughput": point}
        self.metrics.set_links(loads, {name: link["state"] != "down" for name, link in links.items()})
        self.metrics.set_reservations(counts)
        if core is not None:
            self.metrics.set_refusals(core[2])
            self.metrics.set_congestion(core[3], self._shown_directions)
        self.metrics.throughput.set(measured)
        for change in changes:
            self._broadcast("link", change)
        self._broadcast("tick", tick)

    # -- snapshot ---------------------------------------------------------------------------

    def topology_json(self) -> dict[str, Any]:
        """The topology as the page draws it: each switch with its place in the `width` x `height`
        picture (x, y) and in its pane (pane, u, v, dx, dy, role, slot), which the page fits to the
        window by the rules in `layout` (sdn_app/web/layout.py)."""
        layout = self.layout
        topo = self.topology
        return {
            "name": topo.name, "description": topo.spec.description,
            "width": layout.width, "height": layout.height, "layout": layout.page_json(),
            "sites": [{"name": s.name, "kind": s.kind, "lat": s.lat, "lon": s.lon, "x": round(s.x, 1),
                       "y": round(s.y, 1), "switches": list(s.switches), "pane": s.pane} for s in layout.sites],
            "switches": [{"name": name, "dpid": spec.dpid, "description": spec.description,
                          "site": (site.name if (site := topo.site_of(name)) else None),
                          "x": round(layout.switches[name][0], 1), "y": round(layout.switches[name][1], 1),
                          **layout.placements[name].json()}
                         for name, spec in topo.switches.items()],
            "links": [{"name": name, "a": spec.a, "b": spec.b, "a_port": spec.a_port, "b_port": spec.b_port,
                       "kind": spec.kind, "capacity_ab": topo.link_directions[name][0].capacity,
                       "capacity_ba": topo.link_directions[name][1].capacity} for name, spec in topo.links.items()],
            "dtns": [{"name": d.name, "switch": d.switch, "nic_speed": d.nic_speed, "beyond": d.beyond,
                      "domain": topo.domain_of(d.name)} for d in topo.dtns.values()],
            "interdomain": [{"name": p.name, "switch": p.switch, "port": p.port, "capacity": p.capacity,
                             "vlans": format_vlans(p.vlans), "peer_nsa": p.peer.nsa, "peer_stp": p.peer.stp,
                             "domain_name": nsa_short(p.peer.nsa), "description": p.description,
                             "sites": [s.name for s in layout.remote if s.port == p.name]}
                            for p in topo.interdomain.values()],
            "remote_sites": [{"name": s.name, "port": s.port, "switch": s.switch, "domain": s.domain,
                              "domain_name": nsa_short(s.domain), "lat": s.lat, "lon": s.lon, "x": s.x, "y": s.y,
                              "dtns": list(s.dtns), **s.placement.json()} for s in layout.remote],
        }

    def _snapshot_locked(self) -> dict[str, Any]:
        return {"time": self.wall_clock(), "scale": self.scale, "topology": self.topology_json(),
                "links": list(self._links.values()), "reservations": list(self._reservations.values()),
                "congested": list(self._congested), "events": list(self._events)[-50:],
                "throughput": list(self._history)}

    def snapshot(self) -> dict[str, Any]:
        """Everything the page draws: topology with coordinates, links with state and load,
        live reservations with routes, recent events, throughput history."""
        with self._lock:
            return self._snapshot_locked()
