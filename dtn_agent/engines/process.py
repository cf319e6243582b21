"""Child processes of the external engines (iperf3, FDT, perftest): run one while streaming its
output lines, kill its whole process group, and tell when a server it started listens.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from dtn_agent.engines.cpu import ProcessCpu


class Cancel(Protocol):
    """What stream_process polls to know it should stop: a threading.Event, or anything with is_set()."""

    def is_set(self) -> bool:
        """Whether the process should be stopped now."""
        ...


@dataclass
class ProcessOutcome:
    """How a process run by stream_process ended."""

    returncode: int | None
    stderr: str
    cancelled: bool = False
    timed_out: bool = False
    elapsed: float = 0.0


def kill_group(proc: subprocess.Popen[Any], grace: float = 2.0) -> None:
    """SIGTERM the process group of `proc`, then SIGKILL it if it is still there after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def stream_process(
    argv: Sequence[str],
    on_line: Callable[[str], None],
    cancel: Cancel | None = None,
    timeout: float | None = None,
    preexec_fn: Callable[[], None] | None = None,
    env: dict[str, str] | None = None,
    merge_stderr: bool = False,
    cpu: ProcessCpu | None = None,
) -> ProcessOutcome:
    """Run `argv`, calling `on_line` (in this thread) for each stdout line as it arrives.

    With `merge_stderr`, stderr lines come to `on_line` too, in the order written (and the
    outcome's `stderr` is empty). Bytes the locale's encoding cannot decode arrive as U+FFFD. The
    process gets its own process group; on `cancel` or after `timeout` seconds the whole group is
    terminated (SIGTERM, then SIGKILL). A missing binary raises FileNotFoundError naming it. An
    exception from `on_line` kills the process and propagates. `cpu` is attached to the process as
    it starts, and, when it ends by itself, takes its last sample before the process is reaped.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        bufsize=1,
        start_new_session=True,
        preexec_fn=preexec_fn,
        env=env,
    )
    if cpu is not None:
        cpu.attach(proc.pid)
    lines: queue.Queue[str | None] = queue.Queue()
    err_tail: deque[str] = deque(maxlen=200)

    def pump_out() -> None:
        assert proc.stdout is not None
        for out_line in proc.stdout:
            lines.put(out_line)
        lines.put(None)

    def pump_err() -> None:
        assert proc.stderr is not None
        for err_line in proc.stderr:
            err_tail.append(err_line)

    pumps = (pump_out,) if merge_stderr else (pump_out, pump_err)
    readers = [threading.Thread(target=f, daemon=True) for f in pumps]
    for t in readers:
        t.start()
    deadline = started + timeout if timeout is not None else None
    cancelled = timed_out = False
    try:
        while True:
            if cancel is not None and cancel.is_set():
                cancelled = True
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                break
            try:
                item = lines.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is None:
                break
            on_line(item)
    except BaseException:
        kill_group(proc)
        raise
    if cancelled or timed_out:
        kill_group(proc)
    else:
        patience = time.monotonic() + 10.0
        if cpu is not None and _exited(proc, 10.0):
            cpu.finish()  # the process is a zombie: /proc still has what it used
        try:
            proc.wait(timeout=max(0.0, patience - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(proc)
    for t in readers:
        t.join(timeout=2.0)
    return ProcessOutcome(proc.returncode, "".join(err_tail), cancelled, timed_out, time.monotonic() - started)


def _exited(proc: subprocess.Popen[Any], timeout: float) -> bool:
    """Wait up to `timeout` seconds for `proc` to exit, without reaping it; whether it did."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:  # already reaped
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)  # the poll of a process that closed its output and is about to exit


def listening(port: int) -> bool:
    """Whether some socket listens on TCP `port` on this host (read from /proc: no connection is made)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 3 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def free_port(host: str) -> int:
    """A TCP port free on `host` right now (a server binds it a moment later)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextmanager
def announce_when_listening(
    host: str, port: int, ready: Callable[[tuple[str, int]], None] | None, poll: float = 0.02
) -> Iterator[threading.Event]:
    """While the block runs, call `ready((host, port))` once, as soon as TCP `port` listens here.

    Yields an Event that is set once `ready` has been called (also when `ready` is None).
    """
    announced = threading.Event()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if listening(port):
                if ready is not None:
                    ready((host, port))
                announced.set()
                return
            stop.wait(poll)

    watcher = threading.Thread(target=watch, name=f"announce-{port}", daemon=True)
    watcher.start()
    try:
        yield announced
    finally:
        stop.set()
        watcher.join(timeout=2.0)
