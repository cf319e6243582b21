"""Topology files: every kind of bad input is refused with file and field named."""

import copy

import pytest
import yaml

from sdn_app.core.errors import InvalidArgument, TopologyError
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import dump_topology_spec, load_topology_spec, parse_topology_spec

GOOD = {
    "name": "tiny",
    "switches": [
        {"name": "s1", "dpid": 1, "ports": ["1-4"]},
        {"name": "booth-dell", "dpid": "00:00:00:00:00:00:00:02", "ports": [1, 2, 3]},
        {"name": "s3", "dpid": "0x3", "ports": [1, 2, 3]},
    ],
    "links": [
        {"a": "s1", "a_port": 1, "b": "booth-dell", "b_port": 1, "capacity": "100G", "kind": "wan"},
        {"name": "l2", "a": "booth-dell", "a_port": 2, "b": "s3", "b_port": 1, "capacity_ab": "40G",
         "capacity_ba": "10G", "latency_ms": 2.5},
        {"name": "l3", "a": "s3", "a_port": 2, "b": "s1", "b_port": 2, "capacity": "1T"},
        {"name": "l3b", "a": "s3", "a_port": 3, "b": "s1", "b_port": 3, "capacity": "1T"},
    ],
    "dtns": [
        {"name": "d1", "switch": "s1", "port": 4, "ipv4": "10.0.0.1", "mac": "02:00:00:00:00:01",
         "nic_speed": "100G", "numa_node": 0},
        {"name": "d2", "switch": "booth-dell", "port": 3, "ipv4": "10.0.0.2", "mac": "02:00:00:00:00:02",
         "nic_speed": "25G"},
    ],
    "sites": [{"name": "Salt Lake", "lat": 40.76, "lon": -111.89, "kind": "booth", "switches": ["s1", "booth-dell"]}],
}


def write(tmp_path, data, name="topo.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def problems_for(tmp_path, mutate, good=GOOD):
    """The problems loading `good` changed by `mutate` gives, without the file name in front."""
    data = copy.deepcopy(good)
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(TopologyError) as caught:
        load_topology_spec(path)
    assert all(p.startswith(f"{path}: ") for p in caught.value.problems)
    return [p.removeprefix(f"{path}: ") for p in caught.value.problems]


def test_good_file_builds_the_model(tmp_path):
    topology = Topology.load(write(tmp_path, GOOD))
    assert set(topology.switches) == {"s1", "booth-dell", "s3"}
    assert topology.switch_by_dpid(2) == "booth-dell"
    forward, backward = topology.link_directions["l2"]
    assert (forward.id, forward.capacity) == ("booth-dell:2->s3:1", 40 * 10**9)
    assert (backward.id, backward.capacity) == ("s3:1->booth-dell:2", 10 * 10**9)
    # parallel links stay distinct in the graph
    assert topology.graph.number_of_edges("s3", "s1") == 2
    assert topology.resolve_links("s1--s3") == ["l3", "l3b"]
    up, down = topology.access("d2")
    assert (up.id, up.capacity, down.id) == ("d2->booth-dell:3", 25 * 10**9, "booth-dell:3->d2")
    assert not topology.all_links_have_latency


def test_dump_round_trips(tmp_path):
    spec = load_topology_spec(write(tmp_path, GOOD))
    again = parse_topology_spec(yaml.safe_load(dump_topology_spec(spec)), "dumped")
    assert again == spec


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d["links"][0].update(b_port=7), "links[0].b_port: port 7 not declared on switch booth-dell"),
    (lambda d: d["links"][3].update(b_port=2), "links[3].b_port: port 2 of switch s1 is already used by links[2]"),
    (lambda d: d["links"][0].update(b="nowhere"), "links[0].b_port: switch 'nowhere' is not declared"),
    (lambda d: d["switches"][2].update(dpid=1), "switches[2].dpid: dpid 0x1 is already used by switch s1"),
    (lambda d: d["switches"][2].update(name="s1"), "switches[2].name: name 's1' is already used by switches[0].name"),
    (lambda d: d["dtns"][1].update(name="l2"), "dtns[1].name: name 'l2' is already used by links[1].name"),
    (lambda d: d["dtns"][1].update(switch="ghost"), "dtns[1].port: switch 'ghost' is not declared"),
    (lambda d: d["dtns"][1].update(ipv4="10.0.0.1"), "dtns[1].ipv4: 10.0.0.1 is already used by dtn d1"),
    (lambda d: d["dtns"][1].update(port=4, switch="s1"),
     "dtns[1].port: port 4 of switch s1 is already used by dtns[0]"),
    (lambda d: d["links"][0].update(capacity="10X"), "links[0].capacity: cannot read '10X' as a bandwidth"),
    (lambda d: d["links"][0].update(capacity=0), "links[0].capacity: must be greater than zero"),
    (lambda d: d["links"][0].update(capacity="-100G"), "links[0].capacity: must be greater than zero"),
    (lambda d: d["links"][0].pop("capacity"), "links[0].capacity: give capacity, or both capacity_ab and capacity_ba"),
    (lambda d: d["links"][0].update(b="s1", b_port=2), "links[0].b: a link must join two different switches"),
    (lambda d: d["links"][0].update(capcity="1G"), "links[0].capcity: unknown field"),
    (lambda d: d["links"][0].update(kind="metro"), "links[0].kind: Input should be 'wan', 'booth' or 'core'"),
    (lambda d: d["links"][0].update(latency_ms=-1), "links[0].latency_ms: Input should be greater than or equal to 0"),
    (lambda d: d["switches"][0].update(ports=["4-1"]), "switches[0].ports: range '4-1' runs backwards"),
    (lambda d: d["switches"][0].update(ports=[1, 1]), "switches[0].ports: port 1 is listed twice"),
    (lambda d: d["switches"][0].update(dpid="zz"), "switches[0].dpid: cannot read 'zz' as a datapath id"),
    (lambda d: d["switches"][0].update(name="bad name"), "switches[0].name: 'bad name' is not a valid name"),
    (lambda d: d["switches"][0].pop("dpid"), "switches[0].dpid: required field is missing"),
    (lambda d: d["dtns"][0].update(mac="01:00:00:00:00:01"), "dtns[0].mac: 01:00:00:00:00:01 is a multicast address"),
    (lambda d: d["dtns"][0].update(ipv4="10.0.0.300"), "dtns[0].ipv4: expected an IPv4 address"),
    (lambda d: d["dtns"][0].update(nic_speed="fast"), "dtns[0].nic_speed: cannot read 'fast' as a bandwidth"),
    (lambda d: d["sites"][0]["switches"].append("s9"), "sites[0].switches[2]: switch 's9' is not declared"),
    (lambda d: d["sites"][0].pop("lon"), "sites[0]: give both lat and lon, or neither"),
    (lambda d: d.update(switches=[]), "switches: List should have at least 1 item"),
    (lambda d: d.update(links=[]), "links: none, so no two of the 3 switches can ever reach each other"),
    (lambda d: d["switches"][0].update(dpid=2**64), "switches[0].dpid: datapath id must be between 1 and 2^64-1"),
    (lambda d: d["switches"][0].update(dpid="9" * 100), "switches[0].dpid: '9999"),
    (lambda d: d["switches"][0].update(ports=["1-4096", 5000]), "switches[0].ports: more than 4096 ports on one"),
    (lambda d: d["links"][0].update(a_port=0xFFFFFF01), "links[0].a_port: Input should be less than or equal to"),
    (lambda d: d["links"][0].update(capacity=10**18 + 1), "links[0].capacity: 1000000000000000001 is more than"),
    (lambda d: d["links"][0].update(capacity="9" * 100 + "G"), "links[0].capacity: '9999"),
    (lambda d: d["dtns"][0].update(numa_node=256), "dtns[0].numa_node: Input should be less than or equal to 255"),
    (lambda d: d["links"][0].update(description="x" * 1025), "links[0].description: at most 1,024 characters, this"),
    (lambda d: d.update(description="x" * 4097), "description: at most 4,096 characters, this has 4,097"),
])
def test_bad_fields_are_named(tmp_path, mutate, expected):
    problems = problems_for(tmp_path, mutate)
    assert any(p.startswith(expected) for p in problems), problems


def test_every_problem_is_reported_at_once(tmp_path):
    def bad_fields(d):
        d["links"][0]["capacity"] = "10X"
        d["dtns"][1]["mac"] = "nope"
    assert len(problems_for(tmp_path, bad_fields)) == 2

    def bad_references(d):
        d["links"][3]["b_port"] = 7
        d["switches"][2]["dpid"] = 1
        d["sites"][0]["switches"].append("s9")
    assert len(problems_for(tmp_path, bad_references)) == 3


@pytest.mark.parametrize(("text", "expected"), [
    ("name: x\nswitches: [\n", "not valid YAML at line"),
    ("name: x\nname: y\nswitches: []\n", "key 'name' appears twice"),
    ("- just\n- a list\n", "expected a mapping"),
    ("", "expected a mapping"),
])
def test_malformed_yaml(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(InvalidArgument, match=expected) as caught:
        load_topology_spec(path)
    assert str(path) in str(caught.value)


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(InvalidArgument, match="no such topology file"):
        load_topology_spec(tmp_path / "absent.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InvalidArgument, match="cannot read topology file"):
        load_topology_spec(binary)


def test_one_switch_needs_no_links(tmp_path):
    data = copy.deepcopy(GOOD)
    data.update(switches=GOOD["switches"][:1], links=[], sites=[], dtns=[dict(GOOD["dtns"][0]),
                dict(GOOD["dtns"][1], switch="s1", port=3)])
    topology = Topology.load(write(tmp_path, data))
    assert len(topology.dtns) == 2 and topology.unreachable_dtn_warnings() == []


def test_a_problem_list_is_cut_and_counted(tmp_path):
    data = copy.deepcopy(GOOD)
    data["links"] += [dict(GOOD["links"][2], name=f"bad{i}", capacity="fast") for i in range(120)]
    path = write(tmp_path, data)
    with pytest.raises(TopologyError) as caught:
        load_topology_spec(path)
    assert len(caught.value.problems) == 51 and caught.value.problems[-1] == f"{path}: ... and 70 more problems"


SPLIT = """
name: split
switches:
  - {name: s1, dpid: 1, ports: ["1-4"]}
  - {name: s2, dpid: 2, ports: ["1-4"]}
  - {name: s3, dpid: 3, ports: ["1-4"]}
  - {name: s4, dpid: 4, ports: ["1-4"]}
  - {name: s5, dpid: 5, ports: ["1-4"]}
links:
  - {a: s1, a_port: 1, b: s2, b_port: 1, capacity: 100G}
  - {a: s4, a_port: 1, b: s5, b_port: 1, capacity: 100G}
dtns:
  - {name: a-dtn1, switch: s1, port: 3, ipv4: 10.0.0.1, mac: "02:00:00:00:00:01", nic_speed: 10G}
  - {name: b-dtn1, switch: s2, port: 3, ipv4: 10.0.0.2, mac: "02:00:00:00:00:02", nic_speed: 10G}
  - {name: c-dtn1, switch: s3, port: 3, ipv4: 10.0.0.3, mac: "02:00:00:00:00:03", nic_speed: 10G}
"""
SPLIT_WARNING = "dtns a-dtn1, b-dtn1 cannot reach c-dtn1: no link joins {s1, s2} and {s3}"


def test_dtns_that_can_never_meet_are_named_with_their_parts(tmp_path):
    topology = Topology.load(write(tmp_path, SPLIT))
    assert topology.unreachable_dtn_warnings() == [SPLIT_WARNING]  # s4-s5 hold no DTN: nothing to say
    assert Topology.load(write(tmp_path, GOOD)).unreachable_dtn_warnings() == []


def test_many_parts_give_a_bounded_warning():
    switches = [{"name": f"s{i}", "dpid": i + 1, "ports": [1, 2]} for i in range(30)]
    links = [{"a": f"s{i}", "a_port": 1, "b": f"s{i + 1}", "b_port": 1, "capacity": "1G"} for i in range(0, 30, 2)]
    dtns = [{"name": f"d{i}", "switch": f"s{i}", "port": 2, "ipv4": f"10.0.0.{i + 1}", "mac": f"02:00:00:00:00:{i:02x}",
             "nic_speed": "1G"} for i in range(30)]
    topology = Topology(parse_topology_spec({"name": "many", "switches": switches, "links": links, "dtns": dtns}, "x"))
    warnings = topology.unreachable_dtn_warnings()
    assert warnings[0] == "dtns d0, d1 cannot reach d2, d3: no link joins {s0, s1} and {s2, s3}"
    assert len(warnings) == 11 and warnings[-1] == ("... and 95 more such pairs: the DTNs are in 15 parts that no "
                                                    "link joins")


def test_validate_warns_on_stderr_and_still_exits_0(tmp_path, capsys):
    from tsdn.cli import main

    path = write(tmp_path, SPLIT)
    assert main(["topo", "validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"ok: {path}: split: 5 switches, 2 links, 3 DTNs")
    assert err == f"tsdn: warning: {path}: {SPLIT_WARNING}\n"


def test_validate_refuses_switches_without_links(tmp_path, capsys):
    from tsdn.cli import main

    data = copy.deepcopy(GOOD)
    data["links"] = []
    path = write(tmp_path, data)
    assert main(["topo", "validate", str(path)]) == 2
    assert f"{path}: links: none, so no two of the 3 switches can ever reach each other" in capsys.readouterr().err


def test_the_controller_logs_the_same_warning_at_start(tmp_path, start_controller, caplog):
    path = write(tmp_path, SPLIT)
    with caplog.at_level("WARNING", logger="tsdn.controller"):
        start_controller(path)
    assert f"{path}: {SPLIT_WARNING}" in [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
