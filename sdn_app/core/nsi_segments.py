"""WAN segments requested over NSI: tsdn as a requester towards the neighbouring domains' NSAs
(docs/nsi.md). The NSI side is `sdn_app.web.nsi_segments`; this module decides.

A reservation with a remote end (a DTN beyond an inter-domain port, topology `beyond:`) is booked in
two places. The book admits the local segment as a hold with the inter-domain port's VLAN chosen
(`ReservationBook` labels it `SEGMENT_LABEL`: the neighbour's NSA). Then the requester side books
the remote segment, from the neighbour's STP facing that port to the remote DTN's STP, on the
same VLAN, as one two-phase transaction with the local hold:

    remote reserve -> remote reserveCommit -> remote provision (when the reservation wants flows)
    -> local commit (flows go in)  ......................................... phase "active"
    any refusal, fault or missing callback -> remote abort or terminate, local FAILED naming the NSA

Releasing, ending or failing the local reservation releases and terminates the remote one. A
remote errorEvent, a dataPlaneStateChange to inactive, a reserveTimeout or a forced end about the
segment of a booked reservation (phase "active") re-homes it when its remote DTN is reached by
another inter-domain port (topology `also_beyond`) that is up, with a free VLAN and a route with
room: the reservation goes DEGRADED naming the NSA, the failed connection and the new port, a new
remote segment is booked from that port (phase "rehoming"), then the book moves the local segment
onto it (make-before-break) and it is ACTIVE again; the failed connection is terminated. Without
such a port, or when the new segment is refused, the local reservation FAILS with the remote NSA
and its connection named as the cause.

`SegmentDesk` is pure and owned by the core thread like the book; segments are rows of
`nsi_segments` so a restarted controller knows which remote connections to finish.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from sdn_app.core import sense_store as store
from sdn_app.core.errors import FailedPrecondition, NotFound, TsdnError
from sdn_app.core.reservation import Event, Principal, Reservation, Role, State

SEGMENT_LABEL = "tsdn/nsi-peer"  # on a reservation with a remote end: the neighbour NSA booking the rest
PRINCIPAL = Principal("tsdn-nsi-segments", Role.ADMIN)  # who commits and fails reservations for their segments
PHASES = ("reserving", "committing", "provisioning", "active", "rehoming", "releasing", "terminated", "failed")
# the two-phase transaction is under way (the first one, or that of a re-homed segment)
OPEN_PHASES = ("reserving", "committing", "provisioning", "rehoming")


@dataclass(frozen=True)
class Segment:
    """The remote segment of one reservation: where it is asked, what it asks and how far it got."""

    reservation: str
    peer_nsa: str
    peer_url: str
    interdomain: str  # our port towards the neighbour
    source_stp: str  # the neighbour's STP facing our port, with the VLAN
    dest_stp: str  # the remote DTN's STP, with the VLAN
    capacity_mbps: int
    start: float
    end: float
    provision: bool  # the reservation wants flows: the remote segment is provisioned too
    connection_id: str = ""  # the neighbour's
    phase: str = "reserving"
    detail: str = ""
    replaces: str = ""  # re-homing: the neighbour's failed connection, terminated once this one is booked

    @property
    def vlan(self) -> int:
        """The VLAN of the segment at our inter-domain port."""
        return int(self.source_stp.rsplit("=", 1)[-1])

    def row(self) -> dict[str, Any]:
        return {"peer_nsa": self.peer_nsa, "peer_url": self.peer_url, "interdomain": self.interdomain,
                "source_stp": self.source_stp, "dest_stp": self.dest_stp, "capacity_mbps": self.capacity_mbps,
                "start": self.start, "end": store.finite_or_none(self.end), "provision": self.provision,
                "connection_id": self.connection_id, "phase": self.phase, "detail": self.detail,
                **({"replaces": self.replaces} if self.replaces else {})}


def segment_for(reservation: Reservation, topology: Any) -> Segment | None:
    """The remote segment `reservation` needs (None: both ends are ours)."""
    peer = reservation.labels.get(SEGMENT_LABEL)
    if not peer:
        return None
    request = reservation.request
    remote, vlan = ((request.dst, request.dst_vlan) if topology.is_remote(request.dst)
                    else (request.src, request.src_vlan))
    dtn = topology.dtn(remote)
    port = topology.interdomain[topology.via(remote, request.via)]
    capacity = math.ceil(request.bandwidth / 1_000_000)
    return Segment(reservation.id, peer, port.peer.url or "", port.name, f"{port.peer.stp}?vlan={vlan}",
                   f"{dtn.stp}?vlan={vlan}", capacity, request.start, request.end, reservation.provisioned)


class SegmentDesk:
    """Every remote segment of this controller; not thread-safe: the core thread calls it."""

    def __init__(self, book: Any):
        """Load the segments kept in the book's ledger."""
        self.book = book
        self.ledger = book.ledger
        self.ledger.write(store.create_tables)
        self._segments: dict[str, Segment] = {}
        for row in store.load(self.ledger, store.NSI_SEGMENTS):
            self._segments[row.id] = _read(row)

    def segments(self) -> list[Segment]:
        """Every segment kept, oldest first."""
        return list(self._segments.values())

    def get(self, reservation_id: str) -> Segment | None:
        """The segment of `reservation_id` (None: it has none)."""
        return self._segments.get(reservation_id)

    def _save(self, segment: Segment) -> Segment:
        self.ledger.write(lambda db: store.save(db, store.NSI_SEGMENTS, segment.reservation, segment.peer_nsa,
                                                segment.row()))
        self._segments[segment.reservation] = segment
        return segment

    def unfinished(self) -> list[Segment]:
        """Segments a restarted controller must finish: a transaction under way when it stopped."""
        return [s for s in self._segments.values() if s.phase in OPEN_PHASES]

    def react(self, events: Iterable[Event]) -> tuple[list[Segment], list[Segment]]:
        """From the book's `events`: the segments to start booking (new holds with a remote end) and
        those to release and terminate (their reservation ended before they were)."""
        starting, ending = [], []
        for event in events:
            reservation = event.reservation
            if SEGMENT_LABEL not in reservation.labels:
                continue
            known = self._segments.get(reservation.id)
            if event.previous is None and reservation.state is State.HELD and known is None:
                segment = segment_for(reservation, self.book.topology)
                if segment is not None:
                    starting.append(self._save(segment))
            elif reservation.state.is_final and known is not None \
                    and known.phase not in ("terminated", "failed", "releasing"):
                detail = f"local reservation {reservation.state}: {reservation.reason}"
                ending.append(self._save(replace(known, phase="releasing", detail=detail)))
        return starting, ending

    def advance(self, reservation_id: str, phase: str, connection_id: str = "", detail: str = "") -> Segment | None:
        """Record that the segment of `reservation_id` reached `phase` (with the neighbour's
        connection id once known)."""
        found = self._segments.get(reservation_id)
        if found is None:
            return None
        assert phase in PHASES, phase
        return self._save(replace(found, phase=phase, connection_id=connection_id or found.connection_id,
                                  detail=detail or found.detail))

    def commit_local(self, reservation_id: str) -> Reservation:
        """The remote segment is booked (and provisioned when wanted): commit the local hold."""
        segment = self._segments[reservation_id]
        reservation = self.book.commit(PRINCIPAL, reservation_id, note=segment_note(segment))
        self.advance(reservation_id, "active", detail="both segments booked")
        return reservation

    def fail(self, reservation_id: str, reason: str) -> Reservation | None:
        """The remote side refused or failed: the local reservation FAILED with `reason` (nothing of
        it stays booked)."""
        segment = self._segments.get(reservation_id)
        if segment is not None and segment.phase not in ("terminated", "failed"):
            ends = segment.connection_id or segment.replaces
            self._save(replace(segment, phase="releasing" if ends else "failed", detail=reason))
        try:
            return self.book.fail(reservation_id, reason)
        except (NotFound, FailedPrecondition):
            return None

    def remote_notice(self, peer_nsa: str, connection_id: str, kind: str, text: str) -> Segment | None:
        """A notification from a neighbour about one of our remote connections: the segment it
        affects (None: nothing of ours), either re-homing (phase "rehoming": book it at the
        neighbour, then `rehome_local`) or ending (its reservation failed: terminate it).

        A booked segment (phase "active") whose remote DTN another inter-domain port reaches, up
        and with a free VLAN and a route with room, is re-homed there; otherwise the reservation
        FAILS naming the NSA and the connection (and why no other port could take it)."""
        for segment in self._segments.values():
            if segment.peer_nsa == peer_nsa and segment.connection_id == connection_id:
                if segment.phase in ("terminated", "failed", "releasing"):
                    return None
                reason = f"NSI segment {connection_id} at {peer_nsa}: {kind}" + (f": {text}" if text else "")
                if segment.phase == "active":
                    rehomed, why = self._rehome(segment, reason)
                    if rehomed is not None:
                        return rehomed
                    reason += why
                self.fail(segment.reservation, reason)
                return self._segments[segment.reservation]
        return None

    def _rehome(self, segment: Segment, reason: str) -> tuple[Segment | None, str]:
        """Start re-homing `segment` (its connection failed for `reason`) when another port can
        take it: the reservation DEGRADED, the segment's row on the new port (phase "rehoming").
        Else (None, why no other port could take it: empty when the remote DTN has none)."""
        reservation = self.book.get(PRINCIPAL, segment.reservation)
        request = reservation.request
        remote = request.dst if self.book.topology.is_remote(request.dst) else request.src
        if reservation.state.is_final or len(self.book.topology.remote_ports(remote)) < 2:
            return None, ""
        try:
            request = self.book.rehome_choice(reservation.id, segment.interdomain)
        except TsdnError as why:
            return None, f"; no other inter-domain port could take it: {why}"
        target = segment_for(replace(reservation, request=request), self.book.topology)
        assert target is not None
        reason += f"; re-homing to inter-domain port {target.interdomain} (VLAN {target.vlan})"
        self.book.rehoming(reservation.id, segment.interdomain, reason)
        return self._save(replace(target, start=segment.start, connection_id="", phase="rehoming", detail=reason,
                                  replaces=segment.connection_id)), ""

    def rehome_local(self, reservation_id: str) -> Reservation:
        """The re-homed remote segment is booked (and provisioned when wanted): move the local
        segment onto its inter-domain port and VLAN."""
        segment = self._segments[reservation_id]
        reservation = self.book.rehome(reservation_id, segment.interdomain, segment.vlan, segment_note(segment))
        self.advance(reservation_id, "active", detail=f"re-homed through {segment.interdomain}; both segments booked")
        return reservation

    def replaced(self, reservation_id: str) -> None:
        """The connection the re-homed segment replaced is terminated at the neighbour."""
        segment = self._segments.get(reservation_id)
        if segment is not None and segment.replaces:
            self._save(replace(segment, replaces=""))

    def forget(self, reservation_id: str) -> None:
        """The segment is terminated at the neighbour (or never booked there): keep its row as
        terminated for operators."""
        segment = self._segments.get(reservation_id)
        if segment is not None and segment.phase != "terminated":
            self._save(replace(segment, phase="terminated" if segment.connection_id else "failed", replaces=""))


def segment_note(segment: Segment) -> str:
    """How a reservation's reason names its WAN segment: `WAN segment <id> at <NSA> via <port>, VLAN <n>`
    (the map and the demo's report read it back with `SEGMENT_NOTE`)."""
    vlan = segment.source_stp.rsplit("=", 1)[-1]
    return f"WAN segment {segment.connection_id} at {segment.peer_nsa} via {segment.interdomain}, VLAN {vlan}"


SEGMENT_NOTE = re.compile(r"WAN segment (?P<connection>\S+) at (?P<nsa>\S+) via (?P<port>\S+), VLAN (?P<vlan>\d+)")


def _read(row: store.Stored) -> Segment:
    body = row.reader
    return Segment(row.id, body.text("peer_nsa"), body.text("peer_url"), body.text("interdomain"),
                   body.text("source_stp"), body.text("dest_stp"), body.integer("capacity_mbps") or 0,
                   body.number("start") or 0.0, body.open_end("end"), bool(body.flag("provision")),
                   body.text("connection_id"), body.choice("phase", PHASES), body.text("detail"),
                   body.text("replaces") if "replaces" in body.data else "")  # rows from before re-homing lack it
