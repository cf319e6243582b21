"""RDMA (RoCE / InfiniBand) transfers with perftest's `ib_write_bw`: availability, output parsers,
a process driver and the `RdmaEngine`.

`ib_write_bw --report_gbits` prints a table after its banner:

     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      5000             92.34              92.30              0.176048

(without `--report_gbits` the columns are MB/sec, perftest's MiB: 2^20 bytes). With `--out_json`
(and `--out_json_file=PATH`) it also writes `{"test_info": {...}, "results": {"MsgSize",
"n_iterations", "BW_peak", "BW_average", "MsgRate"}}`; some perftest versions leave string
values unquoted and trailing commas in it, which `parse_json` repairs.

RDMA needs a device under /sys/class/infiniband (a RoCE/IB NIC, or the soft-RoCE `rdma_rxe`
driver); where there is none, `available()` says so and the driver fails with that reason.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dtn_agent.engines import EngineUnavailable, ReadyCallback, ReportSink, TransferJob
from dtn_agent.engines.cpu import ProcessCpu
from dtn_agent.engines.process import announce_when_listening, free_port, stream_process
from dtn_agent.pinning import PinnedCommand, PinningPlan, wrap_command
from sdn_app.core.reports import Pinning, RateReport, StreamRate, TransferResult

ENGINE = "rdma"
BINARY = "ib_write_bw"
SYSFS = Path("/sys")
NO_DEVICE = "no RDMA device in /sys/class/infiniband (needs a RoCE NIC or rdma_rxe)"
MIB = float(1 << 20)

_HEADER_RE = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[(?P<unit2>[^\]]+)\]")
_ROW_RE = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


class RdmaError(RuntimeError):
    """RDMA is not available here, or perftest failed or wrote something unreadable."""


@dataclass(frozen=True)
class Availability:
    """Whether RDMA transfers can run here, the devices found, and why not when they cannot."""

    ok: bool
    reason: str = ""
    devices: tuple[str, ...] = ()


def available(sysfs: Path = SYSFS, binary: str = BINARY) -> Availability:
    """Whether this host can run `ib_write_bw`: an RDMA device in sysfs and the perftest binary."""
    ib = sysfs / "class/infiniband"
    devices = tuple(sorted(p.name for p in ib.iterdir())) if ib.is_dir() else ()
    if not devices:
        reason = NO_DEVICE if sysfs == SYSFS else NO_DEVICE.replace("/sys/class/infiniband", str(ib))
        return Availability(False, reason)
    if shutil.which(binary) is None:
        return Availability(False, f"{binary} not found on PATH: install the perftest package", devices)
    return Availability(True, "", devices)


def _unit_factor(unit: str) -> float:
    """Bits per second per unit of a perftest bandwidth column."""
    u = unit.strip().lower()
    if u in ("gb/sec", "gbit/sec", "gbps"):
        return 1e9
    if u in ("mb/sec", "mib/sec"):
        return MIB * 8
    raise RdmaError(f"unknown perftest bandwidth unit {unit!r} (expected Gb/sec or MB/sec)")


def _report(
    transfer_id: str,
    msg_size: int,
    iterations: int,
    avg_bps: float,
    qps: int,
    pinning: Pinning,
    final: bool,
    iters_per_qp: bool = False,
) -> RateReport:
    """One report from a result row; `iters_per_qp`: a `-n` run, whose #iterations counts one QP's messages."""
    total = msg_size * iterations * (qps if iters_per_qp else 1)
    seconds = total * 8 / avg_bps if avg_bps > 0 else 0.0
    per_qp = tuple(StreamRate(stream=i, bits_per_second=avg_bps / qps, bytes_total=total // qps) for i in range(qps))
    return RateReport(
        transfer_id=transfer_id,
        engine=ENGINE,
        start=0.0,
        end=seconds,
        bits_per_second=avg_bps,
        bytes_total=total,
        streams=per_qp,
        pinning=pinning,
        final=final,
    )


class PerftestTextParser:
    """Reads ib_write_bw's text output line by line; each table row becomes a report."""

    def __init__(
        self, transfer_id: str, qps: int = 1, pinning: Pinning | None = None, iters_per_qp: bool = False
    ) -> None:
        self.transfer_id = transfer_id
        self.iters_per_qp = iters_per_qp  # a -n run: #iterations is per QP (a -D run counts all of them)
        self.qps = max(1, qps)
        self.pinning = pinning or Pinning()
        self.factor: float | None = None
        self.rows: list[RateReport] = []
        self.errors: list[str] = []

    def feed_line(self, line: str) -> RateReport | None:
        """The report of a table row, or None for banner, header and other lines."""
        header = _HEADER_RE.search(line)
        if header:
            self.factor = _unit_factor(header["unit2"])
            return None
        qps = re.search(r"Number of qps\s*:\s*(\d+)", line)
        if qps:
            self.qps = max(1, int(qps[1]))
        row = _ROW_RE.match(line)
        if row is None or self.factor is None:
            if re.search(r"(?i)\b(error|failed|unable|couldn't|can't|not found|no \w+( \w+)? found)\b", line):
                self.errors.append(line.strip())
            return None
        size, iters, _peak, avg = int(row[1]), int(row[2]), float(row[3]), float(row[4])
        report = _report(
            self.transfer_id, size, iters, avg * self.factor, self.qps, self.pinning, False, self.iters_per_qp
        )
        self.rows.append(report)
        return report

    def finish(self) -> RateReport:
        """The final report (the last row); RdmaError quoting perftest when there was no row."""
        if not self.rows:
            detail = " | ".join(self.errors[-3:]) or "no result table in the output"
            raise RdmaError(f"ib_write_bw gave no result: {detail}")
        last = self.rows[-1]
        return replace(last, final=True)


def parse_text(output: str, transfer_id: str, qps: int = 1, pinning: Pinning | None = None) -> list[RateReport]:
    """The reports of a whole `ib_write_bw` text output: one per table row, then the final one."""
    parser = PerftestTextParser(transfer_id, qps, pinning)
    for line in output.splitlines():
        parser.feed_line(line)
    final = parser.finish()
    return [*parser.rows, final]


def _repair_json(text: str) -> str:
    """perftest's JSON made valid: bare keys and string values quoted, trailing commas dropped."""
    fixed = re.sub(r"([{,]\s*)([A-Za-z_][\w.]*)\s*:", r'\1"\2":', text)
    fixed = re.sub(
        r':\s*(?!-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*[,}\]\n])(?!true\b|false\b|null\b)([^"\s{\[][^,}\]\n]*?)\s*(?=[,}\]\n])',
        lambda m: ": " + json.dumps(m.group(1).strip()),
        fixed,
    )
    return re.sub(r",(\s*[}\]])", r"\1", fixed)


def parse_json(
    output: str | dict[str, Any],
    transfer_id: str,
    gbits: bool = True,
    pinning: Pinning | None = None,
    iters_per_qp: bool = False,
) -> RateReport:
    """The final report from perftest's `--out_json` document (`gbits`: run with --report_gbits).

    `iters_per_qp`: the test ran with `-n`, so `n_iterations` counts the messages of one QP.
    """
    if isinstance(output, dict):
        doc: Any = output
    else:
        try:
            doc = json.loads(output)
        except json.JSONDecodeError:
            try:
                doc = json.loads(_repair_json(output))
            except json.JSONDecodeError as exc:
                raise RdmaError(f"perftest JSON cannot be read ({exc.msg}): {output.strip()[:200]!r}") from exc
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, dict) or "BW_average" not in results:
        raise RdmaError(f"perftest JSON has no results.BW_average: {str(doc)[:200]!r}")
    info = doc.get("test_info") or {}
    qps = int(info.get("Number_of_qps", 1) or 1)
    factor = 1e9 if gbits else MIB * 8
    return _report(
        transfer_id,
        int(results.get("MsgSize", 0)),
        int(results.get("n_iterations", 0)),
        float(results["BW_average"]) * factor,
        qps,
        pinning or Pinning(),
        True,
        iters_per_qp,
    )


# ---------------------------------------------------------------------------------------------
# driver


@dataclass(frozen=True)
class RdmaJob:
    """One ib_write_bw test from this host (the client) to the server at `host`."""

    transfer_id: str
    host: str
    device: str | None = None  # -d mlx5_0; None: perftest picks the first
    port: int = 18515
    qps: int = 1
    duration: int = 10  # -D seconds
    size: int = 65536  # -s message size
    gid_index: int | None = None  # -x, RoCE
    iterations: int | None = None  # -n messages per QP instead of -D duration (perftest: at least 5)
    rate_gbps: float | None = None  # --rate_limit in Gbit/s (software limiter), all of the test
    extra: tuple[str, ...] = field(default_factory=tuple)


def client_argv(job: RdmaJob, json_file: str | None = None, binary: str = BINARY) -> list[str]:
    """`ib_write_bw --report_gbits -D secs|-n iters -q qps -s size -p port [-d dev] [-x gid] [--out_json ...] HOST`."""
    argv = server_argv(job, json_file, binary)
    argv.append(job.host)
    return argv


def server_argv(job: RdmaJob, json_file: str | None = None, binary: str = BINARY) -> list[str]:
    """The ib_write_bw server side of `job` (the same options, without the host)."""
    if job.qps < 1:
        raise ValueError(f"qps must be at least 1, not {job.qps}")
    length = ["-n", str(job.iterations)] if job.iterations is not None else ["-D", str(job.duration)]
    argv = [binary, "--report_gbits", *length, "-q", str(job.qps), "-s", str(job.size)]
    argv += ["-p", str(job.port)]
    if job.rate_gbps is not None:
        argv += [f"--rate_limit={job.rate_gbps:g}", "--rate_units=g", "--rate_limit_type=SW"]
    if job.device:
        argv += ["-d", job.device]
    if job.gid_index is not None:
        argv += ["-x", str(job.gid_index)]
    if json_file:
        argv += ["--out_json", f"--out_json_file={json_file}"]
    argv += list(job.extra)
    return argv


class RdmaDriver:
    """Runs ib_write_bw for a job after checking that RDMA is available here."""

    def __init__(self, binary: str = BINARY, sysfs: Path = SYSFS) -> None:
        self.binary = binary
        self.sysfs = sysfs

    def run(
        self,
        job: RdmaJob,
        reports: Callable[[RateReport], None],
        cancel: threading.Event | None = None,
        timeout: float | None = None,
        plan: PinningPlan | None = None,
        server: bool = False,
    ) -> TransferResult:
        """Run `job` (the client, or with `server` the server side) and report its result.

        Without RDMA here, an ok=False result with the reason.
        """
        empty = RateReport(job.transfer_id, ENGINE, 0.0, 0.0, 0.0, 0, final=True)
        avail = available(self.sysfs, self.binary)
        if not avail.ok:
            return TransferResult(empty, ok=False, error=avail.reason)
        with tempfile.TemporaryDirectory(prefix="tsdn-perftest-") as tmp:
            json_file = str(Path(tmp) / "result.json")
            argv = (server_argv if server else client_argv)(job, json_file, self.binary)
            pinned = wrap_command(argv, plan) if plan else PinnedCommand(argv, Pinning(note="not pinned"))
            per_qp = job.iterations is not None
            parser = PerftestTextParser(job.transfer_id, job.qps, pinned.pinning, per_qp)
            cpu = ProcessCpu()  # perftest prints no CPU figure: what /proc says ib_write_bw used

            def on_line(line: str) -> None:
                rep = parser.feed_line(line)
                if rep is not None:
                    reports(replace(rep, cpu_percent=cpu.interval()))

            limit = timeout if timeout is not None else (job.duration + 60.0 if job.iterations is None else None)
            try:
                outcome = stream_process(pinned.argv, on_line, cancel, limit, pinned.preexec_fn, cpu=cpu)
            except FileNotFoundError:
                return TransferResult(empty, ok=False, error=f"{self.binary} not found: install the perftest package")
            if outcome.cancelled:
                return TransferResult(empty, ok=False, error="cancelled")
            if outcome.timed_out:
                return TransferResult(
                    empty, ok=False, error=f"ib_write_bw did not finish within {limit or 0:g} s: killed"
                )
            try:
                path = Path(json_file)
                final = (
                    parse_json(path.read_text(), job.transfer_id, True, pinned.pinning, per_qp)
                    if path.is_file() and path.stat().st_size
                    else parser.finish()
                )
            except RdmaError as exc:
                stderr = outcome.stderr.strip()[-300:]
                return TransferResult(empty, ok=False, error=f"{exc}{f' (stderr: {stderr!r})' if stderr else ''}")
        final = replace(final, cpu_percent=cpu.overall())
        reports(final)
        if outcome.returncode != 0:
            return TransferResult(final, ok=False, error=f"ib_write_bw exited with status {outcome.returncode}")
        return TransferResult(final, ok=True)


# ---------------------------------------------------------------------------------------------
# the Engine interface (dtn_agent.engines.Engine)

UNAVAILABLE_HINT = "RoCE needs a NIC with RDMA (mlx5...) and perftest's ib_write_bw"


def iterations_for(size: int, msg_size: int, qps: int) -> int:
    """ib_write_bw's `-n` (messages per QP) that moves at least `size` bytes over `qps` QPs (at least 5)."""
    per_qp = -(-size // qps)
    return max(5, -(-per_qp // msg_size))


class RdmaEngine:
    """perftest's `ib_write_bw` behind the agent's Engine interface: memory-to-memory only.

    `size` becomes the iteration count (`-n`, messages of `msg_size` bytes per QP, rounded up), so
    both sides must be given the same job; `streams` are queue pairs (`-q`); `pacing_bps` is
    perftest's software rate limiter (`--rate_limit` in Gbit/s); `cpus` pins the process with
    numactl `--localalloc`. Where the host has no RDMA device or no ib_write_bw, send and receive
    raise EngineUnavailable before anything starts.
    """

    name = ENGINE
    repaces = False  # perftest fixes --rate_limit when it starts: the switch's meter holds a changed rate

    def __init__(
        self,
        device: str | None = None,
        gid_index: int | None = None,
        msg_size: int = 65536,
        binary: str = BINARY,
        sysfs: Path = SYSFS,
        timeout: float | None = None,
    ) -> None:
        if msg_size < 1:
            raise ValueError(f"msg_size must be positive, not {msg_size}")
        self.device = device
        self.gid_index = gid_index
        self.msg_size = msg_size
        self.binary = binary
        self.sysfs = sysfs
        self.timeout = timeout
        self.driver = RdmaDriver(binary, sysfs)

    def unavailable(self) -> str | None:
        """Why RDMA transfers cannot run here (no RDMA device, no ib_write_bw), or None."""
        avail = available(self.sysfs, self.binary)
        return None if avail.ok else f"rdma: {avail.reason}; {UNAVAILABLE_HINT}"

    def _rdma_job(self, job: TransferJob, side: str) -> RdmaJob:
        """The perftest job of one side of `job`; ValueError or EngineUnavailable before anything runs."""
        job.check(side)
        if job.files or job.destination is not None:
            raise ValueError("rdma moves memory only: send files with the builtin or fdt engine")
        if job.size is None:
            raise ValueError(f"rdma: the {side} job needs size: both ib_write_bw sides run the same iteration count")
        if job.size == 0:
            raise ValueError("rdma cannot send 0 bytes")
        reason = self.unavailable()
        if reason:
            raise EngineUnavailable(reason)
        return RdmaJob(
            job.transfer_id,
            job.host,
            device=self.device,
            port=job.port,
            qps=job.streams,
            size=self.msg_size,
            gid_index=self.gid_index,
            iterations=iterations_for(job.size, self.msg_size, job.streams),
            rate_gbps=job.pacing_bps / 1e9 if job.pacing_bps else None,
        )

    def send(self, job: TransferJob, reports: ReportSink) -> TransferResult:
        """Write `job.size` bytes to the ib_write_bw server at `job.host`:`job.port`."""
        rjob = self._rdma_job(job, "send")
        return self.driver.run(rjob, reports, job.cancel, timeout=self.timeout, plan=job.plan())

    def receive(self, job: TransferJob, reports: ReportSink, ready: ReadyCallback | None = None) -> TransferResult:
        """Run the ib_write_bw server on `job.port` (0: a free port) and report the test it served.

        `ready` gets (`job.host`, port) once perftest's TCP exchange port listens.
        """
        rjob = self._rdma_job(job, "receive")
        port = job.port or free_port(job.host)
        rjob = replace(rjob, port=port)
        with announce_when_listening(job.host, port, ready):
            return self.driver.run(
                rjob, reports, job.cancel, timeout=self.timeout, plan=job.plan(), server=True
            )
