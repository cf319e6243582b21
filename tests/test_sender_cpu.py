"""The CPU the engines report (`RateReport.cpu_percent`, percent of one core over the report's
interval): measured for the threads or processes that move the bytes, None where it cannot be,
never a made-up 0.

The builtin engine runs on loopback; the external tools run for real where they are installed
(iperf3, FDT's jar) and as stand-ins that replay real output while burning CPU where the real
tool cannot run here or lacks the mode (iperf3 --json-stream needs 3.17).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dtn_agent.engines import TransferJob, fdt, iperf3, process, rdma
from dtn_agent.engines.builtin import BuiltinEngine, receive_in_thread
from dtn_agent.engines.cpu import ProcessCpu, ThreadsCpu, tree_cpu_seconds
from sdn_app.core.reports import RateReport, TransferResult
from tests.test_fdt_transfers import JAR, needs_fdt
from tests.waiting import wait_for

DATA = Path(__file__).parent / "data" / "engines"
FDT_DATA = Path(__file__).parent / "data" / "fdt"


def burn(seconds: float) -> None:
    """Keep the calling thread on the CPU for `seconds` of its own CPU time."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


BURN = "import time\nuntil = time.thread_time() + {seconds}\nwhile time.thread_time() < until: pass\n"
"""Python source that burns `seconds` of CPU in a child process."""


def python_burning(seconds: float, then: str = "") -> list[str]:
    """A command line that burns `seconds` of CPU, then runs the Python statements `then`."""
    return [sys.executable, "-c", BURN.format(seconds=seconds) + then]


# ---------------------------------------------------------------------------- builtin engine


class Transfer:
    """A builtin memory-to-memory transfer on loopback, sent from a thread until enough reports
    have come, then cancelled (so that it lasts as long as the test needs, whatever the speed)."""

    def __init__(self, streams: int = 2, pacing_bps: int | None = None) -> None:
        self.reports: list[RateReport] = []
        self.cancel = threading.Event()
        self.results: list[TransferResult] = []
        job = TransferJob("cpu", "127.0.0.1", 0, streams=streams)
        (host, port), self._wait_receiver = receive_in_thread(BuiltinEngine(report_interval=0.25), job,
                                                              lambda report: None)
        send = TransferJob("cpu", host, port, streams=streams, size=1 << 50, pacing_bps=pacing_bps, cancel=self.cancel)
        self._sender = threading.Thread(
            target=lambda: self.results.append(BuiltinEngine(report_interval=0.25).send(send, self.reports.append)))
        self._sender.start()

    def intervals(self) -> list[RateReport]:
        return [r for r in list(self.reports) if not r.final]

    def run_until(self, intervals: int) -> tuple[list[RateReport], RateReport]:
        """Wait for `intervals` interval reports, cancel, and return them with the final report."""
        try:
            wait_for(lambda: len(self.intervals()) >= intervals, f"{intervals} interval reports", timeout=30)
        finally:
            self.cancel.set()
            self._sender.join(30)
            self._wait_receiver()
        assert self.results and self.results[0].error == "cancelled", self.results
        return self.intervals(), self.results[0].report


def test_builtin_sender_reports_the_cpu_its_stream_threads_use_while_bytes_flow() -> None:
    intervals, final = Transfer(streams=2).run_until(4)
    flowing = [r for r in intervals if r.bits_per_second > 0]
    assert flowing, intervals
    assert all(r.cpu_percent is not None and r.cpu_percent > 0 for r in flowing), [r.cpu_percent for r in flowing]
    assert final.final and final.cpu_percent is not None and final.cpu_percent > 0


def test_builtin_sender_does_not_count_the_agents_other_threads() -> None:
    """A thread of the same process busy on the CPU (another transfer, the agent's own work) is
    not the sender's: the old measure, the whole process (getrusage RUSAGE_SELF), counted it."""
    stop = threading.Event()
    spent: list[tuple[float, float]] = []  # the busy thread's CPU seconds and wall seconds

    def busy() -> None:
        began = time.monotonic()
        while not stop.is_set():
            burn(0.01)
        spent.append((time.thread_time(), time.monotonic() - began))

    neighbour = threading.Thread(target=busy, name="busy-neighbour")
    neighbour.start()
    try:
        intervals, final = Transfer(streams=2, pacing_bps=40 * 10**6).run_until(4)
    finally:
        stop.set()
        neighbour.join(30)
    cpu_seconds, wall = spent[0]
    neighbour_percent = cpu_seconds / wall * 100
    assert neighbour_percent > 20, neighbour_percent  # it did keep a core busy
    measured = [r.cpu_percent for r in [*intervals, final]]
    assert all(p is not None for p in measured), measured
    assert max(p for p in measured if p is not None) < neighbour_percent / 2, (measured, neighbour_percent)


def test_builtin_cpu_is_none_while_the_stream_threads_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without per-thread CPU clocks the interval reports say unknown (None), not 0; the final
    report, once every stream thread has ended and counted its own time, has the figure."""
    monkeypatch.delattr(time, "pthread_getcpuclockid")
    intervals, final = Transfer(streams=2).run_until(2)
    assert [r.cpu_percent for r in intervals] == [None] * len(intervals)
    assert final.cpu_percent is not None and final.cpu_percent > 0


def test_threads_cpu_counts_only_the_threads_it_was_told_of_and_keeps_what_ended() -> None:
    cpu = ThreadsCpu()
    burnt, finish = threading.Event(), threading.Event()
    own: list[float] = []

    def counted() -> None:
        with cpu.counting():
            burn(0.2)
            burnt.set()
            finish.wait(30)
            own.append(time.thread_time())

    worker = threading.Thread(target=counted)
    other = threading.Thread(target=burn, args=(0.5,))  # not counted
    other.start()
    worker.start()
    wait_for(burnt.is_set, "the counted thread to burn 0.2 s of CPU")
    running = cpu.seconds()
    assert running is not None and running >= 0.2  # read from another thread while it runs
    finish.set()
    worker.join(30)
    other.join(30)
    ended = cpu.seconds()
    assert ended is not None and abs(ended - own[0]) < 0.01 and ended < 0.45, (ended, own)


# ------------------------------------------------------------------------ child processes


def test_process_tree_counts_a_grandchild_running_and_once_reaped() -> None:
    """iperf3, numactl-wrapped java or a shell around a tool: the CPU of everything under the
    child counts, also once a descendant has ended (its parent's cutime/cstime)."""
    code = BURN.format(seconds=0.3) + "print('burnt', flush=True)\nimport sys\nsys.stdin.read()\n"
    shell = subprocess.Popen(["sh", "-c", f"{sys.executable} -c \"{code}\"; status=$?; exit $status"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert shell.stdout is not None and shell.stdin is not None
        assert shell.stdout.readline().strip() == "burnt"  # the grandchild burnt its CPU and waits
        running = tree_cpu_seconds(shell.pid)
        assert running is not None and running >= 0.25, running
        shell.stdin.close()
        os.waitid(os.P_PID, shell.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: /proc still has it
        ended = tree_cpu_seconds(shell.pid)
        assert ended is not None and ended >= 0.25, ended
    finally:
        shell.kill()
        shell.wait()


def test_stream_process_measures_its_child_per_line_and_over_the_run() -> None:
    cpu = ProcessCpu()
    per_line: list[float | None] = []
    then = "print('one', flush=True)\n" + BURN.format(seconds=0.2) + "print('two', flush=True)\n"
    outcome = process.stream_process(python_burning(0.2, then), lambda line: per_line.append(cpu.interval()),
                                     timeout=60, cpu=cpu)
    assert outcome.returncode == 0
    assert len(per_line) == 2 and all(p is not None and p > 0 for p in per_line), per_line
    overall = cpu.overall()
    assert overall is not None and overall > 0


def test_process_cpu_of_a_process_that_is_gone_is_unknown() -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    cpu = ProcessCpu()
    cpu.attach(done.pid)  # reaped already: nothing to read
    assert cpu.interval() is None and cpu.overall() is None

    killed = ProcessCpu()
    outcome = process.stream_process(python_burning(60), lambda line: None, timeout=0.5, cpu=killed)
    assert outcome.timed_out
    assert killed.overall() is None  # killed and reaped before a last sample: unknown, not 0


def test_proc_entries_that_cannot_be_read_are_unknown(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text("42 (iperf3) R 1 not numbers at all")
    assert tree_cpu_seconds(42, tmp_path) is None
    assert tree_cpu_seconds(43, tmp_path) is None


# ---------------------------------------------------------------------------------- iperf3


def test_iperf3_json_final_carries_iperf3s_own_cpu_figure_and_intervals_say_unknown() -> None:
    *intervals, final = iperf3.parse_json((DATA / "iperf3_tcp_P2.json").read_text(), "t")
    assert final.cpu_percent == pytest.approx(95.218723388962161)  # end.cpu_utilization_percent.host_total
    assert [r.cpu_percent for r in intervals] == [None, None]  # iperf3 gives none per interval


@pytest.mark.parametrize("figure", ['"lots"', "null", "-3", "true", '{"a": 1}'])
def test_iperf3_cpu_figure_that_is_not_a_percent_is_unknown(figure: str) -> None:
    doc = json.loads((DATA / "iperf3_tcp_P2.json").read_text())
    doc["end"]["cpu_utilization_percent"]["host_total"] = json.loads(figure)
    assert iperf3.parse_json(doc, "t")[-1].cpu_percent is None
    del doc["end"]["cpu_utilization_percent"]
    assert iperf3.parse_json(doc, "t")[-1].cpu_percent is None


def _fake_iperf3(tmp_path: Path, lines: list[str]) -> str:
    """A stand-in for iperf3 >= 3.17 that writes `lines` (its --json-stream output), burning CPU before each."""
    (tmp_path / "out.jsonstream").write_text("".join(line.rstrip("\n") + "\n" for line in lines))
    script = tmp_path / "iperf3"
    script.write_text(f"#!{sys.executable}\n" + (
        "import time\n"
        f"for line in open({str(tmp_path / 'out.jsonstream')!r}):\n"
        "    until = time.thread_time() + 0.1\n"
        "    while time.thread_time() < until: pass\n"
        "    print(line, end='', flush=True)\n"))
    script.chmod(0o755)
    return str(script)


def test_iperf3_json_stream_intervals_carry_the_cpu_iperf3_used(tmp_path: Path) -> None:
    lines = (DATA / "iperf3_tcp_P2.jsonstream").read_text().splitlines()
    driver = iperf3.Iperf3Driver(binary=_fake_iperf3(tmp_path, lines), json_stream=True)
    got: list[RateReport] = []
    result = driver.run(iperf3.Iperf3Job("t", "127.0.0.1", bytes=10**9), got.append, timeout=60)
    assert result.ok, result.error
    *intervals, final = got
    assert len(intervals) == 2
    assert all(r.cpu_percent is not None and r.cpu_percent > 0 for r in intervals), [r.cpu_percent for r in intervals]
    assert final is result.report and final.cpu_percent == pytest.approx(95.218723388962161)  # iperf3's own


def test_iperf3_final_without_iperf3s_figure_has_the_measured_one(tmp_path: Path) -> None:
    lines = (DATA / "iperf3_tcp_P2.jsonstream").read_text().splitlines()
    end = json.loads(lines[-1])
    del end["data"]["cpu_utilization_percent"]
    driver = iperf3.Iperf3Driver(binary=_fake_iperf3(tmp_path, [*lines[:-1], json.dumps(end)]), json_stream=True)
    result = driver.run(iperf3.Iperf3Job("t", "127.0.0.1", bytes=10**9), lambda report: None, timeout=60)
    assert result.ok, result.error
    assert result.report.cpu_percent is not None and result.report.cpu_percent > 0


def test_iperf3_bad_output_is_still_a_clear_error(tmp_path: Path) -> None:
    driver = iperf3.Iperf3Driver(binary=_fake_iperf3(tmp_path, ["this is not json"]), json_stream=True)
    result = driver.run(iperf3.Iperf3Job("t", "127.0.0.1", bytes=10**9), lambda report: None, timeout=60)
    assert not result.ok and "iperf3 output is not JSON" in result.error
    assert result.report.cpu_percent is None


# ------------------------------------------------------------------------------------- FDT


def test_fdt_reports_carry_the_cpu_java_used(tmp_path: Path) -> None:
    """FDT prints no CPU figure: each report has what the process used since the last one."""
    java = tmp_path / "replay-java"
    lines = (FDT_DATA / "mem-P2-reportDelay1-client.txt").read_text()
    (tmp_path / "out.txt").write_text(lines)
    java.write_text(f"#!{sys.executable}\n" + (
        "import sys, time\n"
        f"for line in open({str(tmp_path / 'out.txt')!r}):\n"
        "    if 'Net Out' in line:\n"
        "        until = time.thread_time() + 0.1\n"
        "        while time.thread_time() < until: pass\n"
        "    print(line, end='', file=sys.stderr, flush=True)\n"))
    java.chmod(0o755)
    (tmp_path / "fdt.jar").write_bytes(b"PK")
    got: list[RateReport] = []
    job = fdt.FdtJob("t", "127.0.0.1", files=("/etc/hostname",))
    result = fdt.FdtDriver(tmp_path / "fdt.jar", java=str(java)).run(job, got.append, timeout=60)
    assert result.ok, result.error
    *intervals, final = got
    assert intervals and all(r.cpu_percent is not None and r.cpu_percent > 0 for r in intervals), intervals
    assert final.final and final.cpu_percent is not None and final.cpu_percent > 0
    assert fdt.parse_output(lines, "t")[-1].cpu_percent is None  # the output alone does not say


@needs_fdt
def test_real_fdt_sender_and_receiver_report_their_cpu() -> None:
    engine = fdt.FdtEngine(JAR)
    ready = threading.Event()
    address: list[tuple[str, int]] = []
    received: list[RateReport] = []
    outcome: list[TransferResult] = []
    size = 600 * 2**20

    def receive() -> None:
        outcome.append(engine.receive(TransferJob("fdt-cpu", "127.0.0.1", 0, streams=2, size=size), received.append,
                                      lambda where: (address.append(where), ready.set())))

    receiver = threading.Thread(target=receive)
    receiver.start()
    try:
        wait_for(ready.is_set, "the FDT receiver to listen", timeout=60)
        sent: list[RateReport] = []
        result = engine.send(TransferJob("fdt-cpu", "127.0.0.1", address[0][1], streams=2, size=size), sent.append)
    finally:
        receiver.join(120)
    assert result.ok and outcome[0].ok, (result.error, outcome)
    assert result.report.cpu_percent is not None and result.report.cpu_percent > 0
    assert outcome[0].report.cpu_percent is not None and outcome[0].report.cpu_percent > 0
    assert all(r.cpu_percent is not None for r in received if not r.final), received


# -------------------------------------------------------------------------------- perftest


def test_perftest_reports_carry_the_cpu_ib_write_bw_used(tmp_path: Path) -> None:
    """perftest prints no CPU figure either; a stand-in replays real output after burning CPU."""
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    tool = tmp_path / "ib_write_bw"
    tool.write_text(f"#!{sys.executable}\n" + BURN.format(seconds=0.2) + (
        f"print(open({str(DATA / 'ib_write_bw_report_gbits.txt')!r}).read(), end='', flush=True)\n"))
    tool.chmod(0o755)
    got: list[RateReport] = []
    driver = rdma.RdmaDriver(binary=str(tool), sysfs=tmp_path / "sys")
    result = driver.run(rdma.RdmaJob("r", "127.0.0.1", duration=1), got.append, timeout=60)
    assert result.ok, result.error
    *rows, final = got
    assert rows and all(r.cpu_percent is not None and r.cpu_percent > 0 for r in rows), rows
    assert final is result.report and final.cpu_percent is not None and final.cpu_percent > 0
