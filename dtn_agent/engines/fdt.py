"""FDT (Caltech's Fast Data Transfer, `fdt.jar`) as a transfer engine: its console rate lines
parsed into RateReports, its command lines, a process driver and the `FdtEngine`.

FDT is Java and in no package registry: the user supplies the jar (`--fdt-jar PATH`). Its
console reporter (lia.util.net.copy.monitoring.ConsoleReportingTask) prints, once per
reporting period, a line such as

    21/11 10:15:02	Net Out: 67.822 Gb/s	Avg: 67.822 Gb/s 45.23% ( 01m 02s )

"Net Out" on the sender, "Net In" on the receiver; the rate and the average since the start
use decimal bit units (b, Kb, Mb, Gb, Tb, Pb per second; 1 Kb = 1000 b), formatted with the
JVM's default locale by `DecimalFormat("##0.000")`: three decimals and no grouping, with a
decimal comma in many locales ("67,822 Gb/s").

At the end each FDT session prints its final statistics (FDTReaderSession / FDTWriterSession
`finalCleanup`):

    FDTReaderSession ( 5f1c...-uuid ) final stats:
     Started: Sat Nov 21 10:14:57 UTC 2026
     Ended:   Sat Nov 21 10:15:29 UTC 2026
     TotalBytes: 217061847040
     TotalNetworkBytes: 217061847040
     Exit Status: OK

which give the final report's bytes and duration, and whether FDT itself says it succeeded.

Number rule (parse_number), chosen for that format and for hand-made logs:
- one kind of separator appearing once ("67,822", "67.822", "1,5"): it is the decimal point,
  because FDT never groups digits (a value of 1000 or more moves to the next unit);
- both "," and "." present ("1,234.5", "1.234,5"): the last one is the decimal point, the
  other is a thousands separator;
- one kind appearing more than once ("1,234,567", "1.234.567"): thousands separators;
- spaces, no-break spaces and apostrophes between digits ("1 234,5", "1'234.5") are grouping.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from dtn_agent.engines import EngineUnavailable, ReadyCallback, ReportSink, TransferJob
from dtn_agent.engines.process import AnyOf, announce_when_listening, free_port, stream_process
from dtn_agent.pinning import PinnedCommand, PinningPlan, wrap_command
from dtn_agent.reports import Pinning, RateReport, TransferResult

ENGINE = "fdt"
DEFAULT_PORT = 54321
DEFAULT_REPORT_PERIOD = 5.0  # seconds assumed for the first line, before two timestamps give the real period

_UNITS = {"b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15}
_NUM = r"[0-9][0-9.,' \u00a0\u202f]*"
_RATE_RE = re.compile(
    rf"(?P<total>Total\s+)?Net\s+(?P<dir>In|Out):\s*(?P<rate>{_NUM}?)\s*(?P<unit>[KMGTP]?b)/s"
    rf"\s+Avg:\s*(?P<avg>{_NUM}?)\s*(?P<avg_unit>[KMGTP]?b)/s",
    re.IGNORECASE,
)
_TS_RE = re.compile(r"^\s*(?P<day>\d{2})/(?P<month>\d{2})\s+(?P<h>\d{2}):(?P<m>\d{2}):(?P<s>\d{2})")
_ERROR_RE = re.compile(r"\b(SEVERE|Exception|Error|refused|Unable to|finished with error)")
_FINAL_RE = re.compile(r"FDT(Reader|Writer)Session \( (?P<session>[^ )]+).*\) final stats:")
_STAT_RE = re.compile(r"^\s*(?P<key>Started|Ended|TotalBytes|TotalNetworkBytes|Exit Status):\s*(?P<value>.*?)\s*$")


class FdtError(RuntimeError):
    """FDT is missing, failed, or wrote a line that cannot be read; the message says which."""


def parse_number(text: str) -> float:
    """A number as FDT or a person may write it in any locale (see the module docstring for the rule)."""
    raw = text.strip()
    cleaned = re.sub(r"(?<=\d)[ '\u00a0\u202f](?=\d)", "", raw)
    if not re.fullmatch(r"\d[\d.,]*", cleaned) or cleaned[-1] in ".,":
        raise FdtError(f"not a number: {text!r}")
    commas, dots = cleaned.count(","), cleaned.count(".")
    if commas and dots:
        decimal = "," if cleaned.rfind(",") > cleaned.rfind(".") else "."
        group = "." if decimal == "," else ","
        if cleaned.count(decimal) > 1:
            raise FdtError(f"ambiguous number {text!r}: decimal separator {decimal!r} appears twice")
        return float(cleaned.replace(group, "").replace(decimal, "."))
    sep = "," if commas else "." if dots else ""
    if not sep:
        return float(cleaned)
    if cleaned.count(sep) == 1:
        return float(cleaned.replace(sep, "."))
    groups = cleaned.split(sep)
    if any(len(g) != 3 for g in groups[1:]):
        raise FdtError(f"ambiguous number {text!r}: {sep!r} repeats but does not group thousands")
    return float(cleaned.replace(sep, ""))


def parse_rate(number: str, unit: str) -> float:
    """Bits per second from FDT's number and unit ("67,822", "Gb" -> 67.822e9)."""
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise FdtError(f"unknown FDT rate unit {unit!r}/s (expected b, Kb, Mb, Gb, Tb or Pb)")
    return parse_number(number) * factor


@dataclass(frozen=True)
class FdtLine:
    """One parsed FDT rate line."""

    direction: str  # "in" (receiving) or "out" (sending)
    bits_per_second: float
    avg_bits_per_second: float
    timestamp: float | None  # seconds since 1 Jan 00:00 of the log's year (day/month/time)
    total: bool  # "Total Net ...": the sum over several sessions


def parse_line(line: str) -> FdtLine | None:
    """The rate line in `line`, or None when the line is something else."""
    match = _RATE_RE.search(line)
    if not match:
        return None
    ts = None
    tmatch = _TS_RE.match(line)
    if tmatch:
        day, month = int(tmatch["day"]), int(tmatch["month"])
        ts = (((month * 31 + day) * 24 + int(tmatch["h"])) * 60 + int(tmatch["m"])) * 60 + int(tmatch["s"])
    return FdtLine(
        direction=match["dir"].lower(),
        bits_per_second=parse_rate(match["rate"], match["unit"]),
        avg_bits_per_second=parse_rate(match["avg"], match["avg_unit"]),
        timestamp=float(ts) if ts is not None else None,
        total=bool(match["total"]),
    )


class FdtParser:
    """Feeds FDT console lines, yields one RateReport per rate line and a final one at the end.

    The interval end is the line's timestamp relative to the first line, plus one reporting
    period (the first line covers the first period; `report_period` until two timestamps show
    the real one). Bytes so far are FDT's average since the start times the elapsed time.
    Lines that look like errors (SEVERE, Exception, ...) are kept in `errors`.
    """

    def __init__(self, transfer_id: str, pinning: Pinning | None = None, report_period: float = DEFAULT_REPORT_PERIOD):
        self.transfer_id = transfer_id
        self.pinning = pinning or Pinning()
        self.report_period = report_period
        self.reports: list[RateReport] = []
        self.errors: deque[str] = deque(maxlen=20)
        self._first_ts: float | None = None
        self._prev_ts: float | None = None
        self._end = 0.0
        self._multi_session = False
        self._in_final = False
        self.final_stats: dict[str, str] = {}  # from the "final stats:" block, when FDT printed it

    @property
    def exit_ok(self) -> bool | None:
        """FDT's own verdict ("Exit Status: OK"), None when it printed no final statistics."""
        status = self.final_stats.get("Exit Status")
        return None if status is None else status == "OK"

    def _final_duration(self) -> float | None:
        """Seconds between the final block's Started and Ended dates (Java Date.toString)."""
        try:
            started, ended = (_java_date(self.final_stats[k]) for k in ("Started", "Ended"))
        except (KeyError, ValueError):
            return None
        return (ended - started).total_seconds()

    def feed_line(self, line: str) -> RateReport | None:
        """The report for one line of FDT output, or None when it carries no rate."""
        if _FINAL_RE.search(line):
            self._in_final = True
            return None
        if self._in_final:
            stat = _STAT_RE.match(line)
            if stat:
                self.final_stats[stat["key"]] = stat["value"]
                return None
            if line.strip():
                self._in_final = False
        parsed = parse_line(line)
        if parsed is None:
            if _ERROR_RE.search(line):
                self.errors.append(line.strip())
            if "active sessions" in line:
                self._multi_session = True
            return None
        if self._multi_session and not parsed.total:
            return None  # one session's share; the "Total" line that follows is the transfer's rate
        start = self._end
        if parsed.timestamp is None or self._first_ts is None:
            end = start + self.report_period
            if parsed.timestamp is not None:
                self._first_ts = parsed.timestamp
        else:
            gap = parsed.timestamp - (self._prev_ts if self._prev_ts is not None else parsed.timestamp)
            if gap < 0:  # the log crossed a month end or new year: count one period
                gap = self.report_period
            end = start + (gap if gap > 0 else self.report_period)
        if parsed.timestamp is not None:
            self._prev_ts = parsed.timestamp
        self._end = end
        report = RateReport(
            transfer_id=self.transfer_id,
            engine=ENGINE,
            start=start,
            end=end,
            bits_per_second=parsed.bits_per_second,
            bytes_total=int(parsed.avg_bits_per_second * end / 8),
            pinning=self.pinning,
        )
        self.reports.append(report)
        return report

    def finish(self) -> RateReport:
        """The final report: FDT's final statistics when printed, else its last average rate."""
        last = self.reports[-1] if self.reports else None
        end = last.end if last else 0.0
        total = last.bytes_total if last else 0
        if "TotalBytes" in self.final_stats:
            total = int(self.final_stats["TotalBytes"])
            duration = self._final_duration()
            if duration is not None and duration > 0:
                end = duration
        return RateReport(
            transfer_id=self.transfer_id,
            engine=ENGINE,
            start=0.0,
            end=end,
            bits_per_second=total * 8 / end if end > 0 else 0.0,
            bytes_total=total,
            pinning=self.pinning,
            final=True,
        )


def _java_date(text: str) -> datetime:
    """A Java `Date.toString()` ("Sat Nov 21 10:14:57 UTC 2026"), the zone name ignored."""
    parts = text.split()
    if len(parts) != 6:
        raise ValueError(f"not a Java date: {text!r}")
    return datetime.strptime(" ".join(parts[:4] + parts[5:]), "%a %b %d %H:%M:%S %Y")


def parse_output(
    output: str, transfer_id: str, pinning: Pinning | None = None, report_period: float = DEFAULT_REPORT_PERIOD
) -> list[RateReport]:
    """All reports of a whole FDT console output: one per rate line, then the final one."""
    parser = FdtParser(transfer_id, pinning, report_period)
    for line in output.splitlines():
        parser.feed_line(line)
    return [*parser.reports, parser.finish()]


# ---------------------------------------------------------------------------------------------
# command lines


@dataclass(frozen=True)
class FdtJob:
    """One FDT transfer from this host (the client) to an FDT server on `host`."""

    transfer_id: str
    host: str
    files: tuple[str, ...]
    port: int = DEFAULT_PORT
    streams: int = 4
    destination: str | None = None  # -d on the server side
    limit: str | None = None  # -limit: bytes/s, K or M suffixes ("4M")
    extra: tuple[str, ...] = field(default_factory=tuple)


def find_fdt(fdt_jar: str | Path | None, java: str = "java") -> tuple[str, str]:
    """The java binary and fdt.jar to run, checked to exist; FdtError saying what is missing and how to supply it."""
    if fdt_jar is None:
        raise FdtError(
            "no fdt.jar given: FDT is in no package registry; download fdt.jar "
            "(https://github.com/fast-data-transfer/fdt/releases) and pass --fdt-jar PATH"
        )
    jar = Path(fdt_jar)
    if not jar.is_file():
        raise FdtError(f"fdt.jar not found at {str(jar)!r}: pass the path of a downloaded fdt.jar with --fdt-jar PATH")
    java_path = shutil.which(java)
    if java_path is None:
        raise FdtError(
            f"java not found ({java!r} is not on PATH): FDT needs a Java runtime "
            "(Debian: apt-get install default-jre-headless)"
        )
    return java_path, str(jar)


def client_argv(job: FdtJob, fdt_jar: str, java: str = "java") -> list[str]:
    """`java -jar fdt.jar -c HOST -P streams -p port [-limit rate] [-d dir] files...`."""
    if job.streams < 1:
        raise ValueError(f"streams must be at least 1, not {job.streams}")
    if not job.files:
        raise ValueError("an FDT client job needs at least one file to send")
    argv = [java, "-jar", fdt_jar, "-c", job.host, "-P", str(job.streams), "-p", str(job.port)]
    if job.limit:
        argv += ["-limit", job.limit]
    if job.destination:
        argv += ["-d", job.destination]
    argv += list(job.extra)
    argv += list(job.files)
    return argv


def server_argv(
    fdt_jar: str, java: str = "java", port: int = DEFAULT_PORT, single_session: bool = True, extra: Sequence[str] = ()
) -> list[str]:
    """`java -jar fdt.jar -p port [-S]`: the receiver (`-S`: stop after the session)."""
    argv = [java, "-jar", fdt_jar, "-p", str(port)]
    if single_session:
        argv.append("-S")
    argv += list(extra)
    return argv


def pinned_command(argv: list[str], plan: PinningPlan | None, localalloc: bool = True) -> PinnedCommand:
    """`argv` wrapped by numactl (or pinned by sched_setaffinity) when a plan is given.

    FDT defaults to `--localalloc`, as on the SC16 DTNs.
    """
    if plan is None:
        return PinnedCommand(argv, Pinning(note="not pinned"))
    return wrap_command(argv, plan, localalloc=localalloc)


class FdtDriver:
    """Runs an FDT client (or server) and streams its rate lines to a callback."""

    def __init__(self, fdt_jar: str | Path | None, java: str = "java", report_period: float = DEFAULT_REPORT_PERIOD):
        self.fdt_jar = fdt_jar
        self.java = java
        self.report_period = report_period

    def run_argv(
        self,
        transfer_id: str,
        argv: list[str],
        reports: Callable[[RateReport], None],
        cancel: threading.Event | None = None,
        timeout: float | None = None,
        plan: PinningPlan | None = None,
        files: tuple[str, ...] = (),
        enough: Callable[[RateReport], bool] | None = None,
        tolerate_exit: Callable[[RateReport], bool] | None = None,
    ) -> TransferResult:
        """Run an FDT command line, reporting each rate line; failures come back as ok=False results.

        `enough`, given a report, says whether the transfer has done its work: FDT is then stopped
        and the run counts as complete (a /dev/zero stream has no end of its own).
        `tolerate_exit`, given the final report, says whether a non-zero exit or "Exit Status: Not
        OK" still counts as complete (a receiver whose sender was stopped that way).
        """
        pinned = pinned_command(argv, plan)
        parser = FdtParser(transfer_id, pinned.pinning, self.report_period)
        done = threading.Event()

        def on_line(line: str) -> None:
            report = parser.feed_line(line)
            if report is not None:
                reports(report)
                if enough is not None and enough(report):
                    done.set()

        try:
            outcome = stream_process(pinned.argv, on_line, AnyOf(cancel, done), timeout, pinned.preexec_fn)
        except FileNotFoundError as exc:
            return TransferResult(parser.finish(), ok=False, error=f"cannot start FDT: {exc}")
        final = parser.finish()
        if done.is_set() or (
            tolerate_exit is not None and not outcome.cancelled and not outcome.timed_out and tolerate_exit(final)
        ):
            reports(final)
            return TransferResult(final, ok=True, files=files)
        if outcome.cancelled:
            return TransferResult(final, ok=False, error="cancelled", files=files)
        if outcome.timed_out:
            return TransferResult(
                final, ok=False, error=f"FDT did not finish within {timeout:g} s: killed", files=files
            )
        if outcome.returncode != 0 or parser.exit_ok is False:
            lines = list(parser.errors) or outcome.stderr.strip().splitlines()[-5:]
            detail = " | ".join(lines)[:500] or "no error message"
            return TransferResult(
                final,
                ok=False,
                error=f"FDT exited with status {outcome.returncode}"
                f"{', Exit Status: Not OK' if parser.exit_ok is False else ''}: {detail}",
                files=files,
            )
        reports(final)
        return TransferResult(final, ok=True, files=files)

    def run(
        self,
        job: FdtJob,
        reports: Callable[[RateReport], None],
        cancel: threading.Event | None = None,
        timeout: float | None = None,
        plan: PinningPlan | None = None,
    ) -> TransferResult:
        """Send `job`'s files with an FDT client; a missing jar or java gives an ok=False result naming it."""
        try:
            java, jar = find_fdt(self.fdt_jar, self.java)
        except FdtError as exc:
            empty = RateReport(job.transfer_id, ENGINE, 0.0, 0.0, 0.0, 0, final=True)
            return TransferResult(empty, ok=False, error=str(exc), files=job.files)
        argv = client_argv(job, jar, java)
        return self.run_argv(job.transfer_id, argv, reports, cancel, timeout, plan, job.files)


# ---------------------------------------------------------------------------------------------
# the Engine interface (dtn_agent.engines.Engine)

ZERO_SOURCE = "/dev/zero"
NULL_DESTINATION = "/dev/null"


def limit_for(pacing_bps: int | None) -> str | None:
    """FDT's `-limit` value (bytes per second, FDT's default unit) for a pacing in bits per second."""
    if pacing_bps is None:
        return None
    return str(max(1, pacing_bps // 8))


class FdtEngine:
    """FDT behind the agent's Engine interface.

    `receive` runs a one-session FDT server (`-S`) on `job.port` (0: a free port) and reports its
    "Net In" lines; `send` runs the client with `-P streams` and `-limit` (pacing_bps / 8, FDT's
    bytes per second). Files: `job.files` are sent (directories with `-r`) into the directory the
    sending job names as `destination` (FDT's client picks the receiver's directory, `-d`).
    Memory-to-memory: FDT's network test, `/dev/zero` sent to `-d /dev/null`; FDT has no byte
    count, so the client is stopped once its reports show `job.size` bytes sent (reports come
    every few seconds, so it sends up to one report period more). `cpus` pins java with numactl
    `--localalloc`. Without a jar or java, send and receive raise EngineUnavailable before
    anything starts.
    """

    name = ENGINE

    def __init__(
        self,
        fdt_jar: str | Path | None = None,
        java: str = "java",
        timeout: float | None = None,
        report_period: float = DEFAULT_REPORT_PERIOD,
    ) -> None:
        self.fdt_jar = fdt_jar
        self.java = java
        self.timeout = timeout
        self.driver = FdtDriver(fdt_jar, java, report_period)

    def unavailable(self) -> str | None:
        """Why FDT cannot run here (no fdt.jar given or found, no java), or None."""
        try:
            find_fdt(self.fdt_jar, self.java)
        except FdtError as exc:
            return f"fdt: {exc}"
        return None

    def _tools(self) -> tuple[str, str]:
        """The java binary and the jar; EngineUnavailable naming what is missing."""
        try:
            return find_fdt(self.fdt_jar, self.java)
        except FdtError as exc:
            raise EngineUnavailable(f"fdt: {exc}") from exc

    def send(self, job: TransferJob, reports: ReportSink) -> TransferResult:
        """Send `job` (its files, or `size` bytes from /dev/zero) to the FDT server at `job.host`:`job.port`."""
        job.check("send")
        java, jar = self._tools()
        enough: Callable[[RateReport], bool] | None = None
        if job.size is not None:
            if job.size == 0:
                raise ValueError("fdt cannot send 0 bytes")
            size = job.size
            files: tuple[str, ...] = (ZERO_SOURCE,)
            destination = NULL_DESTINATION
            extra: tuple[str, ...] = ()

            def enough(report: RateReport) -> bool:
                return report.bytes_total >= size
        else:
            if job.destination is None:
                raise ValueError(
                    "fdt: a sending job with files must name the receiver's directory (destination): "
                    "FDT's client chooses it (-d)"
                )
            files = tuple(str(f) for f in job.files)
            destination = str(job.destination)
            extra = ("-r",) if any(Path(f).is_dir() for f in job.files) else ()
        fjob = FdtJob(
            job.transfer_id,
            job.host,
            files,
            port=job.port,
            streams=job.streams,
            destination=destination,
            limit=limit_for(job.pacing_bps),
            extra=extra,
        )
        argv = client_argv(fjob, jar, java)
        sent = () if job.size is not None else files
        return self.driver.run_argv(
            job.transfer_id, argv, reports, job.cancel, self.timeout, job.plan(), files=sent, enough=enough
        )

    def receive(self, job: TransferJob, reports: ReportSink, ready: ReadyCallback | None = None) -> TransferResult:
        """Serve one FDT session on `job.port` (0: a free port), calling `ready` once it listens.

        FDT listens on all addresses; `ready` gets `job.host` and the port. With `destination`
        the directory is created first. For a memory-to-memory job (`size`), the sender stops its
        /dev/zero stream by stopping its client, which FDT's server records as a session error:
        that still counts as complete once bytes arrived.
        """
        job.check("receive")
        java, jar = self._tools()
        if job.destination is not None:
            job.destination.mkdir(parents=True, exist_ok=True)
        port = job.port or free_port(job.host)
        argv = server_argv(jar, java, port=port, single_session=True)
        tolerate = (lambda final: final.bytes_total > 0) if job.size is not None else None
        with announce_when_listening(job.host, port, ready):
            return self.driver.run_argv(
                job.transfer_id, argv, reports, job.cancel, self.timeout, job.plan(), tolerate_exit=tolerate
            )
