"""The shipped topologies (sc16, ring8) load, and model what they claim to model."""

from __future__ import annotations

import ipaddress

import networkx as nx
import pytest

from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import load_topology_spec
from sdn_app.core.units import parse_bandwidth
from topologies import BUILTIN_TOPOLOGIES, builtin_topology, resolve_topology

G = parse_bandwidth("1G")
T = parse_bandwidth("1T")

SHOW_FLOOR_BOOTHS = {
    "Caltech": {"caltech-a", "caltech-b"},
    "StarLight": {"starlight"},
    "2CRSi": {"2crsi"},
    "Dell": {"dell"},
    "UCSD": {"ucsd"},
    "UMich": {"umich"},
    "Vanderbilt": {"vanderbilt"},
}
WAN_SITES = {
    "Caltech Pasadena": "caltech-pasadena",
    "StarLight Chicago": "starlight-chicago",
    "AmLight/FIU Miami": "amlight-miami",
    "RNP/ANSP Sao Paulo": "ansp-saopaulo",
    "UMich Ann Arbor": "umich-annarbor",
}
SALT_PALACE = (40.767, -111.897)


def switch_graph(topo: Topology) -> nx.MultiGraph:
    """One undirected edge per physical link, parallel links kept apart."""
    graph = nx.MultiGraph()
    graph.add_nodes_from(topo.switches)
    for label, link in topo.links.items():
        graph.add_edge(link.a, link.b, key=label)
    return graph


def simple_view(topo: Topology) -> nx.Graph:
    """The undirected simple graph of the model's own directed switch graph."""
    return nx.Graph(topo.graph.to_undirected())


def link_between(topo: Topology, x: str, y: str):
    found = [link for link in topo.links.values() if {link.a, link.b} == {x, y}]
    assert len(found) == 1, f"expected one link {x}--{y}, found {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def sc16() -> Topology:
    return Topology.load(builtin_topology("sc16"))


@pytest.fixture(scope="module")
def ring8() -> Topology:
    return Topology.load(builtin_topology("ring8"))


# --- both files ----------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN_TOPOLOGIES)
def test_builtin_file_exists_and_loads_under_its_name(name):
    path = builtin_topology(name)
    assert path.is_file()
    assert resolve_topology(name) == path
    topo = Topology.load(path)
    assert topo.name == name
    assert load_topology_spec(path) == topo.spec


@pytest.mark.parametrize("name", BUILTIN_TOPOLOGIES)
def test_every_link_has_latency_and_every_switch_one_located_site(name):
    topo = Topology.load(builtin_topology(name))
    assert topo.all_links_have_latency
    for switch in topo.switches:
        holders = [site for site in topo.sites.values() if switch in site.switches]
        assert len(holders) == 1, f"{switch} is in {len(holders)} sites"
        assert holders[0].lat is not None and holders[0].lon is not None
        assert topo.site_of(switch) is holders[0]
    assert all(site.switches or site.beyond for site in topo.sites.values())  # remote sites: beyond a port


@pytest.mark.parametrize("name", BUILTIN_TOPOLOGIES)
def test_dtns_have_unique_unicast_locally_administered_macs(name):
    topo = Topology.load(builtin_topology(name))
    macs = [dtn.mac for dtn in topo.dtns.values()]
    assert len(set(macs)) == len(macs)
    for mac in macs:
        first = int(mac[:2], 16)
        assert first & 0b10, f"{mac} is not locally administered"
        assert not first & 0b01, f"{mac} is multicast"


# --- sc16 ------------------------------------------------------------------------------


def test_sc16_booths_and_hub_exist(sc16):
    for site_name, switches in SHOW_FLOOR_BOOTHS.items():
        site = sc16.sites[site_name]
        assert site.kind == "booth"
        assert set(site.switches) == switches
    assert sc16.sites["SCinet"].kind == "hub"
    assert sc16.sites["SCinet"].switches == ["scinet"]
    assert len(sc16.sites["Caltech"].switches) == 2


def test_sc16_the_two_terabit_links(sc16):
    rdma = link_between(sc16, "caltech-a", "starlight")
    tcp = link_between(sc16, "caltech-a", "caltech-b")
    for link in (rdma, tcp):
        assert link.capacity == T
        assert link.kind == "booth"
    assert "RDMA" in rdma.description
    assert "TCP" in tcp.description
    terabit = {label for label, (fwd, back) in sc16.link_directions.items() if fwd.capacity >= T or back.capacity >= T}
    assert terabit == {rdma.label, tcp.label}


def test_sc16_every_booth_reaches_the_scinet_hub(sc16):
    for switches in SHOW_FLOOR_BOOTHS.values():
        for switch in switches:
            link = link_between(sc16, switch, "scinet")
            assert link.kind == "booth"
            assert link.capacity >= 100 * G


def test_sc16_the_100ge_booths_have_100g_links_and_five_dark_fibres(sc16):
    hundred_ge = ["2crsi", "dell", "ucsd", "umich", "vanderbilt"]
    fibres = []
    for booth in hundred_ge:
        links = [link for link in sc16.links.values() if booth in (link.a, link.b)]
        assert {link.capacity for link in links} == {100 * G}
        fibres += [link for link in links if "scinet" not in (link.a, link.b)]
    assert len(fibres) == 5
    assert all({link.a, link.b} & {"caltech-a", "caltech-b"} for link in fibres)


def test_sc16_five_wan_circuits_from_the_show_floor(sc16):
    floor = {s for site in sc16.sites.values() if site.kind in ("booth", "hub") for s in site.switches}
    remote = {s for site in sc16.sites.values() if site.kind == "wan" for s in site.switches}
    assert remote == set(WAN_SITES.values())
    assert floor | remote == set(sc16.switches)
    assert not floor & remote

    crossing = [link for link in sc16.links.values() if len({link.a, link.b} & floor) == 1]
    assert len(crossing) == 5
    assert all(link.kind == "wan" for link in crossing)
    reached = [link.a if link.a in remote else link.b for link in crossing]
    assert sorted(reached) == sorted(WAN_SITES.values())

    for link in sc16.links.values():
        ends = {link.a, link.b}
        if ends <= floor:
            assert link.kind in ("booth", "core"), f"{link.label} is on the show floor but kind {link.kind}"
            assert 0.05 <= link.latency_ms <= 0.2
        else:
            assert link.kind == "wan", f"{link.label} reaches a WAN site but is kind {link.kind}"
            assert link.latency_ms >= 1


def test_sc16_wan_sites_are_joined_among_themselves(sc16):
    remote = set(WAN_SITES.values())
    wan_only = nx.Graph()
    wan_only.add_nodes_from(remote)
    wan_only.add_edges_from((link.a, link.b) for link in sc16.links.values() if {link.a, link.b} <= remote)
    assert nx.is_connected(wan_only)
    assert link_between(sc16, "amlight-miami", "ansp-saopaulo").latency_ms == pytest.approx(55, abs=10)
    assert link_between(sc16, "scinet", "starlight-chicago").latency_ms == pytest.approx(20, abs=5)
    assert link_between(sc16, "scinet", "caltech-pasadena").latency_ms == pytest.approx(12, abs=4)


def test_sc16_switch_graph_is_two_edge_connected(sc16):
    simple = simple_view(sc16)
    assert nx.is_connected(simple)
    assert list(nx.bridges(simple)) == []
    assert nx.edge_connectivity(simple) >= 2

    graph = switch_graph(sc16)
    for a, b, label in list(graph.edges(keys=True)):
        graph.remove_edge(a, b, key=label)
        assert nx.is_connected(graph), f"losing link {label} disconnects the switches"
        graph.add_edge(a, b, key=label)


def test_sc16_dtns(sc16):
    speeds = {dtn.nic_speed for dtn in sc16.dtns.values()}
    assert {25 * G, 40 * G, 100 * G, 400 * G} <= speeds

    per_switch: dict[str, int] = {}
    for dtn in sc16.dtns.values():
        per_switch[dtn.switch] = per_switch.get(dtn.switch, 0) + 1
    for switch in sc16.switches:
        assert per_switch.get(switch, 0) >= 1, f"no DTN on {switch}"
    per_site = {name: sum(per_switch.get(s, 0) for s in site.switches) for name, site in sc16.sites.items()}
    assert sum(count >= 2 for count in per_site.values()) >= 3
    assert per_site["Caltech"] >= 4

    for switch in ("caltech-a", "caltech-b", "starlight"):
        assert any(d.switch == switch and d.nic_speed == 400 * G for d in sc16.dtns.values()), switch

    net = ipaddress.IPv4Network("10.16.0.0/16")
    ips = [ipaddress.IPv4Address(dtn.ipv4) for dtn in sc16.dtns.values()]
    assert all(ip in net for ip in ips)
    assert len(set(ips)) == len(ips)
    numa = [dtn.numa_node for dtn in sc16.dtns.values()]
    assert set(numa) == {-1, 0, 1}


def test_sc16_switches_are_32_port_with_unique_dpids(sc16):
    dpids = [s.dpid for s in sc16.switches.values()]
    assert len(set(dpids)) == len(dpids)
    for switch in sc16.switches.values():
        assert switch.ports == list(range(1, 33))


def test_sc16_map_booths_near_the_salt_palace_and_apart(sc16):
    floor_sites = [site for site in sc16.sites.values() if site.kind in ("booth", "hub")]
    assert len(floor_sites) == 8
    for site in floor_sites:
        assert abs(site.lat - SALT_PALACE[0]) < 0.01
        assert abs(site.lon - SALT_PALACE[1]) < 0.01
    for i, one in enumerate(floor_sites):
        for other in floor_sites[i + 1:]:
            apart = max(abs(one.lat - other.lat), abs(one.lon - other.lon))
            assert apart >= 0.001, f"{one.name} and {other.name} overlap on the map"
    for site_name in WAN_SITES:
        site = sc16.sites[site_name]
        assert site.kind == "wan"
        assert max(abs(site.lat - SALT_PALACE[0]), abs(site.lon - SALT_PALACE[1])) > 5
    assert sc16.sites["RNP/ANSP Sao Paulo"].lat < 0


# --- ring8 -----------------------------------------------------------------------------


def test_ring8_is_one_cycle_of_eight(ring8):
    assert sorted(ring8.switches) == [f"s{i}" for i in range(1, 9)]
    assert len(ring8.links) == 8
    graph = switch_graph(ring8)
    assert all(degree == 2 for _, degree in graph.degree())
    simple = simple_view(ring8)
    assert all(degree == 2 for _, degree in simple.degree())
    assert nx.is_connected(simple)
    assert nx.is_isomorphic(simple, nx.cycle_graph(8))
    for link in ring8.links.values():
        assert link.capacity == 100 * G
        assert link.kind == "core"
        assert link.latency_ms == 1


def test_ring8_one_dtn_per_switch(ring8):
    assert len(ring8.dtns) == 8
    assert sorted(d.switch for d in ring8.dtns.values()) == sorted(ring8.switches)
    for i in range(1, 9):
        dtn = ring8.dtn(f"dtn{i}")
        assert dtn.switch == f"s{i}"
        assert dtn.ipv4 == f"10.0.0.{i}"
        assert dtn.mac == f"02:00:00:00:00:{i:02x}"
        assert dtn.nic_speed == 100 * G
