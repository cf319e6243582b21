"""The CPU an engine's side of a transfer uses, for `RateReport.cpu_percent`: percent of one
core over each report's interval (100: one core busy all the time; several cores add up).

Two kinds of engine, two ways to measure it:

- The builtin engine moves the bytes on its stream threads, inside the agent's own process.
  `ThreadsCpu` reads the CPU clock of each of those threads (`pthread_getcpuclockid`, in
  nanoseconds) while it runs, and keeps what a thread used once it has ended. Not the whole
  process (`getrusage(RUSAGE_SELF)`), which also counts the agent's other transfers, its
  receivers, its reporting and gRPC threads.
- The external tools (iperf3, FDT's java, perftest) run as child processes. `ProcessCpu` adds
  up the user and system time of the child and of every process under it, those still running
  and those it has already reaped (`cutime`, `cstime`), from /proc/PID/stat. /proc counts in
  clock ticks (1/100 s on Linux): over a one-second interval, 1 % of a core.

Both count the kernel's work in the engine's own system calls (copies, TCP segmentation), not
what the kernel does later from timers and interrupts on no thread of the engine's (a paced
socket's transmissions, a NIC's completions): a sender paced at tens of Mbit/s, blocked in send
most of the time, may truly use well under 1 % of a core, and 0.0 for an interval in which its
threads never ran. Where it cannot be measured (no per-thread CPU clocks, no /proc, the process
already gone) the figure is None, unknown, never 0.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# Fields of /proc/PID/stat after "pid (comm) ", counted from 0 (proc(5) numbers them from 1 with
# pid and comm as 1 and 2): state, ppid, ..., utime (14), stime, cutime, cstime, ..., starttime (22).
_PPID, _UTIME, _STIME, _CUTIME, _CSTIME, _STARTTIME = 1, 11, 12, 13, 14, 19


def percent(cpu_seconds: float | None, wall_seconds: float) -> float | None:
    """Percent of one core: `cpu_seconds` used over `wall_seconds`; None when either is unknown or empty."""
    if cpu_seconds is None or not wall_seconds > 0:
        return None
    return max(0.0, cpu_seconds) / wall_seconds * 100.0


class ThreadsCpu:
    """CPU seconds used by the threads counted with `counting()` (each from the thread itself),
    readable from any thread while they run and after they end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clocks: dict[int, int | None] = {}  # thread ident -> its CPU clock (None: no such clock here)
        self._ended = 0.0  # CPU seconds of the threads that have left

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Count the calling thread's CPU time (since it started) while the block runs, and keep it after."""
        ident = threading.get_ident()
        clock: int | None
        try:
            clock = time.pthread_getcpuclockid(ident)
        except (AttributeError, OSError):  # not on this platform: unknown while the thread runs
            clock = None
        with self._lock:
            self._clocks[ident] = clock
        try:
            yield
        finally:
            spent = time.thread_time()
            with self._lock:
                del self._clocks[ident]
                self._ended += spent

    def seconds(self) -> float | None:
        """CPU seconds the counted threads have used so far; None when a running one cannot be read."""
        with self._lock:  # a thread leaves (and its clock goes) only under the lock
            total = self._ended
            for clock in self._clocks.values():
                if clock is None:
                    return None
                try:
                    total += time.clock_gettime(clock)
                except OSError:
                    return None
            return total


def _stat(pid: int, proc: Path) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None when it cannot be read."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rfind(")") + 2:].split()
    if len(fields) <= _STARTTIME or not all(f.lstrip("-").isdigit() for f in fields[_PPID:_STARTTIME + 1]):
        return None
    return fields


def _children(pid: int, proc: Path) -> list[int]:
    """The processes whose parent is `pid` (/proc/PID/task/*/children, else a scan of /proc)."""
    task = proc / str(pid) / "task"
    try:
        threads = os.listdir(task)
    except OSError:
        return []
    found: list[int] = []
    readable = False
    for tid in threads:
        try:
            found += [int(child) for child in (task / tid / "children").read_text().split()]
            readable = True
        except (OSError, ValueError):
            continue
    if readable:
        return found
    try:  # a kernel without CONFIG_PROC_CHILDREN
        entries = [int(name) for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return []
    return [child for child in entries if (fields := _stat(child, proc)) is not None and int(fields[_PPID]) == pid]


def tree_cpu_seconds(pid: int, proc: Path = PROC) -> float | None:
    """CPU seconds (user and system) used so far by process `pid` and every process under it,
    running or reaped; None when `pid` is not in /proc."""
    fields = _stat(pid, proc)
    if fields is None:
        return None
    ticks = 0
    seen: set[int] = set()
    todo = [(pid, fields)]
    while todo:
        current, stat = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        ticks += sum(int(stat[i]) for i in (_UTIME, _STIME, _CUTIME, _CSTIME))
        for child in _children(current, proc):
            if child not in seen and (child_stat := _stat(child, proc)) is not None:
                todo.append((child, child_stat))
    return ticks / CLOCK_TICKS


class ProcessCpu:
    """The CPU use of a child process and its descendants, report by report.

    `attach` it to the process as it starts; `interval()` at each report gives the percent of
    one core since the previous one (since the start, the first time); `finish()` takes the last
    sample once the process has exited but before it is reaped (while /proc still has it), and
    `overall()` is the percent over its whole run. A process that cannot be read, or whose pid
    now belongs to another process, gives None.
    """

    def __init__(self, proc: Path = PROC, clock: Callable[[], float] = time.monotonic) -> None:
        self.proc = proc
        self.clock = clock
        self.pid: int | None = None
        self._lock = threading.Lock()
        self._starttime: str | None = None
        self._started: tuple[float, float] | None = None  # (wall, cpu seconds) at the start
        self._last: tuple[float, float] | None = None  # the sample the next interval starts from
        self._finished: tuple[float, float | None] | None = None

    def attach(self, pid: int) -> None:
        """Measure process `pid`, which has just been started (so it has used no CPU yet)."""
        with self._lock:
            self.pid = pid
            fields = _stat(pid, self.proc)
            self._starttime = fields[_STARTTIME] if fields is not None else None
            self._started = self._last = (self.clock(), 0.0)
            self._finished = None

    def _seconds(self) -> float | None:
        if self.pid is None or self._starttime is None:
            return None
        fields = _stat(self.pid, self.proc)
        if fields is None or fields[_STARTTIME] != self._starttime:  # gone, or the pid reused
            return None
        return tree_cpu_seconds(self.pid, self.proc)

    def interval(self) -> float | None:
        """Percent of one core used since the last call (since the start, the first time); None when unknown."""
        with self._lock:
            if self._last is None or self._finished is not None:
                return None
            now, cpu = self.clock(), self._seconds()
            if cpu is None:
                return None
            then, before = self._last
            self._last = (now, cpu)
            return percent(cpu - before, now - then)

    def finish(self) -> None:
        """Take the last sample: the process has exited and is not yet reaped."""
        with self._lock:
            if self._started is not None and self._finished is None:
                self._finished = (self.clock(), self._seconds())

    def overall(self) -> float | None:
        """Percent of one core over the whole run (up to `finish`, else up to now); None when unknown."""
        with self._lock:
            if self._started is None:
                return None
            end, cpu = self._finished if self._finished is not None else (self.clock(), self._seconds())
            return percent(cpu, end - self._started[0]) if cpu is not None else None
