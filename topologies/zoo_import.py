"""Import Internet Topology Zoo GraphML files (https://topology-zoo.org/) as tsdn topologies.

Each Zoo node becomes a switch (and, unless it is a 'hyperedge' helper node, a map site);
each Zoo edge becomes one WAN link with its own ports, so parallel edges stay distinct.
Capacities come from `LinkSpeedRaw`, else `LinkSpeed` + `LinkSpeedUnits`, else the
caller's default. Zoo files carry no latency, so none is set: path policy then counts hops
for every link alike. Attributes vary from file to file, so everything is optional and
every fallback is reported in `ZooImport.warnings`.

Domains. `interdomain=["NODE=NSA,STP,VLANS[,URL]", ...]` (the command line's repeatable
`--interdomain`) marks Zoo nodes that lead to another domain: such a node's attachment (the
port a DTN would get) becomes an interdomain port `<switch>-interdomain` to the neighbour
named by its NSA id, with the neighbour's STP facing it, the VLAN range both sides allow and
optionally the neighbour's NSI provider URL, at the default capacity; the node gets no DTN.
NODE is a Zoo node id, a switch name the import gives, or a node label.

Command line: `python -m topologies.zoo_import FILE.graphml --capacity 100G [--dtns]
[--interdomain NODE=NSA,STP,VLANS[,URL]]... [-o OUT.yaml]`.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
import sys
import unicodedata
import warnings as pywarnings
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, DecimalException
from pathlib import Path
from typing import Any

import networkx as nx

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.topology_schema import (
    MAX_DESCRIPTION,
    MAX_TOPOLOGY_DESCRIPTION,
    TopologySpec,
    dump_topology_spec,
    format_vlans,
    parse_topology_spec,
    read_nsa_id,
    read_provider_url,
    read_stp,
    read_vlans,
)
from sdn_app.core.units import format_bandwidth, parse_bandwidth

MAX_NAME = 63  # NAME_PATTERN allows 63 characters
SWITCH_NAME_MAX = 50  # leaves room for "-dtn" and duplicate suffixes
SITE_NAME_MAX = 72  # SiteSpec allows 80; leaves room for duplicate suffixes
DTN_SUFFIX = "-dtn"
INTERDOMAIN_SUFFIX = "-interdomain"
INTERDOMAIN_FLAG = "--interdomain"
_DTN_HOSTS_PER_SUBNET = 254  # 10.x.y.1 .. 10.x.y.254
MAX_DTNS = _DTN_HOSTS_PER_SUBNET * 256 * 256
MAX_CAPACITY = 10**18  # 1 Eb/s: anything above is a typo, not a link
_UNIT_SCALE = {"": None, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}
_TRUE_WORDS = {"1", "true", "yes", "y", "t"}
_FALSE_WORDS = {"0", "false", "no", "n", "f"}
_MISSING_LABELS = {"", "none", "null", "nan", "unknown"}
_LISTED = 10  # how many names a summary warning spells out


@dataclass(frozen=True)
class ZooImport:
    """The result of an import: a valid spec and notes on what was guessed or dropped."""

    spec: TopologySpec
    warnings: list[str]


def slugify(text: Any, max_len: int = SWITCH_NAME_MAX) -> str:
    """Return `text` as a lowercase ASCII name: `São Paulo / SP` -> `sao-paulo-sp` ('' if nothing is left)."""
    if text is None:
        return ""
    ascii_text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return slug[:max_len].rstrip("-")


def _fit(stem: str, tail: str, limit: int, strip: str) -> str:
    return stem[: max(1, limit - len(tail))].rstrip(strip) + tail


def _claim(stem: str, taken: set[str], tail: str = "", limit: int = MAX_NAME, strip: str = "-._ ") -> str:
    """Return `stem + tail`, or `stem + tail + -2`, `-3` ... (shortened to `limit`) so it is not in `taken`."""
    name = _fit(stem, tail, limit, strip)
    number = 2
    while name in taken:
        name = _fit(stem, f"{tail}-{number}", limit, strip)
        number += 1
    taken.add(name)
    return name


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in _TRUE_WORDS
    if isinstance(value, bool | int | float):
        return bool(value) and not (isinstance(value, float) and math.isnan(value))
    return False


def _is_zero(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in _FALSE_WORDS
    return isinstance(value, bool | int | float) and not isinstance(value, bool) and value == 0


def _label(data: dict[str, Any]) -> str:
    """The node's label, whitespace collapsed; '' when missing or a placeholder such as 'None'."""
    raw = data.get("label")
    if raw is None:
        return ""
    text = " ".join(str(raw).split())
    return "" if text.lower() in _MISSING_LABELS else text


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _coordinates(data: dict[str, Any]) -> tuple[float, float] | None:
    lat, lon = _number(data.get("Latitude")), _number(data.get("Longitude"))
    if lat is None or lon is None or not -90 <= lat <= 90 or not -180 <= lon <= 180:
        return None
    return lat, lon


def _clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (descriptions are free text, but bounded in the file format)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def _read_graph(path: Path) -> nx.MultiGraph | nx.MultiDiGraph:
    """Read `path` with networkx; every way a file can be unreadable becomes `InvalidArgument`."""
    source = str(path)
    if not path.exists():
        raise InvalidArgument(f"{source}: no such GraphML file")
    if path.is_dir():
        raise InvalidArgument(f"{source}: is a directory, not a GraphML file")
    try:
        with pywarnings.catch_warnings():
            pywarnings.simplefilter("ignore")  # e.g. "No key type for id d3. Using string"
            graph = nx.read_graphml(source, force_multigraph=True)
    except OSError as exc:
        raise InvalidArgument(f"{source}: cannot read file: {exc.strerror or exc}") from None
    except ET.ParseError as exc:
        raise InvalidArgument(f"{source}: not an XML file ({exc})") from None
    except nx.NetworkXError as exc:
        raise InvalidArgument(f"{source}: not a usable GraphML file: {exc}") from None
    except KeyError as exc:  # an unknown attr.type in a <key> declaration
        raise InvalidArgument(f"{source}: not a usable GraphML file: unknown attribute type {exc}") from None
    except (ValueError, TypeError, AttributeError) as exc:  # a <data> value that does not fit its declared type
        raise InvalidArgument(f"{source}: not a usable GraphML file: bad attribute value ({exc})") from None
    if graph.number_of_nodes() == 0:
        raise InvalidArgument(f"{source}: the GraphML graph has no nodes")
    return graph


def _topology_name(name: str | None, graph: nx.Graph, path: Path) -> str:
    if name is not None:
        slug = slugify(name, MAX_NAME)
        if not slug:
            raise InvalidArgument(f"name: {name!r} has no letters or digits to make a topology name from")
        return slug
    for candidate in (graph.graph.get("label"), graph.graph.get("Network"), path.stem):
        slug = slugify(candidate, MAX_NAME)
        if slug:
            return slug
    return "zoo"


def _speed_from_text(speed: Any, units: Any) -> int:
    """`LinkSpeed` and `LinkSpeedUnits` ("10", "G") as bits/s; raises ValueError when unreadable."""
    unit_text = "" if units is None else str(units).strip()
    unit = re.sub(r"(?i)(bps|bit/s|b/s|bits/s|bits|bit|b)$", "", unit_text).strip().lower()
    if unit not in _UNIT_SCALE:
        raise ValueError(f"unknown LinkSpeedUnits {units!r}")
    scale = _UNIT_SCALE[unit]
    if scale is None:
        # No units given: accept only a speed that carries its own prefix, like "10G".
        text = str(speed).strip()
        if not re.search(r"[kKmMgGtTpP]", text):
            raise ValueError(f"LinkSpeed {speed!r} has no LinkSpeedUnits, so its scale is unknown")
        if len(text) > 40:
            raise ValueError(f"LinkSpeed {speed!r} is too long to be a speed")
        try:
            value = parse_bandwidth(text, "LinkSpeed")
        except InvalidArgument as exc:
            raise ValueError(str(exc)) from None
        except (DecimalException, ValueError):  # parse_bandwidth lets decimal.Overflow through
            raise ValueError(f"LinkSpeed {speed!r} is not a plausible positive speed") from None
        if value > MAX_CAPACITY:
            raise ValueError(f"LinkSpeed {speed!r} is not a plausible positive speed")
        return value
    try:
        value = Decimal(str(speed).strip()) * scale
        if not value.is_finite() or not 1 <= value <= MAX_CAPACITY:
            raise ValueError(f"LinkSpeed {speed!r}{unit_text} is not a plausible positive speed")
        return int(value.to_integral_value())
    except DecimalException:
        raise ValueError(f"cannot read LinkSpeed {speed!r} as a number") from None


def _capacity(data: dict[str, Any], default: int, edge: str, notes: list[str]) -> tuple[int, bool]:
    """Return (capacity, whether the Zoo file gave it) for one edge, noting any unreadable value."""
    raw = data.get("LinkSpeedRaw")
    if raw is not None and str(raw).strip() != "":
        number = _number(raw)
        if number is not None and 1 <= number <= MAX_CAPACITY:
            return round(number), True
        notes.append(f"{edge}: LinkSpeedRaw {raw!r} is not a plausible positive number of bits/s; ignored")
    speed = data.get("LinkSpeed")
    if speed is not None and str(speed).strip() != "":
        try:
            return _speed_from_text(speed, data.get("LinkSpeedUnits")), True
        except ValueError as exc:
            notes.append(f"{edge}: {exc}; using the default capacity {format_bandwidth(default)}")
    return default, False


@dataclass(frozen=True)
class InterdomainMark:
    """One `--interdomain NODE=NSA,STP,VLANS[,URL]`: a Zoo node that leads to another domain."""

    node: str
    nsa: str
    stp: str
    vlans: tuple[int, int]
    url: str | None = None


def parse_interdomain(value: str) -> InterdomainMark:
    """Read one `--interdomain` value `NODE=NSA,STP,VLANS[,URL]`; `InvalidArgument` naming the flag."""
    what = f"{INTERDOMAIN_FLAG} {value!r}"
    node, equals, rest = value.partition("=")
    parts = [part.strip() for part in rest.split(",")]
    if not equals or not node.strip() or len(parts) not in (3, 4):
        raise InvalidArgument(f"{what}: expected NODE=NSA_URN,STP_URN,VLANS[,PROVIDER_URL], e.g. "
                              "chicago=urn:ogf:network:i2.net:nsa,urn:ogf:network:i2.net:topology:chicago,1780-1799")
    url = read_provider_url(parts[3], f"{what}: provider URL") if len(parts) == 4 else None
    return InterdomainMark(node.strip(), read_nsa_id(parts[0], f"{what}: NSA id"), read_stp(parts[1], f"{what}: STP"),
                           read_vlans(parts[2], f"{what}: VLANs"), url)


def _marked_nodes(marks: list[InterdomainMark], nodes: list[tuple[Any, dict[str, Any]]], switch_of: dict[Any, str],
                  labels: dict[Any, str], hyper: set[Any], source: str) -> dict[Any, InterdomainMark]:
    """Zoo node -> its mark: each NODE is a node id, else a switch name, else a label naming one node."""
    marked: dict[Any, InterdomainMark] = {}
    for mark in marks:
        what = f"{INTERDOMAIN_FLAG} {mark.node}"
        found = [n for n, _ in nodes if str(n) == mark.node] or [n for n, _ in nodes if switch_of[n] == mark.node] \
            or [n for n, _ in nodes if labels[n] and labels[n].lower() == mark.node.lower()]
        if not found:
            raise InvalidArgument(f"{what}: no node {mark.node!r} in {source} (give a node id, a label, or the "
                                  "switch name the import gives it)")
        if len(found) > 1:
            raise InvalidArgument(f"{what}: label {mark.node!r} names {len(found)} nodes (ids "
                                  f"{_listing([str(n) for n in found])}); give a node id")
        node = found[0]
        if node in hyper:
            raise InvalidArgument(f"{what}: node {node} is a hyperedge (a shared medium), not a place that can lead "
                                  "to another domain")
        if node in marked:
            raise InvalidArgument(f"{what}: node {node} ({switch_of[node]}) is marked twice")
        marked[node] = mark
    return marked


def _dtn_address(index: int) -> tuple[str, str]:
    """IPv4 10.x.y.z (z in 1..254) and a locally administered MAC, both unique per `index`."""
    subnet, host = divmod(index, _DTN_HOSTS_PER_SUBNET)
    ipv4 = str(ipaddress.IPv4Address(f"10.{subnet // 256}.{subnet % 256}.{host + 1}"))
    number = index + 1
    mac = "02:00:" + ":".join(f"{(number >> shift) & 0xFF:02x}" for shift in (24, 16, 8, 0))
    return ipv4, mac


def _components(graph: nx.Graph) -> list[int]:
    simple = nx.Graph()
    simple.add_nodes_from(graph.nodes)
    simple.add_edges_from((u, v) for u, v in graph.edges() if u != v)
    return sorted((len(part) for part in nx.connected_components(simple)), reverse=True)


def import_zoo(path: str | Path, link_capacity: int, with_dtns: bool = False, name: str | None = None,
               interdomain: Iterable[str | InterdomainMark] = ()) -> ZooImport:
    """Convert an Internet Topology Zoo GraphML file into a tsdn topology spec.

    `link_capacity` (bits/s; "100G" is accepted too) is used for edges whose file gives no
    readable speed, and as each DTN's NIC speed when `with_dtns` is true. `name` overrides
    the topology name taken from the file. `interdomain` marks nodes that lead to another
    domain (`--interdomain` values, see the module's docstring). Raises `InvalidArgument`
    naming the file when it is missing, not XML, not GraphML or has no nodes, and naming
    `--interdomain` for a bad mark. The returned spec always validates.
    """
    if isinstance(interdomain, str):
        raise InvalidArgument(f"{INTERDOMAIN_FLAG}: a list of NODE=NSA,STP,VLANS values, got the string "
                              f"{interdomain!r}")
    marks = [m if isinstance(m, InterdomainMark) else parse_interdomain(m) for m in interdomain]
    path = Path(path)
    source = str(path)
    try:
        default = parse_bandwidth(link_capacity, "link_capacity")
    except DecimalException:
        raise InvalidArgument(f"link_capacity: {link_capacity!r} is not a plausible speed") from None
    if default > MAX_CAPACITY:
        raise InvalidArgument(f"link_capacity: {link_capacity!r} is more than 1 Eb/s")
    graph = _read_graph(path)
    notes: list[str] = []
    topo_name = _topology_name(name, graph, path)

    nodes = list(graph.nodes(data=True))
    if with_dtns and len(nodes) > MAX_DTNS:
        raise InvalidArgument(f"{source}: {len(nodes)} nodes is more than the {MAX_DTNS} DTNs addresses exist for")

    # Switch names first (in node order), so DTN names can be kept clear of all of them.
    taken: set[str] = set()
    switch_of: dict[Any, str] = {}
    hyper: set[Any] = set()
    labels: dict[Any, str] = {}
    unnamed: list[str] = []
    for index, (node, data) in enumerate(nodes, start=1):
        label = _label(data)
        labels[node] = label
        node_slug = slugify(node, SWITCH_NAME_MAX - len("hyperedge-")) or str(index)
        if _truthy(data.get("hyperedge")):
            hyper.add(node)
            stem = f"hyperedge-{node_slug}"
        else:
            stem = slugify(label)
            if not stem:
                stem = f"node-{node_slug}"
                unnamed.append(str(node))
        switch_of[node] = _claim(stem, taken)
    if unnamed:
        notes.append(f"{len(unnamed)} node(s) have no usable label and are named node-<id>: ids {_listing(unnamed)}")
    renamed = [f"{labels[n]!r} -> {switch_of[n]}" for n, _ in nodes
               if n not in hyper and slugify(labels[n]) and switch_of[n] != slugify(labels[n])]
    if renamed:
        notes.append(f"{len(renamed)} switch name(s) got a suffix because labels repeat: {_listing(renamed)}")
    if hyper:
        notes.append(f"{len(hyper)} hyperedge node(s) kept as switches without a site: "
                     f"{_listing([switch_of[n] for n, _ in nodes if n in hyper])}")

    # Links, one per edge, ports numbered per switch in edge order.
    next_port: dict[str, int] = {switch_of[n]: 1 for n, _ in nodes}
    links: list[dict[str, Any]] = []
    self_loops: list[str] = []
    given = 0
    for u, v, data in graph.edges(data=True):
        edge = f"edge {u}--{v} ({switch_of[u]} -- {switch_of[v]})"
        if u == v:
            self_loops.append(edge)
            continue
        capacity, from_file = _capacity(data, default, edge, notes)
        given += from_file
        a, b = switch_of[u], switch_of[v]
        link: dict[str, Any] = {"a": a, "a_port": next_port[a], "b": b, "b_port": next_port[b],
                                "capacity": capacity, "kind": "wan"}
        next_port[a] += 1
        next_port[b] += 1
        label = data.get("LinkLabel")
        if label is not None and str(label).strip():
            link["description"] = _clip(" ".join(str(label).split()), MAX_DESCRIPTION)
        links.append(link)
    if self_loops:
        notes.append(f"{len(self_loops)} self-loop(s) skipped: {_listing(self_loops)}")
    if links and given < len(links):
        notes.append(f"{len(links) - given} of {len(links)} link(s) have no readable speed in the file; "
                     f"they get the default capacity {format_bandwidth(default)}")

    parts = _components(graph)
    if len(parts) > 1:
        notes.append(f"{len(parts)} disconnected parts (sizes {', '.join(map(str, parts))}); all are kept")

    # Sites: one per real node, named after its label.
    sites: list[dict[str, Any]] = []
    site_names: set[str] = set()
    no_coordinates: list[str] = []
    external: list[str] = []
    switches: list[dict[str, Any]] = []
    for index, (node, data) in enumerate(nodes, start=1):
        switch = switch_of[node]
        notes_for_switch = [f"Zoo node {node}"]
        if labels[node]:
            notes_for_switch.append(repr(labels[node]))
        if data.get("Country"):
            notes_for_switch.append(str(data["Country"]))
        if node in hyper:
            notes_for_switch.append("hyperedge (a shared medium drawn as a node)")
        elif _is_zero(data.get("Internal")):
            notes_for_switch.append("external peer (Internal=0)")
            external.append(switch)
        switches.append({"name": switch, "dpid": index, "ports": list(range(1, next_port[switch])),
                         "description": _clip(", ".join(notes_for_switch), MAX_DESCRIPTION)})
        if node in hyper:
            continue
        site: dict[str, Any] = {"name": _claim(labels[node][:SITE_NAME_MAX] or switch, site_names,
                                              limit=SITE_NAME_MAX + 8, strip=" -"),
                                "kind": "wan", "switches": [switch]}
        where = _coordinates(data)
        if where is None:
            no_coordinates.append(switch)
        else:
            site["lat"], site["lon"] = where
        sites.append(site)
    if no_coordinates:
        notes.append(f"{len(no_coordinates)} of {len(sites)} site(s) lack valid Latitude/Longitude and have no "
                     f"map position: {_listing(no_coordinates)}")

    marked = _marked_nodes(marks, nodes, switch_of, labels, hyper, source)
    ports: list[dict[str, Any]] = []
    spec_of = {spec["name"]: spec for spec in switches}
    for node, mark in marked.items():
        switch = switch_of[node]
        port = next_port[switch]
        next_port[switch] += 1
        spec_of[switch]["ports"].append(port)
        entry: dict[str, Any] = {"name": _claim(switch, taken, tail=INTERDOMAIN_SUFFIX), "switch": switch,
                                 "port": port, "capacity": default, "vlans": format_vlans(mark.vlans),
                                 "peer": {"nsa": mark.nsa, "stp": mark.stp},
                                 "description": _clip(f"to {mark.nsa} (Zoo node {node})", MAX_DESCRIPTION)}
        if mark.url is not None:
            entry["peer"]["url"] = mark.url
        ports.append(entry)

    dtns: list[dict[str, Any]] = []
    if with_dtns:
        dtn_renamed: list[str] = []
        # A marked node's attachment is its interdomain port: it gets no DTN.
        no_dtn = {switch_of[h] for h in hyper} | {switch_of[n] for n in marked}
        for index, switch_spec in enumerate(s for s in switches if s["name"] not in no_dtn):
            switch = switch_spec["name"]
            port = next_port[switch]
            next_port[switch] += 1
            switch_spec["ports"].append(port)
            dtn_name = _claim(switch, taken, tail=DTN_SUFFIX)
            if dtn_name != f"{switch}{DTN_SUFFIX}":
                dtn_renamed.append(f"{switch} -> {dtn_name}")
            ipv4, mac = _dtn_address(index)
            dtns.append({"name": dtn_name, "switch": switch, "port": port, "ipv4": ipv4, "mac": mac,
                         "nic_speed": default, "numa_node": -1, "description": f"DTN at {switch}"})
        if dtn_renamed:
            notes.append(f"{len(dtn_renamed)} DTN name(s) changed to avoid a clash: {_listing(dtn_renamed)}")

    network = graph.graph.get("Network") or graph.graph.get("label") or path.stem
    description = f"Imported from Internet Topology Zoo file {path.name} (network {network!s})"
    if graph.is_directed():
        description += "; directed edges read as undirected links"
    if external:
        description += f"; {len(external)} external peer node(s) (Internal=0) kept as switches: {_listing(external)}"
    if hyper:
        description += f"; {len(hyper)} hyperedge node(s) kept as switches without a site"
    data = {"name": topo_name, "description": _clip(description, MAX_TOPOLOGY_DESCRIPTION), "switches": switches,
            "links": links,
            "dtns": dtns, "sites": sites}
    if ports:
        data["interdomain"] = ports
    spec = parse_topology_spec(data, source)
    return ZooImport(spec=spec, warnings=notes)


def main(argv: Iterable[str] | None = None) -> int:
    """Command line: convert one Zoo file and write the YAML to a file or stdout."""
    parser = argparse.ArgumentParser(description="Convert an Internet Topology Zoo GraphML file to a tsdn topology")
    parser.add_argument("graphml", help="the .graphml file")
    parser.add_argument("--capacity", default="100G", help="capacity of links without a speed, e.g. 100G (default)")
    parser.add_argument("--dtns", action="store_true", help="attach one DTN to every switch")
    parser.add_argument("--name", help="topology name (default: from the file)")
    parser.add_argument(INTERDOMAIN_FLAG, action="append", default=[], metavar="NODE=NSA,STP,VLANS[,URL]",
                        help="the node leads to another domain: its attachment becomes an interdomain port "
                             "(repeatable)")
    parser.add_argument("-o", "--output", help="write the YAML here instead of stdout")
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        result = import_zoo(args.graphml, parse_bandwidth(args.capacity, "--capacity"), args.dtns, args.name,
                            interdomain=args.interdomain)
    except InvalidArgument as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for note in result.warnings:
        print(f"warning: {note}", file=sys.stderr)
    text = dump_topology_spec(result.spec)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
