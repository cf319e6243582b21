"""Host facts of a data transfer node, read from sysfs and procfs: NICs, PCIe, RDMA, CPUs, NUMA.

Everything is read under a root directory (default "/"), so tests and offline analysis can point
it at a copied or fabricated tree. A malformed or unreadable value never raises: it is recorded
as unknown (None) with a note that says which file and why.

A NIC's usable capacity is the smaller of its line rate and the bandwidth its PCIe link carries
after line encoding (8b/10b for 2.5 and 5 GT/s, 128b/130b for 8, 16 and 32 GT/s, FLIT 242/256
for 64 GT/s). TLP headers, flow control and DLLPs are *not* subtracted: real transfers top out
some 10-15% below the PCIe figure, so a card whose slot is only just above its line rate is still
worth a second look.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from dtn_agent.pinning import parse_cpulist
from sdn_app.core.errors import InvalidArgument

# GT/s per lane -> (generation, fraction of the raw rate left after line encoding)
PCIE_ENCODING: dict[float, tuple[int, float]] = {
    2.5: (1, 8 / 10),
    5.0: (2, 8 / 10),
    8.0: (3, 128 / 130),
    16.0: (4, 128 / 130),
    32.0: (5, 128 / 130),
    64.0: (6, 242 / 256),
}

_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_GTS = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s\b")
_UNKNOWN_SPEEDS = {-1, 0, 4294967295, 65535}  # drivers report "no link" in several ways


@dataclass
class PcieLink:
    """The PCIe link of a NIC's device: what it trained at, what it could do, what it carries."""

    address: str
    current_speed_gts: float | None = None
    max_speed_gts: float | None = None
    current_width: int | None = None
    max_width: int | None = None
    usable_bps: int | None = None  # current link, after line encoding, per direction
    max_usable_bps: int | None = None  # the card's best link, same accounting

    @property
    def generation(self) -> int | None:
        """PCIe generation of the trained link (3 for 8 GT/s), or None when unknown."""
        return _generation(self.current_speed_gts)

    def describe(self, current: bool = True) -> str:
        """`Gen3 x8` for the trained link (or the card's maximum with current=False)."""
        speed = self.current_speed_gts if current else self.max_speed_gts
        width = self.current_width if current else self.max_width
        gen = _generation(speed)
        gen_text = f"Gen{gen}" if gen else (f"{speed:g} GT/s" if speed else "Gen?")
        return f"{gen_text} x{width if width else '?'}"


@dataclass
class Nic:
    """One network interface: link, MTU, NUMA locality, driver, PCIe, and its usable capacity."""

    name: str
    virtual: bool
    kind: str  # "physical", "veth", "bridge", "bond", "tun", "virtual"
    operstate: str = "unknown"
    speed_bps: int | None = None  # line rate; None: unknown (no link, virtual, unreadable)
    mtu: int | None = None
    numa_node: int | None = None  # None: unknown (sysfs says -1, or no file)
    local_cpus: list[int] = field(default_factory=list)
    driver: str | None = None
    pcie: PcieLink | None = None
    rdma_devices: list[str] = field(default_factory=list)
    capacity_bps: int | None = None  # min(line rate, PCIe usable); None when both unknown
    limit: str = "unknown"  # which of the two applies, e.g. "NIC 100G" or "PCIe Gen3 x8: 63.0 Gbit/s usable"
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # values recorded as unknown, and why


@dataclass
class RdmaPort:
    """One port of an RDMA device."""

    port: int
    state: str | None = None  # "ACTIVE", "DOWN", ...
    rate: str | None = None  # as the kernel says it: "100 Gb/sec (4X EDR)"
    link_layer: str | None = None  # "InfiniBand" or "Ethernet" (RoCE)
    netdevs: list[str] = field(default_factory=list)


@dataclass
class RdmaDevice:
    """An RDMA device under /sys/class/infiniband and the network interfaces behind it."""

    name: str
    netdevs: list[str] = field(default_factory=list)
    ports: list[RdmaPort] = field(default_factory=list)


@dataclass
class HostFacts:
    """What a DTN is: its NICs and their capacities, RDMA devices, CPUs and NUMA nodes."""

    root: str
    hostname: str | None = None
    kernel: str | None = None
    cpus_online: list[int] = field(default_factory=list)
    numa_nodes: dict[int, list[int]] = field(default_factory=dict)
    nics: list[Nic] = field(default_factory=list)
    rdma: list[RdmaDevice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def nic(self, name: str) -> Nic:
        """The NIC called `name`; InvalidArgument naming the NICs there are when absent."""
        for nic in self.nics:
            if nic.name == name:
                return nic
        known = ", ".join(n.name for n in self.nics) or "none"
        raise InvalidArgument(f"no NIC {name!r} on this host (NICs: {known})")

    @property
    def warnings(self) -> list[str]:
        """Every NIC warning, prefixed with the NIC's name."""
        return [f"{nic.name}: {w}" for nic in self.nics for w in nic.warnings]

    def to_dict(self) -> dict:
        """Plain data for JSON output."""
        from dataclasses import asdict

        data = asdict(self)
        data["numa_nodes"] = {str(k): v for k, v in self.numa_nodes.items()}
        for nic, out in zip(self.nics, data["nics"], strict=True):
            if nic.pcie is not None:
                out["pcie"]["generation"] = nic.pcie.generation
        data["warnings"] = self.warnings
        return data


# ---------------------------------------------------------------------------------------------
# parsing helpers: pure functions on text


def parse_link_speed(text: str) -> float | None:
    """GT/s per lane of a sysfs link speed ("8.0 GT/s PCIe", "2.5 GT/s"); None for "Unknown".

    ValueError when the text is neither.
    """
    match = _GTS.match(text)
    if match:
        return float(match.group(1))
    if text.strip().lower() in ("unknown", ""):
        return None
    raise ValueError(f"not a PCIe link speed: {text.strip()!r}")


def pcie_usable_bps(speed_gts: float, width: int) -> int | None:
    """Bits per second a PCIe link carries per direction after line encoding (TLP overhead not
    subtracted); None for a speed with no known encoding.

    >>> pcie_usable_bps(8.0, 8)
    63015384615
    """
    entry = PCIE_ENCODING.get(speed_gts)
    if entry is None:
        return None
    return int(speed_gts * 1e9 * entry[1] * width)


def _generation(speed: float | None) -> int | None:
    entry = PCIE_ENCODING.get(speed) if speed is not None else None
    return entry[0] if entry else None


def _gbit(bps: int) -> str:
    return f"{bps / 1e9:.1f} Gbit/s"


def _line_rate(bps: int) -> str:
    gbit = bps / 1e9
    return f"{gbit:g}G" if gbit >= 1 else f"{bps / 1e6:g}M"


# ---------------------------------------------------------------------------------------------
# reading files: every reader returns a value or None, and leaves a note when it had to give up


class _Reader:
    """Reads files under a root, collecting a note for every value it could not use."""

    def __init__(self, root: Path, notes: list[str]):
        self.root = root
        self.notes = notes

    def path(self, relative: str) -> Path:
        return self.root / relative.lstrip("/")

    def show(self, path: Path) -> str:
        """The path as it would be on the host (without the root prefix)."""
        try:
            return "/" + str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def text(self, path: Path, what: str, missing_ok: bool = True) -> str | None:
        try:
            return path.read_text(encoding="utf-8", errors="replace").strip()
        except FileNotFoundError:
            if not missing_ok:
                self.notes.append(f"{what}: unknown: {self.show(path)} does not exist")
            return None
        except OSError as exc:
            self.notes.append(f"{what}: unknown: cannot read {self.show(path)}: {exc.strerror or exc}")
            return None

    def integer(self, path: Path, what: str, missing_ok: bool = True) -> int | None:
        raw = self.text(path, what, missing_ok)
        if raw is None:
            return None
        try:
            return int(raw, 0) if raw.lower().startswith("0x") else int(raw)
        except ValueError:
            self.notes.append(f"{what}: unknown: {self.show(path)} holds {raw[:40]!r}, not an integer")
            return None

    def cpulist(self, path: Path, what: str) -> list[int]:
        raw = self.text(path, what)
        if raw is None:
            return []
        try:
            return list(parse_cpulist(raw))
        except ValueError:
            self.notes.append(f"{what}: unknown: {self.show(path)} holds {raw[:40]!r}, not a cpulist")
            return []


def read_host_facts(root: str | os.PathLike = "/", include_virtual: bool = False) -> HostFacts:
    """Read the host facts under `root`: NICs with a device (all interfaces but lo when
    `include_virtual`), their PCIe links and capacities, RDMA devices, CPUs and NUMA nodes.

    Raises InvalidArgument only when `root` is not a directory.
    """
    base = Path(root)
    if not base.is_dir():
        raise InvalidArgument(f"--root {root}: not a directory")
    facts = HostFacts(root=str(root))
    reader = _Reader(base, facts.notes)
    facts.hostname = reader.text(reader.path("proc/sys/kernel/hostname"), "hostname")
    facts.kernel = reader.text(reader.path("proc/sys/kernel/osrelease"), "kernel")
    facts.cpus_online = reader.cpulist(reader.path("sys/devices/system/cpu/online"), "cpus online")
    facts.numa_nodes = _read_numa_nodes(reader)
    facts.rdma = _read_rdma(reader)
    net = reader.path("sys/class/net")
    names = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
    if not net.is_dir():
        facts.notes.append("NICs: unknown: /sys/class/net does not exist")
    for name in names:
        if name == "lo":
            continue
        nic = _read_nic(base, net / name, name)
        if nic.virtual and not include_virtual:
            continue
        nic.rdma_devices = sorted(d.name for d in facts.rdma if name in d.netdevs)
        facts.nics.append(nic)
    return facts


def _read_numa_nodes(reader: _Reader) -> dict[int, list[int]]:
    nodes: dict[int, list[int]] = {}
    directory = reader.path("sys/devices/system/node")
    if not directory.is_dir():
        return nodes
    for entry in sorted(directory.iterdir()):
        match = re.fullmatch(r"node(\d+)", entry.name)
        if match and entry.is_dir():
            nodes[int(match.group(1))] = reader.cpulist(entry / "cpulist", f"NUMA node {match.group(1)} cpulist")
    return dict(sorted(nodes.items()))


def _read_rdma(reader: _Reader) -> list[RdmaDevice]:
    devices: list[RdmaDevice] = []
    directory = reader.path("sys/class/infiniband")
    if not directory.is_dir():
        return devices
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        device = RdmaDevice(name=entry.name)
        netdevs: set[str] = set()
        ports_dir = entry / "ports"
        if ports_dir.is_dir():
            for port_dir in sorted(ports_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
                if not port_dir.name.isdigit():
                    continue
                what = f"RDMA {entry.name} port {port_dir.name}"
                port = RdmaPort(port=int(port_dir.name))
                state = reader.text(port_dir / "state", f"{what} state")
                port.state = state.split(":", 1)[-1].strip() if state else None
                port.rate = reader.text(port_dir / "rate", f"{what} rate")
                port.link_layer = reader.text(port_dir / "link_layer", f"{what} link_layer")
                ndevs = port_dir / "gid_attrs" / "ndevs"
                if ndevs.is_dir():
                    for gid in ndevs.iterdir():
                        # unused GID entries read as EINVAL; that is not worth a note
                        try:
                            name = gid.read_text(encoding="utf-8", errors="replace").strip()
                        except OSError:
                            continue
                        if name:
                            port.netdevs.append(name)
                port.netdevs = sorted(set(port.netdevs))
                netdevs.update(port.netdevs)
                device.ports.append(port)
        net_dir = entry / "device" / "net"
        if net_dir.is_dir():
            netdevs.update(p.name for p in net_dir.iterdir())
        device.netdevs = sorted(netdevs)
        devices.append(device)
    return devices


def _virtual_kind(nic_dir: Path, reader: _Reader) -> str:
    if (nic_dir / "bridge").is_dir():
        return "bridge"
    if (nic_dir / "bonding").is_dir():
        return "bond"
    if (nic_dir / "tun_flags").exists():
        return "tun"
    ifindex = reader.integer(nic_dir / "ifindex", "ifindex")
    iflink = reader.integer(nic_dir / "iflink", "iflink")
    if ifindex is not None and iflink is not None and ifindex != iflink:
        return "veth"  # a veth (Mininet host link) or another interface stacked on a peer
    return "virtual"


def _pci_dir(device: Path) -> Path | None:
    """The PCI function directory of a NIC's device link (the device itself, or a parent for virtio)."""
    try:
        resolved = device.resolve(strict=True)
    except OSError:
        return None
    for candidate in (resolved, *resolved.parents[:3]):
        if _PCI_ADDRESS.match(candidate.name):
            return candidate
    return None


def _read_nic(root: Path, nic_dir: Path, name: str) -> Nic:
    notes: list[str] = []
    reader = _Reader(root, notes)
    device = nic_dir / "device"
    physical = device.exists()
    nic = Nic(name=name, virtual=not physical, kind="physical" if physical else _virtual_kind(nic_dir, reader))
    nic.notes = notes
    nic.operstate = reader.text(nic_dir / "operstate", "operstate") or "unknown"
    nic.mtu = reader.integer(nic_dir / "mtu", "mtu", missing_ok=False)
    if nic.mtu is not None and nic.mtu <= 0:
        notes.append(f"mtu: unknown: sysfs says {nic.mtu}")
        nic.mtu = None
    speed = _read_speed(reader, nic_dir / "speed", physical, nic.operstate)
    nic.speed_bps = speed * 1_000_000 if speed is not None else None
    if physical:
        _read_device(reader, nic, device)
    _decide_capacity(nic)
    return nic


def _read_speed(reader: _Reader, path: Path, physical: bool, operstate: str) -> int | None:
    """Mbit/s, or None; virtual interfaces and down links get no note (no speed is expected)."""
    try:
        raw = path.read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        if physical:
            reader.notes.append(f"speed: unknown: {reader.show(path)} does not exist")
        return None
    except OSError as exc:
        if physical and operstate == "up":
            reader.notes.append(f"speed: unknown: cannot read {reader.show(path)}: {exc.strerror or exc}")
        elif physical:
            reader.notes.append(f"speed: unknown: link is {operstate}")
        return None
    try:
        value = int(raw)
    except ValueError:
        reader.notes.append(f"speed: unknown: {reader.show(path)} holds {raw[:40]!r}, not Mbit/s")
        return None
    if value in _UNKNOWN_SPEEDS or value < 0:
        if physical:
            reader.notes.append(f"speed: unknown: the driver reports {value} (no link, or a virtual NIC)")
        return None
    return value


def _read_device(reader: _Reader, nic: Nic, device: Path) -> None:
    pci = _pci_dir(device)
    numa = reader.integer(device / "numa_node", "numa_node")
    if numa is None and pci is not None:
        numa = reader.integer(pci / "numa_node", "numa_node")
    nic.numa_node = numa if numa is not None and numa >= 0 else None
    if numa is not None and numa < 0:
        reader.notes.append("numa_node: unknown: sysfs says -1 (no NUMA locality reported)")
    cpus_file = device / "local_cpulist"
    if not cpus_file.exists() and pci is not None:
        cpus_file = pci / "local_cpulist"
    nic.local_cpus = reader.cpulist(cpus_file, "local_cpulist")
    driver = device / "driver"
    if not driver.exists() and pci is not None:
        driver = pci / "driver"
    try:
        nic.driver = driver.resolve(strict=True).name
    except OSError:
        nic.driver = None
    if pci is not None:
        nic.pcie = _read_pcie(reader, pci)


def _read_pcie(reader: _Reader, pci: Path) -> PcieLink | None:
    link = PcieLink(address=pci.name)
    files_present = False
    for attr, what in (("current_speed_gts", "current_link_speed"), ("max_speed_gts", "max_link_speed")):
        raw = reader.text(pci / what, what)
        if raw is None:
            continue
        files_present = True
        try:
            setattr(link, attr, parse_link_speed(raw))
        except ValueError as exc:
            reader.notes.append(f"{what}: unknown: {exc}")
    for attr, what in (("current_width", "current_link_width"), ("max_width", "max_link_width")):
        raw = reader.text(pci / what, what)
        if raw is None:
            continue
        files_present = True
        try:
            value = int(raw.lstrip("xX"))
        except ValueError:
            reader.notes.append(f"{what}: unknown: {reader.show(pci / what)} holds {raw[:40]!r}, not a lane count")
            continue
        if value > 0:
            setattr(link, attr, value)
        else:
            reader.notes.append(f"{what}: unknown: sysfs says {value}")
    if not files_present:
        return None  # a PCI (not PCIe) device, as virtio NICs in a VM
    for speed, width, attr in ((link.current_speed_gts, link.current_width, "usable_bps"),
                               (link.max_speed_gts, link.max_width, "max_usable_bps")):
        if speed is not None and width is not None:
            usable = pcie_usable_bps(speed, width)
            if usable is None:
                reader.notes.append(f"PCIe: no known line encoding for {speed:g} GT/s: usable bandwidth unknown")
            setattr(link, attr, usable)
    return link


def _decide_capacity(nic: Nic) -> None:
    """Set capacity_bps and limit, and warn when the slot caps the NIC or the link trained low."""
    pcie = nic.pcie
    usable = pcie.usable_bps if pcie else None
    line = nic.speed_bps
    if pcie is not None and usable is not None:
        pcie_text = f"PCIe {pcie.describe()}: {_gbit(usable)} usable"
        if line is not None and usable < line:
            nic.warnings.append(f"the PCIe slot caps this {_line_rate(line)} NIC at {_gbit(usable)} "
                                f"({pcie.describe()}; line rate {_gbit(line)})")
        trained_low = (
            (pcie.current_speed_gts is not None and pcie.max_speed_gts is not None
             and pcie.current_speed_gts < pcie.max_speed_gts)
            or (pcie.current_width is not None and pcie.max_width is not None
                and pcie.current_width < pcie.max_width)
        )
        if trained_low:
            best = f" ({_gbit(pcie.max_usable_bps)} usable)" if pcie.max_usable_bps else ""
            nic.warnings.append(f"PCIe link trained at {pcie.describe()}, below the card's "
                                f"{pcie.describe(current=False)}{best}: check the slot, riser and BIOS")
    else:
        pcie_text = ""
    if line is None and usable is None:
        nic.capacity_bps = None
        nic.limit = "unknown"
    elif usable is None or (line is not None and line <= usable):
        nic.capacity_bps = line
        nic.limit = f"NIC {_line_rate(line)}" if line else "unknown"
    else:
        nic.capacity_bps = usable
        nic.limit = pcie_text + ("" if line is not None else " (NIC speed unknown)")
