"""What a transfer engine says about a running transfer, once per second, whatever the engine, and
the engines' names: the words the controller and the agents share about transfers.

Every engine (the builtin TCP engine, iperf3, FDT, perftest) turns what it measures into
`RateReport`s of one shape, so the agent streams them to the controller the same way and the
core's advisor compares achieved rates with bookings without knowing which engine ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdn_app.core import validation as v

ENGINES = ("builtin", "iperf3", "fdt", "rdma")
"""The transfer engines an agent can run (`dtn_agent.engines.engine_named`), in the order a person would try them."""

MAX_STREAMS_REPORTED = 1024  # per-stream entries in one report


@dataclass(frozen=True)
class StreamRate:
    """One stream (TCP connection or RDMA queue pair) during one interval."""

    stream: int
    bits_per_second: float
    bytes_total: int
    retransmits: int | None = None  # None: the engine does not know
    rtt_ms: float | None = None

    def check(self, what: str) -> None:
        """Raise InvalidArgument naming the first field of `what` (e.g. `rate.streams[0]`) out of its limits."""
        v.whole(self.stream, f"{what}.stream", 0, 2**32 - 1)
        v.number(self.bits_per_second, f"{what}.bits_per_second", 0, v.MAX_RATE_BPS)
        v.whole(self.bytes_total, f"{what}.bytes_total", 0, v.MAX_COUNT)
        if self.retransmits is not None:
            v.whole(self.retransmits, f"{what}.retransmits", 0, v.MAX_COUNT)
        if self.rtt_ms is not None:
            v.number(self.rtt_ms, f"{what}.rtt_ms", 0, v.MAX_RTT_MS)


@dataclass(frozen=True)
class Pinning:
    """Where the transfer ran: the CPUs and NUMA node it was pinned to, and how, or why not."""

    cpus: tuple[int, ...] = ()
    numa_node: int | None = None  # None: unknown (sysfs said -1) or not pinned
    method: str = "none"  # "numactl", "sched_setaffinity", or "none"
    note: str = ""  # e.g. "NIC numa_node is -1 (unknown): not pinned"

    def check(self, what: str) -> None:
        """Raise InvalidArgument naming the first field of `what` (e.g. `rate.pinning`) out of its limits."""
        v.entries(self.cpus, f"{what}.cpus", v.MAX_LIST)
        for i, cpu in enumerate(self.cpus):
            v.whole(cpu, f"{what}.cpus[{i}]", 0, v.MAX_CPU_ID)
        if self.numa_node is not None:
            v.whole(self.numa_node, f"{what}.numa_node", -1, v.MAX_NUMA_NODE)
        v.text(self.method, f"{what}.method", v.MAX_SHORT_TEXT)
        v.text(self.note, f"{what}.note", v.MAX_TEXT)


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

    def check(self, what: str = "rate") -> None:
        """Raise InvalidArgument naming the first field (`what.field`) outside the limits of
        `sdn_app.core.validation`: every number finite and within its range, the interval's end
        not before its start, bounded counts and texts. Nothing a refused report says is kept."""
        v.text(self.engine, f"{what}.engine", v.MAX_NAME)
        v.number(self.start, f"{what}.start", 0, v.MAX_ELAPSED)
        v.number(self.end, f"{what}.end", 0, v.MAX_ELAPSED)
        v.interval(self.start, self.end, what)
        v.number(self.bits_per_second, f"{what}.bits_per_second", 0, v.MAX_RATE_BPS)
        v.whole(self.bytes_total, f"{what}.bytes_total", 0, v.MAX_COUNT)
        v.entries(self.streams, f"{what}.streams", MAX_STREAMS_REPORTED)
        for i, stream in enumerate(self.streams):
            stream.check(f"{what}.streams[{i}]")
        if self.retransmits is not None:
            v.whole(self.retransmits, f"{what}.retransmits", 0, v.MAX_COUNT)
        if self.rtt_ms is not None:
            v.number(self.rtt_ms, f"{what}.rtt_ms", 0, v.MAX_RTT_MS)
        if self.cpu_percent is not None:
            v.number(self.cpu_percent, f"{what}.cpu_percent", 0, v.MAX_CPU_PERCENT)
        self.pinning.check(f"{what}.pinning")


@dataclass(frozen=True)
class TransferResult:
    """How a transfer ended: the summary report, and for files the checksum verdict."""

    report: RateReport
    ok: bool
    error: str = ""
    checksums_verified: bool | None = None  # None: memory-to-memory, nothing to verify
    files: tuple[str, ...] = ()
