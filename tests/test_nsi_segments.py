"""WAN segments (sdn_app.core.nsi_segments and the book's remote ends): a reservation to a DTN
beyond an inter-domain port is a hold tagged with a free VLAN of that port and labelled with the
neighbour's NSA; only the segments' principal commits it; a refusal fails it with nothing booked;
its end asks for the remote connection's termination; a restart finds the unfinished ones. Pure:
a FakeClock and a SQLite file, no threads."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.nsi_segments import PRINCIPAL, SEGMENT_LABEL, SegmentDesk
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

G = 10**9
RNP = "urn:ogf:network:rnp.test:nsa"
RUCIO = Principal("rucio", Role.SERVICE)


def ring8_with_a_neighbour(folder: Path, vlans: str = "1780-1781") -> Topology:
    """ring8 with inter-domain port `to-rnp` on s5 (port 4, VLANs `vlans`) and two remote DTNs beyond it."""
    spec = yaml.safe_load(Path(builtin_topology("ring8")).read_text())
    spec["switches"][4]["ports"] = ["1-4"]
    spec["interdomain"] = [{"name": "to-rnp", "switch": "s5", "port": 4, "capacity": "100G", "vlans": vlans,
                            "peer": {"nsa": RNP, "stp": "urn:ogf:network:rnp.test:topology:ring8",
                                     "url": "http://127.0.0.1:9080/NSI/services/CS2"}}]
    spec["dtns"] += [
        {"name": "saopaulo-dtn1", "beyond": "to-rnp", "stp": "urn:ogf:network:rnp.test:topology:saopaulo",
         "ipv4": "10.0.1.1", "mac": "02:00:00:00:01:01", "nic_speed": "100G"},
        {"name": "saopaulo-dtn2", "beyond": "to-rnp", "stp": "urn:ogf:network:rnp.test:topology:saopaulo",
         "ipv4": "10.0.1.2", "mac": "02:00:00:00:01:02", "nic_speed": "100G"}]
    path = folder / "ring8-rnp.yaml"
    path.write_text(yaml.safe_dump(spec))
    return Topology.load(path)


class Segments:
    def __init__(self, folder: Path, vlans: str = "1780-1781", clock: FakeClock | None = None):
        self.folder = folder
        self.vlans = vlans
        self.topology = ring8_with_a_neighbour(folder, vlans)
        self.clock = clock or FakeClock()
        self.ledger = Ledger(self.topology.capacities(), folder / "ledger.db", self.clock)
        self.book = ReservationBook(self.topology, self.ledger, self.clock, provisioning=True)
        self.desk = SegmentDesk(self.book)

    def request(self, dst: str = "saopaulo-dtn1", src: str = "dtn1", bandwidth: int = 10 * G) -> PathRequest:
        now = self.clock.now()
        return PathRequest(src, dst, bandwidth, now, now + 3600)

    def port_free(self) -> int:
        now = self.clock.now()
        return self.ledger.free("s5:4->to-rnp", now, now + 1)

    def reopen(self) -> Segments:
        self.ledger.close()
        return Segments(self.folder, self.vlans, self.clock)


@pytest.fixture
def segments(tmp_path: Path) -> Segments:
    return Segments(tmp_path)


def test_a_reservation_to_a_remote_dtn_is_a_tagged_hold_waiting_for_its_segment(segments: Segments) -> None:
    full = segments.port_free()
    reservation = segments.book.create(RUCIO, segments.request())
    assert reservation.state is State.HELD and "waiting for its WAN segment from " + RNP in reservation.reason
    assert reservation.labels[SEGMENT_LABEL] == RNP
    assert (reservation.request.dst_vlan, reservation.request.src_vlan) == (1780, None)
    assert reservation.provisioned  # it wants flows once both segments are booked
    assert segments.port_free() == full - 10 * G  # the inter-domain port's capacity is booked
    starting, ending = segments.desk.react(segments.book.take_events())
    assert ending == [] and len(starting) == 1
    segment = starting[0]
    assert (segment.peer_nsa, segment.interdomain, segment.capacity_mbps) == (RNP, "to-rnp", 10_000)
    assert segment.source_stp == "urn:ogf:network:rnp.test:topology:ring8?vlan=1780"
    assert segment.dest_stp == "urn:ogf:network:rnp.test:topology:saopaulo?vlan=1780"
    assert segment.peer_url == "http://127.0.0.1:9080/NSI/services/CS2" and segment.phase == "reserving"


def test_only_the_segments_principal_commits_and_then_the_flows_go_in(segments: Segments) -> None:
    reservation = segments.book.create(RUCIO, segments.request())
    segments.desk.react(segments.book.take_events())
    with pytest.raises(FailedPrecondition, match="waits for its WAN segment"):
        segments.book.commit(RUCIO, reservation.id)
    segments.desk.advance(reservation.id, "committing", "OP-0123456789")
    committed = segments.desk.commit_local(reservation.id)
    assert committed.state is State.PROVISIONING
    assert f"(WAN segment OP-0123456789 at {RNP} via to-rnp, VLAN 1780)" in committed.reason
    changes = [c for c in segments.book.take_changes() if c.steps]
    assert changes, "committing the hold installs the local segment's flows"
    assert segments.desk.get(reservation.id).phase == "active"
    assert segments.desk.get(reservation.id).connection_id == "OP-0123456789"


def test_each_reservation_gets_its_own_vlan_and_none_left_is_no_capacity(segments: Segments) -> None:
    first = segments.book.create(RUCIO, segments.request("saopaulo-dtn1"))
    second = segments.book.create(RUCIO, segments.request("saopaulo-dtn2", src="dtn2"))
    assert {first.request.dst_vlan, second.request.dst_vlan} == {1780, 1781}
    booked = segments.port_free()
    with pytest.raises(NoCapacity, match="every VLAN 1780-1781 of inter-domain port to-rnp"):
        segments.book.create(RUCIO, segments.request("saopaulo-dtn1", src="dtn3"))
    assert segments.port_free() == booked


def test_a_vlan_asked_outside_the_ports_range_and_two_remote_ends_are_refused(segments: Segments) -> None:
    request = segments.request()
    with pytest.raises(InvalidArgument, match="dst_vlan: 1900 is outside the VLANs 1780-1781"):
        segments.book.create(RUCIO, PathRequest(request.src, request.dst, G, request.start, request.end,
                                                dst_vlan=1900))
    with pytest.raises(InvalidArgument, match="both beyond inter-domain ports"):
        segments.book.create(RUCIO, segments.request("saopaulo-dtn1", src="saopaulo-dtn2"))
    with pytest.raises(InvalidArgument, match="set by tsdn"):
        segments.book.create(RUCIO, segments.request("dtn3"), labels={SEGMENT_LABEL: "x"})


def test_a_refused_segment_fails_the_reservation_with_nothing_booked(segments: Segments) -> None:
    full = segments.port_free()
    reservation = segments.book.create(RUCIO, segments.request())
    segments.desk.react(segments.book.take_events())
    failed = segments.desk.fail(reservation.id, f"NSI segment at {RNP}: refused reserve (NSI error 00704)")
    assert failed is not None and failed.state is State.FAILED and "00704" in failed.reason
    assert segments.port_free() == full
    assert segments.desk.get(reservation.id).phase == "failed"  # no remote connection to end
    assert segments.desk.react(segments.book.take_events()) == ([], [])


def test_the_end_of_a_reservation_asks_for_its_remote_connection_to_end(segments: Segments) -> None:
    reservation = segments.book.create(RUCIO, segments.request())
    segments.desk.react(segments.book.take_events())
    segments.desk.advance(reservation.id, "committing", "OP-0123456789")
    segments.desk.commit_local(reservation.id)
    segments.book.take_events()
    segments.book.release(RUCIO, reservation.id)
    starting, ending = segments.desk.react(segments.book.take_events())
    assert starting == [] and [s.connection_id for s in ending] == ["OP-0123456789"]
    segments.desk.forget(reservation.id)
    assert segments.desk.get(reservation.id).phase == "terminated"


def test_a_neighbours_error_event_fails_the_reservation_naming_it(segments: Segments) -> None:
    reservation = segments.book.create(RUCIO, segments.request())
    segments.desk.react(segments.book.take_events())
    segments.desk.advance(reservation.id, "committing", "OP-0123456789")
    segments.desk.commit_local(reservation.id)
    assert segments.desk.remote_notice(RNP, "OP-9999999999", "errorEvent dataplaneError", "x") is None
    segment = segments.desk.remote_notice(RNP, "OP-0123456789", "errorEvent forcedEnd", "maintenance")
    assert segment is not None and segment.phase == "releasing"
    failed = segments.book.get(PRINCIPAL, reservation.id)
    assert failed.state is State.FAILED
    assert failed.reason == f"NSI segment OP-0123456789 at {RNP}: errorEvent forcedEnd: maintenance"


def test_a_restart_finds_the_segments_left_under_way(segments: Segments) -> None:
    done = segments.book.create(RUCIO, segments.request("saopaulo-dtn1"))
    open_ = segments.book.create(RUCIO, segments.request("saopaulo-dtn2", src="dtn2"))
    segments.desk.react(segments.book.take_events())
    segments.desk.advance(done.id, "committing", "OP-1")
    segments.desk.commit_local(done.id)
    segments.desk.advance(open_.id, "committing", "OP-2")
    again = segments.reopen()
    assert [(s.reservation, s.connection_id) for s in again.desk.unfinished()] == [(open_.id, "OP-2")]
    assert again.desk.get(done.id).phase == "active"
    assert again.book.get(PRINCIPAL, open_.id).request.dst_vlan == open_.request.dst_vlan


def test_the_api_shows_the_vlan_at_the_inter_domain_port(segments: Segments) -> None:
    from northbound.convert import reservation_out

    message = reservation_out(segments.book.create(RUCIO, segments.request()))
    assert message.HasField("dst_vlan") and message.dst_vlan == 1780 and not message.HasField("src_vlan")
    plain = reservation_out(segments.book.create(RUCIO, segments.request("dtn3")))
    assert not plain.HasField("dst_vlan") and not plain.HasField("src_vlan")
