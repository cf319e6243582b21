"""NSI Connection Service 2.0 messages (OGF GFD.237) as SOAP 1.1 envelopes, read and written with lxml.

The one place for the NSI wire format; what the messages mean lives in the core. Reading is
strict and safe: no DTDs, no entities, no network, bounded size; a message that is not a SOAP
envelope with an NSI header and exactly one operation in its body, or whose SOAPAction names
another operation, is a `SoapFault` whose text says what is wrong. Writing builds elements (no
string templates); every message written validates against the OGF schemas (tests/data/nsi).

- `parse(body, soap_action)` -> `Message` (header, operation, the operation's element);
- `reserve_request(element)` -> `Reserve` (the fields tsdn needs of a reserve);
- `envelope(header, body)` wraps an element; `reply_header(header)` is the header of an answer
  (same correlation id and NSAs, no replyTo); `acknowledgment`, `reserve_response`,
  `reserve_confirmed`, `fault` build the answers.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from lxml import etree

SOAP = "http://schemas.xmlsoap.org/soap/envelope/"
HEADERS = "http://schemas.ogf.org/nsi/2013/12/framework/headers"
FTYPES = "http://schemas.ogf.org/nsi/2013/12/framework/types"
CTYPES = "http://schemas.ogf.org/nsi/2013/12/connection/types"
P2P = "http://schemas.ogf.org/nsi/2013/12/services/point2point"
ACTION_PREFIX = "http://schemas.ogf.org/nsi/2013/12/connection/service/"
PROVIDER_PROTOCOL = "application/vnd.ogf.nsi.cs.v2.provider+soap"
REQUESTER_PROTOCOL = "application/vnd.ogf.nsi.cs.v2.requester+soap"
SERVICE_TYPE = "http://services.ogf.org/nsi/2013/12/descriptions/EVTS.A-GOLE"
MAX_MESSAGE_BYTES = 256 * 1024
PROVIDER_OPERATIONS = frozenset({"reserve", "reserveCommit", "reserveAbort", "provision", "release", "terminate",
                                 "querySummary", "querySummarySync", "queryRecursive", "queryNotification",
                                 "queryNotificationSync", "queryResult", "queryResultSync"})
REQUESTER_OPERATIONS = frozenset({"reserveConfirmed", "reserveFailed", "reserveCommitConfirmed", "reserveCommitFailed",
                                  "reserveAbortConfirmed", "provisionConfirmed", "releaseConfirmed",
                                  "terminateConfirmed", "querySummaryConfirmed", "queryRecursiveConfirmed",
                                  "error", "errorEvent", "dataPlaneStateChange", "reserveTimeout",
                                  "messageDeliveryTimeout"})
_NSMAP = {"soap": SOAP, "header": HEADERS, "ctypes": CTYPES, "p2psrv": P2P, "ftypes": FTYPES}
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                          remove_blank_text=True)


class SoapFault(ValueError):
    """A message tsdn cannot take: `str()` says what is wrong, `error_id` is the NSI error id."""

    def __init__(self, text: str, error_id: str = "00100", header: Header | None = None):
        super().__init__(text)
        self.error_id = error_id  # 00100: PAYLOAD_ERROR, 00101: MISSING_PARAMETER, 00102: UNSUPPORTED_PARAMETER
        self.header = header


@dataclass(frozen=True)
class Header:
    """The nsiHeader of a message."""

    protocol_version: str
    correlation_id: str
    requester_nsa: str
    provider_nsa: str
    reply_to: str | None = None


@dataclass(frozen=True)
class Message:
    """A parsed request: its header, the operation's name and its element."""

    header: Header
    operation: str
    element: etree._Element


@dataclass(frozen=True)
class Reserve:
    """What a reserve asks for (connection_id empty: a new reservation; else a modify)."""

    connection_id: str
    global_reservation_id: str
    description: str
    version: int
    start: datetime.datetime | None
    end: datetime.datetime | None
    service_type: str
    capacity_mbps: int
    directionality: str
    symmetric_path: bool
    source_stp: str
    dest_stp: str


def _q(namespace: str, name: str) -> str:
    return f"{{{namespace}}}{name}"


def _text(parent: etree._Element, name: str, where: str, required: bool = True) -> str | None:
    found = parent.find(name)
    if found is None or not (found.text or "").strip():
        if required:
            raise SoapFault(f"{where}: {name} is missing", "00101")
        return None
    return found.text.strip()


def parse(body: bytes, soap_action: str | None, operations: frozenset[str] = PROVIDER_OPERATIONS) -> Message:
    """The NSI message in `body` (a SOAP 1.1 envelope) sent with header SOAPAction `soap_action`:
    one of `operations` (a provider's requests by default; `REQUESTER_OPERATIONS` for callbacks)."""
    if len(body) > MAX_MESSAGE_BYTES:
        raise SoapFault(f"the message is {len(body)} bytes, at most {MAX_MESSAGE_BYTES}")
    if b"<!DOCTYPE" in body[:4096].upper() or b"<!ENTITY" in body.upper():
        raise SoapFault("a document type declaration is not allowed in a SOAP message")
    try:
        root = etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError as error:
        raise SoapFault(f"not well-formed XML: {error}") from None
    if root.tag != _q(SOAP, "Envelope"):
        raise SoapFault(f"the document is {etree.QName(root).localname!r}, not a SOAP 1.1 Envelope")
    header_element = root.find(f"{{{SOAP}}}Header/{{{HEADERS}}}nsiHeader")
    if header_element is None:
        raise SoapFault("the SOAP header has no nsiHeader", "00101")
    header = Header(
        protocol_version=_text(header_element, "protocolVersion", "nsiHeader") or "",
        correlation_id=_text(header_element, "correlationId", "nsiHeader") or "",
        requester_nsa=_text(header_element, "requesterNSA", "nsiHeader") or "",
        provider_nsa=_text(header_element, "providerNSA", "nsiHeader") or "",
        reply_to=_text(header_element, "replyTo", "nsiHeader", required=False))
    body_element = root.find(f"{{{SOAP}}}Body")
    children = [] if body_element is None else [child for child in body_element if isinstance(child.tag, str)]
    if len(children) != 1:
        raise SoapFault(f"the SOAP body holds {len(children)} elements, not one operation", header=header)
    element = children[0]
    name = etree.QName(element)
    if name.namespace != CTYPES or name.localname not in operations:
        side = "requester" if operations is REQUESTER_OPERATIONS else "provider"
        raise SoapFault(f"{name.localname!r} is not an operation of the NSI {side} interface", "00102", header)
    action = (soap_action or "").strip().strip('"')
    if action != ACTION_PREFIX + name.localname:
        raise SoapFault(f"SOAPAction {soap_action!r} does not name the operation in the body "
                        f"({ACTION_PREFIX + name.localname!r})", header=header)
    return Message(header, name.localname, element)


def _time(value: str | None, field: str) -> datetime.datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SoapFault(f"reserve: {field} {value!r} is not an xsd:dateTime") from None
    if parsed.tzinfo is None:
        raise SoapFault(f"reserve: {field} {value!r} has no time zone")
    return parsed


def reserve_request(element: etree._Element) -> Reserve:
    """The fields of a reserve operation's element (a `SoapFault` names what is missing or wrong)."""
    criteria = element.find("criteria")
    if criteria is None:
        raise SoapFault("reserve: criteria is missing", "00101")
    p2ps = criteria.find(f"{{{P2P}}}p2ps")
    if p2ps is None:
        raise SoapFault("reserve: criteria holds no p2ps (only the point-to-point service is offered)", "00102")
    schedule = criteria.find("schedule")
    capacity = _text(p2ps, "capacity", "reserve: p2ps") or ""
    if not capacity.isdigit() or int(capacity) <= 0:
        raise SoapFault(f"reserve: capacity {capacity!r} is not a positive whole number of Mbit/s")
    version = criteria.get("version", "0")
    if not version.isdigit():
        raise SoapFault(f"reserve: criteria version {version!r} is not a whole number")
    return Reserve(
        connection_id=_text(element, "connectionId", "reserve", required=False) or "",
        global_reservation_id=_text(element, "globalReservationId", "reserve", required=False) or "",
        description=_text(element, "description", "reserve", required=False) or "",
        version=int(version),
        start=_time(_text(schedule, "startTime", "schedule", required=False) if schedule is not None else None,
                    "startTime"),
        end=_time(_text(schedule, "endTime", "schedule", required=False) if schedule is not None else None, "endTime"),
        service_type=_text(criteria, "serviceType", "reserve: criteria", required=False) or SERVICE_TYPE,
        capacity_mbps=int(capacity),
        directionality=_text(p2ps, "directionality", "reserve: p2ps", required=False) or "Bidirectional",
        symmetric_path=(_text(p2ps, "symmetricPath", "reserve: p2ps", required=False) or "false") == "true",
        source_stp=_text(p2ps, "sourceSTP", "reserve: p2ps") or "",
        dest_stp=_text(p2ps, "destSTP", "reserve: p2ps") or "")


def reply_header(header: Header, protocol: str = PROVIDER_PROTOCOL) -> Header:
    """The header of the answer to a message with `header` (same correlation id and NSAs)."""
    return Header(protocol, header.correlation_id, header.requester_nsa, header.provider_nsa)


def envelope(header: Header | None, body: etree._Element) -> bytes:
    """A SOAP 1.1 envelope with `header` (None: an empty header) and `body`, as UTF-8 bytes."""
    root = etree.Element(_q(SOAP, "Envelope"), nsmap=_NSMAP)
    soap_header = etree.SubElement(root, _q(SOAP, "Header"))
    if header is not None:
        nsi = etree.SubElement(soap_header, _q(HEADERS, "nsiHeader"))
        for name, value in (("protocolVersion", header.protocol_version), ("correlationId", header.correlation_id),
                            ("requesterNSA", header.requester_nsa), ("providerNSA", header.provider_nsa),
                            ("replyTo", header.reply_to)):
            if value is not None:
                etree.SubElement(nsi, name).text = value
    etree.SubElement(root, _q(SOAP, "Body")).append(body)
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8")


def acknowledgment() -> etree._Element:
    """The synchronous answer to every request but reserve and the synchronous queries."""
    return etree.Element(_q(CTYPES, "acknowledgment"), nsmap=_NSMAP)


def reserve_response(connection_id: str) -> etree._Element:
    """The synchronous answer to a reserve: the connection id."""
    element = etree.Element(_q(CTYPES, "reserveResponse"), nsmap=_NSMAP)
    etree.SubElement(element, "connectionId").text = connection_id
    return element


def _dt(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


def reserve_confirmed(connection_id: str, reserve: Reserve, version: int) -> etree._Element:
    """The reserveConfirmed callback for `reserve`, held as connection `connection_id` at `version`."""
    element = etree.Element(_q(CTYPES, "reserveConfirmed"), nsmap=_NSMAP)
    etree.SubElement(element, "connectionId").text = connection_id
    if reserve.global_reservation_id:
        etree.SubElement(element, "globalReservationId").text = reserve.global_reservation_id
    if reserve.description:
        etree.SubElement(element, "description").text = reserve.description
    criteria = etree.SubElement(element, "criteria", version=str(version))
    schedule = etree.SubElement(criteria, "schedule")
    if reserve.start is not None:
        etree.SubElement(schedule, "startTime").text = _dt(reserve.start)
    if reserve.end is not None:
        etree.SubElement(schedule, "endTime").text = _dt(reserve.end)
    etree.SubElement(criteria, "serviceType").text = reserve.service_type
    p2ps = etree.SubElement(criteria, _q(P2P, "p2ps"))
    for name, value in (("capacity", str(reserve.capacity_mbps)), ("directionality", reserve.directionality),
                        ("symmetricPath", "true" if reserve.symmetric_path else "false"),
                        ("sourceSTP", reserve.source_stp), ("destSTP", reserve.dest_stp)):
        etree.SubElement(p2ps, name).text = value
    return element


def fault(text: str, error_id: str, nsa_id: str, connection_id: str | None = None,
          server: bool = True) -> etree._Element:
    """A SOAP fault carrying an NSI serviceException (`error_id`, `text`) from `nsa_id`."""
    element = etree.Element(_q(SOAP, "Fault"), nsmap=_NSMAP)
    etree.SubElement(element, "faultcode").text = "soap:Server" if server else "soap:Client"
    etree.SubElement(element, "faultstring").text = text
    exception = etree.SubElement(etree.SubElement(element, "detail"), _q(FTYPES, "serviceException"))
    etree.SubElement(exception, "nsaId").text = nsa_id
    if connection_id:
        etree.SubElement(exception, "connectionId").text = connection_id
    etree.SubElement(exception, "errorId").text = error_id
    etree.SubElement(exception, "text").text = text
    return element
