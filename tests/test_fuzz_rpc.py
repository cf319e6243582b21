"""Fuzzing every RPC of every tsdn service against a real controller on a loopback port.

Hypothesis builds each request from the message's own descriptor: every field, nested messages,
repeated fields and maps, one member (or none) of each oneof; numbers at and beyond their limits
(huge, negative, NaN, infinities), strings empty, long (up to 100,000 characters), unicode, or
the names the controller knows (so that calls get past the first check), enum values the protos
do not define. Each call carries the token of one role (admin, service, agent, an agent bound to
one DTN), a wrong token, or none. For every example:

- the answer has a defined status: OK or one of the refusals the API documents, never UNKNOWN,
  INTERNAL or a transport error (a status message too long for the trailers), and a refusal
  says why;
- a refusal changes nothing: the reservations, the ledger's bookings, the agents and the
  transfers are the same before and after;
- the server stays up: its health check answers SERVING.

One controller for the module (ledger only, sc16, a frozen clock so that nothing expires or
times out between two snapshots). Bounded for CI: `EXAMPLES` per RPC, derandomized (a fixed
seed derived from the test's code: the same examples in every run, until the test or Hypothesis
changes) and no example database. A stream is read up to its first message; one still open and
silent after `STREAM_WAIT` counts as accepted (TakeJobs refusing at once is test_rpc_validation's).

Below the property, bytes that are no message at all (truncated, an over-long varint, a string
field that is not UTF-8), sent raw to every method of every service the server registers (gRPC
health and reflection included): INVALID_ARGUMENT naming the request type, one warning in the
log and no traceback, and the server serves on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from northbound.proto.tsdn.v1 import agent_pb2, bandwidth_pb2, topology_pb2, transfer_pb2
from sdn_app.core.clock import FakeClock
from tests.conftest import TOKENS
from tests.waiting import wait_for
from topologies import builtin_topology
from tsdn.controller import Controller, ControllerConfig

EXAMPLES = 80  # per RPC: about 1,400 calls (RPCs with few distinct requests stop earlier), 30-45 s on 2 cores
CALL_TIMEOUT = 10.0  # a unary call that takes longer has hung: DEADLINE_EXCEEDED fails the example
STREAM_WAIT = 0.3  # how long a stream may stay open and silent (then DEADLINE_EXCEEDED: it was accepted)
SRC, DST = "caltech-a-dtn1", "caltech-b-dtn1"
BOUND_AGENT = ("bound-agent", "agent", "bound-agent-token-0123456789abcdef", SRC)
Code = grpc.StatusCode
REFUSALS = {Code.INVALID_ARGUMENT, Code.NOT_FOUND, Code.ALREADY_EXISTS, Code.RESOURCE_EXHAUSTED,
            Code.FAILED_PRECONDITION, Code.PERMISSION_DENIED, Code.UNAUTHENTICATED}
SERVICES = [module.DESCRIPTOR.services_by_name[name] for module, name in (
    (bandwidth_pb2, "BandwidthService"), (topology_pb2, "TopologyService"), (agent_pb2, "AgentService"),
    (transfer_pb2, "TransferService"))]
METHODS = [method for service in SERVICES for method in service.methods]
CALLERS = [*TOKENS, BOUND_AGENT[0], "wrong-token", "malformed", None]


# -- the controller --------------------------------------------------------------------------------------------------


@dataclass
class Target:
    """The controller under fuzz, a channel to it, the names it knows, and a valid request of each RPC
    (by method name) to start mutations from."""

    controller: Controller
    channel: grpc.Channel
    names: list[str]
    templates: dict[str, Message]


def _token(caller: str | None) -> tuple[tuple[str, str], ...]:
    if caller is None:
        return ()
    if caller == "wrong-token":
        return (("authorization", "Bearer not-a-token-anyone-was-given"),)
    if caller == "malformed":
        return (("authorization", "Basic dG9rZW4="),)
    if caller == BOUND_AGENT[0]:
        return (("authorization", f"Bearer {BOUND_AGENT[2]}"),)
    return (("authorization", f"Bearer {TOKENS[caller][1]}"),)


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Iterator[Target]:
    folder: Path = tmp_path_factory.mktemp("fuzz")
    tokens = folder / "tokens.yaml"
    entries = [{"principal": p, "role": role, "token": token} for p, (role, token) in TOKENS.items()]
    entries.append({"principal": BOUND_AGENT[0], "role": BOUND_AGENT[1], "token": BOUND_AGENT[2],
                    "dtn": BOUND_AGENT[3]})
    tokens.write_text(yaml.safe_dump({"tokens": entries}))
    tokens.chmod(0o600)
    controller = Controller(ControllerConfig(topology=builtin_topology("sc16"), listen_grpc="127.0.0.1:0",
                                             state=folder / "tsdn.db", tokens=tokens, clock=FakeClock(time.time()),
                                             agent_timeout=1e9))
    controller.start()
    channel = grpc.insecure_channel(controller.address)
    try:
        names, templates = _seed(channel, controller)
        yield Target(controller, channel, names, templates)
    finally:
        channel.close()
        controller.stop(grace=0.5)


def _seed(channel: grpc.Channel, controller: Controller) -> tuple[list[str], dict[str, Message]]:
    """Agents, a reservation and a transfer to aim at; the names a caller could know, and valid requests."""
    from northbound.proto.tsdn.v1 import agent_pb2_grpc, bandwidth_pb2_grpc, transfer_pb2_grpc

    agents = agent_pb2_grpc.AgentServiceStub(channel)
    for dtn in (SRC, DST):
        agents.RegisterAgent(agent_pb2.RegisterAgentRequest(dtn=dtn), metadata=_token("noc"), timeout=CALL_TIMEOUT)
    reservation = bandwidth_pb2_grpc.BandwidthServiceStub(channel).CreateReservation(
        bandwidth_pb2.CreateReservationRequest(source_dtn="ucsd-dtn1", destination_dtn="dell-dtn1",
                                               bandwidth_bps=10**10, request_id="seed"),
        metadata=_token("rucio"), timeout=CALL_TIMEOUT)
    transfer = transfer_pb2_grpc.TransferServiceStub(channel).StartTransfer(
        transfer_pb2.StartTransferRequest(src_dtn=SRC, dst_dtn=DST, bandwidth_bps=10**10, size_bytes=10**9),
        metadata=_token("rucio"), timeout=CALL_TIMEOUT)
    topology = controller.topology
    names = sorted({*topology.dtns, *(s.name for s in topology.spec.switches),
                    *(link.label for link in topology.spec.links), "builtin", "iperf3", "rucio", "noc",
                    reservation.name, reservation.id, transfer.name, transfer.reservation, f"agents/{SRC}",
                    "10.0.0.1", "/data/in", "/data/a.root", "seed"})
    b, a, t = bandwidth_pb2, agent_pb2, transfer_pb2
    window = {"source_dtn": "ucsd-dtn1", "destination_dtn": "dell-dtn1"}
    rate = a.RateReport(start=1.0, end=2.0, bits_per_second=9e9, bytes_total=10**9, engine="builtin")
    templates: list[Message] = [
        b.CreateReservationRequest(**window, bandwidth_bps=10**9, request_id="fuzz"),
        b.GetReservationRequest(name=reservation.name), b.DeleteReservationRequest(name=reservation.name),
        b.ListReservationsRequest(dtn="ucsd-dtn1"),
        b.ModifyReservationRequest(name=reservation.name, bandwidth_bps=2 * 10**9),
        b.QueryAvailabilityRequest(**window), b.WatchReservationsRequest(name=reservation.name, include_existing=True),
        a.RegisterAgentRequest(dtn=SRC, facts=a.HostFacts(nics=[a.AgentNic(name="eth0", speed_bps=10**11)],
                                                          data_nic="eth0", cpus=[0, 1])),
        a.HeartbeatRequest(dtn=SRC), a.GetAgentRequest(name=f"agents/{SRC}"), a.TakeJobsRequest(dtn=DST),
        a.WatchAgentsRequest(include_existing=True),
        a.TransferReport(transfer=transfer.name, dtn=SRC, role=a.SEND, rate=rate),
        t.StartTransferRequest(src_dtn=SRC, dst_dtn=DST, bandwidth_bps=10**9, size_bytes=10**9),
        t.GetTransferRequest(name=transfer.name), t.CancelTransferRequest(name=transfer.name),
        t.WatchTransferRequest(name=transfer.name),
    ]
    return names, {m.DESCRIPTOR.full_name: m for m in templates}


# -- requests from descriptors --------------------------------------------------------------------------------------


_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1), FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1), FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_EDGES = [0, 1, 2, 3, 20, 21, 256, 257, 1024, 1025, 65535, 65536, 10**9, 10**10, 10**16, 10**18, 10**18 + 1,
          2**31 - 1, 2**32 - 1, 2**53, 2**63 - 1, 2**64 - 1, -1, -(2**31), -(2**63), 253_402_300_799,
          253_402_300_800, 999_999_999, 1_000_000_000]
_FLOATS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e300, -1e300, 1e16, 1.0000001e16, 5e-324, -1.0,
                     1e9, 1e6, 1e6 + 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1e12),
)
_CHARACTERS = st.characters(codec="utf-8")
_LONG = st.builds(lambda piece, n: piece * n, st.sampled_from(["a", "é", "\U0001f4be", "\x00", "/", "%", " "]),
                  st.sampled_from([63, 64, 127, 128, 129, 253, 254, 256, 257, 1024, 1025, 4096, 4097, 10_000, 100_000]))


def _integers(kind: int) -> st.SearchStrategy[int]:
    low, high = _INT_RANGES[kind]
    return st.one_of(st.sampled_from([e for e in _EDGES if low <= e <= high]), st.integers(low, high),
                     st.integers(max(low, -10), min(high, 100)))


def _strings(names: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(names), st.just(""), st.text(_CHARACTERS, max_size=24), _LONG,
                     st.builds(lambda a, b: a + b, st.sampled_from(["reservations/", "transfers/", "agents/", "/"]),
                               st.text(_CHARACTERS, max_size=40)))


def _scalar(field: FieldDescriptor, names: list[str]) -> st.SearchStrategy:
    if field.type in _INT_RANGES:
        return _integers(field.type)
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _FLOATS
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_STRING:
        return _strings(names)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if field.type == FieldDescriptor.TYPE_ENUM:  # defined values, and others (proto3 enums are open)
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]),
                         st.integers(-(2**31), 2**31 - 1))
    raise AssertionError(f"no strategy for field {field.full_name} of type {field.type}")


def _value(field: FieldDescriptor, names: list[str], depth: int) -> st.SearchStrategy:
    """What one (non-repeated) field may hold."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return messages(field.message_type, names, depth + 1)
    return _scalar(field, names)


def _repeated(field: FieldDescriptor, names: list[str], depth: int) -> st.SearchStrategy[list]:
    element = _value(field, names, depth)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return st.lists(element, max_size=3)
    # Many copies of one short value: past every count limit, within gRPC's 4 MiB per message.
    short = st.sampled_from(names) if field.type == FieldDescriptor.TYPE_STRING else element
    many = st.builds(lambda x, n: [x] * n, short, st.sampled_from([64, 65, 1024, 1025, 4096, 4097, 10_001]))
    return st.one_of(st.lists(element, max_size=4), many)


def _map(field: FieldDescriptor, names: list[str]) -> st.SearchStrategy[dict]:
    key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
    small = st.dictionaries(_scalar(key, names), _scalar(value, names), max_size=3)
    many = st.builds(lambda n: {f"k{i}": "v" for i in range(n)}, st.sampled_from([32, 33, 1000]))
    return st.one_of(small, many)


def messages(descriptor: Descriptor, names: list[str], depth: int = 0) -> st.SearchStrategy[Message]:
    """Messages of `descriptor`'s type, each field set or not (one member or none of each oneof)."""
    cls = message_factory.GetMessageClass(descriptor)
    if depth > 3:
        return st.just(cls())
    choices: dict[str, st.SearchStrategy] = {}
    for field in descriptor.fields:
        if field.is_repeated:
            is_map = field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry
            strategy = _map(field, names) if is_map else _repeated(field, names, depth)
        else:
            strategy = _value(field, names, depth)
        choices[field.name] = st.one_of(st.none(), strategy)
    oneofs = [o for o in descriptor.oneofs if len(o.fields) > 1]  # real oneofs; proto3 `optional` are single

    @st.composite
    def build(draw) -> Message:
        message = cls()
        values = {name: draw(strategy) for name, strategy in choices.items()}
        for oneof in oneofs:  # at most one member, chosen at random
            keep = draw(st.sampled_from([None, *(f.name for f in oneof.fields)]))
            for f in oneof.fields:
                if f.name != keep:
                    values[f.name] = None
        for name, value in values.items():
            if value is None:
                continue
            field = descriptor.fields_by_name[name]
            if field.is_repeated:
                if isinstance(value, dict):
                    getattr(message, name).update(value)
                else:
                    getattr(message, name).extend(value)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                getattr(message, name).CopyFrom(value)
            else:
                setattr(message, name, value)
        return message

    return build()


def _field(field: FieldDescriptor, names: list[str]) -> st.SearchStrategy:
    """What a field of any kind may hold (None: cleared)."""
    if field.is_repeated:
        is_map = field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry
        return st.one_of(st.none(), _map(field, names) if is_map else _repeated(field, names, 0))
    return st.one_of(st.none(), _value(field, names, 0))


def _set(message: Message, field: FieldDescriptor, value: object) -> None:
    message.ClearField(field.name)
    if value is None:
        return
    if isinstance(value, dict):
        getattr(message, field.name).update(value)
    elif isinstance(value, list):
        getattr(message, field.name).extend(value)
    elif isinstance(value, Message):
        getattr(message, field.name).CopyFrom(value)
    else:
        setattr(message, field.name, value)


def mutations(template: Message, names: list[str]) -> st.SearchStrategy[Message]:
    """`template` (a valid request) with up to two of its fields replaced or cleared: calls that get
    past the first checks, into the core."""
    fields = list(template.DESCRIPTOR.fields)
    changes = st.lists(st.sampled_from(fields), max_size=2, unique_by=lambda f: f.name).flatmap(
        lambda chosen: st.tuples(*(st.tuples(st.just(f), _field(f, names)) for f in chosen)))

    def apply(pairs: tuple) -> Message:
        message = type(template)()
        message.CopyFrom(template)
        for field, value in pairs:
            _set(message, field, value)
        return message
    return changes.map(apply)


_REQUESTS: dict[str, st.SearchStrategy[Message]] = {}


def requests(target: Target, descriptor: Descriptor) -> st.SearchStrategy[Message]:
    """Requests of a type, built once per type: generated from scratch, or a valid one mutated."""
    if descriptor.full_name not in _REQUESTS:
        generated = messages(descriptor, target.names)
        template = target.templates.get(descriptor.full_name)
        mutated = None if template is None else mutations(template, target.names)
        _REQUESTS[descriptor.full_name] = generated if mutated is None else st.one_of(generated, mutated, mutated)
    return _REQUESTS[descriptor.full_name]


# -- what is compared -----------------------------------------------------------------------------------------------


def _snapshot(target: Target) -> tuple:
    """Everything a refusal must leave alone: reservations, bookings, agents, transfers."""
    channel, admin = target.channel, _token("noc")

    def unary(path: str, request: Message, response: type[Message]) -> Message:
        call = channel.unary_unary(path, request_serializer=type(request).SerializeToString,
                                   response_deserializer=response.FromString)
        return call(request, metadata=admin, timeout=CALL_TIMEOUT)

    reservations, token = [], ""
    while True:
        page = unary("/tsdn.v1.BandwidthService/ListReservations",
                     bandwidth_pb2.ListReservationsRequest(page_size=1000, page_token=token),
                     bandwidth_pb2.ListReservationsResponse)
        reservations += [r.SerializeToString(deterministic=True) for r in page.reservations]
        token = page.next_page_token
        if not token:
            break
    agents = unary("/tsdn.v1.AgentService/ListAgents", agent_pb2.ListAgentsRequest(), agent_pb2.ListAgentsResponse)
    transfers = unary("/tsdn.v1.TransferService/ListTransfers", transfer_pb2.ListTransfersRequest(),
                      transfer_pb2.ListTransfersResponse)
    ledger = target.controller.ledger
    bookings = target.controller.worker.call(lambda: [(b.id, b.bandwidth, b.start, b.end, b.directions)
                                                      for b in ledger.bookings()])
    return (reservations, bookings, agents.SerializeToString(deterministic=True),
            transfers.SerializeToString(deterministic=True))


def _invoke(target: Target, method: MethodDescriptor, request: Message, caller: str | None) -> tuple[Code, str]:
    """Call `method` once; (status, details). A stream is read up to its first message."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    response = message_factory.GetMessageClass(method.output_type)
    if not method.server_streaming:
        call = target.channel.unary_unary(path, request_serializer=type(request).SerializeToString,
                                          response_deserializer=response.FromString)
        try:
            call(request, metadata=_token(caller), timeout=CALL_TIMEOUT)
        except grpc.RpcError as error:
            return error.code(), error.details() or ""
        return Code.OK, ""
    call = target.channel.unary_stream(path, request_serializer=type(request).SerializeToString,
                                       response_deserializer=response.FromString)
    stream = call(request, metadata=_token(caller), timeout=STREAM_WAIT)
    try:
        next(stream, None)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    finally:
        stream.cancel()
    return Code.OK, ""


def _healthy(target: Target) -> bool:
    health = health_pb2_grpc.HealthStub(target.channel)
    answer = health.Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT)
    return answer.status == health_pb2.HealthCheckResponse.SERVING


# -- the property ----------------------------------------------------------------------------------------------------


def _check(target: Target, method: MethodDescriptor, request: Message, caller: str | None) -> None:
    before = _snapshot(target)
    code, details = _invoke(target, method, request, caller)
    allowed = REFUSALS | {Code.OK} | ({Code.DEADLINE_EXCEEDED} if method.server_streaming else set())
    assert code in allowed, f"{method.name} answered {code.name}: {details}"
    if code in REFUSALS:
        assert details, f"{method.name}: {code.name} without a message"
        transport = ("Stream removed", "metadata size exceeds", "larger than max")  # gRPC's own, not ours
        assert not any(words in details for words in transport), f"{method.name}: {code.name}: {details}"
        assert _snapshot(target) == before, f"{method.name} refused ({code.name}: {details}) but changed the state"
    assert _healthy(target), f"the server is not SERVING after {method.name}"


def _fuzz(method: MethodDescriptor) -> Callable[[Target], None]:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(data=st.data())
    def run(target: Target, data: st.DataObject) -> None:
        request = data.draw(requests(target, method.input_type), label="request")
        caller = data.draw(st.sampled_from(CALLERS), label="caller")
        _check(target, method, request, caller)
    return run


@pytest.mark.parametrize("method", METHODS, ids=lambda m: f"{m.containing_service.name}.{m.name}")
def test_every_rpc_answers_fuzzed_requests_with_a_defined_status_and_refusals_change_nothing(target, method):
    _fuzz(method)(target)


def test_every_rpc_is_fuzzed():
    """A new RPC in a proto is fuzzed without anyone adding it here."""
    assert {f"{m.containing_service.name}.{m.name}" for m in METHODS} >= {
        "BandwidthService.CreateReservation", "BandwidthService.WatchReservations", "TopologyService.GetTopology",
        "AgentService.TakeJobs", "AgentService.ReportTransfer", "TransferService.StartTransfer",
        "TransferService.WatchTransfer"}
    assert len(METHODS) >= 21


# -- bytes that are not a message ------------------------------------------------------------------------------------

# Every method the server registers: the tsdn services, gRPC health and reflection (client and bidi streams).
SERVED = [*METHODS, *health_pb2.DESCRIPTOR.services_by_name["Health"].methods,
          *reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"].methods]
_VARINTS = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
            FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _damaged(descriptor: Descriptor) -> dict[str, bytes]:
    """Bytes that are not a message of `descriptor`'s type, by kind of damage: a length-delimited
    field cut short, a varint of 11 bytes (10 at most), a string field that is not UTF-8 (for a type
    with one). Unknown field numbers where the type has no field of the kind: they are parsed too."""
    spare = max((f.number for f in descriptor.fields), default=0) + 1
    strings = [f.number for f in descriptor.fields if f.type == FieldDescriptor.TYPE_STRING]
    varints = [f.number for f in descriptor.fields if f.type in _VARINTS]
    damaged = {"truncated": _varint((strings or [spare])[0] << 3 | 2) + b"\x05ab",
               "overlong-varint": _varint((varints or [spare])[0] << 3) + b"\xff" * 10 + b"\x01"}
    if strings:
        damaged["bad-utf8"] = _varint(strings[0] << 3 | 2) + b"\x02\xff\xfe"
    cls = message_factory.GetMessageClass(descriptor)
    for raw in damaged.values():  # the test's own check: each really is refused by protobuf
        with pytest.raises(DecodeError):
            cls.FromString(raw)
    return damaged


def _send_raw(target: Target, method: MethodDescriptor, raw: bytes) -> tuple[Code, str]:
    """Send `raw` as the request (the only one of a client stream) of `method`, with the admin's token;
    (status, details), a stream read up to its first message."""
    path, channel = f"/{method.containing_service.full_name}/{method.name}", target.channel
    options = {"metadata": _token("noc"), "timeout": CALL_TIMEOUT}
    try:
        if method.client_streaming and method.server_streaming:
            next(channel.stream_stream(path)(iter([raw]), **options))
        elif method.client_streaming:
            channel.stream_unary(path)(iter([raw]), **options)
        elif method.server_streaming:
            next(channel.unary_stream(path)(raw, **options))
        else:
            channel.unary_unary(path)(raw, **options)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return Code.OK, ""


def _slots_given_back(target: Target) -> None:
    """A refused stream gives its slot back (just after its status is sent: wait for it)."""
    wait_for(lambda: target.controller.streams.open == 0, "the refused stream to give its slot back", timeout=5)


def _method(path: str) -> MethodDescriptor:
    service, name = path.strip("/").split("/")
    return next(m for m in SERVED if m.containing_service.full_name == service and m.name == name)


def test_every_registered_service_is_sent_damaged_bytes(target):
    """A service the server registers later is covered here (or this test says which is missing)."""
    from grpc_reflection.v1alpha import reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(target.channel)
    answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                        metadata=_token("noc"), timeout=CALL_TIMEOUT)
    registered = {service.name for service in next(answers).list_services_response.service}
    assert registered == {m.containing_service.full_name for m in SERVED}


@pytest.mark.parametrize("damage", ["truncated", "overlong-varint", "bad-utf8"])
@pytest.mark.parametrize("path", ["/tsdn.v1.BandwidthService/CreateReservation",
                                  "/tsdn.v1.BandwidthService/WatchReservations"])
def test_bytes_that_are_not_a_message_are_invalid_argument_naming_the_request_type(target, path, damage):
    method = _method(path)
    before = _snapshot(target)
    code, details = _send_raw(target, method, _damaged(method.input_type)[damage])
    assert code == Code.INVALID_ARGUMENT, f"{path} {damage}: {code.name}: {details}"
    assert details.startswith(f"request: not a valid {method.input_type.full_name} ("), details
    assert "Unexpected" not in details and "Error parsing message" not in details, details
    if damage == "bad-utf8":
        assert "UTF-8" in details, details
    assert _snapshot(target) == before, f"{path} refused {damage} bytes but changed the state"
    assert _healthy(target), f"the server is not SERVING after {damage} bytes to {path}"
    _slots_given_back(target)


@pytest.mark.parametrize("method", SERVED, ids=lambda m: f"{m.containing_service.name}.{m.name}")
def test_every_method_answers_bytes_that_are_not_a_message_with_invalid_argument(target, method):
    for damage, raw in _damaged(method.input_type).items():
        code, details = _send_raw(target, method, raw)
        assert code == Code.INVALID_ARGUMENT, f"{method.name} {damage}: {code.name}: {details}"
        assert f"not a valid {method.input_type.full_name}" in details, details
    assert _healthy(target)
    _slots_given_back(target)


@pytest.mark.parametrize("path", ["/tsdn.v1.BandwidthService/CreateReservation",
                                  "/tsdn.v1.BandwidthService/WatchReservations",
                                  "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"])
def test_bytes_that_are_not_a_message_are_logged_once_without_a_traceback(target, path, caplog):
    method = _method(path)
    caplog.set_level(logging.INFO)
    _healthy(target)  # the channel is connected: no connection chatter in the records below
    caplog.clear()
    code, _ = _send_raw(target, method, _damaged(method.input_type)["truncated"])
    _slots_given_back(target)  # a stream's clean-up is over (it runs just after the status is sent)
    _healthy(target)  # and what the server's loop had queued before this call
    records = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert code == Code.INVALID_ARGUMENT
    assert len(records) == 1, [f"{r.name} {r.levelname}: {r.getMessage()}" for r in records]
    record = records[0]
    assert record.levelno == logging.WARNING and record.exc_info is None and not record.exc_text
    message = record.getMessage()
    assert path in message and "127.0.0.1" in message and method.input_type.full_name in message, message
    assert "Traceback" not in message


def test_a_client_stream_is_refused_at_its_first_message_that_is_not_one(target):
    """The reflection stream answers the valid request before the damaged one, then INVALID_ARGUMENT."""
    valid = reflection_pb2.ServerReflectionRequest(list_services="").SerializeToString()
    damaged = _damaged(reflection_pb2.ServerReflectionRequest.DESCRIPTOR)["bad-utf8"]
    answers = target.channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")(
        iter([valid, damaged]), metadata=_token("noc"), timeout=CALL_TIMEOUT)
    first = reflection_pb2.ServerReflectionResponse.FromString(next(answers))
    assert first.list_services_response.service
    with pytest.raises(grpc.RpcError) as refused:
        next(answers)
    assert refused.value.code() == Code.INVALID_ARGUMENT, refused.value.details()
    assert "not a valid grpc.reflection.v1alpha.ServerReflectionRequest" in refused.value.details()
    _slots_given_back(target)


def test_handlers_of_every_kind_sync_or_async_refuse_bytes_that_are_not_a_message():
    """`RequestDecoding` on a bare server, for the handler styles the controller does not use (yet):
    plain functions and generators run in the thread pool, client streams, each message checked."""
    from concurrent.futures import ThreadPoolExecutor

    from google.protobuf.wrappers_pb2 import StringValue

    from northbound.decoding import RequestDecoding
    from northbound.loop import LoopThread

    def unary(request, context):
        return request

    def repeat(request, context):  # a plain function returning an iterator
        return iter([request, request])

    def collect(requests, context):
        return StringValue(value=",".join(r.value for r in requests))

    def stream(requests, context):
        yield from requests

    async def unary_async(request, context):
        return request

    async def repeat_async(request, context):
        yield request

    async def collect_async(requests, context):
        return StringValue(value=",".join([r.value async for r in requests]))

    async def stream_async(requests, context):
        async for request in requests:
            yield request

    make = {"uu": grpc.unary_unary_rpc_method_handler, "us": grpc.unary_stream_rpc_method_handler,
            "su": grpc.stream_unary_rpc_method_handler, "ss": grpc.stream_stream_rpc_method_handler}
    kinds = {"uu": unary, "us": repeat, "su": collect, "ss": stream,
             "auu": unary_async, "aus": repeat_async, "asu": collect_async, "ass": stream_async}
    handlers = {name: make[name[-2:]](behavior, StringValue.FromString, StringValue.SerializeToString)
                for name, behavior in kinds.items()}

    async def serve() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(migration_thread_pool=pool, interceptors=[RequestDecoding()])
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.Kinds", handlers)])
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    loop, pool = LoopThread("decoding-kinds"), ThreadPoolExecutor(2)
    server, port = loop.run(serve())
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    good, bad = StringValue(value="x").SerializeToString(), b"\x0a\x02\xff\xfe"
    try:
        for name in kinds:
            streams_in, streams_out = name[-2] == "s", name[-1] == "s"
            call = getattr(channel, f"{'stream' if streams_in else 'unary'}_{'stream' if streams_out else 'unary'}")
            for requests in ([good, good], [bad], [good, bad]) if streams_in else ([good], [bad]):
                try:
                    answer = call(f"/t.Kinds/{name}")(iter(requests) if streams_in else requests[0], timeout=5)
                    answer = list(answer) if streams_out else answer
                except grpc.RpcError as error:
                    assert bad in requests, f"{name}: {error.code().name}: {error.details()}"
                    assert error.code() == Code.INVALID_ARGUMENT, f"{name}: {error.code().name}: {error.details()}"
                    assert error.details() == ("request: not a valid google.protobuf.StringValue "
                                               "(String field had bad UTF-8)"), error.details()
                else:
                    assert bad not in requests, f"{name} accepted bytes that are not a message: {answer!r}"
    finally:
        channel.close()
        loop.run(server.stop(0))
        loop.close()
        pool.shutdown()
