"""Transfers end to end on loopback: a real controller (ledger only, ring8) hands jobs to two real
agents (`run_agent` in threads), whose builtin engines move the bytes and report to it.

The agents listen on 127.0.0.1 and advertise it, so the ledger-only controller tells the sender to
connect there. Waits have deadlines; nothing asserts on wall-clock durations.
"""

from __future__ import annotations

import filecmp
import os
import queue
import re
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dtn_agent.agent import data_nic, facts_message, run_agent
from dtn_agent.host import HostFacts, Nic
from dtn_agent.jobs import JobOptions, JobRunner, pinning_for
from dtn_agent.pinning import NOT_PINNED_UNKNOWN_NODE, PinningPlan
from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2 as agent_pb
from northbound.proto.tsdn.v1 import transfer_pb2 as pb
from sdn_app.core.errors import InvalidArgument
from tests.conftest import follow_transfer, reservation_released, write_dtn_tokens
from tests.waiting import wait_for
from tsdn.controller import Controller

SRC, DST = "dtn1", "dtn2"
SERVICE = ("rucio", "rucio-token-0123456789abcdef")
AGENT_TOKENS = {SRC: "agent1-token-0123456789abcdef", DST: "agent2-token-0123456789abcdef"}
BANDWIDTH = 200 * 10**6  # paced at 95 %: 64 MiB take a few seconds, long enough for rate reports
MiB = 1 << 20
ENDED = {pb.TRANSFER_SUCCEEDED, pb.TRANSFER_FAILED, pb.TRANSFER_CANCELLED}


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    """A service token, and one agent token bound to each of the two DTNs."""
    return write_dtn_tokens(tmp_path, SERVICE, AGENT_TOKENS)


@pytest.fixture
def site(start_controller, tokens) -> Iterator[tuple[Controller, TsdnClient, threading.Event]]:
    """A ledger-only controller on ring8 with agents of dtn1 and dtn2 online; the service's client,
    and the event that stops both agents."""
    controller = start_controller("ring8", tokens=tokens, listen_openflow=None)
    stop = threading.Event()
    errors: list[BaseException] = []

    def agent(dtn: str) -> None:
        try:
            run_agent(controller.address, dtn, AGENT_TOKENS[dtn], "/", 0.5, stop=stop, timeout=5.0,
                      listen="127.0.0.1", advertise="127.0.0.1")
        except BaseException as error:  # reported by the test's teardown
            errors.append(error)

    threads = [threading.Thread(target=agent, args=(dtn,), name=f"agent-{dtn}", daemon=True) for dtn in (SRC, DST)]
    for thread in threads:
        thread.start()
    client = TsdnClient(controller.address, token=SERVICE[1], timeout=10)
    wait_for(lambda: {a.dtn for a in client.list_agents() if a.state == agent_pb.ONLINE} >= {SRC, DST},
             "both agents online")
    try:
        yield controller, client, stop
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        client.close()
        assert not [t for t in threads if t.is_alive()], "an agent did not stop"
        assert not errors, errors




def _side_threads(transfer: pb.Transfer) -> list[threading.Thread]:
    """The agents' threads running a side of `transfer` (named role-<first 8 hex digits of its id>)."""
    tag = transfer.name.removeprefix("transfers/")[:8]
    return [t for t in threading.enumerate() if t.name in (f"receive-{tag}", f"send-{tag}")]


def test_memory_transfer_succeeds_with_rate_reports(site):
    _, client, _ = site
    size = 64 * MiB
    transfer = client.start_transfer(SRC, DST, BANDWIDTH, size=size, streams=2)
    events = follow_transfer(client, transfer.name)
    end = events[-1]
    assert end.state == pb.TRANSFER_SUCCEEDED, end.reason
    assert end.transfer.rate.final and end.transfer.rate.bytes_total == size
    assert end.transfer.receiver_rate.bytes_total == size
    assert any(e.reason == "rate" for e in events), [e.reason for e in events]
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")
    wait_for(lambda: not _side_threads(transfer), "both sides' threads to end")


def test_files_are_sent_and_verified(site, tmp_path):
    _, client, _ = site
    source = tmp_path / "source" / "run2024"
    (source / "raw").mkdir(parents=True)
    (source / "raw" / "events.bin").write_bytes(os.urandom(3 * MiB + 17))
    (source / "raw" / "empty.dat").write_bytes(b"")
    (source / "manifest.txt").write_text("run 2024, 2 files\n")
    destination = tmp_path / "destination"
    transfer = client.start_transfer(SRC, DST, BANDWIDTH, files=[str(source)], destination=str(destination),
                                     streams=2)
    end = follow_transfer(client, transfer.name)[-1]
    assert end.state == pb.TRANSFER_SUCCEEDED, end.reason
    assert end.transfer.checksums_verified is True
    landed = destination / "run2024"
    compare = filecmp.dircmp(source, landed)
    assert not compare.left_only and not compare.right_only and not compare.diff_files
    for name in ("raw/events.bin", "raw/empty.dat", "manifest.txt"):
        assert (landed / name).read_bytes() == (source / name).read_bytes()
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")


@pytest.mark.parametrize("engine", [
    "builtin",
    pytest.param("iperf3", marks=pytest.mark.skipif(shutil.which("iperf3") is None, reason="no iperf3 here")),
])
def test_cancel_stops_both_engines(site, engine):
    _, client, _ = site
    transfer = client.start_transfer(SRC, DST, BANDWIDTH, size=1 << 40, streams=2,  # hours at 190 Mbit/s
                                     engine=engine)
    port: list[int] = []

    def on_event(event: pb.TransferEvent) -> None:
        if (found := re.search(r"receiver listens on [\d.]+:(\d+)", event.reason)) is not None:
            port.append(int(found.group(1)))
        # iperf3 before 3.17 reports only at its end: cancel it once it runs
        running = engine == "iperf3" and event.state == pb.TRANSFER_RUNNING
        if len(port) == 1 and (event.reason == "rate" or running):
            port.append(0)  # cancel once
            client.cancel_transfer(transfer.name)

    end = follow_transfer(client, transfer.name, on_event)[-1]
    assert end.state == pb.TRANSFER_CANCELLED, end.reason
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")
    wait_for(lambda: not _side_threads(transfer), "both engines to stop", timeout=20)

    def closed() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port[0])) != 0
    wait_for(closed, f"the receiver's port {port[0]} to close")


def test_unavailable_engine_fails_the_transfer_at_once(site):
    _, client, _ = site
    transfer = client.start_transfer(SRC, DST, BANDWIDTH, size=64 * MiB, engine="rdma")
    end = follow_transfer(client, transfer.name)[-1]
    assert end.state == pb.TRANSFER_FAILED
    assert "no RDMA device" in end.reason, end.reason
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")


def test_stopping_the_agents_fails_their_transfers(site):
    _, client, stop = site
    transfer = client.start_transfer(SRC, DST, BANDWIDTH, size=1 << 40, streams=2)
    wait_for(lambda: client.get_transfer(transfer.name).state == pb.TRANSFER_RUNNING, "the transfer to run")
    wait_for(lambda: len(_side_threads(transfer)) == 2, "both sides to run")
    stop.set()
    end = follow_transfer(client, transfer.name)[-1]
    assert end.state == pb.TRANSFER_FAILED
    assert "agent stopping" in end.reason, end.reason
    wait_for(lambda: not _side_threads(transfer), "both engines to stop")
    assert wait_for(lambda: reservation_released(client, transfer), "the reservation released")


# -- without a controller: choices the agent makes by itself -------------------------------------

def _nic(name: str, capacity: int | None, numa: int | None, cpus: list[int]) -> Nic:
    return Nic(name, virtual=False, kind="physical", numa_node=numa, local_cpus=cpus, capacity_bps=capacity)


def test_data_nic_is_the_named_one_or_the_fastest():
    facts = HostFacts("/", nics=[_nic("eno1", 10**9, 0, [0, 1]), _nic("ens1f0", 100 * 10**9, 1, [2, 3]),
                                 _nic("ens2", None, None, [])])
    assert data_nic(facts).name == "ens1f0"
    assert data_nic(facts, "eno1").name == "eno1"
    assert facts_message(facts).data_nic == "ens1f0"
    assert facts_message(facts, "eno1").data_nic == "eno1"
    assert data_nic(HostFacts("/", nics=[_nic("ens2", None, None, [])])) is None
    with pytest.raises(InvalidArgument, match=r"no NIC .eth9."):
        data_nic(facts, "eth9")


def test_transfers_are_pinned_only_when_the_nic_numa_node_is_known():
    assert pinning_for(_nic("ens1f0", 10**11, 1, [2, 3])) == PinningPlan((2, 3), 1)
    assert pinning_for(_nic("ens1f0", 10**11, None, [0, 1, 2, 3])).note == NOT_PINNED_UNKNOWN_NODE
    assert pinning_for(_nic("ens1f0", 10**11, -1, [0, 1, 2, 3])) == PinningPlan((), None, NOT_PINNED_UNKNOWN_NODE)
    assert not pinning_for(None).pinned
    runner = JobRunner(None, "dtn1", JobOptions(data_nic=_nic("x", None, 0, [5])))  # type: ignore[arg-type]
    assert runner.pinning == PinningPlan((5,), 0)


class _FlakyController:
    """A stand-in client: hands out jobs from a queue, answers a receiver's port with the SEND job,
    and fails every rate report as if the controller were unreachable."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[agent_pb.TransferJob | None] = queue.Queue()
        self.reports: list[agent_pb.TransferReport] = []
        self.lock = threading.Lock()

    def take_jobs(self, dtn: str) -> Iterator[agent_pb.TransferJob]:
        while (job := self.jobs.get()) is not None:
            yield job

    def report_transfer(self, report: agent_pb.TransferReport) -> agent_pb.ReportTransferResponse:
        with self.lock:
            self.reports.append(report)
        if report.WhichOneof("what") == "rate":
            raise ApiError(grpc.StatusCode.UNAVAILABLE, "connection refused")
        if report.WhichOneof("what") == "listening_port":
            self.jobs.put(agent_pb.TransferJob(transfer=report.transfer, role=agent_pb.SEND, engine="builtin",
                                               streams=2, size_bytes=24 * MiB, peer_host="127.0.0.1",
                                               peer_port=report.listening_port, pacing_bps=80 * 10**6))
        return agent_pb.ReportTransferResponse()

    def outcomes(self) -> dict[int, agent_pb.TransferReport]:
        with self.lock:
            return {r.role: r for r in self.reports if r.WhichOneof("what") == "outcome"}


def test_failed_reports_do_not_stop_a_transfer_and_each_job_runs_once():
    controller = _FlakyController()
    runner = JobRunner(controller, "dtn2", JobOptions(listen="127.0.0.1"))  # type: ignore[arg-type]
    receive = agent_pb.TransferJob(transfer="transfers/t1", role=agent_pb.RECEIVE, engine="builtin", streams=2,
                                   size_bytes=24 * MiB)
    controller.jobs.put(receive)
    controller.jobs.put(receive)  # again, as after a reconnect: still one receiver
    runner.start()
    try:
        outcomes = wait_for(lambda: (o := controller.outcomes()).keys() >= {agent_pb.RECEIVE, agent_pb.SEND} and o,
                            "both sides to end", timeout=60)
        for role in (agent_pb.RECEIVE, agent_pb.SEND):
            assert outcomes[role].outcome.ok, outcomes[role].outcome.error
            assert outcomes[role].final.final and outcomes[role].final.bytes_total == 24 * MiB
        assert [r.WhichOneof("what") for r in controller.reports].count("listening_port") == 1
        assert any(r.WhichOneof("what") == "rate" for r in controller.reports)  # tried, failed, carried on
    finally:
        runner.stop()
        controller.jobs.put(None)
        assert runner.join(10)


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--listen", "not an address", "--listen 'not an address': not a host name or IP address"),
    ("--advertise", "no-such-host.invalid", "--advertise no-such-host.invalid: not an IP address"),
    ("--fdt-jar", "/no/such/fdt.jar", "--fdt-jar /no/such/fdt.jar: no such file"),
    ("--nic", "no-such-nic0", "--nic no-such-nic0: no NIC 'no-such-nic0'"),
])
def test_agent_run_refuses_bad_options(capsys, option, value, message):
    from tsdn.cli import main

    assert main(["agent", "run", "--name", "dtn1", "--controller", "127.0.0.1:1", option, value]) == 2
    assert message in capsys.readouterr().err


class _RestartingController(_FlakyController):
    """A stand-in client whose controller is away whenever `away` is set: reports fail then, and
    are taken again once it is cleared. An outcome fails with CANCELLED (a call cut off by the
    controller's shutdown), the others with UNAVAILABLE (nothing listens while it restarts)."""

    def __init__(self) -> None:
        super().__init__()
        self.away = threading.Event()
        self.refused: list[str] = []

    def report_transfer(self, report: agent_pb.TransferReport) -> agent_pb.ReportTransferResponse:
        if self.away.is_set():
            with self.lock:
                self.refused.append(report.WhichOneof("what"))
            if report.WhichOneof("what") == "outcome":
                raise ApiError(grpc.StatusCode.CANCELLED, "Cancelled on the server side")
            raise ApiError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses")
        if report.WhichOneof("what") == "rate":
            with self.lock:
                self.reports.append(report)
            return agent_pb.ReportTransferResponse()
        return super().report_transfer(report)

    def refusals(self, what: str) -> int:
        with self.lock:
            return self.refused.count(what)


def test_reports_wait_for_a_restarting_controller_and_the_transfer_goes_on():
    controller = _RestartingController()
    runner = JobRunner(controller, "dtn2", JobOptions(listen="127.0.0.1"))  # type: ignore[arg-type]
    controller.away.set()  # away before the receiver listens: its port waits for the controller
    controller.jobs.put(agent_pb.TransferJob(transfer="transfers/t2", role=agent_pb.RECEIVE, engine="builtin",
                                             streams=2, size_bytes=24 * MiB))
    runner.start()
    try:
        wait_for(lambda: controller.refusals("listening_port") >= 2, "the listening port retried")
        assert len(runner.running()) == 1  # the receiver was not stopped
        controller.away.clear()  # the controller is back: the port arrives, the sender gets its job
        wait_for(lambda: any(r.WhichOneof("what") == "rate" for r in controller.reports), "a rate report")
        controller.away.set()  # away again while the transfer runs, and when it ends
        wait_for(lambda: controller.refusals("outcome") >= 2, "both outcomes retried", timeout=60)
        assert not controller.outcomes()
        controller.away.clear()
        outcomes = wait_for(lambda: (o := controller.outcomes()).keys() >= {agent_pb.RECEIVE, agent_pb.SEND} and o,
                            "both outcomes taken once the controller is back", timeout=30)
        for role in (agent_pb.RECEIVE, agent_pb.SEND):
            assert outcomes[role].outcome.ok, outcomes[role].outcome.error
            assert outcomes[role].final.bytes_total == 24 * MiB
    finally:
        runner.stop()
        controller.jobs.put(None)
        assert runner.join(10)


class _ForgetfulController(_FlakyController):
    """A stand-in client whose controller is up but does not know the transfer: NOT_FOUND."""

    def report_transfer(self, report: agent_pb.TransferReport) -> agent_pb.ReportTransferResponse:
        with self.lock:
            self.reports.append(report)
        if report.WhichOneof("what") != "outcome":
            raise ApiError(grpc.StatusCode.NOT_FOUND, f"transfer {report.transfer!r} not found")
        return agent_pb.ReportTransferResponse()


def test_a_controller_that_does_not_know_the_transfer_stops_it():
    controller = _ForgetfulController()
    runner = JobRunner(controller, "dtn2", JobOptions(listen="127.0.0.1"))  # type: ignore[arg-type]
    controller.jobs.put(agent_pb.TransferJob(transfer="transfers/t3", role=agent_pb.RECEIVE, engine="builtin",
                                             streams=1, size_bytes=1 << 40))
    runner.start()
    try:
        [outcome] = wait_for(lambda: list(controller.outcomes().values()), "the receiver to stop")
        assert not outcome.outcome.ok
        assert "the controller does not know transfers/t3" in outcome.outcome.error, outcome.outcome.error
        wait_for(lambda: not runner.running(), "the receiver's thread to end")
    finally:
        runner.stop()
        controller.jobs.put(None)
        assert runner.join(10)
