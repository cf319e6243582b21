"""Several `tsdn controller --store etcd://...` processes on one real etcd, as an operator runs them.

Real controller processes (ring8, ledger only: no switches, no Mininet) and real etcd (one member,
or three); the state is read back from etcd directly, never from the controllers' word:
- concurrent creates spread over three controllers never book a link direction beyond its
  capacity at any instant, every admitted reservation is stored with its booking, no refused one
  is (a property test);
- kill -9 of the leader loses no reservation (same ids, same paths) and the new leader serves
  writes, releases included;
- a leader frozen (SIGSTOP) past its lease writes nothing when it wakes, not even a write that
  was waiting for it, and comes back as a follower;
- one etcd member of three down (a follower, then the one the controllers use first): everything
  works; etcd's own leader killed: the controllers take writes again once etcd and they elected;
- a follower answers reads itself and sends writes to the leader;
- bad `--store` / `--lease-ttl`, or an etcd that is not running: a clear error, nothing started.
- a client whose first address is a frozen controller still reaches the leader, and one etcd
  member of three frozen (accepting connections, answering nothing) stops nobody.

Who leads is read from etcd's leader key; every wait polls a condition with a deadline.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from benchmarks import failover
from benchmarks.etcd_cluster import EtcdCluster, free_loopback_ports
from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.core.topology import Topology
from tests.ha_cluster import READY, HACluster, freeze_member, raft_leader, store_url, thaw_member
from tests.waiting import wait_for
from topologies import builtin_topology

G = 10**9
RING8 = Topology.load(builtin_topology("ring8"))
CAPACITIES = RING8.capacities()  # 100G on every link direction, access links included
DTNS = sorted(RING8.dtns)
TSDN = shutil.which("tsdn", path=str(Path(sys.executable).parent)) or "tsdn"
ELECTION_TIMEOUT = 30.0  # seconds: a lease of 2 s expires, a follower sees the key gone, loads the state
LIVE = (pb.ACTIVE, pb.SCHEDULED)


@pytest.fixture
def cluster(etcd: EtcdCluster, tmp_path: Path) -> Iterator[HACluster]:
    """Three controllers of ring8 on one etcd member, one of them leading."""
    with HACluster(etcd, 3, tmp_path / "controllers") as started:
        yield started


# -- reading the stored state ---------------------------------------------------------------------


def overbookings(bookings: Iterable[dict[str, Any]]) -> list[str]:
    """Every ring8 link direction the stored booking rows book beyond its capacity at some instant."""
    return failover.overbookings(bookings, CAPACITIES)


def route_of(booking: dict[str, Any]) -> list[str]:
    """The nodes a stored booking's directions pass, in order ("dtn1->s1:3", "s1:1->s2:2", ...)."""
    hops = [[end.split(":")[0] for end in direction.split("->")] for direction in json.loads(booking["directions"])]
    route = [hops[0][0]]
    for src, dst in hops:
        assert src == route[-1], f"booking directions are not a path: {booking['directions']}"
        route.append(dst)
    return route


def seconds(timestamp: Any) -> float:
    """A protobuf Timestamp in epoch seconds."""
    return timestamp.seconds + timestamp.nanos / 1e9


def assert_stored(cluster: HACluster, admitted: Iterable[pb.Reservation]) -> None:
    """Every reservation in `admitted` is in etcd as the client was told, with its booking."""
    reservations, bookings = cluster.rows("reservations"), cluster.rows("bookings")
    for reservation in admitted:
        assert reservation.id in reservations, f"{reservation.name} ({pb.ReservationState.Name(reservation.state)}) " \
                                               "was admitted but is not in etcd"
        body = json.loads(reservations[reservation.id]["body"])
        assert body["state"] == pb.ReservationState.Name(reservation.state)
        assert body["request"]["bandwidth"] == reservation.bandwidth_bps
        booking = bookings.get(reservation.id)
        assert booking is not None, f"{reservation.name} is stored without its booking"
        assert booking["bandwidth"] == reservation.bandwidth_bps
        assert route_of(booking) == list(reservation.path.route)
        assert booking["start"] == pytest.approx(seconds(reservation.start_time), abs=1e-3)
        if reservation.HasField("end_time"):
            assert booking["end"] == pytest.approx(seconds(reservation.end_time), abs=1e-3)
        else:
            assert booking["end"] is None


def request_ids(cluster: HACluster) -> set[str]:
    """The request id of every stored reservation."""
    return {json.loads(row["body"])["request_id"] for row in cluster.rows("reservations").values()}


def path_of(reservation: pb.Reservation) -> tuple[list[str], list[tuple[str, int, int]]]:
    """A reservation's route and hops, comparable."""
    return list(reservation.path.route), [(h.switch, h.in_port, h.out_port) for h in reservation.path.hops]


# -- 1. concurrent creates over three controllers ---------------------------------------------------


Request = tuple[str, str, int, float, float | None]  # src, dst, bandwidth, start offset (0: now), duration

requests_st = st.builds(
    lambda pair, bandwidth, offset, duration: (*pair, bandwidth, offset, duration),
    st.sampled_from([(src, dst) for src in DTNS for dst in DTNS if src != dst]),
    st.sampled_from([20 * G, 30 * G, 40 * G, 60 * G]),
    st.sampled_from([0.0, 0.0, 600.0, 1200.0]),  # now, or a window later (overlapping or not)
    st.sampled_from([None, 900.0]),  # until released, or 15 minutes
)


@settings(max_examples=25, deadline=None,
          # One set of controllers for every example (each releases what it booked): starting three
          # controllers per example would make the test minutes long.
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.lists(requests_st, min_size=6, max_size=15))
def test_concurrent_creates_over_three_controllers_never_overbook(cluster: HACluster, batch: list[Request]):
    assert cluster.rows("bookings") == {}, "the previous example left bookings behind"
    now = time.time()
    # Thread i sends to controller i first: two of the three start at a follower.
    shares = [batch[i::len(cluster.controllers)] for i in range(len(cluster.controllers))]
    admitted: list[pb.Reservation] = []
    refused: list[tuple[str, str]] = []
    failed: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(shares))

    def send(controller_index: int, share: list[Request]) -> None:
        with cluster.client(cluster.controllers[controller_index]) as tsdn:
            barrier.wait(30)
            for src, dst, bandwidth, offset, duration in share:
                request_id = str(uuid.uuid4())
                try:
                    reservation = tsdn.create_reservation(src, dst, bandwidth, start=now + offset if offset else None,
                                                          duration=duration, request_id=request_id)
                except ApiError as error:
                    with lock:
                        if error.code is grpc.StatusCode.RESOURCE_EXHAUSTED:
                            refused.append((request_id, error.message))
                        else:
                            failed.append(f"{src}->{dst} {bandwidth / G:g}G via {tsdn.target}: {error}")
                    continue
                with lock:
                    admitted.append(reservation)

    threads = [threading.Thread(target=send, args=(i, share)) for i, share in enumerate(shares)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a client thread hung"
    try:
        assert not failed, f"creates failed other than for capacity: {failed}\n{cluster.logs()}"
        assert len(admitted) + len(refused) == len(batch)
        assert admitted, "the first request of an empty network always fits: nothing was admitted"
        assert all(r.state in LIVE for r in admitted), [pb.ReservationState.Name(r.state) for r in admitted]
        bookings = cluster.rows("bookings")
        assert overbookings(bookings.values()) == []
        assert_stored(cluster, admitted)
        assert set(bookings) == {r.id for r in admitted}, "bookings in etcd beyond the admitted reservations"
        stored = request_ids(cluster)
        assert not stored & {request_id for request_id, _ in refused}, "a refused request is stored"
        event(f"{len(refused)} of {len(batch)} refused" if refused else "none refused")
    finally:
        with cluster.client() as tsdn:
            for reservation in admitted:
                tsdn.delete_reservation(reservation.name)
    assert cluster.rows("bookings") == {}, "released reservations kept their bookings in etcd"


def test_the_overbooking_check_finds_concurrent_use_beyond_capacity():
    """The oracle of these tests can fail: concurrent use beyond capacity is found, use one after
    the other (half-open windows) is not."""
    access = json.dumps(["dtn1->s1:3"])
    now = 1_000_000.0
    side_by_side = [{"bandwidth": 60 * G, "start": now, "end": None, "directions": access},
                    {"bandwidth": 60 * G, "start": now + 100, "end": now + 200, "directions": access}]
    [found] = overbookings(side_by_side)
    assert found.startswith("dtn1->s1:3: 120G booked at")
    one_after_the_other = [{"bandwidth": 60 * G, "start": now, "end": now + 100, "directions": access},
                           {"bandwidth": 60 * G, "start": now + 100, "end": None, "directions": access}]
    assert overbookings(one_after_the_other) == []


# -- 2. kill -9 of the leader ---------------------------------------------------------------------


def test_kill_9_of_the_leader_loses_nothing_and_the_new_leader_serves_writes(cluster: HACluster):
    old = cluster.leader()
    assert old is not None
    start = time.time()
    with cluster.client() as tsdn:
        before = [tsdn.create_reservation("dtn1", "dtn2", 60 * G),
                  tsdn.create_reservation("dtn3", "dtn6", 30 * G, policy="widest"),
                  tsdn.create_reservation("dtn5", "dtn8", 40 * G, start=start + 3600, duration=600),
                  tsdn.create_reservation("dtn7", "dtn4", 20 * G, duration=3600)]
    assert [r.state for r in before] == [pb.ACTIVE, pb.ACTIVE, pb.SCHEDULED, pb.ACTIVE]
    assert_stored(cluster, before)

    killed = cluster.process_of(old)
    killed.kill()
    killed_at = time.monotonic()
    new = cluster.wait_leader(other_than=old, timeout=ELECTION_TIMEOUT)
    elected_after = time.monotonic() - killed_at
    assert new.address != old.address and new.generation > old.generation
    successor = cluster.process_of(new)
    wait_for(lambda: "leading: generation" in successor.log(), "the new leader to load the state", ELECTION_TIMEOUT)

    with cluster.client(successor, only=True) as leader:  # the follower turned leader, answering itself
        listed = {r.id: r for r in leader.list_reservations()}
        assert leader.target == new.address
        for reservation in before:
            assert reservation.id in listed, f"{reservation.name} lost in the failover"
            found = listed[reservation.id]
            assert path_of(found) == path_of(reservation)
            assert (found.state, found.bandwidth_bps) == (reservation.state, reservation.bandwidth_bps)
            assert seconds(found.start_time) == pytest.approx(seconds(reservation.start_time), abs=1e-3)

    with cluster.client(killed) as tsdn:  # every address, the dead one first
        fresh = tsdn.create_reservation("dtn6", "dtn7", 10 * G)
        first_write_after = time.monotonic() - killed_at
        assert fresh.state == pb.ACTIVE
        with pytest.raises(ApiError) as full:  # dtn1's 100G access link holds the old 60G
            tsdn.create_reservation("dtn1", "dtn4", 60 * G)
        assert full.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        released = tsdn.delete_reservation(before[0].name)
        assert released.state == pb.RELEASED
        assert before[0].id not in cluster.rows("bookings"), "the release left its booking in etcd"
        again = tsdn.create_reservation("dtn1", "dtn4", 60 * G)
        assert again.state == pb.ACTIVE
    assert_stored(cluster, [*before[1:], fresh, again])
    assert overbookings(cluster.rows("bookings").values()) == []
    print(f"kill -9 to new leader key {elected_after:.2f}s, to first admission {first_write_after:.2f}s")


# -- 3. SIGSTOP past the lease, then SIGCONT --------------------------------------------------------


def pending_bytes(port: int) -> int:
    """Bytes received on established loopback TCP connections to `port` not yet read by its process."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):  # gRPC listens dual-stack: IPv4 as ::ffff:127.0.0.1
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:  # 01: established
                total += int(queues.split(":")[1], 16)
    return total


def test_a_leader_frozen_past_its_lease_writes_nothing_when_it_wakes_and_follows(cluster: HACluster):
    old = cluster.leader()
    assert old is not None
    frozen = cluster.process_of(old)
    follower = cluster.followers(old)[0]
    with cluster.client() as tsdn:
        kept = tsdn.create_reservation("dtn5", "dtn6", 30 * G)
    # The follower's copy is refreshed every half second.
    with cluster.client(follower, only=True) as reader:
        wait_for(lambda: kept.id in {r.id for r in reader.list_reservations()}, "the follower to see the reservation")
    stale = cluster.client(frozen, only=True, timeout=60)  # connected now, used once the leader is frozen
    assert kept.id in {r.id for r in stale.list_reservations()}
    assert stale.target == old.address

    frozen.pause()
    result: dict[str, Any] = {}
    try:
        # Reads go on at a follower while no live controller leads (the frozen one still holds the key).
        with cluster.client(follower, only=True) as reader:
            assert kept.id in {r.id for r in reader.list_reservations()}
            assert reader.target == follower.address, "the follower did not answer the read itself"
        assert cluster.leader() == old, "the read was not made before the election ended"

        new = cluster.wait_leader(other_than=old, timeout=ELECTION_TIMEOUT)
        assert new.address != old.address and new.generation > old.generation
        successor = cluster.process_of(new)
        # Not through the frozen one: a client waits out its deadline there first (tested below).
        with cluster.client(successor, without=frozen) as tsdn:
            booked = tsdn.create_reservation("dtn1", "dtn2", 60 * G)
            passing = tsdn.create_reservation("dtn3", "dtn4", 20 * G)
            tsdn.delete_reservation(passing.name)
        assert_stored(cluster, [kept, booked])
        assert passing.id not in cluster.rows("bookings")
        before = cluster.snapshot()

        # A create waiting in the frozen leader's socket: in its stale copy dtn1 is free, so only
        # the fence on the leader key keeps it from booking dtn1's access link twice.
        def send() -> None:
            try:
                result["created"] = stale.create_reservation("dtn1", "dtn3", 60 * G)
            except ApiError as error:
                result["refused"] = error

        sender = threading.Thread(target=send)
        sender.start()
        wait_for(lambda: pending_bytes(frozen.port) > 0, "the create to reach the frozen leader's socket")
    finally:
        frozen.resume()
    sender.join(120)
    stale.close()
    assert not sender.is_alive()
    assert "created" not in result, f"the woken leader booked {result.get('created')}: dtn1 is overbooked"
    assert result["refused"].code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED), \
        result["refused"]
    print(f"the create waiting at the frozen leader: {result['refused']}")

    frozen.wait_listening(2, ELECTION_TIMEOUT)  # re-executed as a follower
    assert frozen.alive and frozen.process is not None
    assert re.search(r"deposed: .*restarting as a follower", frozen.log()), frozen.tail()
    assert cluster.leader() == new
    assert cluster.snapshot() == before, "etcd changed after the deposed leader woke up"
    assert overbookings(cluster.rows("bookings").values()) == []

    # Back as a follower: it answers reads itself, and a write sent to it reaches the leader.
    with cluster.client(frozen, only=True) as reader:
        wait_for(lambda: {kept.id, booked.id} <= {r.id for r in reader.list_reservations()},
                 "the woken controller to answer reads with the new leader's reservations")
        assert reader.target == frozen.address
        moved = reader.create_reservation("dtn7", "dtn8", 10 * G)
        assert reader.target == new.address
    assert_stored(cluster, [kept, booked, moved])
    assert overbookings(cluster.rows("bookings").values()) == []


def test_a_client_whose_first_controller_is_frozen_still_reaches_the_leader(cluster: HACluster):
    old = cluster.leader()
    assert old is not None
    frozen = cluster.process_of(old)
    frozen.pause()
    try:
        new = cluster.wait_leader(other_than=old, timeout=ELECTION_TIMEOUT)
        successor = cluster.process_of(new)
        wait_for(lambda: "leading: generation" in successor.log(), "the new leader to serve", ELECTION_TIMEOUT)
        with cluster.client(frozen, timeout=5) as tsdn:  # every address, the frozen one first
            created = tsdn.create_reservation("dtn1", "dtn2", 10 * G)
            assert tsdn.target == new.address
        assert_stored(cluster, [created])
    finally:
        frozen.resume()


# -- 4. one etcd member of three down ---------------------------------------------------------------


def round_trip(cluster: HACluster, src: str, dst: str, retries: int = 6) -> pb.Reservation:
    """Create, list and release through the controllers (a client of all, retrying `retries`
    times on UNAVAILABLE); the reservation, as created."""
    with cluster.client(retries=retries) as tsdn:
        created = tsdn.create_reservation(src, dst, 50 * G)
        assert created.state == pb.ACTIVE
        assert_stored(cluster, [created])
        assert created.id in {r.id for r in tsdn.list_reservations()}
        released = tsdn.delete_reservation(created.name)
        assert released.state == pb.RELEASED
    assert created.id not in cluster.rows("bookings")
    return created


def test_one_etcd_member_of_three_down_the_controllers_keep_working(etcd_cluster: EtcdCluster, tmp_path: Path):
    # etcd's own leader last in --store: the members killed here are followers, so etcd elects
    # nobody meanwhile (that case is the next test).
    leader = raft_leader(etcd_cluster)
    first, bystander = [index for index in range(3) if index != leader]
    store = store_url(etcd_cluster, [first, bystander, leader])
    with HACluster(etcd_cluster, 2, tmp_path / "controllers", store=store) as cluster:
        with cluster.client() as tsdn:
            kept = tsdn.create_reservation("dtn1", "dtn5", 40 * G)
        round_trip(cluster, "dtn2", "dtn3")

        assert raft_leader(etcd_cluster) == leader
        etcd_cluster.kill_member(bystander)  # not the one the controllers talk to first
        round_trip(cluster, "dtn3", "dtn4")
        etcd_cluster.start_member(bystander)

        assert raft_leader(etcd_cluster) == leader
        etcd_cluster.kill_member(first)  # the first of --store: every controller was using it
        round_trip(cluster, "dtn4", "dtn6")
        round_trip(cluster, "dtn6", "dtn8")

        assert_stored(cluster, [kept])
        assert overbookings(cluster.rows("bookings").values()) == []
        for controller in cluster.controllers:  # a follower's copy is refreshed every half second
            with cluster.client(controller, only=True) as tsdn:
                wait_for(lambda tsdn=tsdn: kept.id in {r.id for r in tsdn.list_reservations(state="ACTIVE")},
                         f"{controller.address} to list the reservation made before the members went down")


def test_etcd_leader_killed_the_controllers_resume_after_etcd_elects(etcd_cluster: EtcdCluster, tmp_path: Path):
    leader = raft_leader(etcd_cluster)
    store = store_url(etcd_cluster, [leader, *(index for index in range(3) if index != leader)])
    with HACluster(etcd_cluster, 2, tmp_path / "controllers", store=store) as cluster:
        with cluster.client() as tsdn:
            kept = tsdn.create_reservation("dtn1", "dtn5", 40 * G)
        etcd_cluster.kill_member(leader)  # the controllers' first member, and etcd's leader
        killed_at = time.monotonic()
        # etcd takes one to two election timeouts (1 s each) to elect; the tsdn leader may be
        # deposed meanwhile (no renewal answered within its 2 s lease) and another elected after
        # its lease ends: a client that waits long enough gets through.
        round_trip(cluster, "dtn3", "dtn4", retries=8)
        resumed_after = time.monotonic() - killed_at
        round_trip(cluster, "dtn4", "dtn6")
        assert_stored(cluster, [kept])
        assert overbookings(cluster.rows("bookings").values()) == []
    print(f"etcd leader killed: first create, list and release through the controllers after {resumed_after:.2f}s")


def test_one_etcd_member_of_three_frozen_the_controllers_keep_working(etcd_cluster: EtcdCluster, tmp_path: Path):
    leader = raft_leader(etcd_cluster)
    first = next(index for index in range(3) if index != leader)  # a follower: etcd keeps its quorum and leader
    store = store_url(etcd_cluster, [first, *(index for index in range(3) if index != first)])
    with HACluster(etcd_cluster, 2, tmp_path / "controllers", store=store) as cluster:
        freeze_member(etcd_cluster, first)
        try:
            round_trip(cluster, "dtn3", "dtn4")
        finally:
            thaw_member(etcd_cluster, first)


# -- a follower reads itself, redirects writes --------------------------------------------------------


def test_a_follower_answers_reads_itself_and_sends_writes_to_the_leader(cluster: HACluster):
    leader = cluster.leader()
    assert leader is not None
    assert "leading: generation" in cluster.process_of(leader).log()  # etcd's leader key and the logs agree
    assert not any("leading:" in other.log() for other in cluster.followers(leader))
    follower = cluster.followers(leader)[0]
    with cluster.client(follower, only=True) as tsdn:  # a client that knows only the follower
        created = tsdn.create_reservation("dtn2", "dtn7", 25 * G)
        assert tsdn.target == leader.address, "the write was not sent on to the leader"
    assert_stored(cluster, [created])
    with cluster.client(follower, only=True) as reader:
        listed = wait_for(lambda: [r for r in reader.list_reservations() if r.id == created.id],
                          "the follower's copy to hold the new reservation")
        assert reader.target == follower.address, "the follower did not answer the read itself"
        assert path_of(listed[0]) == path_of(created)
        assert reader.get_reservation(created.name).id == created.id
        assert reader.target == follower.address
    with TsdnClient(follower.address, token="not-a-token-of-this-deployment", retries=0) as stranger:
        for call in (lambda: stranger.list_reservations().__next__(), lambda: stranger.create_reservation(
                "dtn2", "dtn7", G)):
            with pytest.raises(ApiError) as refused:
                call()
            assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED  # neither an answer nor the leader's address
            assert stranger.target == follower.address


# -- 5. bad input -----------------------------------------------------------------------------------


def controller(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`tsdn controller` on ring8 with `args`, run to its end."""
    return subprocess.run([TSDN, "controller", "--topology", "ring8", "--no-openflow", "--no-http", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd)


def refused_port() -> int:
    """A loopback port nobody listens on (a moment ago)."""
    return free_loopback_ports(1)[0]


@pytest.mark.parametrize("args, message", [
    (["--store", "http://x"], "--store 'http://x': expected etcd://HOST:PORT[,HOST:PORT...]"),
    (["--store", "etcd://host"], "--store 'etcd://host': 'host' is not HOST:PORT with a port from 1 to 65535"),
    (["--store", "etcd://127.0.0.1:2379,h:0"], "'h:0' is not HOST:PORT with a port from 1 to 65535"),
    (["--store", "ETCD", "--lease-ttl", "1"], "--lease-ttl: whole seconds from 2 to 60"),
    (["--store", "ETCD", "--lease-ttl", "61"], "--lease-ttl: whole seconds from 2 to 60"),
    (["--lease-ttl", "3"], "--lease-ttl and --advertise go with --store etcd://..."),
    (["--store", "DOWN"], "etcd (etcd://127.0.0.1:DOWN) cannot answer (checked at start)"),
    (["--store", "ETCD", "--listen-grpc", "0.0.0.0:GRPC"], "--advertise: needed with --listen-grpc 0.0.0.0:GRPC"),
])
def test_bad_store_options_are_refused_naming_what_is_wrong(etcd: EtcdCluster, tmp_path: Path, args: list[str],
                                                          message: str):
    down = refused_port()
    args = [etcd.url if a == "ETCD" else f"etcd://127.0.0.1:{down}" if a == "DOWN" else a for a in args]
    message = message.replace("DOWN", str(down))
    grpc_port = refused_port()
    args = [a.replace("GRPC", str(grpc_port)) for a in args]
    message = message.replace("GRPC", str(grpc_port))
    listen = [] if "--listen-grpc" in args else ["--listen-grpc", f"127.0.0.1:{grpc_port}"]
    done = controller(*args, *listen, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("tsdn: error: ")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    # Nothing started: it never served, wrote no state, took no leadership.
    assert READY not in done.stderr
    assert list(tmp_path.iterdir()) == []
    assert etcd.client().get_prefix("/tsdn/") == []
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", grpc_port)) != 0

