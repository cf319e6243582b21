"""Host facts from fake sysfs trees: NICs, PCIe capacity limits, RDMA, NUMA, malformed values."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dtn_agent.host import parse_link_speed, pcie_usable_bps, read_host_facts
from sdn_app.core.errors import InvalidArgument
from tests.fake_sysfs import FakeHost

TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"


def tsdn(*args):
    return subprocess.run([TSDN, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def host(tmp_path) -> FakeHost:
    return FakeHost(tmp_path / "root").cpus("0-31", {0: "0-15", 1: "16-31"})


def test_link_speed_and_encoding():
    assert parse_link_speed("8.0 GT/s PCIe") == 8.0
    assert parse_link_speed("2.5 GT/s") == 2.5
    assert parse_link_speed("5 GT/s") == 5.0
    assert parse_link_speed("Unknown") is None
    with pytest.raises(ValueError):
        parse_link_speed("fast")
    assert pcie_usable_bps(2.5, 1) == 2_000_000_000  # 8b/10b
    assert pcie_usable_bps(5.0, 4) == 16_000_000_000  # 40G card at PCIe 2.0 x4
    assert round(pcie_usable_bps(8.0, 16) / 1e9, 1) == 126.0  # 128b/130b
    assert round(pcie_usable_bps(16.0, 16) / 1e9, 1) == 252.1
    assert pcie_usable_bps(3.0, 4) is None


def test_two_numa_nodes_and_cpus(host):
    host.nic("ens1f0", numa_node=1, local_cpulist="16-31", link=("8.0 GT/s PCIe", 16, "8.0 GT/s PCIe", 16))
    facts = read_host_facts(host.root)
    assert facts.hostname == "dtn1"
    assert facts.cpus_online == list(range(32))
    assert facts.numa_nodes == {0: list(range(16)), 1: list(range(16, 32))}
    nic = facts.nic("ens1f0")
    assert nic.numa_node == 1
    assert nic.local_cpus == list(range(16, 32))
    assert nic.driver == "mlx5_core"
    assert nic.pcie.address == "0000:3b:00.0"


def test_numa_node_minus_one_is_unknown_with_a_note(host):
    host.nic("eth0", numa_node=-1, link=("8.0 GT/s PCIe", 16, "8.0 GT/s PCIe", 16))
    nic = read_host_facts(host.root).nic("eth0")
    assert nic.numa_node is None
    assert any("numa_node: unknown" in n and "-1" in n for n in nic.notes)


def test_gen3_x16_carries_a_100g_nic(host):
    host.nic("ens1f0", speed=100000, link=("8.0 GT/s PCIe", 16, "8.0 GT/s PCIe", 16))
    nic = read_host_facts(host.root).nic("ens1f0")
    assert nic.speed_bps == 100_000_000_000
    assert nic.capacity_bps == 100_000_000_000
    assert nic.limit == "NIC 100G"
    assert nic.warnings == []
    assert nic.pcie.generation == 3


def test_100g_nic_in_gen3_x8_is_capped(host):
    host.nic("ens2", speed=100000, link=("8.0 GT/s PCIe", 8, "8.0 GT/s PCIe", 8))
    nic = read_host_facts(host.root).nic("ens2")
    assert nic.capacity_bps == pcie_usable_bps(8.0, 8)
    assert nic.limit == "PCIe Gen3 x8: 63.0 Gbit/s usable"
    assert len(nic.warnings) == 1
    assert "caps this 100G NIC at 63.0 Gbit/s" in nic.warnings[0]


def test_40g_nic_trained_at_pcie2_x4_warns_twice(host):
    host.nic("ens3", speed=40000, pci="0000:5e:00.0", driver="mlx4_core",
             link=("5.0 GT/s PCIe", 4, "8.0 GT/s PCIe", 8))
    facts = read_host_facts(host.root)
    nic = facts.nic("ens3")
    assert nic.capacity_bps == 16_000_000_000
    assert nic.limit == "PCIe Gen2 x4: 16.0 Gbit/s usable"
    assert any("caps this 40G NIC at 16.0 Gbit/s" in w for w in nic.warnings)
    assert any("trained at Gen2 x4, below the card's Gen3 x8 (63.0 Gbit/s usable)" in w for w in nic.warnings)
    assert all(w.startswith("ens3: ") for w in facts.warnings)


def test_rdma_device_and_its_netdev(host):
    host.nic("ens1f0", pci="0000:3b:00.0").nic("ens1f1", pci="0000:3b:00.1")
    host.rdma("mlx5_0", "ens1f0").rdma("mlx5_1", "ens1f1", pci="0000:3b:00.1", via="device")
    facts = read_host_facts(host.root)
    by_name = {d.name: d for d in facts.rdma}
    assert by_name["mlx5_0"].netdevs == ["ens1f0"]
    assert by_name["mlx5_0"].ports[0].state == "ACTIVE"
    assert by_name["mlx5_0"].ports[0].link_layer == "Ethernet"
    assert by_name["mlx5_1"].netdevs == ["ens1f1"]
    assert facts.nic("ens1f0").rdma_devices == ["mlx5_0"]
    assert facts.nic("ens1f1").rdma_devices == ["mlx5_1"]


def test_virtual_interfaces_skipped_unless_asked(host):
    host.nic("ens1f0").nic("h1-eth0", pci=None, speed=10000)
    host.mkdir("sys/class/net/lo")
    assert [n.name for n in read_host_facts(host.root).nics] == ["ens1f0"]
    nics = {n.name: n for n in read_host_facts(host.root, include_virtual=True).nics}
    assert set(nics) == {"ens1f0", "h1-eth0"}
    veth = nics["h1-eth0"]
    assert veth.virtual and veth.kind == "veth"
    assert veth.speed_bps == 10_000_000_000 and veth.capacity_bps == 10_000_000_000
    assert veth.pcie is None and veth.numa_node is None


def test_garbage_values_become_unknown_with_reasons(host):
    host.nic("bad0", speed="fast", mtu="", numa_node="abc", local_cpulist="zz", driver=None,
             link=("banana", "xq", "Unknown", 0))
    facts = read_host_facts(host.root)
    nic = facts.nic("bad0")
    assert (nic.speed_bps, nic.mtu, nic.numa_node, nic.local_cpus, nic.driver) == (None, None, None, [], None)
    assert nic.capacity_bps is None and nic.limit == "unknown"
    notes = "\n".join(nic.notes)
    for expected in ("speed: unknown", "'fast'", "mtu: unknown", "numa_node: unknown", "local_cpulist: unknown",
                     "current_link_speed: unknown", "'banana'", "current_link_width: unknown", "max_link_width"):
        assert expected in notes


def test_unreadable_and_unknown_values(host):
    host.nic("eth9", speed=-1, operstate="down", link=("Unknown", 16, "8.0 GT/s PCIe", 16))
    (host.root / "sys/class/net/eth9/mtu").unlink()
    host.mkdir("sys/class/net/eth9/mtu")  # a directory where a file should be: reading it fails
    host.write("sys/devices/system/node/node1/cpulist", "1-")
    facts = read_host_facts(host.root)
    nic = facts.nic("eth9")
    assert nic.speed_bps is None and nic.mtu is None
    assert nic.pcie.current_speed_gts is None and nic.pcie.usable_bps is None
    assert nic.capacity_bps is None
    assert any("mtu: unknown: cannot read /sys/class/net/eth9/mtu" in n for n in nic.notes)
    assert facts.numa_nodes[1] == []
    assert any("NUMA node 1 cpulist: unknown" in n for n in facts.notes)


def test_pcie_known_but_nic_speed_unknown(host):
    host.nic("ens4", speed=-1, operstate="down", link=("8.0 GT/s PCIe", 8, "8.0 GT/s PCIe", 8))
    nic = read_host_facts(host.root).nic("ens4")
    assert nic.capacity_bps == pcie_usable_bps(8.0, 8)
    assert nic.limit == "PCIe Gen3 x8: 63.0 Gbit/s usable (NIC speed unknown)"


def test_empty_tree_and_missing_root(tmp_path):
    facts = read_host_facts(tmp_path)
    assert facts.nics == [] and facts.cpus_online == [] and facts.numa_nodes == {}
    with pytest.raises(InvalidArgument, match="not a directory"):
        read_host_facts(tmp_path / "nope")
    with pytest.raises(InvalidArgument, match="no NIC 'eth7'"):
        facts.nic("eth7")


def test_cli_facts_json_and_table(host):
    host.nic("ens3", speed=40000, link=("5.0 GT/s PCIe", 4, "8.0 GT/s PCIe", 8)).rdma("mlx4_0", "ens3")
    done = tsdn("agent", "facts", "--root", str(host.root), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    (nic,) = data["nics"]
    assert nic["capacity_bps"] == 16_000_000_000
    assert nic["pcie"]["generation"] == 2
    assert data["numa_nodes"] == {"0": list(range(16)), "1": list(range(16, 32))}
    assert data["rdma"][0]["netdevs"] == ["ens3"]
    human = tsdn("agent", "facts", "--root", str(host.root))
    assert human.returncode == 0, human.stderr
    assert "PCIe Gen2 x4: 16.0 Gbit/s usable" in human.stdout
    assert "warning: ens3: the PCIe slot caps this 40G NIC" in human.stdout
    assert "mlx4_0" in human.stdout and "2 NUMA nodes" in human.stdout


def test_cli_facts_bad_root(tmp_path):
    done = tsdn("agent", "facts", "--root", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert "not a directory" in done.stderr and done.stdout == ""


def test_cli_facts_on_this_machine():
    done = tsdn("agent", "facts")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("host ")
    assert json.loads(tsdn("agent", "facts", "--json", "--all").stdout)["root"] == "/"
