"""Preflight tuning checks on fake hosts: pass, warn, fail and unknown, and the CLI's exit codes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dtn_agent.preflight import INT_MAX, recommended_buffers, run_preflight
from sdn_app.core.errors import InvalidArgument
from tests.fake_sysfs import TUNED_100G_SYSCTLS, FakeHost
from tsdn.cli import main

TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"
MIB = 2**20
GEN3_X16 = ("8.0 GT/s PCIe", 16, "8.0 GT/s PCIe", 16)


def tsdn(*args):
    return subprocess.run([TSDN, *args], capture_output=True, text=True, timeout=60)


def by_name(report, subject=None):
    return {c.name: c for c in report.checks if subject is None or c.subject in (subject, "host")}


@pytest.fixture
def tuned(tmp_path) -> FakeHost:
    """A 100G DTN tuned as fasterdata asks: every check passes."""
    host = FakeHost(tmp_path / "tuned").cpus("0-3", {0: "0-1", 1: "2-3"}).governors(*["performance"] * 4)
    host.nic("ens1f0", speed=100000, mtu=9000, link=GEN3_X16).sysctls(TUNED_100G_SYSCTLS)
    host.process(1, "systemd").process(812, "sshd")
    return host


@pytest.fixture
def untuned(tmp_path) -> FakeHost:
    """A 100G DTN fresh from the installer."""
    host = FakeHost(tmp_path / "untuned").cpus("0-3", {0: "0-1", 1: "2-3"}).governors(*["powersave"] * 4)
    host.nic("ens1f0", speed=100000, mtu=1500, numa_node=-1, link=GEN3_X16).sysctls()
    return host.process(1, "systemd").process(644, "irqbalance")


def test_recommended_buffers_scale_with_speed():
    assert recommended_buffers(10_000_000_000) == (32 * MIB, 64 * MIB)  # fasterdata's 10G values
    assert recommended_buffers(1_000_000_000) == (32 * MIB, 64 * MIB)  # never below the 10G values
    assert recommended_buffers(25_000_000_000) == (128 * MIB, 256 * MIB)
    assert recommended_buffers(40_000_000_000) == (256 * MIB, 512 * MIB)
    assert recommended_buffers(100_000_000_000) == (1024 * MIB, INT_MAX)  # fasterdata's 100G values
    assert recommended_buffers(400_000_000_000) == (1024 * MIB, INT_MAX)


def test_tuned_100g_host_passes_everything(tuned):
    report = run_preflight(tuned.root)
    assert {c.status for c in report.checks} == {"pass"}, [c for c in report.checks if c.status != "pass"]
    assert not report.failed
    assert report.basis_nic == "ens1f0" and report.basis_speed_bps == 100_000_000_000
    assert by_name(report)["net.core.rmem_max"].found == f"2 GiB ({INT_MAX})"


def test_untuned_100g_host_fails_and_warns(untuned):
    report = run_preflight(untuned.root)
    checks = by_name(report)
    assert report.failed
    assert checks["mtu"].status == "warn" and checks["mtu"].found == "1500"
    for key in ("net.core.rmem_max", "net.core.wmem_max", "net.ipv4.tcp_rmem max", "net.ipv4.tcp_wmem max"):
        assert checks[key].status == "fail", key  # below an eighth of what a 100G host needs
    assert "caps one stream at" in checks["net.ipv4.tcp_rmem max"].detail
    assert checks["net.core.default_qdisc"].status == "warn"
    assert checks["net.ipv4.tcp_congestion_control"].status == "warn"
    assert "modprobe tcp_bbr" in checks["net.ipv4.tcp_congestion_control"].detail
    assert checks["net.ipv4.tcp_mtu_probing"].status == "warn"
    assert checks["irqbalance"].status == "warn" and "644" in checks["irqbalance"].found
    assert checks["cpu governor"].status == "warn" and "powersave (4 CPUs)" in checks["cpu governor"].found
    assert checks["nic numa node"].status == "warn"  # two NUMA nodes, NIC says -1
    assert report.counts()["fail"] == 4


def test_buffers_just_below_recommended_warn(tmp_path):
    host = FakeHost(tmp_path).cpus("0-1", {0: "0-1"}).nic("eth0", speed=10000, link=GEN3_X16)
    host.sysctls(TUNED_100G_SYSCTLS, **{"net.ipv4.tcp_rmem": "4096 87380 16777216",
                                        "net.core.rmem_max": "67108864"})
    checks = by_name(run_preflight(host.root))
    assert checks["net.ipv4.tcp_rmem max"].status == "warn"  # 16 MiB of 32 MiB recommended for 10G
    assert checks["net.core.rmem_max"].status == "pass"  # fasterdata's 10G value on a 10G host
    assert checks["net.ipv4.tcp_wmem max"].status == "pass"


def test_congestion_control_verdicts(tuned):
    tuned.sysctls({}, **{"net.ipv4.tcp_congestion_control": "htcp"})
    assert by_name(run_preflight(tuned.root))["net.ipv4.tcp_congestion_control"].status == "pass"
    tuned.sysctls({}, **{"net.ipv4.tcp_congestion_control": "cubic"})
    cubic = by_name(run_preflight(tuned.root))["net.ipv4.tcp_congestion_control"]
    assert cubic.status == "warn" and "available here: bbr, htcp" in cubic.detail
    tuned.sysctls({}, **{"net.ipv4.tcp_congestion_control": "reno"})
    report = run_preflight(tuned.root)
    assert by_name(report)["net.ipv4.tcp_congestion_control"].status == "fail"
    assert report.failed


def test_missing_and_garbage_sysctls_are_unknown(tuned):
    (tuned.root / "proc/sys/net/core/default_qdisc").unlink()
    tuned.sysctls({}, **{"net.ipv4.tcp_wmem": "lots", "net.ipv4.tcp_mtu_probing": "7"})
    checks = by_name(run_preflight(tuned.root))
    assert checks["net.core.default_qdisc"].status == "unknown"
    assert "does not exist" in checks["net.core.default_qdisc"].detail
    assert checks["net.ipv4.tcp_wmem"].status == "unknown"
    assert checks["net.ipv4.tcp_mtu_probing"].status == "unknown"


def test_no_cpufreq_is_unknown_not_fail(tuned):
    shutil.rmtree(tuned.root / "sys/devices/system/cpu/cpu0")
    for cpu in (1, 2, 3):
        shutil.rmtree(tuned.root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq")
    report = run_preflight(tuned.root)
    assert by_name(report)["cpu governor"].status == "unknown"
    assert not report.failed


def test_numa_unknown_on_a_single_node_host_passes(tmp_path):
    host = FakeHost(tmp_path).cpus("0-1", {0: "0-1"}).sysctls(TUNED_100G_SYSCTLS)
    host.nic("eth0", speed=100000, numa_node=-1, link=GEN3_X16)
    assert by_name(run_preflight(host.root))["nic numa node"].status == "pass"


def test_pcie_cap_warns_per_nic(tuned):
    tuned.nic("ens2", speed=100000, pci="0000:af:00.0", numa_node=1, link=("8.0 GT/s PCIe", 8, "8.0 GT/s PCIe", 8))
    report = run_preflight(tuned.root)
    assert by_name(report, "ens2")["nic pcie"].status == "warn"
    assert by_name(report, "ens1f0")["nic pcie"].status == "pass"
    only = run_preflight(tuned.root, nic="ens2")
    assert {c.subject for c in only.checks} == {"host", "ens2"}


def test_unknown_nic_is_bad_input(tuned):
    with pytest.raises(InvalidArgument, match=r"no NIC 'eth7'.*ens1f0"):
        run_preflight(tuned.root, nic="eth7")


def test_cli_exit_codes(tuned, untuned, capsys):
    assert main(["agent", "preflight", "--root", str(tuned.root)]) == 0
    out = capsys.readouterr().out
    assert "CHECK" in out and "PASS" in out and "buffers scaled to ens1f0 at 100 Gbit/s" in out
    assert main(["agent", "preflight", "--root", str(untuned.root)]) == 1
    out = capsys.readouterr().out
    assert "fail: net.core.rmem_max:" in out and "4 fail" in out
    assert main(["agent", "preflight", "--root", str(tuned.root), "--nic", "eth7"]) == 2
    assert "no NIC 'eth7'" in capsys.readouterr().err
    assert main(["agent", "preflight", "--root", str(tuned.root / "nowhere")]) == 2


def test_cli_json_subprocess(untuned):
    done = tsdn("agent", "preflight", "--json", "--root", str(untuned.root), "--nic", "ens1f0")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["ok"] is False and data["counts"]["fail"] == 4
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses["mtu"] == "warn" and statuses["net.core.wmem_max"] == "fail"


def test_cli_preflight_on_this_machine():
    done = tsdn("agent", "preflight")
    assert done.returncode in (0, 1), done.stderr
    assert "CHECK" in done.stdout and "Traceback" not in done.stderr
    data = json.loads(tsdn("agent", "preflight", "--json").stdout)
    assert data["checks"]
