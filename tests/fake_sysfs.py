"""Builds fake /sys and /proc trees in a temporary directory, shaped like a real host's.

NICs with a device get a relative `device` symlink into sys/devices/pci0000:00/<address>, as the
kernel lays it out, so the reader resolves PCI addresses and drivers the same way on both.
"""

from __future__ import annotations

import os
from pathlib import Path

# sysctl defaults of a fresh Linux install (kernel 6.x), as /proc/sys shows them
DEFAULT_SYSCTLS = {
    "net/core/rmem_max": "212992",
    "net/core/wmem_max": "212992",
    "net/ipv4/tcp_rmem": "4096\t131072\t6291456",
    "net/ipv4/tcp_wmem": "4096\t16384\t4194304",
    "net/core/default_qdisc": "fq_codel",
    "net/ipv4/tcp_congestion_control": "cubic",
    "net/ipv4/tcp_available_congestion_control": "reno cubic",
    "net/ipv4/tcp_mtu_probing": "0",
}

# what fasterdata.es.net's host tuning asks of a 100G DTN
TUNED_100G_SYSCTLS = {
    "net/core/rmem_max": "2147483647",
    "net/core/wmem_max": "2147483647",
    "net/ipv4/tcp_rmem": "4096\t67108864\t1073741824",
    "net/ipv4/tcp_wmem": "4096\t67108864\t1073741824",
    "net/core/default_qdisc": "fq",
    "net/ipv4/tcp_congestion_control": "bbr",
    "net/ipv4/tcp_available_congestion_control": "reno cubic bbr htcp",
    "net/ipv4/tcp_mtu_probing": "1",
}


class FakeHost:
    """A fake host tree under `root`; each method adds one piece and returns self or a path."""

    def __init__(self, root: Path, hostname: str = "dtn1", kernel: str = "6.1.0-test"):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._ifindex = 1
        self.write("proc/sys/kernel/hostname", hostname)
        self.write("proc/sys/kernel/osrelease", kernel)
        self.mkdir("sys/class/net")

    def write(self, relative: str, text: str | int) -> Path:
        """Write `text` (plus a newline, as sysfs does) to root/relative."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{text}\n")
        return path

    def mkdir(self, relative: str) -> Path:
        """Create root/relative."""
        path = self.root / relative
        path.mkdir(parents=True, exist_ok=True)
        return path

    def link(self, relative: str, target: str) -> Path:
        """Make root/relative a relative symlink to root/target."""
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        (self.root / target).mkdir(parents=True, exist_ok=True)
        path.symlink_to(os.path.relpath(self.root / target, path.parent))
        return path

    def cpus(self, online: str, numa: dict[int, str] | None = None) -> FakeHost:
        """CPUs online as a cpulist, and NUMA nodes with their cpulists."""
        self.write("sys/devices/system/cpu/online", online)
        for node, cpulist in (numa or {}).items():
            self.write(f"sys/devices/system/node/node{node}/cpulist", cpulist)
        return self

    def governors(self, *governors: str) -> FakeHost:
        """One scaling_governor per CPU, cpu0 first."""
        for cpu, governor in enumerate(governors):
            self.write(f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", governor)
        return self

    def sysctls(self, values: dict[str, str] | None = None, **overrides: str) -> FakeHost:
        """Write /proc/sys values (default: a fresh install's), then `overrides` (dots or slashes)."""
        for key, value in {**(DEFAULT_SYSCTLS if values is None else values), **overrides}.items():
            self.write("proc/sys/" + key.replace(".", "/"), value)
        return self

    def process(self, pid: int, comm: str) -> FakeHost:
        """A running process."""
        self.write(f"proc/{pid}/comm", comm)
        return self

    def nic(self, name: str, speed: str | int | None = 100000, mtu: str | int = 9000, operstate: str = "up",
            pci: str | None = "0000:3b:00.0", numa_node: str | int | None = 0, local_cpulist: str | None = "0-15",
            driver: str | None = "mlx5_core", link: tuple[str, str | int, str, str | int] | None = None) -> FakeHost:
        """A NIC; `pci=None` makes it virtual (a veth). `link` is (current_link_speed,
        current_link_width, max_link_speed, max_link_width) as sysfs shows them.
        """
        base = f"sys/class/net/{name}"
        self.mkdir(base)
        if speed is not None:
            self.write(f"{base}/speed", speed)
        self.write(f"{base}/mtu", mtu)
        self.write(f"{base}/operstate", operstate)
        self.write(f"{base}/ifindex", self._ifindex)
        self.write(f"{base}/iflink", self._ifindex if pci else self._ifindex + 100)
        self._ifindex += 1
        if pci is None:
            return self
        device = f"sys/devices/pci0000:00/{pci}"
        self.link(f"{base}/device", device)
        self.mkdir(f"{device}/net/{name}")
        if numa_node is not None:
            self.write(f"{device}/numa_node", numa_node)
        if local_cpulist is not None:
            self.write(f"{device}/local_cpulist", local_cpulist)
        if driver is not None:
            self.link(f"{device}/driver", f"sys/bus/pci/drivers/{driver}")
        if link is not None:
            for attr, value in zip(("current_link_speed", "current_link_width", "max_link_speed", "max_link_width"),
                                   link, strict=True):
                self.write(f"{device}/{attr}", value)
        return self

    def rdma(self, name: str, netdev: str, pci: str | None = None, via: str = "gid", port_state: str = "4: ACTIVE",
             rate: str = "100 Gb/sec (4X EDR)", link_layer: str = "Ethernet") -> FakeHost:
        """An RDMA device whose port 1 sits on `netdev`, found through its GID table (`via="gid"`)
        or through device/net (`via="device"`, needs `pci`).
        """
        base = f"sys/class/infiniband/{name}"
        port = f"{base}/ports/1"
        self.write(f"{port}/state", port_state)
        self.write(f"{port}/rate", rate)
        self.write(f"{port}/link_layer", link_layer)
        if via == "gid":
            self.write(f"{port}/gid_attrs/ndevs/0", netdev)
            self.write(f"{port}/gid_attrs/ndevs/1", netdev)
        else:
            assert pci is not None
            self.link(f"{base}/device", f"sys/devices/pci0000:00/{pci}")
            self.mkdir(f"sys/devices/pci0000:00/{pci}/net/{netdev}")
        return self
