"""The WAN segments tsdn requests over NSI (docs/nsi.md): an adapter that runs the core's
`SegmentDesk` decisions against the neighbouring domains' NSAs (`nsi_requester.NsiPeer`).

It follows the book's events of reservations with a remote end. A new one (a local hold) gets its
remote segment reserved, committed and provisioned at the neighbour, then its hold committed; a
refusal, a fault or a callback that does not come in time fails the reservation with the
neighbour named, and whatever the neighbour holds is aborted or terminated. A reservation that
ends has its remote segment released and terminated. Notifications from a neighbour
(errorEvent, dataPlaneStateChange to inactive, reserveTimeout) about a booked segment re-home it
when the core finds another inter-domain port to the remote DTN (a new remote segment from that
port, then the local segment moved onto it, then the failed connection terminated); otherwise,
or when the new segment is refused, they fail the reservation they concern.

Each segment runs in its own task; the core is called only through `worker.call_async`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import ssl
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from sdn_app.core.errors import TsdnError, Unavailable
from sdn_app.core.nsi_segments import SEGMENT_LABEL, Segment, SegmentDesk
from sdn_app.web.api import ApiContext, EventFollower
from sdn_app.web.nsi_requester import (
    Callback,
    CallbackReceiver,
    DataPlaneStateChange,
    ErrorEvent,
    NsiError,
    NsiPeer,
    NsiTimeout,
    ReserveTimeout,
)

log = logging.getLogger("tsdn.nsi.segments")
T = TypeVar("T")
CORE_TIMEOUT = 30.0
START_SLACK = 5.0  # seconds: a window starting sooner is asked at the neighbour from now


class SegmentFailed(Exception):
    """A remote segment was refused, failed or not confirmed in time: why, and the neighbour's
    connection id once it gave one (to abort or terminate)."""

    def __init__(self, reason: str, connection_id: str):
        super().__init__(reason)
        self.reason = reason
        self.connection_id = connection_id


def _datetime(seconds: float) -> datetime.datetime | None:
    if seconds == float("inf"):
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


class SegmentRunner:
    """Books, watches and ends the remote segments of this controller's reservations, as requester
    `requester_nsa` whose callbacks arrive at `reply_to` (served by `receiver`)."""

    def __init__(self, context: ApiContext, receiver: CallbackReceiver, requester_nsa: str, reply_to: str,
                 callback_timeout: float = 60.0, ssl_context: ssl.SSLContext | None = None):
        self.context = context
        self.receiver = receiver
        self.requester_nsa = requester_nsa
        self.reply_to = reply_to
        self.callback_timeout = callback_timeout
        self.ssl_context = ssl_context
        self._desk: SegmentDesk | None = None
        self._peers: dict[str, NsiPeer] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watcher: asyncio.Task[None] | None = None
        self._follower: EventFollower | None = None

    async def start(self, _app: web.Application | None = None) -> None:
        """Finish what a previous run left under way, then follow the book's events."""
        # subscribed before anything else may run: a reservation made while the leftovers are looked at
        # must not be missed (it would stay HELD, its segment never asked for, until its hold expires)
        self._follower = EventFollower(self.context.worker.hub, lambda e: SEGMENT_LABEL in e.reservation.labels,
                                       "NSI segments")
        self._watcher = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop following events and every segment task; close the peers."""
        if self._follower is not None:
            self._follower.close()
        tasks = [t for t in (self._watcher, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for peer in self._peers.values():
            await peer.close()

    async def _core(self, fn: Callable[[SegmentDesk], T]) -> T:
        worker = self.context.worker

        def job() -> T:
            if self._desk is None:
                self._desk = SegmentDesk(worker.book)
            return fn(self._desk)
        if not worker.running:
            raise Unavailable("the controller is stopping")
        return await worker.call_async(job, timeout=CORE_TIMEOUT)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _peer(self, segment: Segment) -> NsiPeer:
        peer = self._peers.get(segment.peer_nsa)
        if peer is None:
            if not segment.peer_url:
                raise NsiError(f"the topology gives no NSI service URL (peer.url) for {segment.peer_nsa} at "
                               f"inter-domain port {segment.interdomain}", segment.peer_nsa)
            peer = self._peers[segment.peer_nsa] = NsiPeer(
                segment.peer_nsa, segment.peer_url, self.requester_nsa, self.reply_to, self.receiver,
                notify=self._notified, ssl_context=self.ssl_context, callback_timeout=self.callback_timeout)
        return peer

    # -- following the book --------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            for segment in await self._core(lambda desk: desk.unfinished()):
                self._spawn(self._undo(segment, "the controller restarted while its NSI segment was being booked"))
            for segment in await self._core(lambda desk: [s for s in desk.segments() if s.phase == "releasing"]):
                self._spawn(self._end(segment))
        except TsdnError as error:
            log.warning("NSI segments left from before the start not finished: %s", error)
        assert self._follower is not None
        await self._follower.run(self._react)

    async def _react(self, events: list[Any]) -> None:
        """Start booking the segments of new holds; end those whose reservation ended."""
        try:
            starting, ending = await self._core(lambda desk: desk.react(events))
        except TsdnError as error:
            log.warning("NSI segments: %d events not handled: %s", len(events), error)
            return
        for segment in starting:
            self._spawn(self._book(segment))
        for segment in ending:
            self._spawn(self._end(segment))

    # -- one segment -----------------------------------------------------------------------------

    async def _remote_segment(self, segment: Segment, phases: tuple[str, str, str]) -> str:
        """Reserve, commit and (when the reservation wants flows) provision `segment` at its neighbour,
        recording `phases` (reserving, committing, provisioning) as it goes: the neighbour's
        connection id. `SegmentFailed` says why not, with the connection id once the neighbour gave one."""
        reserving, committing, provisioning = phases
        known = ""
        try:
            peer = self._peer(segment)

            async def held(cid: str) -> None:
                # recorded before the confirmation: a restart in between still knows what to terminate
                nonlocal known
                known = cid
                await self._core(lambda desk: desk.advance(segment.reservation, reserving, cid))
            # a window that runs already is asked from now: providers refuse a start time in the past
            # (OpenNSA: "Start time in the past"), and the reservation's start is by the time it gets there
            start = _datetime(segment.start) if segment.start > self.context.clock.now() + START_SLACK else None
            confirmed = await peer.reserve(segment.source_stp, segment.dest_stp, segment.capacity_mbps,
                                           _datetime(segment.end), start, on_reply=held,
                                           description=f"tsdn {segment.reservation} via {segment.interdomain}")
            known = confirmed.connection_id
            log.info("NSI segment %s held at %s for %s: %s -> %s", known, segment.peer_nsa, segment.reservation,
                     segment.source_stp, segment.dest_stp)
            await self._core(lambda desk: desk.advance(segment.reservation, committing, known))
            await peer.commit(known)
            if segment.provision:
                await self._core(lambda desk: desk.advance(segment.reservation, provisioning))
                await peer.provision(known)
            return known
        except NsiError as error:
            if isinstance(error, NsiTimeout) and error.connection_id:
                known = error.connection_id
            raise SegmentFailed(f"NSI segment at {error.nsa}: {error}", known) from error

    async def _book(self, segment: Segment) -> None:
        """Book the remote segment, then commit the local hold; undo both on any failure."""
        connection_id = ""
        try:
            connection_id = await self._remote_segment(segment, ("reserving", "committing", "provisioning"))
            await self._core(lambda desk: desk.commit_local(segment.reservation))
            log.info("NSI segment %s at %s committed%s with %s", connection_id, segment.peer_nsa,
                     " and provisioned" if segment.provision else "", segment.reservation)
        except SegmentFailed as failed:
            await self._undo(segment, failed.reason, failed.connection_id)
        except TsdnError as error:  # the local hold could not be committed (expired, released meanwhile)
            await self._undo(segment, f"local hold not committed: {error}", connection_id)

    async def _rehome(self, segment: Segment) -> None:
        """Book the re-homed remote segment (from the new port's STP), move the local segment onto it,
        then terminate the connection it replaces; a refusal, a fault or a missing callback fails the
        reservation naming both connections."""
        connection_id = ""
        try:
            connection_id = await self._remote_segment(segment, ("rehoming", "rehoming", "rehoming"))
            await self._core(lambda desk: desk.rehome_local(segment.reservation))
        except SegmentFailed as failed:
            await self._undo(segment, f"{segment.detail}; the new {failed.reason}",
                             failed.connection_id)
            return
        except TsdnError as error:  # the local segment could not be moved (VLAN taken meanwhile, released)
            await self._undo(segment, f"{segment.detail}; the local segment was not moved: {error}", connection_id)
            return
        log.info("NSI segment of %s re-homed to %s through %s", segment.reservation, connection_id,
                 segment.interdomain)
        if segment.replaces:
            await self._terminate(segment, segment.replaces)
            with contextlib.suppress(TsdnError):
                await self._core(lambda desk: desk.replaced(segment.reservation))

    async def _undo(self, segment: Segment, reason: str, connection_id: str = "") -> None:
        """Fail the local reservation with `reason`; abort or terminate whatever the neighbour holds
        (and the connection a re-homed segment replaces)."""
        connection_id = connection_id or segment.connection_id
        log.warning("NSI segment of %s failed: %s", segment.reservation, reason)
        with contextlib.suppress(TsdnError):
            await self._core(lambda desk: desk.fail(segment.reservation, reason))
        for cid in dict.fromkeys(c for c in (connection_id, segment.replaces) if c):
            await self._terminate(segment, cid)
        with contextlib.suppress(TsdnError):
            await self._core(lambda desk: desk.forget(segment.reservation))

    async def _end(self, segment: Segment) -> None:
        """The local reservation ended: release and terminate the remote segment (and the
        connection a re-homed segment replaces)."""
        for cid in dict.fromkeys(c for c in (segment.connection_id, segment.replaces) if c):
            await self._terminate(segment, cid)
        with contextlib.suppress(TsdnError):
            await self._core(lambda desk: desk.forget(segment.reservation))

    async def _terminate(self, segment: Segment, connection_id: str) -> None:
        try:
            peer = self._peer(segment)
        except NsiError:
            return
        with contextlib.suppress(NsiError):
            await peer.release(connection_id)  # refused when it was never provisioned: terminate anyway
        try:
            await peer.terminate(connection_id)
            log.info("NSI segment %s at %s terminated (%s)", connection_id, segment.peer_nsa, segment.reservation)
        except NsiError as error:
            log.warning("NSI segment %s at %s not terminated: %s; it ends with its schedule there",
                        connection_id, segment.peer_nsa, error)

    # -- the neighbours' notifications -----------------------------------------------------------

    def _notified(self, callback: Callback) -> None:
        """A callback nobody waited for: the notifications that fail a reservation."""
        if isinstance(callback, ErrorEvent):
            kind, text = f"errorEvent {callback.event}", callback.error.text if callback.error else ""
        elif isinstance(callback, DataPlaneStateChange) and not callback.active:
            kind, text = "dataPlaneStateChange: the data plane went down", ""
        elif isinstance(callback, ReserveTimeout):
            kind, text = f"reserveTimeout after {callback.timeout_seconds} s", ""
        else:
            return
        self._spawn(self._remote_trouble(callback.provider_nsa, callback.connection_id, kind, text))

    async def _remote_trouble(self, nsa: str, connection_id: str, kind: str, text: str) -> None:
        try:
            segment = await self._core(lambda desk: desk.remote_notice(nsa, connection_id, kind, text))
        except TsdnError as error:
            log.warning("NSI %s about %s not handled: %s", kind, connection_id, error)
            return
        said = f"NSI {kind} from {nsa} about {connection_id}" + (f": {text}" if text else "")
        if segment is None:  # not a live segment of ours (e.g. the data plane going down after our release)
            log.info("%s: no live segment of ours is affected", said)
        elif segment.phase == "rehoming":
            log.warning("%s: re-homing %s through %s", said, segment.reservation, segment.interdomain)
            await self._rehome(segment)
        else:
            log.warning("%s: %s failed", said, segment.reservation)
            await self._end(segment)
