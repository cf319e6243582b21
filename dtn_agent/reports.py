"""What a transfer engine says about a running transfer, once per second, whatever the engine.

Every engine (the builtin TCP engine, iperf3, FDT, perftest) turns what it measures into
`RateReport`s of one shape, so the agent streams them to the controller the same way and the
core's advisor compares achieved rates with bookings without knowing which engine ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StreamRate:
    """One stream (TCP connection or RDMA queue pair) during one interval."""

    stream: int
    bits_per_second: float
    bytes_total: int
    retransmits: int | None = None  # None: the engine does not know
    rtt_ms: float | None = None


@dataclass(frozen=True)
class Pinning:
    """Where the transfer ran: the CPUs and NUMA node it was pinned to, and how, or why not."""

    cpus: tuple[int, ...] = ()
    numa_node: int | None = None  # None: unknown (sysfs said -1) or not pinned
    method: str = "none"  # "numactl", "sched_setaffinity", or "none"
    note: str = ""  # e.g. "NIC numa_node is -1 (unknown): not pinned"


@dataclass(frozen=True)
class RateReport:
    """One interval of a transfer: `start`..`end` seconds since the transfer began (engine clock)."""

    transfer_id: str
    engine: str
    start: float
    end: float
    bits_per_second: float  # all streams together, over the interval
    bytes_total: int  # since the transfer began, all streams
    streams: tuple[StreamRate, ...] = ()
    retransmits: int | None = None
    rtt_ms: float | None = None
    cpu_percent: float | None = None  # of one core, for the engine's own processes
    pinning: Pinning = field(default_factory=Pinning)
    final: bool = False  # the summary over the whole transfer, after the last interval


@dataclass(frozen=True)
class TransferResult:
    """How a transfer ended: the summary report, and for files the checksum verdict."""

    report: RateReport
    ok: bool
    error: str = ""
    checksums_verified: bool | None = None  # None: memory-to-memory, nothing to verify
    files: tuple[str, ...] = ()
