"""tsdn as an NSI CS 2.0 provider (/NSI on the HTTP side of a real controller): OpenNSA's own requester
command line `onsa` drives connections through their whole life; raw SOAP requests get every answer,
confirmation and notification valid against the OGF schemas, in order, echoing the correlation id;
bad input is refused with a SOAP fault naming the problem and its NSI errorId and books nothing; a hold
that is never committed times out with a reserveTimeout; a requester that cannot be reached gets no hold
kept for it; and the discovery and NML documents are public and name every STP.

The controller has no switches (no --listen-openflow), so a provisioned reservation is ACTIVE at once.
The onsa tests need OpenNSA's recipe (tests/nsi_peers.py): they skip without it, and fail when CI is set."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import requests
import yaml
from aiohttp import web
from lxml import etree

from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.web import nsi_documents, nsi_soap
from sdn_app.web import nsi_requester as nsi
from tests.conftest import TOKENS
from tests.nsi_peers import free_port
from tests.nsi_schemas import valid
from tests.test_northbound_api import pki  # noqa: F401  (the fixture)
from topologies import builtin_topology

DATA = Path(__file__).parent / "data" / "nsi"
xmlschema = pytest.importorskip("xmlschema", reason="schema validation needs xmlschema (a test dependency)")
NSA_SCHEMA = DATA / "schemas" / "DiscoveryService" / "nsa-document" / "ogf_nsi_discovery_nsa_v1_0.xsd"
ACTION = '"http://schemas.ogf.org/nsi/2013/12/connection/service/{}"'
DOMAIN = "ring8.test"
NSA = f"urn:ogf:network:{DOMAIN}:nsa"
NET = f"urn:ogf:network:{DOMAIN}:topology"
REQUESTER = "urn:ogf:network:tester.test:nsa"
RECEIVER_PATH = "/NSI/services/RequesterService2"
RUCIO, FTS, NOC = TOKENS["rucio"][1], TOKENS["fts"][1], TOKENS["noc"][1]
EDGE_VLANS = "1780-1799"  # what dtn1 and dtn3 offer in this test's topology (the others: the default)
DEFAULT_VLANS = "2-4094"
CALLBACK_WAIT = 30.0  # seconds a callback may take to arrive (a deadline, not a pause)
ONSA_TIMEOUT = 180  # onsa itself gives up on a confirmation after 130 s


# -- the provider -------------------------------------------------------------------------------

@pytest.fixture
def topology(tmp_path: Path) -> Path:
    """ring8 with VLANs 1780-1799 at dtn1's and dtn3's ports (the other DTNs offer the default range)."""
    spec = yaml.safe_load(builtin_topology("ring8").read_text())
    for dtn in spec["dtns"]:
        if dtn["name"] in ("dtn1", "dtn3"):
            dtn["vlans"] = EDGE_VLANS
    path = tmp_path / "ring8-nsi.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@dataclass
class Provider:
    """A running controller serving NSI: where its CS2 service is, and an admin's gRPC client."""

    http: str  # host:port
    grpc: TsdnClient

    @property
    def cs2(self) -> str:
        return f"http://{self.http}/NSI/services/CS2"

    def reservations(self) -> list[pb.Reservation]:
        """Every reservation the controller's book holds (as the admin sees them)."""
        return list(self.grpc.list_reservations())


@pytest.fixture
def start_provider(start_controller, tokens_file, topology):
    """`start_provider(**config)`: a controller on the test topology serving /NSI for DOMAIN."""
    clients: list[TsdnClient] = []

    def start(**overrides) -> Provider:
        controller = start_controller(topology, tokens=tokens_file, listen_http="127.0.0.1:0", domain=DOMAIN,
                                      **overrides)
        client = TsdnClient(controller.address, token=NOC, timeout=10)
        clients.append(client)
        return Provider(controller.http_address, client)

    yield start
    for client in clients:
        client.close()


@pytest.fixture
def provider(start_provider) -> Provider:
    """A controller serving /NSI with the default hold timeout."""
    return start_provider()


# -- the schemas --------------------------------------------------------------------------------

def header_of(root: etree._Element) -> nsi_soap.Header | None:
    """The nsiHeader of an envelope (None: it has none)."""
    found = root.find(f"{{{nsi_soap.SOAP}}}Header/{{{nsi_soap.HEADERS}}}nsiHeader")
    if found is None:
        return None
    return nsi_soap.Header(found.findtext("protocolVersion"), found.findtext("correlationId"),
                           found.findtext("requesterNSA"), found.findtext("providerNSA"), found.findtext("replyTo"))


def body_of(root: etree._Element) -> etree._Element:
    """The one element in an envelope's body."""
    [element] = [e for e in root.find(f"{{{nsi_soap.SOAP}}}Body") if isinstance(e.tag, str)]
    return element


@dataclass(frozen=True)
class Refusal:
    """A SOAP fault as a requester reads it."""

    status: int
    error_id: str
    text: str
    nsa: str


def refusal(status: int, root: etree._Element) -> Refusal:
    """The fault in `root` (an AssertionError when the answer is no fault)."""
    fault = root.find(f"{{{nsi_soap.SOAP}}}Body/{{{nsi_soap.SOAP}}}Fault")
    assert fault is not None, f"HTTP {status} without a fault: {etree.tostring(root)[:500]!r}"
    exception = fault.find(f".//{{{nsi_soap.FTYPES}}}serviceException")
    return Refusal(status, exception.findtext("errorId"), fault.findtext("faultstring"), exception.findtext("nsaId"))


# -- raw SOAP -----------------------------------------------------------------------------------

def hour_from_now(hours: float = 1) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(hours=hours)


def stp(port: str, vlan: int) -> str:
    return f"{NET}:{port}?vlan={vlan}"


def reserve(source: str = stp("dtn1", 1780), dest: str = stp("dtn3", 1790), mbps: int = 1000,
            start: datetime.datetime | None = None, end: datetime.datetime | None = None) -> etree._Element:
    """A reserve body between two of DOMAIN's STPs (by default dtn1 VLAN 1780 and dtn3 VLAN 1790, for an hour)."""
    return nsi.reserve(source, dest, mbps, end or hour_from_now(), start, description="tsdn NSI API test")


class Requester:
    """A raw-SOAP NSI requester of the provider: posts requests with its token, checks every answer against
    the schemas, and serves a callback sink on 127.0.0.1 that keeps (and checks) every callback."""

    def __init__(self, provider: Provider, schemas, session: aiohttp.ClientSession, token: str | None = RUCIO):
        self.provider, self.schemas, self.session, self.token = provider, schemas, session, token
        self.callbacks: list[tuple[str, nsi_soap.Header, etree._Element]] = []
        self.problems: list[str] = []  # callbacks that were not what NSI says they must be
        self.reply_to = ""
        self._changed = asyncio.Event()

    async def sink(self, request: web.Request) -> web.Response:
        """Keep one callback, acknowledged once it proved valid."""
        body = await request.read()
        try:
            root = valid(self.schemas, body)
            action = request.headers.get("SOAPAction", "")
            assert re.fullmatch(r'"[^"]+"', action), f"SOAPAction {action!r} is not quoted"
            message = nsi_soap.parse(body, action, nsi_soap.REQUESTER_OPERATIONS)
            assert request.content_type == "text/xml", request.content_type
        except Exception as problem:
            self.problems.append(f"{request.headers.get('SOAPAction')}: {problem}")
            self._changed.set()
            return web.Response(status=500, text=str(problem))
        self.callbacks.append((message.operation, message.header, body_of(root)))
        self._changed.set()
        header = nsi_soap.reply_header(message.header, nsi_soap.REQUESTER_PROTOCOL)
        return web.Response(body=nsi_soap.envelope(header, nsi_soap.acknowledgment()), content_type="text/xml")

    def header(self, correlation_id: str | None = None, reply_to: str | bool | None = True,
               provider_nsa: str = NSA) -> nsi_soap.Header:
        """A request header to the provider, callbacks to the sink (`reply_to` True) or where it says."""
        return nsi.request_header(REQUESTER, provider_nsa, self.reply_to if reply_to is True else reply_to or None,
                                  correlation_id)

    async def post_raw(self, body: bytes, action: str | None, token: str | None = None,
                       headers: dict[str, str] | None = None) -> tuple[int, etree._Element, aiohttp.ClientResponse]:
        """Post `body` to CS2 as it is: the status, the (valid) answer's root, the response."""
        sent = {"Content-Type": "text/xml; charset=utf-8", **(headers or {})}
        if action is not None:
            sent["SOAPAction"] = action
        token = token if token is not None else self.token
        if token:
            sent["Authorization"] = f"Bearer {token}"
        async with self.session.post(self.provider.cs2, data=body, headers=sent) as answer:
            payload = await answer.read()
            assert answer.content_type == "text/xml", (answer.status, payload[:300])
            return answer.status, valid(self.schemas, payload), answer

    async def call(self, element: etree._Element, header: nsi_soap.Header | None = None,
                   token: str | None = None) -> tuple[int, etree._Element, nsi_soap.Header]:
        """Send one operation: the status, the answer's root and the request's header."""
        header = header or self.header()
        operation = etree.QName(element).localname
        status, root, _ = await self.post_raw(nsi_soap.envelope(header, element), ACTION.format(operation), token)
        if status == 200:
            echoed = header_of(root)
            assert echoed is not None and (echoed.correlation_id, echoed.requester_nsa, echoed.provider_nsa) == (
                header.correlation_id, REQUESTER, NSA), echoed
            assert echoed.protocol_version == nsi_soap.PROVIDER_PROTOCOL
        return status, root, header

    async def ok(self, element: etree._Element, header: nsi_soap.Header | None = None) -> tuple[
            etree._Element, nsi_soap.Header]:
        """Send one operation the provider must accept: its answer's body element and the request's header."""
        status, root, header = await self.call(element, header)
        assert status == 200, refusal(status, root)
        return body_of(root), header

    async def refused(self, element: etree._Element, header: nsi_soap.Header | None = None) -> Refusal:
        """Send one operation the provider must refuse: the fault."""
        status, root, _ = await self.call(element, header)
        assert status == 500, f"HTTP {status}: {etree.tostring(root)[:500]!r}"
        return refusal(status, root)

    async def reserve(self, element: etree._Element | None = None, **header: object) -> tuple[str, nsi_soap.Header]:
        """A reserve the provider answers with a connection id: the id and the request's header."""
        answer, sent = await self.ok(element if element is not None else reserve(), self.header(**header))
        assert etree.QName(answer).localname == "reserveResponse"
        return answer.findtext("connectionId"), sent

    async def query(self, *connection_ids: str) -> dict[str, dict[str, str]]:
        """querySummarySync: connection id -> its states (reservation, provision, lifecycle, active)."""
        answer, _ = await self.ok(nsi.query_summary_sync(connection_ids), self.header(reply_to=None))
        assert etree.QName(answer).localname == "querySummarySyncConfirmed"
        found = {}
        for reservation in answer.findall("reservation"):
            states = reservation.find("connectionStates")
            found[reservation.findtext("connectionId")] = {
                "reservation": states.findtext("reservationState"), "provision": states.findtext("provisionState"),
                "lifecycle": states.findtext("lifecycleState"),
                "active": states.findtext("dataPlaneStatus/active")}
            assert reservation.findtext("requesterNSA") == REQUESTER
        return found

    async def wait(self, match: Callable[[str, nsi_soap.Header, etree._Element], bool],
                   seconds: float = CALLBACK_WAIT) -> tuple[str, nsi_soap.Header, etree._Element]:
        """The first callback that `match`es, waiting at most `seconds` for it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            assert not self.problems, self.problems
            for callback in self.callbacks:
                if match(*callback):
                    return callback
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"no such callback within {seconds} s; got "
                                     f"{[(o, etree.tostring(e)[:200]) for o, _, e in self.callbacks]}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    async def confirmed(self, operation: str, header: nsi_soap.Header) -> etree._Element:
        """The `operation` callback answering the request with `header` (its correlation id echoed)."""
        _, echoed, element = await self.wait(
            lambda o, h, e: o == operation and h.correlation_id == header.correlation_id)
        assert (echoed.protocol_version, echoed.requester_nsa, echoed.provider_nsa) == (
            nsi_soap.REQUESTER_PROTOCOL, REQUESTER, NSA), echoed
        return element

    async def until(self, condition: Callable[[], object], what: str, seconds: float = CALLBACK_WAIT) -> None:
        """Wait until `await condition()` is true (polled, with a deadline)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not await condition():
            assert loop.time() < deadline, f"not {what} within {seconds} s"
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def requester(provider: Provider, schemas, token: str | None = RUCIO) -> AsyncIterator[Requester]:
    """A Requester with its callback sink served on 127.0.0.1."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        client = Requester(provider, schemas, session, token)
        app = web.Application()
        app.router.add_post(RECEIVER_PATH, client.sink)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        client.reply_to = f"http://127.0.0.1:{runner.addresses[0][1]}{RECEIVER_PATH}"
        try:
            yield client
            assert not client.problems, client.problems
        finally:
            await runner.cleanup()


def run(scenario: Callable[[], object]) -> None:
    asyncio.run(scenario())


# -- onsa -----------------------------------------------------------------------------------------

@pytest.fixture
def run_onsa(onsa: Path, provider: Provider, tmp_path: Path) -> Callable[..., str]:
    """`run_onsa(command, *args, token=RUCIO)`: OpenNSA's requester command line against the provider (its
    callbacks on a free port of 127.0.0.1): what it printed."""
    home = tmp_path / "onsa-home"  # no ~/.opennsa-cli of whoever runs the tests
    home.mkdir()

    def call(command: str, *args: str, token: str | None = RUCIO) -> str:
        line = [str(onsa), command, "-u", provider.cs2, "-p", f"{DOMAIN}:nsa", "-r", "onsa.test:nsa",
                "-h", "127.0.0.1", "-o", str(free_port()), *args]
        if token:
            line += ["-m", f"Bearer {token}"]
        done = subprocess.run(line, capture_output=True, text=True, timeout=ONSA_TIMEOUT, check=False,
                              env={**os.environ, "HOME": str(home)})
        return done.stdout + done.stderr

    return call


def onsa_states(printed: str) -> tuple[str, str]:
    """The `States` and `Dataplane` lines of an onsa query."""
    states = re.search(r"^States\s+(.*)$", printed, re.MULTILINE)
    plane = re.search(r"^Dataplane\s+(.*)$", printed, re.MULTILINE)
    assert states and plane, printed
    return states.group(1).strip(), plane.group(1).strip()


def onsa_end() -> str:
    return hour_from_now().strftime("%Y-%m-%dT%H:%M:%S")


def test_onsa_drives_a_connection_through_its_whole_life(run_onsa, provider):
    printed = run_onsa("reserveonly", "-s", f"{DOMAIN}:topology:dtn1#vlan=1780",
                       "-d", f"{DOMAIN}:topology:dtn3#vlan=1790", "-b", "1000", "-e", onsa_end())
    found = re.search(rf"Connection created and held\. Id (RI-[0-9a-f]{{10}}) at {NSA}", printed)
    assert found, printed
    cid = found.group(1)
    assert f"<STP {DOMAIN}:topology:dtn1?vlan=1780> - <STP {DOMAIN}:topology:dtn3?vlan=1790>" in printed
    states, plane = onsa_states(run_onsa("query", "-c", cid))
    assert (states, plane.split(",")[0]) == ("ReserveHeld, Released, Created", "Active : False")
    [held] = provider.reservations()
    assert held.state == pb.HELD and held.bandwidth_bps == 1000 * 10**6

    assert f"Reservation committed at {NSA}" in run_onsa("reservecommit", "-c", cid)
    assert onsa_states(run_onsa("query", "-c", cid))[0] == "ReserveStart, Released, Created"
    assert provider.reservations()[0].state == pb.RESERVED

    assert f"Connection {cid} provisioned" in run_onsa("provision", "-c", cid)
    states, plane = onsa_states(run_onsa("query", "-c", cid))
    assert (states, plane) == ("ReserveStart, Provisioned, Created", "Active : True, Version: 0, Consistent True")
    assert provider.reservations()[0].state == pb.ACTIVE

    assert f"Connection {cid} released" in run_onsa("release", "-c", cid)
    states, plane = onsa_states(run_onsa("query", "-c", cid))
    assert (states, plane.split(",")[0]) == ("ReserveStart, Released, Created", "Active : False")
    assert provider.reservations()[0].state == pb.RESERVED

    assert f"Connection {cid} terminated" in run_onsa("terminate", "-c", cid)
    states, plane = onsa_states(run_onsa("query", "-c", cid))
    assert (states, plane.split(",")[0]) == ("ReserveStart, Released, Terminated", "Active : False")
    assert provider.reservations()[0].state == pb.RELEASED


def test_onsa_reserve_commits_at_once_and_other_principals_see_nothing(run_onsa, provider):
    printed = run_onsa("reserve", "-s", f"{DOMAIN}:topology:dtn1#vlan=1781", "-d", f"{DOMAIN}:topology:dtn3#vlan=1791",
                       "-b", "500", "-e", onsa_end())
    assert f"Reservation committed at {NSA}" in printed, printed
    cid = re.search(r"Id (RI-[0-9a-f]{10})", printed).group(1)
    assert onsa_states(run_onsa("query", "-c", cid))[0] == "ReserveStart, Released, Created"

    assert "No results from query" in run_onsa("query", "-c", cid, token=FTS)
    refused = run_onsa("provision", "-c", cid, token=FTS)
    assert "ConnectionNonExistentError" in refused and f"connectionId '{cid}': no such connection" in refused
    refused = run_onsa("terminate", "-c", cid, token=FTS)
    assert "ConnectionNonExistentError" in refused
    assert "401 Unauthorized" in run_onsa("provision", "-c", cid, token=None)
    # none of that touched the connection
    assert onsa_states(run_onsa("query", "-c", cid))[0] == "ReserveStart, Released, Created"
    assert [r.state for r in provider.reservations()] == [pb.RESERVED]


def test_without_a_token_cs2_answers_401_with_a_soap_fault_and_the_documents_are_public(provider, schemas):
    body = nsi_soap.envelope(nsi.request_header(REQUESTER, NSA, None), nsi.query_summary_sync())
    answer = requests.post(provider.cs2, data=body, timeout=10,
                           headers={"Content-Type": "text/xml", "SOAPAction": ACTION.format("querySummarySync")})
    assert answer.status_code == 401 and answer.headers["Content-Type"].startswith("text/xml")
    assert "Bearer" in answer.headers["WWW-Authenticate"]
    refused = refusal(401, valid(schemas, answer.content))
    assert (refused.error_id, refused.nsa) == (nsi_soap.UNAUTHORIZED, NSA)
    assert "token" in refused.text.lower()
    wrong = requests.post(provider.cs2, data=body, timeout=10, headers={
        "Content-Type": "text/xml", "SOAPAction": ACTION.format("querySummarySync"), "Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and refusal(401, valid(schemas, wrong.content)).error_id == nsi_soap.UNAUTHORIZED
    for path in ("/NSI/discovery.xml", f"/NSI/{DOMAIN}:topology.nml.xml"):
        public = requests.get(f"http://{provider.http}{path}", timeout=10)
        assert public.status_code == 200 and public.headers["Content-Type"].startswith("text/xml"), path


# -- raw SOAP: a whole life, every message checked ---------------------------------------------------

def test_a_connections_whole_life_in_raw_soap_with_every_message_valid_and_in_order(provider, schemas):
    async def scenario() -> None:
        async with requester(provider, schemas) as client:
            cid, asked = await client.reserve()
            assert re.fullmatch(r"RI-[0-9a-f]{10}", cid)
            held = await client.confirmed("reserveConfirmed", asked)
            assert held.findtext("connectionId") == cid
            p2ps = held.find(f"criteria/{{{nsi_soap.P2P}}}p2ps")
            assert (p2ps.findtext("sourceSTP"), p2ps.findtext("destSTP"), p2ps.findtext("capacity")) == (
                stp("dtn1", 1780), stp("dtn3", 1790), "1000")
            assert await client.query(cid) == {cid: {"reservation": "ReserveHeld", "provision": "Released",
                                                     "lifecycle": "Created", "active": "false"}}
            seen = len(client.callbacks)

            async def step(operation: str, *then: tuple[str, bool]) -> None:
                """Send `operation`; its confirmation and the data plane changes `then` follow, nothing else."""
                nonlocal seen
                answer, sent = await client.ok(nsi.generic_request(operation, cid))
                assert etree.QName(answer).localname == "acknowledgment"
                confirmation = await client.confirmed(f"{operation}Confirmed", sent)
                assert confirmation.findtext("connectionId") == cid
                for _, active in then:
                    await client.wait(lambda o, h, e, up=active: o == "dataPlaneStateChange"
                                      and e.findtext("dataPlaneStatus/active") == str(up).lower()
                                      and e in [c[2] for c in client.callbacks[seen:]])
                fresh = client.callbacks[seen:]
                assert sorted(o for o, _, _ in fresh) == sorted([f"{operation}Confirmed", *(o for o, _ in then)])
                seen = len(client.callbacks)

            await step("reserveCommit")
            assert (await client.query(cid))[cid]["reservation"] == "ReserveStart"
            await step("provision", ("dataPlaneStateChange", True))
            assert await client.query(cid) == {cid: {"reservation": "ReserveStart", "provision": "Provisioned",
                                                     "lifecycle": "Created", "active": "true"}}
            await step("release", ("dataPlaneStateChange", False))
            assert (await client.query(cid))[cid] == {"reservation": "ReserveStart", "provision": "Released",
                                                      "lifecycle": "Created", "active": "false"}
            await step("terminate")
            assert (await client.query(cid))[cid]["lifecycle"] == "Terminated"

            operations = [o for o, _, _ in client.callbacks]
            confirmations = [o for o in operations if o != "dataPlaneStateChange"]
            assert confirmations == ["reserveConfirmed", "reserveCommitConfirmed", "provisionConfirmed",
                                     "releaseConfirmed", "terminateConfirmed"]
            changes = [(h, e) for o, h, e in client.callbacks if o == "dataPlaneStateChange"]
            assert [e.findtext("dataPlaneStatus/active") for _, e in changes] == ["true", "false"]
            assert [int(e.findtext("notificationId")) for _, e in changes] == [1, 2]
            assert all(e.findtext("connectionId") == cid and h.provider_nsa == NSA and h.requester_nsa == REQUESTER
                       for h, e in changes)
            assert len({h.correlation_id for h, _ in changes}) == 2  # a notification answers no request
            assert provider.reservations()[0].state == pb.RELEASED

    run(scenario)


def test_a_retried_reserve_gets_the_same_connection_and_a_query_without_ids_lists_the_requesters(provider, schemas):
    async def scenario() -> None:
        async with requester(provider, schemas) as client:
            first, asked = await client.reserve()
            again, _ = await client.reserve(correlation_id=asked.correlation_id)
            assert again == first and len(provider.reservations()) == 1
            second, _ = await client.reserve(reserve(stp("dtn1", 1781), stp("dtn3", 1791)))
            assert set(await client.query()) == {first, second}
        async with requester(provider, schemas, token=FTS) as stranger:
            assert await stranger.query() == {}
            assert await stranger.query(first) == {}

    run(scenario)


# -- refusals -----------------------------------------------------------------------------------------

def _envelope(client: Requester, element: etree._Element, **header: object) -> bytes:
    return nsi_soap.envelope(client.header(**header), element)


def _query_recursive() -> etree._Element:
    element = etree.Element(f"{{{nsi_soap.CTYPES}}}queryRecursive")
    etree.SubElement(element, "connectionId").text = "RI-0000000000"
    return element


def _provision_without_id() -> etree._Element:
    return etree.Element(f"{{{nsi_soap.CTYPES}}}provision")


def _padded_reserve(size: int) -> etree._Element:
    element = reserve()
    element.find("description").text = "x" * size
    return element


# name -> (what to send: (body, SOAPAction) from the requester, error id, what the fault says, HTTP status)
REFUSALS: dict[str, tuple[Callable[[Requester], tuple[bytes, str]], str, str, int]] = {
    "malformed-xml": (lambda c: (b"<soap:Envelope xmlns:soap='x'><soap:Body>", ACTION.format("reserve")),
                      "00100", "not well-formed XML", 500),
    "wrong-soapaction": (lambda c: (_envelope(c, reserve()), ACTION.format("provision")), "00100",
                         "does not name the operation in the body", 500),
    "unquoted-soapaction": (lambda c: (_envelope(c, reserve()), ACTION.format("reserve").strip('"')), "00100",
                            "is not a quoted URI", 500),
    "missing-connection-id": (lambda c: (_envelope(c, _provision_without_id()), ACTION.format("provision")),
                              "00101", "provision: connectionId is missing", 500),
    "unknown-stp": (lambda c: (_envelope(c, reserve(source=stp("dtn9", 1780))), ACTION.format("reserve")),
                    "00701", "no port 'dtn9'", 500),
    "stp-in-another-network": (lambda c: (_envelope(c, reserve(source="urn:ogf:network:other.test:topology:ps"
                                                                      "?vlan=1780")), ACTION.format("reserve")),
                               "00701", f"is not in this network ({NET})", 500),
    "vlan-outside-the-range": (lambda c: (_envelope(c, reserve(source=stp("dtn1", 1700))), ACTION.format("reserve")),
                               "00704", f"VLAN 1700 is outside what port dtn1 offers ({EDGE_VLANS})", 500),
    "capacity-beyond-the-port": (lambda c: (_envelope(c, reserve(mbps=200_000)), ACTION.format("reserve")), "00705",
                                 "the access link of DTN dtn1 (dtn1->s1:3) has 100G free of its 100G NIC", 500),
    "schedule-in-the-past": (lambda c: (_envelope(c, reserve(start=hour_from_now(-2), end=hour_from_now(-1))),
                                        ACTION.format("reserve")), "00100", "is in the past", 500),
    "unknown-connection": (lambda c: (_envelope(c, nsi.generic_request("reserveCommit", "RI-0000000000")),
                                      ACTION.format("reserveCommit")), "00203",
                           f"connectionId 'RI-0000000000': no such connection at {NSA}", 500),
    "wrong-provider-nsa": (lambda c: (_envelope(c, reserve(), provider_nsa="urn:ogf:network:other.test:nsa"),
                                      ACTION.format("reserve")), "00406",
                           f"providerNSA 'urn:ogf:network:other.test:nsa' is not this NSA ({NSA})", 500),
    "unsupported-operation": (lambda c: (_envelope(c, _query_recursive()), ACTION.format("queryRecursive")),
                              "00102", "queryRecursive is not supported by this provider", 500),
    "message-over-the-soap-limit": (lambda c: (_envelope(c, _padded_reserve(nsi_soap.MAX_MESSAGE_BYTES)),
                                               ACTION.format("reserve")),
                                    "00100", f"at most {nsi_soap.MAX_MESSAGE_BYTES}", 500),
    "body-over-the-http-limit": (lambda c: (_envelope(c, _padded_reserve(2 * 1024 * 1024)), ACTION.format("reserve")),
                                 "00100", "request body too large", 413),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_bad_input_gets_a_fault_naming_the_problem_and_books_nothing(provider, schemas, case: str):
    build, error_id, says, status = REFUSALS[case]

    async def scenario() -> None:
        async with requester(provider, schemas) as client:
            body, action = build(client)
            answered, root, _ = await client.post_raw(body, action)
            refused = refusal(answered, root)
            assert (refused.status, refused.error_id, refused.nsa) == (status, error_id, NSA), refused
            assert says in refused.text, refused.text
            assert await client.query() == {}
            assert provider.reservations() == []
            assert client.callbacks == []

    run(scenario)


def test_a_taken_vlan_is_refused_naming_who_holds_it_and_nothing_more_is_booked(provider, schemas):
    async def scenario() -> None:
        async with requester(provider, schemas) as client:
            first, _ = await client.reserve()
            refused = await client.refused(reserve(stp("dtn1", 1780), stp("dtn3", 1799)))
            assert refused.error_id == nsi_soap.STP_UNAVAILABLE
            assert f"{stp('dtn1', 1780)} is not available: VLAN 1780 is taken at port dtn1" in refused.text
            assert f"NSI connection {first}" in refused.text
            assert list(await client.query()) == [first] and len(provider.reservations()) == 1
            # the other end's VLAN is just as taken
            refused = await client.refused(reserve(stp("dtn1", 1799), stp("dtn3", 1790)))
            assert refused.error_id == nsi_soap.STP_UNAVAILABLE and "VLAN 1790 is taken at port dtn3" in refused.text
            assert len(provider.reservations()) == 1

    run(scenario)


def test_operations_out_of_turn_are_invalid_transitions(provider, schemas):
    async def scenario() -> None:
        async with requester(provider, schemas) as client:
            cid, _ = await client.reserve()
            refused = await client.refused(nsi.generic_request("provision", cid))
            assert refused.error_id == nsi_soap.INVALID_TRANSITION and "needs a committed connection" in refused.text
            await client.ok(nsi.generic_request("terminate", cid))
            refused = await client.refused(nsi.generic_request("reserveCommit", cid))
            assert refused.error_id == nsi_soap.INVALID_TRANSITION and "is Terminated" in refused.text
            assert [r.state for r in provider.reservations()] == [pb.RELEASED]

    run(scenario)


# -- holds that nobody commits ------------------------------------------------------------------------

def test_a_hold_never_committed_times_out_with_a_notification_and_cannot_be_committed(start_provider, schemas):
    provider = start_provider(hold_timeout=1.0)

    async def scenario() -> None:
        async with requester(provider, schemas) as client:
            cid, asked = await client.reserve()
            await client.confirmed("reserveConfirmed", asked)
            _, header, timeout = await client.wait(lambda o, h, e: o == "reserveTimeout")
            assert (header.provider_nsa, header.requester_nsa) == (NSA, REQUESTER)
            assert header.correlation_id != asked.correlation_id
            assert (timeout.findtext("connectionId"), timeout.findtext("timeoutValue"),
                    timeout.findtext("originatingConnectionId"), timeout.findtext("originatingNSA")) == (
                cid, "1", cid, NSA)
            assert (await client.query(cid))[cid]["reservation"] == "ReserveTimeout"
            refused = await client.refused(nsi.generic_request("reserveCommit", cid))
            assert refused.error_id == nsi_soap.INVALID_TRANSITION and "its hold timed out" in refused.text
            assert [r.state for r in provider.reservations()] == [pb.EXPIRED]
            # the VLANs are free again
            again, _ = await client.reserve()
            assert again != cid

    run(scenario)


def test_a_hold_whose_confirmation_cannot_be_delivered_is_aborted(provider, schemas):
    async def scenario() -> None:
        async with requester(provider, schemas) as client:
            unreachable = f"http://127.0.0.1:{free_port()}{RECEIVER_PATH}"  # nobody listens there
            cid, _ = await client.reserve(reply_to=unreachable)

            async def aborted() -> bool:
                return (await client.query(cid))[cid]["reservation"] == "ReserveStart"
            await client.until(aborted, "aborted")
            assert (await client.query(cid))[cid] == {"reservation": "ReserveStart", "provision": "Released",
                                                      "lifecycle": "Created", "active": "false"}
            assert [r.state for r in provider.reservations()] == [pb.RELEASED]
            refused = await client.refused(nsi.generic_request("reserveCommit", cid))
            assert refused.error_id == nsi_soap.INVALID_TRANSITION
            again, asked = await client.reserve()  # the same VLANs, now to a requester that listens
            await client.confirmed("reserveConfirmed", asked)
            assert again != cid and client.callbacks[0][0] == "reserveConfirmed"

    run(scenario)


# -- the documents ----------------------------------------------------------------------------------

def test_the_discovery_document_is_valid_and_links_the_topology_that_lists_every_dtn_port(provider):
    discovery = requests.get(f"http://{provider.http}/NSI/discovery.xml", timeout=10)
    assert discovery.status_code == 200
    root = etree.fromstring(discovery.content)
    xmlschema.XMLSchema(str(NSA_SCHEMA)).validate(root)
    assert root.get("id") == NSA and root.findtext("networkId") == NET
    links = {i.findtext("type"): i.findtext("href") for i in root.findall("interface")}
    assert links[nsi_documents.PROVIDER_INTERFACE] == provider.cs2
    topology_url = links[nsi_documents.TOPOLOGY_INTERFACE]
    assert topology_url == f"http://{provider.http}/NSI/{DOMAIN}:topology.nml.xml"

    topology = requests.get(topology_url, timeout=10)
    assert topology.status_code == 200
    nml = etree.fromstring(topology.content)
    assert nml.get("id") == NET
    labels = {}
    for port_group in nml.iter(f"{{{nsi_documents.NML}}}PortGroup"):
        if port_group.get("id", "").startswith(NET + ":"):
            label = port_group.findtext(f"{{{nsi_documents.NML}}}LabelGroup")
            if label is not None:
                labels[port_group.get("id")[len(NET) + 1:]] = label
    expected = {}
    for number in range(1, 9):
        vlans = EDGE_VLANS if number in (1, 3) else DEFAULT_VLANS
        expected.update({f"dtn{number}-in": vlans, f"dtn{number}-out": vlans})
    assert labels == expected


def test_onsa_over_tls_is_known_by_its_client_certificate(start_controller, topology, onsa, pki, tmp_path):  # noqa: F811
    """NSI deployments authenticate NSAs by TLS client certificates: the tokens file names the
    certificate's subject CN as a principal, and onsa, presenting it, reserves with no token; a
    certificate from another CA is refused by TLS itself."""
    tokens = tmp_path / "cert-tokens.yaml"
    tokens.write_text(yaml.safe_dump({"tokens": [
        {"principal": "campus-nsa", "role": "service", "certificate": "client"},
        {"principal": "noc", "role": "admin", "token": NOC}]}))
    tokens.chmod(0o600)
    controller = start_controller(topology, tokens=tokens, listen_http="127.0.0.1:0", domain=DOMAIN,
                                  tls_cert=pki / "server.pem", tls_key=pki / "server.key", client_ca=pki / "ca.pem")
    certdir = tmp_path / "certdir"  # onsa wants the CA as <subject hash>.0
    certdir.mkdir()
    digest = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(pki / "ca.pem")], capture_output=True,
                            text=True, check=True).stdout.strip()
    (certdir / f"{digest}.0").write_bytes((pki / "ca.pem").read_bytes())
    home = tmp_path / "onsa-home"
    home.mkdir()

    def run(key: str, *args: str) -> str:
        line = [str(onsa), *args, "-u", f"https://{controller.http_address}/NSI/services/CS2", "-p", f"{DOMAIN}:nsa",
                "-r", "campus.test:nsa", "-h", "127.0.0.1", "-o", str(free_port()), "-i", str(certdir),
                "-l", str(pki / f"{key}.pem"), "-k", str(pki / f"{key}.key")]
        done = subprocess.run(line, capture_output=True, text=True, timeout=ONSA_TIMEOUT, check=False,
                              env={**os.environ, "HOME": str(home)})
        return done.stdout + done.stderr

    end = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    stps = ("-s", f"{DOMAIN}:topology:dtn1#vlan=1780", "-d", f"{DOMAIN}:topology:dtn3#vlan=1790", "-b", "100",
            "-e", end)
    printed = run("client", "reserveonly", *stps)
    held = re.search(r"Connection created and held\. Id (\S+) at", printed)
    assert held, printed
    admin = TsdnClient(controller.address, token=NOC, timeout=10, tls_ca=(pki / "ca.pem").read_bytes(),
                       tls_cert=(pki / "client.pem").read_bytes(), tls_key=(pki / "client.key").read_bytes())
    with admin:
        [reservation] = [r for r in admin.list_reservations() if r.labels.get("tsdn/nsi") == held.group(1)]
        assert reservation.owner == "campus-nsa" and reservation.state == pb.HELD
        free = ("-s", f"{DOMAIN}:topology:dtn2#vlan=1780", "-d", f"{DOMAIN}:topology:dtn5#vlan=1790", *stps[4:])
        refused = run("rogue-client", "reserveonly", *free)
        assert "Connection created and held" not in refused, refused
        assert [r.id for r in admin.list_reservations()] == [reservation.id]  # the rogue booked nothing
        assert "Connection created and held" in run("client", "reserveonly", *free)  # what it asked was free
