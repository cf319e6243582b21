"""File limits: the largest topology the limits let through still reaches a default gRPC client,
and one step beyond each limit is refused with exit 2 naming the file and what is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
import yaml

from northbound.auth import MAX_TOKENS, MAX_TOKENS_FILE_BYTES, Authenticator
from northbound.convert import topology_out
from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb
from northbound.proto.tsdn.v1 import topology_pb2_grpc
from sdn_app.core.clock import SystemClock
from sdn_app.core.errors import InvalidArgument, TopologyError
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import (
    MAX_DTNS,
    MAX_INT_CHARS,
    MAX_LINKS,
    MAX_PORT,
    MAX_PORTS,
    MAX_SITES,
    MAX_SWITCHES,
    MAX_TOPOLOGY_BYTES,
    MAX_TOPOLOGY_DESCRIPTION,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    load_topology_spec,
    read_yaml,
)
from topologies import TOPOLOGY_DIR

GRPC_DEFAULT_MAX_RECEIVE = 4 * 1024 * 1024  # what a client that sets no option accepts
MAX_BPS = 10**18
TSDN = [sys.executable, "-m", "tsdn"]


def long_name(kind: str, i: int, length: int = 63) -> str:
    return f"{kind}{i}-".ljust(length, "x")


def worst_case_yaml(switches: int = MAX_SWITCHES, links: int = MAX_LINKS, dtns: int = MAX_DTNS,
                    sites: int = MAX_SITES) -> str:
    """The topology with the largest GetTopology reply the limits allow: every count at its limit,
    every name as long as allowed, the highest port numbers (longest link and direction names),
    capacities at 1 Ebit/s, NUMA -1 (ten bytes on the wire). Names are YAML aliases so that the
    file stays under MAX_TOPOLOGY_BYTES: the counts, not the file size, are what bound the reply."""
    ports_each = MAX_PORTS // switches
    first_port = MAX_PORT - ports_each + 1
    lines = ["name: " + long_name("worst", 0), "description: " + "d" * MAX_TOPOLOGY_DESCRIPTION, "switches:"]
    for i in range(switches):
        lines.append(f"  - {{name: &s{i} {long_name('s', i)}, dpid: {2**64 - 1 - i}, "
                     f"ports: ['{first_port}-{MAX_PORT}']}}")
    used = dict.fromkeys(range(switches), 0)

    def port(switch: int) -> int:
        used[switch] += 1
        assert used[switch] <= ports_each
        return first_port + used[switch] - 1

    lines.append("links:")
    for i in range(links):
        a, b = i % switches, (i + 1 + i // switches) % switches
        lines.append(f"  - {{a: *s{a}, a_port: {port(a)}, b: *s{b}, b_port: {port(b)}, capacity: {MAX_BPS}, "
                     "latency_ms: 9999.25, kind: booth}")
    lines.append("dtns:")
    for i in range(dtns):
        switch = i % switches
        mac = "02:" + ":".join(f"{(i >> s) & 0xFF:02x}" for s in (32, 24, 16, 8, 0))
        lines.append(f"  - {{name: {long_name('d', i)}, switch: *s{switch}, port: {port(switch)}, "
                     f"ipv4: 100.{100 + i // 65536}.{(i // 256) % 256}.{i % 256}, mac: '{mac}', "
                     f"nic_speed: {MAX_BPS}, numa_node: -1}}")
    lines.append("sites:")
    for i in range(sites):
        lines.append(f"  - {{name: {long_name('site', i, 80)}, kind: booth, lat: -89.123456789, "
                     f"lon: -179.123456789, switches: [*s{i}]}}")
    return "\n".join(lines) + "\n"


def reply_size(topology: Topology) -> int:
    """The GetTopology reply's size with every direction fully booked (the largest numbers)."""
    book = SimpleNamespace(topology=topology, clock=SystemClock(), booked_now=lambda direction: MAX_BPS)
    return topology_out(book).ByteSize()


@pytest.fixture(scope="module")
def worst_case(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("worst") / "worst.yaml"
    path.write_text(worst_case_yaml())
    return path


def test_the_worst_case_topology_is_accepted_and_its_reply_fits_a_default_client(worst_case):
    assert worst_case.stat().st_size <= MAX_TOPOLOGY_BYTES
    topology = Topology.load(worst_case)
    assert (len(topology.switches), len(topology.links), len(topology.dtns), len(topology.sites)) == (
        MAX_SWITCHES, MAX_LINKS, MAX_DTNS, MAX_SITES)
    assert sum(len(s.ports) for s in topology.spec.switches) == MAX_PORTS
    size = reply_size(topology)
    assert 2_000_000 < size < GRPC_DEFAULT_MAX_RECEIVE, size  # the limits leave a margin, and are not slack


def test_a_default_client_receives_the_worst_case_topology(worst_case, start_controller):
    controller = start_controller(worst_case)
    with grpc.insecure_channel(controller.address) as channel:  # no options: gRPC's 4 MiB default
        reply = topology_pb2_grpc.TopologyServiceStub(channel).GetTopology(topo_pb.GetTopologyRequest(), timeout=60)
    assert len(reply.links) == MAX_LINKS and len(reply.dtns) == MAX_DTNS


def counted_topology(switches: int = 2, links: int = 1, dtns: int = 0) -> dict:
    """Switches s0..; `links` parallel links and `dtns` DTNs, all on s0 (and s1)."""
    ports = max(links + dtns, 1)
    return {
        "name": "counted",
        "switches": [{"name": f"s{i}", "dpid": i + 1, "ports": [f"1-{ports}"]} for i in range(switches)],
        "links": [{"a": "s0", "a_port": i + 1, "b": "s1", "b_port": i + 1, "capacity": "1G"} for i in range(links)],
        "dtns": [{"name": f"d{i}", "switch": "s0", "port": links + i + 1, "ipv4": f"10.{i // 250}.0.{i % 250 + 1}",
                  "mac": f"02:00:00:00:{i // 256:02x}:{i % 256:02x}", "nic_speed": "1G"}
                 for i in range(dtns)],
    }


@pytest.mark.parametrize(("section", "limit"), [("switches", MAX_SWITCHES), ("links", MAX_LINKS), ("dtns", MAX_DTNS)])
def test_one_more_than_a_count_is_refused(tmp_path, section, limit):
    at_limit, over = (tmp_path / "at.yaml"), (tmp_path / "over.yaml")
    at_limit.write_text(yaml.safe_dump(counted_topology(**{section: limit})))
    over.write_text(yaml.safe_dump(counted_topology(**{section: limit + 1})))
    assert len(getattr(Topology.load(at_limit), section)) == limit
    with pytest.raises(TopologyError) as caught:
        load_topology_spec(over)
    assert caught.value.problems == [f"{over}: {section}: {limit + 1:,} entries; at most {limit:,} are accepted"]


def test_too_many_ports_in_all_is_refused(tmp_path):
    path = tmp_path / "ports.yaml"
    switches = [{"name": f"s{i}", "dpid": i + 1, "ports": ["1-4096"]} for i in range(MAX_PORTS // 4096 + 1)]
    path.write_text(yaml.safe_dump({"name": "ports", "switches": switches,
                                    "links": [{"a": "s0", "a_port": 1, "b": "s1", "b_port": 1, "capacity": "1G"}]}))
    with pytest.raises(TopologyError) as caught:
        load_topology_spec(path)
    assert caught.value.problems == [
        f"{path}: switches[{MAX_PORTS // 4096}].ports: the switches up to this one have more than {MAX_PORTS} ports "
        "in all"]


def run_tsdn(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*TSDN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(TOPOLOGY_DIR.parent)})


def assert_clean_refusal(done: subprocess.CompletedProcess, path: Path, *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("tsdn: error: ") and str(path) in done.stderr, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


def test_a_large_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.yaml"
    with path.open("wb") as handle:  # sparse: 50 MB that cost nothing to make, and would cost a lot to parse
        handle.truncate(50 * 1024 * 1024)
    done = run_tsdn("topo", "validate", str(path), timeout=30)
    assert_clean_refusal(done, path, f"a topology file may have at most {MAX_TOPOLOGY_BYTES:,} bytes",
                         "this one has 52,428,800")


def test_a_device_without_a_size_is_read_only_up_to_the_limit(tmp_path):
    done = run_tsdn("topo", "validate", "/dev/zero", timeout=30)
    assert_clean_refusal(done, Path("/dev/zero"), "this one has more")


HUGE = "9" * 5000


@pytest.mark.parametrize(("text", "needles"), [
    (f"name: x\nswitches:\n  - {{name: s1, dpid: {HUGE}, ports: [1]}}\n",
     ["switches[0].dpid: a 5,000-character integer is far out of range", f"at most {MAX_INT_CHARS} characters"]),
    (f"name: x\nswitches:\n  - {{name: s1, dpid: 1, ports: [1, 2]}}\n  - {{name: s2, dpid: 2, ports: [1]}}\n"
     f"links:\n  - {{a: s1, a_port: 1, b: s2, b_port: 1, capacity: {HUGE}}}\n",
     ["links[0].capacity: a 5,000-character integer"]),
    (f"name: x\nswitches:\n  - {{name: s1, dpid: '{HUGE}', ports: ['1-{HUGE}']}}\n",
     ["switches[0].dpid: '999", "(5002 characters) is too long to be a datapath id",
      "switches[0].ports: cannot read '1-999"]),
    ("name: x\nswitches: " + "[" * 700 + "]" * 700 + "\n", [f"nested more than {MAX_YAML_DEPTH} deep"]),
    ("name: x\nswitches: " + "{a: " * 700 + "1" + "}" * 700 + "\n", [f"nested more than {MAX_YAML_DEPTH} deep"]),
    ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
     + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)),
     [f"more than {MAX_YAML_NODES:,} values (aliases counted each time they are used)"]),
    ("name: x\nswitches: &loop [*loop]\n", ["an alias refers to a list or mapping that holds it"]),
    ('name: x\ndescription: "\\ud800"\nswitches: []\n', ["line 2, column"]),  # not Unicode: not printable
    ("name: 2016-13-45\nswitches: []\n", ["cannot read '2016-13-45' as timestamp"]),
    ("name: x\n? [1, 2]\n: 3\n", ["a list or mapping cannot be a key"]),
    ("name: x\nswitches:\n  - {name: s1, dpid: 1, ports: [1]}\n  - {name: s2, dpid: 2, ports: [1]}\n",
     ["links: none, so no two of the 2 switches can ever reach each other"]),
], ids=["int-dpid", "int-capacity", "long-strings", "deep-lists", "deep-maps", "alias-bomb", "alias-loop",
        "surrogate", "bad-date", "list-key", "no-links"])
def test_hostile_topology_files_exit_2_naming_file_and_problem(tmp_path, text, needles):
    path = tmp_path / "hostile.yaml"
    path.write_text(text, encoding="utf-8")
    assert_clean_refusal(run_tsdn("topo", "validate", str(path)), path, *needles)


def test_the_same_limits_hold_for_show_path_compute_and_the_controller(tmp_path):
    path = tmp_path / "hostile.yaml"
    path.write_text(f"name: x\nswitches:\n  - {{name: s1, dpid: {HUGE}, ports: [1]}}\n")
    needle = "switches[0].dpid: a 5,000-character integer"
    assert_clean_refusal(run_tsdn("topo", "show", str(path)), path, needle)
    assert_clean_refusal(run_tsdn("path", "compute", "--topology", str(path), "a", "b", "-b", "1G"), path, needle)
    assert_clean_refusal(run_tsdn("controller", "--topology", str(path), "--no-openflow", "--no-http",
                                  "--state", str(tmp_path / "s.db"), "--listen-grpc", "127.0.0.1:0"), path, needle)


def tokens_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(("text", "needle"), [
    (f"tokens:\n  - principal: a\n    role: admin\n    token: {HUGE}\n",
     "tokens[0].token: a 5,000-character integer is far out of range"),
    ("tokens: " + "[" * 700 + "]" * 700 + "\n", f"nested more than {MAX_YAML_DEPTH} deep"),
    ("tokens:\n" + "".join(f"  - {{principal: p{i}, role: service, token: token-{i:016d}}}\n"
                           for i in range(MAX_TOKENS + 1)), f"tokens: {MAX_TOKENS + 1:,} entries; at most"),
    ("#" * (MAX_TOKENS_FILE_BYTES + 1), f"a tokens file may have at most {MAX_TOKENS_FILE_BYTES:,} bytes"),
], ids=["huge-int", "deep", "too-many", "too-big"])
def test_hostile_tokens_files_are_refused(tmp_path, text, needle):
    path = tokens_file(tmp_path, text)
    with pytest.raises(InvalidArgument) as caught:
        Authenticator.from_file(path)
    assert str(path) in str(caught.value) and needle in str(caught.value)


def test_the_controller_refuses_a_hostile_tokens_file_with_exit_2(tmp_path):
    path = tokens_file(tmp_path, f"tokens:\n  - principal: a\n    role: admin\n    token: {HUGE}\n")
    done = run_tsdn("controller", "--topology", "ring8", "--tokens", str(path), "--no-openflow", "--no-http",
                    "--state", str(tmp_path / "s.db"), "--listen-grpc", "127.0.0.1:0")
    assert_clean_refusal(done, path, "tokens[0].token: a 5,000-character integer")


def test_colon_numbers_are_text_not_base_60():
    """YAML 1.1 reads 10:00:00:00:00:00:00:01 as a base-60 integer: a dpid would silently change."""
    assert read_yaml("dpid: 10:00:00:00:00:00:00:01\nt: 1:30\n", "x") == {"dpid": "10:00:00:00:00:00:00:01",
                                                                          "t": "1:30"}


def test_zoo_import_keeps_parts_and_validate_warns_about_them(tmp_path):
    """Some real Zoo networks have several parts: they import (with a note), and validate warns."""
    from tests.test_zoo_import import graphml

    source = tmp_path / "Parts.graphml"
    source.write_text(graphml([(str(i), {"label": f"N{i}"}) for i in range(5)], [("0", "1", {}), ("2", "3", {})]))
    out = tmp_path / "parts.yaml"
    done = run_tsdn("topo", "import", str(source), "--link-capacity", "100G", "--dtns", "-o", str(out))
    assert done.returncode == 0 and "3 disconnected parts (sizes 2, 2, 1); all are kept" in done.stderr, done.stderr
    done = run_tsdn("topo", "validate", str(out))
    assert done.returncode == 0 and done.stdout.startswith(f"ok: {out}: "), done.stderr
    assert f"tsdn: warning: {out}: dtns n0-dtn, n1-dtn cannot reach n2-dtn, n3-dtn: no link joins {{n0, n1}} and " \
           "{n2, n3}" in done.stderr.splitlines()


def test_zoo_import_refuses_what_tsdn_could_not_load_back(tmp_path):
    from tests.test_zoo_import import graphml

    label = "A Research Network Point of Presence " * 25  # about 900 characters: kept in each description
    nodes = [(str(i), {"label": f"{i} {label}"}) for i in range(1000)]
    source = tmp_path / "Wordy.graphml"
    source.write_text(graphml(nodes, [(str(i), str(i + 1), {}) for i in range(999)]))
    out = tmp_path / "wordy.yaml"
    done = run_tsdn("topo", "import", str(source), "--link-capacity", "100G", "-o", str(out))
    assert_clean_refusal(done, source, f"a topology file may have at most {MAX_TOPOLOGY_BYTES:,} bytes")
    assert not out.exists()
    too_many = tmp_path / "Huge.graphml"
    too_many.write_text(graphml([(str(i), {}) for i in range(MAX_SWITCHES + 1)], [("0", "1", {})]))
    assert_clean_refusal(run_tsdn("topo", "import", str(too_many), "--link-capacity", "1G"), too_many,
                         f"switches: {MAX_SWITCHES + 1:,} entries; at most {MAX_SWITCHES:,}")


def test_demo_scenario_files_are_held_to_the_same_limits(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: x\ntimeline: " + "[" * 700 + "]" * 700 + "\n")
    assert_clean_refusal(run_tsdn("demo", "--check", str(deep)), deep, f"nested more than {MAX_YAML_DEPTH} deep")
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.truncate(2 * 1024 * 1024)
    assert_clean_refusal(run_tsdn("demo", "--check", str(big)), big, "a scenario file may have at most 1,048,576 bytes")
    topology = tmp_path / "topology.yaml"
    topology.write_text(f"name: x\nswitches:\n  - {{name: s1, dpid: {HUGE}, ports: [1]}}\n")
    scenario = tmp_path / "scenario.yaml"
    shipped = (TOPOLOGY_DIR.parent / "scenarios" / "smoke.yaml").read_text()
    scenario.write_text(shipped.replace("topology: ring8", "topology: topology.yaml"))
    assert_clean_refusal(run_tsdn("demo", "--check", str(scenario)), scenario,
                         "switches[0].dpid: a 5,000-character integer")
