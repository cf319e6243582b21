"""A controller restart in the middle of a transfer, end to end on loopback: a real controller
(ledger only, ring8, state in tmp_path) and two real agents (`run_agent` in threads) run a
builtin-engine memory transfer paced by its booking; the controller is stopped (or killed) and a
new one is started on the same state file and port. The transfer goes on there: its agents keep
running it, their reports reach the new controller, and it ends there, releasing its path.

Waits have deadlines; nothing asserts on wall-clock durations. The transfer is paced to 95% of a
small booking, so it is still running when the controller comes back.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dtn_agent.agent import run_agent
from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2 as agent_pb
from northbound.proto.tsdn.v1 import bandwidth_pb2 as bw_pb
from northbound.proto.tsdn.v1 import transfer_pb2 as pb
from sdn_app.core import transfer_store
from sdn_app.core.ledger import Ledger
from sdn_app.core.topology import Topology
from tests.conftest import write_dtn_tokens
from tests.waiting import wait_for
from topologies import builtin_topology
from tsdn.cli import main
from tsdn.controller import Controller, ControllerConfig

SRC, DST = "dtn1", "dtn2"
SERVICE = ("rucio", "rucio-token-0123456789abcdef")
AGENT_TOKENS = {SRC: "agent1-token-0123456789abcdef", DST: "agent2-token-0123456789abcdef"}
BANDWIDTH = 50 * 10**6  # paced at 95 %: 64 MiB take about 11 s, time enough for a restart
SIZE = 64 << 20
ENDED = {pb.TRANSFER_SUCCEEDED, pb.TRANSFER_FAILED, pb.TRANSFER_CANCELLED}
READY = "tsdn controller listening on "


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    """A service token, and one agent token bound to each of the two DTNs."""
    return write_dtn_tokens(tmp_path, SERVICE, AGENT_TOKENS)


@pytest.fixture
def agents() -> Iterator[Callable[[str], None]]:
    """`agents(address)` starts the agents of SRC and DST against that controller address; they
    are stopped (and must stop cleanly) after the test."""
    stop = threading.Event()
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []

    def agent(address: str, dtn: str) -> None:
        try:
            run_agent(address, dtn, AGENT_TOKENS[dtn], "/", 0.5, stop=stop, timeout=5.0,
                      listen="127.0.0.1", advertise="127.0.0.1")
        except BaseException as error:  # reported by the teardown
            errors.append(error)

    def start(address: str) -> None:
        for dtn in (SRC, DST):
            thread = threading.Thread(target=agent, args=(address, dtn), name=f"agent-{dtn}", daemon=True)
            thread.start()
            threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not [t for t in threads if t.is_alive()], "an agent did not stop"
    assert not errors, errors


class ControllerProcess:
    """`tsdn controller` in a subprocess (ledger only, ring8) on `state`, killed for sure at the end."""

    def __init__(self, state: Path, tokens: Path):
        self.state, self.tokens = state, tokens
        self.process: subprocess.Popen[str] | None = None

    def start(self, listen: str = "127.0.0.1:0") -> str:
        """Start it and return the address it says it listens on."""
        command = [sys.executable, "-m", "tsdn", "controller", "--topology", "ring8", "--state",
                   str(self.state), "--tokens", str(self.tokens), "--listen-grpc", listen, "--no-openflow",
                   "--no-http", "--log-level", "WARNING"]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        assert self.process.stderr is not None
        for line in self.process.stderr:  # it prints the line once it serves; EOF if it dies first
            lines.append(line)
            if line.startswith(READY):
                threading.Thread(target=self._drain, daemon=True).start()
                return line[len(READY):].split()[0]
        raise AssertionError(f"the controller exited ({self.process.wait()}) before listening:\n{''.join(lines)}")

    def _drain(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for _ in self.process.stderr:  # keep reading, so the pipe never fills
            pass

    def kill(self) -> None:
        """SIGKILL: no shutdown of any kind."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)


@pytest.fixture
def processes(tmp_path, tokens) -> Iterator[list[ControllerProcess]]:
    """Controller subprocesses on tmp_path/tsdn.db, all killed after the test."""
    started: list[ControllerProcess] = []
    yield started
    for process in started:
        process.kill()


def _side_threads(transfer: pb.Transfer) -> set[threading.Thread]:
    """The agents' threads running a side of `transfer` (named role-<first 8 hex digits of its id>)."""
    tag = transfer.name.removeprefix("transfers/")[:8]
    return {t for t in threading.enumerate() if t.name in (f"receive-{tag}", f"send-{tag}")}


def _running(client: TsdnClient, transfer: pb.Transfer) -> set[threading.Thread]:
    """Wait until the sender reported a rate and both sides run; their threads."""
    wait_for(lambda: client.get_transfer(transfer.name).rate.bytes_total > 0, "the sender's first rate report")
    return wait_for(lambda: len(sides := _side_threads(transfer)) == 2 and sides, "both sides to run")


def _follow_to_the_end(client: TsdnClient, transfer: pb.Transfer,
                       sides: set[threading.Thread]) -> list[pb.TransferEvent]:
    """The transfer's events on the (new) controller until it ends, checking that no side is
    started again by the agents meanwhile."""
    events = []
    for event in client.watch_transfer(transfer.name, timeout=120):
        events.append(event)
        assert _side_threads(transfer) <= sides, "an agent started a side of the transfer again"
        if event.state in ENDED:
            break
    assert events and events[-1].state in ENDED, f"{transfer.name} did not end: {events[-1:] or 'no events'}"
    return events


def _assert_ended_well(client: TsdnClient, transfer: pb.Transfer, events: list[pb.TransferEvent]) -> None:
    end = events[-1]
    assert end.state == pb.TRANSFER_SUCCEEDED, end.reason
    assert end.transfer.rate.final and end.transfer.rate.bytes_total == SIZE
    assert end.transfer.receiver_rate.bytes_total == SIZE
    assert any(e.reason == "rate" for e in events), [e.reason for e in events]  # reports reached it
    wait_for(lambda: client.get_reservation(transfer.reservation).state == bw_pb.RELEASED,
             "the reservation released")
    wait_for(lambda: not _side_threads(transfer), "both sides' threads to end")


def _online(client: TsdnClient) -> bool:
    return {a.dtn for a in client.list_agents() if a.state == agent_pb.ONLINE} >= {SRC, DST}


def test_a_running_transfer_survives_a_controller_restart(start_controller, tokens, agents, tmp_path):
    first = start_controller("ring8", tokens=tokens, listen_openflow=None)
    address = first.address
    agents(address)
    with TsdnClient(address, token=SERVICE[1], timeout=10) as client:
        wait_for(lambda: _online(client), "both agents online")
        transfer = client.start_transfer(SRC, DST, BANDWIDTH, size=SIZE, streams=2)
        sides = _running(client, transfer)

        first.stop(grace=0.5)
        second = Controller(ControllerConfig(topology=builtin_topology("ring8"), listen_grpc=address,
                                             state=tmp_path / "tsdn.db", tokens=tokens, listen_openflow=None))
        advised: list[tuple[str, float]] = []  # what the new controller's advisor is told
        observe = second.book.rerouter.advisor.observe
        second.book.rerouter.advisor.observe = lambda rid, booked, achieved, *more: (advised.append((rid, achieved))
                                                                            or observe(rid, booked, achieved, *more))
        second.start()
        try:
            now = client.get_transfer(transfer.name)
            assert now.state == pb.TRANSFER_RUNNING, now.reason
            assert now.reservation == transfer.reservation
            assert all(side.is_alive() for side in sides)  # the agents did not stop it
            assert [t.name for t in client.list_transfers()] == [transfer.name]

            events = _follow_to_the_end(client, transfer, sides)
            _assert_ended_well(client, transfer, events)
            reservation_id = transfer.reservation.removeprefix("reservations/")
            assert [rid for rid, _ in advised] and {rid for rid, _ in advised} == {reservation_id}
            wait_for(lambda: _online(client), "both agents registered with the new controller")
        finally:
            second.stop(grace=0.5)


def test_a_running_transfer_survives_a_controller_killed_and_started_again(processes, tokens, agents, tmp_path):
    first = ControllerProcess(tmp_path / "tsdn.db", tokens)
    processes.append(first)
    address = first.start()
    agents(address)
    with TsdnClient(address, token=SERVICE[1], timeout=10) as client:
        wait_for(lambda: _online(client), "both agents online")
        transfer = client.start_transfer(SRC, DST, BANDWIDTH, size=SIZE, streams=2)
        sides = _running(client, transfer)

        first.kill()
        second = ControllerProcess(tmp_path / "tsdn.db", tokens)
        processes.append(second)
        assert second.start(address) == address

        now = client.get_transfer(transfer.name)
        assert now.state == pb.TRANSFER_RUNNING, now.reason
        assert all(side.is_alive() for side in sides)
        events = _follow_to_the_end(client, transfer, sides)
        _assert_ended_well(client, transfer, events)
        assert client.list_transfers()[0].state == pb.TRANSFER_SUCCEEDED


def test_a_corrupt_transfer_row_stops_the_controller_naming_it(tmp_path, capsys):
    state = tmp_path / "tsdn.db"
    ledger = Ledger(Topology.load(builtin_topology("ring8")).capacities(), state)
    ledger.write(transfer_store.create_table)
    ledger.write(lambda db: db.execute(
        "INSERT INTO transfers (id, owner, request_id, reservation_id, state, body) VALUES (?, ?, ?, ?, ?, ?)",
        ("ab" * 16, "rucio", "", "cd" * 16, "RUNNING", '{"format": 1, "id": "' + "ab" * 16 + '"}')))
    ledger.close()
    code = main(["controller", "--topology", "ring8", "--state", str(state), "--listen-grpc", "127.0.0.1:0",
                 "--no-openflow", "--no-http", "--log-level", "ERROR"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"tsdn: error: {state}: transfers row 1 (id '{'ab' * 16}'): field spec: missing" in err
    assert "Traceback" not in err


def test_tsdn_transfer_follows_its_transfer_across_a_controller_restart(processes, tokens, agents, tmp_path):
    """`tsdn transfer` as a user runs it: the controller is killed and started again mid-transfer;
    the command waits for it, watches again and ends with the transfer's success, exit 0."""
    first = ControllerProcess(tmp_path / "tsdn.db", tokens)
    processes.append(first)
    address = first.start()
    agents(address)
    token_file = tmp_path / "rucio.token"
    token_file.write_text(SERVICE[1])
    with TsdnClient(address, token=SERVICE[1], timeout=10) as client:
        wait_for(lambda: _online(client), "both agents online")
        command = subprocess.Popen(
            [sys.executable, "-m", "tsdn", "transfer", SRC, DST, "-b", str(BANDWIDTH), "--size", str(SIZE),
             "-P", "2", "--no-progress", "--controller", address, "--token-file", str(token_file)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            transfer = wait_for(lambda: next(iter(client.list_transfers()), None), "the command's transfer")
            _running(client, transfer)
            first.kill()
            second = ControllerProcess(tmp_path / "tsdn.db", tokens)
            processes.append(second)
            assert second.start(address) == address
            out, err = command.communicate(timeout=120)
        finally:
            if command.poll() is None:
                command.kill()
        assert command.returncode == 0, err
        assert "the controller is unreachable" in err
        assert f"{transfer.name} SUCCEEDED" in out
        assert client.get_transfer(transfer.name).rate.bytes_total == SIZE
