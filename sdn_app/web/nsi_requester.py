"""tsdn as an NSI Connection Service 2.0 requester towards a neighbouring domain's NSA (OGF GFD.237).

The protocol adapter only: what a WAN segment means to a reservation lives elsewhere. Messages are
built and read with lxml through `nsi_soap` (no string templates); every request built here
validates against the OGF schemas (tests/data/nsi).

- builders: `request_header`, `reserve`, `generic_request` (reserveCommit, reserveAbort, provision,
  release, terminate), `query_summary_sync`;
- `parse_reply` reads the synchronous answer of a provider (a SOAP fault is `NsiRefused`);
  `parse_callback` turns a callback (`nsi_soap.Message`) into a small frozen dataclass;
- `NsiPeer` talks to one neighbour: each call posts the request, checks the synchronous reply and
  waits for the matching callback (by providerNSA and correlationId) with a deadline;
- `CallbackReceiver.handle` is the aiohttp handler for /NSI/services/RequesterService2 that several
  peers share: it hands each callback to the call waiting for it, or to the peer's `notify`.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
import ssl
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from lxml import etree

from sdn_app.web import nsi_soap
from sdn_app.web.nsi_soap import CTYPES, FTYPES, P2P, SOAP, ConnectionStates, Criteria, Header, SoapFault

log = logging.getLogger(__name__)

_NSMAP = {"soap": SOAP, "ctypes": CTYPES, "p2psrv": P2P}
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                          remove_blank_text=True)
_STP = re.compile(r"^urn:ogf:network:[^?\s]+$")
GENERIC_REQUESTS = frozenset({"reserveCommit", "reserveAbort", "provision", "release", "terminate"})
# the callbacks that answer each request: success, then refusal
_ANSWERS = {
    "reserve": ("reserveConfirmed", frozenset({"reserveFailed", "error"})),
    "reserveCommit": ("reserveCommitConfirmed", frozenset({"reserveCommitFailed", "error"})),
    "reserveAbort": ("reserveAbortConfirmed", frozenset({"error"})),
    "provision": ("provisionConfirmed", frozenset({"error"})),
    "release": ("releaseConfirmed", frozenset({"error"})),
    "terminate": ("terminateConfirmed", frozenset({"error"})),
}


# -- errors -------------------------------------------------------------------------------------

class NsiError(Exception):
    """Something went wrong talking to the neighbour NSA `nsa`."""

    def __init__(self, message: str, nsa: str):
        super().__init__(message)
        self.nsa = nsa


class NsiRefused(NsiError):
    """The NSA `nsa` refused a request: NSI error `error_id` with its `text` (a SOAP fault or a *Failed)."""

    def __init__(self, error_id: str, text: str, nsa: str, operation: str = "", connection_id: str = ""):
        what = f"{operation} of {connection_id}" if operation and connection_id else operation or "the request"
        super().__init__(f"{nsa} refused {what}: {text} (NSI error {error_id or 'unknown'})", nsa)
        self.error_id = error_id
        self.text = text
        self.operation = operation
        self.connection_id = connection_id


class NsiTimeout(NsiError, TimeoutError):
    """The callback that answers `operation` on `connection_id` did not come from `nsa` in time."""

    def __init__(self, nsa: str, operation: str, connection_id: str, seconds: float):
        super().__init__(f"{nsa} sent no callback for {operation} of {connection_id or 'a new connection'} "
                         f"within {seconds:g} s", nsa)
        self.operation = operation
        self.connection_id = connection_id
        self.seconds = seconds


class NsiProtocolError(NsiError):
    """The NSA `nsa` answered with something that is not the NSI message expected, or could not be reached."""


# -- what comes back ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ServiceError:
    """An NSI serviceException: which NSA, which error, why."""

    nsa_id: str
    error_id: str
    text: str
    connection_id: str = ""


@dataclass(frozen=True)
class Callback:
    """A callback from a provider: its operation, header fields and connection id."""

    operation: str
    provider_nsa: str
    requester_nsa: str
    correlation_id: str
    connection_id: str


@dataclass(frozen=True)
class Confirmed(Callback):
    """reserveCommitConfirmed, reserveAbortConfirmed, provisionConfirmed, releaseConfirmed, terminateConfirmed
    (and the asynchronous query confirmations tsdn never asks for)."""


@dataclass(frozen=True)
class ReserveConfirmed(Callback):
    """reserveConfirmed: the connection is held with these criteria (the VLANs the provider chose)."""

    global_reservation_id: str
    description: str
    criteria: Criteria


@dataclass(frozen=True)
class Failed(Callback):
    """reserveFailed, reserveCommitFailed or error: a request refused after its acknowledgment."""

    states: ConnectionStates | None
    error: ServiceError


@dataclass(frozen=True)
class ErrorEvent(Callback):
    """errorEvent: something went wrong with an existing connection (activateFailed, forcedEnd, ...)."""

    notification_id: int
    timestamp: datetime.datetime
    event: str
    originating_connection_id: str
    originating_nsa: str
    error: ServiceError | None


@dataclass(frozen=True)
class DataPlaneStateChange(Callback):
    """dataPlaneStateChange: the data plane went up (active) or down."""

    notification_id: int
    timestamp: datetime.datetime
    active: bool
    version: int
    consistent: bool


@dataclass(frozen=True)
class ReserveTimeout(Callback):
    """reserveTimeout: a held reservation was not committed in time and was rolled back."""

    notification_id: int
    timestamp: datetime.datetime
    timeout_seconds: int
    originating_connection_id: str
    originating_nsa: str


@dataclass(frozen=True)
class MessageDeliveryTimeout(Callback):
    """messageDeliveryTimeout: a message of the provider towards a child NSA was not delivered."""

    notification_id: int
    timestamp: datetime.datetime
    timed_out_correlation_id: str


@dataclass(frozen=True)
class QueryResult:
    """One connection in a querySummarySyncConfirmed."""

    connection_id: str
    global_reservation_id: str
    description: str
    requester_nsa: str
    criteria: Criteria | None
    states: ConnectionStates


@dataclass(frozen=True)
class Reply:
    """The synchronous answer to a request: the connection id of a reserve, the results of a query."""

    operation: str
    connection_id: str = ""
    results: tuple[QueryResult, ...] = ()


# -- building requests --------------------------------------------------------------------------

def _q(namespace: str, name: str) -> str:
    return f"{{{namespace}}}{name}"


def _stp(stp: str, vlan: int | None, which: str) -> str:
    if not _STP.match(stp.split("?", 1)[0]) or any(c.isspace() for c in stp):
        raise ValueError(f"{which} STP {stp!r} is not an STP URN (urn:ogf:network:<network>:<port>)")
    if vlan is None:
        return stp
    if "?" in stp:
        raise ValueError(f"{which} STP {stp!r} already has labels; give the VLAN once")
    if isinstance(vlan, bool) or not isinstance(vlan, int) or not 1 <= vlan <= 4094:
        raise ValueError(f"{which} VLAN {vlan!r} is not a VLAN id (1-4094)")
    return f"{stp}?vlan={vlan}"


def _dt(value: datetime.datetime, field: str) -> str:
    if value.tzinfo is None:
        raise ValueError(f"{field} {value.isoformat()} has no time zone")
    return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


def request_header(requester_nsa: str, provider_nsa: str, reply_to: str | None,
                   correlation_id: str | None = None) -> Header:
    """The nsiHeader of a request from `requester_nsa` to `provider_nsa` (a fresh urn:uuid: correlation id
    unless one is given), callbacks to `reply_to`."""
    for name, value in (("requester NSA", requester_nsa), ("provider NSA", provider_nsa)):
        if not value.startswith("urn:ogf:network:"):
            raise ValueError(f"{name} {value!r} is not an NSA id URN (urn:ogf:network:...)")
    return Header(nsi_soap.PROVIDER_PROTOCOL, correlation_id or f"urn:uuid:{uuid.uuid4()}", requester_nsa,
                  provider_nsa, reply_to)


def reserve(source_stp: str, dest_stp: str, capacity_mbps: int, end: datetime.datetime | None,
            start: datetime.datetime | None = None, *, source_vlan: int | None = None,
            dest_vlan: int | None = None, description: str = "", global_reservation_id: str = "",
            connection_id: str = "", version: int = 0, symmetric_path: bool = True,
            directionality: str = "Bidirectional", service_type: str = nsi_soap.SERVICE_TYPE) -> etree._Element:
    """A reserve element: a new point-to-point connection between the two STPs (with `?vlan=N` when a
    VLAN is given) at `capacity_mbps`, from `start` (None: now) to `end`; a modify with `connection_id`."""
    if isinstance(capacity_mbps, bool) or not isinstance(capacity_mbps, int) or capacity_mbps <= 0:
        raise ValueError(f"capacity {capacity_mbps!r} is not a positive whole number of Mbit/s")
    if directionality not in ("Bidirectional", "Unidirectional"):
        raise ValueError(f"directionality {directionality!r} is neither Bidirectional nor Unidirectional")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"criteria version {version!r} is not a whole number")
    source = _stp(source_stp, source_vlan, "source")
    dest = _stp(dest_stp, dest_vlan, "destination")
    start_text = _dt(start, "start") if start is not None else None
    end_text = _dt(end, "end") if end is not None else None
    if start is not None and end is not None and end <= start:
        raise ValueError(f"end {end_text} is not after start {start_text}")
    element = etree.Element(_q(CTYPES, "reserve"), nsmap=_NSMAP)
    if connection_id:
        etree.SubElement(element, "connectionId").text = connection_id
    if global_reservation_id:
        etree.SubElement(element, "globalReservationId").text = global_reservation_id
    if description:
        etree.SubElement(element, "description").text = description
    criteria = etree.SubElement(element, "criteria", version=str(version))
    schedule = etree.SubElement(criteria, "schedule")
    if start_text:
        etree.SubElement(schedule, "startTime").text = start_text
    if end_text:
        etree.SubElement(schedule, "endTime").text = end_text
    etree.SubElement(criteria, "serviceType").text = service_type
    p2ps = etree.SubElement(criteria, _q(P2P, "p2ps"))
    for name, value in (("capacity", str(capacity_mbps)), ("directionality", directionality),
                        ("symmetricPath", "true" if symmetric_path else "false"),
                        ("sourceSTP", source), ("destSTP", dest)):
        etree.SubElement(p2ps, name).text = value
    return element


def generic_request(operation: str, connection_id: str) -> etree._Element:
    """A reserveCommit, reserveAbort, provision, release or terminate of `connection_id`."""
    if operation not in GENERIC_REQUESTS:
        raise ValueError(f"{operation!r} is not one of {', '.join(sorted(GENERIC_REQUESTS))}")
    if not connection_id or any(c.isspace() for c in connection_id):
        raise ValueError(f"connection id {connection_id!r} is empty or holds white space")
    element = etree.Element(_q(CTYPES, operation), nsmap=_NSMAP)
    etree.SubElement(element, "connectionId").text = connection_id
    return element


def query_summary_sync(connection_ids: tuple[str, ...] = (), global_reservation_ids: tuple[str, ...] = ()
                       ) -> etree._Element:
    """A querySummarySync of these connections (none given: every connection of this requester)."""
    element = etree.Element(_q(CTYPES, "querySummarySync"), nsmap=_NSMAP)
    for connection_id in connection_ids:
        etree.SubElement(element, "connectionId").text = connection_id
    for global_id in global_reservation_ids:
        etree.SubElement(element, "globalReservationId").text = global_id
    return element


# -- reading what comes back --------------------------------------------------------------------

def _text(parent: etree._Element | None, name: str, where: str, required: bool = True) -> str:
    found = parent.find(name) if parent is not None else None
    if found is None or not (found.text or "").strip():
        if required:
            raise SoapFault(f"{where}: {name} is missing", "00101")
        return ""
    return found.text.strip()


def _int(parent: etree._Element, name: str, where: str) -> int:
    value = _text(parent, name, where)
    try:
        return int(value)
    except ValueError:
        raise SoapFault(f"{where}: {name} {value!r} is not a whole number") from None


def _bool(parent: etree._Element, name: str, where: str) -> bool:
    value = _text(parent, name, where)
    if value not in ("true", "false", "1", "0"):
        raise SoapFault(f"{where}: {name} {value!r} is not a boolean")
    return value in ("true", "1")


def _time(value: str, where: str) -> datetime.datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SoapFault(f"{where}: {value!r} is not an xsd:dateTime") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=datetime.UTC)


def _stamp(parent: etree._Element, where: str) -> datetime.datetime:
    return _time(_text(parent, "timeStamp", where), f"{where}: timeStamp")  # type: ignore[return-value]


def parse_criteria(criteria: etree._Element, where: str) -> Criteria:
    """The point-to-point criteria in a criteria element (a `SoapFault` names what is missing)."""
    p2ps = criteria.find(_q(P2P, "p2ps"))
    if p2ps is None:
        raise SoapFault(f"{where}: criteria holds no p2ps (only the point-to-point service is understood)", "00102")
    version = criteria.get("version", "0")
    if not version.isdigit():
        raise SoapFault(f"{where}: criteria version {version!r} is not a whole number")
    schedule = criteria.find("schedule")
    try:
        return Criteria(
            version=int(version),
            start=_time(_text(schedule, "startTime", where, required=False), f"{where}: startTime"),
            end=_time(_text(schedule, "endTime", where, required=False), f"{where}: endTime"),
            service_type=_text(criteria, "serviceType", where, required=False),
            capacity_mbps=_int(p2ps, "capacity", f"{where}: p2ps"),
            directionality=_text(p2ps, "directionality", f"{where}: p2ps", required=False) or "Bidirectional",
            symmetric_path=_text(p2ps, "symmetricPath", f"{where}: p2ps", required=False) in ("true", "1"),
            source_stp=_text(p2ps, "sourceSTP", f"{where}: p2ps"),
            dest_stp=_text(p2ps, "destSTP", f"{where}: p2ps"))
    except ValueError as error:
        raise SoapFault(f"{where}: {error}") from None


def parse_service_exception(element: etree._Element, where: str) -> ServiceError:
    """The fields of an ftypes:serviceException element (in a fault or a *Failed)."""
    return ServiceError(nsa_id=_text(element, "nsaId", where, required=False),
                        error_id=_text(element, "errorId", where, required=False),
                        text=_text(element, "text", where, required=False),
                        connection_id=_text(element, "connectionId", where, required=False))


def parse_states(element: etree._Element, where: str) -> ConnectionStates:
    """The connectionStates element: the three states and the data plane status."""
    plane = element.find("dataPlaneStatus")
    if plane is None:
        raise SoapFault(f"{where}: dataPlaneStatus is missing", "00101")
    return ConnectionStates(
        reservation=_text(element, "reservationState", where), provision=_text(element, "provisionState", where),
        lifecycle=_text(element, "lifecycleState", where), active=_bool(plane, "active", where),
        version=_int(plane, "version", where), consistent=_bool(plane, "versionConsistent", where))


def parse_callback(message: nsi_soap.Message) -> Callback:
    """The callback in `message` (parsed by `nsi_soap.parse` with `REQUESTER_OPERATIONS`) as a dataclass;
    a `SoapFault` names a mandatory field that is missing or wrong."""
    element, operation, header = message.element, message.operation, message.header
    where = operation
    connection_id = _text(element, "connectionId", where, required=operation != "error"
                          and not operation.startswith("query"))
    base = (operation, header.provider_nsa, header.requester_nsa, header.correlation_id, connection_id)
    if operation == "reserveConfirmed":
        criteria = element.find("criteria")
        if criteria is None:
            raise SoapFault(f"{where}: criteria is missing", "00101")
        return ReserveConfirmed(*base, _text(element, "globalReservationId", where, required=False),
                                _text(element, "description", where, required=False),
                                parse_criteria(criteria, where))
    if operation in ("reserveFailed", "reserveCommitFailed", "error"):
        exception = element.find("serviceException")
        if exception is None:
            raise SoapFault(f"{where}: serviceException is missing", "00101")
        states = element.find("connectionStates")
        return Failed(*base, parse_states(states, where) if states is not None else None,
                      parse_service_exception(exception, f"{where}: serviceException"))
    if operation == "errorEvent":
        exception = element.find("serviceException")
        return ErrorEvent(*base, _int(element, "notificationId", where), _stamp(element, where),
                          _text(element, "event", where), _text(element, "originatingConnectionId", where),
                          _text(element, "originatingNSA", where),
                          parse_service_exception(exception, f"{where}: serviceException")
                          if exception is not None else None)
    if operation == "dataPlaneStateChange":
        plane = element.find("dataPlaneStatus")
        if plane is None:
            raise SoapFault(f"{where}: dataPlaneStatus is missing", "00101")
        return DataPlaneStateChange(*base, _int(element, "notificationId", where), _stamp(element, where),
                                    _bool(plane, "active", where), _int(plane, "version", where),
                                    _bool(plane, "versionConsistent", where))
    if operation == "reserveTimeout":
        return ReserveTimeout(*base, _int(element, "notificationId", where), _stamp(element, where),
                              _int(element, "timeoutValue", where), _text(element, "originatingConnectionId", where),
                              _text(element, "originatingNSA", where))
    if operation == "messageDeliveryTimeout":
        return MessageDeliveryTimeout(*base, _int(element, "notificationId", where), _stamp(element, where),
                                      _text(element, "correlationId", where))
    return Confirmed(*base)


def _query_results(element: etree._Element) -> tuple[QueryResult, ...]:
    results = []
    for reservation in element.findall("reservation"):
        where = "querySummarySyncConfirmed: reservation"
        states = reservation.find("connectionStates")
        if states is None:
            raise SoapFault(f"{where}: connectionStates is missing", "00101")
        criteria = sorted(reservation.findall("criteria"), key=lambda c: int(c.get("version", "0") or 0))
        results.append(QueryResult(
            connection_id=_text(reservation, "connectionId", where),
            global_reservation_id=_text(reservation, "globalReservationId", where, required=False),
            description=_text(reservation, "description", where, required=False),
            requester_nsa=_text(reservation, "requesterNSA", where, required=False),
            criteria=parse_criteria(criteria[-1], where) if criteria else None,
            states=parse_states(states, where)))
    return tuple(results)


_REPLIES = {"reserve": "reserveResponse", "querySummarySync": "querySummarySyncConfirmed"}


def parse_reply(body: bytes, status: int, operation: str, nsa: str, correlation_id: str = "") -> Reply:
    """The synchronous answer (HTTP `status`, `body`) of NSA `nsa` to `operation`: `NsiRefused` for a
    SOAP fault, `NsiProtocolError` for anything that is not the NSI answer to that operation."""
    if len(body) > nsi_soap.MAX_MESSAGE_BYTES:
        raise NsiProtocolError(f"{nsa} answered {operation} with {len(body)} bytes, at most "
                               f"{nsi_soap.MAX_MESSAGE_BYTES}", nsa)
    try:
        root = etree.fromstring(body, _PARSER) if b"<!DOCTYPE" not in body[:4096].upper() else None
    except etree.XMLSyntaxError:
        root = None
    if root is None or root.tag != _q(SOAP, "Envelope"):
        excerpt = body[:200].decode("utf-8", "replace")
        raise NsiProtocolError(f"{nsa} answered {operation} with HTTP {status} and no SOAP envelope: {excerpt!r}",
                               nsa)
    soap_body = root.find(_q(SOAP, "Body"))
    children = [] if soap_body is None else [c for c in soap_body if isinstance(c.tag, str)]
    if len(children) != 1:
        raise NsiProtocolError(f"{nsa} answered {operation} with {len(children)} elements in the SOAP body", nsa)
    answer = children[0]
    if answer.tag == _q(SOAP, "Fault"):
        exception = answer.find(f"detail/{{{FTYPES}}}serviceException")
        if exception is None:
            exception = answer.find(f"detail/{{{CTYPES}}}serviceException")
        faultstring = (answer.findtext("faultstring") or "").strip() or "a SOAP fault without a reason"
        if exception is None:
            raise NsiRefused("", faultstring, nsa, operation)
        error = parse_service_exception(exception, "serviceException")
        raise NsiRefused(error.error_id, error.text or faultstring, error.nsa_id or nsa, operation,
                         error.connection_id)
    expected = _REPLIES.get(operation, "acknowledgment")
    if answer.tag != _q(CTYPES, expected) or status != 200:
        raise NsiProtocolError(f"{nsa} answered {operation} with HTTP {status} and "
                               f"{etree.QName(answer).localname!r}, not {expected!r}", nsa)
    echoed = root.findtext(f"{{{SOAP}}}Header/{{{nsi_soap.HEADERS}}}nsiHeader/correlationId")
    if correlation_id and echoed and echoed.strip() != correlation_id:
        raise NsiProtocolError(f"{nsa} answered {operation} {correlation_id} with correlation id {echoed.strip()}",
                               nsa)
    try:
        if operation == "reserve":
            return Reply(operation, connection_id=_text(answer, "connectionId", "reserveResponse"))
        if operation == "querySummarySync":
            return Reply(operation, results=_query_results(answer))
    except SoapFault as error:
        raise NsiProtocolError(f"{nsa} answered {operation} with a bad {expected}: {error}", nsa) from None
    return Reply(operation)


# -- the callback receiver ----------------------------------------------------------------------

Notify = Callable[[Callback], object]


class CallbackReceiver:
    """The requester service (/NSI/services/RequesterService2) shared by the peers attached to it:
    each callback goes to the call waiting for its (providerNSA, correlationId), else to the notify of
    the peer it comes from. `nsa_id` is tsdn's requester NSA id, named in the faults it answers."""

    def __init__(self, nsa_id: str, notify: Notify | None = None):
        self.nsa_id = nsa_id
        self.notify = notify
        self._peers: dict[str, NsiPeer] = {}
        self._waiting: dict[tuple[str, str], asyncio.Future[Callback]] = {}

    def attach(self, peer: NsiPeer) -> None:
        """Take the callbacks of `peer`'s NSA (one peer per provider NSA id)."""
        known = self._peers.get(peer.provider_nsa)
        if known is not None and known is not peer:
            raise ValueError(f"a peer for {peer.provider_nsa} is already attached to this receiver")
        self._peers[peer.provider_nsa] = peer

    def detach(self, peer: NsiPeer) -> None:
        """Stop taking the callbacks of `peer`'s NSA."""
        if self._peers.get(peer.provider_nsa) is peer:
            del self._peers[peer.provider_nsa]

    def expect(self, provider_nsa: str, correlation_id: str) -> asyncio.Future[Callback]:
        """A future for the callback from `provider_nsa` with `correlation_id` (register before sending)."""
        future: asyncio.Future[Callback] = asyncio.get_running_loop().create_future()
        self._waiting[(provider_nsa, correlation_id)] = future
        return future

    def forget(self, provider_nsa: str, correlation_id: str) -> None:
        """No longer wait for that callback (a late one goes to notify)."""
        future = self._waiting.pop((provider_nsa, correlation_id), None)
        if future is not None and not future.done():
            future.cancel()

    def _fault(self, error: SoapFault) -> web.Response:
        body = nsi_soap.envelope(None, nsi_soap.fault(str(error), error.error_id, self.nsa_id, server=False))
        return web.Response(status=500, body=body, content_type="text/xml", charset="utf-8")

    async def handle(self, request: web.Request) -> web.Response:
        """Take one callback: a SOAP acknowledgment when it is understood, else a SOAP fault (HTTP 500)
        that says what is wrong."""
        body = await request.read()
        try:
            message = nsi_soap.parse(body, request.headers.get("SOAPAction"), nsi_soap.REQUESTER_OPERATIONS)
            header = message.header
            peer = self._peers.get(header.provider_nsa)
            if peer is None:
                raise SoapFault(f"providerNSA {header.provider_nsa!r} is not a neighbour of {self.nsa_id}",
                                "00102", header)
            if header.requester_nsa != peer.requester_nsa:
                raise SoapFault(f"requesterNSA {header.requester_nsa!r} is not {peer.requester_nsa!r}, the "
                                f"requester that deals with {header.provider_nsa}", "00102", header)
            callback = parse_callback(message)
        except SoapFault as error:
            log.warning("NSI callback refused: %s", error)
            return self._fault(error)
        future = self._waiting.pop((header.provider_nsa, header.correlation_id), None)
        if future is not None and not future.done():
            future.set_result(callback)
        else:
            self._notify(peer, callback)
        answer = nsi_soap.envelope(nsi_soap.reply_header(header, nsi_soap.REQUESTER_PROTOCOL),
                                   nsi_soap.acknowledgment())
        return web.Response(body=answer, content_type="text/xml", charset="utf-8")

    def _notify(self, peer: NsiPeer, callback: Callback) -> None:
        notify = peer.notify or self.notify
        if notify is None:
            log.info("NSI %s from %s for %s: nobody to tell", callback.operation, callback.provider_nsa,
                     callback.connection_id)
            return
        try:
            notify(callback)
        except Exception:  # a listener's bug must not make the provider think delivery failed
            log.exception("notify failed on NSI %s from %s", callback.operation, callback.provider_nsa)


# -- one neighbour ------------------------------------------------------------------------------

class NsiPeer:
    """A neighbouring domain's NSA (`provider_nsa` at `url`) that tsdn (`requester_nsa`, callbacks at
    `reply_to`, received by `receiver`) asks for connections. Unsolicited callbacks go to `notify`."""

    def __init__(self, provider_nsa: str, url: str, requester_nsa: str, reply_to: str,
                 receiver: CallbackReceiver, *, notify: Notify | None = None,
                 ssl_context: ssl.SSLContext | None = None, authorization: str | None = None,
                 callback_timeout: float = 60.0, request_timeout: float = 30.0):
        request_header(requester_nsa, provider_nsa, reply_to)  # checks the NSA ids
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"provider URL {url!r} is not an http(s) URL")
        if callback_timeout <= 0 or request_timeout <= 0:
            raise ValueError("the callback and request timeouts must be positive")
        self.provider_nsa = provider_nsa
        self.url = url
        self.requester_nsa = requester_nsa
        self.reply_to = reply_to
        self.receiver = receiver
        self.notify = notify
        self.ssl_context = ssl_context
        self.authorization = authorization
        self.callback_timeout = callback_timeout
        self.request_timeout = request_timeout
        self._session: aiohttp.ClientSession | None = None
        receiver.attach(self)

    async def close(self) -> None:
        """Close the HTTP client and leave the receiver."""
        self.receiver.detach(self)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> NsiPeer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def _post(self, header: Header, operation: str, body: etree._Element) -> Reply:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.request_timeout))
        headers = {"Content-Type": "text/xml; charset=utf-8",
                   "SOAPAction": f'"{nsi_soap.ACTION_PREFIX}{operation}"'}
        if self.authorization:
            headers["Authorization"] = self.authorization
        try:
            async with self._session.post(self.url, data=nsi_soap.envelope(header, body), headers=headers,
                                          ssl=self.ssl_context if self.ssl_context is not None else True) as answer:
                status, content = answer.status, await answer.read()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise NsiProtocolError(f"{self.provider_nsa} at {self.url} could not be reached for {operation}: "
                                   f"{error or type(error).__name__}", self.provider_nsa) from None
        return parse_reply(content, status, operation, self.provider_nsa, header.correlation_id)

    async def _call(self, operation: str, body: etree._Element, connection_id: str,
                    on_reply: Callable[[str], Awaitable[object]] | None = None) -> tuple[Reply, Callback]:
        header = request_header(self.requester_nsa, self.provider_nsa, self.reply_to)
        success, refusals = _ANSWERS[operation]
        # OpenNSA may send the callback before its HTTP reply: wait for it before posting
        future = self.receiver.expect(self.provider_nsa, header.correlation_id)
        try:
            reply = await self._post(header, operation, body)
            connection_id = reply.connection_id or connection_id
            if on_reply is not None:
                await on_reply(connection_id)
            try:
                callback = await asyncio.wait_for(future, self.callback_timeout)
            except TimeoutError:
                raise NsiTimeout(self.provider_nsa, operation, connection_id, self.callback_timeout) from None
        finally:
            self.receiver.forget(self.provider_nsa, header.correlation_id)
        if isinstance(callback, Failed) and callback.operation in refusals:
            raise NsiRefused(callback.error.error_id, callback.error.text, callback.error.nsa_id or self.provider_nsa,
                             operation, callback.connection_id or connection_id)
        if callback.operation != success:
            raise NsiProtocolError(f"{self.provider_nsa} answered {operation} of {connection_id} with "
                                   f"{callback.operation}", self.provider_nsa)
        if callback.connection_id != connection_id:
            raise NsiProtocolError(f"{self.provider_nsa} confirmed {operation} of {callback.connection_id}, "
                                   f"not of {connection_id}", self.provider_nsa)
        return reply, callback

    async def reserve(self, source_stp: str, dest_stp: str, capacity_mbps: int, end: datetime.datetime | None,
                      start: datetime.datetime | None = None, *,
                      on_reply: Callable[[str], Awaitable[object]] | None = None,
                      **options: object) -> ReserveConfirmed:
        """Hold a connection between the STPs (options as `reserve()`: source_vlan, dest_vlan, description,
        ...): the confirmation, with the connection id and the criteria the provider confirmed (its VLANs).
        `on_reply` learns the connection id from the synchronous reply, before the confirmation comes."""
        body = reserve(source_stp, dest_stp, capacity_mbps, end, start, **options)  # type: ignore[arg-type]
        _, callback = await self._call("reserve", body, str(options.get("connection_id") or ""), on_reply)
        assert isinstance(callback, ReserveConfirmed)
        return callback

    async def commit(self, connection_id: str) -> Confirmed:
        """Commit the held reservation `connection_id`."""
        return await self._generic("reserveCommit", connection_id)

    async def abort(self, connection_id: str) -> Confirmed:
        """Abort the held reservation `connection_id`."""
        return await self._generic("reserveAbort", connection_id)

    async def provision(self, connection_id: str) -> Confirmed:
        """Provision `connection_id` (its data plane comes up at its start time: a dataPlaneStateChange)."""
        return await self._generic("provision", connection_id)

    async def release(self, connection_id: str) -> Confirmed:
        """Release `connection_id` (its data plane goes down, the reservation stays)."""
        return await self._generic("release", connection_id)

    async def terminate(self, connection_id: str) -> Confirmed:
        """Terminate `connection_id` (its resources are given back)."""
        return await self._generic("terminate", connection_id)

    async def _generic(self, operation: str, connection_id: str) -> Confirmed:
        _, callback = await self._call(operation, generic_request(operation, connection_id), connection_id)
        assert isinstance(callback, Confirmed)
        return callback

    async def query(self, *connection_ids: str) -> tuple[QueryResult, ...]:
        """The summary of these connections (none given: all of this requester's) by querySummarySync."""
        # OpenNSA refuses even the synchronous query without a replyTo
        header = request_header(self.requester_nsa, self.provider_nsa, self.reply_to)
        reply = await self._post(header, "querySummarySync", query_summary_sync(tuple(connection_ids)))
        return reply.results
