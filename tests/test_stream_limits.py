"""Open streams on a real controller (loopback gRPC): bounded per principal and in total, never
held by an unauthenticated caller, and never in the way of unary calls however many are open."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2 as apb
from northbound.proto.tsdn.v1 import agent_pb2_grpc as agent_grpc
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import bandwidth_pb2_grpc as pb_grpc
from northbound.proto.tsdn.v1 import transfer_pb2 as tpb
from northbound.proto.tsdn.v1 import transfer_pb2_grpc as transfer_grpc
from northbound.streams import OPEN_HEADER
from tests.conftest import TOKENS
from tests.waiting import wait_for

G = 10**9
WAIT = 10.0  # seconds: the deadline of any single call
STREAM_DEADLINE = 60.0  # seconds: a stream's deadline, so that a wait for one that never opens ends
Code = grpc.StatusCode
SRC, DST = "caltech-a-dtn1", "caltech-b-dtn1"


BAD = "bad-token"  # a principal name standing for a token the controller does not know


def bearer(principal: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata of `principal`'s token (none for None; an unknown token for BAD)."""
    if principal is None:
        return ()
    token = "not-a-known-token-0123456789" if principal == BAD else TOKENS[principal][1]
    return (("authorization", f"Bearer {token}"),)


class Streams:
    """Raw server streams on a few channels of one controller; all cancelled at the end."""

    def __init__(self, address: str, channels: int = 1):
        self.address = address
        self.channels = [grpc.insecure_channel(address) for _ in range(channels)]
        self.calls: list[grpc.Call] = []

    def _channel(self) -> grpc.Channel:
        return self.channels[len(self.calls) % len(self.channels)]

    def start(self, kind: str, principal: str | None, **fields) -> grpc.Call:
        """Start a stream (`watch`, `agents`, `jobs`, `transfer`, `health` or `reflection`), not waiting for it."""
        channel = self._channel()
        options = {"metadata": bearer(principal), "timeout": STREAM_DEADLINE}
        if kind == "watch":
            call = pb_grpc.BandwidthServiceStub(channel).WatchReservations(
                pb.WatchReservationsRequest(**fields), **options)
        elif kind == "agents":
            call = agent_grpc.AgentServiceStub(channel).WatchAgents(apb.WatchAgentsRequest(**fields),
                                                                    **options)
        elif kind == "jobs":
            call = agent_grpc.AgentServiceStub(channel).TakeJobs(apb.TakeJobsRequest(**fields), **options)
        elif kind == "transfer":
            call = transfer_grpc.TransferServiceStub(channel).WatchTransfer(tpb.WatchTransferRequest(**fields),
                                                                           **options)
        elif kind == "health":
            call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), **options)
        elif kind == "reflection":
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(iter([request]),
                                                                                         **options)
        else:
            raise ValueError(kind)
        self.calls.append(call)
        return call

    def open(self, kind: str, principal: str | None, **fields) -> grpc.Call:
        """Start a tsdn stream and wait until the controller says it is open (its response headers)."""
        call = self.start(kind, principal, **fields)
        assert OPEN_HEADER in tuple(call.initial_metadata()), f"{kind} of {principal}: {refusal(call)}"
        return call

    def close(self) -> None:
        for call in self.calls:
            call.cancel()
        for channel in self.channels:
            channel.close()


def refusal(call: grpc.Call) -> tuple[grpc.StatusCode, str]:
    """The status a refused stream ended with (waits for it: the call must end)."""
    return call.code(), call.details()


def admitted(streams: Streams, kind: str, principal: str, **fields) -> grpc.Call | None:
    """The stream if the controller holds it open now, None if refused as over a limit."""
    call = streams.start(kind, principal, **fields)
    if OPEN_HEADER in tuple(call.initial_metadata()):
        return call
    code, details = refusal(call)
    assert code is Code.RESOURCE_EXHAUSTED, details
    return None


@pytest.fixture
def streams(controller):
    opened = Streams(controller.address)
    yield opened
    opened.close()


@pytest.fixture
def limited(start_controller, tokens_file):
    """A controller that allows 3 streams per principal and 5 in all, and a `Streams` of it."""
    controller = start_controller(tokens=tokens_file, max_streams=5, max_streams_per_principal=3)
    opened = Streams(controller.address)
    yield opened
    opened.close()


def test_the_stream_beyond_a_principals_limit_is_refused_naming_the_limit(limited):
    limited.open("watch", "rucio")
    limited.open("agents", "rucio", include_existing=True)  # every kind of stream counts
    limited.open("watch", "rucio", include_existing=True)
    code, details = refusal(limited.start("watch", "rucio"))
    assert code is Code.RESOURCE_EXHAUSTED
    assert "--max-streams-per-principal" in details and "rucio: 3 open" in details and "is 3" in details
    limited.open("watch", "fts")  # another principal still may


def test_the_stream_beyond_the_total_is_refused_naming_the_limit(limited):
    for principal in ("rucio", "rucio", "rucio", "fts", "fts"):
        limited.open("watch", principal)
    code, details = refusal(limited.start("watch", "noc"))
    assert code is Code.RESOURCE_EXHAUSTED
    assert "--max-streams (" not in details  # the option is named as the limit, with its value
    assert "5 open" in details and "the limit is 5 (--max-streams)" in details


def test_closing_a_stream_frees_its_slot(limited):
    first = limited.open("watch", "rucio")
    limited.open("watch", "rucio")
    limited.open("watch", "rucio")
    assert refusal(limited.start("watch", "rucio"))[0] is Code.RESOURCE_EXHAUSTED
    first.cancel()
    # The slot comes back once the controller has seen the cancellation: retry until then.
    wait_for(lambda: admitted(limited, "watch", "rucio"), "a slot freed by the cancelled stream")
    assert refusal(limited.start("watch", "rucio"))[0] is Code.RESOURCE_EXHAUSTED


def test_a_stream_that_ends_frees_its_slot(limited):
    with TsdnClient(limited.address, token=TOKENS["rucio"][1]) as rucio:
        for _ in range(3):  # watching an unknown reservation ends at once (NOT_FOUND), holding nothing after
            call = limited.start("watch", "rucio", name="reservations/" + "f" * 32)
            assert refusal(call)[0] is Code.NOT_FOUND
        reservation = rucio.create_reservation(SRC, DST, G)
        for _ in range(3):
            limited.open("watch", "rucio", name=reservation.name)
        assert refusal(limited.start("watch", "rucio"))[0] is Code.RESOURCE_EXHAUSTED


@pytest.mark.parametrize("kind", ["reflection", "health", "watch", "agents", "jobs", "transfer"])
@pytest.mark.parametrize("principal", [None, BAD])
def test_an_unauthenticated_stream_is_refused(controller, streams, kind, principal):
    fields = {"dtn": SRC} if kind == "jobs" else {"name": "transfers/" + "0" * 32} if kind == "transfer" else {}
    code, details = refusal(streams.start(kind, principal, **fields))
    assert code is Code.UNAUTHENTICATED, details
    assert "token" in details
    assert controller.streams.open == 0


def test_with_a_token_reflection_and_health_watch_answer(controller, streams):
    reflection = streams.start("reflection", "rucio")
    services = {s.name for s in next(iter(reflection)).list_services_response.service}
    assert {"tsdn.v1.BandwidthService", "grpc.health.v1.Health"} <= services
    health = streams.start("health", "noc")
    assert next(iter(health)).status == health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(controller.address) as channel:  # Check stays open, for load balancers
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=WAIT)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_unauthenticated_streams_hold_no_slot(start_controller, tokens_file):
    controller = start_controller(tokens=tokens_file, max_streams=2, max_streams_per_principal=2)
    opened = Streams(controller.address)
    try:
        for _ in range(5):
            assert refusal(opened.start("reflection", None))[0] is Code.UNAUTHENTICATED
        opened.open("watch", "rucio")
        opened.open("watch", "rucio")
        assert controller.streams.open == 2
    finally:
        opened.close()


def test_development_mode_keeps_reflection_open(start_controller):
    controller = start_controller()  # no tokens, loopback: every caller is the admin dev
    opened = Streams(controller.address)
    try:
        reflection = opened.start("reflection", None)
        assert next(iter(reflection)).list_services_response.service
        opened.open("watch", None)
    finally:
        opened.close()


def test_bad_limits_are_refused_naming_the_option(start_controller, tokens_file):
    from sdn_app.core.errors import InvalidArgument

    for limits, option in (({"max_streams": 0}, "--max-streams:"),
                           ({"max_streams_per_principal": -1}, "--max-streams-per-principal:"),
                           ({"max_streams": 10, "max_streams_per_principal": 20}, "--max-streams-per-principal 20")):
        with pytest.raises(InvalidArgument) as info:
            start_controller(tokens=tokens_file, **limits)
        assert option in str(info.value)


def test_unary_calls_answer_with_hundreds_of_streams_open(controller, client_for):
    """300 open streams of every kind (more than the 64 threads unary calls run on): creates,
    heartbeats and health checks still answer within their normal deadline."""
    agent = client_for("dtn-agent")
    for dtn in (SRC, DST):
        agent.register_agent(dtn, apb.HostFacts())
    rucio = client_for("rucio")
    transfer = rucio.start_transfer(SRC, DST, 10 * G, size=10**12)
    opened = Streams(controller.address, channels=4)
    try:
        kinds = [("watch", "rucio", {"include_existing": True}), ("watch", "fts", {}), ("agents", "noc", {}),
                 ("jobs", "dtn-agent", {"dtn": DST}), ("transfer", "rucio", {"name": transfer.name})]
        for i in range(300):
            kind, principal, fields = kinds[i % len(kinds)]
            opened.start(kind, principal, **fields)
        for call in opened.calls:  # each one admitted and subscribed
            assert OPEN_HEADER in tuple(call.initial_metadata()), refusal(call)
        assert controller.streams.open == 300

        with TsdnClient(controller.address, token=TOKENS["rucio"][1], timeout=WAIT, retries=0) as caller, \
                grpc.insecure_channel(controller.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for _ in range(5):
                created = caller.create_reservation("ucsd-dtn1", "dell-dtn1", G)
                assert created.state == pb.ACTIVE
                assert agent.heartbeat(SRC).state == apb.ONLINE
                reply = health.Check(health_pb2.HealthCheckRequest(), timeout=WAIT)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
                caller.delete_reservation(created.name)
    finally:
        opened.close()
    wait_for(lambda: controller.streams.open == 0, "every cancelled stream to give back its slot")


def test_tsdn_controller_offers_the_limits_with_their_defaults():
    from northbound.streams import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_PRINCIPAL
    from tsdn.cli import build_parser

    args = build_parser().parse_args(["controller", "--topology", "sc16"])
    assert (args.max_streams, args.max_streams_per_principal) == (DEFAULT_MAX_STREAMS,
                                                                  DEFAULT_MAX_STREAMS_PER_PRINCIPAL)
    args = build_parser().parse_args(["controller", "--topology", "sc16", "--max-streams", "300",
                                      "--max-streams-per-principal", "20"])
    assert (args.max_streams, args.max_streams_per_principal) == (300, 20)
