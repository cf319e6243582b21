"""The northbound gRPC API end to end: a real controller on a loopback port, real clients.

Every test talks over the wire: through `TsdnClient`, through raw stubs (no retries, exact
status codes), or, for reflection, with no generated code at all (as grpcurl does).
Waiting is always on a condition with a deadline (reading a stream, polling a call), never
a sleep that hopes something happened.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import queue
import re
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest
import yaml
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from northbound.proto.tsdn.v1 import bandwidth_pb2_grpc as pb_grpc
from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb
from northbound.proto.tsdn.v1 import topology_pb2_grpc as topo_grpc
from sdn_app.core.errors import InvalidArgument
from tests.conftest import TOKENS
from topologies import builtin_topology
from tsdn.controller import Controller, ControllerConfig

G = 10**9
T = 10**12
WAIT = 10.0  # seconds: the deadline of any single wait for the server
NAME = re.compile(r"^reservations/[0-9a-f]{32}$")
SC16_LINKS = len(yaml.safe_load(builtin_topology("sc16").read_text())["links"])
Code = grpc.StatusCode


def bearer(principal: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[principal][1]}"),)


def without_history(reservation: pb.Reservation) -> pb.Reservation:
    """A reservation from GetReservation as the other calls return it (they carry no history)."""
    copy = pb.Reservation()
    copy.CopyFrom(reservation)
    del copy.history[:]
    return copy


def api_error(call, *args, **kwargs) -> ApiError:
    """The ApiError `call` raises (fails the test if it succeeds)."""
    with pytest.raises(ApiError) as info:
        call(*args, **kwargs)
    return info.value


def rpc_error(call, request, **kwargs) -> grpc.RpcError:
    """The RpcError of one raw stub call (no retries)."""
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=WAIT, **kwargs)
    return info.value


class StreamEnded(AssertionError):
    """The watch stream ended (error: the ApiError it ended with, or None for a clean end)."""

    def __init__(self, error: ApiError | None):
        super().__init__(f"watch stream ended: {error or 'cleanly'}")
        self.error = error


class EventStream:
    """A watch read on its own thread, so the test can wait for events with a deadline."""

    _END = object()

    def __init__(self, client: TsdnClient, name: str = "", include_existing: bool = False, timeout: float = 60.0):
        self._queue: queue.Queue = queue.Queue()
        self._events = client.watch(name, include_existing=include_existing, timeout=timeout)
        self._thread = threading.Thread(target=self._read, name="watch-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._events:
                self._queue.put(event)
        except ApiError as error:
            self._queue.put(error)
        else:
            self._queue.put(self._END)

    def next(self, timeout: float = WAIT) -> pb.ReservationEvent:
        """The next event; StreamEnded if the stream ended instead."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no watch event within {timeout} s") from None
        if item is self._END:
            raise StreamEnded(None)
        if isinstance(item, ApiError):
            raise StreamEnded(item)
        return item

    def take(self, count: int, timeout: float = WAIT) -> list[pb.ReservationEvent]:
        """The next `count` events, all within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        return [self.next(max(0.0, deadline - time.monotonic())) for _ in range(count)]

    def until(self, condition, timeout: float = WAIT) -> list[pb.ReservationEvent]:
        """Events up to and including the first one for which `condition` holds."""
        deadline = time.monotonic() + timeout
        events = []
        while True:
            events.append(self.next(max(0.0, deadline - time.monotonic())))
            if condition(events[-1]):
                return events

    def end(self, timeout: float = WAIT) -> ApiError | None:
        """Wait for the stream to end with no further event; the error it ended with, if any."""
        with pytest.raises(StreamEnded) as info:
            self.next(timeout)
        return info.value.error


def transitions(events) -> list[tuple[str, str]]:
    return [(pb.ReservationState.Name(e.previous_state), pb.ReservationState.Name(e.state)) for e in events]


def booked_directions(topology: topo_pb.Topology) -> dict[str, int]:
    """Every link direction of the topology (DTN access links too) -> bandwidth booked now."""
    directions = {}
    for link in topology.links:
        directions[link.a_to_b.id] = link.a_to_b.booked_bps
        directions[link.b_to_a.id] = link.b_to_a.booked_bps
    for dtn in topology.dtns:
        directions[dtn.uplink.id] = dtn.uplink.booked_bps
        directions[dtn.downlink.id] = dtn.downlink.booked_bps
    return directions


def path_directions(path: pb.Path) -> set[str]:
    """The link direction ids a path crosses, from its route and per-switch ports."""
    hops = path.hops
    ids = {f"{path.route[0]}->{hops[0].switch}:{hops[0].in_port}",
           f"{hops[-1].switch}:{hops[-1].out_port}->{path.route[-1]}"}
    ids.update(f"{a.switch}:{a.out_port}->{b.switch}:{b.in_port}" for a, b in itertools.pairwise(hops))
    return ids


@pytest.fixture
def raw(controller):
    """Raw stubs on one channel to `controller`: (bandwidth stub, topology stub)."""
    channel = grpc.insecure_channel(controller.address)
    yield pb_grpc.BandwidthServiceStub(channel), topo_grpc.TopologyServiceStub(channel)
    channel.close()


# -- BandwidthService happy paths ------------------------------------------------------------------


def test_create_get_list_modify_delete_round_trip(client_for):
    rucio = client_for("rucio")
    labels = {"experiment": "cms", "rucio.cern.ch/rule": "r-42"}
    created = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 100 * G, duration=3600, labels=labels,
                                       request_id="rule-42")
    assert NAME.match(created.name) and created.name == f"reservations/{created.id}"
    assert (created.owner, created.source_dtn, created.destination_dtn) == ("rucio", "caltech-a-dtn1",
                                                                           "starlight-dtn1")
    assert created.bandwidth_bps == 100 * G
    assert dict(created.labels) == labels
    assert created.request_id == "rule-42"
    assert created.state == pb.ACTIVE
    assert created.policy == pb.SHORTEST
    assert created.HasField("end_time") and created.HasField("create_time") and created.HasField("update_time")
    window = created.end_time.ToNanoseconds() - created.start_time.ToNanoseconds()
    assert abs(window - 3600 * 10**9) <= 1000
    assert list(created.path.route) == ["caltech-a-dtn1", "caltech-a", "starlight", "starlight-dtn1"]
    assert list(created.path.links) == ["tbit-rdma"] and created.path.hop_count == 1
    assert not created.HasField("backup_path") and not created.HasField("max_hops")

    fetched = rucio.get_reservation(created.name)
    assert [(h.state, h.reason) for h in fetched.history] == [
        (pb.PROVISIONING, "window started"), (pb.ACTIVE, created.state_reason)]  # Get alone carries its history
    assert without_history(fetched) == created
    assert without_history(rucio.get_reservation(created.id)) == created  # a bare id is accepted too

    second = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", 10 * G)
    listed = list(rucio.list_reservations(page_size=1))  # one per page: the client follows the tokens
    assert [r.name for r in listed] == [second.name, created.name]  # newest first
    assert [r.name for r in rucio.list_reservations(dtn="dell-dtn1")] == [second.name]

    modified = rucio.modify_reservation(created.name, bandwidth_bps=200 * G)
    assert modified.bandwidth_bps == 200 * G and modified.state == pb.ACTIVE
    assert "bandwidth 100G -> 200G" in modified.state_reason
    assert modified.end_time == created.end_time
    assert rucio.get_reservation(created.name).bandwidth_bps == 200 * G
    open_ended = rucio.modify_reservation(created.name, end=math.inf)
    assert not open_ended.HasField("end_time")
    new_end = time.time() + 7200
    ended = rucio.modify_reservation(created.name, end=new_end)
    assert abs(ended.end_time.ToNanoseconds() / 1e9 - new_end) < 1e-6
    checked = rucio.modify_reservation(created.name, bandwidth_bps=300 * G, validate_only=True)
    assert checked.bandwidth_bps == 300 * G
    assert rucio.get_reservation(created.name).bandwidth_bps == 200 * G  # validate_only changed nothing

    released = rucio.delete_reservation(created.name)
    assert released.state == pb.RELEASED and released.state_reason == "released by rucio"
    assert rucio.get_reservation(created.name).state == pb.RELEASED
    assert rucio.delete_reservation(created.name) == released  # releasing again returns it unchanged
    assert [r.name for r in rucio.list_reservations(state="RELEASED")] == [created.name]
    assert [r.name for r in rucio.list_reservations(state="ACTIVE")] == [second.name]


def test_request_fields_round_trip(client_for):
    rucio = client_for("rucio")
    now = time.time()
    scheduled = rucio.create_reservation("caltech-a-dtn3", "starlight-dtn3", 50 * G, start=now + 600, end=now + 1200,
                                         policy="widest", exclude=["tbit-rdma"], include=["scinet"], max_hops=3)
    assert scheduled.state == pb.SCHEDULED
    assert abs(scheduled.start_time.ToNanoseconds() / 1e9 - (now + 600)) < 1e-6
    assert abs(scheduled.end_time.ToNanoseconds() / 1e9 - (now + 1200)) < 1e-6
    assert scheduled.policy == pb.WIDEST
    assert list(scheduled.include) == ["scinet"] and list(scheduled.exclude) == ["tbit-rdma"]
    assert scheduled.HasField("max_hops") and scheduled.max_hops == 3
    assert "tbit-rdma" not in scheduled.path.links and "scinet" in scheduled.path.route
    assert scheduled.path.hop_count <= 3
    assert without_history(rucio.get_reservation(scheduled.name)) == scheduled

    protected = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 100 * G, protect=True)
    assert protected.protect
    assert not protected.HasField("end_time")  # open end: until released
    assert protected.path.links and protected.backup_path.links
    assert not set(protected.path.links) & set(protected.backup_path.links)
    assert protected.backup_path.route[0] == "caltech-a-dtn1" and protected.backup_path.route[-1] == "starlight-dtn1"
    assert rucio.get_reservation(protected.name).backup_path == protected.backup_path

    what_if = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", 10 * G, validate_only=True)
    assert what_if.name == "" and what_if.path.links
    assert {r.name for r in rucio.list_reservations()} == {scheduled.name, protected.name}


def test_query_availability(client_for):
    noc = client_for("noc")
    empty = noc.query_availability("caltech-a-dtn1", "starlight-dtn1", duration=600, max_paths=2)
    assert empty.max_bandwidth_bps == 400 * G and empty.reason == ""
    assert 1 <= len(empty.paths) <= 2
    assert all(p.route[0] == "caltech-a-dtn1" and p.route[-1] == "starlight-dtn1" for p in empty.paths)
    noc.create_reservation("caltech-a-dtn1", "starlight-dtn1", 150 * G)
    assert noc.query_availability("caltech-a-dtn1", "starlight-dtn1").max_bandwidth_bps == 250 * G
    noc.create_reservation("caltech-a-dtn1", "caltech-b-dtn1", 250 * G)
    full = noc.query_availability("caltech-a-dtn1", "starlight-dtn1")
    assert full.max_bandwidth_bps == 0 and not full.paths
    assert "caltech-a-dtn1" in full.reason and "0 free" in full.reason


def test_get_topology_books_exactly_the_path(client_for):
    noc = client_for("noc")
    topology = noc.get_topology()
    assert topology.name == "sc16" and len(topology.links) == SC16_LINKS
    assert set(booked_directions(topology).values()) == {0}
    assert {d.name: d.nic_speed_bps for d in topology.dtns}["caltech-a-dtn1"] == 400 * G

    active = noc.create_reservation("caltech-b-dtn1", "ucsd-dtn1", 30 * G)
    noc.create_reservation("caltech-a-dtn1", "starlight-dtn1", 400 * G, start=time.time() + 3600)  # not now
    on_path = path_directions(active.path)
    assert len(on_path) == active.path.hop_count + 2
    booked = booked_directions(noc.get_topology())
    assert on_path <= booked.keys()
    assert {d: bw for d, bw in booked.items() if bw} == dict.fromkeys(on_path, 30 * G)

    noc.delete_reservation(active.name)
    assert set(booked_directions(noc.get_topology()).values()) == {0}


# -- errors ------------------------------------------------------------------------------------------


def test_resource_exhausted_names_the_access_link(client_for):
    error = api_error(client_for("rucio").create_reservation, "caltech-a-dtn1", "starlight-dtn1", 1 * T)
    assert error.code is Code.RESOURCE_EXHAUSTED
    assert "caltech-a-dtn1->caltech-a:21" in error.message and "400G free" in error.message


def test_resource_exhausted_names_the_full_wan_link(client_for):
    noc = client_for("noc")
    for src, dst, bandwidth in (("caltech-a-dtn1", "starlight-dtn1", 400 * G),
                                ("caltech-a-dtn2", "starlight-dtn2", 400 * G),
                                ("caltech-b-dtn1", "starlight-dtn3", 100 * G),
                                ("caltech-b-dtn2", "starlight-dtn4", 50 * G)):
        r = noc.create_reservation(src, dst, bandwidth, include=["tbit-rdma"])
        assert "tbit-rdma" in r.path.links
    tbit = {link.name: link for link in noc.get_topology().links}["tbit-rdma"]
    assert (tbit.a_to_b.booked_bps, tbit.b_to_a.booked_bps) == (950 * G, 0)
    error = api_error(noc.create_reservation, "caltech-a-dtn3", "scinet-dtn1", 100 * G, include=["tbit-rdma"])
    assert error.code is Code.RESOURCE_EXHAUSTED
    assert "tbit-rdma" in error.message and "caltech-a:2->starlight:2" in error.message
    assert "50G free" in error.message
    query = noc.query_availability("caltech-a-dtn3", "scinet-dtn1", include=["tbit-rdma"])
    assert query.max_bandwidth_bps == 50 * G


def test_modify_beyond_capacity_changes_nothing(client_for):
    rucio = client_for("rucio")
    r = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 300 * G)
    error = api_error(rucio.modify_reservation, r.name, bandwidth_bps=500 * G)
    assert error.code is Code.RESOURCE_EXHAUSTED and "caltech-a-dtn1->caltech-a:21" in error.message
    assert without_history(rucio.get_reservation(r.name)) == r


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda q: setattr(q, "bandwidth_bps", 0), "bandwidth_bps"),
    (lambda q: (q.start_time.FromSeconds(int(time.time()) + 600), q.end_time.FromSeconds(int(time.time()) + 300)),
     "end_time"),
    (lambda q: (q.start_time.FromSeconds(int(time.time())), setattr(q.start_time, "nanos", 1_500_000_000)),
     "start_time"),
    (lambda q: setattr(q, "policy", 7), "policy"),
    (lambda q: setattr(q, "source_dtn", ""), "source_dtn"),
    (lambda q: setattr(q.duration, "seconds", -5), "duration"),
])
def test_create_invalid_argument_names_the_field(raw, mutate, field):
    bandwidth, _ = raw
    request = pb.CreateReservationRequest(source_dtn="caltech-a-dtn1", destination_dtn="starlight-dtn1",
                                          bandwidth_bps=G, request_id=str(uuid.uuid4()))
    mutate(request)
    error = rpc_error(bandwidth.CreateReservation, request, metadata=bearer("rucio"))
    assert error.code() is Code.INVALID_ARGUMENT
    assert error.details().startswith(f"{field}:"), error.details()


def test_invalid_argument_for_names_page_tokens_and_modifications(raw, client_for):
    bandwidth, _ = raw
    rucio = client_for("rucio")
    r = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", G)
    for name in ("reservations/xyz", "reservations/" + "A" * 32, "nope", f"{r.name}/x", f"{r.name}\n"):
        error = rpc_error(bandwidth.GetReservation, pb.GetReservationRequest(name=name), metadata=bearer("rucio"))
        assert error.code() is Code.INVALID_ARGUMENT and error.details().startswith("name:"), error.details()
        assert "reservations/<32 hex digits>" in error.details()
    error = rpc_error(bandwidth.ListReservations, pb.ListReservationsRequest(page_token="garbage!"),
                      metadata=bearer("rucio"))
    assert error.code() is Code.INVALID_ARGUMENT and error.details().startswith("page_token:")
    error = rpc_error(bandwidth.ModifyReservation, pb.ModifyReservationRequest(name=r.name, until_released=False),
                      metadata=bearer("rucio"))
    assert error.code() is Code.INVALID_ARGUMENT and error.details().startswith("until_released:")
    error = rpc_error(bandwidth.ModifyReservation, pb.ModifyReservationRequest(name=r.name, bandwidth_bps=0),
                      metadata=bearer("rucio"))
    assert error.code() is Code.INVALID_ARGUMENT and error.details().startswith("bandwidth_bps:")
    assert api_error(rucio.modify_reservation, r.name).code is Code.INVALID_ARGUMENT  # nothing to change
    assert api_error(rucio.create_reservation, "ucsd-dtn1", "ucsd-dtn1", G).code is Code.INVALID_ARGUMENT
    assert without_history(rucio.get_reservation(r.name)) == r


def test_not_found(client_for):
    rucio = client_for("rucio")
    error = api_error(rucio.create_reservation, "caltech-a-dtn1", "no-such-dtn", G)
    assert error.code is Code.NOT_FOUND and "no-such-dtn" in error.message
    missing = "reservations/" + "0" * 32
    for call in (rucio.get_reservation, rucio.delete_reservation):
        error = api_error(call, missing)
        assert error.code is Code.NOT_FOUND and missing in error.message
    assert api_error(rucio.modify_reservation, missing, bandwidth_bps=G).code is Code.NOT_FOUND
    assert api_error(rucio.query_availability, "nope-dtn", "ucsd-dtn1").code is Code.NOT_FOUND


def test_failed_precondition(client_for):
    rucio = client_for("rucio")
    r = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", G)
    rucio.delete_reservation(r.name)
    error = api_error(rucio.modify_reservation, r.name, bandwidth_bps=2 * G)
    assert error.code is Code.FAILED_PRECONDITION and r.name in error.message and "RELEASED" in error.message
    error = api_error(rucio.create_reservation, "ucsd-dtn1", "dell-dtn1", G,
                      exclude=["scinet", "caltech-a", "caltech-b"])
    assert error.code is Code.FAILED_PRECONDITION and "no route" in error.message
    assert "ucsd-dtn1" in error.message and "dell-dtn1" in error.message


def test_idempotent_create_over_the_wire(client_for):
    rucio = client_for("rucio")
    first = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 100 * G, request_id="transfer-7")
    again = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 100 * G, request_id="transfer-7")
    assert again.id == first.id and again == first
    booked = booked_directions(rucio.get_topology())
    assert {d: bw for d, bw in booked.items() if bw} == dict.fromkeys(path_directions(first.path), 100 * G)
    assert [r.id for r in rucio.list_reservations()] == [first.id]

    error = api_error(rucio.create_reservation, "caltech-a-dtn1", "starlight-dtn1", 200 * G, request_id="transfer-7")
    assert error.code is Code.ALREADY_EXISTS and "transfer-7" in error.message and first.name in error.message
    # request ids are per caller: fts may use the same one for its own reservation
    other = client_for("fts").create_reservation("caltech-a-dtn1", "starlight-dtn1", 100 * G, request_id="transfer-7")
    assert other.id != first.id and other.owner == "fts"


# -- authentication and authorization ------------------------------------------------------------------


def test_unauthenticated_calls(raw):
    bandwidth, topology = raw
    get = pb.GetReservationRequest(name="reservations/" + "0" * 32)
    for metadata in ((), (("authorization", "Basic x"),), (("authorization", "Bearer not-a-known-token-at-all"),),
                     (("authorization", "Bearer "),)):
        error = rpc_error(bandwidth.GetReservation, get, metadata=metadata)
        assert error.code() is Code.UNAUTHENTICATED, metadata
        assert error.details()
    assert "authorization: Bearer" in rpc_error(bandwidth.GetReservation, get).details()
    assert rpc_error(topology.GetTopology, topo_pb.GetTopologyRequest()).code() is Code.UNAUTHENTICATED
    stream = bandwidth.WatchReservations(pb.WatchReservationsRequest(include_existing=True), timeout=WAIT)
    with pytest.raises(grpc.RpcError) as info:
        next(stream)
    assert info.value.code() is Code.UNAUTHENTICATED


def test_services_see_and_change_only_their_own(raw, client_for):
    bandwidth, _ = raw
    fts_r = client_for("fts").create_reservation("caltech-a-dtn1", "starlight-dtn1", 10 * G)
    rucio_r = client_for("rucio").create_reservation("ucsd-dtn1", "dell-dtn1", 10 * G)
    for call, request in ((bandwidth.GetReservation, pb.GetReservationRequest(name=fts_r.name)),
                          (bandwidth.ModifyReservation, pb.ModifyReservationRequest(name=fts_r.name, bandwidth_bps=G)),
                          (bandwidth.DeleteReservation, pb.DeleteReservationRequest(name=fts_r.name))):
        error = rpc_error(call, request, metadata=bearer("rucio"))
        assert error.code() is Code.PERMISSION_DENIED and fts_r.name in error.details()
    error = rpc_error(bandwidth.ListReservations, pb.ListReservationsRequest(owner="fts"), metadata=bearer("rucio"))
    assert error.code() is Code.PERMISSION_DENIED and "owner" in error.details()

    assert [r.name for r in client_for("rucio").list_reservations()] == [rucio_r.name]
    assert [r.name for r in client_for("fts").list_reservations()] == [fts_r.name]
    noc = client_for("noc")
    assert [r.name for r in noc.list_reservations()] == [rucio_r.name, fts_r.name]
    assert [r.name for r in noc.list_reservations(owner="fts")] == [fts_r.name]
    assert noc.get_reservation(fts_r.name).state == pb.ACTIVE  # fts's reservation is untouched
    assert noc.modify_reservation(fts_r.name, bandwidth_bps=20 * G).bandwidth_bps == 20 * G
    assert noc.delete_reservation(fts_r.name).state_reason == "released by noc"


def test_agent_may_not_reserve(raw):
    bandwidth, topology = raw
    request = pb.CreateReservationRequest(source_dtn="caltech-a-dtn1", destination_dtn="starlight-dtn1",
                                          bandwidth_bps=G)
    error = rpc_error(bandwidth.CreateReservation, request, metadata=bearer("dtn-agent"))
    assert error.code() is Code.PERMISSION_DENIED and "dtn-agent" in error.details()
    error = rpc_error(bandwidth.ListReservations, pb.ListReservationsRequest(), metadata=bearer("dtn-agent"))
    assert error.code() is Code.PERMISSION_DENIED
    assert topology.GetTopology(topo_pb.GetTopologyRequest(), metadata=bearer("dtn-agent"), timeout=WAIT).links
    for include_existing in (True, False):  # not an empty stream: a refusal
        stream = bandwidth.WatchReservations(pb.WatchReservationsRequest(include_existing=include_existing),
                                             metadata=bearer("dtn-agent"), timeout=WAIT)
        with pytest.raises(grpc.RpcError) as info:
            next(stream)
        assert info.value.code() is Code.PERMISSION_DENIED, include_existing


def test_watch_shows_only_the_callers_reservations(client_for):
    rucio, fts = client_for("rucio"), client_for("fts")
    mine = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", G)
    theirs = fts.create_reservation("caltech-a-dtn1", "starlight-dtn1", G)
    watch = EventStream(rucio, include_existing=True)
    snapshot = watch.next()
    assert snapshot.reservation.name == mine.name and snapshot.reason == "snapshot"
    assert snapshot.previous_state == pb.RESERVATION_STATE_UNSPECIFIED and snapshot.state == pb.ACTIVE
    fts.modify_reservation(theirs.name, bandwidth_bps=2 * G)
    fts.create_reservation("caltech-a-dtn2", "starlight-dtn2", G)
    rucio.modify_reservation(mine.name, bandwidth_bps=3 * G)
    event = watch.next()  # fts's changes came first, but rucio does not see them
    assert event.reservation.name == mine.name and event.reservation.bandwidth_bps == 3 * G

    with pytest.raises(ApiError) as info:
        next(iter(rucio.watch(theirs.name, timeout=WAIT)))
    assert info.value.code is Code.PERMISSION_DENIED


# -- development mode and tokens files ------------------------------------------------------------------


def test_development_mode_on_loopback(start_controller, tokens_file, caplog):
    caplog.set_level(logging.WARNING, logger="tsdn.controller")
    controller = start_controller()
    assert any("DEVELOPMENT MODE" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    with TsdnClient(controller.address, timeout=WAIT) as anyone:
        r = anyone.create_reservation("ucsd-dtn1", "dell-dtn1", G)
        assert r.owner == "dev"
        assert without_history(anyone.get_reservation(r.name)) == r
    controller.stop()
    caplog.clear()
    start_controller(tokens=tokens_file)
    assert not any("DEVELOPMENT MODE" in r.getMessage() for r in caplog.records)


def test_no_tokens_refused_off_loopback(tmp_path):
    state = tmp_path / "open.db"
    with pytest.raises(InvalidArgument, match=re.escape("--listen-grpc 0.0.0.0:0")) as info:
        Controller(ControllerConfig(topology=builtin_topology("sc16"), listen_grpc="0.0.0.0:0", state=state))
    assert "loopback" in str(info.value)
    assert not state.exists()  # refused before opening anything, let alone a port


@pytest.mark.parametrize(("content", "expected"), [
    (None, "cannot read tokens file"),
    ("tokens: [principal: rucio\n", "not valid YAML"),
    ("tokens:\n  - {principal: rucio, role: service, token: short}\n", "tokens[0].token"),
    ("tokens:\n  - {principal: rucio, role: wizard, token: long-enough-token-0123}\n", "tokens[0].role"),
    (f"tokens:\n  - {{principal: rucio, role: service, token: long-enough-token-0123, sha256: {'a' * 64}}}\n",
     "exactly one of token, sha256 or certificate"),
    ("tokens:\n  - {principal: a, role: service, token: long-enough-token-0123}\n"
     "  - {principal: b, role: admin, token: long-enough-token-0123}\n", "the same token is given twice"),
])
def test_bad_tokens_file_names_the_file(tmp_path, content, expected):
    path = tmp_path / "tokens.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InvalidArgument) as info:
        Controller(ControllerConfig(topology=builtin_topology("sc16"), listen_grpc="127.0.0.1:0",
                                    state=tmp_path / "t.db", tokens=path))
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_bad_token_is_not_echoed_in_the_error(tmp_path):
    secret = "my secret token with spaces 0123456789"
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": [{"principal": "rucio", "role": "service", "token": secret}]}))
    with pytest.raises(InvalidArgument) as info:
        Controller(ControllerConfig(topology=builtin_topology("sc16"), listen_grpc="127.0.0.1:0",
                                    state=tmp_path / "t.db", tokens=path))
    assert "tokens[0].token" in str(info.value)
    assert "secret" not in str(info.value)


def test_sha256_token_entries(start_controller, tmp_path):
    token = "hashed-token-0123456789abcdef"
    path = tmp_path / "hashed.yaml"
    path.write_text(yaml.safe_dump({"tokens": [
        {"principal": "phedex", "role": "service", "sha256": hashlib.sha256(token.encode()).hexdigest()}]}))
    controller = start_controller(tokens=path)
    with TsdnClient(controller.address, token=token, timeout=WAIT) as phedex:
        assert phedex.create_reservation("ucsd-dtn1", "dell-dtn1", G).owner == "phedex"
    with TsdnClient(controller.address, token=hashlib.sha256(token.encode()).hexdigest(), timeout=WAIT) as wrong:
        assert api_error(wrong.get_topology).code is Code.UNAUTHENTICATED  # the digest is not the token


# -- health and reflection ----------------------------------------------------------------------------------


def test_health_serving(controller):
    with grpc.insecure_channel(controller.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "tsdn.v1.BandwidthService", "tsdn.v1.TopologyService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
        error = rpc_error(health.Check, health_pb2.HealthCheckRequest(service="tsdn.v1.Nothing"))
        assert error.code() is Code.NOT_FOUND


class WithToken(grpc.StreamStreamClientInterceptor):
    """Sends a principal's token on the reflection stream, as `grpcurl -H 'authorization: ...'` does."""

    def __init__(self, principal: str):
        self.metadata = bearer(principal)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        details = client_call_details._replace(metadata=(*(client_call_details.metadata or ()), *self.metadata))
        return continuation(details, request_iterator)


def test_reflection_lets_a_generic_client_call_every_rpc(controller):
    """What grpcurl does: list services, fetch descriptors, build messages and call by name."""
    with grpc.insecure_channel(controller.address) as channel:
        # Reflection is a stream: with a tokens file it needs a token (tests/test_stream_limits.py).
        database = ProtoReflectionDescriptorDatabase(grpc.intercept_channel(channel, WithToken("rucio")))
        services = set(database.get_services())
        assert {"tsdn.v1.BandwidthService", "tsdn.v1.TopologyService", "grpc.health.v1.Health"} <= services
        pool = descriptor_pool.DescriptorPool(database)
        bandwidth = pool.FindServiceByName("tsdn.v1.BandwidthService")
        assert {m.name for m in bandwidth.methods} == {
            "CreateReservation", "CreateReservations", "GetReservation", "ListReservations", "ModifyReservation",
            "DeleteReservation", "QueryAvailability", "WatchReservations", "CommitReservation", "AbortReservation",
            "ProvisionReservation", "UnprovisionReservation"}
        topology = pool.FindServiceByName("tsdn.v1.TopologyService")

        def method(service, method_name):
            descriptor = service.methods_by_name[method_name]
            request = message_factory.GetMessageClass(descriptor.input_type)
            reply = message_factory.GetMessageClass(descriptor.output_type)
            path = f"/{service.full_name}/{descriptor.name}"
            kind = channel.unary_stream if descriptor.server_streaming else channel.unary_unary
            stub = kind(path, request_serializer=request.SerializeToString, response_deserializer=reply.FromString)
            return request, stub

        def call(service, method_name, **fields):
            request, stub = method(service, method_name)
            return stub(request(**fields), metadata=bearer("rucio"), timeout=WAIT)

        Create, create = method(bandwidth, "CreateReservation")
        request = Create(source_dtn="caltech-a-dtn1", destination_dtn="starlight-dtn1", bandwidth_bps=25 * G,
                         labels={"via": "reflection"}, request_id="reflected-1")
        request.duration.seconds = 600
        policy = Create.DESCRIPTOR.fields_by_name["policy"].enum_type
        request.policy = policy.values_by_name["WIDEST"].number
        reply = create(request, metadata=bearer("rucio"), timeout=WAIT)
        states = reply.DESCRIPTOR.fields_by_name["state"].enum_type
        assert states.values_by_number[reply.state].name == "ACTIVE"
        assert NAME.match(reply.name) and reply.owner == "rucio" and reply.bandwidth_bps == 25 * G
        assert dict(reply.labels) == {"via": "reflection"}
        assert reply.path.route[0] == "caltech-a-dtn1" and reply.path.hop_count >= 1

        assert call(bandwidth, "GetReservation", name=reply.name).id == reply.id
        assert [r.id for r in call(bandwidth, "ListReservations").reservations] == [reply.id]
        assert call(bandwidth, "ModifyReservation", name=reply.name, bandwidth_bps=30 * G).bandwidth_bps == 30 * G
        query = call(bandwidth, "QueryAvailability", source_dtn="caltech-a-dtn1", destination_dtn="starlight-dtn1")
        assert query.max_bandwidth_bps == 370 * G
        stream = call(bandwidth, "WatchReservations", include_existing=True)
        assert next(stream).reservation.id == reply.id
        stream.cancel()
        released = call(bandwidth, "DeleteReservation", name=reply.name)
        assert states.values_by_number[released.state].name == "RELEASED"

        wan = call(topology, "GetTopology")
        assert wan.name == "sc16" and len(wan.links) == SC16_LINKS
        assert {link.name for link in wan.links} >= {"tbit-rdma", "tbit-tcp"}

        Get, get = method(bandwidth, "GetReservation")
        with pytest.raises(grpc.RpcError) as info:
            get(Get(name=reply.name), timeout=WAIT)
        assert info.value.code() is Code.UNAUTHENTICATED  # the token of reflection is not one of the calls


# -- watching ----------------------------------------------------------------------------------------------


def test_watch_streams_every_transition_in_order(client_for):
    noc = client_for("noc")
    existing = noc.create_reservation("ucsd-dtn1", "dell-dtn1", G)
    watch = EventStream(noc, include_existing=True)
    snapshot = watch.next()
    assert snapshot.reservation.name == existing.name and snapshot.reason == "snapshot"
    assert (snapshot.previous_state, snapshot.state) == (pb.RESERVATION_STATE_UNSPECIFIED, pb.ACTIVE)

    r = noc.create_reservation("caltech-a-dtn1", "starlight-dtn1", 100 * G)
    noc.modify_reservation(r.name, bandwidth_bps=200 * G)
    noc.delete_reservation(r.name)
    events = watch.take(4)
    assert transitions(events) == [("RESERVATION_STATE_UNSPECIFIED", "PROVISIONING"), ("PROVISIONING", "ACTIVE"),
                                   ("ACTIVE", "ACTIVE"), ("ACTIVE", "RELEASED")]
    assert {e.reservation.name for e in events} == {r.name}
    assert [e.reservation.state for e in events] == [e.state for e in events]
    assert events[2].reservation.bandwidth_bps == 200 * G and events[3].reason == "released by noc"
    sequences = [e.sequence for e in events]
    assert sequences == list(range(sequences[0], sequences[0] + 4))  # this admin sees every event
    assert all(e.HasField("time") for e in events)


def test_watch_scheduled_reservation_through_its_window(client_for):
    rucio = client_for("rucio")
    marker = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", G)
    watch = EventStream(rucio, include_existing=True)
    assert watch.next().reservation.name == marker.name
    start = time.time() + 1.5
    end = start + 1.5
    r = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 100 * G, start=start, end=end)
    assert r.state == pb.SCHEDULED
    events = watch.until(lambda e: e.state == pb.EXPIRED, timeout=end - time.time() + WAIT)
    assert {e.reservation.name for e in events} == {r.name}
    assert transitions(events) == [("RESERVATION_STATE_UNSPECIFIED", "SCHEDULED"), ("SCHEDULED", "PROVISIONING"),
                                   ("PROVISIONING", "ACTIVE"), ("ACTIVE", "EXPIRED")]
    times = [e.time.ToNanoseconds() / 1e9 for e in events]
    assert times[1] >= start - 1e-3 and times[3] >= end - 1e-3  # not before the window (up to float rounding)
    sequences = [e.sequence for e in events]
    assert sequences == sorted(set(sequences))
    assert rucio.get_reservation(r.name).state == pb.EXPIRED


def test_watch_one_reservation_by_name(client_for):
    rucio = client_for("rucio")
    watched = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 10 * G)
    other = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", G)
    watch = EventStream(rucio, name=watched.name, include_existing=True)
    assert watch.next().reservation.name == watched.name
    rucio.modify_reservation(other.name, bandwidth_bps=2 * G)
    rucio.delete_reservation(other.name)
    rucio.modify_reservation(watched.name, bandwidth_bps=20 * G)
    rucio.delete_reservation(watched.name)
    events = watch.take(2)
    assert [e.reservation.name for e in events] == [watched.name] * 2
    assert transitions(events) == [("ACTIVE", "ACTIVE"), ("ACTIVE", "RELEASED")]

    unknown = EventStream(rucio, name="reservations/" + "f" * 32)
    error = unknown.end()
    assert error is not None and error.code is Code.NOT_FOUND


def test_a_watcher_that_falls_behind_is_told_to_resynchronize(client_for, monkeypatch):
    monkeypatch.setattr("sdn_app.worker.SUBSCRIBER_BACKLOG", 1)  # each create publishes two events at once
    noc = client_for("noc")
    noc.create_reservation("ucsd-dtn1", "dell-dtn1", G)
    watch = EventStream(noc, include_existing=True)
    assert watch.next().reason == "snapshot"
    for dtn in ("caltech-a-dtn1", "caltech-a-dtn2", "caltech-b-dtn1", "caltech-b-dtn2"):
        noc.create_reservation(dtn, "starlight-dtn1", G)
    with pytest.raises(StreamEnded) as info:
        watch.until(lambda e: False)
    error = info.value.error
    assert error is not None and error.code is Code.RESOURCE_EXHAUSTED, error
    assert "include_existing" in error.message


def test_stopping_the_server_ends_open_watches(controller, client_for):
    noc = client_for("noc")
    noc.create_reservation("ucsd-dtn1", "dell-dtn1", G)
    watch = EventStream(noc, include_existing=True)
    assert watch.next().reason == "snapshot"
    began = time.monotonic()
    controller.stop(grace=1.0)
    assert time.monotonic() - began < 5
    error = watch.end(timeout=5)
    assert error is not None and error.code is Code.UNAVAILABLE, error
    assert "shutting down" in error.message


# -- restart -------------------------------------------------------------------------------------------------


def test_state_survives_restart(controller, client_for, start_controller, tokens_file):
    rucio = client_for("rucio")
    active = rucio.create_reservation("caltech-a-dtn1", "starlight-dtn1", 400 * G, request_id="before-restart",
                                      labels={"run": "1"})
    start = time.time() + 3600
    scheduled = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", 40 * G, start=start, duration=600)
    released = rucio.create_reservation("caltech-b-dtn1", "starlight-dtn2", 10 * G)
    rucio.delete_reservation(released.name)
    controller.stop()

    restarted = start_controller(tokens=tokens_file)
    with TsdnClient(restarted.address, token=TOKENS["rucio"][1], timeout=WAIT) as again:
        for before in (active, scheduled):
            after = again.get_reservation(before.name)
            assert (after.state, after.path, after.backup_path) == (before.state, before.path, before.backup_path)
            assert after.start_time == before.start_time and after.end_time == before.end_time
            assert dict(after.labels) == dict(before.labels) and after.request_id == before.request_id
        assert again.get_reservation(released.name).state == pb.RELEASED

        error = api_error(again.create_reservation, "caltech-a-dtn1", "caltech-b-dtn1", G)
        assert error.code is Code.RESOURCE_EXHAUSTED and "caltech-a-dtn1->caltech-a:21" in error.message
        error = api_error(again.create_reservation, "ucsd-dtn1", "scinet-dtn1", G, start=start + 60, duration=60)
        assert error.code is Code.RESOURCE_EXHAUSTED and "ucsd-dtn1" in error.message
        assert again.create_reservation("ucsd-dtn1", "scinet-dtn1", G, duration=600).state == pb.ACTIVE  # free now

        retry = again.create_reservation("caltech-a-dtn1", "starlight-dtn1", 400 * G, request_id="before-restart",
                                         labels={"run": "1"})
        assert retry.id == active.id
        booked = booked_directions(again.get_topology())
        assert all(booked[d] == 400 * G for d in path_directions(active.path))


# -- TLS ---------------------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def pki(tmp_path) -> Path:
    """A CA with a server certificate for 127.0.0.1/localhost and a client certificate; and a rogue CA."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path / "pki"
    folder.mkdir()
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "rogue-ca"):
        _openssl("req", "-x509", *key, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                 "-subj", f"/CN=tsdn test {ca}", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    for name, ca, extensions in (
        ("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", "ca", "extendedKeyUsage=clientAuth\n"),
        ("rogue-client", "rogue-ca", "extendedKeyUsage=clientAuth\n"),
    ):
        (folder / f"{name}.ext").write_text(extensions)
        _openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=folder)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=folder)
    return folder


def test_tls(start_controller, tokens_file, pki):
    controller = start_controller(tokens=tokens_file, tls_cert=pki / "server.pem", tls_key=pki / "server.key")
    ca = (pki / "ca.pem").read_bytes()
    token = TOKENS["rucio"][1]
    with TsdnClient(controller.address, token=token, tls_ca=ca, timeout=WAIT) as secure:
        assert secure.create_reservation("ucsd-dtn1", "dell-dtn1", G).owner == "rucio"
    with TsdnClient(controller.address, token=token, timeout=3, retries=0) as plain:
        assert api_error(plain.get_topology).code is Code.UNAVAILABLE
    rogue = (pki / "rogue-ca.pem").read_bytes()
    with TsdnClient(controller.address, token=token, tls_ca=rogue, timeout=3, retries=0) as untrusting:
        assert api_error(untrusting.get_topology).code is Code.UNAVAILABLE


def test_mutual_tls(start_controller, tokens_file, pki):
    controller = start_controller(tokens=tokens_file, tls_cert=pki / "server.pem", tls_key=pki / "server.key",
                                  client_ca=pki / "ca.pem")
    ca = (pki / "ca.pem").read_bytes()
    token = TOKENS["rucio"][1]
    with TsdnClient(controller.address, token=token, tls_ca=ca, timeout=WAIT,
                    tls_cert=(pki / "client.pem").read_bytes(), tls_key=(pki / "client.key").read_bytes()) as certified:
        assert len(certified.get_topology().links) == SC16_LINKS
    with TsdnClient(controller.address, token=token, tls_ca=ca, timeout=3, retries=0) as anonymous:
        assert api_error(anonymous.get_topology).code is Code.UNAVAILABLE
    with TsdnClient(controller.address, token=token, tls_ca=ca, timeout=3, retries=0,
                    tls_cert=(pki / "rogue-client.pem").read_bytes(),
                    tls_key=(pki / "rogue-client.key").read_bytes()) as rogue:
        assert api_error(rogue.get_topology).code is Code.UNAVAILABLE


@pytest.mark.parametrize(("options", "expected"), [
    ({"tls_cert": "server.pem"}, "--tls-cert and --tls-key go together"),
    ({"tls_key": "server.key"}, "--tls-cert and --tls-key go together"),
    ({"client_ca": "ca.pem"}, "--client-ca needs --tls-cert and --tls-key"),
    ({"tls_cert": "missing.pem", "tls_key": "server.key"}, "--tls-cert"),
    ({"tls_cert": "server.pem", "tls_key": "server.key", "client_ca": "missing.pem"}, "--client-ca"),
])
def test_tls_options_must_fit(tmp_path, pki, options, expected):
    state = tmp_path / "tls.db"
    with pytest.raises(InvalidArgument, match=re.escape(expected)):
        Controller(ControllerConfig(topology=builtin_topology("sc16"), listen_grpc="127.0.0.1:0", state=state,
                                    **{k: pki / v for k, v in options.items()}))
    assert not state.exists()


def test_request_id_reused_for_another_window_is_already_exists(client_for):
    rucio = client_for("rucio")
    start = time.time() + 3600
    first = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", 10 * G, start=start, duration=3600,
                                     request_id="rule-42")
    again = rucio.create_reservation("ucsd-dtn1", "dell-dtn1", 10 * G, start=start, duration=3600,
                                     request_id="rule-42")
    assert again.id == first.id
    with pytest.raises(ApiError) as refused:
        rucio.create_reservation("ucsd-dtn1", "dell-dtn1", 10 * G, start=start + 86400, duration=3600,
                                 request_id="rule-42")
    assert refused.value.code is grpc.StatusCode.ALREADY_EXISTS
    assert first.name in refused.value.message
