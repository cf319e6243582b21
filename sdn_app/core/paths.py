"""Path policies between DTNs: shortest, widest, k alternatives, constraints, disjoint backup.

A `PathRequest` names two DTNs, a bandwidth and a window; `PathFinder.route` returns a
`Route` whose every link direction (the DTNs' access links included) has that bandwidth
free throughout the window, or raises an error that says why not: `FailedPrecondition`
when no route exists at all under the constraints, `NoCapacity` naming the bottleneck link
and its free bandwidth when routes exist but none has the room.

Policies:
- `shortest`: fewest hops, or lowest latency when every link of the topology has one.
- `widest`: the largest bottleneck of free bandwidth in the window; ties go to fewer hops.
Constraints: `include` (ordered waypoints: switches or links), `exclude` (switches or
links), `max_hops` (switch-to-switch links), and `protect` (a link-disjoint backup).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import networkx as nx

from sdn_app.core import validation
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.topology import LinkDirection, Topology
from sdn_app.core.units import format_bandwidth, format_time, format_window

POLICIES: tuple[str, ...] = ("shortest", "widest")
_UNLIMITED = -math.inf  # a "need" below any free value: search by shape, not by bandwidth
_SCAN_LIMIT = 2000  # loop-free paths examined at most when constraints filter candidates


class Availability(Protocol):
    """Free bandwidth per link direction over a window (the ledger implements this)."""

    def free(self, direction: str, start: float, end: float, ignore: str | None = None) -> int:
        """Bandwidth `direction` can take throughout [start, end), not counting booking `ignore`."""
        ...


class Unbooked:
    """Availability of an empty network: every direction has its full capacity."""

    def __init__(self, topology: Topology):
        self._capacities = topology.capacities()

    def free(self, direction: str, start: float, end: float, ignore: str | None = None) -> int:
        """The direction's capacity."""
        return self._capacities[direction]


@dataclass(frozen=True)
class PathRequest:
    """What a service asks for: `bandwidth` bits/s from DTN `src` to DTN `dst` in [start, end).

    `src_prefix` and `dst_prefix` (both or neither; IPv6 networks as canonical text, e.g.
    `2001:db8:1:2::/64`, `validation.prefix_pair`) name the traffic: with them the switches
    carry the IPv6 packets from an address in `src_prefix` to one in `dst_prefix` (and back),
    instead of the IPv4 packets between the two DTNs' own addresses (`plans.plan_for`).

    `src_vlan` and `dst_vlan` (VLAN ids 1..4094, `validation.vlan_id`; label flow design only)
    say how frames look at each end's port: None, untagged; N, carrying 802.1Q tag N (the
    switches rewrite the tag on the way). With both, the reservation is a VLAN circuit: every
    frame tagged `src_vlan` at src's port goes to dst's port tagged `dst_vlan`, and back,
    whatever its addresses (`label_plans.edge_plan`).

    `via` names the interdomain port a path to or from a remote DTN (one beyond such a port, at a
    site of a neighbouring domain) uses: one of that DTN's ports (`Topology.via`); None, its
    `beyond`. Only a request with a remote end may name one.
    """

    src: str
    dst: str
    bandwidth: int
    start: float
    end: float
    policy: str = "shortest"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_hops: int | None = None
    protect: bool = False
    src_prefix: str | None = None
    dst_prefix: str | None = None
    src_vlan: int | None = None
    dst_vlan: int | None = None
    via: str | None = None


@dataclass(frozen=True)
class Hop:
    """One switch of a path: packets enter on `in_port` and leave on `out_port`."""

    switch: str
    in_port: int
    out_port: int


@dataclass(frozen=True)
class Path:
    """A route from DTN to DTN: its link directions, access links included."""

    src: str
    dst: str
    directions: tuple[LinkDirection, ...]
    free_bps: int
    bottleneck: str

    @property
    def hops(self) -> tuple[Hop, ...]:
        """The switches crossed, in order, with their ingress and egress ports."""
        return tuple(
            Hop(into.dst, into.dst_port, out.src_port)
            for into, out in itertools.pairwise(self.directions)
        )

    @property
    def switches(self) -> tuple[str, ...]:
        """Names of the switches crossed, in order."""
        return tuple(d.dst for d in self.directions[:-1])

    @property
    def hop_count(self) -> int:
        """Number of switch-to-switch links crossed."""
        return len(self.directions) - 2

    @property
    def links(self) -> tuple[str, ...]:
        """Names of the switch-to-switch links crossed, in order."""
        return tuple(d.link for d in self.directions[1:-1])

    @property
    def direction_ids(self) -> tuple[str, ...]:
        """Ids of every direction booked for this path."""
        return tuple(d.id for d in self.directions)

    @property
    def latency_ms(self) -> float | None:
        """Summed one-way latency, when every link crossed declares one."""
        inner = self.directions[1:-1]
        if any(d.latency_ms is None for d in inner):
            return None
        return sum(d.latency_ms for d in inner)  # type: ignore[misc]

    def describe(self) -> str:
        """`src > sw1 > sw2 > dst` for messages."""
        return " > ".join((self.src, *self.switches, self.dst))


@dataclass(frozen=True)
class Route:
    """The primary path and, for protected requests, a link-disjoint backup."""

    primary: Path
    backup: Path | None = None

    @property
    def direction_ids(self) -> tuple[str, ...]:
        """Every direction to book: primary and backup, each once."""
        ids = self.primary.direction_ids + (self.backup.direction_ids if self.backup else ())
        return tuple(dict.fromkeys(ids))


class PathFinder:
    """Computes routes over a topology given what the ledger has left free."""

    def __init__(self, topology: Topology, availability: Availability):
        self.topology = topology
        self.availability = availability
        self.down_links: set[str] = set()  # links the switches report down: no path crosses them
        # booking id -> an interdomain port its routes must not use now (its WAN segment there failed
        # and it is being re-homed): a search that ignores that booking refuses the port
        self.avoid: dict[str, str] = {}

    def route(self, request: PathRequest, ignore: str | None = None) -> Route:
        """Return the best route for `request`, with a backup when it asks for protection.

        `ignore` names a booking whose own bandwidth is not counted (moving a reservation).
        """
        search = _Search(self, request, ignore)
        primary = search.primary()
        if not request.protect:
            return Route(primary)
        return search.protected(primary)

    def alternatives(self, request: PathRequest, k: int, ignore: str | None = None) -> list[Path]:
        """Return up to `k` loop-free paths that fit `request`, best first (Yen's algorithm).

        For `shortest`, in order of hops (or latency); for `widest`, the widest among the
        first candidates. Parallel links between the same two switches count as one choice.
        """
        if not 1 <= k <= 100:
            raise InvalidArgument(f"k: ask for 1 to 100 alternatives, got {k}")
        return _Search(self, request, ignore).alternatives(k)


class _Search:
    """State of one request's search: resolved constraints and memoized free bandwidth."""

    def __init__(self, finder: PathFinder, request: PathRequest, ignore: str | None):
        self.topology = topology = finder.topology
        self.request = request
        self._validate()
        self.availability = finder.availability
        self.ignore = ignore
        self.up, _ = topology.access(request.src, request.via)
        _, self.down = topology.access(request.dst, request.via)
        self.src_switch = self.up.dst
        self.dst_switch = self.down.src
        avoided = finder.avoid.get(ignore or "")
        if avoided is not None and avoided in (self.up.link, self.down.link):
            raise FailedPrecondition(f"its WAN segment through interdomain port {avoided} failed: it is being "
                                     "re-homed to another port")
        self.banned_nodes, excluded = topology.resolve_elements(request.exclude, "exclude")
        self.down_links = frozenset(finder.down_links)
        self.banned_links = excluded | self.down_links
        self.waypoints = [self._waypoint(ref) for ref in request.include]
        for node in (self.src_switch, self.dst_switch):
            if node in self.banned_nodes:
                raise InvalidArgument(f"exclude: switch {node} is where a DTN of this request attaches")
        self.use_latency = topology.all_links_have_latency
        self._free: dict[str, int] = {}
        self.access_free = min(self.free(self.up), self.free(self.down))

    def _validate(self) -> None:
        r = self.request
        self.topology.dtn(r.src)
        self.topology.dtn(r.dst)
        if r.src == r.dst:
            raise InvalidArgument(f"destination: source and destination are the same DTN ({r.src})")
        if isinstance(r.bandwidth, bool) or not isinstance(r.bandwidth, int) or r.bandwidth <= 0:
            raise InvalidArgument(f"bandwidth: must be a positive whole number of bits/s, got {r.bandwidth!r}")
        if r.policy not in POLICIES:
            raise InvalidArgument(f"policy: {r.policy!r} is not one of {', '.join(POLICIES)}")
        if not math.isfinite(r.start) or r.start < 0:
            raise InvalidArgument(f"start: not a valid time ({r.start!r})")
        if math.isnan(r.end) or r.end <= r.start:
            raise InvalidArgument(f"end: {format_time(r.end)} is not after start {format_time(r.start)}")
        if r.max_hops is not None and (isinstance(r.max_hops, bool) or r.max_hops < 0):
            raise InvalidArgument(f"max_hops: must be zero or more, got {r.max_hops!r}")
        validation.prefix_pair(r.src_prefix, r.dst_prefix)
        if r.via is not None and not (self.topology.is_remote(r.src) or self.topology.is_remote(r.dst)):
            raise InvalidArgument(f"via: {r.via!r} names an interdomain port, but neither {r.src} nor {r.dst} is a "
                                  "remote DTN")

    def _waypoint(self, ref: str) -> str | frozenset[str]:
        switches, links = self.topology.resolve_elements([ref], "include")
        if switches:
            return next(iter(switches))
        return links

    # -- primitives ------------------------------------------------------------------------

    def free(self, direction: LinkDirection) -> int:
        value = self._free.get(direction.id)
        if value is None:
            r = self.request
            value = self.availability.free(direction.id, r.start, r.end, self.ignore)
            self._free[direction.id] = value
        return value

    def cost(self, direction: LinkDirection) -> float:
        return direction.latency_ms if self.use_latency else 1.0  # type: ignore[return-value]

    def choices(self, u: str, v: str, need: float, banned_links: frozenset[str]) -> list[LinkDirection]:
        """Usable parallel directions from u to v with at least `need` free."""
        return [d for d in self.topology.adjacency[u].get(v, ())
                if d.link not in banned_links and self.free(d) >= need]

    def pick(self, u: str, v: str, need: float, banned_links: frozenset[str], widest: bool) -> LinkDirection:
        """The parallel direction a path takes from u to v: cheapest (or widest) first."""
        options = self.choices(u, v, need, banned_links)
        if widest:
            return max(options, key=lambda d: (self.free(d), -self.cost(d)))
        return min(options, key=lambda d: (self.cost(d), -self.free(d)))

    def weight(self, need: float, banned_nodes: frozenset[str], banned_links: frozenset[str],
               hops_only: bool = False) -> Callable[[str, str, dict], float | None]:
        """A networkx weight function hiding edges that lack `need` or are excluded."""
        def edge_weight(u: str, v: str, keys: dict) -> float | None:
            if u in banned_nodes or v in banned_nodes:  # the reverse search meets u first
                return None
            best = None
            for attrs in keys.values():
                d: LinkDirection = attrs["direction"]
                if d.link in banned_links or self.free(d) < need:
                    continue
                c = 1.0 if hops_only else self.cost(d)
                if best is None or c < best:
                    best = c
            return best
        return edge_weight

    def nodes_path(self, s: str, t: str, need: float, banned_nodes: frozenset[str],
                   banned_links: frozenset[str], hops_only: bool = False) -> list[str] | None:
        """Cheapest switch sequence from s to t over usable links (networkx Dijkstra)."""
        if s == t:
            return [s]
        if s in banned_nodes or t in banned_nodes:
            return None
        try:
            _, nodes = nx.bidirectional_dijkstra(
                self.topology.graph, s, t, weight=self.weight(need, banned_nodes, banned_links, hops_only)
            )
        except nx.NetworkXNoPath:
            return None
        return nodes

    def widest_bottleneck(self, s: str, t: str, need: float, banned_nodes: frozenset[str],
                          banned_links: frozenset[str]) -> float | None:
        """The largest bottleneck of free bandwidth over usable s-t paths (max-min Dijkstra)."""
        if s == t:
            return math.inf
        best: dict[str, float] = {s: math.inf}
        heap: list[tuple[float, str]] = [(-math.inf, s)]
        done: set[str] = set()
        adjacency = self.topology.adjacency
        while heap:
            neg_width, u = heapq.heappop(heap)
            if u in done:
                continue
            if u == t:
                return -neg_width
            done.add(u)
            for v, directions in adjacency[u].items():
                if v in done or v in banned_nodes:
                    continue
                edge = max((self.free(d) for d in directions if d.link not in banned_links), default=None)
                if edge is None or edge < need:
                    continue
                width = min(-neg_width, edge)
                if width > best.get(v, -math.inf):
                    best[v] = width
                    heapq.heappush(heap, (-width, v))
        return None

    def segment(self, s: str, t: str, need: float, banned_nodes: frozenset[str], banned_links: frozenset[str],
                policy: str, max_hops: int | None = None) -> list[LinkDirection] | None:
        """Directions of the best s-t switch path under `policy`, or None."""
        if policy == "widest":
            width = self.widest_bottleneck(s, t, need, banned_nodes, banned_links)
            if width is None:
                return None
            # Wider than the DTNs' own access links gains nothing end to end: prefer fewer hops.
            width = min(width, max(self.access_free, need))
            nodes = self.nodes_path(s, t, width, banned_nodes, banned_links, hops_only=True)
            if nodes is not None and max_hops is not None and len(nodes) - 1 > max_hops:
                nodes = self._widest_within(s, t, need, width, banned_nodes, banned_links, max_hops)
            return None if nodes is None else self._directions(nodes, need, banned_links, widest=True)
        nodes = self.nodes_path(s, t, need, banned_nodes, banned_links)
        if nodes is not None and max_hops is not None and len(nodes) - 1 > max_hops and self.use_latency:
            nodes = self._cheapest_within(s, t, need, banned_nodes, banned_links, max_hops)
        return None if nodes is None else self._directions(nodes, need, banned_links, widest=False)

    def _directions(self, nodes: list[str], need: float, banned_links: frozenset[str],
                    widest: bool, through: dict[int, frozenset[str]] | None = None) -> list[LinkDirection]:
        """Directions along `nodes`; hop i must cross one of `through[i]` where given."""
        out = []
        for i, (u, v) in enumerate(itertools.pairwise(nodes)):
            banned = banned_links
            if through and i in through:
                banned = banned | {d.link for d in self.topology.adjacency[u][v] if d.link not in through[i]}
            out.append(self.pick(u, v, need, banned, widest))
        return out

    def _widest_within(self, s: str, t: str, need: float, width: float, banned_nodes: frozenset[str],
                       banned_links: frozenset[str], max_hops: int) -> list[str] | None:
        """Widest path of at most `max_hops` hops: the largest threshold whose fewest-hop path fits."""
        # Every direction's free value, not only those the searches happened to look at.
        frees = {self.free(d) for d in self.topology.directions.values() if not d.is_access}
        thresholds = sorted({f for f in frees if need <= f <= width})
        if not thresholds or thresholds[0] != need:
            thresholds.insert(0, need)
        best = None
        low, high = 0, len(thresholds) - 1
        while low <= high:
            mid = (low + high) // 2
            nodes = self.nodes_path(s, t, thresholds[mid], banned_nodes, banned_links, hops_only=True)
            if nodes is not None and len(nodes) - 1 <= max_hops:
                best, low = nodes, mid + 1
            else:
                high = mid - 1
        return best

    def _cheapest_within(self, s: str, t: str, need: float, banned_nodes: frozenset[str],
                         banned_links: frozenset[str], max_hops: int) -> list[str] | None:
        """Lowest-latency path of at most `max_hops` hops (hop-bounded Bellman-Ford)."""
        dist: dict[str, float] = {s: 0.0}
        parents: list[dict[str, str]] = []
        for _ in range(max_hops):
            nxt = dict(dist)
            parent: dict[str, str] = {}
            for u, du in dist.items():
                for v in self.topology.adjacency[u]:
                    if v in banned_nodes:
                        continue
                    options = self.choices(u, v, need, banned_links)
                    if not options:
                        continue
                    dv = du + min(self.cost(d) for d in options)
                    if dv < nxt.get(v, math.inf):
                        nxt[v], parent[v] = dv, u
            parents.append(parent)
            dist = nxt
        if t not in dist:
            return None
        nodes = [t]
        for parent in reversed(parents):
            if nodes[-1] in parent:
                nodes.append(parent[nodes[-1]])
        nodes.reverse()
        return nodes if nodes[0] == s and len(set(nodes)) == len(nodes) else None

    # -- whole routes ----------------------------------------------------------------------

    def make_path(self, inner: list[LinkDirection]) -> Path:
        directions = (self.up, *inner, self.down)
        bottleneck = min(directions, key=self.free)
        return Path(self.request.src, self.request.dst, directions, self.free(bottleneck), bottleneck.id)

    def compose(self, need: float, banned_links: frozenset[str], policy: str,
                max_hops: int | None, waypoints: list[str | frozenset[str]]) -> list[LinkDirection] | None:
        """Switch-to-switch directions from source to destination through `waypoints` in order."""
        if not waypoints:
            inner = self.segment(self.src_switch, self.dst_switch, need, self.banned_nodes, banned_links,
                                 policy, max_hops)
            return None if inner is None or (max_hops is not None and len(inner) > max_hops) else inner
        inner = []
        at = self.src_switch
        used = {at}
        targets: list[str | frozenset[str]] = [*waypoints, self.dst_switch]
        for i, target in enumerate(targets):
            # A segment may neither revisit a switch an earlier one crossed nor pass a later waypoint.
            later = {w for w in targets[i + 1:] if isinstance(w, str) and w != target}
            banned_nodes = self.banned_nodes | (used - {at}) | later
            if isinstance(target, str):
                piece = self.segment(at, target, need, banned_nodes, banned_links, policy)
            else:
                # The link may end right on the next waypoint (or the destination's switch).
                after = targets[i + 1] if i + 1 < len(targets) and isinstance(targets[i + 1], str) else None
                piece = self._through_link(at, target, need, banned_nodes, banned_links, policy, after)
            if piece is None:
                return None
            inner.extend(piece)
            used.update(d.dst for d in piece)
            at = piece[-1].dst if piece else at
        if max_hops is not None and len(inner) > max_hops:
            return None
        return inner

    def _through_link(self, at: str, links: frozenset[str], need: float, banned_nodes: frozenset[str],
                      banned_links: frozenset[str], policy: str, after: str | None = None,
                      ) -> list[LinkDirection] | None:
        """Best segment from `at` that ends by crossing one of `links` (either direction).

        The crossing may end on `after` (the next waypoint) even though it is banned for the lead.
        """
        best: list[LinkDirection] | None = None
        for link in sorted(links):
            if link in banned_links:
                continue
            for d in self.topology.link_directions[link]:
                if (d.dst in banned_nodes and d.dst != after) or d.dst == at or self.free(d) < need:
                    continue
                lead = self.segment(at, d.src, need, banned_nodes | {d.dst}, banned_links, policy)
                if lead is None:
                    continue
                candidate = [*lead, d]
                if best is None or self._better(candidate, best, policy):
                    best = candidate
        return best

    def _better(self, a: list[LinkDirection], b: list[LinkDirection], policy: str) -> bool:
        def cost(p: list[LinkDirection]) -> float:
            return sum(self.cost(d) for d in p)
        if policy == "widest":
            wa, wb = min(map(self.free, a), default=math.inf), min(map(self.free, b), default=math.inf)
            return (wa, -len(a)) > (wb, -len(b))
        return (cost(a), len(a)) < (cost(b), len(b))

    def primary(self) -> Path:
        r = self.request
        if self.access_free < r.bandwidth:
            raise self.refusal(self.banned_links, "")
        inner = self.compose(r.bandwidth, self.banned_links, r.policy, r.max_hops, self.waypoints)
        if inner is not None:
            return self.make_path(inner)
        if self.waypoints:
            # Segment by segment, the best way to one waypoint may take a switch a later
            # segment needs; whole loop-free paths through the waypoints do not have that trap.
            found = self.candidates(1)
            if found:
                return found[0]
        raise self.refusal(self.banned_links, "")

    def protected(self, primary: Path) -> Route:
        r = self.request
        if primary.hop_count == 0:
            raise FailedPrecondition(
                f"protect: {r.src} and {r.dst} attach to the same switch {self.src_switch}; "
                "there is no link a backup could avoid"
            )
        banned = self.banned_links | frozenset(primary.links)
        inner = self.compose(r.bandwidth, banned, r.policy, r.max_hops, [])
        if inner is not None:
            return Route(primary, self.make_path(inner))
        pair = None if self.waypoints else self.disjoint_pair(r.bandwidth)
        if pair is None:
            raise self.refusal(banned, "backup ")
        first, second = (self.make_path(p) for p in pair)
        if r.max_hops is not None and max(first.hop_count, second.hop_count) > r.max_hops:
            raise FailedPrecondition(
                f"protect: the link-disjoint pair found from {r.src} to {r.dst} with "
                f"{format_bandwidth(r.bandwidth)} free crosses {first.hop_count} and {second.hop_count} hops, "
                f"more than max_hops {r.max_hops}"
            )
        if self._better(list(second.directions[1:-1]), list(first.directions[1:-1]), r.policy):
            first, second = second, first
        return Route(first, second)

    def disjoint_pair(self, need: float) -> tuple[list[LinkDirection], list[LinkDirection]] | None:
        """Two paths sharing no physical link, when greedy primary-then-backup finds none.

        Each physical link becomes a unit-capacity gadget both of its directions pass
        through, so networkx's edge-disjoint paths cannot use one link twice.
        """
        s, t = self.src_switch, self.dst_switch
        groups = self.topology.protectable_groups
        if s == t or groups[s] != groups[t]:
            return None
        graph = nx.DiGraph()
        for link, (forward, backward) in self.topology.link_directions.items():
            if link in self.banned_links:
                continue
            usable = [d for d in (forward, backward)
                      if self.free(d) >= need and d.src not in self.banned_nodes and d.dst not in self.banned_nodes]
            for d in usable:
                graph.add_edge(d.src, ("in", link))
                graph.add_edge(("in", link), ("out", link))
                graph.add_edge(("out", link), d.dst, direction=d)
        if s not in graph or t not in graph:
            return None
        try:
            found = list(nx.edge_disjoint_paths(graph, s, t, cutoff=2))
        except nx.NetworkXError:
            return None
        if len(found) < 2:
            return None
        paths = []
        for nodes in found[:2]:
            crossed = [graph[a][b]["direction"] for a, b in itertools.pairwise(nodes)
                       if isinstance(a, tuple) and a[0] == "out"]
            paths.append(_drop_loops(s, crossed))
        if {d.link for d in paths[0]} & {d.link for d in paths[1]}:
            return None
        return paths[0], paths[1]

    def refusal(self, banned_links: frozenset[str], what: str) -> Exception:
        """The error that explains why no (backup) path fits the request."""
        r = self.request
        need = format_bandwidth(r.bandwidth)
        window = format_window(r.start, r.end)
        for access, dtn in ((self.up, r.src), (self.down, r.dst)):
            free = self.free(access)
            if free < r.bandwidth:
                return NoCapacity(
                    f"no {what}path has {need} free {window}: the access link of DTN {dtn} ({access.id}) "
                    f"has {format_bandwidth(max(free, 0))} free of its {format_bandwidth(access.capacity)} NIC",
                    bottleneck=access.id, free_bps=max(free, 0),
                )
        shape = self.compose(_UNLIMITED, banned_links, "shortest", None, self.waypoints if not what else [])
        constraints = self._constraint_text(banned_links, what)
        if shape is None:
            return FailedPrecondition(
                f"no {what}route exists from {r.src} ({self.src_switch}) to {r.dst} ({self.dst_switch}){constraints}"
            )
        if r.max_hops is not None:
            fits = self.compose(r.bandwidth, banned_links, "shortest", None, self.waypoints if not what else [])
            if fits is not None:
                return FailedPrecondition(
                    f"no {what}path with {need} free {window} is within max_hops={r.max_hops}; "
                    f"the shortest that has the bandwidth crosses {len(fits)} hops"
                )
        widest = self.compose(_UNLIMITED, banned_links, "widest", None, self.waypoints if not what else [])
        if widest is None:  # greedy widest segments through waypoints can dead-end where shortest did not
            widest = shape
        path = self.make_path(widest)
        bottleneck = self.topology.directions[path.bottleneck]
        return NoCapacity(
            f"no {what}path has {need} free {window}{constraints}: the widest, {path.describe()}, is limited "
            f"by link {bottleneck.link} ({bottleneck.id}) with {format_bandwidth(max(path.free_bps, 0))} free "
            f"of {format_bandwidth(bottleneck.capacity)}",
            bottleneck=bottleneck.id, free_bps=max(path.free_bps, 0),
        )

    def _constraint_text(self, banned_links: frozenset[str], what: str) -> str:
        parts = []
        if self.banned_nodes:
            parts.append("switches " + ", ".join(sorted(self.banned_nodes)))
        chosen = banned_links - self.down_links
        if chosen:
            label = "links shared with the primary or excluded" if what else "links"
            parts.append(f"{label} " + ", ".join(sorted(chosen)))
        if self.down_links:
            parts.append("links down " + ", ".join(sorted(self.down_links)))
        text = f" avoiding {'; '.join(parts)}" if parts else ""
        if self.request.include and not what:
            text += " through " + ", ".join(self.request.include)
        return text

    def alternatives(self, k: int) -> list[Path]:
        found = self.candidates(k) if self.access_free >= self.request.bandwidth else []
        if not found:
            raise self.refusal(self.banned_links, "")
        return found

    def candidates(self, k: int) -> list[Path]:
        """Up to `k` paths that fit, from Yen's loop-free paths in cost order (at most
        `_SCAN_LIMIT` examined, so constraints that filter most of them cannot run away)."""
        r = self.request
        collapsed = nx.DiGraph()
        collapsed.add_nodes_from(n for n in self.topology.switches if n not in self.banned_nodes)
        for u, out in self.topology.adjacency.items():
            if u in self.banned_nodes:
                continue
            for v in out:
                if v in self.banned_nodes:
                    continue
                options = self.choices(u, v, r.bandwidth, self.banned_links)
                if options:
                    collapsed.add_edge(u, v, cost=min(self.cost(d) for d in options))
        candidates: list[Path] = []
        wanted = k if r.policy == "shortest" else 4 * k
        scanned = _simple_paths(collapsed, self.src_switch, self.dst_switch)
        for nodes in itertools.islice(scanned, _SCAN_LIMIT):
            if r.max_hops is not None and len(nodes) - 1 > r.max_hops:
                continue
            through = self._waypoint_hops(nodes)
            if through is None:
                continue
            candidates.append(self.make_path(self._directions(nodes, r.bandwidth, self.banned_links,
                                                                widest=r.policy == "widest", through=through)))
            if len(candidates) >= wanted:
                break
        if r.policy == "widest":
            candidates.sort(key=lambda p: (-p.free_bps, p.hop_count))
        return candidates[:k]

    def _waypoint_hops(self, nodes: list[str]) -> dict[int, frozenset[str]] | None:
        """None unless `nodes` meets every waypoint in order; else hop index -> links it must cross.

        As in `compose`, a link waypoint may start on the switch of the waypoint before it.
        """
        position = 0
        through: dict[int, frozenset[str]] = {}
        for waypoint in self.waypoints:
            end = len(nodes) if isinstance(waypoint, str) else len(nodes) - 1
            while position < end and not self._at_waypoint(nodes, position, waypoint):
                position += 1
            if position >= end:
                return None
            if not isinstance(waypoint, str):
                through[position] = waypoint
                position += 1
        return through

    def _at_waypoint(self, nodes: list[str], i: int, waypoint: str | frozenset[str]) -> bool:
        if isinstance(waypoint, str):
            return nodes[i] == waypoint
        u, v = nodes[i], nodes[i + 1]
        return any(d.link in waypoint for d in self.choices(u, v, self.request.bandwidth, self.banned_links))


def _simple_paths(graph: nx.DiGraph, s: str, t: str) -> Iterator[list[str]]:
    if s == t:
        yield [s]
        return
    try:
        yield from nx.shortest_simple_paths(graph, s, t, weight="cost")
    except nx.NetworkXNoPath:
        return


def _drop_loops(start: str, directions: list[LinkDirection]) -> list[LinkDirection]:
    """Cut any cycle out of a path from `start` so each switch is crossed once."""
    out: list[LinkDirection] = []
    for d in directions:
        if d.dst == start:
            out = []
            continue
        seen = next((i for i, e in enumerate(out) if e.dst == d.dst), None)
        if seen is None:
            out.append(d)
        else:
            del out[seen + 1:]
    return out


def path_to_dict(path: Path) -> dict:
    """Plain data for JSON output: route, per-switch ports, links, bottleneck."""
    return {
        "route": [path.src, *path.switches, path.dst],
        "hops": [{"switch": h.switch, "in_port": h.in_port, "out_port": h.out_port} for h in path.hops],
        "links": list(path.links),
        "hop_count": path.hop_count,
        "latency_ms": path.latency_ms,
        "free_bps": path.free_bps,
        "bottleneck": path.bottleneck,
        "directions": list(path.direction_ids),
    }
