"""The `tsdn` command line as a user runs it: a real process, exit codes, stdout and stderr."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.paths import bench_network
from sdn_app.core.topology import Topology
from topologies import TOPOLOGY_DIR, builtin_topology

ZOO = TOPOLOGY_DIR / "zoo"
TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"


def tsdn(*args, cwd=None):
    return subprocess.run([TSDN, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_validate_builtin_and_path():
    for ref in ("sc16", str(builtin_topology("ring8"))):
        done = tsdn("topo", "validate", ref)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("ok: ")


def test_validate_bad_file_names_file_and_field(tmp_path):
    data = yaml.safe_load(builtin_topology("ring8").read_text())
    data["links"][3]["b_port"] = 7
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    done = tsdn("topo", "validate", str(bad))
    assert done.returncode == 2
    assert f"{bad}: links[3].b_port: port 7 not declared on switch" in done.stderr
    assert done.stdout == ""


def test_show_json_is_the_whole_topology():
    done = tsdn("topo", "show", "sc16", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert len(data["switches"]) == len(Topology.load(builtin_topology("sc16")).switches)
    human = tsdn("topo", "show", "sc16")
    assert "tbit-rdma" in human.stdout and "caltech-a-dtn1" in human.stdout


def test_import_esnet_writes_a_valid_file(tmp_path):
    out = tmp_path / "esnet.yaml"
    done = tsdn("topo", "import", str(ZOO / "Esnet.graphml"), "--link-capacity", "100G", "--dtns", "-o", str(out))
    assert done.returncode == 0, done.stderr
    topology = Topology.load(out)
    assert len(topology.switches) == 68
    assert len(topology.dtns) > 0
    assert tsdn("topo", "validate", str(out)).returncode == 0
    to_stdout = tsdn("topo", "import", str(ZOO / "Abilene.graphml"), "--link-capacity", "10G")
    assert to_stdout.returncode == 0
    assert len(yaml.safe_load(to_stdout.stdout)["switches"]) == 11


def test_import_bad_input_writes_nothing(tmp_path):
    out = tmp_path / "out.yaml"
    not_graphml = tmp_path / "x.graphml"
    not_graphml.write_text("this is not xml")
    done = tsdn("topo", "import", str(not_graphml), "--link-capacity", "100G", "-o", str(out))
    assert done.returncode == 2 and str(not_graphml) in done.stderr
    assert not out.exists()
    sample = ZOO / "Abilene.graphml"
    done = tsdn("topo", "import", str(sample), "--link-capacity", "10X", "-o", str(out))
    assert done.returncode == 2 and "--link-capacity" in done.stderr
    assert not out.exists()
    if sample.exists():
        done = tsdn("topo", "import", str(sample), "--link-capacity", "10G", "-o", str(tmp_path / "no" / "dir.yaml"))
        assert done.returncode == 2 and "cannot write" in done.stderr
    assert list(tmp_path.iterdir()) == [not_graphml]


def test_path_compute_json_matches_the_topology():
    done = tsdn("path", "compute", "--topology", "sc16", "caltech-a-dtn1", "starlight-dtn1",
                "--bandwidth", "400G", "--policy", "widest", "--protect", "--duration", "1h", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    topology = Topology.load(builtin_topology("sc16"))
    primary, backup = result["primary"], result["backup"]
    assert primary["route"][0] == "caltech-a-dtn1" and primary["route"][-1] == "starlight-dtn1"
    assert primary["links"] == ["tbit-rdma"]
    assert not set(primary["links"]) & set(backup["links"])
    first = primary["hops"][0]
    assert first["in_port"] == topology.dtns["caltech-a-dtn1"].port
    assert first["out_port"] == topology.links["tbit-rdma"].a_port
    assert result["bandwidth_bps"] == 400 * 10**9


def test_alternatives():
    done = tsdn("path", "compute", "--topology", "sc16", "pasadena-dtn1", "saopaulo-dtn1", "-b", "40G",
                "--alternatives", "3", "--json")
    assert done.returncode == 0, done.stderr
    routes = [tuple(p["route"]) for p in json.loads(done.stdout)["alternatives"]]
    assert len(routes) == 3 and len(set(routes)) == 3


@pytest.mark.parametrize(("args", "code", "message"), [
    (["caltech-a-dtn1", "starlight-dtn1", "-b", "1T"], 1, "access link of DTN caltech-a-dtn1"),
    (["ucsd-dtn1", "dell-dtn1", "-b", "40G", "--exclude", "scinet", "--exclude", "fiber-ucsd"], 1, "no route exists"),
    (["ucsd-dtn1", "dell-dtn1", "-b", "40G", "--max-hops", "1"], 1, "within max_hops=1"),
    (["ucsd-dtn1", "nobody", "-b", "40G"], 2, "unknown DTN 'nobody'"),
    (["ucsd-dtn1", "dell-dtn1", "-b", "10X"], 2, "--bandwidth: cannot read '10X'"),
    (["ucsd-dtn1", "dell-dtn1", "-b", "0"], 2, "--bandwidth: must be greater than zero"),
    (["ucsd-dtn1", "dell-dtn1", "-b", "1G", "--start", "+2h", "--end", "+1h"], 2, "--end"),
    (["ucsd-dtn1", "dell-dtn1", "-b", "1G", "--duration", "soon"], 2, "--duration"),
    (["ucsd-dtn1", "dell-dtn1", "-b", "1G", "--max-hops", "-1"], 2, "--max-hops"),
    (["ucsd-dtn1", "dell-dtn1", "-b", "1G", "--exclude", "atlantis"], 2, "exclude: 'atlantis'"),
    (["ucsd-dtn1", "ucsd-dtn1", "-b", "1G"], 2, "same DTN"),
])
def test_path_compute_refusals(args, code, message):
    done = tsdn("path", "compute", "--topology", "sc16", *args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert done.stdout == ""


def test_missing_topology():
    done = tsdn("path", "compute", "--topology", "missing.yaml", "a", "b", "-b", "1G")
    assert done.returncode == 2 and "missing.yaml: no such topology file" in done.stderr


def test_bench_result_shape():
    result = bench_network("ring8", Topology.load(builtin_topology("ring8")), requests=40, bookings=30, seed=1)
    for key in ("topology", "switches", "bookings", "requests_per_s", "p50_ms", "p99_ms", "baseline_requests_per_s"):
        assert key in result
    assert result["switches"] == 8 and result["bookings"] == 30
    assert result["admitted"] + result["refused"] == 40


@pytest.mark.parametrize("args, message", [
    (["--clear-at", "0.95"], "--clear-at (0.95) must be below --congested-at (0.9)"),
    (["--move-budget", "0"], "--move-budget: a whole number of at least 1, got 0"),
    (["--reroute-below", "1.5"], "--reroute-below: a share in (0, 1], got 1.5"),
    (["--hold-down", "-3"], "--hold-down: seconds, zero or more, got -3.0"),
    (["--congested-at", "often"], "argument --congested-at: invalid float value: 'often'"),
    (["--path-labels", "4000-5000"], "argument --path-labels: '4000-5000': VLAN ids from 1 to 4094"),
    (["--path-labels", "many"], "argument --path-labels: 'many' is not a range of VLAN ids like 2-4094"),
    (["--flow-design", "tunnels"], "argument --flow-design: invalid choice: 'tunnels'"),
    (["--label-grace", "2d"], "--label-grace: from 0 to a day, got '2d'")])
def test_controller_refuses_bad_rerouting_thresholds_naming_the_option(tmp_path, args, message):
    state = tmp_path / "tsdn.db"
    done = tsdn("controller", "--topology", "ring8", "--no-openflow", "--no-http", "--state", str(state), *args)
    assert done.returncode == 2 and message in done.stderr
    assert not state.exists()  # nothing started, nothing written


def test_controller_help_lists_every_rerouting_threshold_with_its_default():
    shown = tsdn("controller", "--help").stdout
    for option, default in [("--reroute-below", "0.8"), ("--reroute-reports", "3"), ("--congested-at", "0.9"),
                            ("--clear-at", "0.7"), ("--unowned-margin", "0.05"), ("--clear-for", "20"),
                            ("--hold-down", "10"), ("--move-budget", "3"), ("--budget-window", "300")]:
        assert option in shown
        after = " ".join(shown.rsplit(option, 1)[1].split())  # its help entry, past the usage line
        assert after.split("(default ", 1)[1].startswith(f"{default})"), option
