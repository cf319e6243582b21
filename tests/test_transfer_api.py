"""TransferService and the agents' side of AgentService on a real controller (loopback gRPC,
ledger only): refusals that book nothing, and a transfer driven to its end by playing the two
agents by hand (TakeJobs streams, ReportTransfer calls), and carried on by a controller restarted
on the same state file."""

from __future__ import annotations

import subprocess
import sys
import threading

import grpc
import pytest
import yaml

from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2 as apb
from northbound.proto.tsdn.v1 import bandwidth_pb2 as bpb
from northbound.proto.tsdn.v1 import transfer_pb2 as tpb
from tests.conftest import TOKENS
from tests.waiting import wait_for

G = 10**9
SRC, DST = "caltech-a-dtn1", "caltech-b-dtn1"


class Collector:
    """Drain a server stream on a thread; `items` grow as messages arrive, `error` keeps an ApiError."""

    def __init__(self, stream):
        self.items: list = []
        self.error: ApiError | None = None
        self.thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.thread.start()

    def _run(self, stream) -> None:
        try:
            for item in stream:
                self.items.append(item)
        except ApiError as error:
            self.error = error

    def ended(self, timeout: float = 10.0) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()


@pytest.fixture
def agents(client_for) -> TsdnClient:
    """An agent client, registered for SRC and DST."""
    agent = client_for("dtn-agent")
    for dtn in (SRC, DST):
        agent.register_agent(dtn, apb.HostFacts())
    return agent


def refused(call) -> ApiError:
    with pytest.raises(ApiError) as error:
        call()
    return error.value


def assert_nothing_booked(client_for) -> None:
    noc = client_for("noc")
    assert list(noc.list_reservations()) == []
    assert noc.list_transfers() == []


def report(transfer: str, dtn: str, role: int, **what) -> apb.TransferReport:
    return apb.TransferReport(transfer=transfer, dtn=dtn, role=role, **what)


def rate(bps: float, final: bool = False) -> apb.RateReport:
    return apb.RateReport(start=0.0, end=1.0, bits_per_second=bps, bytes_total=1000, final=final,
                          engine="builtin")


@pytest.mark.parametrize("args, kwargs, code, message", [
    (("", DST, 10 * G), {"size": 10**9}, grpc.StatusCode.INVALID_ARGUMENT, "src_dtn: required"),
    ((SRC, "", 10 * G), {"size": 10**9}, grpc.StatusCode.INVALID_ARGUMENT, "dst_dtn: required"),
    ((SRC, DST, 10 * G), {}, grpc.StatusCode.INVALID_ARGUMENT, "give exactly one of size_bytes"),
    ((SRC, DST, 10 * G), {"files": ["data/a.root"], "destination": "/in"}, grpc.StatusCode.INVALID_ARGUMENT,
     "files: 'data/a.root' is not an absolute path"),
    ((SRC, DST, 10 * G), {"files": ["/data/a.root"]}, grpc.StatusCode.INVALID_ARGUMENT, "destination: ''"),
    ((SRC, DST, 10 * G), {"size": 10**9, "streams": 1000}, grpc.StatusCode.INVALID_ARGUMENT,
     "streams: must be between 1 and 256, got 1000"),
    ((SRC, DST, 10 * G), {"size": 10**9, "engine": "gridftp"}, grpc.StatusCode.INVALID_ARGUMENT,
     "engine 'gridftp': unknown"),
    ((SRC, "nowhere", 10 * G), {"size": 10**9}, grpc.StatusCode.INVALID_ARGUMENT,
     "destination dtn 'nowhere': not a DTN"),
    ((SRC, "caltech-a-dtn3", 10 * G), {"size": 10**9}, grpc.StatusCode.FAILED_PRECONDITION,
     "destination dtn caltech-a-dtn3: no agent has registered"),
    ((SRC, DST, 10 * G), {"size": 10**9, "pace": 10 * G}, grpc.StatusCode.INVALID_ARGUMENT,
     "pace_bps: 10G must be above 0 and below the booked bandwidth_bps (10G)"),
    ((SRC, DST, 10 * G), {"size": 10**9, "pace": 40 * G}, grpc.StatusCode.INVALID_ARGUMENT,
     "pace_bps: 40G must be above 0 and below the booked bandwidth_bps (10G)"),
])
def test_bad_start_requests_are_refused_naming_the_field_and_book_nothing(agents, client_for, args, kwargs, code,
                                                                          message):
    error = refused(lambda: client_for("rucio").start_transfer(*args, **kwargs))
    assert error.code is code and message in error.message
    assert_nothing_booked(client_for)


def test_only_services_start_transfers(agents, client_for):
    error = refused(lambda: agents.start_transfer(SRC, DST, 10 * G, size=10**9))
    assert error.code is grpc.StatusCode.PERMISSION_DENIED and "may not start transfers" in error.message
    assert_nothing_booked(client_for)


def test_zero_streams_means_one(agents, client_for):
    transfer = client_for("rucio").start_transfer(SRC, DST, 10 * G, size=10**9, streams=0)
    assert transfer.streams == 1 and transfer.state == tpb.TRANSFER_STARTING
    [job] = [j for j in _first_jobs(client_for, DST, 1)]
    assert job.streams == 1


def test_a_paced_transfer_books_its_bandwidth_and_hands_the_sender_its_pace(agents, client_for):
    rucio = client_for("rucio")
    transfer = rucio.start_transfer(SRC, DST, 10 * G, size=10**9, pace=4 * G)
    assert transfer.pace_bps == 4 * G and transfer.bandwidth_bps == 10 * G
    assert rucio.get_reservation(transfer.reservation).bandwidth_bps == 10 * G
    assert not agents.report_transfer(report(transfer.name, DST, apb.RECEIVE, listening_port=5201,
                                             listening_host="127.0.0.1")).stop
    send = next(job for job in _first_jobs(client_for, SRC, 1) if job.role == apb.SEND)
    assert send.pacing_bps == 4 * G  # not 0.95 x the booking
    assert rucio.get_transfer(transfer.name).pace_bps == 4 * G
    unpaced = rucio.start_transfer(DST, SRC, 10 * G, size=10**9)
    assert unpaced.pace_bps == 0


def _tsdn_transfer(controller, tmp_path, *args) -> subprocess.Popen:
    token = tmp_path / "rucio.token"
    token.write_text(TOKENS["rucio"][1])
    return subprocess.Popen([sys.executable, "-m", "tsdn", "transfer", SRC, DST, *args, "--no-progress",
                             "--controller", controller.address, "--token-file", str(token)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_tsdn_transfer_pace_reaches_the_sender(agents, client_for, controller, tmp_path):
    rucio = client_for("rucio")
    command = _tsdn_transfer(controller, tmp_path, "-b", "10G", "--pace", "4G", "--size", "1G")
    try:
        transfer = wait_for(lambda: next(iter(rucio.list_transfers()), None), "the command's transfer")
        assert transfer.pace_bps == 4 * G and transfer.bandwidth_bps == 10 * G
        rucio.cancel_transfer(transfer.name)
        out, err = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            command.kill()
    assert "sender paced at 4Gbit/s" in err
    assert command.returncode == 1 and f"{transfer.name} CANCELLED" in out


def test_tsdn_transfer_refuses_a_pace_at_or_above_the_booking_and_books_nothing(agents, client_for, controller,
                                                                                  tmp_path):
    command = _tsdn_transfer(controller, tmp_path, "-b", "10G", "--pace", "10G", "--size", "1G")
    _, err = command.communicate(timeout=60)
    assert command.returncode == 2, err
    assert "--pace: 10G must be below --bandwidth (10G)" in err
    assert_nothing_booked(client_for)


def _first_jobs(client_for, dtn: str, count: int) -> list[apb.TransferJob]:
    """The first `count` jobs a fresh TakeJobs stream for `dtn` gives (pending ones come first)."""
    client = client_for("dtn-agent")
    collector = Collector(client.take_jobs(dtn, timeout=30))
    try:
        return wait_for(lambda: collector.items[:count] if len(collector.items) >= count else None,
                        f"{count} jobs for {dtn}")
    finally:
        client.close()
        assert collector.ended()


def test_two_agents_played_by_hand_drive_a_transfer_to_success(agents, client_for):
    rucio = client_for("rucio")
    transfer = rucio.start_transfer(SRC, DST, 10 * G, size=10**9, streams=4, request_id="fts-1")
    assert transfer.state == tpb.TRANSFER_STARTING and transfer.owner == "rucio"
    assert rucio.start_transfer(SRC, DST, 10 * G, size=10**9, streams=4, request_id="fts-1").name == transfer.name
    assert rucio.get_reservation(transfer.reservation).state == bpb.ACTIVE
    watch = Collector(rucio.watch_transfer(transfer.name, timeout=30))
    receiver_client, sender_client = client_for("dtn-agent"), client_for("dtn-agent")
    receiver_jobs = Collector(receiver_client.take_jobs(DST, timeout=30))
    sender_jobs = Collector(sender_client.take_jobs(SRC, timeout=30))
    try:
        [receive] = wait_for(lambda: receiver_jobs.items, "the RECEIVE job")
        assert (receive.transfer, receive.role, receive.streams, receive.size_bytes) == (
            transfer.name, apb.RECEIVE, 4, 10**9)
        assert receive.reservation == transfer.reservation
        wait_for(lambda: watch.items, "the watch snapshot")
        answer = agents.report_transfer(report(transfer.name, DST, apb.RECEIVE, listening_port=5201,
                                               listening_host="127.0.0.1"))
        assert not answer.stop
        [send] = wait_for(lambda: sender_jobs.items, "the SEND job")
        assert (send.role, send.peer_host, send.peer_port) == (apb.SEND, "127.0.0.1", 5201)
        assert send.pacing_bps == int(10 * G * 0.95) and send.transfer == transfer.name
        assert rucio.get_transfer(transfer.name).state == tpb.TRANSFER_RUNNING

        for _ in range(3):
            assert not agents.report_transfer(report(transfer.name, SRC, apb.SEND, rate=rate(9.5 * G))).stop
            assert not agents.report_transfer(report(transfer.name, DST, apb.RECEIVE, rate=rate(9.4 * G))).stop
        running = rucio.get_transfer(transfer.name)
        assert running.rate.bits_per_second == 9.5 * G and running.receiver_rate.bits_per_second == 9.4 * G

        agents.report_transfer(report(transfer.name, SRC, apb.SEND, outcome=apb.TransferOutcome(ok=True),
                                      final=rate(9.5 * G, final=True)))
        assert rucio.get_transfer(transfer.name).state == tpb.TRANSFER_RUNNING
        last = agents.report_transfer(report(transfer.name, DST, apb.RECEIVE, outcome=apb.TransferOutcome(ok=True),
                                             final=rate(9.4 * G, final=True)))
        assert last.stop and last.reason == "done at 9.5G"
        assert watch.ended(), "the watch stream did not close after the transfer ended"
    finally:
        receiver_client.close()
        sender_client.close()
    assert watch.error is None
    states = [e.state for e in watch.items]
    assert states[0] == tpb.TRANSFER_STARTING and watch.items[0].reason == "snapshot"
    assert tpb.TRANSFER_RUNNING in states and states[-1] == tpb.TRANSFER_SUCCEEDED
    assert watch.items[-1].previous_state == tpb.TRANSFER_RUNNING and watch.items[-1].reason == "done at 9.5G"
    done = rucio.get_transfer(transfer.name)
    assert done.state == tpb.TRANSFER_SUCCEEDED and done.rate.final and done.path == []
    assert rucio.get_reservation(transfer.reservation).state == bpb.RELEASED
    assert receiver_jobs.ended() and sender_jobs.ended()
    assert [j.role for j in receiver_jobs.items] == [apb.RECEIVE] and [j.role for j in sender_jobs.items] == [apb.SEND]
    # Watching an ended transfer: its snapshot, then the stream closes.
    [snapshot] = list(rucio.watch_transfer(transfer.name, timeout=10))
    assert snapshot.state == tpb.TRANSFER_SUCCEEDED


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_reports_with_impossible_rates_are_refused(agents, client_for, bad):
    transfer = client_for("rucio").start_transfer(SRC, DST, 10 * G, size=10**9)
    agents.report_transfer(report(transfer.name, DST, apb.RECEIVE, listening_port=5201))
    error = refused(lambda: agents.report_transfer(report(transfer.name, SRC, apb.SEND, rate=rate(bad))))
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT and "rate.bits_per_second" in error.message
    per_stream = rate(1 * G)
    per_stream.streams.append(apb.StreamRate(stream=0, bits_per_second=bad))
    error = refused(lambda: agents.report_transfer(report(transfer.name, SRC, apb.SEND, rate=per_stream)))
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT and "rate.streams[0].bits_per_second" in error.message
    assert not client_for("rucio").get_transfer(transfer.name).HasField("rate")


def test_a_report_without_a_role_or_content_is_refused(agents, client_for):
    transfer = client_for("rucio").start_transfer(SRC, DST, 10 * G, size=10**9)
    error = refused(lambda: agents.report_transfer(apb.TransferReport(transfer=transfer.name, dtn=SRC,
                                                                      role=apb.SEND)))
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT and "listening_port, rate and outcome" in error.message
    error = refused(lambda: agents.report_transfer(apb.TransferReport(transfer=transfer.name, dtn=SRC,
                                                                      rate=rate(1 * G))))
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT and "role" in error.message


def test_reports_after_a_cancel_are_told_to_stop(agents, client_for):
    rucio = client_for("rucio")
    transfer = rucio.start_transfer(SRC, DST, 10 * G, size=10**9)
    assert not agents.report_transfer(report(transfer.name, DST, apb.RECEIVE, listening_port=5201)).stop
    cancelled = rucio.cancel_transfer(transfer.name)
    assert cancelled.state == tpb.TRANSFER_CANCELLED and cancelled.reason == "cancelled by rucio"
    answer = agents.report_transfer(report(transfer.name, SRC, apb.SEND, rate=rate(9 * G)))
    assert answer.stop and answer.reason == "cancelled by rucio"
    assert agents.report_transfer(report(transfer.name, DST, apb.RECEIVE, listening_port=5202)).stop
    assert rucio.get_reservation(transfer.reservation).state == bpb.RELEASED
    assert client_for("noc").get_transfer(transfer.name).state == tpb.TRANSFER_CANCELLED


def test_a_stop_job_reaches_an_agent_taking_jobs_when_the_transfer_is_cancelled(agents, client_for):
    rucio = client_for("rucio")
    transfer = rucio.start_transfer(SRC, DST, 10 * G, size=10**9)
    receiver_client = client_for("dtn-agent")
    jobs = Collector(receiver_client.take_jobs(DST, timeout=30))
    try:
        wait_for(lambda: jobs.items, "the RECEIVE job")
        rucio.cancel_transfer(transfer.name)
        wait_for(lambda: len(jobs.items) >= 2, "the STOP job")
    finally:
        receiver_client.close()
    assert [(j.role, j.transfer) for j in jobs.items] == [(apb.RECEIVE, transfer.name), (apb.STOP, transfer.name)]
    assert jobs.ended()


def test_a_token_bound_to_another_dtn_cannot_take_its_jobs_or_report_for_it(start_controller, tmp_path):
    tokens = tmp_path / "bound.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [
        {"principal": "rucio", "role": "service", "token": "rucio-token-0123456789"},
        {"principal": "src-agent", "role": "agent", "token": "src-agent-token-0123456789", "dtn": SRC},
        {"principal": "dst-agent", "role": "agent", "token": "dst-agent-token-0123456789", "dtn": DST}]}))
    tokens.chmod(0o600)
    controller = start_controller(tokens=tokens)
    with TsdnClient(controller.address, token="src-agent-token-0123456789") as src_agent, \
            TsdnClient(controller.address, token="dst-agent-token-0123456789") as dst_agent, \
            TsdnClient(controller.address, token="rucio-token-0123456789") as rucio:
        src_agent.register_agent(SRC, apb.HostFacts())
        dst_agent.register_agent(DST, apb.HostFacts())
        transfer = rucio.start_transfer(SRC, DST, 10 * G, size=10**9)
        error = refused(lambda: list(src_agent.take_jobs(DST, timeout=10)))
        assert error.code is grpc.StatusCode.PERMISSION_DENIED and f"bound to dtn '{SRC}'" in error.message
        error = refused(lambda: src_agent.report_transfer(report(transfer.name, DST, apb.RECEIVE,
                                                                 listening_port=5201)))
        assert error.code is grpc.StatusCode.PERMISSION_DENIED and f"bound to dtn '{SRC}'" in error.message
        assert rucio.get_transfer(transfer.name).state == tpb.TRANSFER_STARTING
        assert not dst_agent.report_transfer(report(transfer.name, DST, apb.RECEIVE, listening_port=5201)).stop
        assert rucio.get_transfer(transfer.name).state == tpb.TRANSFER_RUNNING


def test_a_restarted_controller_carries_on_with_the_transfers_of_its_state_file(agents, client_for, controller,
                                                                                start_controller, tokens_file):
    rucio = client_for("rucio")
    running = rucio.start_transfer(SRC, DST, 10 * G, size=10**9, request_id="fts-9")
    assert not agents.report_transfer(report(running.name, DST, apb.RECEIVE, listening_port=5201,
                                             listening_host="127.0.0.1")).stop
    cancelled = rucio.cancel_transfer(rucio.start_transfer(DST, SRC, 10 * G, size=10**9).name)
    controller.stop(grace=0.5)

    restarted = start_controller(tokens=tokens_file)  # the same state file
    with TsdnClient(restarted.address, token=TOKENS["rucio"][1]) as rucio, \
            TsdnClient(restarted.address, token=TOKENS["dtn-agent"][1]) as agent:
        assert [(t.name, t.state) for t in rucio.list_transfers()] == [
            (cancelled.name, tpb.TRANSFER_CANCELLED), (running.name, tpb.TRANSFER_RUNNING)]
        assert rucio.get_transfer(running.name).reason == "receiver listens on 127.0.0.1:5201"
        assert rucio.start_transfer(SRC, DST, 10 * G, size=10**9, request_id="fts-9").name == running.name
        # Agents that reconnect are handed their jobs again (and run each side once), and the STOPs
        # of transfers that ended just before.
        jobs = Collector(agent.take_jobs(SRC, timeout=30))
        send, stop = wait_for(lambda: jobs.items[:2] if len(jobs.items) >= 2 else None, "the jobs again")
        assert (send.transfer, send.role, send.peer_host, send.peer_port) == (running.name, apb.SEND, "127.0.0.1",
                                                                             5201)
        assert (stop.transfer, stop.role) == (cancelled.name, apb.STOP)
        assert not agent.report_transfer(report(running.name, SRC, apb.SEND, rate=rate(9.5 * G))).stop
        assert rucio.get_transfer(running.name).rate.bits_per_second == 9.5 * G
        answer = agent.report_transfer(report(cancelled.name, SRC, apb.RECEIVE, rate=rate(1 * G)))
        assert answer.stop and answer.reason == "cancelled by rucio"
        for dtn, role in ((SRC, apb.SEND), (DST, apb.RECEIVE)):
            agent.report_transfer(report(running.name, dtn, role, outcome=apb.TransferOutcome(ok=True),
                                         final=rate(9.5 * G, final=True)))
        done = rucio.get_transfer(running.name)
        assert done.state == tpb.TRANSFER_SUCCEEDED and done.reason == "done at 9.5G"
        assert rucio.get_reservation(running.reservation).state == bpb.RELEASED
        agent.close()
        assert jobs.ended()
