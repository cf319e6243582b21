"""Campaigns: many reservations in one call (`ReservationBook.create_many`, the CreateReservations
RPC, `tsdn path batch FILE`).

The core on a real SQLite ledger (ring8 with switches, `tests/switched.py`, or ledger only):
per-item refusals in order, all-or-nothing leaving no row, booking, event or switch change
behind, the limits, idempotent retries. Then the RPC against a real controller on a loopback
port, with a fabric stand-in whose confirmations the test holds back and lets go. The CLI's
`tsdn path batch FILE` is tested with the other commands, in tests/test_cli_reservations.py.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from northbound.client import ApiError, TsdnClient, reservation_request
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import bandwidth_pb2_grpc as pb_grpc
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity, NotFound, PermissionDenied
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import Principal, Reservation, Role, State
from sdn_app.core.reservations import MAX_BATCH, BatchAborted, BatchItem, ReservationBook
from sdn_app.core.topology import Topology
from tests.conftest import TOKENS
from tests.switched import RUCIO, G, TablesFabric, request, switched_ring8
from tests.waiting import wait_for
from topologies import builtin_topology
from tsdn.controller import Controller, ControllerConfig

HOUR = 3600.0
M = 10**6


def rows(env: SimpleNamespace) -> int:
    """Reservation rows in the ledger's database."""
    return env.ledger.query("SELECT COUNT(*) FROM reservations")[0][0]


def untouched(env: SimpleNamespace) -> None:
    """Nothing booked, stored, queued for the switches or announced."""
    assert rows(env) == 0
    assert len(env.ledger) == 0
    assert env.book.take_changes() == []
    assert env.book.take_events() == []


def item(env: SimpleNamespace, src: str = "dtn1", dst: str = "dtn3", bandwidth: int = 10 * G,
         request_id: str = "", **more) -> BatchItem:
    return BatchItem(request(env.clock, src, dst, bandwidth, **more), request_id=request_id)


def prefixed(env: SimpleNamespace, n: int, src: str = "dtn1", dst: str = "dtn3", bandwidth: int = 10 * G,
             request_id: str = "") -> BatchItem:
    """An item whose traffic is named by prefixes of its own (number `n`)."""
    return item(env, src, dst, bandwidth, request_id, src_prefix=f"2001:db8:1:{n:x}::/64",
                dst_prefix=f"2001:db8:3:{n:x}::/64")


def ledger_only(tmp_path: Path) -> SimpleNamespace:
    topology = Topology.load(builtin_topology("ring8"))
    clock = FakeClock()
    ledger = Ledger(topology.capacities(), tmp_path / "l.db", clock)
    return SimpleNamespace(topology=topology, clock=clock, ledger=ledger,
                           book=ReservationBook(topology, ledger, clock))


@pytest.fixture
def env(tmp_path: Path) -> SimpleNamespace:
    return switched_ring8(tmp_path)


# -- the ledger's trial ----------------------------------------------------------------------------------------------


def test_a_trial_holds_bookings_in_memory_only_and_undoes_them(env):
    ledger = env.ledger
    direction = "s1:1->s2:2"
    now = env.clock.now()
    with ledger.trial() as trial:
        trial.hold([direction], 60 * G, now, now + HOUR)
        assert ledger.free(direction, now, now + HOUR) == 40 * G
        with pytest.raises(NoCapacity, match="40G free"):
            trial.hold([direction], 50 * G, now, now + HOUR)
        with pytest.raises(RuntimeError, match="trial is open"):
            ledger.reserve([direction], G, now, now + HOUR)
    assert ledger.free(direction, now, now + HOUR) == 100 * G
    assert len(ledger) == 0 and ledger.query("SELECT COUNT(*) FROM bookings")[0][0] == 0
    with pytest.raises(ValueError), ledger.trial() as trial:
        trial.hold([direction], 60 * G, now, now + HOUR)
        raise ValueError("left by an error")
    assert ledger.free(direction, now, now + HOUR) == 100 * G
    ledger.reserve([direction], G, now, now + HOUR)  # writing works again once the trial ended


# -- each on its own -------------------------------------------------------------------------------------------------


def test_each_request_is_admitted_or_refused_on_its_own_in_order(env):
    env.book.take_events()
    out = env.book.create_many(RUCIO, [prefixed(env, 1, bandwidth=60 * G), prefixed(env, 2, bandwidth=60 * G),
                                       item(env, "dtn2", "dtn4", 10 * G)])
    first, second, third = out
    assert isinstance(first, Reservation) and first.state is State.PROVISIONING
    assert isinstance(second, NoCapacity) and "40G free" in str(second)  # what the first one left
    assert isinstance(third, Reservation) and third.request.src == "dtn2"
    assert rows(env) == 2 and len(env.ledger) == 2
    assert {c.reservation_id for c in env.book.take_changes()} >= {first.id, third.id}
    created = [e.reservation.id for e in env.book.take_events() if e.previous is None]
    assert created == [first.id, third.id]


def test_a_request_that_clashes_with_an_earlier_one_of_the_batch_is_refused(env):
    out = env.book.create_many(RUCIO, [item(env), item(env), prefixed(env, 1), prefixed(env, 1)])
    assert isinstance(out[0], Reservation) and isinstance(out[2], Reservation)
    assert isinstance(out[1], FailedPrecondition) and out[0].name in str(out[1])
    assert isinstance(out[3], FailedPrecondition) and "overlaps" in str(out[3])


# -- all or nothing --------------------------------------------------------------------------------------------------


def test_all_or_nothing_books_every_request_when_all_fit(env):
    out = env.book.create_many(RUCIO, [prefixed(env, i, bandwidth=20 * G) for i in range(5)], all_or_nothing=True)
    assert all(isinstance(r, Reservation) and r.state is State.PROVISIONING for r in out)
    assert rows(env) == 5 and len(env.ledger) == 5
    assert {c.reservation_id for c in env.book.take_changes()} >= {r.id for r in out}


@pytest.mark.parametrize("why", ["no capacity", "clash in the batch", "unknown DTN"])
def test_all_or_nothing_refuses_everything_and_leaves_nothing_behind(env, why):
    env.book.take_events()
    refused = {"no capacity": prefixed(env, 3, bandwidth=50 * G, request_id="third"),
               "clash in the batch": prefixed(env, 1, bandwidth=G, request_id="third"),
               "unknown DTN": item(env, "dtn1", "dtn99", G, request_id="third")}[why]
    batch = [prefixed(env, 1, bandwidth=30 * G, request_id="first"),
             prefixed(env, 2, bandwidth=30 * G, request_id="second"), refused,
             item(env, "dtn5", "dtn6", G, request_id="fourth")]
    out = env.book.create_many(RUCIO, batch, all_or_nothing=True)
    error = {"no capacity": NoCapacity, "clash in the batch": FailedPrecondition, "unknown DTN": NotFound}[why]
    assert isinstance(out[2], error), out[2]
    if why == "clash in the batch":
        assert "requests[0] of this batch" in str(out[2])
    for aborted in (out[0], out[1], out[3]):
        assert isinstance(aborted, BatchAborted) and aborted.code == "ABORTED"
        assert "requests[2] (request_id 'third') was refused" in str(aborted)
        assert error.code in str(aborted)
    untouched(env)
    # The same capacity is there for the next request: the trial's holds were undone.
    assert isinstance(env.book.create(RUCIO, request(env.clock, bandwidth=100 * G)), Reservation)


def test_all_or_nothing_names_every_refused_request(env):
    out = env.book.create_many(RUCIO, [prefixed(env, 1, bandwidth=90 * G), prefixed(env, 2, bandwidth=20 * G),
                                       prefixed(env, 3, bandwidth=20 * G), prefixed(env, 4, bandwidth=5 * G)],
                               all_or_nothing=True)
    assert [type(r) for r in out] == [BatchAborted, NoCapacity, NoCapacity, BatchAborted]
    assert "requests[1] was refused" in str(out[0])
    untouched(env)


def test_a_request_refused_after_the_trial_undoes_the_batch(env, monkeypatch):
    """Only a bug gets there (the trial said every request fits); the batch still books nothing."""
    admit = env.book._admit
    calls = []

    def refusing_the_second(*args, **kwargs):
        if not args[4]:  # a real admission, not the trial's
            calls.append(args[1])
            if len(calls) == 2:
                raise NoCapacity("refused after its trial")
        return admit(*args, **kwargs)
    monkeypatch.setattr(env.book, "_admit", refusing_the_second)
    out = env.book.create_many(RUCIO, [prefixed(env, 1), prefixed(env, 2), prefixed(env, 3)], all_or_nothing=True)
    assert [type(r) for r in out] == [BatchAborted, NoCapacity, BatchAborted]
    assert len(env.ledger) == 0
    first = env.book.list(RUCIO)[0][0]
    assert first.state is State.RELEASED and "refused after its trial" in first.reason


# -- validate_only, retries, limits, roles ---------------------------------------------------------------------------


def test_validate_only_answers_as_the_batch_would_and_books_nothing(env):
    env.book.take_events()
    out = env.book.create_many(RUCIO, [prefixed(env, 1, bandwidth=60 * G), prefixed(env, 2, bandwidth=60 * G)],
                               validate_only=True)
    assert isinstance(out[0], Reservation) and out[0].id == "" and "validate_only" in out[0].reason
    assert isinstance(out[1], NoCapacity)
    untouched(env)
    out = env.book.create_many(RUCIO, [prefixed(env, 1, bandwidth=60 * G), prefixed(env, 2, bandwidth=60 * G)],
                               all_or_nothing=True, validate_only=True)
    assert [type(r) for r in out] == [BatchAborted, NoCapacity]
    untouched(env)


def test_a_retried_batch_returns_the_same_reservations(env):
    batch = [prefixed(env, i, request_id=f"campaign-{i}") for i in range(3)]
    first = env.book.create_many(RUCIO, batch)
    env.book.take_events()
    env.book.take_changes()
    for all_or_nothing in (False, True):
        again = env.book.create_many(RUCIO, batch, all_or_nothing=all_or_nothing)
        assert [r.id for r in again] == [r.id for r in first]
    assert rows(env) == 3 and len(env.ledger) == 3
    assert env.book.take_events() == [] and env.book.take_changes() == []
    changed = [*batch[:2], prefixed(env, 9, request_id="campaign-2")]  # the same id, another request
    out = env.book.create_many(RUCIO, changed)
    assert [r.id for r in out[:2]] == [r.id for r in first[:2]]
    assert out[2].code == "ALREADY_EXISTS" and first[2].name in str(out[2])


def test_the_batch_is_refused_whole_when_a_request_is_malformed(env):
    labelled = BatchItem(request(env.clock, "dtn2", "dtn4"), labels={"Bad Key": "x"}, request_id="b")
    with pytest.raises(InvalidArgument, match=r"requests\[1\] \(request_id 'b'\): labels: key 'Bad Key'"):
        env.book.create_many(RUCIO, [item(env, request_id="a"), labelled])
    twice = [item(env, request_id="same"), item(env, "dtn2", "dtn4", request_id="other"),
             item(env, "dtn5", "dtn6", request_id="same")]
    with pytest.raises(InvalidArgument, match=r"requests\[2\] \(request_id 'same'\): the same request_id as "
                                              r"requests\[0\]"):
        env.book.create_many(RUCIO, twice)
    with pytest.raises(InvalidArgument, match=r"requests\[0\] \(request_id 'with space'\): request_id: 1 to 128"):
        env.book.create_many(RUCIO, [item(env, request_id="with space")])
    untouched(env)


def test_one_to_a_thousand_requests(tmp_path):
    env = ledger_only(tmp_path)
    with pytest.raises(InvalidArgument, match="empty batch"):
        env.book.create_many(RUCIO, [])
    pairs = [(f"dtn{1 + i % 8}", f"dtn{1 + (i + 1 + i // 8) % 8}") for i in range(MAX_BATCH + 1)]
    pairs = [(s, d if d != s else f"dtn{1 + (int(s[3:]) % 8)}") for s, d in pairs]
    batch = [item(env, s, d, 10 * M) for s, d in pairs]
    with pytest.raises(InvalidArgument, match="1,001 in one batch, at most 1,000"):
        env.book.create_many(RUCIO, batch)
    untouched(env)
    out = env.book.create_many(RUCIO, batch[:MAX_BATCH], all_or_nothing=True)
    assert len(out) == MAX_BATCH and all(isinstance(r, Reservation) and r.state is State.ACTIVE for r in out)
    assert rows(env) == MAX_BATCH and len(env.ledger) == MAX_BATCH


def test_only_those_who_may_create_may_send_a_batch(env):
    with pytest.raises(PermissionDenied):
        env.book.create_many(Principal("agent1", Role.AGENT), [item(env)])
    untouched(env)


# -- the RPC ---------------------------------------------------------------------------------------------------------

WAIT = 10.0  # seconds: the deadline of any wait for the server
RING8_DTNS = [f"dtn{i}" for i in range(1, 9)]


@pytest.fixture
def switched(tmp_path: Path, tokens_file: Path):
    """A controller on ring8 that controls `TablesFabric` switches; yields (controller, fabric, client)."""
    fabric = TablesFabric(Topology.load(builtin_topology("ring8")))
    controller = Controller(ControllerConfig(topology=builtin_topology("ring8"), listen_grpc="127.0.0.1:0",
                                             listen_openflow="127.0.0.1:0", state=tmp_path / "tsdn.db",
                                             tokens=tokens_file), fabric=fabric)
    controller.start()
    client = TsdnClient(controller.address, token=TOKENS["rucio"][1], timeout=WAIT)
    try:
        yield controller, fabric, client
    finally:
        fabric.gate.set()
        client.close()
        controller.stop(grace=0.5)


def campaign(count: int, bandwidth: int = G, **more) -> list[pb.CreateReservationRequest]:
    """`count` requests between ring8's DTNs, each with prefixes of its own (so that with switches
    many share a DTN pair), for an hour."""
    requests = []
    for i in range(count):
        src, dst = RING8_DTNS[i % 8], RING8_DTNS[(i + 1 + i // 8) % 8]
        if src == dst:
            dst = RING8_DTNS[(i + 1) % 8]
        requests.append(reservation_request(src, dst, bandwidth, duration=HOUR, request_id=f"campaign-{i}",
                                            src_prefix=f"2001:db8:a:{i:x}::/64",
                                            dst_prefix=f"2001:db8:b:{i:x}::/64", **more))
    return requests


def states(response: pb.CreateReservationsResponse) -> set[str]:
    return {pb.ReservationState.Name(r.reservation.state) for r in response.results}


def no_subscriptions_left(controller: Controller) -> bool:
    return not controller.worker.hub._topics


def test_a_batch_answers_once_every_reservation_is_installed(switched):
    controller, fabric, client = switched
    fabric.gate.clear()
    fabric.entered.clear()
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(client.create_reservations, campaign(50))
        assert fabric.entered.wait(WAIT), "no change reached the switches"
        assert not answer.done()  # the switches confirm nothing while the gate is closed
        fabric.gate.set()
        response = answer.result(WAIT)
    assert (response.admitted, response.refused, response.installing) == (50, 0, 0)
    assert states(response) == {"ACTIVE"}
    assert [r.reservation.request_id for r in response.results] == [f"campaign-{i}" for i in range(50)]
    listed = {r.id: pb.ReservationState.Name(r.state) for r in client.list_reservations()}
    assert listed == {r.reservation.id: "ACTIVE" for r in response.results}
    wait_for(lambda: no_subscriptions_left(controller), "the batch's subscription to be dropped")


def test_refused_installs_come_back_failed(switched):
    _, fabric, client = switched
    fabric.refuse = "switch s2 (dpid 0x2) not connected"
    response = client.create_reservations(campaign(3))
    assert (response.admitted, response.installing) == (3, 0)
    assert states(response) == {"FAILED"}
    assert all("s2 (dpid 0x2) not connected" in r.reservation.state_reason for r in response.results)


def test_no_wait_answers_at_once_and_wait_timeout_bounds_the_wait(switched):
    controller, fabric, client = switched
    fabric.gate.clear()
    response = client.create_reservations(campaign(5), no_wait=True)
    assert (response.admitted, response.installing) == (5, 0 + 5) and states(response) == {"PROVISIONING"}
    bounded = client.create_reservations(campaign(10)[5:], wait_timeout=0.3)
    assert (bounded.admitted, bounded.installing) == (5, 5) and states(bounded) == {"PROVISIONING"}
    fabric.gate.set()
    names = [r.reservation.name for r in (*response.results, *bounded.results)]
    wait_for(lambda: all(client.get_reservation(n).state == pb.ACTIVE for n in names), "every install confirmed")
    wait_for(lambda: no_subscriptions_left(controller), "the batch's subscription to be dropped")


def test_validate_only_answers_at_once_with_switches(switched):
    controller, fabric, client = switched
    fabric.gate.clear()
    response = client.create_reservations(campaign(3), validate_only=True, wait_timeout=60)
    assert (response.admitted, response.installing) == (3, 0)
    assert states(response) == {"PROVISIONING"} and {r.reservation.id for r in response.results} == {""}
    assert list(client.list_reservations()) == [] and no_subscriptions_left(controller)


def test_all_or_nothing_over_the_api(controller, client_for):
    client = client_for("rucio")
    fits = reservation_request("caltech-a-dtn1", "starlight-dtn1", 10 * G, duration=HOUR, request_id="a")
    too_big = reservation_request("ucsd-dtn1", "dell-dtn1", 10**15, duration=HOUR, request_id="b")
    response = client.create_reservations([fits, too_big], all_or_nothing=True)
    assert (response.admitted, response.refused) == (0, 2)
    assert [r.error.code for r in response.results] == ["ABORTED", "RESOURCE_EXHAUSTED"]
    assert "requests[1] (request_id 'b') was refused (RESOURCE_EXHAUSTED" in response.results[0].error.message
    assert list(client.list_reservations()) == []
    each = client.create_reservations([fits, too_big])
    assert (each.admitted, each.refused) == (1, 1)
    assert each.results[0].reservation.state == pb.ACTIVE  # ledger only: ACTIVE at once
    again = client.create_reservations([fits], all_or_nothing=True)  # a retry: the same reservation
    assert again.results[0].reservation.id == each.results[0].reservation.id
    assert len(list(client.list_reservations())) == 1
    what_if = client.create_reservations([reservation_request("ucsd-dtn1", "dell-dtn1", G)], validate_only=True)
    assert what_if.admitted == 1 and what_if.results[0].reservation.id == ""
    assert len(list(client.list_reservations())) == 1


def test_a_thousand_requests_fit_in_one_call(controller, client_for):
    client = client_for("rucio")
    dtns = sorted(controller.topology.dtns)
    pairs = [(dtns[i % len(dtns)], dtns[(i + 1 + i // len(dtns)) % len(dtns)]) for i in range(MAX_BATCH)]
    requests = [reservation_request(src, dst if dst != src else dtns[(i + 1) % len(dtns)], 10**8, duration=HOUR,
                                    labels={"campaign": "run-2026", "dataset": f"/store/{i:04d}"})
                for i, (src, dst) in enumerate(pairs)]
    response = client.create_reservations(requests)
    assert (response.admitted, response.refused) == (MAX_BATCH, 0)
    assert states(response) == {"ACTIVE"}


@pytest.mark.parametrize("case", ["bandwidth", "validate_only", "empty", "too many", "wait", "labels", "twice"])
def test_malformed_requests_are_invalid_argument_naming_them_and_book_nothing(controller, client_for, case):
    good = [reservation_request("ucsd-dtn1", "dell-dtn1", G, request_id=f"ok-{i}") for i in range(3)]
    batch = pb.CreateReservationsRequest(requests=good)
    expected = {"bandwidth": r"requests\[1\] \(request_id 'ok-1'\): bandwidth_bps: must be greater than zero",
                "validate_only": r"requests\[2\] \(request_id 'ok-2'\): validate_only: set it on the batch",
                "empty": "requests: an empty batch", "too many": "requests: 1,001 in one batch, at most 1,000",
                "wait": "wait_timeout: 301 s, at most 300 s",
                "labels": r"requests\[0\] \(request_id 'ok-0'\): labels: key 'A B'",
                "twice": r"requests\[2\] \(request_id 'ok-0'\): the same request_id as requests\[0\]"}[case]
    if case == "bandwidth":
        batch.requests[1].bandwidth_bps = 0
    elif case == "validate_only":
        batch.requests[2].validate_only = True
    elif case == "empty":
        del batch.requests[:]
    elif case == "too many":
        del batch.requests[:]
        batch.requests.extend(reservation_request("ucsd-dtn1", "dell-dtn1", G) for _ in range(MAX_BATCH + 1))
    elif case == "wait":
        batch.wait_timeout.CopyFrom(Duration(seconds=301))
    elif case == "labels":
        batch.requests[0].labels["A B"] = "x"
    else:
        batch.requests[2].request_id = "ok-0"
    stub = pb_grpc.BandwidthServiceStub(grpc.insecure_channel(controller.address))
    with pytest.raises(grpc.RpcError) as info:
        stub.CreateReservations(batch, timeout=WAIT, metadata=(("authorization", f"Bearer {TOKENS['rucio'][1]}"),))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert re.search(expected, info.value.details()), info.value.details()
    assert list(client_for("noc").list_reservations()) == []


def test_only_those_who_may_create_may_send_a_batch_over_the_api(controller, client_for):
    request = [reservation_request("ucsd-dtn1", "dell-dtn1", G)]
    with pytest.raises(ApiError) as denied:
        client_for("dtn-agent").create_reservations(request)
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(ApiError) as anonymous:
        client_for(None).create_reservations(request)
    assert anonymous.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert list(client_for("noc").list_reservations()) == []
