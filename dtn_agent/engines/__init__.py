"""Transfer engines: what moves the bytes between two DTNs, behind one small interface.

An engine runs one side of one transfer at a time: `receive` on the destination DTN (it listens,
takes the data and, for files, writes and verifies them) and `send` on the source DTN. Both
sides describe the transfer with the same `TransferJob`, call `reports` once per interval with a
`RateReport` while bytes flow, and return a `TransferResult` whose `report` is the final
summary (`final=True`). A transfer that fails (peer gone, checksum mismatch, protocol error)
returns `ok=False` with an error a person can act on; a job that cannot be run at all (no size
and no files, a receiver without a destination) raises `ValueError` before any traffic.

Engines (`ENGINES`, built by `engine_named`): `builtin` (this project's multi-stream TCP engine,
`dtn_agent.engines.builtin`), and wrappers around external tools: `iperf3`, `fdt` (Caltech's
fdt.jar, supplied by the user) and `rdma` (perftest's `ib_write_bw` over RoCE/InfiniBand).
An engine that cannot run on this host at all (tool, jar or device missing) raises
`EngineUnavailable` (a ValueError) naming what is missing; `engine_unavailable` says so ahead of
time, so that an agent can refuse a job before anything starts.

A job may carry a `cancel` event: once it is set, the engine stops its side as soon as it can and
returns `ok=False` with the error "cancelled" (the external engines kill their tool's process
group). An engine that does not watch it runs the job to its end.

A sending job may carry a `repace` (`Pacing`): the agent changes it when the controller hands a
PACE job (the reservation's meter changed). An engine whose `repaces` is true follows it on its
live connections; the others (iperf3, FDT, perftest fix their rate when they start) keep the
pacing they started with, and the switch's meter holds the rate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dtn_agent.pinning import PinningPlan
from sdn_app.core.reports import ENGINES, RateReport, TransferResult

if TYPE_CHECKING:
    from dtn_agent.engines.fdt import FdtEngine


ReportSink = Callable[[RateReport], None]
"""Where an engine hands each `RateReport`, from one of its own threads."""

ReadyCallback = Callable[[tuple[str, int]], None]
"""Called by a receiver with the (host, port) it listens on, before it waits for the sender."""


@dataclass(frozen=True)
class TransferJob:
    """One transfer, as both of its sides see it.

    Memory-to-memory when `size` is set (that many bytes, produced and discarded in memory);
    disk-to-disk when `files` is set on the sender (files and directories, sent with their
    names relative to their parent) and `destination` on the receiver.
    """

    transfer_id: str
    host: str  # sender: the receiver's address; receiver: the address to listen on
    port: int  # receiver: 0 listens on any free port (passed to `ready`)
    streams: int = 1
    size: int | None = None  # bytes, memory-to-memory
    files: tuple[Path, ...] = ()  # sender: files or directories to send
    destination: Path | None = None  # receiver: the directory files land in
    pacing_bps: int | None = None  # all streams together; None: unpaced
    cpus: tuple[int, ...] | None = None  # pin the engine's threads to these CPUs; None: not pinned
    numa_node: int | None = None  # the NUMA node of `cpus` (the data NIC's), for the memory policy
    pin_note: str = ""  # why not pinned, or what to know about the pinning (said in every report)
    cancel: threading.Event | None = field(default=None, compare=False, hash=False, repr=False)
    """Set it to stop this side now: the engine returns ok=False, error "cancelled". None: not cancellable."""
    repace: Pacing | None = field(default=None, compare=False, hash=False, repr=False)
    """Sender: its pacing changed while it runs (followed by engines that `repaces`). None: fixed at `pacing_bps`."""

    def plan(self) -> PinningPlan:
        """The pinning this job asks for (empty, with its note, when it names no CPUs)."""
        if not self.cpus:
            return PinningPlan((), None, self.pin_note or "not pinned: the job names no CPUs")
        return PinningPlan(tuple(self.cpus), self.numa_node, self.pin_note)

    def check(self, side: str) -> None:
        """Raise ValueError naming what is wrong with this job for `side` ("send" or "receive")."""
        if not self.transfer_id:
            raise ValueError("transfer job needs a transfer_id")
        if not 1 <= self.streams <= 256:
            raise ValueError(f"streams must be between 1 and 256, not {self.streams}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be between 0 and 65535, not {self.port}")
        if self.pacing_bps is not None and self.pacing_bps <= 0:
            raise ValueError(f"pacing_bps must be positive, not {self.pacing_bps}")
        if self.cpus is not None and not self.cpus:
            raise ValueError("cpus, when given, must name at least one CPU")
        if side == "send":
            if (self.size is None) == (not self.files):
                raise ValueError("a sending job needs exactly one of size (memory-to-memory) and files (disk)")
            if self.size is not None and self.size < 0:
                raise ValueError(f"size must not be negative, not {self.size}")
            if self.port == 0:
                raise ValueError("a sending job needs the receiver's port, not 0")
        elif side != "receive":
            raise ValueError(f"side must be 'send' or 'receive', not {side!r}")


class Pacing:
    """A running sender's pacing (bits per second, all streams together), changed from another
    thread while the engine sends: the agent `change`s it, an engine that can repace `follow`s it."""

    def __init__(self, bps: int | None = None) -> None:
        self._lock = threading.Lock()
        self._bps = bps
        self._changed = False
        self._apply: Callable[[int], None] | None = None

    @property
    def bps(self) -> int | None:
        """The pacing now (None: unpaced)."""
        with self._lock:
            return self._bps

    def change(self, bps: int) -> None:
        """Pace the sender at `bps` from now on (applied at once when an engine follows)."""
        if bps <= 0:
            raise ValueError(f"pacing_bps must be positive, not {bps}")
        with self._lock:
            self._bps, self._changed = bps, True
            apply = self._apply
        if apply is not None:
            apply(bps)

    def follow(self, apply: Callable[[int], None] | None) -> None:
        """The engine: call `apply(bps)` on every change from now on (None: no more), and at once
        with a change made before it followed."""
        with self._lock:
            self._apply = apply
            pending = self._bps if self._changed and apply is not None else None
        if apply is not None and pending is not None:
            apply(pending)


class Engine(Protocol):
    """A transfer engine: one side of one transfer per call; `repaces`: whether its sender follows
    a job's `repace` while it runs."""

    name: str
    repaces: bool

    def receive(self, job: TransferJob, reports: ReportSink, ready: ReadyCallback | None = None) -> TransferResult:
        """Listen on `job.host`:`job.port`, take one transfer and return how it ended."""
        ...

    def send(self, job: TransferJob, reports: ReportSink) -> TransferResult:
        """Send `job` to the receiver at `job.host`:`job.port` and return how it ended."""
        ...


class EngineUnavailable(ValueError):
    """The engine cannot run on this host (its tool, jar or device is missing); the message says what."""


def engine_named(name: str, *, fdt_jar: str | Path | None = None) -> Engine:
    """A new engine of kind `name` (one of `ENGINES`); ValueError listing the known names otherwise.

    `fdt_jar` is the path of fdt.jar for the `fdt` engine (ignored by the others). Building an
    engine checks nothing on the host: see `engine_unavailable`.
    """
    key = name.strip().lower()
    if key == "builtin":
        from dtn_agent.engines.builtin import BuiltinEngine

        return BuiltinEngine()
    if key == "iperf3":
        from dtn_agent.engines.iperf3 import Iperf3Engine

        return Iperf3Engine()
    if key == "fdt":
        return _fdt_engine(fdt_jar)
    if key == "rdma":
        from dtn_agent.engines.rdma import RdmaEngine

        return RdmaEngine()
    raise ValueError(f"unknown engine {name!r}: known engines are {', '.join(ENGINES)}")


def _fdt_engine(fdt_jar: str | Path | None) -> FdtEngine:
    from dtn_agent.engines.fdt import FdtEngine

    return FdtEngine(fdt_jar)


def engine_unavailable(name: str, fdt_jar: str | Path | None = None) -> str | None:
    """Why engine `name` cannot run on this host (a sentence naming what is missing), or None when it can.

    An unknown name raises ValueError, as in `engine_named`. Engines that need nothing beyond
    Python (builtin) are always available.
    """
    check = getattr(engine_named(name, fdt_jar=fdt_jar), "unavailable", None)
    return check() if check is not None else None
