"""Which VLANs of a port are free: NSI's STPs (`nsi`) and the edge of a WAN segment (`nsi_segments`)
pick the first VLAN of a range that no live reservation uses at that port in a window."""

from __future__ import annotations

from collections.abc import Iterable

from sdn_app.core.errors import InvalidArgument, NotFound
from sdn_app.core.reservation import Reservation
from sdn_app.core.topology import Topology


def users(topology: Topology, reservations: Iterable[Reservation], port: tuple[str, int], first: int, last: int,
          start: float, end: float) -> dict[int, Reservation]:
    """VLAN -> the live reservation using it at switch port `port` some time in [start, end), for
    the VLANs first..last."""
    used: dict[int, Reservation] = {}
    for reservation in reservations:
        request = reservation.request
        if reservation.state.is_final or request.end <= start or request.start >= end:
            continue
        for name, vlan in ((request.src, request.src_vlan), (request.dst, request.dst_vlan)):
            if vlan is not None and first <= vlan <= last and port_of(topology, name, request.via) == port:
                used.setdefault(vlan, reservation)
    return used


def port_of(topology: Topology, endpoint: str, via: str | None = None) -> tuple[str, int] | None:
    """The switch port of a DTN or inter-domain port, a remote DTN's being that of the inter-domain
    port `via` a request uses (None: its `beyond`); None: no such endpoint."""
    try:
        return topology.endpoint(endpoint, via)
    except (NotFound, InvalidArgument):
        return None
