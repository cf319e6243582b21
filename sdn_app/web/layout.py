"""Where each switch goes on the live map: plain geometry, no web framework.

The map has one or two panes:

- A show floor (the sites of kind `booth` and `hub`, a few hundred metres apart) is a schematic
  ring in a pane of its own: the hubs' switches in the middle, the booths' switches around them
  in the order that keeps booth-to-booth links short and uncrossed (the switches of one booth side
  by side, the widest links shortest). The ring opens toward the other pane, so the links from the
  show floor to the WAN leave through the opening without crossing a booth. The pane goes on the
  side where the show floor lies (west of the WAN's middle: left).
- The WAN (every other site) is geographic: sites keep their west-east and north-south order, but
  each gap between two neighbouring longitudes (latitudes) is shrunk to its square root and none
  stays wider than `MAX_GAP_SHARE` of the whole, so an ocean between two continents does not take
  the map. Sites still too close are pushed apart. Switches in no site, or in a site without
  coordinates, are placed by a force layout pulled toward their neighbours (the located sites stay
  put); a topology without any coordinates is a circle when its links form one ring, else a force
  layout.
- Domains: a remote site (one beyond an interdomain port, in a neighbouring domain, with no switches
  of ours) is a point of the WAN's area like any site, joined to the switch of its interdomain port.
  An interdomain port with no site beyond it gets a point of its own, named by the neighbour's NSA
  and placed by its switch. Topologies without domains are laid out as if this were not there.

Positions are given twice: `switches` in a `width` x `height` picture, and per switch a
`Placement` in its pane's own coordinates, which the page (sdn_app/web/static/map.js) fits to the
size of the window, with its labels in screen pixels: `pane_rects` is the rule both use.

>>> from sdn_app.core.topology import Topology
>>> from sdn_app.core.topology_schema import load_topology_spec
>>> layout = map_layout(Topology(load_topology_spec("topologies/ring8.yaml")))
>>> sorted(layout.switches) == [f"s{i}" for i in range(1, 9)]
True
>>> all(0 <= x <= layout.width and 0 <= y <= layout.height for x, y in layout.switches.values())
True
>>> [pane.name for pane in map_layout(Topology(load_topology_spec("topologies/sc16.yaml"))).panes]
['floor', 'wan']
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from sdn_app.core.topology import Topology

WIDTH = 1160.0  # the picture `switches` is given in (the map's size on a 1600 x 1000 screen)
HEIGHT = 760.0
FLOOR_KINDS = frozenset({"booth", "hub"})
PANE_GAP = 18.0  # between the two panes
FLOOR_ASPECT_MAX = 1.2  # the show floor's pane is at most this much wider than high (or higher than wide)
RING_MARGIN = (96.0, 40.0)  # room beside (x) and above/below (y) the ring for the booths' labels
AREA_MARGIN = (64.0, 34.0)  # room inside a geographic or force pane's edges for the labels
MIN_GAP = 64.0  # wanted distance between two sites' points in an area pane (less when crowded)
SITE_SPREAD = 18.0  # from a WAN site's point to each of its switches (when it has several)
SAME_SITE_STEP = 0.6  # ring step between two switches of one booth, relative to a step between booths
MAX_GAP_SHARE = 0.3  # no gap between neighbouring longitudes (latitudes) wider than this share of all
HUB_RADIUS = 0.3  # several hub switches: on a small ring of this radius (the booth ring's is 1)
OPENING_MIN = math.radians(28)  # half the ring's opening toward the WAN, at least and at most
OPENING_MAX = math.radians(60)
OPENING_MARGIN = math.radians(16)  # between the steepest link to the WAN and the first booth
EXHAUSTIVE_ORDERS = 720  # ring orders tried one by one up to this many, else improved by local moves


Rect = tuple[float, float, float, float]  # x, y, width, height


@dataclass(frozen=True)
class SitePoint:
    name: str
    kind: str
    x: float
    y: float
    lat: float | None
    lon: float | None
    switches: tuple[str, ...]
    pane: str


@dataclass(frozen=True)
class Pane:
    """A part of the map: `ring` (the show floor, round: scaled alike in x and y) or `area` (a
    geographic or force layout, stretched to fill its pane)."""

    name: str  # "floor" or "wan"
    kind: str  # "ring" or "area"
    title: str
    x: float  # where it lies in the `width` x `height` picture
    y: float
    width: float
    height: float


@dataclass(frozen=True)
class Placement:
    """Where a switch goes in its pane. In a `ring` pane (u, v) is relative to the ring's centre
    in ring radii, in a frame where the other pane lies toward +u; in an `area` pane (u, v) is in
    [0, 1] x [0, 1] across the pane's inner box. (dx, dy): pixels from that point (the switches of a
    WAN site around the site's point). `role`: hub, booth, wan (in a site) or free; `slot`: a
    booth's place on the ring (0, 1, ...: neighbours differ by one), else None."""

    pane: str
    u: float
    v: float
    dx: float
    dy: float
    role: str
    slot: int | None

    def json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RemotePoint:
    """A remote site (or, for an interdomain port with no site beyond it, the neighbour's domain)
    in the WAN's area: `placement` as a switch's, `port` the interdomain port it lies beyond."""

    name: str
    port: str
    switch: str  # the port's switch, where its edge starts
    domain: str  # the neighbour's NSA id
    x: float
    y: float
    lat: float | None
    lon: float | None
    dtns: tuple[str, ...]
    placement: Placement


def nsa_short(nsa: str) -> str:
    """An NSA id as the map names a domain: `urn:ogf:network:rnp.sc16:nsa` -> `rnp.sc16`."""
    return nsa.removeprefix("urn:ogf:network:").removesuffix(":nsa") or nsa


def remote_sites(topology: Topology) -> list[tuple[str, str, float | None, float | None, tuple[str, ...]]]:
    """Each remote point of `topology`: (name, interdomain port, lat, lon, remote DTNs): its remote
    sites, then one per interdomain port with no site beyond it (named by the neighbour's NSA, with
    the port's remote DTNs listed in no site)."""
    out = [(s.name, s.beyond, s.lat, s.lon, tuple(s.dtns)) for s in topology.spec.sites
           if s.beyond is not None and not s.switches]
    in_sites = {d for *_, dtns in out for d in dtns}
    used = {name for name, *_ in out}
    for port in topology.interdomain.values():
        if any(beyond == port.name for _, beyond, *_ in out):
            continue
        name = nsa_short(port.peer.nsa)
        if name in used:
            name = f"{name} ({port.name})"
        used.add(name)
        out.append((name, port.name, None, None,
                    tuple(d for d in topology.remote_site_dtns(port.name) if d not in in_sites)))
    return out


@dataclass(frozen=True)
class MapLayout:
    width: float
    height: float
    sites: tuple[SitePoint, ...]
    switches: dict[str, tuple[float, float]]  # switch -> (x, y)
    panes: tuple[Pane, ...]
    placements: dict[str, Placement]
    floor_share: float  # the share of the width (height) the show floor's pane asks for
    floor_side: str  # "left" or "right": where the show floor's pane goes beside the WAN's
    ring_circular: bool  # the booths all round the ring (no WAN link leaves the show floor), else in an arc
    remote: tuple[RemotePoint, ...] = ()  # the neighbouring domains' sites (`remote_sites`)

    def page_json(self) -> dict[str, Any]:
        """The panes and the rules with which the page fits them to its window (`pane_rects`,
        `ring_frame`, `area_point`)."""
        return {"panes": [asdict(p) for p in self.panes], "floor_share": self.floor_share,
                "floor_side": self.floor_side, "ring_circular": self.ring_circular, "pane_gap": PANE_GAP,
                "floor_aspect_max": FLOOR_ASPECT_MAX, "ring_margin": list(RING_MARGIN),
                "area_margin": list(AREA_MARGIN)}


def pane_rects(width: float, height: float, names: Sequence[str], floor_share: float,
               floor_side: str) -> tuple[dict[str, tuple[float, float, float, float]], str]:
    """Each pane's (x, y, w, h) in a `width` x `height` map, and where the WAN lies seen from the
    show floor ("right", "left" or "below"). map.js applies the same rule to the window's size."""
    if names != ["floor", "wan"]:
        return {name: (0.0, 0.0, width, height) for name in names}, "right"
    if width >= height:
        wf = min(floor_share * width, FLOOR_ASPECT_MAX * height)
        wan_w = width - wf - PANE_GAP
        if floor_side == "left":
            return {"floor": (0.0, 0.0, wf, height), "wan": (wf + PANE_GAP, 0.0, wan_w, height)}, "right"
        return {"floor": (width - wf, 0.0, wf, height), "wan": (0.0, 0.0, wan_w, height)}, "left"
    hf = min(floor_share * height, FLOOR_ASPECT_MAX * width)
    return {"floor": (0.0, 0.0, width, hf), "wan": (0.0, hf + PANE_GAP, width, height - hf - PANE_GAP)}, "below"


def ring_frame(rect: tuple[float, float, float, float], toward: str) -> tuple[float, float, float, str]:
    """A ring pane's centre and radius, and how its (u, v) turn toward the WAN."""
    x, y, w, h = rect
    radius = max(30.0, min(w / 2 - RING_MARGIN[0], h / 2 - RING_MARGIN[1]))
    return x + w / 2, y + h / 2, radius, toward


def ring_point(u: float, v: float, frame: tuple[float, float, float, str]) -> tuple[float, float]:
    cx, cy, r, toward = frame
    if toward == "left":  # mirrored: north stays up
        u = -u
    elif toward == "below":  # turned a quarter clockwise
        u, v = -v, u
    return cx + u * r, cy + v * r


def area_point(u: float, v: float, rect: tuple[float, float, float, float]) -> tuple[float, float]:
    x, y, w, h = rect
    inner_w, inner_h = max(1.0, w - 2 * AREA_MARGIN[0]), max(1.0, h - 2 * AREA_MARGIN[1])
    return x + AREA_MARGIN[0] + u * inner_w, y + AREA_MARGIN[1] + v * inner_h


# -- the WAN: compressed geography --------------------------------------------------------------------


def warp(values: Iterable[float]) -> dict[float, float]:
    """Each distinct value -> a coordinate in [0, 1], in the same order: the gaps between
    neighbouring values shrunk to their square root, then none wider than `MAX_GAP_SHARE` of all.

    >>> w = warp([0.0, 1.0, 2.0, 3.0, 4.0, 100.0])  # four towns, and one across an ocean
    >>> w[0.0], w[100.0], round(w[2.0] - w[1.0], 6) == round(w[1.0] - w[0.0], 6)
    (0.0, 1.0, True)
    >>> round(w[100.0] - w[4.0], 6) <= MAX_GAP_SHARE
    True
    """
    distinct = sorted(set(values))
    if len(distinct) == 1:
        return {distinct[0]: 0.5}
    gaps = _capped([math.sqrt(b - a) for a, b in itertools.pairwise(distinct)], MAX_GAP_SHARE)
    total = sum(gaps)
    out = {distinct[0]: 0.0}
    at = 0.0
    for value, gap in zip(distinct[1:], gaps, strict=True):
        at += gap
        out[value] = at / total
    return out


def _capped(gaps: list[float], share: float) -> list[float]:
    """`gaps` with the widest cut to one width, the widest that leaves none wider than `share` of
    them all (as they are when there are too few gaps for that)."""
    if max(gaps) <= share * sum(gaps):
        return gaps
    widest = sorted(gaps, reverse=True)
    for cut in range(1, len(gaps)):
        if share * cut >= 1:
            break
        width = share * sum(widest[cut:]) / (1 - share * cut)  # = share x the total once `cut` gaps are cut
        if widest[cut] <= width <= widest[cut - 1]:
            return [min(g, width) for g in gaps]
    return gaps


def _force(names: list[str], edges: list[tuple[str, str]], start: dict[str, tuple[float, float]],
           fixed: set[str], iterations: int = 300) -> dict[str, tuple[float, float]]:
    """Fruchterman-Reingold from `start` (every name); `fixed` ones stay. Without fixed ones the
    layout is free (the caller scales it to its box); with them, the others stay in the unit square
    and push only their near neighbours away, so they settle by the switches they link to instead
    of being pressed against the edges."""
    n = len(names)
    index = {name: i for i, name in enumerate(names)}
    pos = np.array([start[name] for name in names], dtype=float)
    movable = np.array([name not in fixed for name in names])
    if n < 2 or not movable.any():
        return {name: (float(pos[i, 0]), float(pos[i, 1])) for i, name in enumerate(names)}
    pairs = np.array([(index[a], index[b]) for a, b in edges if a != b], dtype=int).reshape(-1, 2)
    anchored = bool(fixed)
    k = (0.5 if anchored else 0.9) / math.sqrt(n)
    iterations = max(80, min(iterations, 60000 // n))  # a big network: fewer rounds, each costs n^2
    for step in range(iterations):
        temperature = 0.08 * (1 - step / iterations) + 0.002
        dx = pos[:, 0:1] - pos[:, 0]
        dy = pos[:, 1:2] - pos[:, 1]
        square = np.maximum(dx * dx + dy * dy, 1e-6)
        strength = k * k / square  # k^2 / d, over d for the unit vector
        if anchored:
            strength[square > 4 * k * k] = 0.0
        push = np.stack([(dx * strength).sum(axis=1), (dy * strength).sum(axis=1)], axis=1)
        if len(pairs):
            d = pos[pairs[:, 0]] - pos[pairs[:, 1]]
            length = np.maximum(np.hypot(d[:, 0], d[:, 1]), 1e-3)
            pull = d * (length / k)[:, None]
            np.add.at(push, pairs[:, 0], -pull)
            np.add.at(push, pairs[:, 1], pull)
        size = np.maximum(np.hypot(push[:, 0], push[:, 1]), 1e-9)
        move = push / size[:, None] * np.minimum(size, temperature)[:, None]
        pos[movable] += move[movable]
        if anchored:
            pos[movable] = np.clip(pos[movable], 0.0, 1.0)
    return {name: (float(pos[i, 0]), float(pos[i, 1])) for i, name in enumerate(names)}


def _separate(points: dict[str, tuple[float, float]], radius: dict[str, float], gap: float,
              box: tuple[float, float, float, float], rounds: int = 120) -> dict[str, tuple[float, float]]:
    """Push points closer than `gap` (plus their radii) apart, within `box` (x0, y0, x1, y1)."""
    names = list(points)
    if len(names) < 2:
        return dict(points)
    pos = np.array([points[n] for n in names], dtype=float)
    extra = np.array([radius.get(n, 0.0) for n in names])
    wanted = gap + extra[:, None] + extra[None, :]
    np.fill_diagonal(wanted, 0.0)
    # a fixed, tiny spread so that points at the very same place part in some direction
    spread = np.array([[math.cos(2.4 * i), math.sin(2.4 * i)] for i in range(len(names))]) * 1e-3
    pos += spread
    for _ in range(rounds):
        dx = pos[:, 0:1] - pos[:, 0]
        dy = pos[:, 1:2] - pos[:, 1]
        distance = np.maximum(np.hypot(dx, dy), 1e-6)
        short = np.clip(wanted - distance, 0.0, None)
        if not short.any():
            break
        share = short / 2 * 0.9 / distance
        pos[:, 0] = np.clip(pos[:, 0] + (dx * share).sum(axis=1), box[0], box[2])
        pos[:, 1] = np.clip(pos[:, 1] + (dy * share).sum(axis=1), box[1], box[3])
    return {n: (float(pos[i, 0]), float(pos[i, 1])) for i, n in enumerate(names)}


def _single_ring(names: list[str], edges: list[tuple[str, str]]) -> list[str] | None:
    """The switches in ring order when the links form exactly one ring through all of them."""
    neighbours: dict[str, set[str]] = {n: set() for n in names}
    for a, b in edges:
        if a != b:
            neighbours[a].add(b)
            neighbours[b].add(a)
    if len(names) < 3 or any(len(v) != 2 for v in neighbours.values()):
        return None
    order = [names[0]]
    previous = None
    while True:
        here = order[-1]
        following = sorted(neighbours[here] - {previous})[0]
        if following == order[0]:
            break
        previous = here
        order.append(following)
    return order if len(order) == len(names) else None


def _area_layout(items: dict[str, tuple[float, float] | None], members: dict[str, list[str]],
                 edges: list[tuple[str, str]], rect: Rect) -> dict[str, tuple[float, float]]:
    """Points (in the picture) for the items of an area pane: an item is a located site (lon, lat)
    or a switch without coordinates (None); `members`: item -> its switches; `edges` between switches."""
    owner = {switch: item for item, switches in members.items() for switch in switches}
    item_edges = sorted({tuple(sorted((owner[a], owner[b]))) for a, b in edges
                         if a in owner and b in owner and owner[a] != owner[b]})
    names = list(items)
    located = {name: xy for name, xy in items.items() if xy is not None}
    unit: dict[str, tuple[float, float]] = {}
    if located:
        xs = warp(lon for lon, _ in located.values())
        ys = warp(-lat for _, lat in located.values())
        unit = {name: (xs[lon], ys[-lat]) for name, (lon, lat) in located.items()}
    free = [name for name in names if name not in unit]
    if free:
        ring = None if unit else _single_ring(names, [(a, b) for a, b in item_edges])
        if ring is not None:
            for i, name in enumerate(ring):
                angle = -math.pi / 2 + 2 * math.pi * i / len(ring)
                unit[name] = (0.5 + 0.5 * math.cos(angle), 0.5 + 0.5 * math.sin(angle))
        else:
            # each free item starts by its neighbours placed before it: breadth first from the
            # located ones, then from the first of each part of the network that has none
            neighbours: dict[str, list[str]] = {n: [] for n in names}
            for a, b in item_edges:
                neighbours[a].append(b)
                neighbours[b].append(a)
            order: list[str] = []
            seen = set(unit)
            queue = deque(name for name in names if name in unit)
            for root in [None, *free]:
                if root is not None and root not in seen:
                    seen.add(root)
                    order.append(root)
                    queue.append(root)
                while queue:
                    for other in neighbours[queue.popleft()]:
                        if other not in seen:
                            seen.add(other)
                            order.append(other)
                            queue.append(other)
            start = dict(unit)
            for i, name in enumerate(order):
                placed = [start[m] for m in neighbours[name] if m in start]
                cx = sum(p[0] for p in placed) / len(placed) if placed else 0.5
                cy = sum(p[1] for p in placed) / len(placed) if placed else 0.5
                reach = 0.06 if placed else 0.35
                angle = 2.4 * (i + 1)  # a fixed spread of directions
                start[name] = (min(1.0, max(0.0, cx + reach * math.cos(angle))),
                               min(1.0, max(0.0, cy + reach * math.sin(angle))))
            unit = _force(names, [(a, b) for a, b in item_edges], start, set(unit))
            if not located:  # a pure force layout: use the whole pane
                xs0 = [p[0] for p in unit.values()]
                ys0 = [p[1] for p in unit.values()]
                sx, sy = (max(xs0) - min(xs0)) or 1.0, (max(ys0) - min(ys0)) or 1.0
                unit = {n: ((x - min(xs0)) / sx, (y - min(ys0)) / sy) for n, (x, y) in unit.items()}
    x0, y0 = area_point(0.0, 0.0, rect)
    x1, y1 = area_point(1.0, 1.0, rect)
    points = {name: (x0 + u * (x1 - x0), y0 + v * (y1 - y0)) for name, (u, v) in unit.items()}
    crowd = math.sqrt(max(1.0, (x1 - x0) * (y1 - y0)) / max(1, len(points)))
    radius = {item: SITE_SPREAD if len(members[item]) > 1 else 0.0 for item in items}
    return _separate(points, radius, min(MIN_GAP, 0.75 * crowd), (x0, y0, x1, y1))


# -- the show floor: a ring ---------------------------------------------------------------------------


def _ring_cost(order: Sequence[str], weights: dict[tuple[str, str], float], wan_linked: set[str],
               circular: bool) -> float:
    slot = {name: i for i, name in enumerate(order)}
    n = len(order)
    spans = []
    cost = 0.0
    for (a, b), weight in weights.items():
        i, j = sorted((slot[a], slot[b]))
        d = j - i if not circular else min(j - i, n - (j - i))
        cost += weight * (d - 1)
        if d > 1:
            spans.append((i, j))
    for (i, j), (k, m) in itertools.combinations(spans, 2):
        if i < k < j < m or k < i < m < j:
            cost += 1.5
    if not circular:
        cost += sum(0.5 * min(slot[name], n - 1 - slot[name]) for name in wan_linked if name in slot)
    return cost


def _unit_orders(units: list[list[str]]) -> Iterable[list[str]]:
    """Every order of `units` (each a booth's switches, side by side, in either order)."""
    inner = [list(itertools.permutations(unit)) if len(unit) <= 3 else [tuple(unit)] for unit in units]
    for order in itertools.permutations(range(len(units))):
        for choice in itertools.product(*(inner[i] for i in order)):
            yield [name for part in choice for name in part]


def ring_order(units: list[list[str]], weights: dict[tuple[str, str], float], wan_linked: set[str],
               circular: bool) -> list[str]:
    """The booths' switches around the ring: the order of the lowest cost (links between ring
    neighbours cost nothing, longer ones their span, weighted by capacity; each crossing of two
    longer ones costs more; switches with WAN links want the ends, by the opening)."""

    def cost(order: Sequence[str]) -> float:
        return _ring_cost(order, weights, wan_linked, circular)

    count = math.factorial(len(units)) * math.prod(math.factorial(len(u)) if len(u) <= 3 else 1 for u in units)
    if count <= EXHAUSTIVE_ORDERS:
        return min(_unit_orders(units), key=cost)
    best: list[list[str]] | None = None
    best_cost = math.inf
    for first in range(min(len(units), 12)):  # a few starts, each improved by moving one booth at a time
        arrangement = [units[first], *units[:first], *units[first + 1:]]
        current = cost([n for u in arrangement for n in u])
        improved = True
        while improved:
            improved = False
            for i in range(len(arrangement)):
                for j in range(len(arrangement)):
                    if i == j:
                        continue
                    for flip in (False, True):
                        trial = arrangement[:i] + arrangement[i + 1:]
                        unit = list(reversed(arrangement[i])) if flip else arrangement[i]
                        trial.insert(j, unit)
                        trial_cost = cost([n for u in trial for n in u])
                        if trial_cost < current - 1e-9:
                            arrangement, current, improved = trial, trial_cost, True
        if current < best_cost - 1e-9:
            best, best_cost = arrangement, current
    assert best is not None
    return [n for u in best for n in u]


def _capacity_weight(capacity: int, smallest: int) -> float:
    return 1.0 + math.log10(max(1.0, capacity / smallest))


# -- the whole map ------------------------------------------------------------------------------------


def map_layout(topology: Topology, width: float = WIDTH, height: float = HEIGHT) -> MapLayout:
    """Place every site and switch of `topology` in a `width` x `height` picture."""
    taken: set[str] = set()
    site_members: dict[str, list[str]] = {}
    for site in topology.spec.sites:
        members = [n for n in site.switches if n in topology.switches and n not in taken]
        taken.update(members)
        if members:
            site_members[site.name] = members
    sites = {s.name: s for s in topology.spec.sites if s.name in site_members}
    floor_sites = [name for name, s in sites.items() if s.kind in FLOOR_KINDS]
    if len(floor_sites) < 2:
        floor_sites = []
    floor_switches = [n for site in floor_sites for n in site_members[site]]
    located = {name: (s.lon, s.lat) for name, s in sites.items()
               if name not in floor_sites and s.lat is not None and s.lon is not None}
    # the WAN pane's items: its located sites ("site:NAME") and the switches without a place ("switch:NAME")
    items: dict[str, tuple[float, float] | None] = {f"site:{name}": lonlat for name, lonlat in located.items()}
    members = {f"site:{name}": site_members[name] for name in located}
    placed = {n for name in located for n in site_members[name]} | set(floor_switches)
    for name in topology.switches:
        if name not in placed:
            items[f"switch:{name}"] = None
            members[f"switch:{name}"] = [name]
    # remote sites: items of the WAN pane too, each a pseudo switch "remote:NAME" joined to its port's switch
    remote = remote_sites(topology)
    edges = [(link.a, link.b) for link in topology.links.values()]
    for name, port, lat, lon, _ in remote:
        key = f"remote:{name}"
        items[key] = (lon, lat) if lat is not None and lon is not None else None
        members[key] = [key]
        edges.append((topology.interdomain[port].switch, key))
    located_any = located or any(lat is not None and lon is not None for _, _, lat, lon, _ in remote)
    pane_names = (["floor"] if floor_sites else []) + (["wan"] if items else [])

    floor_set = set(floor_switches)
    floor_side = "left"
    wan_lons = [lonlat[0] for lonlat in items.values() if lonlat is not None]
    if floor_sites and wan_lons:
        floor_lons = [sites[s].lon for s in floor_sites if sites[s].lon is not None]
        if floor_lons and sum(floor_lons) / len(floor_lons) > sum(wan_lons) / len(wan_lons):
            floor_side = "right"
    share = 0.0
    if floor_sites:
        share = 1.0 if not items else min(0.56, max(0.4, len(floor_switches) / len(topology.switches)))
    rects, toward = pane_rects(width, height, pane_names, share, floor_side)

    placements: dict[str, Placement] = {}
    points: dict[str, tuple[float, float]] = {}
    site_points: dict[str, tuple[float, float]] = {}
    if items:
        _place_wan(items, members, edges, rects["wan"], placements, points, site_points)
    circular = False
    if floor_sites:
        hubs = [n for s in floor_sites if sites[s].kind == "hub" for n in site_members[s]]
        booth_units = [site_members[s] for s in floor_sites if sites[s].kind != "hub"]
        if not booth_units:  # hubs only: they make the ring
            booth_units, hubs = [[n] for n in hubs], []
        outward = [placements[other] for a, b in edges for n, other in ((a, b), (b, a))
                   if n in floor_set and other in placements]
        circular = not outward
        half = _opening(outward, width, height, pane_names, share, floor_side) if outward else 0.0
        _place_floor(topology, booth_units, hubs, floor_set, half, ring_frame(rects["floor"], toward),
                     placements, points)
        for s in floor_sites:
            xy = [points[n] for n in site_members[s]]
            site_points[s] = (sum(p[0] for p in xy) / len(xy), sum(p[1] for p in xy) / len(xy))

    panes = []
    for name in pane_names:
        x, y, w, h = rects[name]
        if name == "floor":
            panes.append(Pane("floor", "ring", "show floor · schematic", x, y, w, h))
        else:
            title = ("WAN · geographic, not to scale" if located_any and floor_sites else "WAN" if floor_sites else "")
            panes.append(Pane("wan", "area", title, x, y, w, h))
    site_list = tuple(SitePoint(s.name, s.kind, round(site_points[s.name][0], 1), round(site_points[s.name][1], 1),
                                s.lat, s.lon, tuple(site_members[s.name]), "floor" if s.name in floor_sites else "wan")
                      for s in topology.spec.sites if s.name in site_points)
    ordered = {name: points[name] for name in topology.switches}
    remote_list = tuple(
        RemotePoint(name, port, topology.interdomain[port].switch, topology.interdomain[port].peer.nsa,
                    round(points[f"remote:{name}"][0], 1), round(points[f"remote:{name}"][1], 1), lat, lon, dtns,
                    replace(placements[f"remote:{name}"], role="remote"))
        for name, port, lat, lon, dtns in remote)
    return MapLayout(width, height, site_list, ordered, tuple(panes),
                     {name: placements[name] for name in topology.switches}, share, floor_side, circular, remote_list)


def _place_wan(items: dict[str, tuple[float, float] | None], members: dict[str, list[str]],
               edges: list[tuple[str, str]], rect: Rect, placements: dict[str, Placement],
               points: dict[str, tuple[float, float]], site_points: dict[str, tuple[float, float]]) -> None:
    """The WAN pane's switches: each item's point (`_area_layout`), a site's switches around it."""
    x0, y0 = area_point(0.0, 0.0, rect)
    x1, y1 = area_point(1.0, 1.0, rect)
    for item, (x, y) in _area_layout(items, members, edges, rect).items():
        switches = members[item]
        offsets = [(0.0, 0.0)] if len(switches) == 1 else [
            (SITE_SPREAD * math.cos(-math.pi / 2 + 2 * math.pi * i / len(switches)),
             SITE_SPREAD * math.sin(-math.pi / 2 + 2 * math.pi * i / len(switches))) for i in range(len(switches))]
        u, v = (x - x0) / ((x1 - x0) or 1.0), (y - y0) / ((y1 - y0) or 1.0)
        role = "wan" if item.startswith("site:") else "free"
        for switch, (dx, dy) in zip(switches, offsets, strict=True):
            placements[switch] = Placement("wan", round(u, 4), round(v, 4), round(dx, 1), round(dy, 1), role, None)
            points[switch] = (x + dx, y + dy)
        if role == "wan":
            site_points[item.removeprefix("site:")] = (x, y)


def _place_floor(topology: Topology, booth_units: list[list[str]], hubs: list[str], floor: set[str], half: float,
                 frame: tuple[float, float, float, str], placements: dict[str, Placement],
                 points: dict[str, tuple[float, float]]) -> None:
    """The show floor's switches: the booths' round the ring (`ring_order`; in an arc that leaves
    an opening of half-angle `half` toward the WAN, or all round when `half` is 0), the hubs' in
    the middle."""
    booths = {n for unit in booth_units for n in unit}
    smallest = min((link.capacity for link in topology.links.values()), default=1) or 1
    weights: dict[tuple[str, str], float] = {}
    wan_linked: set[str] = set()
    for link in topology.links.values():
        if link.a in booths and link.b in booths and link.a != link.b:
            key = (min(link.a, link.b), max(link.a, link.b))
            weights[key] = max(weights.get(key, 0.0), _capacity_weight(link.capacity, smallest))
        for end, other in ((link.a, link.b), (link.b, link.a)):
            if end in booths and other not in floor:
                wan_linked.add(end)
    circular = half == 0.0
    order = ring_order(booth_units, weights, wan_linked, circular)
    unit_of = {n: i for i, unit in enumerate(booth_units) for n in unit}
    steps = [SAME_SITE_STEP if unit_of[a] == unit_of[b] else 1.0 for a, b in itertools.pairwise(order)]
    if circular:
        unit_angle = 2 * math.pi / (sum(steps) + 1.0)  # and one step from the last back to the first
        angle = math.pi / 2 + unit_angle / 2  # the first one just left of the bottom
    else:
        unit_angle = (2 * math.pi - 2 * half) / sum(steps) if steps else 0.0
        angle = half if steps else math.pi  # a lone booth: opposite the opening
    for slot, name in enumerate(order):
        if slot:
            angle += unit_angle * steps[slot - 1]
        u, v = math.cos(angle), math.sin(angle)
        placements[name] = Placement("floor", round(u, 4), round(v, 4), 0.0, 0.0, "booth", slot)
        points[name] = ring_point(u, v, frame)
    for i, name in enumerate(hubs):
        if len(hubs) == 1:
            u = v = 0.0
        else:
            a = math.pi + 2 * math.pi * i / len(hubs)
            u, v = HUB_RADIUS * math.cos(a), HUB_RADIUS * math.sin(a)
        placements[name] = Placement("floor", round(u, 4), round(v, 4), 0.0, 0.0, "hub", None)
        points[name] = ring_point(u, v, frame)


def _opening(outward: list[Placement], width: float, height: float, pane_names: list[str], share: float,
             floor_side: str) -> float:
    """Half the ring's opening toward the WAN: wide enough for the links to the WAN switches as seen
    from the ring's centre (in the ring's frame the WAN lies toward +u), on maps from a little
    higher to much wider than `width` x `height` (the page fits the panes to its window), with
    `OPENING_MARGIN` to spare; within OPENING_MIN..MAX."""
    half = OPENING_MIN
    for aspect in (0.8, 1.0, 1.3):
        rects, toward = pane_rects(width * aspect, height, pane_names, share, floor_side)
        cx, cy, _, _ = ring_frame(rects["floor"], toward)
        for placement in outward:
            px, py = area_point(placement.u, placement.v, rects["wan"])
            dx, dy = px + placement.dx - cx, py + placement.dy - cy
            if toward == "left":
                dx = -dx
            elif toward == "below":
                dx, dy = dy, -dx
            half = max(half, min(OPENING_MAX, abs(math.atan2(dy, dx)) + OPENING_MARGIN))
    return half
