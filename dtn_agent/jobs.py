"""The agent's transfer jobs: take them from the controller, run them with an engine, report back.

    runner = JobRunner(client, "caltech-a-dtn1", JobOptions(data_nic=nic, advertise="10.0.0.1"))
    runner.start()          # follows client.take_jobs(dtn) in a thread, reconnecting with backoff
    ...
    runner.stop()           # cancels running transfers; they report ok=False "agent stopping"
    client.close()          # ends the job stream (it blocks inside gRPC until then)
    runner.join()

Each (transfer, role) runs once, in its own thread, even when the controller hands it out again
after a reconnect. A RECEIVE job listens on `listen` (any free port) and reports the port; a SEND
job connects to the receiver the controller names. Every `RateReport` an engine makes goes to the
controller once (role RECEIVE or SEND); when an answer says stop, or a STOP job comes, the
engine's `TransferJob.cancel` event is set. A PACE job changes the pacing of the transfer's running
sender (`TransferJob.repace`): the builtin engine follows it on its live sockets; an engine that
cannot (iperf3, FDT, perftest) keeps its pacing, says so once in the log, and the switch's meter
holds the rate. A PACE for a transfer with no running sender here is ignored with a log line.
The end of each side is reported as an outcome with the engine's final report. Reports leave
from one sender thread per transfer side, so a slow or unreachable controller never holds up an
engine: rate reports that cannot be sent are dropped (the next one is a second later), and the
listening port and the outcome are retried for a while.

A controller restart does not stop a transfer: the controller keeps its transfers in its state
file and picks them up. While it is away, the engines run on, rate reports are dropped, and the
listening port and the outcome are retried (backing off up to `MAX_REPORT_BACKOFF`) for up to
`report_patience` seconds; the job stream reconnects and the restarted controller hands the same
jobs out again, which are not run twice. Only an answer of the controller saying stop (the
transfer ended) or NOT_FOUND (it does not know the transfer) stops a side.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from dtn_agent.engines import Engine, EngineUnavailable, Pacing, TransferJob, engine_named, engine_unavailable
from dtn_agent.host import Nic
from dtn_agent.pinning import NOT_PINNED_UNKNOWN_NODE, PinningPlan
from northbound.client import ApiError, TsdnClient
from northbound.convert import rate_out
from northbound.proto.tsdn.v1 import agent_pb2 as pb
from sdn_app.core.reports import RateReport, TransferResult
from sdn_app.core.units import format_bandwidth
from sdn_app.core.validation import MAX_OUTCOME_FILES, MAX_TEXT

log = logging.getLogger(__name__)

FIRST_BACKOFF = 0.5  # seconds before reconnecting after the first failure; doubles up to MAX_BACKOFF
MAX_BACKOFF = 10.0
FATAL = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED}
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
# A report that met these may not have reached a controller that is up: the controller stopping
# or restarting (a call cut off by its shutdown is CANCELLED or ABORTED), or too busy.
AWAY = RETRYABLE | {grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED}
MAX_QUEUED_RATES = 8  # rate reports waiting for the controller; more are dropped
REPORT_PATIENCE = 600.0  # seconds to keep retrying a listening port or an outcome (a controller restart)
MAX_REPORT_BACKOFF = 5.0  # seconds between retries of a report at most, so one lands soon after a restart
SEEN_JOBS = 10_000  # (transfer, role) pairs remembered to run each once
AGENT_STOPPING = "agent stopping"
ROLES = {pb.RECEIVE: "receive", pb.SEND: "send"}


@dataclass(frozen=True)
class JobOptions:
    """How this agent runs transfers.

    `data_nic`: the NIC transfers use; its CPUs pin the engines when its NUMA node is known.
    `listen`: the address receivers listen on. `advertise`: the address reported with a listening
    port, which a controller that controls no switches hands to the sender (empty: none).
    """

    fdt_jar: str | Path | None = None
    data_nic: Nic | None = None
    listen: str = "0.0.0.0"
    advertise: str = ""
    report_patience: float = REPORT_PATIENCE


def pinning_for(nic: Nic | None) -> PinningPlan:
    """Where transfers run: the data NIC's local CPUs on its NUMA node when sysfs knows the node;
    otherwise nowhere in particular, with the reason (said in every report)."""
    if nic is None:
        return PinningPlan((), None, "no data NIC known: not pinned")
    if nic.numa_node is None or nic.numa_node < 0:
        return PinningPlan((), None, NOT_PINNED_UNKNOWN_NODE)
    if not nic.local_cpus:
        return PinningPlan((), None, f"NIC {nic.name} lists no local CPUs: not pinned")
    return PinningPlan(tuple(nic.local_cpus), nic.numa_node)


class _Reporter:
    """The reports of one side of one transfer, sent from its own thread in order.

    `on_stop(reason)` is called when the controller answers a listening port or a rate with stop.
    """

    def __init__(self, client: TsdnClient, transfer: str, dtn: str, role: int, advertise: str,
                 patience: float, on_stop: Callable[[str], None]) -> None:
        self.client = client
        self.transfer = transfer
        self.dtn = dtn
        self.role = role
        self.advertise = advertise
        self.patience = patience
        self.on_stop = on_stop
        self._queue: queue.Queue[tuple[pb.TransferReport, bool] | None] = queue.Queue()
        self._rates = 0  # rate reports queued, not yet sent
        self._lock = threading.Lock()
        self._ended = False
        self._away = False  # the controller did not take the last report: say so once, and when it is back
        self._thread = threading.Thread(target=self._send_all, name=f"report-{transfer}-{ROLES.get(role)}",
                                        daemon=True)
        self._thread.start()

    def _report(self, **fields: object) -> pb.TransferReport:
        return pb.TransferReport(transfer=self.transfer, dtn=self.dtn, role=self.role, **fields)

    def ready(self, address: tuple[str, int]) -> None:
        """The engine's ready callback: the receiver listens on `address`."""
        self._put(self._report(listening_port=address[1], listening_host=self.advertise), essential=True)

    def rate(self, report: RateReport) -> None:
        """The engine's report sink: queue the report, or drop it when the controller lags behind."""
        with self._lock:
            if self._ended or self._rates >= MAX_QUEUED_RATES:
                log.debug("%s: rate report dropped (the controller lags behind)", self.transfer)
                return
            self._rates += 1
        self._queue.put((self._report(rate=rate_out(report)), False))

    def outcome(self, ok: bool, error: str = "", result: TransferResult | None = None) -> bool:
        """Queue the end of this side (once: later calls are ignored); whether this call queued it."""
        outcome = pb.TransferOutcome(ok=ok, error=error[:MAX_TEXT])  # the controller refuses longer
        if result is not None:
            if result.checksums_verified is not None:
                outcome.checksums_verified = result.checksums_verified
            outcome.files.extend(result.files[:MAX_OUTCOME_FILES])
        report = self._report(outcome=outcome)
        if result is not None:
            report.final.CopyFrom(rate_out(result.report))
        with self._lock:
            if self._ended:
                return False
            self._ended = True
        self._queue.put((report, True))
        self._queue.put(None)
        return True

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the queued reports to be sent (or given up); whether they were."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _put(self, report: pb.TransferReport, essential: bool) -> None:
        with self._lock:
            if self._ended:
                return
        self._queue.put((report, essential))

    def _send_all(self) -> None:
        while (item := self._queue.get()) is not None:
            report, essential = item
            if not essential:
                with self._lock:
                    self._rates -= 1
            answer = self._send(report, essential)
            if answer is not None and answer.stop and report.WhichOneof("what") != "outcome":
                self.on_stop(answer.reason or "the controller says stop")

    def _send(self, report: pb.TransferReport, essential: bool) -> pb.ReportTransferResponse | None:
        """Send one report; an essential one is retried while the controller is away, up to the
        patience. None when it was not taken."""
        what = report.WhichOneof("what")
        deadline = time.monotonic() + self.patience
        attempt = 0
        while True:
            try:
                answer = self.client.report_transfer(report)
            except ApiError as error:
                attempt += 1
                wait = min(MAX_REPORT_BACKOFF, FIRST_BACKOFF * 2 ** (attempt - 1)) * random.uniform(0.75, 1.0)
                if error.code is grpc.StatusCode.NOT_FOUND:  # a controller that is up does not know it
                    self.on_stop(f"the controller does not know {self.transfer}: {error.message}")
                    return None
                if error.code not in AWAY:
                    log.warning("%s: the controller refused the %s report: %s", self.transfer, what, error)
                    return None
                if not essential:
                    self._note_away(f"the controller did not take a {what} report: {error}; "
                                    "rate reports are dropped until it answers")
                    return None
                if time.monotonic() + wait > deadline:
                    log.warning("%s: the controller did not take the %s report within %g s: %s", self.transfer,
                                what, self.patience, error)
                    return None
                self._note_away(f"reporting {what}: {error}; retrying for up to {self.patience:g} s")
                log.debug("%s: reporting %s: %s; retrying in %.1f s", self.transfer, what, error, wait)
                time.sleep(wait)
            except ValueError as error:  # the agent closed its client: it stops
                log.warning("%s: the %s report was not sent: %s", self.transfer, what, error)
                return None
            else:
                if self._away:
                    self._away = False
                    log.info("%s: the controller takes reports again", self.transfer)
                return answer

    def _note_away(self, message: str) -> None:
        """Log that the controller is away, once until it answers again."""
        if not self._away:
            self._away = True
            log.warning("%s: %s", self.transfer, message)


class _Side:
    """One side (RECEIVE or SEND) of one transfer, running in its own thread."""

    def __init__(self, job: pb.TransferJob, client: TsdnClient, dtn: str, options: JobOptions) -> None:
        self.job = job
        self.cancel = threading.Event()
        self.reason = ""
        self.reporter = _Reporter(client, job.transfer, dtn, job.role, options.advertise, options.report_patience,
                                  self.stop)
        self.thread: threading.Thread | None = None
        self.pacing = Pacing(job.pacing_bps if job.HasField("pacing_bps") else None)  # SEND: changed by PACE jobs
        self.engine: Engine | None = None  # once built
        self._lock = threading.Lock()
        self._told_fixed = False

    def repace(self, bps: int) -> None:
        """A PACE job: pace the sender at `bps` from now on, if its engine can."""
        before = self.pacing.bps
        if bps == before:  # handed again after a reconnect
            return
        self.pacing.change(bps)
        engine = self.engine
        if engine is None or engine.repaces:  # not built yet: applied (or refused) when it starts
            log.info("%s: pacing %s -> %sbit/s", self.job.transfer,
                     f"{format_bandwidth(before)}bit/s" if before else "none", format_bandwidth(bps))
        else:
            self.pacing_fixed(engine)

    def pacing_fixed(self, engine: Engine) -> None:
        """Say, once, that `engine` keeps the pacing it started with."""
        with self._lock:
            if self._told_fixed:
                return
            self._told_fixed = True
        start = self.job.pacing_bps if self.job.HasField("pacing_bps") else None
        log.warning("%s: engine %s cannot change its pacing while it runs: it keeps %s; the switch's meter holds "
                    "the rate to the reservation's (the controller asked for %sbit/s)", self.job.transfer,
                    engine.name, f"{format_bandwidth(start)}bit/s" if start else "sending unpaced",
                    format_bandwidth(self.pacing.bps or 0))

    def stop(self, reason: str) -> None:
        """Cancel the engine (the first reason given is the one reported)."""
        if not self.cancel.is_set():
            self.reason = reason
            log.info("%s (%s): stopping: %s", self.job.transfer, ROLES[self.job.role], reason)
            self.cancel.set()


class JobRunner:
    """Runs the transfer jobs the controller hands to the agent of `dtn`, and reports how they go."""

    def _pinned(self) -> dict:
        """The pinning fields of every TransferJob this runner makes."""
        plan = self.pinning
        return {"cpus": plan.cpus or None, "numa_node": plan.numa_node, "pin_note": plan.note}

    def __init__(self, client: TsdnClient, dtn: str, options: JobOptions | None = None) -> None:
        self.client = client
        self.dtn = dtn
        self.options = options or JobOptions()
        self.pinning = pinning_for(self.options.data_nic)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._sides: dict[tuple[str, int], _Side] = {}
        self._stream: threading.Thread | None = None

    # -- the owner's side --------------------------------------------------------------------

    def start(self) -> JobRunner:
        """Follow the job stream in a thread; returns self."""
        if self._stream is None:
            self._stream = threading.Thread(target=self._follow, name=f"jobs-{self.dtn}", daemon=True)
            self._stream.start()
        return self

    def running(self) -> list[tuple[str, str]]:
        """The (transfer, role) sides running now, role "receive" or "send"."""
        with self._lock:
            return [(transfer, ROLES[role]) for transfer, role in self._sides]

    def stop(self, reason: str = AGENT_STOPPING, timeout: float = 10.0) -> None:
        """Take no more jobs, cancel the running transfers and wait up to `timeout` seconds for them
        to end and report. A side whose engine does not stop in time is reported as ended
        (ok=False, `reason`) and left to finish in its daemon thread.

        The job stream itself ends when the client is closed (or its next message arrives).
        """
        self._stop.set()
        with self._lock:
            sides = list(self._sides.values())
        for side in sides:
            side.stop(reason)
        deadline = time.monotonic() + timeout
        for side in sides:
            if side.thread is not None:
                side.thread.join(max(0.0, deadline - time.monotonic()))
            if side.thread is not None and side.thread.is_alive():
                log.warning("%s (%s): the engine did not stop within %g s", side.job.transfer,
                            ROLES[side.job.role], timeout)
                side.reporter.outcome(False, reason)
            side.reporter.join(max(0.1, deadline - time.monotonic()))

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the job stream thread to end; whether it did."""
        if self._stream is None:
            return True
        self._stream.join(timeout)
        return not self._stream.is_alive()

    # -- the job stream ----------------------------------------------------------------------

    def _follow(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                for job in self.client.take_jobs(self.dtn):
                    if failures:
                        log.info("job stream from the controller is back")
                        failures = 0
                    if self._stop.is_set():
                        break
                    self._take(job)
                wait = FIRST_BACKOFF  # the controller ended the stream (stopping): come back soon
            except ApiError as error:
                if error.code in FATAL:
                    log.error("the controller refuses jobs for %s: %s; taking no jobs", self.dtn, error)
                    return
                failures += 1
                wait = min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** (failures - 1)) * random.uniform(0.75, 1.0)
                log.warning("job stream: %s; reconnecting in %.1f s", error, wait)
            except Exception:  # never let the stream thread die silently
                failures += 1
                wait = MAX_BACKOFF
                log.exception("job stream failed; reconnecting in %.1f s", wait)
            self._stop.wait(wait)
        log.debug("job stream of %s ends", self.dtn)

    def _take(self, job: pb.TransferJob) -> None:
        """Start a new side, stop a running one, or ignore a job seen before."""
        if job.role == pb.PACE:
            self._pace(job)
            return
        if job.role == pb.STOP:
            with self._lock:
                sides = [s for (t, _), s in self._sides.items() if t == job.transfer]
                for role in ROLES:  # a late copy of a job of this transfer must not start it
                    self._remember((job.transfer, role))
            for side in sides:
                side.stop("stopped by the controller")
            return
        if job.role not in ROLES:
            log.warning("%s: job with unknown role %d ignored", job.transfer, job.role)
            return
        key = (job.transfer, job.role)
        with self._lock:
            if key in self._seen or self._stop.is_set():
                return
            self._remember(key)
            side = _Side(job, self.client, self.dtn, self.options)
            self._sides[key] = side
            side.thread = threading.Thread(target=self._run, args=(side,), daemon=True,
                                           name=f"{ROLES[job.role]}-{job.transfer.removeprefix('transfers/')[:8]}")
        log.info("%s: %s job (engine %s)", job.transfer, ROLES[job.role], job.engine or "builtin")
        side.thread.start()

    def _pace(self, job: pb.TransferJob) -> None:
        """Change the pacing of the transfer's running sender; ignored when none runs here."""
        with self._lock:
            side = self._sides.get((job.transfer, pb.SEND))
        if side is None:
            log.info("%s: PACE job ignored: no sender of this transfer runs here (unknown or ended)", job.transfer)
            return
        if not job.HasField("pacing_bps") or job.pacing_bps <= 0:
            log.warning("%s: PACE job without a positive pacing_bps ignored", job.transfer)
            return
        side.repace(job.pacing_bps)

    def _remember(self, key: tuple[str, int]) -> None:
        self._seen[key] = None
        while len(self._seen) > SEEN_JOBS:
            self._seen.popitem(last=False)

    # -- one side ----------------------------------------------------------------------------

    def _run(self, side: _Side) -> None:
        reporter = side.reporter
        try:
            result = self._engine_run(side)
        except ValueError as error:  # EngineUnavailable too: the job cannot run here
            log.warning("%s: %s", side.job.transfer, error)
            reporter.outcome(False, str(error))
        except Exception as error:  # an engine bug must still end the transfer
            log.exception("%s: the engine failed", side.job.transfer)
            reporter.outcome(False, f"agent error: {type(error).__name__}: {error}")
        else:
            error = result.error
            if side.cancel.is_set() and not result.ok and side.reason:
                error = side.reason if not error or error == "cancelled" else f"{side.reason} ({error})"
            log.info("%s (%s): %s", side.job.transfer, ROLES[side.job.role], "done" if result.ok else error)
            reporter.outcome(result.ok, error, result)
        finally:
            with self._lock:
                self._sides.pop((side.job.transfer, side.job.role), None)
        reporter.join(self.options.report_patience + 5.0)

    def _engine_run(self, side: _Side) -> TransferResult:
        job = side.job
        name = job.engine or "builtin"
        why = engine_unavailable(name, self.options.fdt_jar)
        if why:
            raise EngineUnavailable(why)
        engine = engine_named(name, fdt_jar=self.options.fdt_jar)
        side.engine = engine
        started = job.pacing_bps if job.HasField("pacing_bps") else None
        if job.role == pb.SEND and side.pacing.bps != started and not engine.repaces:
            side.pacing_fixed(engine)  # a PACE came before the engine was built
        size = job.size_bytes if job.HasField("size_bytes") else None
        destination = Path(job.destination) if job.destination else None
        transfer_id = job.transfer.removeprefix("transfers/")
        if job.role == pb.RECEIVE:
            spec = TransferJob(transfer_id, self.options.listen, 0, streams=job.streams or 1, size=size,
                               destination=destination, cancel=side.cancel, **self._pinned())
            return engine.receive(spec, side.reporter.rate, side.reporter.ready)
        spec = TransferJob(transfer_id, job.peer_host, job.peer_port, streams=job.streams or 1, size=size,
                           files=tuple(Path(f) for f in job.files), destination=destination,
                           pacing_bps=started, cancel=side.cancel, repace=side.pacing, **self._pinned())
        return engine.send(spec, side.reporter.rate)
