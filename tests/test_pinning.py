"""CPU/NUMA pinning of transfer processes: cpulists, CPU choice, numactl wrapping, fallback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dtn_agent import pinning
from dtn_agent.engines import iperf3
from dtn_agent.pinning import PinningError, PinningPlan


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8-11", (0, 1, 2, 3, 8, 9, 10, 11)),
        ("0", (0,)),
        ("5,1,3", (1, 3, 5)),
        ("0-7:2", (0, 2, 4, 6)),
        ("", ()),
        ("  2-3\n", (2, 3)),
    ],
)
def test_parse_cpulist(text, cpus):
    assert pinning.parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["0-", "a", "3-1", "1,,2", "0-3:0", "-1"])
def test_parse_cpulist_rejects(text):
    with pytest.raises(PinningError, match="bad cpulist"):
        pinning.parse_cpulist(text)


def test_format_cpulist_round_trip():
    assert pinning.format_cpulist([11, 0, 1, 2, 3, 8, 9, 10, 20]) == "0-3,8-11,20"
    assert pinning.parse_cpulist(pinning.format_cpulist([1, 5, 6])) == (1, 5, 6)


def test_choose_one_cpu_per_stream_on_the_nic_node():
    plan = pinning.choose_cpus(1, "12-23", streams=2, online=range(24))
    assert plan.cpus == (12, 13) and plan.numa_node == 1 and plan.note == ""


def test_more_streams_than_cpus_share_them():
    plan = pinning.choose_cpus(0, "0-1", streams=4, online=range(4))
    assert plan.cpus == (0, 1) and "4 streams share 2 CPUs" in plan.note


def test_unknown_numa_node_is_not_pinned():
    plan = pinning.choose_cpus(-1, "0-3", streams=2, online=range(4))
    assert not plan.pinned and plan.numa_node is None
    wrapped = pinning.wrap_command(["iperf3", "-s"], plan)
    assert wrapped.argv == ["iperf3", "-s"]
    assert wrapped.pinning.method == "none" and wrapped.pinning.note == "NIC numa_node is -1 (unknown): not pinned"


def test_offline_local_cpus_are_skipped_or_an_error():
    plan = pinning.choose_cpus(0, "0-3", streams=2, online=[2, 3, 4])
    assert plan.cpus == (2, 3) and "local CPUs 0-1 are offline" in plan.note
    with pytest.raises(PinningError, match=r"none of the NIC's local CPUs 8-11 \(NUMA node 1\) is online"):
        pinning.choose_cpus(1, "8-11", streams=1, online=range(8))


def test_explicit_cpus_must_be_online():
    assert pinning.choose_cpus(0, "0-3", 1, online=range(8), cpus=[5]).cpus == (5,)
    with pytest.raises(PinningError, match=r"CPUs 9,12 are not online \(online: 0-7\)"):
        pinning.choose_cpus(0, "0-3", 1, online=range(8), cpus=[9, 12])
    with pytest.raises(PinningError, match="streams must be at least 1"):
        pinning.choose_cpus(0, "0-3", 0, online=range(8))


def test_wrap_with_numactl_membind_or_localalloc():
    plan = PinningPlan((20, 21), 1)
    wrapped = pinning.wrap_command(["java", "-jar", "fdt.jar"], plan, numactl="/usr/bin/numactl")
    assert wrapped.argv == ["/usr/bin/numactl", "--physcpubind=20-21", "--membind=1", "java", "-jar", "fdt.jar"]
    assert wrapped.pinning == pinning.Pinning((20, 21), 1, "numactl", "")
    assert wrapped.preexec_fn is None
    local = pinning.wrap_command(["x"], plan, localalloc=True, numactl="/usr/bin/numactl")
    assert local.argv[2] == "--localalloc"


def test_without_numactl_falls_back_to_sched_setaffinity():
    cpu = min(os.sched_getaffinity(0))
    wrapped = pinning.wrap_command(["sh", "-c", "cat /proc/self/status"], PinningPlan((cpu,), 0), numactl=None)
    assert wrapped.argv == ["sh", "-c", "cat /proc/self/status"]
    assert wrapped.pinning.method == "sched_setaffinity"
    assert "memory policy not set" in wrapped.pinning.note
    assert wrapped.preexec_fn is not None
    out = subprocess.run(wrapped.argv, preexec_fn=wrapped.preexec_fn, capture_output=True, text=True, check=True)
    allowed = next(line for line in out.stdout.splitlines() if line.startswith("Cpus_allowed_list:"))
    assert allowed.split(":")[1].strip() == str(cpu)


def test_pin_current_thread_in_a_child_process():
    cpu = min(os.sched_getaffinity(0))
    code = (
        "import os; from dtn_agent.pinning import pin_current_thread, PinningPlan; "
        f"p = pin_current_thread(PinningPlan(({cpu},), 0)); "
        "print(sorted(os.sched_getaffinity(0)), p.method, p.note)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1]
    )
    assert out.stdout.startswith(f"[{cpu}] sched_setaffinity") and "memory policy not set" in out.stdout


def _fake_sysfs(root: Path, iface: str, node: str | None, cpulist: str = "0-3", online: str = "0-7") -> Path:
    (root / "devices/system/cpu").mkdir(parents=True, exist_ok=True)
    (root / "devices/system/cpu/online").write_text(online + "\n")
    net = root / "class/net" / iface
    net.mkdir(parents=True)
    if node is not None:
        (net / "device").mkdir()
        (net / "device/numa_node").write_text(node + "\n")
        (net / "device/local_cpulist").write_text(cpulist + "\n")
    return root


def test_pin_for_nic_from_sysfs(tmp_path):
    sysfs = _fake_sysfs(tmp_path, "ens1f0", "1", cpulist="4-7")
    cmd = pinning.pin_for_nic(["iperf3", "-c", "h"], "ens1f0", streams=2, sysfs=sysfs, numactl="/usr/bin/numactl")
    assert cmd.argv[:3] == ["/usr/bin/numactl", "--physcpubind=4-5", "--membind=1"]
    assert cmd.pinning.cpus == (4, 5) and cmd.pinning.numa_node == 1


def test_pin_for_nic_unknown_node_and_virtual_device(tmp_path):
    sysfs = _fake_sysfs(tmp_path, "ens2", "-1")
    cmd = pinning.pin_for_nic(["x"], "ens2", 1, sysfs=sysfs, numactl="/usr/bin/numactl")
    assert cmd.argv == ["x"] and cmd.pinning.note == "NIC numa_node is -1 (unknown): not pinned"
    _fake_sysfs(tmp_path / "v", "veth0", None)
    virtual = pinning.pin_for_nic(["x"], "veth0", 1, sysfs=tmp_path / "v")
    assert virtual.argv == ["x"] and "virtual device" in virtual.pinning.note
    with pytest.raises(PinningError, match="no network interface 'eth9'"):
        pinning.pin_for_nic(["x"], "eth9", 1, sysfs=tmp_path / "v")


def test_nic_locality_of_this_hosts_loopback():
    loc = pinning.nic_locality("lo")
    assert loc.numa_node == -1 and loc.local_cpus == ()
    assert set(pinning.online_cpus()) >= set(os.sched_getaffinity(0))


@pytest.mark.skipif(shutil.which("numactl") is None or shutil.which("iperf3") is None, reason="needs numactl, iperf3")
def test_numactl_wrapped_iperf3_runs_here():
    cpu = min(os.sched_getaffinity(0))
    plan = pinning.choose_cpus(0, pinning.format_cpulist(pinning.online_cpus()), streams=1, cpus=[cpu])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = pinning.wrap_command(iperf3.server_argv(port, bind="127.0.0.1"), plan, localalloc=True)
    assert server.argv[0].endswith("numactl")
    reports = []
    job = iperf3.Iperf3Job("pinned", "127.0.0.1", port=port, duration=1)
    with iperf3.Iperf3Server(port=port, pinned=server):
        result = iperf3.Iperf3Driver().run(job, reports.append, timeout=20, plan=plan)
    assert result.ok, result.error
    assert result.report.pinning.method == "numactl" and result.report.pinning.cpus == (cpu,)
    assert result.report.pinning.numa_node == 0
    assert all(r.pinning == result.report.pinning for r in reports)
    assert result.report.bytes_total > 0
