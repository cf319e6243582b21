"""NSI Connection Service 2.0 messages (OGF GFD.237) as SOAP 1.1 envelopes, read and written with lxml.

The one place for the NSI wire format; what the messages mean lives in the core. Reading is
strict and safe: no DTDs, no entities, no network, bounded size; a message that is not a SOAP
envelope with an NSI header and exactly one operation in its body, or whose SOAPAction names
another operation, is a `SoapFault` whose text says what is wrong. Writing builds elements (no
string templates); every message written validates against the OGF schemas (tests/data/nsi).

- `parse(body, soap_action)` -> `Message` (header, operation, the operation's element);
  `require_supported(message)` refuses the operations tsdn does not offer (queryRecursive, the
  notification and result queries) with error 00102;
- `reserve_request(element)` -> `Reserve` (a new reservation, or a modify when it names a
  connectionId), `connection_request(message)` -> the connectionId of reserveCommit, reserveAbort,
  provision, release and terminate, `query_request(message)` -> `QuerySummary`;
- `envelope(header, body)` wraps an element; `reply_header(header)` is the header of an answer
  (same correlation id and NSAs, no replyTo); `acknowledgment`, `reserve_response`,
  `query_summary_confirmed(..., sync=True)` and `fault` build the synchronous answers;
- the callbacks to the requester: `reserve_confirmed`, `confirmed` (reserveCommit, reserveAbort,
  provision, release, terminate), `failed` (reserveFailed, reserveCommitFailed),
  `query_summary_confirmed`, `error`, and the notifications `reserve_timeout`,
  `data_plane_state_change`, `error_event`. Their inputs are small frozen dataclasses of plain
  values (`ConnectionStates`, `Criteria`, `Summary`, `ServiceException`, `Notice`).

The NSI error ids are named constants (`MISSING_PARAMETER` = "00101", ...), with the values of
"Error Handling in NSI CS 2.x" (OGF GFD.235), the ones OpenNSA and SURF's SuPA send.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from lxml import etree

from sdn_app.core.nsi import States as ConnectionStates

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
# The requests tsdn answers; the rest of PROVIDER_OPERATIONS parse, but are refused by `require_supported`.
SUPPORTED_OPERATIONS = frozenset({"reserve", "reserveCommit", "reserveAbort", "provision", "release", "terminate",
                                  "querySummary", "querySummarySync"})
CONNECTION_OPERATIONS = frozenset({"reserveCommit", "reserveAbort", "provision", "release", "terminate"})
REQUESTER_OPERATIONS = frozenset({"reserveConfirmed", "reserveFailed", "reserveCommitConfirmed", "reserveCommitFailed",
                                  "reserveAbortConfirmed", "provisionConfirmed", "releaseConfirmed",
                                  "terminateConfirmed", "querySummaryConfirmed", "queryRecursiveConfirmed",
                                  "error", "errorEvent", "dataPlaneStateChange", "reserveTimeout",
                                  "messageDeliveryTimeout"})

# NSI error ids (GFD.235 "Error Handling in NSI CS 2.x"; OpenNSA's opennsa/error.py agrees where it has them).
PAYLOAD_ERROR = "00100"
MISSING_PARAMETER = "00101"
UNSUPPORTED_PARAMETER = "00102"
NOT_IMPLEMENTED = "00103"
VERSION_NOT_SUPPORTED = "00104"
CONNECTION_ERROR = "00200"
INVALID_TRANSITION = "00201"
RESERVATION_NONEXISTENT = "00203"
SECURITY_ERROR = "00300"
UNAUTHORIZED = "00302"
TOPOLOGY_ERROR = "00400"
DOMAIN_LOOKUP_ERROR = "00405"
NSA_LOOKUP_ERROR = "00406"
NO_SERVICEPLANE_PATH_FOUND = "00407"
INTERNAL_ERROR = "00500"
CHILD_SEGMENT_ERROR = "00502"
MESSAGE_DELIVERY_ERROR = "00503"
RESOURCE_UNAVAILABLE = "00600"
SERVICE_ERROR = "00700"
UNKNOWN_STP = "00701"
LABEL_SWAPPING_NOT_SUPPORTED = "00703"
STP_UNAVAILABLE = "00704"
CAPACITY_UNAVAILABLE = "00705"
DIRECTIONALITY_MISMATCH = "00706"
INVALID_ERO_MEMBER = "00707"
UNKNOWN_LABEL_TYPE = "00708"
INVALID_LABEL_FORMAT = "00709"
NO_TRANSPORTPLANE_PATH_FOUND = "00710"
RM_ERROR = "00800"

RESERVATION_STATES = frozenset({"ReserveStart", "ReserveChecking", "ReserveFailed", "ReserveAborting", "ReserveHeld",
                                "ReserveCommitting", "ReserveTimeout"})
PROVISION_STATES = frozenset({"Released", "Provisioning", "Provisioned", "Releasing"})
LIFECYCLE_STATES = frozenset({"Created", "Failed", "PassedEndTime", "Terminating", "Terminated"})
ERROR_EVENTS = frozenset({"activateFailed", "deactivateFailed", "dataplaneError", "forcedEnd"})
DIRECTIONALITIES = frozenset({"Bidirectional", "Unidirectional"})

_NSMAP = {"soap": SOAP, "header": HEADERS, "ctypes": CTYPES, "p2psrv": P2P, "ftypes": FTYPES}
_VLAN = re.compile(r"[?&]vlan=(\d+)(?:-(\d+))?(?:&|$)")
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                          remove_blank_text=True)


class SoapFault(ValueError):
    """A message tsdn cannot take: `str()` says what is wrong, `error_id` is the NSI error id."""

    def __init__(self, text: str, error_id: str = "00100", header: Header | None = None):
        super().__init__(text)
        self.error_id = error_id  # one of the NSI error ids above (PAYLOAD_ERROR, MISSING_PARAMETER, ...)
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


@dataclass(frozen=True)
class QuerySummary:
    """What a querySummary or querySummarySync asks for (no connection and no global ids: every connection)."""

    connection_ids: tuple[str, ...] = ()
    global_reservation_ids: tuple[str, ...] = ()
    if_modified_since: datetime.datetime | None = None


@dataclass(frozen=True)
class Criteria:
    """One version of a connection's criteria: its schedule and point-to-point service."""

    version: int
    start: datetime.datetime | None
    end: datetime.datetime | None
    capacity_mbps: int
    source_stp: str
    dest_stp: str
    directionality: str = "Bidirectional"
    symmetric_path: bool = False
    service_type: str = SERVICE_TYPE

    @property
    def source_vlan(self) -> int | None:
        """The VLAN of the source STP (None when it names none or a range)."""
        return stp_vlan(self.source_stp)

    @property
    def dest_vlan(self) -> int | None:
        """The VLAN of the destination STP (None when it names none or a range)."""
        return stp_vlan(self.dest_stp)

    def __post_init__(self) -> None:
        if self.version < 0:
            raise ValueError(f"criteria version {self.version} is negative")
        if self.capacity_mbps <= 0:
            raise ValueError(f"capacity {self.capacity_mbps} Mbit/s is not positive")
        if self.directionality not in DIRECTIONALITIES:
            raise ValueError(f"directionality {self.directionality!r} is not Bidirectional or Unidirectional")
        for name, value in (("start", self.start), ("end", self.end)):
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} time {value.isoformat()} has no time zone")

    @classmethod
    def of(cls, reserve: Reserve, version: int) -> Criteria:
        """The criteria `reserve` asked for, as version `version`."""
        return cls(version, reserve.start, reserve.end, reserve.capacity_mbps, reserve.source_stp, reserve.dest_stp,
                   reserve.directionality, reserve.symmetric_path, reserve.service_type)


@dataclass(frozen=True)
class Summary:
    """One connection in a querySummary result."""

    connection_id: str
    requester_nsa: str
    states: ConnectionStates
    criteria: tuple[Criteria, ...] = ()
    global_reservation_id: str = ""
    description: str = ""
    notification_id: int | None = None  # the last notification sent for the connection
    result_id: int | None = None  # the last result (confirmation) sent for the connection


@dataclass(frozen=True)
class ServiceException:
    """An NSI serviceException: which NSA says what (`error_id`, `text`), about which connection."""

    nsa_id: str
    error_id: str
    text: str
    connection_id: str | None = None
    service_type: str | None = None

    def __post_init__(self) -> None:
        if len(self.error_id) != 5 or not self.error_id.isdigit():
            raise ValueError(f"NSI error id {self.error_id!r} is not five digits")


@dataclass(frozen=True)
class Notice:
    """What every notification carries: the connection, its notification id (increasing per connection) and
    when the event happened."""

    connection_id: str
    notification_id: int
    time: datetime.datetime


def _q(namespace: str, name: str) -> str:
    return f"{{{namespace}}}{name}"


def stp_vlan(stp: str) -> int | None:
    """The single VLAN an STP URN names with `?vlan=N` (None for none or a range)."""
    match = _VLAN.search(stp)
    if match is None or match.group(2) is not None:
        return None
    return int(match.group(1))


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
    if name.namespace != CTYPES:
        raise SoapFault(f"the body element {name.localname!r} is in namespace {name.namespace!r}, "
                        f"not the NSI connection types namespace {CTYPES!r}", PAYLOAD_ERROR, header)
    if name.localname not in operations:
        side = "requester" if operations is REQUESTER_OPERATIONS else "provider"
        raise SoapFault(f"{name.localname!r} is not an operation of the NSI {side} interface", UNSUPPORTED_PARAMETER,
                        header)
    action = (soap_action or "").strip().strip('"')
    if action != ACTION_PREFIX + name.localname:
        raise SoapFault(f"SOAPAction {soap_action!r} does not name the operation in the body "
                        f"({ACTION_PREFIX + name.localname!r})", header=header)
    return Message(header, name.localname, element)


def _time(value: str | None, field: str, where: str = "reserve") -> datetime.datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SoapFault(f"{where}: {field} {value!r} is not an xsd:dateTime") from None
    if parsed.tzinfo is None:
        raise SoapFault(f"{where}: {field} {value!r} has no time zone")
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


def require_supported(message: Message) -> None:
    """Refuse (error 00102) a provider request tsdn does not offer: queryRecursive, queryNotification(Sync),
    queryResult(Sync)."""
    if message.operation not in SUPPORTED_OPERATIONS:
        raise SoapFault(f"{message.operation} is not supported by this provider "
                        f"(it offers {', '.join(sorted(SUPPORTED_OPERATIONS))})", UNSUPPORTED_PARAMETER,
                        message.header)


def connection_request(message: Message) -> str:
    """The connectionId a reserveCommit, reserveAbort, provision, release or terminate is about."""
    if message.operation not in CONNECTION_OPERATIONS:
        raise SoapFault(f"{message.operation} is not a request about one connection "
                        f"({', '.join(sorted(CONNECTION_OPERATIONS))})", PAYLOAD_ERROR, message.header)
    found = message.element.find("connectionId")
    if found is None or not (found.text or "").strip():
        raise SoapFault(f"{message.operation}: connectionId is missing", MISSING_PARAMETER, message.header)
    return found.text.strip()


def query_request(message: Message) -> QuerySummary:
    """The connections a querySummary or querySummarySync asks about (none named: all of the requester's)."""
    if message.operation not in ("querySummary", "querySummarySync"):
        raise SoapFault(f"{message.operation} is not a querySummary", PAYLOAD_ERROR, message.header)
    ids: dict[str, list[str]] = {"connectionId": [], "globalReservationId": []}
    for name, values in ids.items():
        for found in message.element.findall(name):
            if not (found.text or "").strip():
                raise SoapFault(f"{message.operation}: a {name} is empty", MISSING_PARAMETER, message.header)
            values.append(found.text.strip())
    try:
        since = _time(_text(message.element, "ifModifiedSince", message.operation, required=False),
                      "ifModifiedSince", message.operation)
    except SoapFault as error:
        raise SoapFault(str(error), error.error_id, message.header) from None
    return QuerySummary(tuple(ids["connectionId"]), tuple(ids["globalReservationId"]), since)


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
    if value.tzinfo is None:
        raise ValueError(f"time {value.isoformat()} has no time zone")
    return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


def _add(parent: etree._Element, name: str, value: str | int | bool | None) -> None:
    """A child `name` holding `value` (booleans as xsd:boolean); none when `value` is None or empty."""
    if value is None or value == "":
        return
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    etree.SubElement(parent, name).text = text


def _criteria(parent: etree._Element, criteria: Criteria) -> None:
    element = etree.SubElement(parent, "criteria", version=str(criteria.version))
    schedule = etree.SubElement(element, "schedule")
    if criteria.start is not None:
        etree.SubElement(schedule, "startTime").text = _dt(criteria.start)
    if criteria.end is not None:
        etree.SubElement(schedule, "endTime").text = _dt(criteria.end)
    etree.SubElement(element, "serviceType").text = criteria.service_type
    p2ps = etree.SubElement(element, _q(P2P, "p2ps"))
    for name, value in (("capacity", criteria.capacity_mbps), ("directionality", criteria.directionality),
                        ("symmetricPath", criteria.symmetric_path), ("sourceSTP", criteria.source_stp),
                        ("destSTP", criteria.dest_stp)):
        _add(p2ps, name, value)


def _data_plane_status(parent: etree._Element, active: bool, version: int, consistent: bool) -> None:
    status = etree.SubElement(parent, "dataPlaneStatus")
    for name, value in (("active", active), ("version", version), ("versionConsistent", consistent)):
        _add(status, name, value)


def _connection_states(parent: etree._Element, states: ConnectionStates) -> None:
    for value, allowed, what in ((states.reservation, RESERVATION_STATES, "reservation"),
                                 (states.provision, PROVISION_STATES, "provision"),
                                 (states.lifecycle, LIFECYCLE_STATES, "lifecycle")):
        if value not in allowed:
            raise ValueError(f"{what} state {value!r} is not one of {', '.join(sorted(allowed))}")
    if states.version < 0:
        raise ValueError(f"data plane version {states.version} is negative")
    element = etree.SubElement(parent, "connectionStates")
    for name, value in (("reservationState", states.reservation), ("provisionState", states.provision),
                        ("lifecycleState", states.lifecycle)):
        _add(element, name, value)
    _data_plane_status(element, states.active, states.version, states.consistent)


def _service_exception(parent: etree._Element, tag: str, exception: ServiceException) -> None:
    element = etree.SubElement(parent, tag)
    for name, value in (("nsaId", exception.nsa_id), ("connectionId", exception.connection_id),
                        ("serviceType", exception.service_type), ("errorId", exception.error_id)):
        _add(element, name, value)
    etree.SubElement(element, "text").text = exception.text


def reserve_confirmed(connection_id: str, reserve: Reserve, version: int) -> etree._Element:
    """The reserveConfirmed callback for `reserve`, held as connection `connection_id` at `version`."""
    element = etree.Element(_q(CTYPES, "reserveConfirmed"), nsmap=_NSMAP)
    etree.SubElement(element, "connectionId").text = connection_id
    _add(element, "globalReservationId", reserve.global_reservation_id)
    _add(element, "description", reserve.description)
    _criteria(element, Criteria.of(reserve, version))
    return element


def confirmed(operation: str, connection_id: str) -> etree._Element:
    """The `<operation>Confirmed` callback (reserveCommit, reserveAbort, provision, release, terminate) for
    connection `connection_id`."""
    if operation not in CONNECTION_OPERATIONS:
        raise ValueError(f"{operation!r} has no generic confirmation (only {', '.join(sorted(CONNECTION_OPERATIONS))})")
    element = etree.Element(_q(CTYPES, operation + "Confirmed"), nsmap=_NSMAP)
    etree.SubElement(element, "connectionId").text = connection_id
    return element


def failed(operation: str, connection_id: str, states: ConnectionStates,
           exception: ServiceException) -> etree._Element:
    """The reserveFailed or reserveCommitFailed callback (`operation` reserve or reserveCommit): the connection's
    states after the failure and why it failed."""
    if operation not in ("reserve", "reserveCommit"):
        raise ValueError(f"{operation!r} has no failure callback (only reserve and reserveCommit)")
    element = etree.Element(_q(CTYPES, operation + "Failed"), nsmap=_NSMAP)
    etree.SubElement(element, "connectionId").text = connection_id
    _connection_states(element, states)
    _service_exception(element, "serviceException", exception)
    return element


def query_summary_confirmed(summaries: tuple[Summary, ...] | list[Summary], sync: bool = False,
                            last_modified: datetime.datetime | None = None) -> etree._Element:
    """The querySummaryConfirmed callback, or with `sync` the synchronous querySummarySyncConfirmed answer:
    one reservation per summary."""
    element = etree.Element(_q(CTYPES, "querySummarySyncConfirmed" if sync else "querySummaryConfirmed"),
                            nsmap=_NSMAP)
    for summary in summaries:
        reservation = etree.SubElement(element, "reservation")
        etree.SubElement(reservation, "connectionId").text = summary.connection_id
        _add(reservation, "globalReservationId", summary.global_reservation_id)
        _add(reservation, "description", summary.description)
        for criteria in summary.criteria:
            _criteria(reservation, criteria)
        etree.SubElement(reservation, "requesterNSA").text = summary.requester_nsa
        _connection_states(reservation, summary.states)
        _add(reservation, "notificationId", summary.notification_id)
        _add(reservation, "resultId", summary.result_id)
    if last_modified is not None:
        etree.SubElement(element, "lastModified").text = _dt(last_modified)
    return element


def error(exception: ServiceException) -> etree._Element:
    """The error callback: a request accepted (acknowledged) earlier failed without a state change."""
    element = etree.Element(_q(CTYPES, "error"), nsmap=_NSMAP)
    _service_exception(element, "serviceException", exception)
    return element


def _notification(name: str, notice: Notice) -> etree._Element:
    if notice.notification_id < 0:
        raise ValueError(f"notification id {notice.notification_id} is negative")
    element = etree.Element(_q(CTYPES, name), nsmap=_NSMAP)
    etree.SubElement(element, "connectionId").text = notice.connection_id
    etree.SubElement(element, "notificationId").text = str(notice.notification_id)
    etree.SubElement(element, "timeStamp").text = _dt(notice.time)
    return element


def reserve_timeout(notice: Notice, timeout_s: int, originating_connection_id: str,
                    originating_nsa: str) -> etree._Element:
    """The reserveTimeout notification: a held reservation was not committed within `timeout_s` seconds and its
    resources are freed."""
    element = _notification("reserveTimeout", notice)
    for name, value in (("timeoutValue", timeout_s), ("originatingConnectionId", originating_connection_id),
                        ("originatingNSA", originating_nsa)):
        _add(element, name, value)
    return element


def data_plane_state_change(notice: Notice, active: bool, version: int, consistent: bool = True) -> etree._Element:
    """The dataPlaneStateChange notification: the connection's data plane went active or inactive."""
    element = _notification("dataPlaneStateChange", notice)
    _data_plane_status(element, active, version, consistent)
    return element


def error_event(notice: Notice, event: str, originating_connection_id: str, originating_nsa: str,
                exception: ServiceException | None = None) -> etree._Element:
    """The errorEvent notification (`event`: activateFailed, deactivateFailed, dataplaneError, forcedEnd)."""
    if event not in ERROR_EVENTS:
        raise ValueError(f"error event {event!r} is not one of {', '.join(sorted(ERROR_EVENTS))}")
    element = _notification("errorEvent", notice)
    for name, value in (("event", event), ("originatingConnectionId", originating_connection_id),
                        ("originatingNSA", originating_nsa)):
        _add(element, name, value)
    if exception is not None:
        _service_exception(element, "serviceException", exception)
    return element


def fault(text: str, error_id: str, nsa_id: str, connection_id: str | None = None,
          server: bool = True) -> etree._Element:
    """A SOAP fault carrying an NSI serviceException (`error_id`, `text`) from `nsa_id`."""
    element = etree.Element(_q(SOAP, "Fault"), nsmap=_NSMAP)
    etree.SubElement(element, "faultcode").text = "soap:Server" if server else "soap:Client"
    etree.SubElement(element, "faultstring").text = text
    _service_exception(etree.SubElement(element, "detail"), _q(FTYPES, "serviceException"),
                       ServiceException(nsa_id, error_id, text, connection_id))
    return element
