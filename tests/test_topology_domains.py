"""Domains in topology files: interdomain ports, remote DTNs and remote sites; the model's
endpoints; the Zoo importer's `--interdomain`; what `tsdn topo validate` prints."""

from __future__ import annotations

import copy

import pytest
import yaml

from sdn_app.core.errors import InvalidArgument, NotFound
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import dump_topology_spec, load_topology_spec, parse_topology_spec
from tests.test_topology_schema import problems_for as schema_problems
from tests.test_topology_schema import write
from topologies import TOPOLOGY_DIR
from topologies.zoo_import import import_zoo
from tsdn.cli import main as tsdn_main

G = 10**9
RNP_NSA = "urn:ogf:network:rnp.sc16:nsa"

GOOD = {
    "name": "twodomain",
    "switches": [{"name": "s1", "dpid": 1, "ports": ["1-8"]}, {"name": "s2", "dpid": 2, "ports": ["1-8"]}],
    "links": [{"name": "l1", "a": "s1", "a_port": 1, "b": "s2", "b_port": 1, "capacity": "100G"}],
    "dtns": [
        {"name": "d1", "switch": "s1", "port": 4, "ipv4": "10.0.0.1", "mac": "02:00:00:00:00:01", "nic_speed": "100G",
         "vlans": "1780-1789"},
        {"name": "d2", "switch": "s2", "port": 4, "ipv4": "10.0.0.2", "mac": "02:00:00:00:00:02", "nic_speed": "25G"},
        {"name": "far1", "beyond": "to-rnp", "stp": "urn:ogf:network:rnp.sc16:topology:saopaulo",
         "ipv4": "10.0.0.11", "mac": "02:00:00:00:00:11", "nic_speed": "40G"},
        {"name": "far2", "beyond": "to-rnp", "stp": "urn:ogf:network:rnp.sc16:topology:saopaulo",
         "ipv4": "10.0.0.12", "mac": "02:00:00:00:00:12", "nic_speed": "10G"},
    ],
    "interdomain": [
        {"name": "to-rnp", "switch": "s2", "port": 8, "capacity": "10G", "latency_ms": 88, "vlans": "1780-1799",
         "peer": {"nsa": RNP_NSA, "stp": "urn:ogf:network:rnp.sc16:topology:scinet",
                  "url": "http://127.0.0.1:9081/NSI/services/CS2"},
         "description": "to RNP"},
        {"name": "to-i2", "switch": "s1", "port": 8, "capacity": "100G", "vlans": 1800,
         "peer": {"nsa": "urn:ogf:network:i2.sc16:nsa", "stp": "urn:ogf:network:i2.sc16:topology:scinet"}},
    ],
    "sites": [
        {"name": "Floor", "lat": 40.7, "lon": -111.9, "kind": "booth", "switches": ["s1", "s2"]},
        {"name": "Sao Paulo", "lat": -23.56, "lon": -46.73, "beyond": "to-rnp", "dtns": ["far1", "far2"]},
    ],
}


def problems_for(tmp_path, mutate):
    """The problems loading GOOD changed by `mutate` gives."""
    return schema_problems(tmp_path, mutate, GOOD)


@pytest.fixture
def topology(tmp_path) -> Topology:
    return Topology.load(write(tmp_path, GOOD))


# --- the model ---------------------------------------------------------------------------------


def test_remote_dtns_sit_at_their_interdomain_port(topology):
    far1 = topology.dtn("far1")
    assert (far1.switch, far1.port, far1.beyond) == ("s2", 8, "to-rnp")
    assert topology.remote_dtns == ["far1", "far2"]
    assert topology.remote_site_dtns("to-rnp") == ["far1", "far2"]
    assert topology.remote_site_dtns("to-i2") == []
    assert set(topology.dtns) == {"d1", "d2", "far1", "far2"}


def test_remote_dtns_share_the_ports_directions_so_the_port_is_booked_once(topology):
    inward, outward = topology.access("to-rnp")
    assert (inward.id, outward.id) == ("to-rnp->s2:8", "s2:8->to-rnp")
    assert inward.capacity == outward.capacity == 10 * G  # the port's, not the remote DTN's NIC
    assert inward.kind == "interdomain" and inward.is_interdomain and inward.is_access
    assert topology.access("far1") == topology.access("far2") == (inward, outward)
    assert inward.latency_ms == 88
    capacities = topology.capacities()
    assert capacities["to-rnp->s2:8"] == 10 * G
    assert not any(d.startswith(("far1", "far2")) or d.endswith(("->far1", "->far2")) for d in capacities)
    # An own DTN keeps its access link; the switch graph holds switches only.
    up, _ = topology.access("d1")
    assert (up.id, up.kind, up.capacity) == ("d1->s1:4", "access", 100 * G)
    assert set(topology.graph.nodes) == {"s1", "s2"}
    assert "to-rnp" not in topology.adjacency["s2"]


def test_endpoint_vlan_range_and_domain_of_every_kind(topology):
    assert topology.endpoint("d1") == ("s1", 4)
    assert topology.endpoint("far2") == ("s2", 8)
    assert topology.endpoint("to-i2") == ("s1", 8)
    assert topology.vlan_range("d1") == (1780, 1789)
    assert topology.vlan_range("d2") == (2, 4094)  # the default of an own DTN
    assert topology.vlan_range("far1") == (1780, 1799)  # the port's
    assert topology.vlan_range("to-i2") == (1800, 1800)
    assert topology.domain_of("d1") is None
    assert topology.domain_of("to-rnp") is None  # the port is our edge
    assert topology.domain_of("far1") == RNP_NSA
    assert topology.is_remote("far1") and not topology.is_remote("d1") and not topology.is_remote("to-rnp")


@pytest.mark.parametrize("call", ["endpoint", "vlan_range", "domain_of", "is_remote"])
def test_unknown_endpoints_are_named(topology, call):
    with pytest.raises(NotFound, match=r"unknown endpoint 'ghost' in topology twodomain: not a DTN or interdomain "
                                       r"port \(known: d1, d2, far1, far2, to-i2, to-rnp\)"):
        getattr(topology, call)("ghost")
    with pytest.raises(NotFound, match="'s1'"):  # a switch is no endpoint
        getattr(topology, call)("s1")


def test_dtn_and_access_still_refuse_unknown_names(topology):
    with pytest.raises(NotFound, match="unknown DTN 'ghost'"):
        topology.dtn("ghost")
    with pytest.raises(NotFound, match="unknown DTN 'ghost'"):
        topology.access("ghost")
    with pytest.raises(NotFound, match="unknown interdomain port 'd1'"):
        topology.remote_site_dtns("d1")


def test_summary_counts_interdomain_ports(topology):
    assert topology.summary() == ("twodomain: 2 switches, 1 links, 4 DTNs, 2 sites, 2 interdomain ports "
                                  "(2 remote DTNs)")


def test_dump_round_trips_and_names_no_switch_for_remote_dtns(topology):
    text = dump_topology_spec(topology.spec)
    data = yaml.safe_load(text)
    far1 = next(d for d in data["dtns"] if d["name"] == "far1")
    assert "switch" not in far1 and "port" not in far1
    assert data["interdomain"][0]["vlans"] == "1780-1799" and data["interdomain"][1]["vlans"] == "1800"
    assert parse_topology_spec(data, "dumped") == topology.spec


def test_a_file_without_domains_dumps_as_before(tmp_path):
    data = copy.deepcopy(GOOD)
    data["dtns"] = data["dtns"][:2]
    del data["dtns"][0]["vlans"]
    data["sites"] = data["sites"][:1]
    del data["interdomain"]
    dumped = yaml.safe_load(dump_topology_spec(load_topology_spec(write(tmp_path, data))))
    assert "interdomain" not in dumped
    assert "dtns" not in dumped["sites"][0]
    assert all({"vlans", "beyond", "stp"}.isdisjoint(d) for d in dumped["dtns"])


# --- the schema: what is refused, with file and field named ------------------------------------


def dtn(data, name):
    return next(d for d in data["dtns"] if d["name"] == name)


def port(data, name):
    return next(p for p in data["interdomain"] if p["name"] == name)


REFUSED = [
    (lambda d: dtn(d, "far1").update(switch="s2", port=8),
     "dtns[2].switch: a remote DTN has no switch or port of its own: it is reached through interdomain port "
     "'to-rnp' and sits at that port; omit switch and port"),
    (lambda d: dtn(d, "far1").update(beyond="to-nowhere"),
     "dtns[2].beyond: no interdomain port named 'to-nowhere' (declared: to-i2, to-rnp)"),
    (lambda d: dtn(d, "far1").pop("stp"),
     "dtns[2].stp: a remote DTN (beyond to-rnp) needs the STP where the neighbour reaches its site"),
    (lambda d: dtn(d, "d1").update(stp="urn:ogf:network:x.net:topology:a"),
     "dtns[0].stp: only a remote DTN (one with beyond) has an STP"),
    (lambda d: dtn(d, "far1").update(vlans="1780-1781"),
     "dtns[2].vlans: a remote DTN uses the VLANs of its interdomain port to-rnp; omit vlans"),
    (lambda d: dtn(d, "far1").update(stp="urn:ogf:network:rnp.sc16:topology:saopaulo?vlan=1780"),
     "dtns[2].stp: 'urn:ogf:network:rnp.sc16:topology:saopaulo?vlan=1780': give the STP without a label "
     "(no ?vlan=...): the VLANs are the interdomain port's vlans"),
    (lambda d: dtn(d, "d1").update(vlans="0-10"), "dtns[0].vlans: VLAN 0 is outside 1..4094"),
    (lambda d: port(d, "to-rnp").update(vlans="1799-1780"), "interdomain[0].vlans: range '1799-1780' runs backwards"),
    (lambda d: port(d, "to-rnp").update(vlans="4000-4095"), "interdomain[0].vlans: VLAN 4095 is outside 1..4094"),
    (lambda d: port(d, "to-rnp").update(vlans="lots"),
     "interdomain[0].vlans: cannot read 'lots' as a VLAN range like 1780-1799"),
    (lambda d: port(d, "to-rnp").pop("vlans"), "interdomain[0].vlans: required field is missing"),
    (lambda d: port(d, "to-rnp").update(capacity="0"), "interdomain[0].capacity: must be greater than zero, got '0'"),
    (lambda d: port(d, "to-rnp").update(port=4),
     "interdomain[0].port: port 4 of switch s2 is already used by dtns[1]"),
    (lambda d: port(d, "to-rnp").update(port=1),
     "interdomain[0].port: port 1 of switch s2 is already used by links[0]"),
    (lambda d: port(d, "to-rnp").update(switch="s9"), "interdomain[0].port: switch 's9' is not declared"),
    (lambda d: port(d, "to-i2").update(name="d1"), "interdomain[1].name: name 'd1' is already used by dtns[0].name"),
    (lambda d: port(d, "to-i2").update(name="l1"), "interdomain[1].name: name 'l1' is already used by links[0].name"),
    (lambda d: port(d, "to-i2")["peer"].update(nsa="rnp.sc16:nsa"),
     "interdomain[1].peer.nsa: 'rnp.sc16:nsa' is not an NSI identifier: it must start with urn:ogf:network:"),
    (lambda d: port(d, "to-i2")["peer"].update(nsa="urn:ogf:network:i2 net:nsa"),
     "interdomain[1].peer.nsa: 'urn:ogf:network:i2 net:nsa': an NSI identifier is ':'-separated non-empty "
     "parts of letters, digits and '.', '_', '~', '+', '@', '/', '-'"),
    (lambda d: port(d, "to-i2")["peer"].update(stp="urn:ogf:network:i2.sc16:topology:scinet?vlan=1800"),
     "interdomain[1].peer.stp: 'urn:ogf:network:i2.sc16:topology:scinet?vlan=1800': give the STP without a "
     "label (no ?vlan=...): the VLANs are the interdomain port's vlans"),
    (lambda d: port(d, "to-i2")["peer"].update(stp="urn:ogf:network:rnp.sc16:topology:scinet"),
     "interdomain[1].peer.stp: urn:ogf:network:rnp.sc16:topology:scinet is already the STP of interdomain "
     "port to-rnp"),
    (lambda d: port(d, "to-i2")["peer"].update(url="http://127.0.0.1/NSI/services/CS2"),
     "interdomain[1].peer.url: 'http://127.0.0.1/NSI/services/CS2': give the port explicitly "
     "(e.g. http://127.0.0.1:9080/...)"),
    (lambda d: port(d, "to-i2")["peer"].update(url="ftp://nsa.example.net:21/CS2"),
     "interdomain[1].peer.url: 'ftp://nsa.example.net:21/CS2': only http and https URLs are accepted"),
    (lambda d: port(d, "to-i2")["peer"].pop("stp"), "interdomain[1].peer.stp: required field is missing"),
    (lambda d: port(d, "to-i2")["peer"].update(colour="red"), "interdomain[1].peer.colour: unknown field"),
    (lambda d: d["sites"][1].update(beyond="to-mars"),
     "sites[1].beyond: no interdomain port named 'to-mars' (declared: to-i2, to-rnp)"),
    (lambda d: d["sites"][1].update(switches=["s1"]),
     "sites[1].switches: a remote site (beyond to-rnp) lies in another domain and holds no switches of ours"),
    (lambda d: d["sites"][1]["dtns"].append("nobody"), "sites[1].dtns[2]: dtn 'nobody' is not declared"),
    (lambda d: d["sites"][1]["dtns"].append("d1"), "sites[1].dtns[2]: dtn d1 is one of ours, not beyond to-rnp"),
    (lambda d: d["sites"][1].update(beyond="to-i2"), "sites[1].dtns[0]: dtn far1 is beyond to-rnp, not beyond to-i2"),
    (lambda d: d["sites"][1]["dtns"].append("far1"), "sites[1].dtns[2]: dtn far1 is already in site 'Sao Paulo'"),
    (lambda d: d["sites"][0].update(dtns=["d1"]),
     "sites[0].dtns: only a remote site (one with beyond) lists DTNs; the DTNs of a site of ours are those on "
     "its switches"),
]


@pytest.mark.parametrize(("mutate", "expected"), REFUSED)
def test_bad_domains_are_refused_naming_file_and_field(tmp_path, mutate, expected):
    assert expected in problems_for(tmp_path, mutate)


def test_a_dangling_beyond_is_one_clear_problem(tmp_path):
    problems = problems_for(tmp_path, lambda d: dtn(d, "far2").update(beyond="to-nowhere"))
    assert problems == ["dtns[3].beyond: no interdomain port named 'to-nowhere' (declared: to-i2, to-rnp)"]


def test_a_bad_interdomain_port_is_reported_there_not_at_its_remote_dtns(tmp_path):
    problems = problems_for(tmp_path, lambda d: port(d, "to-rnp").update(port="eight"))
    assert problems == ["interdomain[0].port: Input should be a valid integer"]


def test_every_problem_at_once(tmp_path):
    def mutate(d):
        dtn(d, "far1").update(switch="s2")
        dtn(d, "far2").update(beyond="to-nowhere")
        port(d, "to-i2").update(vlans="9999")
    problems = problems_for(tmp_path, mutate)
    assert len(problems) == 3, problems


def test_interdomain_ports_have_a_limit(tmp_path):
    problems = problems_for(tmp_path, lambda d: d.update(interdomain=[{}] * 1025))
    assert problems == ["interdomain: 1,025 entries; at most 1,024 are accepted"]


# --- sc16-nsi -----------------------------------------------------------------------------------


def test_sc16_nsi_has_sao_paulo_and_ann_arbor_beyond_neighbouring_domains():
    topology = Topology.load(TOPOLOGY_DIR / "sc16-nsi.yaml")
    assert "ansp-saopaulo" not in topology.switches and "umich-annarbor" not in topology.switches
    assert {name: (p.switch, p.port, p.vlans, p.peer.nsa, p.peer.url) for name, p in topology.interdomain.items()} == {
        "to-rnp": ("scinet", 28, (1780, 1799), RNP_NSA, "http://127.0.0.1:9081/NSI/services/CS2"),
        "to-internet2": ("scinet", 29, (1800, 1819), "urn:ogf:network:i2.sc16:nsa",
                         "http://127.0.0.1:9082/NSI/services/CS2"),
    }
    assert topology.dtn("saopaulo-dtn1").stp == "urn:ogf:network:rnp.sc16:topology:saopaulo"
    assert topology.domain_of("annarbor-dtn1") == "urn:ogf:network:i2.sc16:nsa"
    assert topology.sites["RNP/ANSP Sao Paulo"].dtns == ["saopaulo-dtn1"]
    assert topology.sites["UMich Ann Arbor"].beyond == "to-internet2"
    assert not topology.unreachable_dtn_warnings()


# --- the Zoo importer ---------------------------------------------------------------------------

ZOO = TOPOLOGY_DIR / "zoo" / "Abilene.graphml"
MARK = "Chicago=urn:ogf:network:i2.net:nsa,urn:ogf:network:i2.net:topology:chi,1780-1799"


def test_zoo_import_marks_a_node_as_leading_to_another_domain():
    result = import_zoo(ZOO, 10 * G, with_dtns=True, interdomain=[MARK + ",https://nsa.i2.net:8443/NSI/services/CS2"])
    topology = Topology(result.spec)
    (name, port_spec), = topology.interdomain.items()
    assert name == "chicago-interdomain"
    assert (port_spec.switch, port_spec.vlans, port_spec.capacity) == ("chicago", (1780, 1799), 10 * G)
    assert port_spec.port in topology.switches["chicago"].ports
    assert port_spec.peer.stp == "urn:ogf:network:i2.net:topology:chi"
    assert port_spec.peer.url == "https://nsa.i2.net:8443/NSI/services/CS2"
    assert "chicago-dtn" not in topology.dtns  # its attachment is the interdomain port
    assert len(topology.dtns) == len(topology.switches) - 1
    # by node id or switch name too
    assert import_zoo(ZOO, 10 * G, interdomain=[MARK.replace("Chicago=", "1=")]).spec.interdomain[0].switch == "chicago"
    assert import_zoo(ZOO, 10 * G, interdomain=[MARK.replace("Chicago=", "chicago=")]).spec.interdomain


@pytest.mark.parametrize(("value", "message"), [
    ("Chicago", "--interdomain 'Chicago': expected NODE=NSA_URN,STP_URN,VLANS[,PROVIDER_URL]"),
    ("Chicago=urn:ogf:network:i2.net:nsa,urn:ogf:network:i2.net:topology:chi",
     "--interdomain 'Chicago=urn:ogf:network:i2.net:nsa,urn:ogf:network:i2.net:topology:chi': expected NODE="),
    (MARK.replace("1780-1799", "1780-5000"), f"--interdomain {MARK.replace('1780-1799', '1780-5000')!r}: VLANs: "
                                             "VLAN 5000 is outside 1..4094"),
    (MARK.replace(":nsa,", ":nsa?x,"), "NSA id: 'urn:ogf:network:i2.net:nsa?x': an NSI identifier is"),
    (MARK.replace("topology:chi", "topology:chi?vlan=1780"), "STP: 'urn:ogf:network:i2.net:topology:chi?vlan=1780': "
                                                             "give the STP without a label"),
    (MARK + ",http://nsa.i2.net/CS2", "provider URL: 'http://nsa.i2.net/CS2': give the port explicitly"),
    (MARK.replace("Chicago=", "Atlantis="), "--interdomain Atlantis: no node 'Atlantis' in "),
])
def test_zoo_import_refuses_bad_marks_naming_the_flag(value, message):
    with pytest.raises(InvalidArgument) as caught:
        import_zoo(ZOO, 10 * G, interdomain=[value])
    assert message in str(caught.value)


def test_zoo_import_refuses_a_node_marked_twice():
    with pytest.raises(InvalidArgument, match=r"--interdomain 1: node 1 \(chicago\) is marked twice"):
        import_zoo(ZOO, 10 * G, interdomain=[MARK, MARK.replace("Chicago=", "1=")])


def test_topo_import_cli_takes_interdomain(tmp_path, capsys):
    out = tmp_path / "abilene.yaml"
    assert tsdn_main(["topo", "import", str(ZOO), "--link-capacity", "10G", "--dtns", "--interdomain", MARK,
                      "-o", str(out)]) == 0
    assert Topology.load(out).interdomain["chicago-interdomain"].peer.nsa == "urn:ogf:network:i2.net:nsa"
    assert tsdn_main(["topo", "import", str(ZOO), "--link-capacity", "10G", "--interdomain", "Chicago=x"]) == 2
    assert "--interdomain 'Chicago=x': expected NODE=" in capsys.readouterr().err
    assert not (tmp_path / "other.yaml").exists()


# --- tsdn topo validate -------------------------------------------------------------------------


def test_topo_validate_prints_the_domains(tmp_path, capsys):
    path = write(tmp_path, GOOD)
    assert tsdn_main(["topo", "validate", str(path)]) == 0
    out = capsys.readouterr().out
    peers = "urn:ogf:network:i2.sc16:nsa, urn:ogf:network:rnp.sc16:nsa"
    assert out == f"""ok: {path}: twodomain: 2 switches, 1 links, 4 DTNs, 2 sites, 2 interdomain ports (2 remote DTNs)

domains: ours and 2 neighbour(s) ({peers}), through 2 interdomain port(s)
  to-rnp at s2:8: 10G per direction, 88 ms, VLANs 1780-1799
    peer NSA  urn:ogf:network:rnp.sc16:nsa
    peer STP  urn:ogf:network:rnp.sc16:topology:scinet
    provider  http://127.0.0.1:9081/NSI/services/CS2
    remote DTN far1: STP urn:ogf:network:rnp.sc16:topology:saopaulo, site Sao Paulo
    remote DTN far2: STP urn:ogf:network:rnp.sc16:topology:saopaulo, site Sao Paulo
  to-i2 at s1:8: 100G per direction, VLANs 1800
    peer NSA  urn:ogf:network:i2.sc16:nsa
    peer STP  urn:ogf:network:i2.sc16:topology:scinet
    remote DTNs: none
"""


def test_topo_validate_of_a_file_without_domains_prints_the_summary_only(capsys):
    assert tsdn_main(["topo", "validate", "ring8"]) == 0
    assert capsys.readouterr().out.count("\n") == 1


def test_topo_validate_refuses_a_dangling_reference(tmp_path, capsys):
    data = copy.deepcopy(GOOD)
    data["sites"][1]["beyond"] = "to-mars"
    path = write(tmp_path, data)
    assert tsdn_main(["topo", "validate", str(path)]) == 2
    captured = capsys.readouterr()
    assert f"{path}: sites[1].beyond: no interdomain port named 'to-mars'" in captured.err
    assert captured.out == ""
