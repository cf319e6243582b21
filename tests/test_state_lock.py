"""One writer per state file: a second controller on the same `--state` refuses to start and
names the holder; the lock of a controller killed with -9 is taken over with no manual step; in
one process a second Controller is refused until the first stops.

Real `tsdn controller` processes (ledger only, ring8) on a state file in tmp_path; waits have
deadlines, nothing asserts on durations.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import grpc
import pytest
import yaml

from northbound.client import ApiError, TsdnClient
from sdn_app.core.errors import FailedPrecondition, InvalidArgument
from sdn_app.core.ledger import Ledger
from sdn_app.core.state_lock import StateLock, StateLocked, lock_path
from sdn_app.core.topology import Topology
from topologies import builtin_topology
from tsdn.controller import Controller, ControllerConfig

READY = "tsdn controller listening on "
TOKEN = ("rucio", "rucio-token-0123456789abcdef")
G = 10**9


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": [{"principal": TOKEN[0], "role": "service", "token": TOKEN[1]}]}))
    path.chmod(0o600)
    return path


class Process:
    """`tsdn controller` in a subprocess on `state`; `start` says whether it served or exited."""

    def __init__(self, state: Path, tokens: Path):
        self.state, self.tokens = state, tokens
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self.address = ""

    def start(self) -> bool:
        """Start it; True once it prints where it listens, False when it exits first."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tsdn", "controller", "--topology", "ring8", "--state", str(self.state),
             "--tokens", str(self.tokens), "--listen-grpc", "127.0.0.1:0", "--no-openflow", "--no-http",
             "--log-level", "WARNING"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.process.stderr is not None
        for line in self.process.stderr:  # EOF if it exits before serving
            self.lines.append(line)
            if line.startswith(READY):
                self.address = line[len(READY):].split()[0]
                threading.Thread(target=self._drain, daemon=True).start()
                return True
        self.process.wait(30)
        return False

    def _drain(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        """SIGKILL: no shutdown of any kind, the lock left to the kernel."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture
def processes(tmp_path: Path, tokens: Path) -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()


def _start(processes: list[Process], state: Path, tokens: Path) -> Process:
    process = Process(state, tokens)
    processes.append(process)
    process.start()
    return process


def _refusal(process: Process, holder: Process) -> str:
    """The one error line of a refused start; checks the exit code and that it names `holder`."""
    assert process.process is not None and process.process.returncode == 1, process.stderr
    assert "Traceback" not in process.stderr
    [line] = [line for line in process.lines if line.startswith("tsdn: error: ")]
    assert holder.process is not None
    assert f"pid {holder.process.pid} on host {socket.gethostname()}, started " in line, line
    return line


def test_a_second_controller_on_the_same_state_refuses_naming_the_holder(processes, tmp_path, tokens):
    state = tmp_path / "tsdn.db"
    first = _start(processes, state, tokens)
    assert first.address, first.stderr
    with TsdnClient(first.address, token=TOKEN[1], timeout=10) as client:
        booked = client.create_reservation("dtn1", "dtn2", 60 * G)

    second = _start(processes, state, tokens)
    assert not second.address, "a second controller served on a state file already in use"
    line = _refusal(second, first)
    assert f"state {state} is in use by another controller" in line
    assert f"lock file {lock_path(state)}" in line and "--state" in line
    started = re.search(r"started (\S+) \(", line)
    assert started is not None, line
    with pytest.raises(StateLocked) as refused:  # the lock file names the first as its holder
        StateLock(state)
    holder = refused.value.holder
    assert holder is not None and holder.pid == first.process.pid
    assert datetime.fromisoformat(started[1]).timestamp() == int(holder.started)  # shown to the second

    with TsdnClient(first.address, token=TOKEN[1], timeout=10) as client:  # the first is unharmed
        assert client.get_reservation(booked.name).state == booked.state
        with pytest.raises(ApiError) as full:
            client.create_reservation("dtn1", "dtn2", 60 * G)  # 120G on a 100G link: never booked twice
        assert full.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_controller_killed_with_sigkill_leaves_a_lock_the_next_one_takes(processes, tmp_path, tokens):
    state = tmp_path / "tsdn.db"
    first = _start(processes, state, tokens)
    with TsdnClient(first.address, token=TOKEN[1], timeout=10) as client:
        booked = client.create_reservation("dtn1", "dtn2", 60 * G)
    first.kill()
    assert lock_path(state).exists()  # the lock file stays, naming the dead holder; nobody removes it

    second = _start(processes, state, tokens)
    assert second.address, f"the next controller did not take over the lock:\n{second.stderr}"
    with TsdnClient(second.address, token=TOKEN[1], timeout=10) as client:
        assert client.get_reservation(booked.name).bandwidth_bps == 60 * G
    third = _start(processes, state, tokens)
    assert not third.address
    _refusal(third, second)  # the lock is the second's now


def test_a_stopped_controller_releases_its_lock(processes, tmp_path, tokens):
    state = tmp_path / "tsdn.db"
    first = _start(processes, state, tokens)
    assert first.process is not None
    first.process.send_signal(signal.SIGTERM)
    assert first.process.wait(30) == 0, first.stderr
    assert lock_path(state).read_text() == ""  # a clean stop leaves no holder named
    assert _start(processes, state, tokens).address


# -- in one process ------------------------------------------------------------------------------


def test_a_second_controller_in_the_same_process_is_refused_until_the_first_stops(start_controller, tmp_path,
                                                                                   tokens):
    first = start_controller("ring8", tokens=tokens)
    config = ControllerConfig(topology=builtin_topology("ring8"), listen_grpc="127.0.0.1:0",
                              state=tmp_path / "tsdn.db", tokens=tokens)
    with pytest.raises(StateLocked) as refused:
        Controller(config)
    assert isinstance(refused.value, FailedPrecondition)  # exit 1 from `tsdn controller`, like other refusals
    assert f"pid {os.getpid()} (this process) on host {socket.gethostname()}" in str(refused.value)
    assert refused.value.holder is not None and refused.value.holder.pid == os.getpid()
    assert first.worker.running  # the refusal changed nothing of the first's

    first.stop(grace=0.5)
    second = start_controller("ring8", tokens=tokens)  # the same state file
    with TsdnClient(second.address, token=TOKEN[1], timeout=10) as client:
        assert client.create_reservation("dtn1", "dtn2", 10 * G).state


def test_a_controller_that_fails_to_start_releases_the_lock(start_controller, tmp_path, tokens):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = f"127.0.0.1:{taken.getsockname()[1]}"
    try:
        with pytest.raises(FailedPrecondition, match="--listen-http"):
            Controller(ControllerConfig(topology=builtin_topology("ring8"), listen_grpc="127.0.0.1:0",
                                        state=tmp_path / "tsdn.db", tokens=tokens, listen_http=busy))
    finally:
        taken.close()
    assert start_controller("ring8", tokens=tokens).address


def test_a_plain_ledger_is_not_blocked_by_the_controller(start_controller, tmp_path, tokens):
    """Tools and tests that open a Ledger without `exclusive` take no lock (on the file or a copy)."""
    controller = start_controller("ring8", tokens=tokens)
    with TsdnClient(controller.address, token=TOKEN[1], timeout=10) as client:
        booked = client.create_reservation("dtn1", "dtn2", 10 * G)
    reader = Ledger(Topology.load(builtin_topology("ring8")).capacities(), tmp_path / "tsdn.db")
    try:
        assert [b.id for b in reader.bookings()] == [booked.name.removeprefix("reservations/")]
    finally:
        reader.close()
    with pytest.raises(StateLocked):  # an exclusive one is
        Ledger(reader.capacities, tmp_path / "tsdn.db", exclusive=True)


def test_the_lock_itself(tmp_path):
    state = tmp_path / "x.db"
    lock = StateLock(state)
    try:
        with pytest.raises(StateLocked, match=re.escape(f"lock file {state}.lock")) as refused:
            StateLock(state)
        assert refused.value.holder == lock.holder
    finally:
        lock.release()
    lock.release()  # twice is fine
    again = StateLock(state)
    again.release()
    with pytest.raises(InvalidArgument, match="cannot open its lock file"):
        StateLock(tmp_path / "no" / "such" / "dir.db")
