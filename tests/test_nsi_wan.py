"""tsdn as an NSI requester for WAN segments, end to end: a real in-process controller (ring8 with an
inter-domain port `to-rnp` on s5 towards RNP, and a remote DTN saopaulo-dtn1 beyond it) books the remote
segment of a reservation at a real OpenNSA standing in for RNP (tests/nsi_peers.py `opennsa_rnp`), or at
small stub providers where OpenNSA cannot misbehave on demand (never calling back, confirming reserve
and refusing reserveCommit, answering slowly). The reservation is made over gRPC; what the neighbour
holds is read with querySummarySync as the same requester NSA. With a second inter-domain port `to-rnp-b`
(s7, facing OpenNSA's `ring8b`) a remote errorEvent re-homes the segment there, or fails the reservation
when that port has no VLAN left.

Without OpenNSA's recipe the OpenNSA tests skip saying so (and fail when CI is set)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from lxml import etree

from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.core.nsi_segments import PRINCIPAL, Segment, SegmentDesk
from sdn_app.web import nsi_requester as nsi
from sdn_app.web import nsi_soap
from tests.conftest import TOKENS
from tests.nsi_peers import Neighbour, opennsa_rnp  # noqa: F401  (the fixture)
from tests.waiting import wait_for
from topologies import builtin_topology
from tsdn.controller import Controller

G = 10**9
DOMAIN = "ring8.test"
TSDN = f"urn:ogf:network:{DOMAIN}:nsa"
RNP = "urn:ogf:network:rnp.test:nsa"
RNP_NET = "urn:ogf:network:rnp.test:topology"
RECEIVER = "/NSI/services/RequesterService2"
ACTION = '"http://schemas.ogf.org/nsi/2013/12/connection/service/{}"'
FINAL = (pb.RELEASED, pb.FAILED, pb.EXPIRED)
CALLBACK_WAIT = 60.0  # seconds a test waits for a reservation to settle (OpenNSA answers in well under one)


# -- the topology and the controller ------------------------------------------------------------

def wan_topology(folder: Path, url: str, peer_stp: str = f"{RNP_NET}:ring8", vlans: str = "1780-1799",
                 alternate: str | None = None) -> Path:
    """ring8 with inter-domain port `to-rnp` (s5 port 4, VLANs `vlans`) towards RNP's NSA at `url`, whose STP
    facing it is `peer_stp`, and saopaulo-dtn1 beyond it; with `alternate` (VLANs), a second port `to-rnp-b`
    (s7 port 4, facing RNP's STP ring8b) that reaches saopaulo-dtn1 too."""
    spec = yaml.safe_load(Path(builtin_topology("ring8")).read_text())
    s5 = next(s for s in spec["switches"] if s["name"] == "s5")
    s5["ports"] = ["1-4"]
    spec["interdomain"] = [{"name": "to-rnp", "switch": "s5", "port": 4, "capacity": "100G", "vlans": vlans,
                            "peer": {"nsa": RNP, "stp": peer_stp, "url": url}}]
    spec["dtns"].append({"name": "saopaulo-dtn1", "beyond": "to-rnp", "stp": f"{RNP_NET}:saopaulo",
                         "ipv4": "10.0.1.1", "mac": "02:00:00:00:01:01", "nic_speed": "100G"})
    if alternate is not None:
        next(s for s in spec["switches"] if s["name"] == "s7")["ports"] = ["1-4"]
        spec["interdomain"].append({"name": "to-rnp-b", "switch": "s7", "port": 4, "capacity": "100G",
                                    "vlans": alternate, "peer": {"nsa": RNP, "stp": f"{RNP_NET}:ring8b", "url": url}})
        spec["dtns"][-1]["also_beyond"] = ["to-rnp-b"]
    path = folder / "ring8-rnp.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@dataclass
class Wan:
    """A controller on the WAN topology and a client of it (principal rucio)."""

    controller: Controller
    client: TsdnClient

    def reserve(self, bandwidth: int = 10 * G, src: str = "dtn1") -> pb.Reservation:
        """A reservation from `src` to saopaulo-dtn1 for an hour."""
        return self.client.create_reservation(src, "saopaulo-dtn1", bandwidth, duration=3600)

    def history(self, reservation_id: str) -> list[tuple[str, str]]:
        """(state, reason) of each step the reservation went through, oldest first (the core's record)."""
        book = self.controller.book
        return self.controller.worker.call(lambda: [(str(h.state), h.reason) for h in book.history(reservation_id)])

    def state(self, reservation_id: str) -> pb.Reservation:
        """The reservation as gRPC shows it."""
        return self.client.get_reservation(reservation_id)

    def settles(self, reservation_id: str, state: int, timeout: float = CALLBACK_WAIT) -> pb.Reservation:
        """The reservation once it is in `state` (fails naming the state it is stuck in)."""
        settled = wait_for(lambda: (r := self.state(reservation_id)).state in (state, *FINAL) and r,
                           f"{reservation_id} to be {pb.ReservationState.Name(state)}", timeout)
        assert settled.state == state, (f"{reservation_id} is {pb.ReservationState.Name(settled.state)}, not "
                                        f"{pb.ReservationState.Name(state)}: {settled.state_reason}")
        return settled

    def dst_vlan(self, reservation_id: str) -> int | None:
        """The VLAN the local reservation tags at the inter-domain port (the core's record)."""
        book = self.controller.book
        return self.controller.worker.call(lambda: book.get(PRINCIPAL, reservation_id).request.dst_vlan)

    def segment(self, reservation_id: str) -> Segment | None:
        """What the controller's segment desk records of the reservation's remote segment."""
        book = self.controller.book
        return self.controller.worker.call(lambda: SegmentDesk(book).get(reservation_id))


@pytest.fixture
def wan(start_controller, tokens_file, tmp_path) -> Callable[..., Wan]:
    """`wan(url, nsi_timeout=..., peer_stp=...)`: a controller (gRPC and HTTP on loopback, domain ring8.test)
    whose neighbour RNP is served at `url`."""
    clients: list[TsdnClient] = []

    def make(url: str, nsi_timeout: float = 30.0, **topology: Any) -> Wan:
        path = wan_topology(tmp_path, url, **topology)
        controller = start_controller(path, tokens=tokens_file, listen_http="127.0.0.1:0", domain=DOMAIN,
                                      nsi_timeout=nsi_timeout)
        client = TsdnClient(controller.address, token=TOKENS["rucio"][1], timeout=10)
        clients.append(client)
        return Wan(controller, client)

    yield make
    for client in clients:
        client.close()


# -- asking OpenNSA what it holds ---------------------------------------------------------------

def query(neighbour: Neighbour, *connection_ids: str) -> tuple[nsi.QueryResult, ...]:
    """querySummarySync at the neighbour as tsdn's requester NSA: these connections (none: all of tsdn's)."""
    async def ask() -> tuple[nsi.QueryResult, ...]:
        # OpenNSA wants a replyTo even for the synchronous query; nothing is sent to it
        async with nsi.NsiPeer(neighbour.nsa, neighbour.url, TSDN, f"http://127.0.0.1:9{RECEIVER}",
                               nsi.CallbackReceiver(TSDN)) as peer:
            return await peer.query(*connection_ids)
    return asyncio.run(ask())


def remote_of(neighbour: Neighbour, reservation_id: str) -> list[nsi.QueryResult]:
    """The connections at the neighbour whose description names the reservation and that are not terminated."""
    return [r for r in query(neighbour) if reservation_id in r.description and r.states.lifecycle != "Terminated"]


# -- stub providers ------------------------------------------------------------------------------

@dataclass
class Stub:
    """A provider that behaves as `behaviour` says; `seen` is every (operation, connection id) it got."""

    nsa: str
    behaviour: Callable[[Stub, nsi_soap.Message, str], Any]
    url: str = ""
    seen: list[tuple[str, str]] = field(default_factory=list)
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    release: asyncio.Event | None = None  # set: a delayed answer may go now
    loop: asyncio.AbstractEventLoop | None = None  # the stub's, in its own thread
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # callbacks under way

    def ops(self, connection_id: str) -> list[str]:
        """The operations the stub received for `connection_id`, in order."""
        return [op for op, cid in self.seen if cid == connection_id]


async def post_callback(message: nsi_soap.Message, body: etree._Element) -> int:
    """Post `body` to the replyTo of `message` as its provider would: the HTTP status it got."""
    header = nsi_soap.reply_header(message.header, nsi_soap.REQUESTER_PROTOCOL)
    operation = etree.QName(body).localname
    async with aiohttp.ClientSession() as client, client.post(
            message.header.reply_to, data=nsi_soap.envelope(header, body),
            headers={"SOAPAction": ACTION.format(operation), "Content-Type": "text/xml"}) as delivered:
        return delivered.status


def ack(message: nsi_soap.Message, body: etree._Element | None = None) -> web.Response:
    """The synchronous answer: `body` (default an acknowledgment) under the echoed header."""
    return web.Response(body=nsi_soap.envelope(nsi_soap.reply_header(message.header),
                                               body if body is not None else nsi_soap.acknowledgment()),
                        content_type="text/xml")


def confirm_everything_but(refused: set[str] = frozenset(), silent: set[str] = frozenset(),
                           delayed: set[str] = frozenset()):
    """A stub behaviour: every request confirmed, except `refused` ones (reserveCommitFailed or error),
    `silent` ones (acknowledged, never called back) and `delayed` ones (confirmed once `stub.release` is set)."""
    async def behave(stub: Stub, message: nsi_soap.Message, connection_id: str) -> web.Response:
        operation = message.operation
        sync = nsi_soap.reserve_response(connection_id) if operation == "reserve" else None
        if operation in silent:
            return ack(message, sync)

        async def answer() -> None:
            if operation in delayed:
                assert stub.release is not None
                await stub.release.wait()
            if operation in refused:
                exception = nsi_soap.ServiceException(stub.nsa, "00704", "the VLAN went to someone else", connection_id)
                if operation == "reserveCommit":
                    states = nsi_soap.ConnectionStates("ReserveStart", "Released", "Created", False, 0, True)
                    body = nsi_soap.failed("reserveCommit", connection_id, states, exception)
                else:
                    body = nsi_soap.error(exception)
            elif operation == "reserve":
                body = nsi_soap.reserve_confirmed(connection_id, nsi_soap.reserve_request(message.element), 0)
            else:
                body = nsi_soap.confirmed(operation, connection_id)
            with contextlib.suppress(aiohttp.ClientError):  # a controller stopped meanwhile hears nothing
                await post_callback(message, body)
        stub.tasks.add(asyncio.get_running_loop().create_task(answer()))
        return ack(message, sync)
    return behave


@pytest.fixture
def stub_provider() -> Iterator[Callable[..., Stub]]:
    """`stub_provider(behaviour)`: a stub NSA (urn:ogf:network:rnp.test:nsa) served on 127.0.0.1 in its own
    thread; stopped after the test."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="stub-nsa", daemon=True)
    thread.start()
    runners: list[web.AppRunner] = []

    def start(behaviour: Callable[[Stub, nsi_soap.Message, str], Any]) -> Stub:
        stub = Stub(RNP, behaviour)

        async def serve(request: web.Request) -> web.Response:
            message = nsi_soap.parse(await request.read(), request.headers.get("SOAPAction"))
            connection_id = (f"RN-{next(stub.ids):010x}" if message.operation == "reserve"
                             else message.element.findtext("connectionId") or "")
            stub.seen.append((message.operation, connection_id))
            return await behaviour(stub, message, connection_id)

        async def up() -> str:
            stub.release, stub.loop = asyncio.Event(), asyncio.get_running_loop()
            app = web.Application()
            app.router.add_post("/NSI/services/CS2", serve)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            runners.append(runner)
            return f"http://127.0.0.1:{runner.addresses[0][1]}/NSI/services/CS2"
        stub.url = asyncio.run_coroutine_threadsafe(up(), loop).result(10)
        return stub

    yield start

    async def stop(runner: web.AppRunner) -> None:
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await runner.cleanup()
    for runner in runners:
        asyncio.run_coroutine_threadsafe(stop(runner), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def let_go(stub: Stub) -> None:
    """Let the stub's delayed answers go (on the thread of its loop, where its asyncio objects live)."""
    assert stub.loop is not None and stub.release is not None
    stub.loop.call_soon_threadsafe(stub.release.set)


async def notify(controller: Controller, body: etree._Element, provider_nsa: str = RNP) -> int:
    """Post a notification to the controller's requester service as `provider_nsa` would: its HTTP status."""
    header = nsi_soap.Header(nsi_soap.REQUESTER_PROTOCOL, "urn:uuid:7a1b4ef4-5b0c-4d55-9d1e-0c1d2e3f4a5b", TSDN,
                             provider_nsa, None)
    operation = etree.QName(body).localname
    async with aiohttp.ClientSession() as client, client.post(
            f"http://{controller.http_address}{RECEIVER}", data=nsi_soap.envelope(header, body),
            headers={"SOAPAction": ACTION.format(operation), "Content-Type": "text/xml"}) as delivered:
        return delivered.status


def notice(connection_id: str) -> nsi_soap.Notice:
    """The common part of a notification about `connection_id`, now."""
    return nsi_soap.Notice(connection_id, 1, datetime.datetime.now(datetime.UTC).replace(microsecond=0))


# -- against the real OpenNSA -------------------------------------------------------------------

@pytest.fixture
def rnp(opennsa_rnp: Neighbour) -> Neighbour:  # noqa: F811  (the session's OpenNSA standing in for RNP)
    """The OpenNSA standing in for RNP."""
    return opennsa_rnp


def test_a_reservation_to_a_remote_dtn_books_its_segment_at_opennsa_and_releasing_terminates_it(
        wan, rnp: Neighbour):
    net = wan(rnp.url)
    created = net.reserve()
    assert created.state == pb.HELD and f"waiting for its WAN segment from {RNP}" in created.state_reason
    active = net.settles(created.id, pb.ACTIVE)
    vlan = net.dst_vlan(created.id)
    assert vlan == 1780 and active.dst_vlan == 1780 and not active.HasField("src_vlan")  # to-rnp's first VLAN
    segment = net.segment(created.id)
    assert segment is not None and segment.phase == "active" and segment.connection_id
    assert (f"committed by tsdn-nsi-segments (WAN segment {segment.connection_id} at {RNP} via to-rnp, VLAN 1780)"
            in active.state_reason)
    [remote] = query(rnp, segment.connection_id)
    assert created.id in remote.description and remote.requester_nsa == TSDN
    assert (remote.states.reservation, remote.states.provision, remote.states.lifecycle, remote.states.active) == (
        "ReserveStart", "Provisioned", "Created", True)
    assert remote.criteria is not None
    assert remote.criteria.source_stp == f"{RNP_NET}:ring8?vlan={vlan}"
    assert remote.criteria.dest_stp == f"{RNP_NET}:saopaulo?vlan={vlan}"
    assert remote.criteria.capacity_mbps == 10_000

    net.client.delete_reservation(created.id)
    wait_for(lambda: query(rnp, segment.connection_id)[0].states.lifecycle == "Terminated",
             f"{segment.connection_id} terminated at OpenNSA", CALLBACK_WAIT)
    assert net.state(created.id).state == pb.RELEASED
    wait_for(lambda: net.segment(created.id).phase == "terminated", "the segment recorded as terminated")


@pytest.mark.parametrize(("topology", "says"), [
    ({"peer_stp": f"{RNP_NET}:nowhere"}, f"No STP named {RNP_NET}:nowhere"),
    ({"vlans": "1900-1901"}, "cannot match label set <Label vlan:1900>"),
], ids=["unknown-stp", "vlan-outside-its-range"])
def test_a_segment_opennsa_refuses_fails_the_reservation_with_nothing_booked_on_either_side(
        wan, rnp: Neighbour, topology: dict[str, str], says: str):
    net = wan(rnp.url, **topology)
    first = net.reserve()
    failed = net.settles(first.id, pb.FAILED)
    assert failed.state_reason.startswith(f"NSI segment at {RNP}: {RNP} refused reserve: ")
    assert says in failed.state_reason and "(NSI error 00" in failed.state_reason
    assert remote_of(rnp, first.id) == []  # nothing held over there
    second = net.reserve()  # the first one's VLAN and capacity are free again
    assert net.dst_vlan(second.id) == net.dst_vlan(first.id)
    net.settles(second.id, pb.FAILED)


def test_a_remote_error_event_fails_the_reservation_naming_the_nsa_and_connection_and_terminates_it(
        wan, rnp: Neighbour):
    net = wan(rnp.url)
    created = net.reserve()
    net.settles(created.id, pb.ACTIVE)
    connection_id = net.segment(created.id).connection_id

    unknown = nsi_soap.error_event(notice("RN-0000000000"), "forcedEnd", "RN-0000000000", RNP)
    assert asyncio.run(notify(net.controller, unknown)) == 200
    stranger = nsi_soap.error_event(notice(connection_id), "forcedEnd", connection_id, RNP)
    assert asyncio.run(notify(net.controller, stranger, "urn:ogf:network:elsewhere.test:nsa")) == 500
    assert net.state(created.id).state == pb.ACTIVE  # neither concerns it
    exception = nsi_soap.ServiceException(RNP, "00800", "the WAN link went down", connection_id)
    event = nsi_soap.error_event(notice(connection_id), "dataplaneError", connection_id, RNP, exception)
    assert asyncio.run(notify(net.controller, event)) == 200
    failed = net.settles(created.id, pb.FAILED)
    assert failed.state_reason == (f"NSI segment {connection_id} at {RNP}: errorEvent dataplaneError: "
                                   "the WAN link went down")
    wait_for(lambda: query(rnp, connection_id)[0].states.lifecycle == "Terminated",
             f"{connection_id} terminated at OpenNSA", CALLBACK_WAIT)
    again = net.reserve()  # the VLAN is free on both sides: the same one books again
    net.settles(again.id, pb.ACTIVE)
    assert net.dst_vlan(again.id) == 1780
    net.client.delete_reservation(again.id)
    wait_for(lambda: remote_of(rnp, again.id) == [], "the second segment terminated", CALLBACK_WAIT)


def test_a_data_plane_going_down_at_the_neighbour_fails_the_reservation(wan, rnp: Neighbour):
    net = wan(rnp.url)
    created = net.reserve()
    net.settles(created.id, pb.ACTIVE)
    connection_id = net.segment(created.id).connection_id
    down = nsi_soap.data_plane_state_change(notice(connection_id), False, 0)
    assert asyncio.run(notify(net.controller, down)) == 200
    failed = net.settles(created.id, pb.FAILED)
    assert failed.state_reason == (f"NSI segment {connection_id} at {RNP}: dataPlaneStateChange: the data plane "
                                   "went down")
    wait_for(lambda: query(rnp, connection_id)[0].states.lifecycle == "Terminated",
             f"{connection_id} terminated at OpenNSA", CALLBACK_WAIT)


def test_a_remote_error_event_re_homes_the_segment_to_the_other_inter_domain_port(wan, rnp: Neighbour):
    net = wan(rnp.url, alternate="1790-1799")
    created = net.reserve()
    net.settles(created.id, pb.ACTIVE)
    first = net.segment(created.id)
    assert (first.interdomain, first.vlan) == ("to-rnp", 1780)

    exception = nsi_soap.ServiceException(RNP, "00800", "the WAN link went down", first.connection_id)
    event = nsi_soap.error_event(notice(first.connection_id), "dataplaneError", first.connection_id, RNP, exception)
    assert asyncio.run(notify(net.controller, event)) == 200
    second = wait_for(lambda: (s := net.segment(created.id)).phase == "active" and s.connection_id
                      != first.connection_id and s, "the segment re-homed and booked again", CALLBACK_WAIT)
    active = net.settles(created.id, pb.ACTIVE)
    assert (second.interdomain, second.vlan) == ("to-rnp-b", 1790)  # to-rnp-b's first VLAN
    assert active.dst_vlan == 1790 and net.dst_vlan(created.id) == 1790
    assert f"(WAN segment {second.connection_id} at {RNP} via to-rnp-b, VLAN 1790)" in active.state_reason
    degraded = (f"NSI segment {first.connection_id} at {RNP}: errorEvent dataplaneError: the WAN link went down; "
                "re-homing to inter-domain port to-rnp-b (VLAN 1790)")
    assert ("DEGRADED", degraded) in net.history(created.id)
    [remote] = query(rnp, second.connection_id)
    assert created.id in remote.description and "via to-rnp-b" in remote.description
    assert (remote.states.provision, remote.states.lifecycle, remote.states.active) == ("Provisioned", "Created", True)
    assert remote.criteria is not None and remote.criteria.source_stp == f"{RNP_NET}:ring8b?vlan=1790"
    assert remote.criteria.dest_stp == f"{RNP_NET}:saopaulo?vlan=1790"
    wait_for(lambda: query(rnp, first.connection_id)[0].states.lifecycle == "Terminated",
             f"the failed {first.connection_id} terminated at OpenNSA", CALLBACK_WAIT)
    wait_for(lambda: net.segment(created.id).replaces == "", "the segment to record the old one terminated")

    net.client.delete_reservation(created.id)
    wait_for(lambda: remote_of(rnp, created.id) == [], "the re-homed segment terminated", CALLBACK_WAIT)


def test_a_remote_error_event_fails_the_reservation_when_the_other_port_has_no_vlan_left(wan, rnp: Neighbour):
    net = wan(rnp.url, vlans="1780-1780", alternate="1790-1790")
    created = net.reserve()
    net.settles(created.id, pb.ACTIVE)
    taker = net.reserve(src="dtn2")  # to-rnp's only VLAN is taken: it goes through to-rnp-b, on 1790
    net.settles(taker.id, pb.ACTIVE)
    assert net.segment(taker.id).interdomain == "to-rnp-b"
    connection_id = net.segment(created.id).connection_id

    event = nsi_soap.error_event(notice(connection_id), "forcedEnd", connection_id, RNP)
    assert asyncio.run(notify(net.controller, event)) == 200
    failed = net.settles(created.id, pb.FAILED)
    assert failed.state_reason == (
        f"NSI segment {connection_id} at {RNP}: errorEvent forcedEnd; no other inter-domain port could take it: "
        f"saopaulo-dtn1: every VLAN 1790-1790 of inter-domain port to-rnp-b towards {RNP} is taken in that window")
    wait_for(lambda: query(rnp, connection_id)[0].states.lifecycle == "Terminated",
             f"{connection_id} terminated at OpenNSA", CALLBACK_WAIT)
    assert net.state(taker.id).state == pb.ACTIVE  # the other reservation is untouched
    net.client.delete_reservation(taker.id)
    wait_for(lambda: remote_of(rnp, taker.id) == [], "the second reservation's segment terminated", CALLBACK_WAIT)


# -- neighbours that misbehave -------------------------------------------------------------------

def test_a_neighbour_that_never_calls_back_fails_the_reservation_naming_the_timeout(wan, stub_provider):
    stub = stub_provider(confirm_everything_but(silent={"reserve", "reserveAbort", "release", "terminate"}))
    net = wan(stub.url, nsi_timeout=2)
    created = net.reserve()
    failed = net.settles(created.id, pb.FAILED)
    assert failed.state_reason == (f"NSI segment at {RNP}: {RNP} sent no callback for reserve of RN-0000000001 "
                                   "within 2 s")
    wait_for(lambda: "terminate" in stub.ops("RN-0000000001"), "tsdn to terminate what the neighbour holds")
    second = net.reserve()
    assert net.dst_vlan(second.id) == 1780  # the first one's VLAN is free again


def test_a_neighbour_that_confirms_reserve_and_refuses_commit_gets_the_connection_ended(wan, stub_provider):
    stub = stub_provider(confirm_everything_but(refused={"reserveCommit"}))
    net = wan(stub.url)
    created = net.reserve()
    failed = net.settles(created.id, pb.FAILED)
    assert failed.state_reason == (f"NSI segment at {RNP}: {RNP} refused reserveCommit of RN-0000000001: the VLAN "
                                   "went to someone else (NSI error 00704)")
    wait_for(lambda: {"reserveAbort", "terminate"} & set(stub.ops("RN-0000000001")),
             "tsdn to abort or terminate the connection")
    assert stub.ops("RN-0000000001")[:2] == ["reserve", "reserveCommit"]
    assert "provision" not in stub.ops("RN-0000000001")
    assert net.dst_vlan(net.reserve().id) == 1780  # nothing stays booked here


@pytest.mark.parametrize("slow", ["reserve", "reserveCommit"])
def test_a_controller_restarted_while_a_segment_is_booked_fails_it_and_ends_the_remote_connection(
        wan, stub_provider, slow: str):
    stub = stub_provider(confirm_everything_but(delayed={slow}))
    net = wan(stub.url)
    created = net.reserve()
    wait_for(lambda: slow in stub.ops("RN-0000000001"), f"the neighbour to get the {slow}")
    net.controller.stop(grace=0.5)
    net.client.close()
    let_go(stub)  # what it says now goes to a controller that is gone

    again = wan(stub.url)
    failed = again.settles(created.id, pb.FAILED)
    assert failed.state_reason == "the controller restarted while its NSI segment was being booked"
    wait_for(lambda: "terminate" in stub.ops("RN-0000000001"), "the restarted controller to terminate RN-0000000001")
    assert again.dst_vlan(again.reserve().id) == 1780
