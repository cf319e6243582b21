"""NSI CS 2.0 on the controller's HTTP side, where OpenNSA has it (docs/nsi.md):

- `POST /NSI/services/CS2`: the provider (uPA) of this domain: an adapter over the core's `NsiDesk`;
- `GET /NSI/discovery.xml`: the NSA discovery document, linking
- `GET /NSI/<domain>:topology.nml.xml`: the NML topology listing every STP (DTN and inter-domain
  ports with their VLANs);
- `POST /NSI/services/RequesterService2`: where neighbouring NSAs send the callbacks of the WAN
  segments tsdn requests (`sdn_app.web.nsi_segments`).

A request is checked here (SOAP, SOAPAction, nsiHeader, the operation's fields: `nsi_soap`), then
one call runs on the core's thread; the answer is the synchronous reply (reserveResponse,
acknowledgment, querySummarySyncConfirmed) and, for the asynchronous operations, the
confirmation posted to the request's replyTo. A refusal is a SOAP fault (HTTP 500) with an NSI
serviceException whose errorId says why, and nothing was booked. Notifications
(dataPlaneStateChange, errorEvent, reserveTimeout) follow the book's events of NSI connections.

Callbacks to one replyTo go in order, one at a time, each with `CALLBACK_TIMEOUT` and
`CALLBACK_ATTEMPTS`; a requester that cannot be reached is logged, and a reserveConfirmed that
cannot be delivered aborts its hold at once (nothing stays booked for a requester that is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
import ssl
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from lxml import etree

from sdn_app.core.errors import (
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    NotFound,
    PermissionDenied,
    TsdnError,
    Unavailable,
)
from sdn_app.core.nsi import LABEL, Connection, NsiDesk, NsiRefused, ReserveAsk, Summary, network_id, nsa_id
from sdn_app.core.nsi import Notice as CoreNotice
from sdn_app.web import nsi_documents, nsi_soap
from sdn_app.web.api import PRINCIPAL, ApiContext, CoreDesk, EventFollower, client_address
from sdn_app.web.nsi_requester import CallbackReceiver
from sdn_app.web.nsi_segments import SegmentRunner

log = logging.getLogger("tsdn.nsi")
T = TypeVar("T")
PREFIX = "/NSI"
SERVICE_PATH = f"{PREFIX}/services/CS2"
REQUESTER_PATH = f"{PREFIX}/services/RequesterService2"
DISCOVERY_PATH = f"{PREFIX}/discovery.xml"
CALLBACK_TIMEOUT = 10.0  # seconds one callback POST may take
CALLBACK_ATTEMPTS = 3  # tries per callback before the requester is called unreachable
CALLBACK_BACKLOG = 1000  # callbacks queued per replyTo; beyond, the oldest requester is dropped
XML = "text/xml; charset=utf-8"
SOFTWARE = "tsdn"
_ERROR_IDS = {NoCapacity: nsi_soap.CAPACITY_UNAVAILABLE, InvalidArgument: nsi_soap.PAYLOAD_ERROR,
              NotFound: nsi_soap.UNKNOWN_STP, PermissionDenied: nsi_soap.UNAUTHORIZED,
              FailedPrecondition: nsi_soap.INVALID_TRANSITION, Unavailable: nsi_soap.INTERNAL_ERROR}


def error_id(error: TsdnError) -> str:
    """The NSI errorId a core error is refused with."""
    if isinstance(error, NsiRefused):
        return error.error_id
    for kind, found in _ERROR_IDS.items():
        if isinstance(error, kind):
            return found
    return nsi_soap.INTERNAL_ERROR


def _datetime(seconds: float | None) -> datetime.datetime | None:
    if seconds is None or seconds == float("inf"):
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


def _seconds(value: datetime.datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _criteria(connection: Connection) -> nsi_soap.Criteria:
    return nsi_soap.Criteria(connection.version, _datetime(connection.start), _datetime(connection.end),
                             connection.capacity_mbps, connection.source, connection.dest, symmetric_path=True)


class NsiApi:
    """NSI CS 2.0 (`HttpApi`): the provider of `context.domain`, its discovery and topology documents,
    and the requester service for WAN segments' callbacks (`receiver`)."""

    prefix = PREFIX

    def __init__(self, context: ApiContext, segment_timeout: float = 60.0, ssl_context: ssl.SSLContext | None = None):
        """With inter-domain ports in the topology, tsdn also requests WAN segments from the neighbours
        (`SegmentRunner`: each step confirmed within `segment_timeout` seconds; `ssl_context` for
        neighbours served over HTTPS, with tsdn's client certificate)."""
        self.context = context
        self.nsa = nsa_id(context.domain)
        self.network = network_id(context.domain)
        self.topology_path = f"{PREFIX}/{context.domain}:topology.nml.xml"
        self.receiver = CallbackReceiver(self.nsa)
        self.segments = (SegmentRunner(context, self.receiver, self.nsa, "", segment_timeout, ssl_context)
                         if context.topology.interdomain else None)
        self.public = frozenset({DISCOVERY_PATH, self.topology_path, REQUESTER_PATH})
        self.started = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        self._desk = CoreDesk(context.worker, lambda book: NsiDesk(book, context.domain))
        self._session: aiohttp.ClientSession | None = None
        self._queues: dict[str, asyncio.Queue[tuple[str, bytes, Callable[[], Any] | None]]] = {}
        self._senders: dict[str, asyncio.Task[None]] = {}
        self._notification_ids: dict[str, int] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._follower: EventFollower | None = None

    # -- the HttpApi protocol ----------------------------------------------------------------------

    def listening(self, scheme: str, address: str) -> None:
        """The server is bound at `scheme://address`: where neighbours send the segments' callbacks."""
        host, _, port = address.rpartition(":")
        if host.strip("[]") in ("0.0.0.0", "::", ""):
            host = socket.getfqdn()
        if self.segments is not None:
            self.segments.reply_to = f"{scheme}://{host}:{port}{REQUESTER_PATH}"

    def add_routes(self, app: web.Application) -> None:
        app.on_startup.append(self._start)
        if self.segments is not None:
            app.on_startup.append(self.segments.start)
        app.router.add_post(SERVICE_PATH, self._service)
        app.router.add_post(REQUESTER_PATH, self.receiver.handle)
        app.router.add_get(DISCOVERY_PATH, self._discovery)
        app.router.add_get(self.topology_path, self._topology)

    def error(self, status: int, message: str) -> web.Response:
        """A SOAP fault from this NSA with `message` (the HTTP status kept: 401, 403, 413, ...)."""
        error = nsi_soap.UNAUTHORIZED if status in (401, 403) else nsi_soap.PAYLOAD_ERROR
        return _xml(nsi_soap.envelope(None, nsi_soap.fault(message, error, self.nsa)), status)

    async def close(self) -> None:
        """Stop the notification watcher, the callback senders and the WAN segments' tasks."""
        if self.segments is not None:
            await self.segments.close()
        if self._follower is not None:
            self._follower.close()
        tasks = [t for t in (self._watcher, *self._senders.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()

    # -- plumbing --------------------------------------------------------------------------------

    async def _core(self, fn: Callable[[NsiDesk], T]) -> T:
        """`fn(desk)` on the core's thread."""
        return await self._desk.call(fn)

    def _fault(self, text: str, error: str, connection_id: str | None = None,
               header: nsi_soap.Header | None = None) -> web.Response:
        reply = nsi_soap.reply_header(header) if header is not None else None
        return _xml(nsi_soap.envelope(reply, nsi_soap.fault(text, error, self.nsa, connection_id)), 500)

    # -- the provider ----------------------------------------------------------------------------

    async def _service(self, request: web.Request) -> web.Response:
        """One NSI request: its synchronous answer now, its confirmation to replyTo after."""
        body = await request.read()
        try:
            action = request.headers.get("SOAPAction")
            if action is not None and not (len(action.strip()) > 1 and action.strip()[0] == action.strip()[-1] == '"'):
                # SOAP 1.1 (6.1.1) quotes the URI; OpenNSA refuses an unquoted one too
                raise nsi_soap.SoapFault(f"SOAPAction {action!r} is not a quoted URI (SOAP 1.1: "
                                         f'"{nsi_soap.ACTION_PREFIX}<operation>")', nsi_soap.PAYLOAD_ERROR)
            message = nsi_soap.parse(body, action)
            nsi_soap.require_supported(message)
            if message.header.provider_nsa != self.nsa:
                raise nsi_soap.SoapFault(f"nsiHeader.providerNSA {message.header.provider_nsa!r} is not this NSA "
                                         f"({self.nsa})", nsi_soap.NSA_LOOKUP_ERROR, message.header)
        except nsi_soap.SoapFault as fault:
            log.info("NSI request from %s refused: %s", client_address(request), fault)
            return self._fault(str(fault), fault.error_id, header=fault.header)
        principal = request[PRINCIPAL]
        header = message.header
        connection_id: str | None = None
        try:
            if message.operation == "reserve":
                reserve = nsi_soap.reserve_request(message.element)
                if reserve.connection_id:
                    raise NsiRefused(f"reserve with connectionId {reserve.connection_id}: modifying a connection is "
                                     "not offered by this provider; terminate it and reserve again", "00102")
                ask = ReserveAsk(header.requester_nsa, header.reply_to, header.correlation_id,
                                 reserve.global_reservation_id, reserve.description, reserve.source_stp,
                                 reserve.dest_stp, reserve.capacity_mbps, _seconds(reserve.start),
                                 _seconds(reserve.end), reserve.directionality)
                connection = await self._core(lambda desk: desk.reserve(principal, ask))
                log.info("NSI reserve %s by %s (%s): %s -> %s, %d Mbit/s held as %s", connection.id, principal.name,
                         header.requester_nsa, connection.source, connection.dest, connection.capacity_mbps,
                         connection.reservation)
                self._callback(header, connection.reply_to,
                               nsi_soap.reserve_confirmed(connection.id, _confirmed_reserve(reserve, connection),
                                                          connection.version),
                               undelivered=lambda: self._give_up_hold(principal, connection.id))
                return self._reply(header, nsi_soap.reserve_response(connection.id))
            if message.operation in ("querySummary", "querySummarySync"):
                query = nsi_soap.query_request(message)
                summaries = await self._core(lambda desk: desk.summaries(principal, query.connection_ids,
                                                                         query.global_reservation_ids))
                results = [self._summary(s) for s in summaries]
                if message.operation == "querySummarySync":
                    return self._reply(header, nsi_soap.query_summary_confirmed(results, sync=True))
                self._callback(header, header.reply_to, nsi_soap.query_summary_confirmed(results))
                return self._reply(header, nsi_soap.acknowledgment())
            connection_id = nsi_soap.connection_request(message)
            operation = message.operation
            cid = connection_id
            connection = await self._core(lambda desk: self._operate(desk, principal, operation, cid,
                                                                     header.reply_to))
            log.info("NSI %s %s by %s (%s)", operation, cid, principal.name, header.requester_nsa)
            self._callback(header, header.reply_to or connection.reply_to, nsi_soap.confirmed(operation, cid))
            return self._reply(header, nsi_soap.acknowledgment())
        except nsi_soap.SoapFault as fault:
            return self._fault(str(fault), fault.error_id, connection_id, header)
        except TsdnError as refused:
            log.info("NSI %s from %s (%s) refused: %s", message.operation, principal.name, header.requester_nsa,
                     refused)
            return self._fault(str(refused), error_id(refused), connection_id, header)

    @staticmethod
    def _operate(desk: NsiDesk, principal: Any, operation: str, connection_id: str,
                 reply_to: str | None) -> Connection:
        actions = {"reserveCommit": desk.commit, "reserveAbort": desk.abort, "provision": desk.provision,
                   "release": desk.release, "terminate": desk.terminate}
        connection = actions[operation](principal, connection_id)
        desk.note_reply_to(connection.id, reply_to)
        return connection

    def _reply(self, header: nsi_soap.Header, body: etree._Element) -> web.Response:
        return _xml(nsi_soap.envelope(nsi_soap.reply_header(header), body), 200)

    def _summary(self, summary: Summary) -> nsi_soap.Summary:
        connection = summary.connection
        return nsi_soap.Summary(connection.id, connection.requester_nsa, summary.states,
                                (_criteria(connection),), connection.global_id, connection.description,
                                notification_id=self._notification_ids.get(connection.id))

    async def _give_up_hold(self, principal: Any, connection_id: str) -> None:
        """The requester never got its reserveConfirmed: abort the hold rather than keep it booked."""
        try:
            await self._core(lambda desk: desk.abort(principal, connection_id))
            log.warning("NSI %s: reserveConfirmed could not be delivered; its hold was aborted", connection_id)
        except TsdnError as error:
            log.info("NSI %s: reserveConfirmed undelivered; the hold is not aborted: %s", connection_id, error)

    # -- callbacks -------------------------------------------------------------------------------

    def _callback(self, header: nsi_soap.Header, reply_to: str | None, body: etree._Element,
                  undelivered: Callable[[], Any] | None = None) -> None:
        """Queue a confirmation to `reply_to` (none given: the requester polls; nothing is sent)."""
        if not reply_to:
            return
        operation = etree.QName(body).localname
        envelope = nsi_soap.envelope(nsi_soap.reply_header(header, nsi_soap.REQUESTER_PROTOCOL), body)
        self._send(reply_to, operation, envelope, undelivered)

    def _send(self, reply_to: str, operation: str, envelope: bytes,
              undelivered: Callable[[], Any] | None = None) -> None:
        queue = self._queues.get(reply_to)
        if queue is None:
            queue = self._queues[reply_to] = asyncio.Queue(CALLBACK_BACKLOG)
            self._senders[reply_to] = asyncio.get_running_loop().create_task(self._sender(reply_to, queue))
        try:
            queue.put_nowait((operation, envelope, undelivered))
        except asyncio.QueueFull:
            log.warning("NSI callbacks to %s: %d are waiting; %s dropped", reply_to, CALLBACK_BACKLOG, operation)

    async def _sender(self, reply_to: str, queue: asyncio.Queue[tuple[str, bytes, Callable[[], Any] | None]]) -> None:
        """Post the callbacks queued for `reply_to`, in order."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CALLBACK_TIMEOUT))
        while True:
            operation, envelope, undelivered = await queue.get()
            problem = ""
            for attempt in range(CALLBACK_ATTEMPTS):
                try:
                    async with self._session.post(reply_to, data=envelope, headers={
                            "Content-Type": XML, "SOAPAction": f'"{nsi_soap.ACTION_PREFIX}{operation}"'}) as reply:
                        await reply.read()
                        if reply.status == 200:
                            problem = ""
                            break
                        problem = f"HTTP {reply.status}"
                except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                    problem = str(error) or type(error).__name__
                await asyncio.sleep(0.2 * 2**attempt)  # back off before the next attempt
            if problem:
                log.warning("NSI %s to %s not delivered after %d attempts: %s", operation, reply_to,
                            CALLBACK_ATTEMPTS, problem)
                if undelivered is not None:
                    await undelivered()

    # -- notifications ---------------------------------------------------------------------------

    async def _start(self, _app: web.Application) -> None:
        """Follow the book's events of NSI connections from the start (notifications of connections
        made before a restart included)."""
        self._watcher = asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        follower = self._follower = EventFollower(self.context.worker.hub, lambda e: LABEL in e.reservation.labels,
                                                  "NSI notifications")
        await follower.run(self._notices)

    async def _notices(self, events: list[Any]) -> None:
        """Send the notifications `events` of NSI connections mean."""
        try:
            notices = await self._core(lambda desk: desk.notices(events))
        except TsdnError as error:
            log.warning("NSI notifications of %d events lost: %s", len(events), error)
            return
        for notice in notices:
            self._send_notice(notice)

    def _send_notice(self, notice: CoreNotice) -> None:
        connection = notice.connection
        if not connection.reply_to:
            return
        number = self._notification_ids[connection.id] = self._notification_ids.get(connection.id, 0) + 1
        head = nsi_soap.Notice(connection.id, number, _datetime(notice.time) or self.started)
        if notice.kind == "dataPlaneStateChange":
            body = nsi_soap.data_plane_state_change(head, notice.active, connection.version)
        elif notice.kind == "reserveTimeout":
            body = nsi_soap.reserve_timeout(head, notice.timeout, connection.id, self.nsa)
        else:
            exception = nsi_soap.ServiceException(self.nsa, nsi_soap.INTERNAL_ERROR, notice.text[:1000],
                                                  connection.id)
            body = nsi_soap.error_event(head, notice.event, connection.id, self.nsa, exception)
        header = nsi_soap.Header(nsi_soap.REQUESTER_PROTOCOL, f"urn:uuid:{uuid.uuid4()}", connection.requester_nsa,
                                 self.nsa)
        log.info("NSI %s %s to %s%s", notice.kind, connection.id, connection.requester_nsa,
                 f" ({notice.event}: {notice.text})" if notice.event else "")
        self._send(connection.reply_to, etree.QName(body).localname, nsi_soap.envelope(header, body))

    # -- documents -------------------------------------------------------------------------------

    def _base(self, request: web.Request) -> str:
        return f"{request.scheme}://{request.host}"

    async def _discovery(self, request: web.Request) -> web.Response:
        """The NSA discovery document: this NSA, its CS2 service and its topology."""
        base = self._base(request)
        document = nsi_documents.discovery_document(nsi_documents.Nsa(
            domain=self.context.domain, name=self.context.domain, software_version=SOFTWARE, start_time=self.started,
            provider_url=base + SERVICE_PATH, topology_url=base + self.topology_path))
        return _xml(document, 200)

    async def _topology(self, request: web.Request) -> web.Response:
        """The NML topology: every STP port with the VLANs it offers."""
        return _xml(nsi_documents.topology_document(self.context.domain, stp_ports(self.context.topology),
                                                    self.started), 200)


def stp_ports(topology: Any) -> list[nsi_documents.StpPort]:
    """The STPs of the topology: each own DTN's port and each inter-domain port, with their VLANs."""
    ports = [nsi_documents.StpPort(dtn.name, topology.vlan_range(dtn.name), dtn.nic_speed, None)
             for dtn in topology.spec.dtns if not topology.is_remote(dtn.name)]
    for port in topology.interdomain.values():
        ports.append(nsi_documents.StpPort(port.name, topology.vlan_range(port.name), port.capacity,
                                           port.peer.stp))
    return ports


def _confirmed_reserve(reserve: nsi_soap.Reserve, connection: Connection) -> nsi_soap.Reserve:
    """The reserve as booked: the STPs with the VLANs chosen, the schedule as booked."""
    return nsi_soap.Reserve(connection.id, reserve.global_reservation_id, reserve.description, connection.version,
                            _datetime(connection.start), _datetime(connection.end), reserve.service_type,
                            connection.capacity_mbps, "Bidirectional", True, connection.source, connection.dest)


def _xml(document: bytes, status: int) -> web.Response:
    return web.Response(body=document, status=status, content_type="text/xml", charset="utf-8")
