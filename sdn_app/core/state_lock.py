"""One writer per state file: an exclusive lock on `FILE.lock`, held for a controller's life.

The lock is the kernel's `flock` on a sidecar file next to the SQLite state, so it is released
by the kernel when its process dies in any way (kill -9 included): a new controller needs no
manual step. While held, the file names its holder (pid, host, start time) for the refusal
a second controller prints. SQLite's own locks only serialize transactions; they never make
a second process refuse to start, hence this one.

Only the controller locks (`Ledger(..., exclusive=True)`): tools and tests that open a
`Ledger` on a file (or a copy) take no lock and are never refused. The file is never deleted:
unlinking a lock file races with a process that opened it just before (both would then lock
different files), and an unlocked file is harmless; a clean release empties it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sdn_app.core.errors import FailedPrecondition, InvalidArgument
from sdn_app.core.units import format_time

LOCK_SUFFIX = ".lock"
_MAX_HOLDER_BYTES = 4096


@dataclass(frozen=True)
class Holder:
    """Who holds a state file: a process on a host, since a time (epoch seconds)."""

    pid: int
    host: str
    started: float

    def describe(self) -> str:
        """`pid 123 on host noc1, started 2025-01-01T10:00:00Z` (`this process` when it is us)."""
        who = f"pid {self.pid}" + (" (this process)" if self.is_this_process() else "")
        return f"{who} on host {self.host}, started {format_time(self.started)}"

    def is_this_process(self) -> bool:
        """Whether this holder is the calling process."""
        return self.pid == os.getpid() and self.host == socket.gethostname()


# Locks this process holds, by the lock file's real path: flock alone refuses a second lock
# from the same process on local file systems, but not where it is emulated by POSIX record
# locks (NFS), which never conflict within one process.
_held: dict[str, Holder] = {}
_held_guard = threading.Lock()


class StateLocked(FailedPrecondition):
    """Another controller holds the state file; `holder` says who, when the lock file tells."""

    def __init__(self, message: str, holder: Holder | None):
        super().__init__(message)
        self.holder = holder


def lock_path(state: str | Path) -> Path:
    """The sidecar lock file of a state file: `FILE.lock`."""
    return Path(f"{state}{LOCK_SUFFIX}")


class StateLock:
    """An exclusive lock on a state file, held until `release` or the process's end."""

    def __init__(self, state: str | Path):
        """Take the lock of `state`, or raise `StateLocked` naming the holder.

        `InvalidArgument` when the lock file cannot be opened (a missing directory, no permission).
        """
        self.state = str(state)
        self.path = lock_path(state)
        self._key = os.path.realpath(self.path)
        self._fd: int | None = None
        with _held_guard:
            if self._key in _held:
                raise self._refusal(_held[self._key])
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise InvalidArgument(f"state {self.state}: cannot open its lock file {self.path}: "
                                      f"{exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_holder(fd)
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise self._refusal(holder) from None
                raise InvalidArgument(f"state {self.state}: cannot lock {self.path}: {exc.strerror or exc}") from None
            self.holder = Holder(os.getpid(), socket.gethostname(), time.time())
            try:
                _write_holder(fd, self.holder)
            except OSError as exc:
                os.close(fd)
                raise InvalidArgument(f"state {self.state}: cannot write its lock file {self.path}: "
                                      f"{exc.strerror or exc}") from None
            self._fd = fd
            _held[self._key] = self.holder

    def _refusal(self, holder: Holder | None) -> StateLocked:
        who = holder.describe() if holder is not None else "a process whose details the lock file does not give"
        return StateLocked(
            f"state {self.state} is in use by another controller: {who} (lock file {self.path}); "
            "stop that controller first, or give this one another --state file", holder)

    @property
    def held(self) -> bool:
        """Whether this lock is still held."""
        return self._fd is not None

    def release(self) -> None:
        """Empty the lock file and let the lock go; a second call does nothing."""
        with _held_guard:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            _held.pop(self._key, None)
            with contextlib.suppress(OSError):  # emptying is courtesy: the lock goes with the fd
                os.ftruncate(fd, 0)
            os.close(fd)


def _write_holder(fd: int, holder: Holder) -> None:
    data = json.dumps({"pid": holder.pid, "host": holder.host, "started": holder.started}).encode() + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_holder(fd: int) -> Holder | None:
    try:
        data = json.loads(os.pread(fd, _MAX_HOLDER_BYTES, 0))
        return Holder(int(data["pid"]), str(data["host"]), float(data["started"]))
    except (OSError, ValueError, KeyError, TypeError):  # empty, being written, or not ours
        return None
