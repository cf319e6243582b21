"""Preflight checks of a DTN's tuning, after ESnet's fasterdata host-tuning advice.

Each check reads sysctls under root/proc/sys and sysfs under root/sys and says pass, warn, fail
or unknown, with the value found and the value recommended. Buffer sizes scale with the NIC's
speed (see `recommended_buffers`). Nothing here changes the host.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dtn_agent.host import HostFacts, Nic, read_host_facts
from dtn_agent.pinning import format_cpulist

PASS, WARN, FAIL, UNKNOWN = "pass", "warn", "fail", "unknown"

JUMBO_MTU = 9000
INT_MAX = 2**31 - 1  # the kernel's ceiling for net.core.{r,w}mem_max
MIB = 2**20
BASE_SPEED_BPS = 10_000_000_000  # fasterdata's 10G anchor: tcp max 32 MiB, core max 64 MiB
BASE_TCP_MAX = 32 * MIB
TOP_TCP_MAX = 1024 * MIB  # fasterdata's 100G anchor (paths up to 200 ms): tcp max 1 GiB, core max 2 GiB
DESIGN_RTT_S = 0.1  # the round-trip time used to say what a too-small buffer costs
GOOD_CONGESTION_CONTROL = ("bbr", "htcp")


@dataclass
class Check:
    """One preflight check: its verdict, the value found and the value recommended."""

    name: str
    status: str  # pass, warn, fail, unknown
    found: str
    recommended: str
    detail: str = ""
    subject: str = "host"  # "host", or the NIC the check is about


@dataclass
class PreflightReport:
    """Every check, and the NIC speed the buffer recommendations were scaled to."""

    checks: list[Check] = field(default_factory=list)
    basis_nic: str | None = None
    basis_speed_bps: int = BASE_SPEED_BPS
    basis_note: str = ""

    @property
    def failed(self) -> bool:
        """True when any check failed."""
        return any(c.status == FAIL for c in self.checks)

    def counts(self) -> dict[str, int]:
        """How many checks have each status."""
        return {s: sum(1 for c in self.checks if c.status == s) for s in (PASS, WARN, FAIL, UNKNOWN)}

    def to_dict(self) -> dict:
        """Plain data for JSON output."""
        return {"ok": not self.failed, "counts": self.counts(), "basis_nic": self.basis_nic,
                "basis_speed_bps": self.basis_speed_bps, "basis_note": self.basis_note,
                "checks": [asdict(c) for c in self.checks]}


def recommended_buffers(speed_bps: int) -> tuple[int, int]:
    """(tcp_rmem/tcp_wmem max, net.core.rmem_max/wmem_max) in bytes for a NIC of `speed_bps`.

    Anchored on fasterdata's two published points (10G: 32 MiB and 64 MiB; 100G: 1 GiB and
    2 GiB, the latter the kernel's INT_MAX): the TCP max grows as speed^1.5 between them (faster
    hosts are tuned for longer paths as well as higher rates), rounded up to a power of two and
    kept within [32 MiB, 1 GiB]; the core max is twice the TCP max, at most INT_MAX.

    >>> [b // 2**20 for b in recommended_buffers(40_000_000_000)]
    [256, 512]
    """
    scale = max(speed_bps, 1) / BASE_SPEED_BPS
    raw = BASE_TCP_MAX * scale**1.5
    tcp = 2 ** math.ceil(math.log2(raw)) if raw > BASE_TCP_MAX else BASE_TCP_MAX
    tcp = min(max(tcp, BASE_TCP_MAX), TOP_TCP_MAX)
    return tcp, min(2 * tcp, INT_MAX)


def _size(n: int) -> str:
    if n >= 2**30 - 1 and n % 2**30 in (0, 2**30 - 1):
        return f"{(n + 1) // 2**30 if n % 2**30 else n // 2**30} GiB ({n})"
    if n >= MIB and n % MIB == 0:
        return f"{n // MIB} MiB ({n})"
    return str(n)


def _rate_at(buffer_bytes: int) -> str:
    return f"{buffer_bytes * 8 / DESIGN_RTT_S / 1e9:.2f} Gbit/s"


class _Sysctl:
    def __init__(self, root: Path):
        self.root = root

    def read(self, key: str) -> tuple[str | None, str]:
        """(value, why unknown)."""
        path = self.root / "proc" / "sys" / key.replace(".", "/")
        try:
            return path.read_text(encoding="utf-8", errors="replace").strip(), ""
        except FileNotFoundError:
            return None, f"/proc/sys/{key.replace('.', '/')} does not exist"
        except OSError as exc:
            return None, f"cannot read /proc/sys/{key.replace('.', '/')}: {exc.strerror or exc}"


def run_preflight(root: str | os.PathLike = "/", nic: str | None = None, facts: HostFacts | None = None
                  ) -> PreflightReport:
    """Run every check on the host under `root`, for NIC `nic` (default: every physical NIC, and
    buffers scaled to the fastest). InvalidArgument when `nic` is not there.
    """
    facts = facts if facts is not None else read_host_facts(root, include_virtual=nic is not None)
    nics = [facts.nic(nic)] if nic is not None else [n for n in facts.nics if not n.virtual]
    report = PreflightReport()
    _choose_basis(report, nics)
    sysctl = _Sysctl(Path(root))
    for n in nics:
        report.checks.append(check_mtu(n))
    report.checks.extend(check_buffers(sysctl, report.basis_speed_bps))
    report.checks.append(check_qdisc(sysctl))
    report.checks.append(check_congestion_control(sysctl))
    report.checks.append(check_mtu_probing(sysctl))
    report.checks.append(check_irqbalance(Path(root)))
    report.checks.append(check_governor(Path(root)))
    for n in nics:
        report.checks.append(check_numa(n, facts))
        report.checks.append(check_pcie(n))
    if not nics:
        report.checks.append(Check("nic", UNKNOWN, "no physical NIC", "a NIC with a PCI device",
                                   "no NIC-level checks ran; name a virtual NIC with --nic to check it"))
    return report


def _choose_basis(report: PreflightReport, nics: list[Nic]) -> None:
    known = [n for n in nics if n.speed_bps]
    if known:
        fastest = max(known, key=lambda n: n.speed_bps or 0)
        report.basis_nic = fastest.name
        report.basis_speed_bps = fastest.speed_bps or BASE_SPEED_BPS
        report.basis_note = f"buffers scaled to {fastest.name} at {fastest.speed_bps / 1e9:g} Gbit/s"
    else:
        report.basis_note = "no NIC speed known: buffers scaled to a 10 Gbit/s NIC"


def check_mtu(nic: Nic) -> Check:
    """MTU 9000 or more passes (jumbo frames for WAN DTNs); less warns."""
    recommended = f">= {JUMBO_MTU}"
    if nic.mtu is None:
        return Check("mtu", UNKNOWN, "unknown", recommended, "; ".join(nic.notes) or "MTU unreadable", nic.name)
    if nic.mtu >= JUMBO_MTU:
        return Check("mtu", PASS, str(nic.mtu), recommended, subject=nic.name)
    return Check("mtu", WARN, str(nic.mtu), recommended,
                 "WAN DTNs want jumbo frames end to end (host, switches, the path); check the path MTU too",
                 nic.name)


def _buffer_verdict(name: str, value: int, recommended: int, detail_what: str) -> Check:
    if value >= recommended:
        return Check(name, PASS, _size(value), f">= {_size(recommended)}")
    status = FAIL if value * 8 < recommended else WARN
    detail = (f"{detail_what} caps one stream at about {_rate_at(value)} on a {DESIGN_RTT_S * 1000:g} ms path "
              f"(recommended allows {_rate_at(recommended)})")
    return Check(name, status, _size(value), f">= {_size(recommended)}", detail)


def check_buffers(sysctl: _Sysctl, speed_bps: int) -> list[Check]:
    """net.core.rmem_max/wmem_max and the max of net.ipv4.tcp_rmem/tcp_wmem against
    `recommended_buffers`: below it warns, below an eighth of it fails."""
    tcp_rec, core_rec = recommended_buffers(speed_bps)
    checks = []
    for key, rec, what in (("net.core.rmem_max", core_rec, "the largest receive buffer an application may set"),
                           ("net.core.wmem_max", core_rec, "the largest send buffer an application may set"),
                           ("net.ipv4.tcp_rmem", tcp_rec, "TCP receive autotuning's maximum"),
                           ("net.ipv4.tcp_wmem", tcp_rec, "TCP send autotuning's maximum")):
        raw, why = sysctl.read(key)
        if raw is None:
            checks.append(Check(key, UNKNOWN, "unknown", f">= {_size(rec)}", why))
            continue
        fields = raw.split()
        try:
            value = int(fields[-1]) if fields else None
        except ValueError:
            value = None
        if value is None or (key.startswith("net.ipv4") and len(fields) != 3):
            checks.append(Check(key, UNKNOWN, repr(raw[:40]), f">= {_size(rec)}", "not the expected number(s)"))
            continue
        name = key if key.startswith("net.core") else f"{key} max"
        checks.append(_buffer_verdict(name, value, rec, what))
    return checks


def check_qdisc(sysctl: _Sysctl) -> Check:
    """net.core.default_qdisc: fq passes (pacing); anything else warns."""
    raw, why = sysctl.read("net.core.default_qdisc")
    if raw is None:
        return Check("net.core.default_qdisc", UNKNOWN, "unknown", "fq", why)
    if raw == "fq":
        return Check("net.core.default_qdisc", PASS, raw, "fq")
    return Check("net.core.default_qdisc", WARN, raw, "fq",
                 "fq paces each flow, which keeps fast senders from overrunning slower hops and switch buffers")


def check_congestion_control(sysctl: _Sysctl) -> Check:
    """tcp_congestion_control: bbr or htcp pass, cubic warns, reno fails, others warn."""
    key = "net.ipv4.tcp_congestion_control"
    recommended = " or ".join(GOOD_CONGESTION_CONTROL)
    raw, why = sysctl.read(key)
    if raw is None:
        return Check(key, UNKNOWN, "unknown", recommended, why)
    if raw in GOOD_CONGESTION_CONTROL:
        return Check(key, PASS, raw, recommended)
    available, _ = sysctl.read("net.ipv4.tcp_available_congestion_control")
    usable = [c for c in GOOD_CONGESTION_CONTROL if available and c in available.split()]
    hint = (f"available here: {', '.join(usable)}" if usable
            else f"load one first (modprobe tcp_{GOOD_CONGESTION_CONTROL[0]})")
    if raw == "reno":
        return Check(key, FAIL, raw, recommended,
                     f"reno halves the window on each loss and regrows it one segment per RTT: hours to "
                     f"recover at 100G over a WAN; {hint}")
    return Check(key, WARN, raw, recommended,
                 f"{raw} recovers slowly from loss on long fat paths; {hint}")


def check_mtu_probing(sysctl: _Sysctl) -> Check:
    """tcp_mtu_probing 1 or 2 passes (survives PMTU black holes with jumbo frames); 0 warns."""
    key = "net.ipv4.tcp_mtu_probing"
    raw, why = sysctl.read(key)
    if raw is None:
        return Check(key, UNKNOWN, "unknown", "1", why)
    if raw in ("1", "2"):
        return Check(key, PASS, raw, "1")
    if raw == "0":
        return Check(key, WARN, raw, "1",
                     "with jumbo frames, a hop with a smaller MTU that drops ICMP stalls connections unless TCP probes")
    return Check(key, UNKNOWN, repr(raw[:40]), "1", "not 0, 1 or 2")


def check_irqbalance(root: Path) -> Check:
    """irqbalance running warns: for 40G and up, pin NIC IRQs to the NIC's NUMA node instead."""
    proc = root / "proc"
    recommended = "not running; NIC IRQs pinned to the NIC's NUMA node"
    try:
        entries = [p for p in proc.iterdir() if p.name.isdigit()]
    except OSError as exc:
        return Check("irqbalance", UNKNOWN, "unknown", recommended, f"cannot list /proc: {exc.strerror or exc}")
    if not entries:
        return Check("irqbalance", UNKNOWN, "unknown", recommended, "no processes visible under /proc")
    for entry in entries:
        try:
            comm = (entry / "comm").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue  # the process ended while we looked
        if comm == "irqbalance":
            return Check("irqbalance", WARN, f"running (pid {entry.name})", recommended,
                         "irqbalance moves NIC interrupts across sockets; stop it and pin IRQs "
                         "(e.g. the NIC vendor's set_irq_affinity script) to the NIC's local CPUs")
    return Check("irqbalance", PASS, "not running", recommended)


def check_governor(root: Path) -> Check:
    """Every CPU's scaling_governor 'performance' passes; others warn; no cpufreq is unknown."""
    cpu_dir = root / "sys" / "devices" / "system" / "cpu"
    governors: dict[str, list[int]] = {}
    try:
        cpus = [p for p in cpu_dir.iterdir() if p.name.startswith("cpu") and p.name[3:].isdigit()]
    except OSError:
        cpus = []
    for cpu in cpus:
        try:
            governor = (cpu / "cpufreq" / "scaling_governor").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        governors.setdefault(governor or "?", []).append(int(cpu.name[3:]))
    if not governors:
        return Check("cpu governor", UNKNOWN, "no cpufreq", "performance",
                     "no scaling_governor under /sys/devices/system/cpu (a VM, or cpufreq not loaded)")
    found = ", ".join(f"{g} ({len(c)} CPUs)" for g, c in sorted(governors.items()))
    if set(governors) == {"performance"}:
        return Check("cpu governor", PASS, found, "performance")
    return Check("cpu governor", WARN, found, "performance",
                 "power-saving governors lower the clock between bursts; one TCP stream at 100G needs a "
                 "core at full speed")


def check_numa(nic: Nic, facts: HostFacts) -> Check:
    """The NIC's NUMA node known passes; unknown warns on a multi-node host, passes on one node."""
    nodes = len(facts.numa_nodes)
    if nic.numa_node is not None:
        cpus = f", local CPUs {format_cpulist(nic.local_cpus)}" if nic.local_cpus else ""
        return Check("nic numa node", PASS, f"node {nic.numa_node}{cpus}", "known", subject=nic.name)
    if nic.virtual:
        return Check("nic numa node", UNKNOWN, "unknown", "known", "a virtual NIC has no NUMA locality", nic.name)
    if nodes <= 1:
        return Check("nic numa node", PASS, "unknown", "known",
                     f"{'one NUMA node' if nodes == 1 else 'no NUMA nodes listed'}: nothing to pin to", nic.name)
    return Check("nic numa node", WARN, "unknown", "known",
                 f"{nodes} NUMA nodes but the NIC reports none: transfers cannot be pinned to its socket "
                 "(check the BIOS's ACPI SRAT / NUMA settings)", nic.name)


def check_pcie(nic: Nic) -> Check:
    """The PCIe link carries the NIC's line rate, trained at its maximum: pass; otherwise warn."""
    if nic.pcie is None or nic.pcie.usable_bps is None:
        return Check("nic pcie", UNKNOWN, "unknown", "slot >= line rate",
                     "no PCIe link attributes (a VM's virtio NIC, or a bus without them)", nic.name)
    found = f"{nic.pcie.describe()} ({nic.pcie.usable_bps / 1e9:.1f} Gbit/s)"
    if nic.warnings:
        return Check("nic pcie", WARN, found, "slot >= line rate", "; ".join(nic.warnings), nic.name)
    return Check("nic pcie", PASS, found, "slot >= line rate", subject=nic.name)
