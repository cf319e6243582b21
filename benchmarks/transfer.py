"""`tsdn bench transfer`: the builtin engine against iperf3 and FDT on loopback, and disk-to-disk
against memory.

Memory-to-memory, 1, 2 and 4 streams: in each round, for each stream count, the builtin engine
(sender in this process, receiver in a child process, as iperf3's client and server are two
processes) moves about `seconds` worth of bytes, `iperf3 -c 127.0.0.1 -P N -t T -J` runs against
one `iperf3 -s` started for the whole benchmark, and, when an fdt.jar is at hand (`--fdt-jar`,
env TSDN_FDT_JAR, or ../shared/tools/fdt.jar beside the repository), tsdn's FDT engine sends a
sized memory transfer to an FDT receiver of the same engine (a fresh `-S` server per run, as an
agent runs it). The order of the peers rotates from round to round (builtin, iperf3, FDT; then
iperf3, FDT, builtin; ...). The builtin
receiver copies every byte into a buffer, as iperf3's server does; a further run per round
measures the builtin receiver discarding in the kernel (`discard_in_kernel`, recv with
MSG_TRUNC), reported apart (`builtin_discard_gbps`), never in `ratio` or `vs_fdt`.

How each is measured (also said in the JSON, `measured`): the builtin's rate is the sender's
summary (from the streams' connection to the receiver's verdict); iperf3's is its `sum_received`
over `-t` (its control connection and set-up excluded); FDT's is the mean of its sender's
per-second "Net Out" rates over its full seconds of data (the first and last, partial seconds
dropped), so its JVM start and session set-up (its first rate comes seconds after it starts)
and its wind-down are excluded, as iperf3's set-up is; each FDT run must also end with FDT's
own TotalBytes equal to the size sent. FDT's own figure, TotalBytes over its session's start to end, is reported apart
(`fdt_session_gbps`).

Disk-to-disk: a tree of files on tmpfs (/dev/shm) sent with 2 streams, adler32 per chunk and
per file computed by the sender and checked by the receiver, files renamed when verified;
in the same round a memory-to-memory transfer of the same number of bytes with 2 streams.

Medians over rounds. Human lines go to stderr; the last line printed to stdout is one JSON object.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.report import free_port, print_result, say
from dtn_agent.engines import TransferJob
from dtn_agent.engines.builtin import BuiltinEngine
from dtn_agent.engines.fdt import FdtEngine, FdtError, find_fdt
from sdn_app.core.reports import RateReport, TransferResult

STREAMS = (1, 2, 4)
DISK_STREAMS = 2
TARGETS = {"1": 1.3, "2": 1.6}  # builtin / iperf3, memory-to-memory
G = 1e9
REPO = Path(__file__).resolve().parents[1]
MEASURED = {
    "builtin": "sender's summary: bytes over the time from the streams' connection to the receiver's verdict",
    "iperf3": "sum_received over -t seconds (iperf3's control connection and set-up excluded)",
    "fdt": "mean of the sender's per-second 'Net Out' rates over its full seconds of data (first and last, partial, "
           "dropped): JVM start, session set-up and wind-down excluded; FDT's TotalBytes must equal the size sent",
    "fdt_session": "FDT's final statistics: TotalBytes over its session's start to end (set-up and wind-down "
                   "included)",
}


@dataclass(frozen=True)
class Plan:
    """How long a benchmark run is."""

    rounds: int
    seconds: int  # iperf3 -t, and the builtin's target duration per transfer
    fdt_seconds: int  # FDT's target seconds of data: enough full seconds to average
    disk_files: int
    disk_file_mib: int

    @classmethod
    def for_run(cls, quick: bool) -> Plan:
        return cls(3, 1, 3, 4, 96) if quick else cls(7, 3, 6, 8, 128)


class Receiver:
    """A builtin-engine receiver in a child process, one transfer per request."""

    def __init__(self) -> None:
        root = Path(__file__).resolve().parents[1]
        self.process = subprocess.Popen([sys.executable, "-m", "benchmarks.transfer"], cwd=root,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def start(self, streams: int, discard: bool = False, destination: Path | None = None) -> int:
        """Start one receive; return its port."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"streams": streams, "discard": discard,
                                             "destination": str(destination) if destination else None}) + "\n")
        self.process.stdin.flush()
        return int(json.loads(self._line())["port"])

    def result(self) -> dict:
        """The outcome of the receive started last."""
        return json.loads(self._line())

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the receiver process ended (exit code {self.process.poll()})")
        return line

    def close(self) -> None:
        """End the child process."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def serve() -> None:
    """The child side of `Receiver`: read a request per line, answer with the port, then the result."""
    for line in sys.stdin:
        request = json.loads(line)
        destination = Path(request["destination"]) if request["destination"] else None
        engine = BuiltinEngine(discard_in_kernel=request["discard"])
        job = TransferJob("bench", "127.0.0.1", 0, streams=request["streams"], destination=destination)
        result = engine.receive(job, lambda report: None,
                                lambda address: print(json.dumps({"port": address[1]}), flush=True))
        print(json.dumps({"ok": result.ok, "error": result.error, "bytes": result.report.bytes_total,
                          "gbps": result.report.bits_per_second / G}), flush=True)


def builtin_memory(receiver: Receiver, streams: int, size: int, discard: bool = False) -> float:
    """Gbit/s of one builtin memory-to-memory transfer."""
    port = receiver.start(streams, discard=discard)
    sent = BuiltinEngine().send(TransferJob("bench", "127.0.0.1", port, streams=streams, size=size),
                                lambda report: None)
    received = receiver.result()
    if not (sent.ok and received["ok"]):
        raise RuntimeError(f"builtin transfer failed: {sent.error or received['error']}")
    return sent.report.bits_per_second / G


def builtin_disk(receiver: Receiver, source: Path, destination: Path) -> float:
    """Gbit/s of one builtin disk-to-disk transfer of the tree `source` into `destination`."""
    port = receiver.start(DISK_STREAMS, destination=destination)
    sent = BuiltinEngine().send(TransferJob("bench", "127.0.0.1", port, streams=DISK_STREAMS, files=(source,)),
                                lambda report: None)
    received = receiver.result()
    if not (sent.ok and received["ok"] and sent.checksums_verified):
        raise RuntimeError(f"builtin disk transfer failed: {sent.error or received['error']}")
    return sent.report.bits_per_second / G




def fdt_jar(given: str | None) -> tuple[str | None, str]:
    """The fdt.jar to measure (--fdt-jar, else TSDN_FDT_JAR, else ../shared/tools/fdt.jar), or None and
    why not. A jar named by the option or the variable that is not there is an error."""
    if given is None and (env := os.environ.get("TSDN_FDT_JAR")):
        given = env
        if not Path(env).is_file():
            raise RuntimeError(f"TSDN_FDT_JAR {env}: no such file")
    if given is not None and not Path(given).is_file():
        raise RuntimeError(f"--fdt-jar {given}: no such file")
    path = given or str(REPO.parent / "shared" / "tools" / "fdt.jar")
    try:
        find_fdt(path)
    except FdtError as error:
        if given is not None:
            raise RuntimeError(str(error)) from None
        return None, f"not measured: {error}"
    return path, ""


def steady_gbps(reports: list[RateReport]) -> float:
    """Gbit/s over an FDT sender's full seconds of data: the mean of its per-period rates, the first
    and last (partial) periods with bytes dropped when there are three or more."""
    moving = [r for r in reports if not r.final and r.bits_per_second > 0 and r.end > r.start]
    if len(moving) >= 3:
        moving = moving[1:-1]
    if not moving:
        raise RuntimeError("FDT reported no rate while sending")
    return sum(r.bits_per_second * (r.end - r.start) for r in moving) / sum(r.end - r.start for r in moving) / G


def fdt_memory(jar: str, streams: int, size: int) -> tuple[float, float]:
    """Gbit/s of one FDT memory-to-memory transfer of `size` bytes through tsdn's FDT engine (a
    receiver in a thread, as an agent runs it, and the sender here): steady, and FDT's own (session)."""
    engine = FdtEngine(jar, timeout=300)
    listening: queue.Queue[int] = queue.Queue()
    received: list[TransferResult] = []
    receiver = threading.Thread(target=lambda: received.append(engine.receive(
        TransferJob("bench", "127.0.0.1", 0, streams=streams, size=size), lambda report: None,
        lambda address: listening.put(address[1]))), daemon=True)
    receiver.start()
    try:
        port = listening.get(timeout=60)
    except queue.Empty:
        raise RuntimeError("the FDT receiver did not listen within 60 s") from None
    reports: list[RateReport] = []
    sent = engine.send(TransferJob("bench", "127.0.0.1", port, streams=streams, size=size), reports.append)
    receiver.join(120)
    if not sent.ok or not received or not received[0].ok:
        why = sent.error if not sent.ok else received[0].error if received else "the receiver did not end"
        raise RuntimeError(f"FDT transfer failed: {why}")
    return steady_gbps(reports), sent.report.bits_per_second / G


def iperf3_server(port: int) -> subprocess.Popen:
    """`iperf3 -s` on loopback, ready for clients."""
    server = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return server
        if server.poll() is not None:
            break
        time.sleep(0.05)  # polling the server's port with a deadline
    server.kill()
    raise RuntimeError(f"iperf3 -s did not listen on 127.0.0.1:{port}")


def iperf3_client(port: int, streams: int, seconds: int) -> float:
    """Gbit/s received in one `iperf3 -c` run."""
    command = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(streams), "-t", str(seconds), "-J"]
    for _ in range(5):
        done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 30)
        output = json.loads(done.stdout)
        if "busy" in output.get("error", ""):  # the server has not finished the last test yet
            time.sleep(0.2)  # the server's own cleanup; retried a few times
            continue
        if output.get("error"):
            raise RuntimeError(f"iperf3: {output['error']}")
        return output["end"]["sum_received"]["bits_per_second"] / G
    raise RuntimeError("iperf3 server stayed busy")


def iperf3_version() -> str:
    try:
        return subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    except OSError:
        return "missing"


def machine() -> dict:
    """Facts about where this ran."""
    load = os.getloadavg()
    return {"cpu_count": os.cpu_count(), "load_average_1m": round(load[0], 2), "python": platform.python_version(),
            "kernel": platform.release(), "iperf3": iperf3_version()}


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def make_tree(root: Path, files: int, mib: int) -> int:
    """Files of random bytes under `root` (one not a multiple of the chunk size); their total size."""
    block = os.urandom(1 << 20)
    total = 0
    for index in range(files):
        path = root / f"dir{index % 2}" / f"file{index}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        size = mib * (1 << 20) - (12345 if index == 0 else 0)
        with open(path, "wb") as handle:
            for start in range(0, size, len(block)):
                handle.write(block[: min(len(block), size - start)])
        total += size
    return total


def run(quick: bool = False, fdt_jar_path: str | None = None) -> dict:
    """Run the benchmark and return the result object."""
    if shutil.which("iperf3") is None:
        raise RuntimeError("iperf3 is not installed (Debian package iperf3)")
    jar, fdt_why = fdt_jar(fdt_jar_path)
    plan = Plan.for_run(quick)
    facts = machine()
    peers = "builtin, iperf3" + (", FDT" if jar else "")
    say(f"transfer: {plan.rounds} interleaved rounds ({peers}), {plan.seconds} s per run, streams {STREAMS}, loopback")
    if not jar:
        say(f"FDT {fdt_why}")
    port = free_port()
    server = iperf3_server(port)
    receiver = Receiver()
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    workdir = Path(tempfile.mkdtemp(prefix="tsdn-bench-transfer-", dir=shm))
    rates: dict[str, dict[str, list[float]]] = {
        str(n): {"builtin": [], "iperf3": [], "fdt": [], "fdt_session": [], "discard": []} for n in STREAMS}
    disk: list[float] = []
    memory_reference: list[float] = []
    estimate = {n: 25 * G for n in STREAMS}  # bits/s, refined from each run so a run lasts about `seconds`
    fdt_estimate = {n: 10 * G for n in STREAMS}

    def fdt_run(streams: int) -> None:
        assert jar is not None
        steady, session = fdt_memory(jar, streams, int(fdt_estimate[streams] * plan.fdt_seconds / 8))
        rates[str(streams)]["fdt"].append(steady)
        rates[str(streams)]["fdt_session"].append(session)
        fdt_estimate[streams] = statistics.median(rates[str(streams)]["fdt"]) * G

    try:
        for round_index in range(plan.rounds):
            for streams in STREAMS:
                key = str(streams)
                size = int(estimate[streams] * plan.seconds / 8)
                runs = [lambda s=streams, n=size: rates[str(s)]["builtin"].append(builtin_memory(receiver, s, n)),
                        lambda s=streams: rates[str(s)]["iperf3"].append(iperf3_client(port, s, plan.seconds))]
                if jar:
                    runs.append(lambda s=streams: fdt_run(s))
                turn = round_index % len(runs)
                for measure in runs[turn:] + runs[:turn]:
                    measure()
                rates[key]["discard"].append(builtin_memory(receiver, streams, size, discard=True))
                estimate[streams] = statistics.median(rates[key]["builtin"]) * G
                fdt_line = f"FDT {rates[key]['fdt'][-1]:.1f}, " if jar else ""
                say(f"round {round_index + 1} streams {streams}: builtin {rates[key]['builtin'][-1]:.1f}, "
                    f"iperf3 {rates[key]['iperf3'][-1]:.1f}, {fdt_line}builtin discarding "
                    f"{rates[key]['discard'][-1]:.1f} Gbit/s")
        source = workdir / "source" / "tree"
        total = make_tree(source, plan.disk_files, plan.disk_file_mib)
        say(f"disk: {plan.disk_files} files, {total / 2**20:.0f} MiB on {workdir} ({DISK_STREAMS} streams, adler32)")
        for round_index in range(plan.rounds):
            destination = workdir / f"dest{round_index}"
            destination.mkdir()
            disk_runs = [("disk", lambda d=destination: builtin_disk(receiver, source, d)),
                         ("memory", lambda: builtin_memory(receiver, DISK_STREAMS, total))]
            for name, measure in disk_runs if round_index % 2 == 0 else disk_runs[::-1]:
                (disk if name == "disk" else memory_reference).append(measure())
            shutil.rmtree(destination)
            say(f"round {round_index + 1}: disk-to-disk {disk[-1]:.1f}, memory-to-memory {memory_reference[-1]:.1f} "
                "Gbit/s")
    finally:
        receiver.close()
        server.terminate()
        server.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    streams_out = {}
    for key, by_tool in rates.items():
        builtin, iperf3 = median(by_tool["builtin"]), median(by_tool["iperf3"])
        discard = median(by_tool["discard"])
        fdt = median(by_tool["fdt"]) if by_tool["fdt"] else None
        streams_out[key] = {"builtin_gbps": builtin, "iperf3_gbps": iperf3, "ratio": round(builtin / iperf3, 2),
                            "fdt_gbps": fdt, "vs_fdt": round(builtin / fdt, 2) if fdt else None,
                            "fdt_session_gbps": median(by_tool["fdt_session"]) if fdt else None,
                            "builtin_discard_gbps": discard, "discard_ratio": round(discard / iperf3, 2),
                            "builtin_runs": [round(v, 2) for v in by_tool["builtin"]],
                            "iperf3_runs": [round(v, 2) for v in by_tool["iperf3"]],
                            "fdt_runs": [round(v, 2) for v in by_tool["fdt"]]}
        fdt_said = f", FDT {fdt} Gbit/s (builtin/FDT {streams_out[key]['vs_fdt']})" if fdt else ""
        say(f"{key} stream(s): builtin {builtin} Gbit/s, iperf3 {iperf3} Gbit/s, ratio {streams_out[key]['ratio']}"
            f"{fdt_said} (discarding receiver {discard} Gbit/s, ratio {streams_out[key]['discard_ratio']})")
    disk_gbps, memory_gbps = median(disk), median(memory_reference)
    say(f"disk-to-disk {disk_gbps} Gbit/s, memory-to-memory {memory_gbps} Gbit/s with {DISK_STREAMS} streams")
    return {
        "bench": "transfer",
        "quick": quick,
        "rounds": plan.rounds,
        "seconds_per_run": plan.seconds,
        "fdt_seconds_per_run": plan.fdt_seconds if jar else None,
        "peers": ["builtin", "iperf3", *(["fdt"] if jar else [])],
        "fdt_jar": jar,
        "fdt": "measured" if jar else fdt_why,
        "measured": MEASURED if jar else {k: v for k, v in MEASURED.items() if not k.startswith("fdt")},
        "streams": streams_out,
        "disk_gbps": disk_gbps,
        "disk_memory_gbps": memory_gbps,
        "disk_vs_memory": round(disk_gbps / memory_gbps, 2),
        "disk": {"streams": DISK_STREAMS, "files": plan.disk_files, "bytes": total, "on": str(workdir.parent),
                 "checksum": "adler32 per chunk (8 MiB) and per file"},
        "targets": {f"ratio_{k}_stream{'s' if k != '1' else ''}": v for k, v in TARGETS.items()},
        "targets_met": {k: streams_out[k]["ratio"] >= v for k, v in TARGETS.items()},
        "machine": facts,
    }


def main(quick: bool = False, fdt_jar: str | None = None) -> int:
    """Run the benchmark and print its JSON line; return the exit code."""
    return print_result("transfer", lambda: run(quick=quick, fdt_jar_path=fdt_jar))


if __name__ == "__main__":
    serve()
