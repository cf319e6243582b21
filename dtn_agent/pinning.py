"""CPU and memory pinning of transfer processes near the NIC they use.

A 100GE stream needs a core on the NIC's NUMA node and memory on that node (SC16 DTNs:
`numactl --physcpubind=20 --localalloc java -jar fdt.jar ...`). This module reads what sysfs
says about a NIC (`numa_node`, `local_cpulist`), picks one CPU per stream among the online
ones, and wraps an engine's command with `numactl`; where numactl is missing it falls back to
`os.sched_setaffinity` (CPUs only, memory policy left alone). Every outcome is described by a
`Pinning` (reports.py) that travels with the rate reports.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sdn_app.core.reports import Pinning

SYSFS = Path("/sys")
NOT_PINNED_UNKNOWN_NODE = "NIC numa_node is -1 (unknown): not pinned"


class PinningError(ValueError):
    """The pinning asked for cannot be done (bad cpulist, CPUs offline, unknown NIC)."""


def parse_cpulist(text: str) -> tuple[int, ...]:
    """The CPUs of a Linux cpulist such as "0-3,8-11" (also "" and "0-7:2" strides), sorted."""
    cpus: set[int] = set()
    stripped = text.strip()
    if not stripped:
        return ()
    for part in stripped.split(","):
        item = part.strip()
        if not item:
            raise PinningError(f"bad cpulist {text!r}: empty item")
        stride = 1
        if ":" in item:
            item, _, stride_text = item.partition(":")
            if not stride_text.isdigit() or int(stride_text) < 1:
                raise PinningError(f"bad cpulist {text!r}: stride {stride_text!r} is not a positive integer")
            stride = int(stride_text)
        first, dash, last = item.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise PinningError(f"bad cpulist {text!r}: {part.strip()!r} is not N or N-M")
        lo = int(first)
        hi = int(last) if dash else lo
        if hi < lo:
            raise PinningError(f"bad cpulist {text!r}: range {part.strip()!r} runs backwards")
        cpus.update(range(lo, hi + 1, stride))
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """The compact cpulist of `cpus` ("0-3,8"), as numactl and sysfs write it."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def online_cpus(sysfs: Path = SYSFS) -> tuple[int, ...]:
    """The CPUs the kernel has online (/sys/devices/system/cpu/online)."""
    path = sysfs / "devices/system/cpu/online"
    try:
        return parse_cpulist(path.read_text())
    except OSError as exc:
        raise PinningError(f"cannot read the online CPUs from {path}: {exc}") from exc


@dataclass(frozen=True)
class NicLocality:
    """Where a NIC sits: its NUMA node (-1: the firmware does not say) and the CPUs local to it."""

    interface: str
    numa_node: int
    local_cpus: tuple[int, ...]


def nic_locality(interface: str, sysfs: Path = SYSFS) -> NicLocality:
    """The NUMA node and local CPUs of `interface` from sysfs; virtual devices (lo, veth) get -1."""
    net = sysfs / "class/net" / interface
    if not net.exists():
        raise PinningError(f"no network interface {interface!r} in {sysfs / 'class/net'}")
    device = net / "device"
    if not device.exists():
        return NicLocality(interface, -1, ())
    try:
        node = int((device / "numa_node").read_text().strip())
    except (OSError, ValueError):
        node = -1
    try:
        local = parse_cpulist((device / "local_cpulist").read_text())
    except OSError:
        local = ()
    return NicLocality(interface, node, local)


@dataclass(frozen=True)
class PinningPlan:
    """The CPUs and NUMA node chosen for a transfer, or why nothing was chosen."""

    cpus: tuple[int, ...]
    numa_node: int | None
    note: str = ""

    @property
    def pinned(self) -> bool:
        """Whether there is anything to pin to."""
        return bool(self.cpus)


def choose_cpus(
    numa_node: int,
    local_cpulist: str | Sequence[int],
    streams: int,
    online: Sequence[int] | None = None,
    cpus: Sequence[int] | None = None,
) -> PinningPlan:
    """One CPU per stream among the NIC's local online CPUs (or the explicit `cpus`), reused round-robin.

    numa_node -1 means sysfs does not know the node: no pinning, and the plan's note says so.
    Explicit CPUs that are not online, or a NIC whose local CPUs are all offline, are errors.
    """
    if streams < 1:
        raise PinningError(f"streams must be at least 1, not {streams}")
    if numa_node < 0:
        return PinningPlan((), None, NOT_PINNED_UNKNOWN_NODE)
    online_set = set(online_cpus() if online is None else online)
    if cpus is not None:
        wanted = tuple(dict.fromkeys(cpus))
        offline = [c for c in wanted if c not in online_set]
        if offline:
            raise PinningError(
                f"CPUs {format_cpulist(offline)} are not online (online: {format_cpulist(online_set) or 'none'})"
            )
        if not wanted:
            raise PinningError("no CPUs given to pin to")
        return PinningPlan(_spread(wanted, streams), numa_node)
    local = parse_cpulist(local_cpulist) if isinstance(local_cpulist, str) else tuple(sorted(set(local_cpulist)))
    if not local:
        return PinningPlan((), None, f"NIC on NUMA node {numa_node} lists no local CPUs: not pinned")
    usable = tuple(c for c in local if c in online_set)
    if not usable:
        raise PinningError(
            f"none of the NIC's local CPUs {format_cpulist(local)} (NUMA node {numa_node}) is online "
            f"(online: {format_cpulist(online_set) or 'none'})"
        )
    note = ""
    offline = [c for c in local if c not in online_set]
    if offline:
        note = f"local CPUs {format_cpulist(offline)} are offline: not used"
    if len(usable) < streams:
        extra = f"{streams} streams share {len(usable)} CPUs"
        note = f"{note}; {extra}" if note else extra
    return PinningPlan(_spread(usable, streams), numa_node, note)


def _spread(cpus: Sequence[int], streams: int) -> tuple[int, ...]:
    """The first `streams` CPUs of `cpus`, all of them when there are fewer."""
    return tuple(sorted(cpus[: min(streams, len(cpus))]))


@dataclass(frozen=True)
class PinnedCommand:
    """A command ready to run pinned: its argv, what was done, and a hook for the child (fallback)."""

    argv: list[str]
    pinning: Pinning
    preexec_fn: Callable[[], None] | None = None


def wrap_command(
    argv: Sequence[str],
    plan: PinningPlan,
    localalloc: bool = False,
    numactl: str | None = "auto",
) -> PinnedCommand:
    """`argv` under `numactl --physcpubind=CPUS --membind=NODE` (or `--localalloc`) when numactl exists.

    Without numactl the child is pinned with os.sched_setaffinity before exec (CPUs only), and the
    Pinning's note says that the memory policy was not set. An empty plan leaves `argv` alone.
    """
    command = list(argv)
    if not plan.pinned:
        return PinnedCommand(command, Pinning(note=plan.note or "not pinned"))
    binary = shutil.which("numactl") if numactl == "auto" else numactl
    cpulist = format_cpulist(plan.cpus)
    if binary:
        memory = "--localalloc" if localalloc or plan.numa_node is None else f"--membind={plan.numa_node}"
        wrapped = [binary, f"--physcpubind={cpulist}", memory, *command]
        return PinnedCommand(wrapped, Pinning(plan.cpus, plan.numa_node, "numactl", plan.note))
    cpus = set(plan.cpus)
    note = "numactl not found: CPUs pinned with sched_setaffinity, memory policy not set"
    if plan.note:
        note = f"{plan.note}; {note}"

    def pin_child() -> None:
        os.sched_setaffinity(0, cpus)

    return PinnedCommand(command, Pinning(plan.cpus, plan.numa_node, "sched_setaffinity", note), pin_child)


def pin_current_thread(plan: PinningPlan) -> Pinning:
    """Pin the calling thread to the plan's CPUs with sched_setaffinity (for in-process engines).

    Memory policy is not set (Python has no mbind); the returned Pinning's note says so.
    """
    if not plan.pinned:
        return Pinning(note=plan.note or "not pinned")
    try:
        os.sched_setaffinity(0, set(plan.cpus))
    except OSError as exc:
        raise PinningError(f"sched_setaffinity to CPUs {format_cpulist(plan.cpus)} failed: {exc}") from exc
    note = "pinned with sched_setaffinity: memory policy not set"
    if plan.note:
        note = f"{plan.note}; {note}"
    return Pinning(plan.cpus, plan.numa_node, "sched_setaffinity", note)


def pin_for_nic(
    argv: Sequence[str],
    interface: str,
    streams: int,
    sysfs: Path = SYSFS,
    localalloc: bool = False,
    numactl: str | None = "auto",
) -> PinnedCommand:
    """`argv` pinned near `interface`: sysfs locality, one CPU per stream, numactl or the fallback."""
    loc = nic_locality(interface, sysfs)
    online = online_cpus(sysfs) if loc.numa_node >= 0 else ()
    plan = choose_cpus(loc.numa_node, loc.local_cpus, streams, online=online)
    if loc.numa_node < 0 and not (sysfs / "class/net" / interface / "device").exists():
        plan = PinningPlan((), None, f"{interface} is a virtual device (no NUMA node): not pinned")
    return wrap_command(argv, plan, localalloc=localalloc, numactl=numactl)
