"""A `tsdn controller` subprocess for benchmarks: started on a free loopback port, stopped for sure."""

from __future__ import annotations

import collections
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

START_TIMEOUT = 60.0
READY = "tsdn controller listening on "  # the line `tsdn controller` prints once it serves


class ControllerProcess:
    """`tsdn controller` in a subprocess with a service token; with `openflow` it controls switches there."""

    def __init__(self, workdir: Path, openflow: tuple[str, int] | None = None, scale: float = 1.0, *,
                 principal: str, token: str, topology: str = "sc16", extra: tuple[str, ...] = (),
                 more_tokens: tuple[dict, ...] = (), store: str | None = None):
        """`extra`: more `tsdn controller` arguments, e.g. ("--keep-ended", "10s"); `more_tokens`: more
        entries of its tokens file ({"principal": ..., "role": ..., "token": ...}); `store`: an
        etcd://... shared with other controllers, instead of a state file of its own."""
        self.extra = extra
        self.store = store
        self.more_tokens = more_tokens
        self.workdir = workdir
        self.principal, self.token, self.topology = principal, token, topology
        self.openflow = openflow
        self.scale = scale
        self.process: subprocess.Popen[str] | None = None
        self.address = ""
        self.tail: collections.deque[str] = collections.deque(maxlen=50)
        self._lines: queue.Queue[str | None] = queue.Queue()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> str:
        """Start it and wait for its "listening on HOST:PORT" line; return that address."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        tokens = self.workdir / "tokens.yaml"
        entry = {"principal": self.principal, "role": "service", "token": self.token}
        tokens.write_text(yaml.safe_dump({"tokens": [entry, *self.more_tokens]}))
        tokens.chmod(0o600)
        command = [sys.executable, "-m", "tsdn", "controller", "--topology", self.topology,
                   "--listen-grpc", "127.0.0.1:0",
                   *(("--store", self.store) if self.store else ("--state", str(self.workdir / "tsdn.db"))),
                   "--tokens", str(tokens), "--log-level", "WARNING", *self.extra]
        if self.openflow is None:
            command.append("--no-openflow")
        if self.openflow is not None:
            command += ["--listen-openflow", f"{self.openflow[0]}:{self.openflow[1]}",
                        "--emulation-scale", repr(self.scale)]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._drain, name="controller-stderr", daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"the controller did not say where it listens within {START_TIMEOUT:.0f} s:\n"
                                   + "".join(self.tail)) from None
            if line is None:
                raise RuntimeError(f"the controller exited ({self.process.wait()}) before listening:\n"
                                   + "".join(self.tail))
            if line.startswith(READY):
                self.address = line[len(READY):].split()[0]
                return self.address

    def _drain(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:  # keep reading so the pipe never fills
            self.tail.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 10 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
