"""WAN segments (sdn_app.core.nsi_segments and the book's remote ends): a reservation to a DTN
beyond an inter-domain port is a hold tagged with a free VLAN of that port and labelled with the
neighbour's NSA; only the segments' principal commits it; a refusal fails it with nothing booked;
its end asks for the remote connection's termination; a restart finds the unfinished ones. A remote
DTN reached by two inter-domain ports gets the first that can take it, and a failed segment is
re-homed to the other one (frames then leave there with its VLAN) or, with none, fails naming both.
Pure: a FakeClock and a SQLite file, no threads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from sdn_app.core.clock import FakeClock
from sdn_app.core.decisions import Trigger
from sdn_app.core.errors import FailedPrecondition, InvalidArgument, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.nsi_segments import PRINCIPAL, SEGMENT_LABEL, SegmentDesk
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import TopologyError, dump_topology_spec, parse_topology_spec
from tests.flowtable import FlowTables, Packet, dtn_packet, send
from tests.switched import after_grace
from topologies import builtin_topology

G = 10**9
RNP = "urn:ogf:network:rnp.test:nsa"
RUCIO = Principal("rucio", Role.SERVICE)


def ring8_with_a_neighbour_spec(vlans: str = "1780-1781", alternate: str | None = None) -> dict:
    """ring8 with inter-domain port `to-rnp` on s5 (port 4, VLANs `vlans`) and two remote DTNs beyond it;
    with `alternate` (VLANs), a second port `to-rnp-b` on s7 (port 4) to the same NSA that reaches them too."""
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
    if alternate is not None:
        spec["switches"][6]["ports"] = ["1-4"]
        spec["interdomain"].append(
            {"name": "to-rnp-b", "switch": "s7", "port": 4, "capacity": "100G", "vlans": alternate,
             "peer": {"nsa": RNP, "stp": "urn:ogf:network:rnp.test:topology:ring8-b",
                      "url": "http://127.0.0.1:9080/NSI/services/CS2"}})
        for dtn in spec["dtns"][-2:]:
            dtn["also_beyond"] = ["to-rnp-b"]
    return spec


def ring8_with_a_neighbour(folder: Path, vlans: str = "1780-1781", alternate: str | None = None) -> Topology:
    """The topology of `ring8_with_a_neighbour_spec`, loaded from a file in `folder`."""
    path = folder / "ring8-rnp.yaml"
    path.write_text(yaml.safe_dump(ring8_with_a_neighbour_spec(vlans, alternate)))
    return Topology.load(path)


class Segments:
    def __init__(self, folder: Path, vlans: str = "1780-1781", clock: FakeClock | None = None,
                 alternate: str | None = None):
        self.folder = folder
        self.vlans = vlans
        self.alternate = alternate
        self.topology = ring8_with_a_neighbour(folder, vlans, alternate)
        self.clock = clock or FakeClock()
        self.ledger = Ledger(self.topology.capacities(), folder / "ledger.db", self.clock)
        self.book = ReservationBook(self.topology, self.ledger, self.clock, provisioning=True)
        self.desk = SegmentDesk(self.book)

    def request(self, dst: str = "saopaulo-dtn1", src: str = "dtn1", bandwidth: int = 10 * G) -> PathRequest:
        now = self.clock.now()
        return PathRequest(src, dst, bandwidth, now, now + 3600)

    def port_free(self, direction: str = "s5:4->to-rnp") -> int:
        now = self.clock.now()
        return self.ledger.free(direction, now, now + 1)

    def reopen(self) -> Segments:
        self.ledger.close()
        return Segments(self.folder, self.vlans, self.clock, self.alternate)


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


# -- more inter-domain ports to one remote site: the choice at admission and re-homing -----------

def wired_to_the_remote_site(topology: Topology) -> FlowTables:
    """Simulated flow tables in which both inter-domain ports (s5:4, s7:4) lead to saopaulo-dtn1: a frame
    leaving there is seen as "sent to dtn saopaulo-dtn1 still labelled <VLAN>" (the tag the WAN carries)."""
    tables = FlowTables(topology)
    tables.wiring[("s5", 4)] = tables.wiring[("s7", 4)] = ("dtn", "saopaulo-dtn1")
    return tables


def apply(segments: Segments, tables: FlowTables) -> None:
    """Apply the book's queued changes to `tables`, each confirmed one reported done."""
    for change in segments.book.take_changes():
        tables.apply_all(change.steps)
        if change.confirm:
            segments.book.provisioned(change.reservation_id, None, change.token)


def booked(segments: Segments, reservation_id: str, connection_id: str = "OP-1") -> None:
    """The segment of `reservation_id` confirmed by the neighbour as `connection_id`, the hold committed."""
    segments.desk.react(segments.book.take_events())
    segments.desk.advance(reservation_id, "committing", connection_id)
    segments.desk.commit_local(reservation_id)


def from_the_wan(topology: Topology, vlan: int) -> Packet:
    """A frame from saopaulo-dtn1 to dtn1 as the WAN hands it over, tagged `vlan`."""
    return replace(dtn_packet(topology, "saopaulo-dtn1", "dtn1"), vlan=vlan)


@pytest.fixture
def two_ports(tmp_path: Path) -> Segments:
    """saopaulo-dtn1 and -dtn2 beyond to-rnp (s5:4, VLAN 1780 only) and also to-rnp-b (s7:4, VLANs 1790-1791)."""
    return Segments(tmp_path, vlans="1780-1780", alternate="1790-1791")


def test_admission_takes_the_next_port_when_the_first_has_no_vlan_left(two_ports: Segments) -> None:
    first = two_ports.book.create(RUCIO, two_ports.request("saopaulo-dtn1"))
    second = two_ports.book.create(RUCIO, two_ports.request("saopaulo-dtn2", src="dtn2"))
    assert (first.request.via, first.request.dst_vlan) == ("to-rnp", 1780)
    assert (second.request.via, second.request.dst_vlan) == ("to-rnp-b", 1790)
    assert second.route.primary.directions[-1].id == "s7:4->to-rnp-b"
    assert two_ports.port_free("s7:4->to-rnp-b") == 90 * G and two_ports.port_free() == 90 * G
    starting, _ = two_ports.desk.react(two_ports.book.take_events())
    by_id = {s.reservation: s for s in starting}
    assert by_id[second.id].interdomain == "to-rnp-b"
    assert by_id[second.id].source_stp == "urn:ogf:network:rnp.test:topology:ring8-b?vlan=1790"
    assert by_id[second.id].dest_stp == "urn:ogf:network:rnp.test:topology:saopaulo?vlan=1790"
    two_ports.book.create(RUCIO, two_ports.request("saopaulo-dtn1", src="dtn3"))
    with pytest.raises(NoCapacity, match="every VLAN 1780-1780 of inter-domain port to-rnp towards"):
        two_ports.book.create(RUCIO, two_ports.request("saopaulo-dtn2", src="dtn4"))  # the first port's reason
    again = two_ports.reopen()  # the port in use is kept
    assert again.book.get(PRINCIPAL, second.id).request.via == "to-rnp-b"


def test_admission_takes_the_next_port_when_the_first_cannot_be_reached(two_ports: Segments) -> None:
    two_ports.book.set_link_state("s4-s5", up=False)
    two_ports.book.set_link_state("s5-s6", up=False)  # s5, and its port to-rnp, cut off
    reservation = two_ports.book.create(RUCIO, two_ports.request())
    assert (reservation.request.via, reservation.request.dst_vlan) == ("to-rnp-b", 1790)
    assert reservation.route.primary.switches == ("s1", "s8", "s7")


def test_via_must_be_a_port_of_the_remote_dtn(two_ports: Segments) -> None:
    request = replace(two_ports.request(), via="to-nowhere")
    with pytest.raises(InvalidArgument, match="via: 'to-nowhere' is not an interdomain port that reaches "
                                              "saopaulo-dtn1 \\(its ports: to-rnp, to-rnp-b\\)"):
        two_ports.book.create(RUCIO, request)
    with pytest.raises(InvalidArgument, match="via: 'to-rnp' names an interdomain port, but neither dtn1 nor dtn3"):
        two_ports.book.create(RUCIO, replace(two_ports.request("dtn3"), via="to-rnp"))
    chosen = two_ports.book.create(RUCIO, replace(two_ports.request(), via="to-rnp-b"))
    assert (chosen.request.via, chosen.request.dst_vlan) == ("to-rnp-b", 1790)


def test_a_failed_segment_is_re_homed_to_the_other_port_and_frames_leave_there_with_its_vlan(
        two_ports: Segments) -> None:
    tables = wired_to_the_remote_site(two_ports.topology)
    reservation = two_ports.book.create(RUCIO, two_ports.request())
    booked(two_ports, reservation.id)
    apply(two_ports, tables)
    assert two_ports.book.get(RUCIO, reservation.id).state is State.ACTIVE
    assert send(tables, "dtn1", "saopaulo-dtn1").reason == "s5: sent to dtn saopaulo-dtn1 still labelled 1780"

    segment = two_ports.desk.remote_notice(RNP, "OP-1", "errorEvent forcedEnd", "maintenance")
    assert segment is not None and segment.phase == "rehoming" and segment.replaces == "OP-1"
    assert (segment.interdomain, segment.vlan, segment.connection_id) == ("to-rnp-b", 1790, "")
    assert segment.source_stp == "urn:ogf:network:rnp.test:topology:ring8-b?vlan=1790"
    degraded = two_ports.book.get(RUCIO, reservation.id)
    assert degraded.state is State.DEGRADED
    assert degraded.reason == (f"NSI segment OP-1 at {RNP}: errorEvent forcedEnd: maintenance; re-homing to "
                               "inter-domain port to-rnp-b (VLAN 1790)")
    assert two_ports.desk.unfinished() == [segment]  # a restart now would end both connections
    two_ports.book.links.retry_degraded(Trigger(text="capacity came back"))  # no route back to the failed port
    assert two_ports.book.get(RUCIO, reservation.id).state is State.DEGRADED

    two_ports.desk.advance(reservation.id, "rehoming", "OP-2")  # the neighbour booked the new segment
    moving = two_ports.desk.rehome_local(reservation.id)
    assert moving.id == reservation.id and moving.state is State.MOVING
    assert (moving.request.via, moving.request.dst_vlan) == ("to-rnp-b", 1790)
    apply(two_ports, tables)
    active = two_ports.book.get(RUCIO, reservation.id)
    assert active.state is State.ACTIVE
    assert f"(WAN segment OP-2 at {RNP} via to-rnp-b, VLAN 1790)" in active.reason
    trace = send(tables, "dtn1", "saopaulo-dtn1")
    assert trace.reason == "s7: sent to dtn saopaulo-dtn1 still labelled 1790" and trace.switches == ("s1", "s8", "s7")
    back = tables.trace(from_the_wan(two_ports.topology, 1790), "s7", 4)
    assert (back.outcome, back.dtn) == ("delivered", "dtn1")
    after_grace(SimpleNamespace(book=two_ports.book, clock=two_ports.clock, tables=tables))
    assert tables.trace(from_the_wan(two_ports.topology, 1780), "s5", 4).outcome == "dropped"
    assert two_ports.port_free() == 100 * G and two_ports.port_free("s7:4->to-rnp-b") == 90 * G
    kept = two_ports.desk.get(reservation.id)
    assert (kept.phase, kept.connection_id, kept.interdomain, kept.replaces) == ("active", "OP-2", "to-rnp-b", "OP-1")
    two_ports.desk.replaced(reservation.id)
    assert two_ports.desk.get(reservation.id).replaces == ""
    assert two_ports.desk.remote_notice(RNP, "OP-1", "dataPlaneStateChange", "") is None  # the old one is gone


def test_a_failed_segment_with_no_free_vlan_at_the_other_port_fails_naming_both(two_ports: Segments) -> None:
    reservation = two_ports.book.create(RUCIO, two_ports.request())
    booked(two_ports, reservation.id)
    for src, dst in (("dtn2", "saopaulo-dtn2"), ("dtn3", "saopaulo-dtn1")):  # to-rnp-b's 1790 and 1791
        assert two_ports.book.create(RUCIO, two_ports.request(dst, src=src)).request.via == "to-rnp-b"
    segment = two_ports.desk.remote_notice(RNP, "OP-1", "errorEvent dataplaneError", "fibre cut")
    assert segment is not None and segment.phase == "releasing" and segment.connection_id == "OP-1"
    failed = two_ports.book.get(RUCIO, reservation.id)
    assert failed.state is State.FAILED
    assert failed.reason == (f"NSI segment OP-1 at {RNP}: errorEvent dataplaneError: fibre cut; no other "
                             "inter-domain port could take it: saopaulo-dtn1: every VLAN 1790-1791 of inter-domain "
                             f"port to-rnp-b towards {RNP} is taken in that window")
    assert two_ports.port_free() == 100 * G


def test_a_re_homed_segment_the_neighbour_refuses_fails_the_reservation_and_ends_both(two_ports: Segments) -> None:
    reservation = two_ports.book.create(RUCIO, two_ports.request())
    booked(two_ports, reservation.id)
    two_ports.desk.remote_notice(RNP, "OP-1", "reserveTimeout after 120 s", "")
    two_ports.desk.fail(reservation.id, "refused")
    failed = two_ports.book.get(RUCIO, reservation.id)
    assert failed.state is State.FAILED and failed.reason == "refused"
    assert two_ports.desk.get(reservation.id).phase == "releasing"  # OP-1 is still to terminate
    assert two_ports.port_free() == 100 * G and two_ports.port_free("s7:4->to-rnp-b") == 100 * G
    two_ports.desk.forget(reservation.id)
    assert two_ports.desk.get(reservation.id).replaces == ""


@pytest.mark.parametrize(("change", "says"), [
    (lambda spec: spec["dtns"][-1].update(also_beyond=["to-mars"]),
     "dtns[9].also_beyond[0]: no interdomain port named 'to-mars'"),
    (lambda spec: spec["dtns"][-1].update(also_beyond=["to-rnp"]),
     "dtns[9].also_beyond[0]: interdomain port to-rnp is already named in beyond"),
    (lambda spec: spec["interdomain"][1]["peer"].update(nsa="urn:ogf:network:esnet.test:nsa"),
     "dtns[8].also_beyond[0]: interdomain port to-rnp-b leads to urn:ogf:network:esnet.test:nsa, not to "
     f"{RNP} where beyond to-rnp leads"),
    (lambda spec: spec["dtns"][0].update(also_beyond=["to-rnp-b"]),
     "dtns[0].also_beyond: only a remote DTN (one with beyond) has more interdomain ports"),
], ids=["unknown", "repeats-beyond", "another-nsa", "own-dtn"])
def test_bad_also_beyond_is_refused_naming_the_file_and_field(tmp_path: Path, change, says: str) -> None:
    spec = ring8_with_a_neighbour_spec("1780-1781", alternate="1790-1791")
    change(spec)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(TopologyError) as refused:
        Topology.load(path)
    assert f"{path}: {says}" in str(refused.value)


def test_also_beyond_round_trips_through_the_file_format(tmp_path: Path) -> None:
    topology = ring8_with_a_neighbour(tmp_path, alternate="1790-1791")
    assert topology.remote_ports("saopaulo-dtn1") == ("to-rnp", "to-rnp-b")
    assert topology.endpoint("saopaulo-dtn1", "to-rnp-b") == ("s7", 4) == topology.endpoint("to-rnp-b")
    assert topology.vlan_range("saopaulo-dtn1", "to-rnp-b") == (1790, 1791)
    text = dump_topology_spec(topology.spec)
    assert "also_beyond: [to-rnp-b]" in text and text.count("also_beyond") == 2
    assert parse_topology_spec(yaml.safe_load(text), "again") == topology.spec
