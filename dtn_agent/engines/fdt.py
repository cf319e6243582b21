"""FDT (Caltech's Fast Data Transfer, `fdt.jar`) as a transfer engine: its console output parsed
into RateReports, its command lines, a process driver and the `FdtEngine`.

FDT is Java and in no package registry: the user supplies the jar (`--fdt-jar PATH`). What
follows is the output of FDT 0.27.0 (tests/data/fdt/ holds real captures). Every log line starts
with `YYYY-MM-DD HH:MM:SS LEVEL <class> <method>` (java.util.logging, on stderr; the level word is
in the JVM's language: INFO, INFORMATION, ...). Once per report period (`-reportDelay N`, default
5 s) the console reporter (ConsoleReportingTask.reportStatus) logs the rate of the last period
and the average since the session's first report:

    2026-11-23 18:14:27 INFO lia.util.net.copy.monitoring.ConsoleReportingTask reportStatus \
        Net Out: 8.735 Gb/s\tAvg: 8.735 Gb/s

"Net Out" on the sender, "Net In" on the receiver. A server serving several sessions at once logs
one record of several lines instead, each session's rate after its id, then the sum, without an
average:

    2026-11-23 19:24:11 INFO ...ConsoleReportingTask reportStatus 2 active sessions:
    2c881cf0-89e0-4cb2-96b7-d581807374d5Net In: 5.824 Gb/s\tAvg: 4.241 Gb/s
    50f7df38-b8bf-43f8-aae2-1fbe39801209Net In: 4.943 Gb/s\tAvg: 2.685 Gb/s
    Total Net In: 10.767 Gb/s

Rates use decimal bit units (b, Kb, Mb, Gb, Tb, Pb per second; 1 Kb = 1000 b) with three
decimals in the JVM's locale: a decimal comma in many ("6,208 Gb/s").

At its end each FDT session (a server also has a short first session that only hands out the
data port) logs a transfer-log record and prints its final statistics, the client twice:

    ... FDTReaderSession finalCleanup DATE=20261123192557.633000 HOST=vm PROG=fdt \
        START=20261123192551.486000 BUFFER=0 BLOCK=1048576 NBYTES=3000000000 STREAMS=2 DEST=[127.0.0.1] \
        TYPE=RETR CODE=226

    FDTReaderSession ( 83adf823-c47a-43f9-a41e-e780a3c28c90 ) final stats:
     Started: Mon Nov 23 19:25:51 UTC 2026
     Ended:   Mon Nov 23 19:25:57 UTC 2026
     Transfer period:   06s
     TotalBytes: 3000000000
     TotalNetworkBytes: 3000000000
     Exit Status: OK

The final report takes its bytes from TotalBytes (summed over the sessions), its duration from
the sessions' start and end (the transfer-log record's millisecond times, else Started/Ended),
and whether FDT succeeded from Exit Status. After a session has ended FDT keeps logging rates of
0 b/s for a few seconds while it winds down; those give no report (they would read as a stall).

Number rule (parse_number), chosen for that format and for hand-made logs:
- one kind of separator appearing once ("67,822", "67.822", "1,5"): it is the decimal point,
  because FDT never groups digits (a value of 1000 or more moves to the next unit);
- both "," and "." present ("1,234.5", "1.234,5"): the last one is the decimal point, the
  other is a thousands separator;
- one kind appearing more than once ("1,234,567", "1.234.567"): thousands separators;
- spaces, no-break spaces and apostrophes between digits ("1 234,5", "1'234.5") are grouping.

FDT prints no CPU figure. The driver measures it (`cpu_percent`, percent of one core): each
report carries what java (and anything it started) used since the previous report, read from
/proc (`dtn_agent.engines.cpu`); the first one also counts the JVM starting up. The final report
carries its use over the whole run. Parsed output alone (`parse_output`) says None: unknown.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from dtn_agent.engines import EngineUnavailable, ReadyCallback, ReportSink, TransferJob
from dtn_agent.engines.cpu import ProcessCpu
from dtn_agent.engines.process import announce_when_listening, free_port, stream_process
from dtn_agent.pinning import PinnedCommand, PinningPlan, wrap_command
from sdn_app.core.reports import Pinning, RateReport, TransferResult

ENGINE = "fdt"
DEFAULT_PORT = 54321
DEFAULT_REPORT_PERIOD = 5.0  # FDT's own default (-reportDelay), for output of a run we did not start
REPORT_PERIOD = 1  # what the engine asks FDT for: a rate every second, as the agent reports

_UNITS = {"b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15}
_NUM = r"[0-9][0-9.,' \u00a0\u202f]*"
_LOG_RE = re.compile(
    r"^(?P<day>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2}) (?P<level>\S+) (?P<source>\S+) (?P<method>\S+) ?"
    r"(?P<message>.*)$"
)
_RATE_RE = re.compile(
    rf"^(?P<session>[0-9a-fA-F]{{8}}-[0-9a-fA-F-]{{27}})?(?P<total>Total\s+)?Net\s+(?P<dir>In|Out):\s*"
    rf"(?P<rate>{_NUM}?)\s*(?P<unit>[KMGTP]?b)/s"
    rf"(?:\s+Avg:\s*(?P<avg>{_NUM}?)\s*(?P<avg_unit>[KMGTP]?b)/s)?",
    re.IGNORECASE,
)
_SESSIONS_RE = re.compile(r"^(?P<count>\d+) active sessions:$")
_FINAL_RE = re.compile(r"FDT(?:Reader|Writer)Session \( (?P<session>[^ )]+) \) final stats:")
_STAT_RE = re.compile(
    r"^\s*(?P<key>Started|Ended|Transfer period|TotalBytes|TotalNetworkBytes|Exit Status):\s*(?P<value>.*?)\s*$"
)
_XFERLOG_RE = re.compile(
    r"\bDATE=(?P<date>\d{14}(?:\.\d+)?) .*\bSTART=(?P<start>\d{14}(?:\.\d+)?) .*\bNBYTES=(?P<nbytes>\d+) "
    r"STREAMS=(?P<streams>\d+) .*\bCODE=(?P<code>\d+)"
)
_SESSION_RE = re.compile(r"(?:NEW CONTROL stream for|SESSION_ID msg:) (?P<session>[0-9a-fA-F]{8}-[0-9a-fA-F-]{27})\b")
_ENDED_RE = re.compile(r"Remote FDT(?:Reader|Writer)Session for session \[ (?P<session>[^ \]]+) \] finished")
_FILE_DONE_RE = re.compile(r"^(?P<path>.+) STATUS: (?P<status>.+?)\s*$")
_MD5_START, _MD5_END = "===\tRemote MD5 Sums\t===", "===\tEND Remote MD5 Sums\t==="
_MD5_RE = re.compile(r"^(?P<md5>[0-9a-fA-F]{32})  (?P<path>.+)$")
_PROBLEM_LEVELS = {"WARNING", "SEVERE"}
_EXCEPTION_RE = re.compile(r"^(?:Caused by: )?[\w$.]+(?:Exception|Error)\b")
_TROUBLE_RE = re.compile(r"finished with error|No such file|Permission denied|Unable to|Failed to")


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
    avg_bits_per_second: float | None  # None on a "Total" line, which has no average
    timestamp: float | None  # seconds (the log line's time read as UTC); None on a continuation line
    session: str | None = None  # the session id of one session's line in a several-sessions record
    total: bool = False  # "Total Net ...": the sum over several sessions


def _log_time(day: str, time: str) -> float:
    """Seconds of FDT's `YYYY-MM-DD HH:MM:SS` log time, read as UTC (the engine runs java in UTC)."""
    try:
        return datetime.strptime(f"{day} {time}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError as exc:
        raise FdtError(f"FDT log line with an impossible time {day} {time}: {exc}") from None


def parse_line(line: str) -> FdtLine | None:
    """The rate line in `line` (a whole log line or a line of a several-sessions record), or None."""
    text = line.rstrip("\r\n")
    timestamp = None
    log = _LOG_RE.match(text)
    if log:
        timestamp = _log_time(log["day"], log["time"])
        text = log["message"]
    match = _RATE_RE.match(text.strip())
    if not match:
        return None
    try:
        rate = parse_rate(match["rate"], match["unit"])
        avg = parse_rate(match["avg"], match["avg_unit"]) if match["avg"] is not None else None
    except FdtError as exc:
        raise FdtError(f"cannot read FDT rate line {line.strip()!r}: {exc}") from None
    return FdtLine(match["dir"].lower(), rate, avg, timestamp, match["session"], bool(match["total"]))


def _java_date(text: str) -> datetime:
    """A Java `Date.toString()` ("Mon Nov 23 18:15:30 UTC 2026"), the zone name ignored."""
    parts = text.split()
    if len(parts) != 6:
        raise ValueError(f"not a Java date: {text!r}")
    return datetime.strptime(" ".join(parts[:4] + parts[5:]), "%a %b %d %H:%M:%S %Y")


def _xferlog_time(text: str) -> datetime:
    """A transfer-log time, `YYYYmmddHHMMSS.ffffff`."""
    return datetime.strptime(text if "." in text else f"{text}.0", "%Y%m%d%H%M%S.%f")


@dataclass(frozen=True)
class SessionLog:
    """FDT's transfer-log record of one session (`finalCleanup DATE=... CODE=...`)."""

    start: datetime
    end: datetime
    nbytes: int
    streams: int  # 0: the server's first session, which only hands out the data port
    code: int  # 226: complete, 426: failed


class FdtParser:
    """Feeds FDT console lines, yields one RateReport per report period and a final one at the end.

    An interval ends at its line's log time, measured from one report period before the first
    rate line; it starts where the previous one ended. Bytes so far are the rates times their
    intervals. Several sessions: the "Total" line is the rate. Lines that tell of trouble
    (WARNING and SEVERE records, exceptions) are kept in `errors`.
    """

    def __init__(self, transfer_id: str, pinning: Pinning | None = None, report_period: float = DEFAULT_REPORT_PERIOD):
        if not report_period > 0:
            raise ValueError(f"report_period must be positive, not {report_period}")
        self.transfer_id = transfer_id
        self.pinning = pinning or Pinning()
        self.report_period = report_period
        self.reports: list[RateReport] = []
        self.errors: deque[str] = deque(maxlen=20)
        self.final_stats: dict[str, dict[str, str]] = {}  # per session id, from its "final stats:" block
        self.session_logs: list[SessionLog] = []
        self.sessions: set[str] = set()  # the ids of the sessions this FDT took part in
        self.sessions_ended: set[str] = set()  # sessions FDT said were over (their peer finished)
        self.files_done: dict[str, str] = {}  # file -> FDT's status for it ("OK"), as each one ends
        self.md5_sums: dict[str, str] = {}  # a receiver's file -> its MD5 as the sender read it (-md5)
        self._origin: float | None = None
        self._end = 0.0
        self._bytes = 0.0
        self._last_time: float | None = None
        self._block_time: float | None = None  # the time of the several-sessions record being read
        self._in_final: str | None = None  # the session whose final statistics are being read
        self._trouble = False  # the last log record was a WARNING or SEVERE one: its next lines tell why
        self._in_md5 = False  # reading the sender's MD5 sums

    @property
    def exit_ok(self) -> bool | None:
        """FDT's own verdict (every session's "Exit Status: OK"), None when it printed no final statistics."""
        statuses = [s["Exit Status"] for s in self.final_stats.values() if "Exit Status" in s]
        if not statuses:
            return None
        return all(status == "OK" for status in statuses)

    def feed_line(self, line: str) -> RateReport | None:
        """Read one line of FDT's output; the RateReport it completes, if any."""
        text = line.rstrip("\r\n")
        log = _LOG_RE.match(text)
        if log:
            return self._log_record(log, text)
        stripped = text.strip()
        if stripped == _MD5_START:
            self._in_md5 = True
            return None
        if self._in_md5:
            if stripped == _MD5_END:
                self._in_md5 = False
            elif md5 := _MD5_RE.match(text):
                self.md5_sums[md5["path"]] = md5["md5"].lower()
            return None
        final = _FINAL_RE.search(stripped)
        if final:
            self._in_final = final["session"]
            self.sessions.add(final["session"])
            self.final_stats.setdefault(final["session"], {})
            return None
        if self._in_final is not None:
            stat = _STAT_RE.match(text)
            if stat:
                self.final_stats[self._in_final][stat["key"]] = stat["value"]
                return None
            if stripped:
                self._in_final = None
        if not stripped:
            return None
        parsed = parse_line(stripped)
        if parsed is not None:
            if parsed.session is not None:
                return None  # one session's share; the "Total" line that ends the record is the rate
            when = self._block_time if parsed.total and self._block_time is not None else None
            self._block_time = None
            return self._report(parsed.bits_per_second, when)
        if stripped.startswith("at ") or stripped.startswith("..."):
            return None  # a stack frame
        if self._trouble or _EXCEPTION_RE.match(stripped) or _TROUBLE_RE.search(stripped):
            self.errors.append(stripped)
        return None

    def _log_record(self, log: re.Match[str], text: str) -> RateReport | None:
        when = _log_time(log["day"], log["time"])
        self._last_time = when
        self._in_final = None
        self._in_md5 = False
        self._block_time = None
        message = log["message"].strip()
        self._trouble = log["level"].upper() in _PROBLEM_LEVELS
        if (self._trouble and message) or _TROUBLE_RE.search(message):
            self.errors.append(message)
        several = _SESSIONS_RE.match(message)
        if several:
            self._block_time = when
            return None
        parsed = parse_line(text)
        if parsed is not None:
            return self._report(parsed.bits_per_second, when)
        xferlog = _XFERLOG_RE.search(message)
        if xferlog:
            try:
                self.session_logs.append(SessionLog(
                    _xferlog_time(xferlog["start"]), _xferlog_time(xferlog["date"]), int(xferlog["nbytes"]),
                    int(xferlog["streams"]), int(xferlog["code"])))
            except ValueError as exc:
                raise FdtError(f"cannot read FDT's transfer-log record {message!r}: {exc}") from None
            return None
        if session := _SESSION_RE.search(message):
            self.sessions.add(session["session"])
        ended = _ENDED_RE.search(message)
        if ended:
            self.sessions_ended.add(ended["session"])
        if log["method"] == "finishFileSession" and (done := _FILE_DONE_RE.match(message)):
            self.files_done[done["path"]] = done["status"]
        return None

    def _report(self, bits_per_second: float, when: float | None) -> RateReport | None:
        """The report of one period ending at log time `when` (None: one period after the last)."""
        start = self._end
        if when is None and self._last_time is not None and self._origin is not None:
            when = self._last_time
        if when is None:
            end = start + self.report_period
        else:
            if self._origin is None:
                self._origin = when - self.report_period - start
            end = max(start, when - self._origin)
        self._end = end
        self._bytes += bits_per_second * (end - start) / 8
        if bits_per_second == 0 and self.sessions_ended:
            return None  # FDT winding down after a session ended: not a stall
        report = RateReport(
            transfer_id=self.transfer_id,
            engine=ENGINE,
            start=start,
            end=end,
            bits_per_second=bits_per_second,
            bytes_total=int(self._bytes),
            pinning=self.pinning,
        )
        self.reports.append(report)
        return report

    def _duration(self) -> float | None:
        """Seconds from the first data session's start to the last one's end, when FDT said."""
        logs = [s for s in self.session_logs if s.streams > 0]
        if logs:
            return (max(s.end for s in logs) - min(s.start for s in logs)).total_seconds()
        spans = []
        for session, stats in self.final_stats.items():
            if "Started" not in stats or "Ended" not in stats or self._total_bytes(session, stats) == 0:
                continue
            try:
                spans.append((_java_date(stats["Started"]), _java_date(stats["Ended"])))
            except ValueError as exc:
                raise FdtError(f"FDT's final statistics of session {session}: {exc}") from None
        if spans:
            return (max(end for _, end in spans) - min(start for start, _ in spans)).total_seconds()
        return None

    @staticmethod
    def _total_bytes(session: str, stats: dict[str, str]) -> int:
        value = stats.get("TotalBytes", "0")
        if not value.isdigit():
            raise FdtError(f"FDT's final statistics of session {session}: TotalBytes {value!r} is not a number")
        return int(value)

    def finish(self) -> RateReport:
        """The final report: FDT's final statistics when printed, else what its rate lines add up to."""
        total = sum(self._total_bytes(session, stats) for session, stats in self.final_stats.items())
        end = self._end
        duration = self._duration()
        if total > 0 and duration is not None and duration > 0:
            end = duration
        if total == 0:  # no statistics, or FDT counted nothing (a -nettest receiver): the rates tell
            total = int(self._bytes)
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


def parse_output(
    output: str, transfer_id: str, pinning: Pinning | None = None, report_period: float = DEFAULT_REPORT_PERIOD
) -> list[RateReport]:
    """All reports of a whole FDT console output: one per report period, then the final one."""
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
    destination: str | None = None  # -d: the directory on the server's side
    limit: str | None = None  # -limit: bytes/s, K or M suffixes ("4M")
    extra: tuple[str, ...] = field(default_factory=tuple)  # flags without a value (-r, -md5, ...)


def find_fdt(fdt_jar: str | Path | None, java: str = "java") -> tuple[str, str]:
    """The java binary and fdt.jar to run, checked to exist; FdtError saying what is missing and how to supply it."""
    if fdt_jar is None:
        raise FdtError(
            "no fdt.jar given: FDT is in no package registry; download fdt.jar "
            "(https://github.com/fast-data-transfer/fdt/releases) and pass --fdt-jar PATH (or set TSDN_FDT_JAR)"
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


def java_prefix(fdt_jar: str, java: str = "java", home: str | Path | None = None) -> list[str]:
    """`java [-Duser.home=HOME -Djava.io.tmpdir=HOME] -Duser.timezone=UTC -jar fdt.jar -noupdates`.

    FDT keeps its update check and session logs in `home` (out of the real home and /tmp), logs in
    UTC, and never looks for updates. `-noupdates` comes right after the jar, followed by flags:
    FDT's parser takes the word after a flag as its value unless that word starts with "-" or the
    flag is on its short list of flags without a value (`-noupdates`, `-S` and `-md5` are not).
    """
    argv = [java]
    if home is not None:
        argv += [f"-Duser.home={home}", f"-Djava.io.tmpdir={home}"]
    return [*argv, "-Duser.timezone=UTC", "-jar", fdt_jar, "-noupdates"]


def _checked_path(path: str, what: str) -> str:
    """`path`, refused when FDT's parser would read it as something else (a flag, or SCP's host:path)."""
    if path.startswith("-") or ":" in path:
        raise ValueError(f"fdt: {what} {path!r} cannot be given to FDT, which reads '-' as a flag and ':' as "
                         "host:path; rename it")
    return path


def client_argv(
    job: FdtJob, fdt_jar: str, java: str = "java", home: str | Path | None = None, report_period: int = REPORT_PERIOD
) -> list[str]:
    """`java ... -jar fdt.jar -noupdates [extra] -c HOST -p port -P streams -reportDelay N [-limit rate]
    [-d dir] files...`."""
    if job.streams < 1:
        raise ValueError(f"streams must be at least 1, not {job.streams}")
    if not job.files:
        raise ValueError("an FDT client job needs at least one file to send")
    argv = [*java_prefix(fdt_jar, java, home), *job.extra, "-c", job.host, "-p", str(job.port), "-P", str(job.streams),
            "-reportDelay", str(report_period)]
    if job.limit:
        argv += ["-limit", job.limit]
    if job.destination:
        argv += ["-d", _checked_path(job.destination, "destination")]
    argv += [_checked_path(f, "file") for f in job.files]
    return argv


def server_argv(
    fdt_jar: str,
    java: str = "java",
    port: int = DEFAULT_PORT,
    single_session: bool = True,
    extra: Sequence[str] = (),
    home: str | Path | None = None,
    report_period: int = REPORT_PERIOD,
) -> list[str]:
    """`java ... -jar fdt.jar -noupdates [-S] [extra] -p port -reportDelay N`: the receiver (`-S`: stop
    after its sessions)."""
    argv = java_prefix(fdt_jar, java, home)
    if single_session:
        argv.append("-S")
    return [*argv, *extra, "-p", str(port), "-reportDelay", str(report_period)]


def pinned_command(argv: list[str], plan: PinningPlan | None, localalloc: bool = True) -> PinnedCommand:
    """`argv` wrapped by numactl (or pinned by sched_setaffinity) when a plan is given.

    FDT defaults to `--localalloc`, as on the SC16 DTNs.
    """
    if plan is None:
        return PinnedCommand(argv, Pinning(note="not pinned"))
    return wrap_command(argv, plan, localalloc=localalloc)


SESSION_LOG_DIR = Path("/tmp")  # FDT 0.27's server logs each session to /tmp/<id>.log, whatever java.io.tmpdir


def remove_session_logs(sessions: Iterable[str], where: Path = SESSION_LOG_DIR) -> None:
    """Remove the log files FDT left in `where` for `sessions` (ids as FDT printed them)."""
    for session in sessions:
        if not re.fullmatch(r"[0-9a-fA-F-]{36}", session):
            continue
        for path in where.glob(f"{session}.log*"):
            with contextlib.suppress(OSError):
                path.unlink()


def _empty(transfer_id: str, pinning: Pinning | None = None) -> RateReport:
    return RateReport(transfer_id, ENGINE, 0.0, 0.0, 0.0, 0, pinning=pinning or Pinning(), final=True)


class FdtDriver:
    """Runs an FDT client (or server) and streams its rate reports to a callback."""

    def __init__(self, fdt_jar: str | Path | None, java: str = "java", report_period: int = REPORT_PERIOD):
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
        expect_bytes: int | None = None,
        verify: Callable[[FdtParser], tuple[tuple[str, ...], str]] | None = None,
    ) -> TransferResult:
        """Run an FDT command line, reporting each period; failures come back as ok=False results.

        `expect_bytes`: the bytes FDT must have moved for the run to count as complete. `verify`,
        given what FDT said, checks the files it wrote: their paths, and what is wrong ("" when
        nothing); the result then says whether the checksums were verified.
        """
        pinned = pinned_command(argv, plan)
        parser = FdtParser(transfer_id, pinned.pinning, self.report_period)
        cpu = ProcessCpu()

        def on_line(line: str) -> None:
            report = parser.feed_line(line)
            if report is not None:
                reports(replace(report, cpu_percent=cpu.interval()))

        try:
            try:
                outcome = stream_process(pinned.argv, on_line, cancel, timeout, pinned.preexec_fn, merge_stderr=True,
                                         cpu=cpu)
            finally:
                remove_session_logs(parser.sessions)
            final = replace(parser.finish(), cpu_percent=cpu.overall())
        except FileNotFoundError as exc:
            return TransferResult(_empty(transfer_id, pinned.pinning), ok=False, error=f"cannot start FDT: {exc}")
        except FdtError as exc:
            return TransferResult(_empty(transfer_id, pinned.pinning), ok=False, error=f"FDT's output: {exc}",
                                  files=files)
        if outcome.cancelled:
            return TransferResult(final, ok=False, error="cancelled", files=files)
        if outcome.timed_out:
            return TransferResult(final, ok=False, error=f"FDT did not finish within {timeout:g} s: killed",
                                  files=files)
        if outcome.returncode != 0 or parser.exit_ok is False:
            detail = " | ".join(dict.fromkeys(parser.errors))[:500] or "no error message"
            return TransferResult(
                final,
                ok=False,
                error=f"FDT exited with status {outcome.returncode}"
                f"{', Exit Status: Not OK' if parser.exit_ok is False else ''}: {detail}",
                files=files,
            )
        if parser.exit_ok is None:
            return TransferResult(final, ok=False, files=files,
                                  error="FDT ended without its final statistics: the transfer's outcome is unknown")
        if expect_bytes is not None and final.bytes_total != expect_bytes:
            return TransferResult(final, ok=False, files=files,
                                  error=f"FDT moved {final.bytes_total} bytes, not the {expect_bytes} asked for")
        verified = None
        if verify is not None:
            files, problem = verify(parser)
            if problem:
                return TransferResult(final, ok=False, error=problem, checksums_verified=False, files=files)
            verified = True
        reports(final)
        return TransferResult(final, ok=True, checksums_verified=verified, files=files)

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
            return TransferResult(_empty(job.transfer_id), ok=False, error=str(exc), files=job.files)
        with tempfile.TemporaryDirectory(prefix="tsdn-fdt-") as home:
            argv = client_argv(job, jar, java, home, self.report_period)
            return self.run_argv(job.transfer_id, argv, reports, cancel, timeout, plan, job.files)


def md5_of(path: str | Path) -> str:
    """The MD5 of a file's content, in hex."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def verify_received(parser: FdtParser) -> tuple[tuple[str, ...], str]:
    """The files an FDT receiver wrote, and what is wrong with them ("" when each one's MD5 now is
    the one the sender read, `-md5`; FDT sends none for an empty file)."""
    received = tuple(parser.files_done)
    for path, status in parser.files_done.items():
        if status != "OK":
            return received, f"FDT ended {path} with status {status}"
        expected = parser.md5_sums.get(path)
        try:
            if expected is None:
                if Path(path).stat().st_size == 0:
                    continue
                return received, f"checksums not verified: the sender gave no MD5 for {path} (run without -md5?)"
            found = md5_of(path)
        except OSError as exc:
            return received, f"checksums not verified: cannot read {path}: {exc.strerror or exc}"
        if found != expected:
            return received, f"checksum mismatch: {path} has MD5 {found} here, {expected} at the sender"
    return received, ""


# ---------------------------------------------------------------------------------------------
# the Engine interface (dtn_agent.engines.Engine)

NULL_DESTINATION = "/dev/null"  # FDT's writer discards whatever it is sent to a name under /dev/null


def limit_for(pacing_bps: int | None) -> str | None:
    """FDT's `-limit` value (bytes per second, FDT's default unit) for a pacing in bits per second."""
    if pacing_bps is None:
        return None
    return str(max(1, pacing_bps // 8))


def memory_dir() -> str | None:
    """Where the sender's sparse source file of a memory-to-memory transfer goes: /dev/shm (tmpfs,
    whose holes read as zeros from memory) when there, else the temporary directory."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def file_plan(sources: Sequence[Path], destination: Path) -> tuple[str, tuple[str, ...]]:
    """FDT's `-d` directory and file list for `sources` (files and directories) sent into `destination`.

    Files land in `destination`, a directory's files in `destination`/its name, as with the
    builtin engine. FDT 0.27's server writes every file of a session into the one `-d` directory
    by its name alone, so all files must come from one directory: ValueError otherwise, or when
    there is no file at all.
    """
    placed: dict[str, list[str]] = {}
    for source in sources:
        source = Path(source).absolute()
        if source.is_dir():
            for path in sorted(source.rglob("*")):
                if path.is_file():
                    where = str(Path(source.name) / path.parent.relative_to(source))
                    placed.setdefault(where, []).append(str(path))
        elif source.is_file():
            placed.setdefault("", []).append(str(source))
        else:
            raise ValueError(f"fdt: {source} is not a file or directory")
    if not placed:
        raise ValueError(f"fdt: no file to send in {', '.join(str(s) for s in sources)}")
    if len(placed) > 1:
        where = ", ".join(str(destination / d) if d else str(destination) for d in sorted(placed))
        raise ValueError(f"fdt: these files would land in several directories ({where}), but FDT 0.27 writes all "
                         "files of a transfer into one directory by their names alone; send each directory as its own "
                         "transfer, or use the builtin engine for directory trees")
    (where, files), = placed.items()
    return str(destination / where) if where else str(destination), tuple(files)


class FdtEngine:
    """FDT behind the agent's Engine interface.

    `receive` runs an FDT server for its sessions (`-S`) on `job.port` (0: a free port) and
    reports its "Net In" rates; `send` runs the client with `-P streams` and `-limit` (pacing_bps
    / 8, FDT's bytes per second). Files: `job.files` are sent into the directory the sending job
    names as `destination` (FDT's client picks the receiver's directory, `-d`), a directory's
    files under its name; all from one directory (see `file_plan`). The sender's FDT computes
    each file's MD5 as it reads it (`-md5`) and the receiver checks the files it wrote against
    them. Memory-to-memory: the client sends a sparse file of exactly `job.size` bytes from tmpfs
    to `/dev/null` on the server, so FDT itself stops at the size and both sides end with FDT's
    own final statistics; each side checks that FDT moved `size` bytes. Rates come every
    `report_period` seconds (`-reportDelay`). `cpus` pins java with numactl `--localalloc`.
    Without a jar or java, send and receive raise EngineUnavailable before anything starts.
    """

    name = ENGINE
    repaces = False  # FDT fixes -limit when it starts: the switch's meter holds a changed rate

    def __init__(
        self,
        fdt_jar: str | Path | None = None,
        java: str = "java",
        timeout: float | None = None,
        report_period: int = REPORT_PERIOD,
    ) -> None:
        self.fdt_jar = fdt_jar
        self.java = java
        self.timeout = timeout
        self.report_period = report_period
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
        """Send `job` (its files, or `size` bytes from memory) to the FDT server at `job.host`:`job.port`."""
        job.check("send")
        if job.size is not None and job.size == 0:
            raise ValueError("fdt cannot send 0 bytes")
        if job.size is None and job.destination is None:
            raise ValueError(
                "fdt: a sending job with files must name the receiver's directory (destination): "
                "FDT's client chooses it (-d)"
            )
        java, jar = self._tools()
        with contextlib.ExitStack() as stack:
            home = stack.enter_context(tempfile.TemporaryDirectory(prefix="tsdn-fdt-"))
            if job.size is not None:
                scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="tsdn-fdt-zero-", dir=memory_dir()))
                source = Path(scratch) / f"tsdn-{job.transfer_id}.zero"
                with open(source, "wb") as handle:
                    handle.truncate(job.size)  # a hole: no memory or disk used, read back as zeros
                files: tuple[str, ...] = (str(source),)
                destination = NULL_DESTINATION
                extra: tuple[str, ...] = ()
            else:
                destination, files = file_plan(job.files, job.destination)  # type: ignore[arg-type]
                extra = ("-md5",)  # the receiver checks each file against the MD5 of what was read here
            fjob = FdtJob(job.transfer_id, job.host, files, port=job.port, streams=job.streams,
                          destination=destination, limit=limit_for(job.pacing_bps), extra=extra)
            argv = client_argv(fjob, jar, java, home, self.report_period)
            sent = () if job.size is not None else tuple(str(f) for f in job.files)
            return self.driver.run_argv(job.transfer_id, argv, reports, job.cancel, self.timeout, job.plan(),
                                        files=sent, expect_bytes=job.size)

    def receive(self, job: TransferJob, reports: ReportSink, ready: ReadyCallback | None = None) -> TransferResult:
        """Serve one FDT transfer on `job.port` (0: a free port), calling `ready` once it listens.

        FDT listens on all addresses; `ready` gets `job.host` and the port. With `destination`
        the directory is created first, and each file FDT wrote is checked against the MD5 the
        sender read. With `size`, the transfer is complete only when FDT received that many bytes.
        """
        job.check("receive")
        java, jar = self._tools()
        if job.destination is not None:
            job.destination.mkdir(parents=True, exist_ok=True)
        port = job.port or free_port(job.host)
        with tempfile.TemporaryDirectory(prefix="tsdn-fdt-") as home:
            argv = server_argv(jar, java, port=port, single_session=True, home=home, report_period=self.report_period)
            verify = verify_received if job.size is None else None
            with announce_when_listening(job.host, port, ready):
                return self.driver.run_argv(job.transfer_id, argv, reports, job.cancel, self.timeout, job.plan(),
                                            expect_bytes=job.size, verify=verify)
