"""ALTO (RFC 7285) information about a tsdn network: the network map, the cost maps, endpoint
costs and the requests that ask for them, as plain data. Pure: no I/O; the HTTP side
(`sdn_app/web/alto.py`) serves it.

The network map has one PID per site (a switch of no site is a PID of its own), holding its DTNs'
addresses (IPv4 /32, and the DTN's `ipv6_pool` when the topology gives one), and the catch-all
PID `default` (0.0.0.0/0 and ::/0). Sites without DTNs have no PID (no endpoint to cost).

Costs come from the book's own path computation (`PathFinder`) over one `LinkState`, the free
bandwidth of every link direction at one instant (`AltoView.measure`, on the core thread):

- `routingcost` (numerical and ordinal): the path tsdn would book for a new reservation (policy
  `shortest`, at least 1 bit/s free): its one-way latency in ms when every link of the topology
  declares one (as `shortest` then minimizes), else its switch-to-switch hops;
- `hopcount` (RFC 9439 section 4.5): that path's switch-to-switch links;
- `bw-residual` (RFC 9439 section 5.2, bits/s): the most a new reservation could book now: on
  the widest path, the least over its directions of capacity minus what is booked at this
  instant (QueryAvailability's `max_bandwidth_bps` for a window starting now);
- `bw-available` (RFC 9439 section 5.3, bits/s): the same, also less the load measured on each
  direction that is not the controller's own traffic (another tenant's), none where the link
  watch calls a direction congested (the rerouter's `Headroom`); equal to `bw-residual` where
  nothing is measured (no switches).

Between two PIDs a cost is that of their best DTN pair: the least routing cost and hop count,
the most bandwidth. The endpoint cost service answers per DTN pair. Routing cost and hop count
describe the route whatever a DTN's NIC has left; the bandwidth metrics include the access links.

Per `LinkState` the costs are computed once (`AltoView.costs`, cached for the last states): a
route per ordered pair of switches with DTNs (three `PathFinder.route` calls), then anything
asked is a few dictionary lookups.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.paths import PathFinder, PathRequest
from sdn_app.core.rerouting.relief import Headroom
from sdn_app.core.topology import Topology

DEFAULT_PID = "default"  # the catch-all PID: every address no DTN has
NETWORK_MAP_ID = "networkmap"
FILTERED_COST_MAP_ID = "filtered-costmap"
ENDPOINT_COST_ID = "endpointcost"
UNLIMITED = 1 << 62  # a path of no switch-to-switch link: only the access links limit it
MAX_ENDPOINT_PAIRS = 10_000  # source x destination addresses in one endpoint cost request (about 10 ms)
MAX_CONSTRAINTS = 16
MAX_SUBSCRIPTIONS = 64  # resources one update stream carries at once
CACHED_STATES = 4
_NAME = re.compile(r"^[0-9A-Za-z:@_-]{1,64}$")  # RFC 7285 PIDName, ResourceID, RFC 8895 client ids
_PID_UNSAFE = re.compile(r"[^0-9A-Za-z:@_-]+")
_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "gt": lambda a, b: a > b, "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b,
    "le": lambda a, b: a <= b, "eq": lambda a, b: a == b,
}
_EVERY_V4 = "0.0.0.0/0"
_EVERY_V6 = "::/0"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class AltoError(InvalidArgument):
    """A request ALTO refuses (RFC 7285 section 8.5.2): `code` is E_SYNTAX, E_MISSING_FIELD,
    E_INVALID_FIELD_TYPE or E_INVALID_FIELD_VALUE; `field` names the JSON field (dotted path)."""

    def __init__(self, code: str, message: str, field: str | None = None, value: Any = None):
        super().__init__(message)
        self.alto_code = code
        self.field = field
        self.value = value

    def meta(self) -> dict[str, Any]:
        """The error response's `meta`: the code, the field and its value where known, and the
        reason for people (`message`, which clients ignore)."""
        meta: dict[str, Any] = {"code": self.alto_code}
        if self.alto_code == "E_SYNTAX":
            meta["syntax-error"] = str(self)
        if self.field is not None:
            meta["field"] = self.field
        if self.value is not None:
            meta["value"] = _short(self.value)
        meta["message"] = str(self)
        return meta


def _short(value: Any) -> Any:
    """A value as an error may echo it: scalars as they are, anything long cut short."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def pid_name(text: str) -> str:
    """A PIDName (RFC 7285 section 10.1: at most 64 of `0-9 A-Z a-z - : @ _`) from a site or
    switch name: other characters become `-` (`AmLight/FIU Miami` -> `AmLight-FIU-Miami`)."""
    name = _PID_UNSAFE.sub("-", text).strip("-")[:64].strip("-")
    return name or "pid"


@dataclass(frozen=True)
class Pid:
    """One PID: its name, its DTNs and their address prefixes."""

    name: str
    dtns: tuple[str, ...]
    ipv4: tuple[str, ...]
    ipv6: tuple[str, ...]

    def json(self) -> dict[str, list[str]]:
        entry: dict[str, list[str]] = {}
        if self.ipv4:
            entry["ipv4"] = list(self.ipv4)
        if self.ipv6:
            entry["ipv6"] = list(self.ipv6)
        return entry


class NetworkMap:
    """PIDs of a topology: one per site with DTNs (or per switch of no site), and `default`."""

    def __init__(self, topology: Topology):
        self.topology = topology
        groups: dict[str, list[str]] = {}  # label -> switches, in file order
        taken: set[str] = set()
        for site in topology.spec.sites:
            members = [s for s in site.switches if s in topology.switches and s not in taken]
            taken.update(members)
            groups.setdefault(site.name, []).extend(members)
        for switch in topology.switches:
            if switch not in taken:
                groups[switch] = [switch]
        used = {DEFAULT_PID}
        pids: list[Pid] = []
        self.pid_of_dtn: dict[str, str] = {}
        self.switches_of: dict[str, tuple[str, ...]] = {}
        for label, switches in groups.items():
            dtns = [d for d in topology.spec.dtns if d.switch in switches]
            if not dtns:
                continue
            name = base = pid_name(label)
            serial = 1
            while name in used:
                serial += 1
                suffix = f"-{serial}"
                name = base[:64 - len(suffix)] + suffix
            used.add(name)
            pools = [d.ipv6_pool for d in dtns if d.ipv6_pool]
            pids.append(Pid(name, tuple(d.name for d in dtns), tuple(f"{d.ipv4}/32" for d in dtns), tuple(pools)))
            self.switches_of[name] = tuple(dict.fromkeys(d.switch for d in dtns))
            for dtn in dtns:
                self.pid_of_dtn[dtn.name] = name
        pids.append(Pid(DEFAULT_PID, (), (_EVERY_V4,), (_EVERY_V6,)))
        self.pids: dict[str, Pid] = {p.name: p for p in pids}
        self._v4: dict[ipaddress.IPv4Address, str] = {ipaddress.IPv4Address(d.ipv4): d.name
                                                      for d in topology.spec.dtns}
        # IPv6 pools by prefix length: an address is looked up once per length in use (at most 9).
        self._v6: dict[int, dict[int, str]] = {}
        for dtn in topology.spec.dtns:
            if dtn.ipv6_pool:
                network = ipaddress.IPv6Network(dtn.ipv6_pool)
                self._v6.setdefault(network.prefixlen, {})[int(network.network_address)] = dtn.name
        self.message = {"meta": {}, "network-map": {p.name: p.json() for p in pids}}
        self.tag = content_tag(self.message["network-map"])
        self.message["meta"] = {"vtag": {"resource-id": NETWORK_MAP_ID, "tag": self.tag}}

    @property
    def vtag(self) -> dict[str, str]:
        return {"resource-id": NETWORK_MAP_ID, "tag": self.tag}

    def dtn_at(self, address: Address) -> str | None:
        """The DTN that has `address` (its IPv4, or an address of its IPv6 pool), if any."""
        if isinstance(address, ipaddress.IPv4Address):
            return self._v4.get(address)
        value = int(address)
        for length, networks in self._v6.items():
            dtn = networks.get(value >> (128 - length) << (128 - length))
            if dtn is not None:
                return dtn
        return None

    def pid_of(self, address: Address) -> str:
        """The PID of `address`: its DTN's, else `default`."""
        dtn = self.dtn_at(address)
        return self.pid_of_dtn[dtn] if dtn is not None else DEFAULT_PID


def content_tag(content: Any) -> str:
    """A vtag's tag (RFC 7285 section 10.3: at most 64 printable characters): the SHA-256 of the
    content as canonical JSON, so it changes exactly when the content does."""
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class CostType:
    """One cost type the server offers (RFC 7285 section 10.7; RFC 9439 `cost-context`)."""

    name: str  # e.g. num-routingcost: the name in the directory's `cost-types`
    metric: str
    mode: str  # numerical or ordinal
    description: str
    source: str | None = None  # RFC 9439 cost-source: nominal, sla or estimation

    def json(self, described: bool = False) -> dict[str, Any]:
        """As a cost map's `meta.cost-type` (with the description, as the directory lists it)."""
        value: dict[str, Any] = {"cost-mode": self.mode, "cost-metric": self.metric}
        if self.source is not None:
            value["cost-context"] = {"cost-source": self.source}
        if described:
            value["description"] = self.description
        return value

    @property
    def resource_id(self) -> str:
        """The id of the full cost map of this type."""
        return f"costmap-{self.name}"


def cost_types(topology: Topology) -> dict[str, CostType]:
    """The cost types of `topology`, by name."""
    if topology.all_links_have_latency:
        routing = ("one-way latency in ms of the path tsdn would book now (policy shortest, which minimizes "
                   "latency on this topology), the DTNs' access links not counted")
    else:
        routing = ("switch-to-switch links of the path tsdn would book now (policy shortest, fewest hops: not "
                   "every link of this topology declares a latency)")
    types = [
        CostType("num-routingcost", "routingcost", "numerical", routing),
        CostType("ord-routingcost", "routingcost", "ordinal", "rank of num-routingcost (1: best)"),
        CostType("num-hopcount", "hopcount", "numerical",
                 "switch-to-switch links of the path tsdn would book now (the num-routingcost path)", "nominal"),
        CostType("num-bw-residual", "bw-residual", "numerical",
                 "bits/s a new reservation could book now: on the widest path, the least over its link "
                 "directions (access links included) of capacity minus what is booked at this instant", "nominal"),
        CostType("num-bw-available", "bw-available", "numerical",
                 "bits/s a new reservation would get now: bw-residual also less the load measured on each "
                 "direction beyond the controller's own traffic, none on a direction measured congested", "estimation"),
    ]
    return {t.name: t for t in types}


@dataclass(frozen=True)
class Constraint:
    """One RFC 7285 constraint: `operator value`, e.g. `ge 100000000000`."""

    operator: str
    value: float

    def holds(self, cost: float) -> bool:
        return _OPERATORS[self.operator](cost, self.value)


@dataclass(frozen=True)
class FilterRequest:
    """A filtered cost map request (RFC 7285 section 11.3.2); None: every PID."""

    cost_type: CostType
    srcs: tuple[str, ...] | None
    dsts: tuple[str, ...] | None
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True)
class Endpoint:
    """A typed endpoint address as the client wrote it (`ipv4:10.16.1.11`) and the address."""

    text: str
    address: Address


@dataclass(frozen=True)
class EndpointRequest:
    """An endpoint cost request (RFC 7285 section 11.5.1); `srcs` None: the client itself."""

    cost_type: CostType
    srcs: tuple[Endpoint, ...] | None
    dsts: tuple[Endpoint, ...]
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True)
class Subscription:
    """One resource an update stream carries (RFC 8895): its client id, the resource,
    the tag the client holds, whether it wants merge patches, and the input of a POST resource."""

    client_id: str
    resource_id: str
    tag: str | None = None
    incremental: bool = True
    input: FilterRequest | EndpointRequest | None = None


@dataclass(frozen=True)
class UpdateRequest:
    """An update stream or stream control request (RFC 8895)."""

    add: tuple[Subscription, ...]
    remove: tuple[str, ...]


@dataclass(frozen=True)
class LinkState:
    """What the costs depend on, taken at one instant: per link direction (`AltoView.directions`
    order) capacity minus what is booked now (`residual`) and that less the load measured
    beyond the controller's own (`available`), and the links reported down."""

    residual: tuple[int, ...]
    available: tuple[int, ...]
    down_links: frozenset[str]

    @property
    def key(self) -> tuple:
        return self.residual, self.available, tuple(sorted(self.down_links))


class _FrozenFree:
    """`paths.Availability` over one LinkState: every window sees the instant measured; access
    links unlimited, so a route is found for the switches alone."""

    def __init__(self, free: Mapping[str, int]):
        self._free = free

    def free(self, direction: str, start: float, end: float, ignore: str | None = None) -> int:
        return self._free[direction]


class AltoView:
    """The ALTO information of one topology: its network map and cost types, and the costs of
    any `LinkState` (cached for the last few). `measure` runs on the core thread; the rest is
    pure and may run on any thread."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.network_map = NetworkMap(topology)
        self.cost_types = cost_types(topology)
        self.directions = tuple(topology.directions)
        self._index = {d: i for i, d in enumerate(self.directions)}
        self._access = {d.name: topology.access(d.name) for d in topology.spec.dtns}
        # A representative DTN pair per ordered pair of switches with DTNs (two DTNs for a switch to itself).
        on_switch: dict[str, list[str]] = {}
        for dtn in topology.spec.dtns:
            on_switch.setdefault(dtn.switch, []).append(dtn.name)
        self._on_switch = on_switch
        self._pairs: dict[tuple[str, str], tuple[str, str]] = {}
        for s, s_dtns in on_switch.items():
            for t, t_dtns in on_switch.items():
                if s != t:
                    self._pairs[(s, t)] = (s_dtns[0], t_dtns[0])
                elif len(s_dtns) > 1:
                    self._pairs[(s, t)] = (s_dtns[0], s_dtns[1])
        self._cache: OrderedDict[tuple, Costs] = OrderedDict()
        self._lock = threading.Lock()

    # -- the core thread ---------------------------------------------------------------------

    def measure(self, ledger: Any, watch: Any, down_links: Iterable[str], now: float) -> LinkState:
        """The link state now, from the ledger's bookings and the rerouter's link watch (on the
        core thread: both belong to it)."""
        instant = (now, math.nextafter(now, math.inf))
        headroom = Headroom(self.topology, ledger, watch)
        residual = tuple(ledger.free(d, *instant) for d in self.directions)
        available = tuple(headroom.free(d, *instant) for d in self.directions)
        return LinkState(residual, available, frozenset(down_links))

    # -- anywhere ----------------------------------------------------------------------------

    def cached(self, state: LinkState) -> Costs | None:
        """The costs of `state` if computed lately (cheap: no path is computed)."""
        with self._lock:
            costs = self._cache.get(state.key)
            if costs is not None:
                self._cache.move_to_end(state.key)
            return costs

    def costs(self, state: LinkState) -> Costs:
        """The costs of `state` (computed once, then cached)."""
        found = self.cached(state)
        if found is not None:
            return found
        costs = Costs(self, state)
        with self._lock:
            self._cache[state.key] = costs
            while len(self._cache) > CACHED_STATES:
                self._cache.popitem(last=False)
        return costs

    def _routes(self, state: LinkState) -> tuple[dict, dict, dict]:
        """Per ordered switch pair: (routing cost, hops) of the shortest route, and the widest
        route's bottleneck on the residual and on the available bandwidth."""
        residual = dict(zip(self.directions, state.residual, strict=True))
        available = dict(zip(self.directions, state.available, strict=True))
        for up, down in self._access.values():
            residual[up.id] = residual[down.id] = available[up.id] = available[down.id] = UNLIMITED
        finders = {}
        for name, free in (("residual", residual), ("available", available)):
            finder = PathFinder(self.topology, _FrozenFree(free))
            finder.down_links = set(state.down_links)
            finders[name] = finder
        latency = self.topology.all_links_have_latency
        routes: dict[tuple[str, str], tuple[float | int, int]] = {}
        widest: dict[str, dict[tuple[str, str], int]] = {"bw-residual": {}, "bw-available": {}}
        for pair, (a, b) in self._pairs.items():
            try:
                path = finders["residual"].route(PathRequest(a, b, 1, 0.0, 1.0)).primary
                cost = round(path.latency_ms or 0.0, 6) if latency else path.hop_count
                routes[pair] = (cost, path.hop_count)
            except (NoCapacity, FailedPrecondition):
                pass  # no route now: the pair has no routing cost (left out of the maps, as RFC 7285 allows)
            for metric, finder in (("bw-residual", finders["residual"]), ("bw-available", finders["available"])):
                try:
                    route = finder.route(PathRequest(a, b, 1, 0.0, 1.0, policy="widest"))
                    widest[metric][pair] = route.primary.free_bps
                except (NoCapacity, FailedPrecondition):
                    widest[metric][pair] = 0
        return routes, widest["bw-residual"], widest["bw-available"]


class Costs:
    """Every cost of one LinkState; read-only once built (safe to share between threads)."""

    def __init__(self, view: AltoView, state: LinkState):
        self.view = view
        self.state = state
        self.routes, residual, available = view._routes(state)
        self.widest = {"bw-residual": residual, "bw-available": available}
        index = view._index
        self.access = {metric: {dtn: (values[index[up.id]], values[index[down.id]])
                                for dtn, (up, down) in view._access.items()}
                       for metric, values in (("bw-residual", state.residual), ("bw-available", state.available))}
        self.switch_of = {d.name: d.switch for d in view.topology.spec.dtns}
        # The version of everything an endpoint cost answer is made of.
        self.tag = content_tag([sorted(([*k], v) for k, v in self.routes.items()),
                                {m: sorted(([*k], v) for k, v in w.items()) for m, w in self.widest.items()},
                                {m: sorted(a.items()) for m, a in self.access.items()}])
        self._maps: dict[str, dict[str, Any]] = {}
        self._pid_values: dict[str, dict[str, dict[str, float | int]]] = {}
        self._lock = threading.Lock()

    # -- one DTN pair ----------------------------------------------------------------------

    def dtn_value(self, metric: str, a: str, b: str) -> float | int | None:
        """`metric` from DTN `a` to DTN `b` (None: none defined, e.g. no route, or a == b)."""
        if a == b:
            return None
        pair = (self.switch_of[a], self.switch_of[b])
        if metric == "routingcost" or metric == "hopcount":
            route = self.routes.get(pair)
            return None if route is None else route[0 if metric == "routingcost" else 1]
        inner = self.widest[metric].get(pair)
        if inner is None:
            return None
        return max(0, min(self.access[metric][a][0], self.access[metric][b][1], inner))

    # -- between PIDs ----------------------------------------------------------------------

    def pid_values(self, metric: str) -> dict[str, dict[str, float | int]]:
        """`metric` between every two PIDs that have a DTN pair with a value: the least routing
        cost or hop count, the most bandwidth, over their DTN pairs."""
        with self._lock:
            found = self._pid_values.get(metric)
        if found is not None:
            return found
        values: dict[str, dict[str, float | int]] = {}
        pids = [p for p in self.view.network_map.pids.values() if p.dtns]
        for source in pids:
            row: dict[str, float | int] = {}
            for target in pids:
                value = self._between(metric, source, target)
                if value is not None:
                    row[target.name] = value
            if row:
                values[source.name] = row
        with self._lock:
            self._pid_values[metric] = values
        return values

    def _between(self, metric: str, source: Pid, target: Pid) -> float | int | None:
        best: float | int | None = None
        bandwidth = metric.startswith("bw-")
        view = self.view
        for s in view.network_map.switches_of[source.name]:
            for t in view.network_map.switches_of[target.name]:
                if bandwidth:
                    value = self._best_bandwidth(metric, source, target, s, t)
                elif (s, t) in view._pairs and (s != t or self._two_dtns(source, s)):
                    value = self.dtn_value(metric, *view._pairs[(s, t)])
                else:
                    value = None
                if value is not None and (best is None or (value > best if bandwidth else value < best)):
                    best = value
        return best

    def _two_dtns(self, pid: Pid, switch: str) -> bool:
        return sum(1 for d in pid.dtns if self.switch_of[d] == switch) > 1

    def _best_bandwidth(self, metric: str, source: Pid, target: Pid, s: str, t: str) -> int | None:
        inner = self.widest[metric].get((s, t))
        if inner is None:
            return None
        access = self.access[metric]
        ups = [(access[d][0], d) for d in source.dtns if self.switch_of[d] == s]
        downs = [(access[d][1], d) for d in target.dtns if self.switch_of[d] == t]
        if s != t:  # different switches: the best sender and the best receiver are two DTNs
            return max(0, min(max(ups)[0], max(downs)[0], inner))
        best = None
        for up, a in ups:
            for down, b in downs:
                if a != b:
                    value = max(0, min(up, down, inner))
                    best = value if best is None else max(best, value)
        return best

    def cost_map(self, cost_type: CostType) -> dict[str, Any]:
        """The full cost map message of `cost_type` (RFC 7285 section 11.2.3), with a vtag of
        its own: the hash of its content."""
        with self._lock:
            found = self._maps.get(cost_type.name)
        if found is not None:
            return found
        values = self.pid_values(cost_type.metric)
        if cost_type.mode == "ordinal":
            values = _ranked(values)
        content = {"cost-type": cost_type.json(), "cost-map": values}
        message = {"meta": {"dependent-vtags": [self.view.network_map.vtag], "cost-type": cost_type.json(),
                            "vtag": {"resource-id": cost_type.resource_id, "tag": content_tag(content)}},
                   "cost-map": values}
        with self._lock:
            self._maps[cost_type.name] = message
        return message

    def filtered(self, request: FilterRequest) -> dict[str, Any]:
        """A filtered cost map (RFC 7285 section 11.3.2); ordinal ranks are those of the full map."""
        full = self.cost_map(request.cost_type)["cost-map"]
        srcs = request.srcs if request.srcs else tuple(full)
        dsts = set(request.dsts) if request.dsts else None
        values: dict[str, dict[str, float | int]] = {}
        for src in dict.fromkeys(srcs):
            row = {dst: cost for dst, cost in full.get(src, {}).items()
                   if (dsts is None or dst in dsts) and all(c.holds(cost) for c in request.constraints)}
            if row:
                values[src] = row
        return {"meta": {"dependent-vtags": [self.view.network_map.vtag], "cost-type": request.cost_type.json()},
                "cost-map": values}

    def endpoint_costs(self, request: EndpointRequest, srcs: tuple[Endpoint, ...]) -> dict[str, Any]:
        """An endpoint cost map (RFC 7285 section 11.5.1) from `srcs` (the request's, or the
        client's own address) to the request's destinations; pairs without a cost are left out
        (an address no DTN has, a DTN to itself). Ordinal ranks are among the pairs answered."""
        network = self.view.network_map
        metric = request.cost_type.metric
        dsts = [(e.text, network.dtn_at(e.address)) for e in request.dsts]
        values: dict[str, dict[str, float | int]] = {}
        for src in srcs:
            a = network.dtn_at(src.address)
            if a is None:
                continue
            row = {}
            for text, b in dsts:
                if b is not None:
                    value = self.dtn_value(metric, a, b)
                    if value is not None:
                        row[text] = value
            if row:
                values[src.text] = row
        if request.cost_type.mode == "ordinal":
            values = _ranked(values)
        if request.constraints:
            values = {s: kept for s, row in values.items()
                      if (kept := {d: v for d, v in row.items() if all(c.holds(v) for c in request.constraints)})}
        return {"meta": {"cost-type": request.cost_type.json(),
                         "vtag": {"resource-id": ENDPOINT_COST_ID, "tag": self.tag}},
                "endpoint-cost-map": values}


def _ranked(values: dict[str, dict[str, float | int]]) -> dict[str, dict[str, int]]:
    """Ordinal costs (RFC 7285 section 6.1.2.2): 1 for the lowest cost, equal costs equal ranks."""
    order = {cost: rank for rank, cost in enumerate(sorted({v for row in values.values() for v in row.values()}), 1)}
    return {s: {d: order[v] for d, v in row.items()} for s, row in values.items()}


# -- requests ---------------------------------------------------------------------------------


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise AltoError("E_INVALID_FIELD_TYPE", f"{name or 'the request'}: expected a JSON object, got "
                        f"{_json_type(value)}", name or None, value)
    return value


def _list(value: Any, name: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise AltoError("E_INVALID_FIELD_TYPE", f"{name}: expected a JSON array, got {_json_type(value)}", name, value)
    if len(value) > limit:
        raise AltoError("E_INVALID_FIELD_VALUE", f"{name}: {len(value)} entries, at most {limit}", name, len(value))
    return value


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise AltoError("E_INVALID_FIELD_TYPE", f"{name}: expected a JSON string, got {_json_type(value)}", name, value)
    return value


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _required(body: dict[str, Any], key: str, prefix: str) -> Any:
    if key not in body:
        name = f"{prefix}{key}"
        raise AltoError("E_MISSING_FIELD", f"{name}: required", name)
    return body[key]


def parse_cost_type(value: Any, types: Mapping[str, CostType], name: str = "cost-type") -> CostType:
    """The offered cost type a request's `cost-type` object names (by metric and mode; an RFC
    9439 `cost-context` must name the source the server uses)."""
    body = _object(value, name)
    metric = _string(_required(body, "cost-metric", f"{name}."), f"{name}.cost-metric")
    mode = _string(_required(body, "cost-mode", f"{name}."), f"{name}.cost-mode")
    for cost_type in types.values():
        if cost_type.metric == metric and cost_type.mode == mode:
            context = body.get("cost-context")
            if context is not None:
                source = _string(_required(_object(context, f"{name}.cost-context"), "cost-source",
                                           f"{name}.cost-context."), f"{name}.cost-context.cost-source")
                if source != cost_type.source:
                    raise AltoError("E_INVALID_FIELD_VALUE", f"{name}.cost-context.cost-source: {metric} comes from "
                                    f"{cost_type.source or 'no RFC 9439 source'}, not {source!r}",
                                    f"{name}.cost-context.cost-source", source)
            return cost_type
    offered = ", ".join(f"{t.mode} {t.metric}" for t in types.values())
    raise AltoError("E_INVALID_FIELD_VALUE", f"{name}: {mode} {metric} is not offered (offered: {offered})",
                    name, {"cost-mode": mode, "cost-metric": metric})


def parse_constraints(value: Any, name: str = "constraints") -> tuple[Constraint, ...]:
    """RFC 7285 constraints: `[operator] [value]` with operator gt, lt, ge, le or eq."""
    found = []
    for i, item in enumerate(_list(value, name, MAX_CONSTRAINTS)):
        text = _string(item, f"{name}[{i}]")
        parts = text.split()
        operator = parts[0] if parts else ""
        try:
            number = float(parts[1]) if len(parts) == 2 else math.nan
        except ValueError:
            number = math.nan
        if operator not in _OPERATORS or not math.isfinite(number):
            raise AltoError("E_INVALID_FIELD_VALUE", f"{name}[{i}]: {text!r} is not '[gt|lt|ge|le|eq] NUMBER'",
                            f"{name}[{i}]", text)
        found.append(Constraint(operator, number))
    return tuple(found)


def parse_filter(body: Any, view: AltoView, name: str = "") -> FilterRequest:
    """A filtered cost map request; unknown PIDs are E_INVALID_FIELD_VALUE."""
    prefix = f"{name}." if name else ""
    body = _object(body, name)
    cost_type = parse_cost_type(_required(body, "cost-type", prefix), view.cost_types, f"{prefix}cost-type")
    constraints = parse_constraints(body.get("constraints", []), f"{prefix}constraints")
    srcs = dsts = None
    if "pids" in body:
        pids = _object(body["pids"], f"{prefix}pids")
        known = view.network_map.pids
        parsed = []
        for side in ("srcs", "dsts"):
            names = []
            for i, item in enumerate(_list(pids.get(side, []), f"{prefix}pids.{side}", len(known) * 4 + 16)):
                pid = _string(item, f"{prefix}pids.{side}[{i}]")
                if pid not in known:
                    raise AltoError("E_INVALID_FIELD_VALUE", f"{prefix}pids.{side}[{i}]: {pid!r} is not a PID of "
                                    f"network map {NETWORK_MAP_ID} (PIDs: {', '.join(known)})",
                                    f"{prefix}pids.{side}", pid)
                names.append(pid)
            parsed.append(tuple(names) or None)
        srcs, dsts = parsed
    return FilterRequest(cost_type, srcs, dsts, constraints)


def parse_endpoint(text: Any, name: str) -> Endpoint:
    """A TypedEndpointAddr (RFC 7285 section 10.4): `ipv4:ADDRESS` or `ipv6:ADDRESS`."""
    value = _string(text, name)
    kind, _, rest = value.partition(":")
    try:
        if kind not in ("ipv4", "ipv6"):
            raise ValueError(kind)
        address: Address = ipaddress.IPv4Address(rest) if kind == "ipv4" else ipaddress.IPv6Address(rest)
    except ValueError:
        raise AltoError("E_INVALID_FIELD_VALUE", f"{name}: {value!r} is not 'ipv4:ADDRESS' or 'ipv6:ADDRESS'",
                        name, value) from None
    return Endpoint(value, address)


def parse_endpoint_request(body: Any, view: AltoView, name: str = "") -> EndpointRequest:
    """An endpoint cost request; `srcs` may be left out (the client's own address)."""
    prefix = f"{name}." if name else ""
    body = _object(body, name)
    cost_type = parse_cost_type(_required(body, "cost-type", prefix), view.cost_types, f"{prefix}cost-type")
    constraints = parse_constraints(body.get("constraints", []), f"{prefix}constraints")
    endpoints = _object(_required(body, "endpoints", prefix), f"{prefix}endpoints")
    dst_items = _list(_required(endpoints, "dsts", f"{prefix}endpoints."), f"{prefix}endpoints.dsts",
                      MAX_ENDPOINT_PAIRS)
    if not dst_items:
        raise AltoError("E_INVALID_FIELD_VALUE", f"{prefix}endpoints.dsts: at least one destination",
                        f"{prefix}endpoints.dsts", [])
    dsts = tuple(parse_endpoint(v, f"{prefix}endpoints.dsts[{i}]") for i, v in enumerate(dst_items))
    srcs = None
    if "srcs" in endpoints:
        src_items = _list(endpoints["srcs"], f"{prefix}endpoints.srcs", MAX_ENDPOINT_PAIRS)
        srcs = tuple(parse_endpoint(v, f"{prefix}endpoints.srcs[{i}]") for i, v in enumerate(src_items)) or None
    if len(srcs or (None,)) * len(dsts) > MAX_ENDPOINT_PAIRS:
        raise AltoError("E_INVALID_FIELD_VALUE", f"{prefix}endpoints: {len(srcs or ())} sources x {len(dsts)} "
                        f"destinations, at most {MAX_ENDPOINT_PAIRS} pairs a request", f"{prefix}endpoints")
    return EndpointRequest(cost_type, srcs, dsts, constraints)


def resource_ids(view: AltoView) -> dict[str, str]:
    """Every resource an update stream can carry, by id: its kind (network-map, cost-map,
    filtered-cost-map, endpoint-cost)."""
    ids = {NETWORK_MAP_ID: "network-map"}
    ids.update({t.resource_id: "cost-map" for t in view.cost_types.values()})
    ids[FILTERED_COST_MAP_ID] = "filtered-cost-map"
    ids[ENDPOINT_COST_ID] = "endpoint-cost"
    return ids


def parse_update_request(body: Any, view: AltoView, *, control: bool,
                         carried: Iterable[str] = ()) -> UpdateRequest:
    """An update stream request (`control` False: `add` required, no `remove`) or a stream
    control request (RFC 8895); `carried`: the stream's client ids now."""
    body = _object(body, "")
    if not control and "add" not in body:
        raise AltoError("E_MISSING_FIELD", "add: required: the resources the stream should carry", "add")
    if not control and "remove" in body:
        raise AltoError("E_INVALID_FIELD_VALUE", "remove: only for the stream control URI (there is nothing to "
                        "remove from a stream not yet open)", "remove", body["remove"])
    if control and "add" not in body and "remove" not in body:
        raise AltoError("E_MISSING_FIELD", "add or remove: a stream control request needs one", "add")
    carried = set(carried)
    remove = []
    for i, item in enumerate(_list(body.get("remove", []), "remove", MAX_SUBSCRIPTIONS)):
        client_id = _string(item, f"remove[{i}]")
        if client_id not in carried:
            raise AltoError("E_INVALID_FIELD_VALUE", f"remove[{i}]: the stream carries no {client_id!r} (it "
                            f"carries: {', '.join(sorted(carried)) or 'nothing'})", "remove", client_id)
        remove.append(client_id)
    kinds = resource_ids(view)
    add = []
    entries = _object(body.get("add", {}), "add")
    if not control and not entries:
        raise AltoError("E_INVALID_FIELD_VALUE", "add: at least one resource", "add", {})
    if len(carried - set(remove)) + len(entries) > MAX_SUBSCRIPTIONS:
        raise AltoError("E_INVALID_FIELD_VALUE", f"add: a stream carries at most {MAX_SUBSCRIPTIONS} resources",
                        "add", len(entries))
    for client_id, entry in entries.items():
        name = f"add.{client_id}"
        if not _NAME.match(client_id):
            raise AltoError("E_INVALID_FIELD_VALUE", f"add: client id {client_id!r} is not 1 to 64 of "
                            "0-9 A-Z a-z - : @ _", "add", client_id)
        if client_id in carried and client_id not in remove:
            raise AltoError("E_INVALID_FIELD_VALUE", f"{name}: the stream carries {client_id!r} already; remove it "
                            "first or choose another client id", "add", client_id)
        entry = _object(entry, name)
        resource = _string(_required(entry, "resource-id", f"{name}."), f"{name}.resource-id")
        kind = kinds.get(resource)
        if kind is None:
            raise AltoError("E_INVALID_FIELD_VALUE", f"{name}.resource-id: no resource {resource!r} here (update "
                            f"streams carry: {', '.join(kinds)})", f"{name}.resource-id", resource)
        tag = entry.get("tag")
        if tag is not None:
            tag = _string(tag, f"{name}.tag")
        incremental = entry.get("incremental-changes", True)
        if not isinstance(incremental, bool):
            raise AltoError("E_INVALID_FIELD_TYPE", f"{name}.incremental-changes: expected true or false",
                            f"{name}.incremental-changes", incremental)
        parsed: FilterRequest | EndpointRequest | None = None
        if kind == "filtered-cost-map":
            parsed = parse_filter(_required(entry, "input", f"{name}."), view, f"{name}.input")
        elif kind == "endpoint-cost":
            parsed = parse_endpoint_request(_required(entry, "input", f"{name}."), view, f"{name}.input")
            if parsed.srcs is None:
                raise AltoError("E_MISSING_FIELD", f"{name}.input.endpoints.srcs: required in an update stream",
                                f"{name}.input.endpoints.srcs")
        elif "input" in entry:
            raise AltoError("E_INVALID_FIELD_VALUE", f"{name}.input: {resource} takes no input", f"{name}.input")
        add.append(Subscription(client_id, resource, tag, incremental, parsed))
    return UpdateRequest(tuple(add), tuple(remove))


# -- updates ------------------------------------------------------------------------------------


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7396) that turns `old` into `new`; None when they are equal.
    Objects are patched member by member (a member gone becomes null); anything else is replaced.
    (A null inside `new` cannot be expressed by a merge patch; ALTO messages have none.)"""
    if old == new:
        return None
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch
