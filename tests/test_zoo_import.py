"""Tests for the Internet Topology Zoo GraphML importer (topologies/zoo_import.py)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import pytest

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import NAME_PATTERN, TopologySpec, dump_topology_spec, parse_topology_spec, read_yaml
from topologies import TOPOLOGY_DIR
from topologies.zoo_import import ZooImport, _dtn_address, import_zoo, slugify

ZOO_DIR = TOPOLOGY_DIR / "zoo"  # the Topology Zoo samples shipped with tsdn
G = 10**9
DEFAULT = 100 * G

SAMPLES = {  # file: (nodes, edges, self-loops) from the README table there
    "Abilene.graphml": (11, 14, 0),
    "Internet2.graphml": (20, 26, 0),
    "Geant2012.graphml": (40, 61, 0),
    "Esnet.graphml": (68, 92, 0),
}


KEY_TYPES = {
    ("graph", "label"): "string", ("graph", "Network"): "string",
    ("node", "label"): "string", ("node", "Latitude"): "double", ("node", "Longitude"): "double",
    ("node", "Internal"): "int", ("node", "hyperedge"): "int", ("node", "Country"): "string",
    ("edge", "LinkSpeed"): "string", ("edge", "LinkSpeedUnits"): "string", ("edge", "LinkSpeedRaw"): "double",
    ("edge", "LinkLabel"): "string",
}


def graphml(nodes: list[tuple[str, dict[str, Any]]], edges: list[tuple[str, str, dict[str, Any]]],
            directed: bool = False, graph: dict[str, Any] | None = None,
            types: dict[tuple[str, str], str] | None = None) -> str:
    """Render a small GraphML document the way the Zoo toolset lays its files out."""
    key_types = {**KEY_TYPES, **(types or {})}
    ids = {key: f"d{i}" for i, key in enumerate(key_types)}

    def data(kind: str, attrs: dict[str, Any]) -> str:
        return "".join(f'<data key="{ids[(kind, k)]}">{escape(str(v))}</data>' for k, v in attrs.items())

    keys = "".join(f'<key attr.name="{name}" attr.type="{kind_type}" for="{kind}" id="{ids[(kind, name)]}"/>'
                   for (kind, name), kind_type in key_types.items())
    body = data("graph", graph or {})
    body += "".join(f"<node id={quoteattr(n)}>{data('node', a)}</node>" for n, a in nodes)
    body += "".join(f"<edge source={quoteattr(u)} target={quoteattr(v)}>{data('edge', a)}</edge>"
                    for u, v, a in edges)
    return ('<?xml version="1.0" encoding="utf-8"?>'
            '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">'
            f'{keys}<graph edgedefault="{"directed" if directed else "undirected"}">{body}</graph></graphml>')


def write(tmp_path: Path, text: str, name: str = "Synthetic.graphml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def round_trip(result: ZooImport) -> TopologySpec:
    """Dump, reload and model the spec; it must come back identical and valid."""
    text = dump_topology_spec(result.spec)
    again = parse_topology_spec(read_yaml(text, "<round-trip>"), "<round-trip>")
    assert again == result.spec
    Topology(again)
    return again


def switch_names(spec: TopologySpec) -> list[str]:
    return [s.name for s in spec.switches]


def site(spec: TopologySpec, switch: str):
    found = [s for s in spec.sites if switch in s.switches]
    assert len(found) <= 1
    return found[0] if found else None


def links_between(spec: TopologySpec, a: str, b: str):
    return [link for link in spec.links if {link.a, link.b} == {a, b}]


def check_invariants(spec: TopologySpec, with_dtns: bool) -> None:
    """What every import must satisfy beyond schema validity."""
    names = switch_names(spec) + [d.name for d in spec.dtns]
    assert len(names) == len(set(names))
    assert all(re.match(NAME_PATTERN, n) for n in names)
    assert [s.dpid for s in spec.switches] == list(range(1, len(spec.switches) + 1))
    used: dict[str, set[int]] = {s.name: set() for s in spec.switches}
    for link in spec.links:
        assert link.kind == "wan" and link.latency_ms is None and link.name is None
        used[link.a].add(link.a_port)
        used[link.b].add(link.b_port)
    for dtn in spec.dtns:
        used[dtn.switch].add(dtn.port)
        assert dtn.name not in {link.label for link in spec.links}
    for switch in spec.switches:  # exactly the ports used, numbered 1..n
        assert sorted(switch.ports) == sorted(used[switch.name]) == list(range(1, len(used[switch.name]) + 1))
    assert len({s.name for s in spec.sites}) == len(spec.sites)
    for s in spec.sites:
        assert s.kind == "wan" and len(s.switches) == 1
    hyper = [s for s in spec.switches if s.name.startswith("hyperedge-")]
    assert len(spec.sites) == len(spec.switches) - len(hyper)
    if with_dtns:
        assert len(spec.dtns) == len(spec.sites)
        assert {d.switch for d in spec.dtns} == {s.switches[0] for s in spec.sites}
        assert len({d.ipv4 for d in spec.dtns}) == len({d.mac for d in spec.dtns}) == len(spec.dtns)
    else:
        assert spec.dtns == []


# --- the real samples -------------------------------------------------------------------------


@pytest.mark.parametrize("with_dtns", [False, True], ids=["plain", "dtns"])
@pytest.mark.parametrize("filename", sorted(SAMPLES))
def test_sample_imports_and_round_trips(filename: str, with_dtns: bool) -> None:
    nodes, edges, loops = SAMPLES[filename]
    result = import_zoo(ZOO_DIR / filename, DEFAULT, with_dtns=with_dtns)
    spec = round_trip(result)
    check_invariants(spec, with_dtns)
    assert len(spec.switches) == nodes
    assert len(spec.links) == edges - loops
    assert all(isinstance(w, str) and w for w in result.warnings)
    if with_dtns:
        assert all(d.nic_speed == DEFAULT and d.numa_node == -1 for d in spec.dtns)
        assert all(d.name == f"{d.switch}-dtn" for d in spec.dtns)


def test_sample_names_and_coordinates() -> None:
    abilene = import_zoo(ZOO_DIR / "Abilene.graphml", DEFAULT).spec
    assert abilene.name == "abilene"
    assert "new-york" in switch_names(abilene)
    ny = site(abilene, "new-york")
    assert ny is not None and ny.name == "New York"
    assert ny.lat == pytest.approx(40.71427) and ny.lon == pytest.approx(-74.00597)
    assert all(s.lat is not None for s in abilene.sites)
    # Internet2's graph label wins over its (misleading) Network attribute "Abilene".
    assert import_zoo(ZOO_DIR / "Internet2.graphml", DEFAULT).spec.name == "internet2"
    assert import_zoo(ZOO_DIR / "Abilene.graphml", DEFAULT, name="My Demo WAN").spec.name == "my-demo-wan"


def test_sample_link_speeds_honoured() -> None:
    geant = import_zoo(ZOO_DIR / "Geant2012.graphml", DEFAULT).spec
    (nl_uk,) = links_between(geant, "nl", "uk")
    assert nl_uk.capacity == 2_500_000_000 and nl_uk.description == "2.5 Gbps"
    (dk_is,) = links_between(geant, "dk", "is")
    assert dk_is.capacity == 10 * G
    (nl_be,) = links_between(geant, "nl", "be")  # no speed in the file
    assert nl_be.capacity == DEFAULT
    esnet = import_zoo(ZOO_DIR / "Esnet.graphml", 40 * G)
    (elpa_atla,) = links_between(esnet.spec, "elpa", "atla")
    assert elpa_atla.capacity == 10 * G and elpa_atla.description == "10Gbps"
    (elpa_albu,) = links_between(esnet.spec, "elpa", "albu")
    assert elpa_albu.capacity == 40 * G
    assert any("no readable speed" in w and "40G" in w for w in esnet.warnings)


def test_sample_quirks() -> None:
    esnet = import_zoo(ZOO_DIR / "Esnet.graphml", DEFAULT)
    names = switch_names(esnet.spec)
    # Labels repeat ("Equinix", "AU") and some are the placeholder "None".
    assert {"equinix", "equinix-2", "au", "au-2", "node-16"} <= set(names)
    assert "none" not in names
    assert len(links_between(esnet.spec, "chi-sl", "chic")) == 2  # parallel edges survive
    assert "external peer" in esnet.spec.description and "Internal=0" in esnet.spec.description
    assert "external peer" in next(s for s in esnet.spec.switches if s.name == "cern").description
    assert any("lack valid Latitude/Longitude" in w for w in esnet.warnings)

    internet2 = import_zoo(ZOO_DIR / "Internet2.graphml", DEFAULT, with_dtns=True)
    hyper = [n for n in switch_names(internet2.spec) if n.startswith("hyperedge-")]
    assert hyper == ["hyperedge-10", "hyperedge-11", "hyperedge-12"]
    assert all(site(internet2.spec, h) is None for h in hyper)
    assert not any(d.switch in hyper for d in internet2.spec.dtns)
    assert any("hyperedge" in w for w in internet2.warnings)


# --- synthetic files ---------------------------------------------------------------------------


def test_missing_and_bad_coordinates(tmp_path: Path) -> None:
    nodes = [
        ("0", {"label": "Good", "Latitude": 48.85, "Longitude": 2.35}),
        ("1", {"label": "Half", "Latitude": 10.0}),
        ("2", {"label": "Nowhere"}),
        ("3", {"label": "Off Map", "Latitude": 95.0, "Longitude": 10.0}),
        ("4", {"label": "Text", "Latitude": "north", "Longitude": "east"}),
    ]
    edges = [("0", "1", {}), ("1", "2", {}), ("2", "3", {}), ("3", "4", {})]
    types = {("node", "Latitude"): "string", ("node", "Longitude"): "string"}
    result = import_zoo(write(tmp_path, graphml(nodes, edges, types=types)), DEFAULT)
    spec = round_trip(result)
    good = site(spec, "good")
    assert good is not None and (good.lat, good.lon) == (48.85, 2.35)
    for name in ("half", "nowhere", "off-map", "text"):
        placed = site(spec, name)
        assert placed is not None and placed.lat is None and placed.lon is None
    coordinate_warnings = [w for w in result.warnings if "Latitude/Longitude" in w]
    assert len(coordinate_warnings) == 1 and coordinate_warnings[0].startswith("4 of 5")


def test_duplicate_labels_get_suffixes(tmp_path: Path) -> None:
    nodes = [("0", {"label": "Paris"}), ("1", {"label": "Paris"}), ("2", {"label": "paris"}),
             ("3", {"label": "Paris-2"}), ("4", {"label": "Lyon"})]
    edges = [("0", "4", {}), ("1", "4", {}), ("2", "4", {}), ("3", "4", {})]
    path = write(tmp_path, graphml(nodes, edges))
    result = import_zoo(path, DEFAULT, with_dtns=True)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=True)
    assert switch_names(spec) == ["paris", "paris-2", "paris-3", "paris-2-2", "lyon"]
    assert [s.name for s in spec.sites] == ["Paris", "Paris-2", "paris", "Paris-2-2", "Lyon"]
    assert any("suffix" in w for w in result.warnings)
    assert switch_names(import_zoo(path, DEFAULT).spec) == switch_names(spec)  # deterministic


def test_hyperedge_node_is_a_switch_without_site(tmp_path: Path) -> None:
    nodes = [("0", {"label": "A"}), ("1", {"label": "B"}), ("h", {"label": "", "hyperedge": 1}),
             ("x", {"label": "Bus", "hyperedge": "true"})]
    edges = [("0", "h", {}), ("1", "h", {}), ("0", "x", {})]
    types = {("node", "hyperedge"): "string"}
    result = import_zoo(write(tmp_path, graphml(nodes, edges, types=types)), DEFAULT, with_dtns=True)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=True)
    assert switch_names(spec) == ["a", "b", "hyperedge-h", "hyperedge-x"]
    assert site(spec, "hyperedge-h") is None and site(spec, "hyperedge-x") is None
    assert [d.switch for d in spec.dtns] == ["a", "b"]
    assert len(links_between(spec, "a", "hyperedge-h")) == 1


def test_parallel_edges_are_separate_links(tmp_path: Path) -> None:
    nodes = [("0", {"label": "A"}), ("1", {"label": "B"})]
    edges = [("0", "1", {"LinkSpeed": "10", "LinkSpeedUnits": "G"}), ("0", "1", {}),
             ("1", "0", {"LinkSpeedRaw": 4e11})]
    spec = round_trip(import_zoo(write(tmp_path, graphml(nodes, edges)), DEFAULT))
    check_invariants(spec, with_dtns=False)
    links = links_between(spec, "a", "b")
    assert len(links) == 3
    assert sorted(link.capacity for link in links) == [10 * G, DEFAULT, 400 * G]
    assert len({link.label for link in links}) == 3
    assert next(s for s in spec.switches if s.name == "a").ports == [1, 2, 3]


def test_disconnected_parts_are_kept(tmp_path: Path) -> None:
    nodes = [(str(i), {"label": f"N{i}"}) for i in range(6)]
    edges = [("0", "1", {}), ("1", "2", {}), ("3", "4", {})]
    result = import_zoo(write(tmp_path, graphml(nodes, edges)), DEFAULT, with_dtns=True)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=True)
    assert len(spec.switches) == 6 and len(spec.links) == 3
    assert "3 disconnected parts (sizes 3, 2, 1)" in " ".join(result.warnings)
    lonely = next(s for s in spec.switches if s.name == "n5")
    assert lonely.ports == [1]  # only its DTN port


def test_connected_file_has_no_disconnection_warning(tmp_path: Path) -> None:
    nodes = [("0", {"label": "A"}), ("1", {"label": "B"})]
    result = import_zoo(write(tmp_path, graphml(nodes, [("0", "1", {})])), DEFAULT)
    assert not any("disconnected" in w for w in result.warnings)


def test_self_loops_are_skipped(tmp_path: Path) -> None:
    nodes = [("0", {"label": "A"}), ("1", {"label": "B"})]
    edges = [("0", "0", {}), ("0", "1", {}), ("1", "1", {"LinkSpeed": "1", "LinkSpeedUnits": "G"})]
    result = import_zoo(write(tmp_path, graphml(nodes, edges)), DEFAULT)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=False)
    assert len(spec.links) == 1
    loop_warnings = [w for w in result.warnings if "self-loop" in w]
    assert len(loop_warnings) == 1 and loop_warnings[0].startswith("2 self-loop(s)") and "0--0" in loop_warnings[0]
    assert not any("disconnected" in w for w in result.warnings)


def test_missing_labels_fall_back_to_node_id(tmp_path: Path) -> None:
    nodes = [("0", {}), ("1", {"label": ""}), ("2", {"label": "None"}), ("n 3", {"label": "!!!"}),
             ("4", {"label": "Real"})]
    edges = [("0", "4", {}), ("1", "4", {}), ("2", "4", {}), ("n 3", "4", {})]
    result = import_zoo(write(tmp_path, graphml(nodes, edges)), DEFAULT, with_dtns=True)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=True)
    assert switch_names(spec) == ["node-0", "node-1", "node-2", "node-n-3", "real"]
    assert site(spec, "node-0").name == "node-0"  # type: ignore[union-attr]
    assert any("no usable label" in w and w.startswith("4 node(s)") for w in result.warnings)


def test_unicode_and_long_labels(tmp_path: Path) -> None:
    long_label = "Very Long Research Network Point of Presence Name Number " * 3
    nodes = [("0", {"label": "São Paulo"}), ("1", {"label": "Zürich"}), ("2", {"label": "Kraków / PL"}),
             ("3", {"label": "東京"}), ("4", {"label": "ﬁnland"}), ("5", {"label": long_label}),
             ("6", {"label": long_label}), ("7", {"label": "  Padded   label  "})]
    edges = [(str(i), str(i + 1), {}) for i in range(7)]
    result = import_zoo(write(tmp_path, graphml(nodes, edges)), DEFAULT, with_dtns=True)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=True)
    names = switch_names(spec)
    assert names[:5] == ["sao-paulo", "zurich", "krakow-pl", "node-3", "finland"]
    assert names[7] == "padded-label"
    assert len(names[5]) <= 50 and names[6] == f"{names[5]}-2"
    assert all(len(d.name) <= 63 for d in spec.dtns)
    assert site(spec, "sao-paulo").name == "São Paulo"  # type: ignore[union-attr]
    assert site(spec, "padded-label").name == "Padded label"  # type: ignore[union-attr]
    assert all(len(s.name) <= 80 for s in spec.sites)


def test_garbage_link_speeds_fall_back_with_warnings(tmp_path: Path) -> None:
    nodes = [(str(i), {"label": f"S{i}"}) for i in range(8)]
    edges = [
        ("0", "1", {"LinkSpeed": "fast", "LinkSpeedUnits": "G"}),      # not a number
        ("1", "2", {"LinkSpeed": "10", "LinkSpeedUnits": "parsecs"}),  # unknown unit
        ("2", "3", {"LinkSpeed": "10"}),                               # no unit: scale unknown
        ("3", "4", {"LinkSpeedRaw": "lots", "LinkSpeed": "2.5", "LinkSpeedUnits": "G"}),  # raw bad, speed ok
        ("4", "5", {"LinkSpeedRaw": "0", "LinkSpeed": "-3", "LinkSpeedUnits": "G"}),      # neither usable
        ("5", "6", {"LinkSpeed": "40G"}),                              # unit inside the speed
        ("6", "7", {"LinkSpeed": "155", "LinkSpeedUnits": "Mbps", "LinkLabel": "OC-3"}),
        ("7", "0", {"LinkSpeedRaw": "inf"}),
        ("0", "2", {"LinkSpeed": "1e999999", "LinkSpeedUnits": "G"}),  # absurd: would overflow
        ("0", "3", {"LinkSpeed": "1e999999G"}),
        ("0", "4", {"LinkSpeedRaw": "1e300"}),
    ]
    types = {("edge", "LinkSpeedRaw"): "string"}
    result = import_zoo(write(tmp_path, graphml(nodes, edges, types=types)), 25 * G)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=False)
    capacity = {(link.a, link.b): link.capacity for link in spec.links}
    assert capacity[("s0", "s1")] == 25 * G
    assert capacity[("s1", "s2")] == 25 * G
    assert capacity[("s2", "s3")] == 25 * G
    assert capacity[("s3", "s4")] == 2_500_000_000
    assert capacity[("s4", "s5")] == 25 * G
    assert capacity[("s5", "s6")] == 40 * G
    assert capacity[("s6", "s7")] == 155_000_000
    assert capacity[("s0", "s7")] == 25 * G
    assert capacity[("s0", "s2")] == capacity[("s0", "s3")] == capacity[("s0", "s4")] == 25 * G
    text = "\n".join(result.warnings)
    for edge in ("edge 0--1", "edge 1--2", "edge 2--3", "edge 3--4", "edge 4--5"):
        assert edge in text
    assert "'fast'" in text and "parsecs" in text and "'lots'" in text
    assert "edge 5--6" not in text and "edge 6--7" not in text
    assert next(link for link in spec.links if link.a == "s6").description == "OC-3"


def test_directed_graph_edges_become_links(tmp_path: Path) -> None:
    nodes = [("a", {"label": "A"}), ("b", {"label": "B"}), ("c", {"label": "C"})]
    edges = [("a", "b", {}), ("b", "a", {}), ("b", "c", {})]
    result = import_zoo(write(tmp_path, graphml(nodes, edges, directed=True)), DEFAULT, with_dtns=True)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=True)
    assert len(links_between(spec, "a", "b")) == 2 and len(links_between(spec, "b", "c")) == 1
    assert "directed" in spec.description


def test_dtn_names_cannot_collide_with_switches(tmp_path: Path) -> None:
    nodes = [("0", {"label": "x"}), ("1", {"label": "x-dtn"}), ("2", {"label": "x-dtn-2"}), ("3", {"label": "y"})]
    edges = [("0", "1", {}), ("1", "2", {}), ("2", "3", {})]
    result = import_zoo(write(tmp_path, graphml(nodes, edges)), DEFAULT, with_dtns=True)
    spec = round_trip(result)
    check_invariants(spec, with_dtns=True)
    assert switch_names(spec) == ["x", "x-dtn", "x-dtn-2", "y"]
    dtn_of = {d.switch: d.name for d in spec.dtns}
    assert dtn_of["y"] == "y-dtn" and dtn_of["x-dtn"] == "x-dtn-dtn"
    assert dtn_of["x"] not in switch_names(spec)
    assert any("DTN name" in w for w in result.warnings)


def test_dtn_addressing(tmp_path: Path) -> None:
    nodes = [(str(i), {"label": f"Site {i}"}) for i in range(300)]
    edges = [(str(i), str(i + 1), {}) for i in range(299)]
    spec = round_trip(import_zoo(write(tmp_path, graphml(nodes, edges)), "400G", with_dtns=True))
    check_invariants(spec, with_dtns=True)
    assert {d.nic_speed for d in spec.dtns} == {400 * G}
    assert all(d.mac.startswith("02:") for d in spec.dtns)
    assert len({d.ipv4 for d in spec.dtns}) == 300
    addresses = [_dtn_address(i) for i in range(60_000)]
    assert len({ip for ip, _ in addresses}) == len({mac for _, mac in addresses}) == 60_000
    for ip, _ in addresses[::997] + addresses[-3:]:
        address = ipaddress.IPv4Address(ip)
        assert address in ipaddress.IPv4Network("10.0.0.0/8") and ip.split(".")[3] not in ("0", "255")


def test_topology_name_fallbacks(tmp_path: Path) -> None:
    nodes = [("0", {"label": "A"})]
    labelled = write(tmp_path, graphml(nodes, [], graph={"label": "Net Zero", "Network": "Other"}), "a.graphml")
    assert import_zoo(labelled, DEFAULT).spec.name == "net-zero"
    network = write(tmp_path, graphml(nodes, [], graph={"Network": "Réseau Deux"}), "b.graphml")
    assert import_zoo(network, DEFAULT).spec.name == "reseau-deux"
    stem = write(tmp_path, graphml(nodes, []), "Stem Name.graphml")
    assert import_zoo(stem, DEFAULT).spec.name == "stem-name"
    assert import_zoo(stem, DEFAULT, name="Given").spec.name == "given"
    with pytest.raises(InvalidArgument, match="name"):
        import_zoo(stem, DEFAULT, name="***")


def test_internal_zero_nodes_noted(tmp_path: Path) -> None:
    nodes = [("0", {"label": "Home", "Internal": 1}), ("1", {"label": "Peer", "Internal": 0})]
    spec = round_trip(import_zoo(write(tmp_path, graphml(nodes, [("0", "1", {})])), DEFAULT))
    assert "1 external peer node(s) (Internal=0)" in spec.description and "peer" in spec.description
    assert "external peer" in spec.switches[1].description
    assert "external peer" not in spec.switches[0].description
    assert site(spec, "peer") is not None


def test_bad_link_capacity_argument(tmp_path: Path) -> None:
    path = write(tmp_path, graphml([("0", {"label": "A"})], []))
    for bad in (0, -5, "fast", "1e999999G", 10**30):
        with pytest.raises(InvalidArgument, match="link_capacity"):
            import_zoo(path, bad)  # type: ignore[arg-type]


def test_slugify() -> None:
    assert slugify("São Paulo / SP") == "sao-paulo-sp"
    assert slugify("--A..B__c--") == "a-b-c"
    assert slugify("東京") == ""
    assert slugify(None) == ""
    assert len(slugify("x" * 200)) == 50


# --- files that are not Zoo topologies ----------------------------------------------------------


@pytest.mark.parametrize("content, problem", [
    (None, "no such"),
    ("hello, this is not xml", "not an XML file"),
    ("", "not an XML file"),
    ("<html><body><p>hi</p></body></html>", "GraphML"),
    ('<graphml xmlns="http://graphml.graphdrawing.org/xmlns"><graph edgedefault="undirected"/></graphml>',
     "no nodes"),
    ('<graphml xmlns="http://graphml.graphdrawing.org/xmlns"><graph edgedefault="undirected">'
     '<node id="a"><data key="nokey">1</data></node></graph></graphml>', "GraphML"),
    ('<graphml xmlns="http://graphml.graphdrawing.org/xmlns">'
     '<key id="d0" for="node" attr.name="Latitude" attr.type="double"/><graph edgedefault="undirected">'
     '<node id="a"><data key="d0">north</data></node></graph></graphml>', "bad attribute value"),
], ids=["missing", "not-xml", "empty-file", "xml-not-graphml", "empty-graph", "undeclared-key", "bad-value"])
def test_bad_files_raise_invalid_argument(tmp_path: Path, content: str | None, problem: str) -> None:
    path = tmp_path / "broken.graphml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(InvalidArgument) as info:
        import_zoo(path, DEFAULT)
    assert str(path) in str(info.value)
    assert problem in str(info.value)


def test_directory_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="directory"):
        import_zoo(tmp_path, DEFAULT)
