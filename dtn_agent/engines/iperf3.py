"""iperf3 as a transfer engine: its JSON output parsed into RateReports, and a process driver.

Two output forms are read:
- `--json` (`-J`): one document at the end, `intervals[].streams[]` plus `end` (all iperf3s);
- `--json-stream` (iperf3 >= 3.17): one JSON object per line, `{"event": "start" | "interval" |
  "end" | "error", "data": ...}`, parsed as it arrives.
Both go through one accumulator, so a transfer yields the same reports either way: one per
interval (omitted warm-up intervals are skipped) and a final one from `end`.

Child processes run through `dtn_agent.engines.process` (shared with the FDT and perftest drivers).

CPU (`cpu_percent`, percent of one core): the final report carries iperf3's own figure for its
process (`end.cpu_utilization_percent.host_total`); each `--json-stream` interval carries what
the iperf3 process used in it, read from /proc (`dtn_agent.engines.cpu`). With `--json` the
intervals arrive only once iperf3 has ended, and say None: unknown, iperf3 gives no CPU figure
per interval.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dtn_agent.engines import TransferJob
from dtn_agent.engines.cpu import ProcessCpu
from dtn_agent.engines.process import (
    announce_when_listening,
    free_port,
    kill_group,
    listening,
    stream_process,
)
from dtn_agent.pinning import PinnedCommand, PinningPlan, wrap_command
from sdn_app.core.reports import Pinning, RateReport, StreamRate, TransferResult

ENGINE = "iperf3"
JSON_STREAM_MIN_VERSION = (3, 17)


class Iperf3Error(RuntimeError):
    """iperf3 failed or wrote something that is not its JSON; the message quotes the tool."""


# ---------------------------------------------------------------------------------------------
# parsing


class Iperf3Accumulator:
    """Turns iperf3's interval and end objects into RateReports, keeping per-stream byte totals."""

    def __init__(self, transfer_id: str, pinning: Pinning | None = None) -> None:
        self.transfer_id = transfer_id
        self.pinning = pinning or Pinning()
        self._stream_bytes: dict[int, int] = {}  # socket -> bytes so far
        self._order: list[int] = []  # sockets in first-seen order: stream index
        self._bytes_total = 0
        self.reports: list[RateReport] = []
        self.final: RateReport | None = None

    def _index(self, socket: int) -> int:
        if socket not in self._stream_bytes:
            self._stream_bytes[socket] = 0
            self._order.append(socket)
        return self._order.index(socket)

    def on_start(self, start: dict[str, Any]) -> None:
        """Record the connected sockets so that stream numbers follow iperf3's connection order."""
        for conn in start.get("connected") or []:
            if isinstance(conn, dict) and "socket" in conn:
                self._index(int(conn["socket"]))

    def on_interval(self, interval: dict[str, Any]) -> RateReport | None:
        """The report for one `intervals[]` element; None for an omitted (warm-up) interval."""
        total = interval.get("sum") or {}
        if total.get("omitted"):
            return None
        streams: list[StreamRate] = []
        retrans: list[int] = []
        rtts: list[float] = []
        for s in interval.get("streams") or []:
            socket = int(s.get("socket", len(streams)))
            idx = self._index(socket)
            nbytes = int(s.get("bytes", 0))
            self._stream_bytes[socket] += nbytes
            rtt_ms = s["rtt"] / 1000.0 if "rtt" in s else None
            if rtt_ms is not None:
                rtts.append(rtt_ms)
            if "retransmits" in s:
                retrans.append(int(s["retransmits"]))
            streams.append(
                StreamRate(
                    stream=idx,
                    bits_per_second=float(s.get("bits_per_second", 0.0)),
                    bytes_total=self._stream_bytes[socket],
                    retransmits=int(s["retransmits"]) if "retransmits" in s else None,
                    rtt_ms=rtt_ms,
                )
            )
        if total:
            interval_bytes = int(total.get("bytes", 0))
            bps = float(total.get("bits_per_second", 0.0))
            start, end = float(total.get("start", 0.0)), float(total.get("end", 0.0))
        else:
            interval_bytes = sum(int(s.get("bytes", 0)) for s in interval.get("streams") or [])
            bps = sum(st.bits_per_second for st in streams)
            first = (interval.get("streams") or [{}])[0]
            start, end = float(first.get("start", 0.0)), float(first.get("end", 0.0))
        self._bytes_total += interval_bytes
        report = RateReport(
            transfer_id=self.transfer_id,
            engine=ENGINE,
            start=start,
            end=end,
            bits_per_second=bps,
            bytes_total=self._bytes_total,
            streams=tuple(streams),
            retransmits=int(total["retransmits"]) if "retransmits" in total else (sum(retrans) if retrans else None),
            rtt_ms=sum(rtts) / len(rtts) if rtts else None,
            pinning=self.pinning,
        )
        self.reports.append(report)
        return report

    def on_end(self, end: dict[str, Any]) -> RateReport:
        """The final report from the `end` object: received totals, sender retransmits and RTT, CPU."""
        sent = end.get("sum_sent") or {}
        received = end.get("sum_received") or {}
        udp_sum = end.get("sum") or {}
        summary = received or udp_sum or sent
        if not summary:
            raise Iperf3Error(f"iperf3 end has no sum_sent/sum_received: keys {sorted(end)}")
        streams: list[StreamRate] = []
        rtts: list[float] = []
        for i, s in enumerate(end.get("streams") or []):
            snd = s.get("sender") or {}
            rcv = s.get("receiver") or {}
            udp = s.get("udp") or {}
            side = rcv or udp or snd
            socket = int(side.get("socket", i))
            # with -R the client's sender side is the server's, and iperf3 writes 0 for its RTT: unknown
            rtt_ms = snd["mean_rtt"] / 1000.0 if snd.get("mean_rtt") else None
            if rtt_ms is not None:
                rtts.append(rtt_ms)
            streams.append(
                StreamRate(
                    stream=self._index(socket),
                    bits_per_second=float(side.get("bits_per_second", 0.0)),
                    bytes_total=int(side.get("bytes", 0)),
                    retransmits=int(snd["retransmits"]) if "retransmits" in snd else None,
                    rtt_ms=rtt_ms,
                )
            )
        streams.sort(key=lambda st: st.stream)
        cpu = _cpu_percent(end.get("cpu_utilization_percent"))
        retransmits = sent.get("retransmits")
        self.final = RateReport(
            transfer_id=self.transfer_id,
            engine=ENGINE,
            start=float(summary.get("start", 0.0)),
            end=float(summary.get("end", summary.get("seconds", 0.0))),
            bits_per_second=float(summary.get("bits_per_second", 0.0)),
            bytes_total=int(summary.get("bytes", 0)),
            streams=tuple(streams),
            retransmits=int(retransmits) if retransmits is not None else None,
            rtt_ms=sum(rtts) / len(rtts) if rtts else None,
            cpu_percent=cpu,
            pinning=self.pinning,
            final=True,
        )
        return self.final


def _cpu_percent(utilization: object) -> float | None:
    """iperf3's CPU figure for its own process (`host_total`, percent of one core), None when it
    gives none or one that is not a number of percent."""
    value = utilization.get("host_total") if isinstance(utilization, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _measured(report: RateReport, cpu: ProcessCpu) -> RateReport:
    """`report` with the CPU iperf3 used: in an interval, as read since the last one; in the final
    report iperf3's own figure, else what it used over its whole run."""
    if report.final:
        return report if report.cpu_percent is not None else replace(report, cpu_percent=cpu.overall())
    return replace(report, cpu_percent=cpu.interval())


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        snippet = text.strip()[:300] or "(no output)"
        raise Iperf3Error(f"iperf3 output is not JSON ({exc.msg}): {snippet!r}") from exc


def parse_json(output: str | dict[str, Any], transfer_id: str, pinning: Pinning | None = None) -> list[RateReport]:
    """The reports of an iperf3 `--json` document: one per interval, then the final one.

    An `error` in the document (iperf3 reports failures there) raises Iperf3Error quoting it.
    """
    doc = _load(output) if isinstance(output, str) else output
    if not isinstance(doc, dict):
        raise Iperf3Error(f"iperf3 JSON is a {type(doc).__name__}, not an object: {str(doc)[:200]!r}")
    if doc.get("error"):
        raise Iperf3Error(f"iperf3: {doc['error']}")
    acc = Iperf3Accumulator(transfer_id, pinning)
    acc.on_start(doc.get("start") or {})
    for interval in doc.get("intervals") or []:
        acc.on_interval(interval)
    end = doc.get("end")
    if not end:
        raise Iperf3Error("iperf3 JSON has no end section: the test did not finish")
    acc.on_end(end)
    assert acc.final is not None
    return [*acc.reports, acc.final]


class Iperf3StreamParser:
    """Incremental parser of `--json-stream` output: feed it lines, get reports as they complete."""

    def __init__(self, transfer_id: str, pinning: Pinning | None = None) -> None:
        self.acc = Iperf3Accumulator(transfer_id, pinning)
        self.error: str | None = None

    @property
    def final(self) -> RateReport | None:
        """The final report, once the `end` event has been read."""
        return self.acc.final

    def feed_line(self, line: str) -> list[RateReport]:
        """The reports completed by one output line (blank lines give none).

        An `error` event or a line that is not JSON raises Iperf3Error quoting the tool.
        """
        text = line.strip()
        if not text:
            return []
        obj = _load(text)
        if not isinstance(obj, dict) or "event" not in obj:
            raise Iperf3Error(f"iperf3 --json-stream line has no event: {text[:200]!r}")
        event, data = obj["event"], obj.get("data")
        if event == "error":
            self.error = str(data)
            raise Iperf3Error(f"iperf3: {data}")
        if event == "start":
            self.acc.on_start(data or {})
            return []
        if event == "interval":
            report = self.acc.on_interval(data or {})
            return [report] if report else []
        if event == "end":
            if isinstance(data, dict) and data.get("error"):
                raise Iperf3Error(f"iperf3: {data['error']}")
            return [self.acc.on_end(data or {})]
        return []  # unknown events from newer iperf3s are ignored


def parse_json_stream(output: str, transfer_id: str, pinning: Pinning | None = None) -> list[RateReport]:
    """The reports of a whole `--json-stream` output (see Iperf3StreamParser)."""
    parser = Iperf3StreamParser(transfer_id, pinning)
    reports: list[RateReport] = []
    for line in output.splitlines():
        reports.extend(parser.feed_line(line))
    if parser.final is None:
        raise Iperf3Error("iperf3 --json-stream output has no end event: the test did not finish")
    return reports


# ---------------------------------------------------------------------------------------------
# driver

_VERSION_RE = re.compile(r"iperf (\d+)\.(\d+)(?:\.(\d+))?")


def iperf3_version(binary: str = "iperf3") -> tuple[int, int, int]:
    """The installed iperf3's version, e.g. (3, 12, 0); Iperf3Error when it is not installed."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except FileNotFoundError as exc:
        raise Iperf3Error(f"iperf3 not found ({binary!r}): install the iperf3 package") from exc
    match = _VERSION_RE.search(out.stdout + out.stderr)
    if not match:
        raise Iperf3Error(f"cannot read the iperf3 version from {(out.stdout + out.stderr).strip()[:200]!r}")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def supports_json_stream(binary: str = "iperf3") -> bool:
    """Whether the installed iperf3 has `--json-stream` (3.17 and later)."""
    return iperf3_version(binary)[:2] >= JSON_STREAM_MIN_VERSION


@dataclass(frozen=True)
class Iperf3Job:
    """One memory-to-memory iperf3 test from this host (the client) to `host`."""

    transfer_id: str
    host: str
    port: int = 5201
    streams: int = 1
    duration: float = 10.0
    interval: float = 1.0
    reverse: bool = False  # -R: the server sends
    udp: bool = False
    bitrate: str | None = None  # -b, e.g. "10G"; iperf3's UDP default is 1 Mbit/s
    bind: str | None = None  # -B: local address
    bytes: int | None = None  # -n: send this many bytes instead of running for `duration`
    extra: tuple[str, ...] = field(default_factory=tuple)


def client_argv(job: Iperf3Job, json_stream: bool, binary: str = "iperf3") -> list[str]:
    """The iperf3 client command line for `job` (`--json-stream` or `--json`)."""
    if job.streams < 1:
        raise ValueError(f"streams must be at least 1, not {job.streams}")
    argv = [binary, "-c", job.host, "-p", str(job.port), "-P", str(job.streams)]
    if job.bytes is not None:
        if job.bytes <= 0:
            raise ValueError(f"iperf3 needs a positive byte count, not {job.bytes}")
        argv += ["-n", str(job.bytes)]
    else:
        argv += ["-t", f"{job.duration:g}"]
    argv += ["-i", f"{job.interval:g}"]
    argv.append("--json-stream" if json_stream else "--json")
    if job.reverse:
        argv.append("-R")
    if job.udp:
        argv.append("-u")
    if job.bitrate:
        argv += ["-b", job.bitrate]
    if job.bind:
        argv += ["-B", job.bind]
    argv += list(job.extra)
    return argv


def server_argv(port: int = 5201, one_off: bool = True, bind: str | None = None, binary: str = "iperf3") -> list[str]:
    """The iperf3 server command line (`-1`: serve one test, then exit)."""
    argv = [binary, "-s", "-p", str(port)]
    if one_off:
        argv.append("-1")
    if bind:
        argv += ["-B", bind]
    return argv


class Iperf3Server:
    """An iperf3 server process (context manager), started and waited for until it listens."""

    def __init__(
        self,
        port: int = 5201,
        one_off: bool = True,
        bind: str | None = None,
        binary: str = "iperf3",
        pinned: PinnedCommand | None = None,
    ) -> None:
        self.argv = pinned.argv if pinned else server_argv(port, one_off, bind, binary)
        self.preexec_fn = pinned.preexec_fn if pinned else None
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, ready_timeout: float = 10.0) -> Iperf3Server:
        """Start the server and wait until its port listens; Iperf3Error if it exits or never listens."""
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=self.preexec_fn,
            )
        except FileNotFoundError as exc:
            raise Iperf3Error(f"iperf3 not found ({self.argv[0]!r}): install the iperf3 package") from exc
        deadline = time.monotonic() + ready_timeout
        while not listening(self.port):
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
                raise Iperf3Error(f"iperf3 server on port {self.port} exited ({self.proc.returncode}): {err!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise Iperf3Error(f"iperf3 server did not listen on port {self.port} within {ready_timeout:g} s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Stop the server (its whole process group) if it still runs."""
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc)
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()

    def __enter__(self) -> Iperf3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Iperf3Driver:
    """Runs an iperf3 client for a job and streams its reports to a callback."""

    def __init__(self, binary: str = "iperf3", json_stream: bool | None = None) -> None:
        self.binary = binary
        self._json_stream = json_stream  # None: ask the installed iperf3

    def uses_json_stream(self) -> bool:
        """Whether runs use `--json-stream` (the installed iperf3 supports it) rather than `--json`."""
        if self._json_stream is None:
            self._json_stream = supports_json_stream(self.binary)
        return self._json_stream

    def run(
        self,
        job: Iperf3Job,
        reports: Callable[[RateReport], None],
        cancel: threading.Event | None = None,
        timeout: float | None = None,
        plan: PinningPlan | None = None,
    ) -> TransferResult:
        """Run `job`, calling `reports` per interval and for the final report; return how it ended.

        With a pinning `plan` the client runs under numactl (or sched_setaffinity). The default
        timeout is the job's duration plus 30 s (none for a byte count). Failures come back as a TransferResult with
        ok=False and an error quoting iperf3, not as exceptions.
        """
        stream = self.uses_json_stream()
        argv = client_argv(job, stream, self.binary)
        pinned = wrap_command(argv, plan) if plan else PinnedCommand(argv, Pinning(note="not pinned"))
        limit = timeout if timeout is not None else (job.duration + 30.0 if job.bytes is None else None)
        parser = Iperf3StreamParser(job.transfer_id, pinned.pinning)
        collected: list[str] = []
        sent: list[RateReport] = []
        cpu = ProcessCpu()

        def on_line(line: str) -> None:
            if stream:
                for rep in parser.feed_line(line):
                    rep = _measured(rep, cpu)
                    sent.append(rep)
                    reports(rep)
            else:
                collected.append(line)

        error = ""
        try:
            outcome = stream_process(pinned.argv, on_line, cancel, limit, pinned.preexec_fn, cpu=cpu)
        except FileNotFoundError:
            return self._failed(job, pinned.pinning, f"iperf3 not found ({self.binary!r}): install the iperf3 package")
        except Iperf3Error as exc:
            return self._failed(job, pinned.pinning, str(exc), sent)
        if outcome.cancelled:
            return self._failed(job, pinned.pinning, "cancelled", sent)
        if outcome.timed_out:
            return self._failed(job, pinned.pinning, f"iperf3 did not finish within {limit or 0:g} s: killed", sent)
        final = sent[-1] if sent and sent[-1].final else None
        if not stream:
            try:
                all_reports = parse_json("".join(collected), job.transfer_id, pinned.pinning)
            except Iperf3Error as exc:
                stderr = outcome.stderr.strip()
                return self._failed(job, pinned.pinning, f"{exc}{f' (stderr: {stderr[:300]!r})' if stderr else ''}")
            all_reports[-1] = _measured(all_reports[-1], cpu)
            for rep in all_reports:
                reports(rep)
            final = all_reports[-1]
        if final is None:
            error = f"iperf3 exited ({outcome.returncode}) without an end report: {outcome.stderr.strip()[:300]!r}"
            return self._failed(job, pinned.pinning, error, sent)
        if outcome.returncode not in (0, None):
            error = f"iperf3 exited with status {outcome.returncode}: {outcome.stderr.strip()[:300]!r}"
        return TransferResult(report=final, ok=not error, error=error)

    def _failed(self, job: Iperf3Job, pinning: Pinning, error: str, sent: Sequence[RateReport] = ()) -> TransferResult:
        """A failed result whose report sums what was reported before the failure."""
        last = sent[-1] if sent else None
        report = RateReport(
            transfer_id=job.transfer_id,
            engine=ENGINE,
            start=0.0,
            end=last.end if last else 0.0,
            bits_per_second=(last.bytes_total * 8 / last.end) if last and last.end > 0 else 0.0,
            bytes_total=last.bytes_total if last else 0,
            pinning=pinning,
            final=True,
        )
        return TransferResult(report=report, ok=False, error=error)


# ---------------------------------------------------------------------------------------------
# the Engine interface (dtn_agent.engines.Engine)


class Iperf3Engine:
    """iperf3 behind the agent's Engine interface: memory-to-memory only (`job.size` bytes).

    `receive` runs a one-off server (`iperf3 -s -1 -J`) on `job.host`:`job.port` and reports what
    it received; `send` runs the client with `-n size`. `pacing_bps` is split evenly over the
    streams (iperf3's `-b` is per stream); `cpus` pins the process with numactl (`--localalloc`).
    """

    name = ENGINE
    repaces = False  # iperf3 fixes -b when it starts: the switch's meter holds a changed rate

    def __init__(self, binary: str = "iperf3", json_stream: bool | None = None, timeout: float | None = None):
        self.binary = binary
        self.driver = Iperf3Driver(binary, json_stream)
        self.timeout = timeout

    def unavailable(self) -> str | None:
        """Why iperf3 cannot run here (the binary is missing), or None."""
        if shutil.which(self.binary) is None:
            return f"iperf3: {self.binary!r} not found on PATH: install the iperf3 package"
        return None

    def send(self, job: TransferJob, reports: Callable[[RateReport], None]) -> TransferResult:
        """Send `job.size` bytes to the iperf3 server at `job.host`:`job.port`."""
        job.check("send")
        if job.files:
            raise ValueError("iperf3 moves memory only: send files with the builtin or fdt engine")
        if job.size == 0:
            raise ValueError("iperf3 cannot send 0 bytes")
        bitrate = None
        if job.pacing_bps:
            bitrate = str(max(1, job.pacing_bps // job.streams))
        ijob = Iperf3Job(job.transfer_id, job.host, port=job.port, streams=job.streams, bitrate=bitrate, bytes=job.size)
        return self.driver.run(ijob, reports, job.cancel, timeout=self.timeout, plan=job.plan())

    def receive(
        self,
        job: TransferJob,
        reports: Callable[[RateReport], None],
        ready: Callable[[tuple[str, int]], None] | None = None,
    ) -> TransferResult:
        """Serve one iperf3 test on `job.host`:`job.port` (0: a free port) and report what arrived."""
        job.check("receive")
        if job.destination is not None:
            raise ValueError("iperf3 moves memory only: receive files with the builtin or fdt engine")
        port = job.port or free_port(job.host)
        argv = [*server_argv(port, one_off=True, bind=job.host, binary=self.binary), "--json"]
        plan = job.plan()
        pinned = wrap_command(argv, plan, localalloc=True) if plan else PinnedCommand(argv, Pinning(note="not pinned"))
        collected: list[str] = []
        cpu = ProcessCpu()
        try:
            with announce_when_listening(job.host, port, ready):
                outcome = stream_process(pinned.argv, collected.append, job.cancel, self.timeout, pinned.preexec_fn,
                                         cpu=cpu)
        except FileNotFoundError:
            return self.driver._failed(_as_job(job), pinned.pinning, f"iperf3 not found ({self.binary!r})")
        if outcome.cancelled:
            return self.driver._failed(_as_job(job), pinned.pinning, "cancelled")
        if outcome.timed_out:
            return self.driver._failed(
                _as_job(job), pinned.pinning, f"iperf3 server got no complete test within {self.timeout:g} s"
            )
        try:
            all_reports = parse_json("".join(collected), job.transfer_id, pinned.pinning)
        except Iperf3Error as exc:
            return self.driver._failed(_as_job(job), pinned.pinning, str(exc))
        all_reports[-1] = _measured(all_reports[-1], cpu)
        for rep in all_reports:
            reports(rep)
        error = "" if outcome.returncode == 0 else f"iperf3 server exited with status {outcome.returncode}"
        return TransferResult(report=all_reports[-1], ok=not error, error=error)


def _as_job(job: TransferJob) -> Iperf3Job:
    return Iperf3Job(job.transfer_id, job.host, port=job.port, streams=job.streams)
