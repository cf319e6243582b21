"""tsdn as an NSI CS 2.0 requester (sdn_app.web.nsi_requester): every request it writes is valid against
the OGF schemas, what a provider answers reads as it was meant, and a real OpenNSA (the recipe in
../shared/tools/opennsa, started and stopped by tests/nsi_peers.py) reserves, commits, provisions, releases,
terminates, aborts, refuses and times out as seen from tsdn's side.

The OpenNSA session fixture is tests/nsi_peers.py's: without the recipe the OpenNSA tests skip saying so
(and fail when CI is set)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from lxml import etree

from sdn_app.web import nsi_requester as nsi
from sdn_app.web import nsi_soap
from tests.nsi_peers import OPENNSA_TPC_TIMEOUT, free_port
from tests.nsi_schemas import valid

DATA = Path(__file__).parent / "data" / "nsi"
ACTION = '"http://schemas.ogf.org/nsi/2013/12/connection/service/{}"'
OPENNSA = "urn:ogf:network:opennsa.test:nsa"
TSDN = "urn:ogf:network:tsdn.test:nsa"
NET = "urn:ogf:network:opennsa.test:topology"
RECEIVER_PATH = "/NSI/services/RequesterService2"


def _hour_from_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(hours=1)


# -- building requests --------------------------------------------------------------------------

def test_every_request_tsdn_builds_is_valid_against_the_ogf_schemas(schemas):
    header = nsi.request_header(TSDN, OPENNSA, "http://127.0.0.1:8080/NSI/services/RequesterService2")
    start = datetime.datetime(2030, 1, 1, 10, tzinfo=datetime.UTC)
    reserve = nsi.reserve(f"{NET}:ps", f"{NET}:port1", 500, start + datetime.timedelta(hours=2), start,
                          source_vlan=1780, dest_vlan=1781, description="SC16 WAN segment to UMich",
                          global_reservation_id="urn:uuid:0b8e1c55-3a0e-4e44-a4e5-9d2b8f5b7a10")
    root = valid(schemas, nsi_soap.envelope(header, reserve))
    message = nsi_soap.parse(etree.tostring(root), ACTION.format("reserve"))
    assert message.header.protocol_version == "application/vnd.ogf.nsi.cs.v2.provider+soap"
    assert message.header.correlation_id.startswith("urn:uuid:") and message.header.provider_nsa == OPENNSA
    asked = nsi_soap.reserve_request(message.element)
    assert (asked.source_stp, asked.dest_stp, asked.capacity_mbps, asked.version) == (
        f"{NET}:ps?vlan=1780", f"{NET}:port1?vlan=1781", 500, 0)
    assert (asked.start, asked.end, asked.directionality, asked.symmetric_path) == (
        start, start + datetime.timedelta(hours=2), "Bidirectional", True)
    for operation in sorted(nsi.GENERIC_REQUESTS):
        root = valid(schemas, nsi_soap.envelope(header, nsi.generic_request(operation, "OP-47992bcfda")))
        assert root.findtext(f".//{{{nsi_soap.CTYPES}}}{operation}/connectionId") == "OP-47992bcfda"
    valid(schemas, nsi_soap.envelope(header, nsi.query_summary_sync(("OP-47992bcfda", "OP-cf36e4868a"))))
    assert nsi.request_header(TSDN, OPENNSA, None).correlation_id != header.correlation_id


@pytest.mark.parametrize(("build", "says"), [
    (lambda: nsi.reserve(f"{NET}:ps", f"{NET}:port1", 0, _hour_from_now()), "capacity 0"),
    (lambda: nsi.reserve("ps", f"{NET}:port1", 100, _hour_from_now()), "source STP 'ps' is not an STP URN"),
    (lambda: nsi.reserve(f"{NET}:ps", f"{NET}:port1", 100, _hour_from_now(), dest_vlan=4095), "VLAN 4095"),
    (lambda: nsi.reserve(f"{NET}:ps?vlan=1780", f"{NET}:port1", 100, _hour_from_now(), source_vlan=1781),
     "already has labels"),
    (lambda: nsi.reserve(f"{NET}:ps", f"{NET}:port1", 100, datetime.datetime(2030, 1, 1)), "has no time zone"),
    (lambda: nsi.reserve(f"{NET}:ps", f"{NET}:port1", 100, datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC),
                         datetime.datetime(2030, 1, 2, tzinfo=datetime.UTC)), "is not after start"),
    (lambda: nsi.generic_request("modify", "OP-1"), "'modify' is not one of"),
    (lambda: nsi.generic_request("provision", ""), "connection id '' is empty"),
    (lambda: nsi.request_header("tsdn.test:nsa", OPENNSA, None), "requester NSA 'tsdn.test:nsa' is not an NSA id"),
])
def test_a_bad_request_is_refused_before_anything_is_sent(build: Callable[[], object], says: str):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace("?", r"\?")):
        build()


# -- reading what comes back --------------------------------------------------------------------

def test_opennsas_synchronous_replies_read_as_they_were_meant():
    response = (DATA / "requester-reserve-response.xml").read_bytes()
    assert nsi.parse_reply(response, 200, "reserve", OPENNSA).connection_id == "OP-cf36e4868a"
    results = nsi.parse_reply((DATA / "requester-query-summary-sync-confirmed.xml").read_bytes(), 200,
                              "querySummarySync", OPENNSA).results
    assert [(r.connection_id, r.states.reservation, r.states.lifecycle, r.states.active) for r in results] == [
        ("OP-cf36e4868a", "ReserveStart", "Terminated", False)]
    assert (results[0].criteria.source_vlan, results[0].criteria.dest_vlan) == (1797, 1798)
    with pytest.raises(nsi.NsiRefused) as refused:
        nsi.parse_reply((DATA / "requester-reserve-fault-00704.xml").read_bytes(), 500, "reserve", OPENNSA)
    assert (refused.value.error_id, refused.value.nsa) == ("00704", OPENNSA)
    assert refused.value.text == "STP <STP opennsa.test:topology:ps?vlan=1786> not available in specified time span"
    assert str(refused.value).startswith(f"{OPENNSA} refused reserve: STP")
    with pytest.raises(nsi.NsiProtocolError, match="HTTP 500 and no SOAP envelope: '<html>Request did not"):
        nsi.parse_reply(b"<html>Request did not return bytes</html>", 500, "provision", OPENNSA)
    with pytest.raises(nsi.NsiProtocolError, match="'reserveResponse', not 'acknowledgment'"):
        nsi.parse_reply(response, 200, "provision", OPENNSA)
    with pytest.raises(nsi.NsiProtocolError, match="with correlation id urn:uuid:1111"):
        nsi.parse_reply(response, 200, "reserve", OPENNSA, "urn:uuid:99999999-2222-3333-4444-555555555555")


def _callback(schemas, operation: str, build: Callable[[etree._Element], None],
              check: bool = True) -> nsi_soap.Message:
    """A callback envelope from OpenNSA to tsdn whose body `build` fills (valid against the schemas unless
    `check` is off), parsed."""
    element = etree.Element(f"{{{nsi_soap.CTYPES}}}{operation}")
    build(element)
    header = nsi_soap.Header(nsi_soap.REQUESTER_PROTOCOL, f"urn:uuid:{uuid.uuid4()}", TSDN, OPENNSA)
    body = nsi_soap.envelope(header, element)
    if check:
        valid(schemas, body)
    return nsi_soap.parse(body, ACTION.format(operation), nsi_soap.REQUESTER_OPERATIONS)


def _fill(parent: etree._Element, *fields: tuple[str, str]) -> None:
    for name, value in fields:
        etree.SubElement(parent, name).text = value


def _exception(parent: etree._Element, error_id: str, text: str) -> None:
    exception = etree.SubElement(parent, "serviceException")
    _fill(exception, ("nsaId", OPENNSA), ("connectionId", "OP-1"), ("errorId", error_id), ("text", text))


def _states(parent: etree._Element) -> None:
    states = etree.SubElement(parent, "connectionStates")
    _fill(states, ("reservationState", "ReserveFailed"), ("provisionState", "Released"),
          ("lifecycleState", "Created"))
    _fill(etree.SubElement(states, "dataPlaneStatus"), ("active", "false"), ("version", "0"),
          ("versionConsistent", "true"))


def test_every_callback_reads_into_its_dataclass(schemas):
    def read(path: str, operation: str) -> nsi.Callback:
        return nsi.parse_callback(nsi_soap.parse((DATA / path).read_bytes(), ACTION.format(operation),
                                                 nsi_soap.REQUESTER_OPERATIONS))

    confirmed = read("opennsa-reserve-confirmed.xml", "reserveConfirmed")
    assert isinstance(confirmed, nsi.ReserveConfirmed) and confirmed.provider_nsa == OPENNSA
    assert (confirmed.criteria.capacity_mbps, confirmed.criteria.version) == (200, 0)
    assert (confirmed.criteria.source_vlan, confirmed.criteria.dest_vlan) == (1784, 1785)
    plane = read("requester-data-plane-state-change.xml", "dataPlaneStateChange")
    assert isinstance(plane, nsi.DataPlaneStateChange)
    assert (plane.connection_id, plane.active, plane.version, plane.consistent) == ("OP-cf36e4868a", True, 0, True)
    timeout = read("requester-reserve-timeout.xml", "reserveTimeout")
    assert isinstance(timeout, nsi.ReserveTimeout)
    assert (timeout.connection_id, timeout.timeout_seconds, timeout.originating_connection_id) == (
        "OP-26db6c400f", 15, "DUD-6cf1a900")

    for operation in ("reserveCommitConfirmed", "reserveAbortConfirmed", "provisionConfirmed", "releaseConfirmed",
                      "terminateConfirmed"):
        done = nsi.parse_callback(_callback(schemas, operation, lambda e: _fill(e, ("connectionId", "OP-1"))))
        assert type(done) is nsi.Confirmed and (done.operation, done.connection_id) == (operation, "OP-1")
    for operation in ("reserveFailed", "reserveCommitFailed"):
        failed = nsi.parse_callback(_callback(schemas, operation, lambda e: (
            _fill(e, ("connectionId", "OP-1")), _states(e), _exception(e, "00704", "VLAN taken"))))
        assert isinstance(failed, nsi.Failed) and failed.states.reservation == "ReserveFailed"
        assert failed.error == nsi.ServiceError(OPENNSA, "00704", "VLAN taken", "OP-1")
    error = nsi.parse_callback(_callback(schemas, "error", lambda e: _exception(e, "00500", "internal error")))
    assert isinstance(error, nsi.Failed) and (error.connection_id, error.states, error.error.error_id) == (
        "", None, "00500")
    event = nsi.parse_callback(_callback(schemas, "errorEvent", lambda e: (
        _fill(e, ("connectionId", "OP-1"), ("notificationId", "7"), ("timeStamp", "2030-01-01T10:00:00Z"),
              ("event", "forcedEnd"), ("originatingConnectionId", "DUD-1"), ("originatingNSA", OPENNSA)),
        _exception(e, "00800", "administratively terminated"))))
    assert isinstance(event, nsi.ErrorEvent)
    assert (event.event, event.notification_id, event.originating_connection_id, event.error.text) == (
        "forcedEnd", 7, "DUD-1", "administratively terminated")
    assert event.timestamp == datetime.datetime(2030, 1, 1, 10, tzinfo=datetime.UTC)

    with pytest.raises(nsi_soap.SoapFault, match="dataPlaneStateChange: dataPlaneStatus is missing"):
        nsi.parse_callback(_callback(schemas, "dataPlaneStateChange", lambda e: _fill(
            e, ("connectionId", "OP-1"), ("notificationId", "1"), ("timeStamp", "2030-01-01T10:00:00Z")),
            check=False))


# -- the receiver -------------------------------------------------------------------------------

class Notes:
    """What a peer's notify was given, and a way to wait for one with a deadline."""

    def __init__(self) -> None:
        self.seen: list[nsi.Callback] = []
        self._changed = asyncio.Event()

    def __call__(self, callback: nsi.Callback) -> None:
        self.seen.append(callback)
        self._changed.set()

    async def wait(self, match: Callable[[nsi.Callback], bool], seconds: float) -> nsi.Callback:
        """The first callback that `match`es, waiting at most `seconds` for it."""
        deadline = asyncio.get_running_loop().time() + seconds
        while True:
            for callback in self.seen:
                if match(callback):
                    return callback
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise AssertionError(f"no such callback within {seconds} s; notify got {self.seen}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)


@contextlib.asynccontextmanager
async def served(receiver: nsi.CallbackReceiver) -> AsyncIterator[str]:
    """The receiver on a real aiohttp server on 127.0.0.1: its replyTo URL."""
    app = web.Application()
    app.router.add_post(RECEIVER_PATH, receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}{RECEIVER_PATH}"
    finally:
        await runner.cleanup()


def test_the_receiver_routes_callbacks_and_refuses_bad_input_with_a_fault(schemas):
    plane = (DATA / "requester-data-plane-state-change.xml").read_bytes().replace(
        b"urn:ogf:network:theirs.test:nsa", TSDN.encode())

    async def scenario() -> None:
        notes = Notes()
        receiver = nsi.CallbackReceiver(TSDN)
        async with served(receiver) as url, aiohttp.ClientSession() as client:
            peer = nsi.NsiPeer(OPENNSA, "http://127.0.0.1:9/NSI/services/CS2", TSDN, url, receiver, notify=notes)

            async def post(body: bytes, operation: str, action: str | None = None) -> tuple[int, etree._Element]:
                headers = {"Content-Type": "text/xml; charset=utf-8", "SOAPAction": action or ACTION.format(operation)}
                async with client.post(url, data=body, headers=headers) as answer:
                    return answer.status, valid(schemas, await answer.read())

            status, ack = await post(plane, "dataPlaneStateChange")
            assert status == 200 and ack.find(f".//{{{nsi_soap.CTYPES}}}acknowledgment") is not None
            assert [(c.operation, c.connection_id) for c in notes.seen] == [("dataPlaneStateChange", "OP-cf36e4868a")]

            waiting = receiver.expect(OPENNSA, "urn:uuid:c569ff81-95c7-46ff-981c-2c74251e7b6e")
            commit = nsi_soap.envelope(
                nsi_soap.Header(nsi_soap.REQUESTER_PROTOCOL, "urn:uuid:c569ff81-95c7-46ff-981c-2c74251e7b6e", TSDN,
                                OPENNSA), nsi.generic_request("reserveCommit", "OP-cf36e4868a"))
            committed = commit.replace(b"reserveCommit>", b"reserveCommitConfirmed>")
            assert (await post(committed, "reserveCommitConfirmed"))[0] == 200
            assert waiting.done() and waiting.result().operation == "reserveCommitConfirmed"
            assert len(notes.seen) == 1  # a callback someone waits for is not a notification

            bad = [(b"<soap:Envelope", ACTION.format("dataPlaneStateChange"), "not well-formed XML"),
                   (plane, ACTION.format("provisionConfirmed"), "does not name the operation in the body"),
                   (plane.replace(OPENNSA.encode(), b"urn:ogf:network:stranger.test:nsa"),
                    ACTION.format("dataPlaneStateChange"), "providerNSA 'urn:ogf:network:stranger.test:nsa' is not"),
                   (plane.replace(TSDN.encode(), b"urn:ogf:network:other.test:nsa"),
                    ACTION.format("dataPlaneStateChange"), "requesterNSA 'urn:ogf:network:other.test:nsa' is not"),
                   (nsi_soap.envelope(nsi.request_header(TSDN, OPENNSA, url), nsi.generic_request("provision", "OP-1")),
                    ACTION.format("provision"), "'provision' is not an operation of the NSI requester interface")]
            for body, action, says in bad:
                status, fault = await post(body, "", action)
                assert status == 500, says
                assert says in fault.findtext(f".//{{{nsi_soap.SOAP}}}Fault/faultstring"), says
                assert fault.findtext(f".//{{{nsi_soap.FTYPES}}}serviceException/nsaId") == TSDN
            assert len(notes.seen) == 1  # nothing refused reached notify
            with pytest.raises(ValueError, match="already attached"):
                nsi.NsiPeer(OPENNSA, "http://127.0.0.1:9/NSI/services/CS2", TSDN, url, receiver)
            await peer.close()

    asyncio.run(scenario())


# -- against a real OpenNSA ---------------------------------------------------------------------

def run_with_peer(opennsa: str, scenario, **options) -> None:
    """Run `scenario(peer, notes)` against OpenNSA with tsdn's receiver served on 127.0.0.1."""
    async def main() -> None:
        notes = Notes()
        receiver = nsi.CallbackReceiver(TSDN)
        async with served(receiver) as reply_to, nsi.NsiPeer(
                OPENNSA, opennsa, TSDN, reply_to, receiver, notify=notes,
                **{"callback_timeout": 30.0, **options}) as peer:
            await scenario(peer, notes)

    asyncio.run(main())


def test_a_full_cycle_against_opennsa(opennsa):
    async def scenario(peer: nsi.NsiPeer, notes: Notes) -> None:
        held = await peer.reserve(f"{NET}:ps", f"{NET}:port1", 100, _hour_from_now(), source_vlan=1780,
                                  dest_vlan=1781, description="tsdn full cycle")
        cid = held.connection_id
        assert cid.startswith("OP-") and (held.criteria.source_vlan, held.criteria.dest_vlan) == (1780, 1781)
        assert held.criteria.capacity_mbps == 100 and held.description == "tsdn full cycle"
        assert (await peer.commit(cid)).operation == "reserveCommitConfirmed"
        [summary] = await peer.query(cid)
        assert (summary.states.reservation, summary.states.provision, summary.states.active) == (
            "ReserveStart", "Released", False)
        assert (await peer.provision(cid)).connection_id == cid
        up = await notes.wait(lambda c: isinstance(c, nsi.DataPlaneStateChange) and c.connection_id == cid
                              and c.active, 30)
        assert up.provider_nsa == OPENNSA
        [summary] = await peer.query(cid)
        assert (summary.states.provision, summary.states.lifecycle, summary.states.active) == (
            "Provisioned", "Created", True)
        assert summary.criteria.source_stp == f"{NET}:ps?vlan=1780" and summary.requester_nsa == TSDN
        await peer.release(cid)
        await notes.wait(lambda c: isinstance(c, nsi.DataPlaneStateChange) and c.connection_id == cid
                         and not c.active, 30)
        assert (await peer.terminate(cid)).operation == "terminateConfirmed"
        [summary] = await peer.query(cid)
        assert (summary.states.provision, summary.states.lifecycle, summary.states.active) == (
            "Released", "Terminated", False)

    run_with_peer(opennsa, scenario)


def test_a_reservation_aborted_gives_its_vlans_back(opennsa):
    async def scenario(peer: nsi.NsiPeer, notes: Notes) -> None:
        held = await peer.reserve(f"{NET}:ps", f"{NET}:port2", 100, _hour_from_now(), source_vlan=1782,
                                  dest_vlan=1783)
        assert (await peer.abort(held.connection_id)).operation == "reserveAbortConfirmed"
        [summary] = await peer.query(held.connection_id)
        assert summary.states.reservation == "ReserveStart"
        again = await peer.reserve(f"{NET}:ps", f"{NET}:port2", 100, _hour_from_now(), source_vlan=1782,
                                   dest_vlan=1783)
        assert again.connection_id != held.connection_id
        await peer.commit(again.connection_id)
        await peer.terminate(again.connection_id)

    run_with_peer(opennsa, scenario)


@pytest.mark.parametrize(("source", "vlan", "error_id", "says"), [
    (f"{NET}:ps", 1700, "00400", "Source port ps cannot match label set <Label vlan:1700>"),
    (f"{NET}:nope", 1784, "00704", f"No STP named {NET}:nope"),
], ids=["vlan-outside-the-range", "unknown-port"])
def test_a_reserve_opennsa_refuses_names_its_error(opennsa, source: str, vlan: int, error_id: str, says: str):
    async def scenario(peer: nsi.NsiPeer, notes: Notes) -> None:
        with pytest.raises(nsi.NsiRefused) as refused:
            await peer.reserve(source, f"{NET}:port1", 100, _hour_from_now(), source_vlan=vlan, dest_vlan=1785)
        assert (refused.value.error_id, refused.value.nsa, refused.value.operation) == (error_id, OPENNSA, "reserve")
        assert says in refused.value.text and says in str(refused.value)

    run_with_peer(opennsa, scenario)


def test_a_vlan_taken_twice_is_refused_and_an_unknown_connection_cannot_be_committed(opennsa):
    async def scenario(peer: nsi.NsiPeer, notes: Notes) -> None:
        first = await peer.reserve(f"{NET}:ps", f"{NET}:port1", 100, _hour_from_now(), source_vlan=1786,
                                   dest_vlan=1787)
        await peer.commit(first.connection_id)
        with pytest.raises(nsi.NsiRefused) as refused:
            await peer.reserve(f"{NET}:ps", f"{NET}:port2", 100, _hour_from_now(), source_vlan=1786, dest_vlan=1787)
        assert refused.value.error_id == "00704" and "ps?vlan=1786> not available" in refused.value.text
        with pytest.raises(nsi.NsiRefused) as unknown:
            await peer.commit("OP-0000000000")
        assert (unknown.value.error_id, unknown.value.operation) == ("00203", "reserveCommit")
        assert "No connection with id OP-0000000000" in str(unknown.value)
        await peer.terminate(first.connection_id)

    run_with_peer(opennsa, scenario)


def test_a_hold_never_committed_times_out_with_a_notification(opennsa):
    async def scenario(peer: nsi.NsiPeer, notes: Notes) -> None:
        held = await peer.reserve(f"{NET}:ps", f"{NET}:port2", 100, _hour_from_now(), source_vlan=1788,
                                  dest_vlan=1789)
        timeout = await notes.wait(lambda c: isinstance(c, nsi.ReserveTimeout)
                                   and c.connection_id == held.connection_id, OPENNSA_TPC_TIMEOUT + 30)
        assert (timeout.provider_nsa, timeout.timeout_seconds, timeout.originating_nsa) == (
            OPENNSA, OPENNSA_TPC_TIMEOUT, OPENNSA)
        with pytest.raises(nsi.NsiRefused, match="reserveCommit"):  # OpenNSA rolled the hold back
            await peer.commit(held.connection_id)
        await peer.terminate(held.connection_id)

    run_with_peer(opennsa, scenario)


def test_a_callback_that_never_comes_times_out_naming_the_nsa_operation_and_connection(opennsa):
    async def main() -> None:
        unheard = f"http://127.0.0.1:{free_port()}{RECEIVER_PATH}"  # nobody listens: callbacks are lost
        async with nsi.NsiPeer(OPENNSA, opennsa, TSDN, unheard, nsi.CallbackReceiver(TSDN),
                               callback_timeout=2.0) as peer:
            with pytest.raises(nsi.NsiTimeout) as late:
                await peer.reserve(f"{NET}:ps", f"{NET}:port1", 100, _hour_from_now(), source_vlan=1790,
                                   dest_vlan=1791)
            assert (late.value.nsa, late.value.operation) == (OPENNSA, "reserve")
            assert late.value.connection_id.startswith("OP-")
            assert str(late.value) == (f"{OPENNSA} sent no callback for reserve of {late.value.connection_id} "
                                       "within 2 s")
            [summary] = await peer.query(late.value.connection_id)  # it is held over there, for tsdn to abort
            assert summary.states.reservation == "ReserveHeld"
            with pytest.raises(nsi.NsiTimeout, match="terminate of OP-"):
                await peer.terminate(late.value.connection_id)

    asyncio.run(main())


def test_an_unreachable_provider_is_a_clear_error():
    async def main() -> None:
        receiver = nsi.CallbackReceiver(TSDN)
        url = f"http://127.0.0.1:{free_port()}/NSI/services/CS2"
        async with nsi.NsiPeer(OPENNSA, url, TSDN, f"http://127.0.0.1:1{RECEIVER_PATH}", receiver) as peer:
            with pytest.raises(nsi.NsiProtocolError, match=f"{OPENNSA} at {url} could not be reached for reserve"):
                await peer.reserve(f"{NET}:ps", f"{NET}:port1", 100, _hour_from_now(), source_vlan=1792,
                                   dest_vlan=1793)
        assert not receiver._waiting  # the call waits for nothing any more

    asyncio.run(main())


def test_a_failed_callback_is_a_refusal_even_when_it_comes_before_the_acknowledgment(schemas):
    """A stub provider (OpenNSA refuses synchronously, so it never sends *Failed) that calls back before it
    acknowledges: reserveCommitFailed for a commit, error for a provision."""
    async def provider(request: web.Request) -> web.Response:
        message = nsi_soap.parse(await request.read(), request.headers["SOAPAction"])
        connection_id = message.element.findtext("connectionId")
        header = nsi_soap.reply_header(message.header, nsi_soap.REQUESTER_PROTOCOL)
        if message.operation == "reserveCommit":
            answer = etree.Element(f"{{{nsi_soap.CTYPES}}}reserveCommitFailed")
            _fill(answer, ("connectionId", connection_id))
            _states(answer)
            _exception(answer, "00704", "the VLAN went to someone else")
        else:
            answer = etree.Element(f"{{{nsi_soap.CTYPES}}}error")
            _exception(answer, "00500", "the switch did not answer")
        body = nsi_soap.envelope(header, answer)
        valid(schemas, body)
        async with aiohttp.ClientSession() as client, client.post(
                message.header.reply_to, data=body,
                headers={"SOAPAction": ACTION.format(etree.QName(answer).localname)}) as delivered:
            assert delivered.status == 200
        return web.Response(body=nsi_soap.envelope(nsi_soap.reply_header(message.header), nsi_soap.acknowledgment()),
                            content_type="text/xml")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/NSI/services/CS2", provider)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/NSI/services/CS2"
        receiver, notes = nsi.CallbackReceiver(TSDN), Notes()
        try:
            async with served(receiver) as reply_to, nsi.NsiPeer(OPENNSA, url, TSDN, reply_to, receiver,
                                                                 notify=notes, callback_timeout=10) as peer:
                with pytest.raises(nsi.NsiRefused) as refused:
                    await peer.commit("OP-1")
                assert (refused.value.error_id, refused.value.operation, refused.value.connection_id) == (
                    "00704", "reserveCommit", "OP-1")
                assert str(refused.value) == (f"{OPENNSA} refused reserveCommit of OP-1: the VLAN went to someone "
                                              "else (NSI error 00704)")
                with pytest.raises(nsi.NsiRefused, match="refused provision of OP-2: the switch did not answer"):
                    await peer.provision("OP-2")
                assert notes.seen == []  # both went to the calls that waited for them
        finally:
            await runner.cleanup()

    asyncio.run(main())
