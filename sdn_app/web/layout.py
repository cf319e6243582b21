"""Where each site and switch goes on the map: plain geometry, no web framework.

Sites are projected from lon/lat (equirectangular, longitudes shrunk by the cosine of the
mean latitude) and fitted into a `width` x `height` box. Sites closer than `min_gap` pixels
(booths of one show floor, a few hundred metres apart, next to WAN sites thousands of km
away) are spread on a small ring around their centre, keeping their bearing from it, so
each stays visible. The switches of a site sit around the site's point. Switches in no site
(or in a site without coordinates) go on a ring of their own; a topology without any
coordinates is drawn as a circle.

>>> from sdn_app.core.topology import Topology
>>> from sdn_app.core.topology_schema import load_topology_spec
>>> layout = map_layout(Topology(load_topology_spec("topologies/ring8.yaml")))
>>> sorted(layout.switches) == [f"s{i}" for i in range(1, 9)]
True
>>> all(0 <= x <= layout.width and 0 <= y <= layout.height for x, y in layout.switches.values())
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sdn_app.core.topology import Topology

WIDTH = 1000.0
HEIGHT = 620.0
MARGIN = 70.0
MIN_GAP = 46.0  # pixels between two sites' points
SWITCH_SPREAD = 16.0  # pixels from a site's point to each of its switches (when it has several)


@dataclass(frozen=True)
class SitePoint:
    name: str
    kind: str
    x: float
    y: float
    lat: float | None
    lon: float | None
    switches: tuple[str, ...]


@dataclass(frozen=True)
class MapLayout:
    width: float
    height: float
    sites: tuple[SitePoint, ...]
    switches: dict[str, tuple[float, float]]  # switch -> (x, y)


def _ring(n: int, cx: float, cy: float, r: float, start: float = -math.pi / 2) -> list[tuple[float, float]]:
    return [(cx + r * math.cos(start + 2 * math.pi * i / n), cy + r * math.sin(start + 2 * math.pi * i / n))
            for i in range(n)]


def _fit(points: dict[str, tuple[float, float]], width: float, height: float,
         margin: float) -> dict[str, tuple[float, float]]:
    xs = [p[0] for p in points.values()]
    ys = [p[1] for p in points.values()]
    span_x, span_y = max(xs) - min(xs), max(ys) - min(ys)
    inner_w, inner_h = width - 2 * margin, height - 2 * margin
    scale = min(inner_w / span_x if span_x else math.inf, inner_h / span_y if span_y else math.inf)
    if not math.isfinite(scale):
        scale = 1.0
    off_x = margin + (inner_w - span_x * scale) / 2 - min(xs) * scale
    off_y = margin + (inner_h - span_y * scale) / 2 - min(ys) * scale
    return {name: (x * scale + off_x, y * scale + off_y) for name, (x, y) in points.items()}


def _spread_clusters(points: dict[str, tuple[float, float]], min_gap: float) -> dict[str, tuple[float, float]]:
    """Sites closer than `min_gap` to another: on a ring around their cluster's centre."""
    names = list(points)
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if math.dist(points[a], points[b]) < min_gap:
                parent[root(a)] = root(b)
    clusters: dict[str, list[str]] = {}
    for n in names:
        clusters.setdefault(root(n), []).append(n)
    out = dict(points)
    for members in clusters.values():
        if len(members) < 2:
            continue
        cx = sum(points[m][0] for m in members) / len(members)
        cy = sum(points[m][1] for m in members) / len(members)
        radius = max(min_gap, min_gap * len(members) / (2 * math.pi) * 1.1)
        # keep each site's bearing from the centre: order by angle, then even spacing
        ordered = sorted(members, key=lambda m: (math.atan2(points[m][1] - cy, points[m][0] - cx), m))
        start = math.atan2(points[ordered[0]][1] - cy, points[ordered[0]][0] - cx) if len(ordered) else 0.0
        for m, xy in zip(ordered, _ring(len(ordered), cx, cy, radius, start), strict=True):
            out[m] = xy
    return out


def map_layout(topology: Topology, width: float = WIDTH, height: float = HEIGHT, margin: float = MARGIN,
               min_gap: float = MIN_GAP) -> MapLayout:
    """Place every site and switch of `topology` in a `width` x `height` picture."""
    located = [s for s in topology.spec.sites if s.lat is not None and s.lon is not None and s.switches]
    switches: dict[str, tuple[float, float]] = {}
    sites: list[SitePoint] = []
    if located:
        mean_lat = math.radians(sum(s.lat for s in located) / len(located))  # type: ignore[misc]
        raw = {s.name: (s.lon * math.cos(mean_lat), -s.lat) for s in located}  # type: ignore[operator]
        # leave room around the edges for the spread of clusters and the switch rings
        points = _spread_clusters(_fit(raw, width, height, margin + min_gap), min_gap)
        points = _fit(points, width, height, margin) if len(points) > 1 else points
        for site in located:
            x, y = points[site.name]
            members = [name for name in site.switches if name in topology.switches and name not in switches]
            if len(members) == 1:
                switches[members[0]] = (x, y)
            else:
                for name, xy in zip(members, _ring(len(members), x, y, SWITCH_SPREAD), strict=True):
                    switches[name] = xy
            sites.append(SitePoint(site.name, site.kind, x, y, site.lat, site.lon, tuple(members)))
    rest = [name for name in topology.switches if name not in switches]
    if rest:
        if switches:  # a row along the bottom edge
            step = (width - 2 * margin) / max(1, len(rest))
            for i, name in enumerate(rest):
                switches[name] = (margin + step * (i + 0.5), height - margin / 2)
        else:
            r = min(width, height) / 2 - margin
            for name, xy in zip(rest, _ring(len(rest), width / 2, height / 2, r), strict=True):
                switches[name] = xy
    return MapLayout(width, height, tuple(sites), switches)
