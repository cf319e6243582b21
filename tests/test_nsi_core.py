"""NSI connections on the reservation book (sdn_app.core.nsi): the reservation, provision and
lifecycle state machines through reserve, commit, abort, timeout, provision, release and terminate;
the STPs and VLANs; what a refusal leaves (nothing); notifications; a restart. Driven without
threads by a FakeClock, on a SQLite file as the controller does."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.nsi import NsiDesk, NsiRefused, ReserveAsk, parse_stp
from sdn_app.core.reservation import Principal, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from topologies import builtin_topology

RING8 = Topology.load(builtin_topology("ring8"))
DOMAIN = "ring8.test"
NET = f"urn:ogf:network:{DOMAIN}:topology"
ONSA = Principal("onsa", Role.SERVICE)
OTHER = Principal("aggregator", Role.SERVICE)
OPERATOR = Principal("noc", Role.ADMIN)
ACCESS = "dtn1->s1:3"


class Desk:
    """A book that controls switches, with the NSI desk over it."""

    def __init__(self, db: Path, clock: FakeClock | None = None, hold_timeout: float = 120.0):
        self.db = db
        self.clock = clock or FakeClock()
        self.hold_timeout = hold_timeout
        self.ledger = Ledger(RING8.capacities(), db, self.clock)
        self.book = ReservationBook(RING8, self.ledger, self.clock, provisioning=True, hold_timeout=hold_timeout)
        self.desk = NsiDesk(self.book, DOMAIN)

    def ask(self, src: str = "dtn1?vlan=1780", dst: str = "dtn3?vlan=1790", mbps: int = 1000,
            correlation: str = "urn:uuid:1", start: float | None = None, end: float | None = None) -> ReserveAsk:
        now = self.clock.now()
        return ReserveAsk("urn:ogf:network:onsa.test:nsa", "http://127.0.0.1:7080/NSI/services/RequesterService2",
                          correlation, "urn:uuid:g1", "Test Connection", f"{NET}:{src}", f"{NET}:{dst}", mbps,
                          start, now + 3600 if end is None else end)

    def free(self) -> int:
        now = self.clock.now()
        return self.ledger.free(ACCESS, now, now + 1)

    def confirm_flows(self) -> None:
        """The switches confirm every change queued so far."""
        for change in self.book.take_changes():
            if change.confirm:
                self.book.provisioned(change.reservation_id, None, change.token)

    def notices(self) -> list[tuple[str, bool, str]]:
        return [(n.kind, n.active, n.event) for n in self.desk.notices(self.book.take_events())]

    def reopen(self) -> Desk:
        self.ledger.close()
        return Desk(self.db, self.clock, self.hold_timeout)


@pytest.fixture
def desk(tmp_path: Path) -> Desk:
    return Desk(tmp_path / "ledger.db")


def states(d: Desk, connection_id: str) -> tuple[str, str, str, bool]:
    s = d.desk.states(d.desk.connection(ONSA, connection_id))
    return s.reservation, s.provision, s.lifecycle, s.active


def test_a_connection_goes_through_the_three_state_machines(desk: Desk) -> None:
    full = desk.free()
    connection = desk.desk.reserve(ONSA, desk.ask())
    assert connection.source == f"{NET}:dtn1?vlan=1780" and connection.dest == f"{NET}:dtn3?vlan=1790"
    assert states(desk, connection.id) == ("ReserveHeld", "Released", "Created", False)
    assert desk.free() == full - 10**9  # held: booked
    desk.desk.commit(ONSA, connection.id)
    assert states(desk, connection.id) == ("ReserveStart", "Released", "Created", False)
    assert not [c for c in desk.book.take_changes() if c.steps]  # committed: no flows before provision
    desk.notices()
    desk.desk.provision(ONSA, connection.id)
    assert states(desk, connection.id)[:2] == ("ReserveStart", "Provisioned")
    desk.confirm_flows()
    assert states(desk, connection.id) == ("ReserveStart", "Provisioned", "Created", True)
    assert desk.notices() == [("dataPlaneStateChange", True, "")]
    desk.desk.release(ONSA, connection.id)
    assert states(desk, connection.id) == ("ReserveStart", "Released", "Created", False)
    assert desk.notices() == [("dataPlaneStateChange", False, "")]
    assert desk.free() == full - 10**9  # released: the booking stays
    desk.desk.terminate(ONSA, connection.id)
    assert states(desk, connection.id) == ("ReserveStart", "Released", "Terminated", False)
    assert desk.free() == full
    assert desk.notices() == []  # a terminate asked for is no error event


def test_abort_frees_the_hold_and_the_connection_can_be_terminated(desk: Desk) -> None:
    full = desk.free()
    connection = desk.desk.reserve(ONSA, desk.ask())
    desk.desk.abort(ONSA, connection.id)
    assert states(desk, connection.id) == ("ReserveStart", "Released", "Created", False)
    assert desk.free() == full
    with pytest.raises(NsiRefused, match="only a ReserveHeld connection can be committed") as refused:
        desk.desk.commit(ONSA, connection.id)
    assert refused.value.error_id == "00201"
    desk.desk.terminate(ONSA, connection.id)
    assert states(desk, connection.id)[2] == "Terminated"


def test_a_hold_not_committed_in_time_times_out_with_a_notification(tmp_path: Path) -> None:
    desk = Desk(tmp_path / "ledger.db", hold_timeout=15)
    full = desk.free()
    connection = desk.desk.reserve(ONSA, desk.ask())
    desk.notices()
    desk.clock.advance(16)
    desk.book.tick()
    assert desk.notices() == [("reserveTimeout", False, "")]
    assert states(desk, connection.id)[0] == "ReserveTimeout"
    assert desk.free() == full
    with pytest.raises(NsiRefused, match="hold timed out") as refused:
        desk.desk.commit(ONSA, connection.id)
    assert refused.value.error_id == "00201"


def test_a_vlan_range_gets_the_first_free_vlan_and_a_taken_vlan_is_refused_naming_its_holder(desk: Desk) -> None:
    first = desk.desk.reserve(ONSA, desk.ask(src="dtn1?vlan=1780", correlation="a"))
    second = desk.desk.reserve(ONSA, desk.ask(src="dtn1?vlan=1780-1782", dst="dtn3?vlan=1791", correlation="b"))
    assert second.source.endswith("dtn1?vlan=1781")
    booked = desk.free()
    with pytest.raises(NsiRefused, match=f"VLAN 1780 is taken at port dtn1 .*NSI connection {first.id}") as refused:
        desk.desk.reserve(ONSA, desk.ask(src="dtn1?vlan=1780", dst="dtn5?vlan=1700", correlation="c"))
    assert refused.value.error_id == "00704"
    assert desk.free() == booked
    desk.desk.abort(ONSA, first.id)  # free again
    third = desk.desk.reserve(ONSA, desk.ask(src="dtn1?vlan=1780", dst="dtn5?vlan=1700", correlation="d"))
    assert third.source.endswith("dtn1?vlan=1780")


@pytest.mark.parametrize(("src", "dst", "error_id", "words"), [
    ("dtn1?vlan=1780", "nowhere?vlan=1790", "00701", "no port 'nowhere'"),
    ("dtn1", "dtn3?vlan=1790", "00709", "has no VLAN"),
    ("dtn1?vlan=5000", "dtn3?vlan=1790", "00709", "VLAN 5000 is not a VLAN id"),
    ("dtn1?vlan=17a0", "dtn3?vlan=1790", "00709", "not an STP"),
    ("dtn1?vlan=1790-1780", "dtn3?vlan=1790", "00709", "not a VLAN id or range"),
    ("dtn1?vlan=1780", "dtn1?vlan=1781", "00102", "hairpin"),
])
def test_bad_stps_are_refused_with_nothing_booked(desk: Desk, src: str, dst: str, error_id: str, words: str) -> None:
    full = desk.free()
    with pytest.raises(NsiRefused, match=words) as refused:
        desk.desk.reserve(ONSA, desk.ask(src=src, dst=dst))
    assert refused.value.error_id == error_id
    assert desk.free() == full and desk.desk.summaries(ONSA) == []


def test_an_stp_of_another_network_is_refused(desk: Desk) -> None:
    ask = desk.ask()
    foreign = ReserveAsk(ask.requester_nsa, ask.reply_to, "x", "", "",
                         "urn:ogf:network:opennsa.test:topology:ps?vlan=1780", ask.dest_stp, 100, None,
                         desk.clock.now() + 60)
    with pytest.raises(NsiRefused, match="not in this network") as refused:
        desk.desk.reserve(ONSA, foreign)
    assert refused.value.error_id == "00701"


def test_capacity_beyond_the_ports_and_schedules_in_the_past_are_refused(desk: Desk) -> None:
    full = desk.free()
    with pytest.raises(NoCapacity):
        desk.desk.reserve(ONSA, desk.ask(mbps=101_000))  # dtn1's port carries 100G
    now = desk.clock.now()
    with pytest.raises(NsiRefused, match=r"startTime .* is in the past"):
        desk.desk.reserve(ONSA, desk.ask(start=now - 3600, end=now + 3600))
    with pytest.raises(NsiRefused, match=r"endTime .* is not after the start"):
        desk.desk.reserve(ONSA, desk.ask(end=now - 10))
    assert desk.free() == full and desk.desk.summaries(ONSA) == []


def test_unknown_and_other_requesters_connections_are_not_found(desk: Desk) -> None:
    connection = desk.desk.reserve(ONSA, desk.ask())
    for principal, cid in ((ONSA, "RI-0000000000"), (OTHER, connection.id)):
        with pytest.raises(NsiRefused, match="no such connection") as refused:
            desk.desk.provision(principal, cid)
        assert refused.value.error_id == "00203"
    assert desk.desk.summaries(OTHER) == []
    assert [s.connection.id for s in desk.desk.summaries(OPERATOR)] == [connection.id]


def test_provision_before_commit_is_an_invalid_transition(desk: Desk) -> None:
    connection = desk.desk.reserve(ONSA, desk.ask())
    with pytest.raises(NsiRefused, match="needs a committed connection") as refused:
        desk.desk.provision(ONSA, connection.id)
    assert refused.value.error_id == "00201"
    assert states(desk, connection.id)[0] == "ReserveHeld"


def test_the_same_reserve_again_returns_the_same_connection(desk: Desk) -> None:
    first = desk.desk.reserve(ONSA, desk.ask(correlation="urn:uuid:same"))
    assert desk.desk.reserve(ONSA, desk.ask(correlation="urn:uuid:same")).id == first.id
    assert len(desk.desk.summaries(ONSA)) == 1


def test_a_release_by_an_operator_is_a_forced_end(desk: Desk) -> None:
    connection = desk.desk.reserve(ONSA, desk.ask())
    desk.desk.commit(ONSA, connection.id)
    desk.desk.provision(ONSA, connection.id)
    desk.confirm_flows()
    desk.notices()
    desk.book.release(OPERATOR, connection.reservation, "maintenance")
    assert desk.notices() == [("dataPlaneStateChange", False, ""), ("errorEvent", False, "forcedEnd")]
    assert states(desk, connection.id)[2] == "Failed"


def test_connections_survive_a_restart(desk: Desk) -> None:
    connection = desk.desk.reserve(ONSA, desk.ask())
    desk.desk.commit(ONSA, connection.id)
    terminated = desk.desk.reserve(ONSA, desk.ask(src="dtn2?vlan=1780", dst="dtn5?vlan=1780", correlation="t"))
    desk.desk.terminate(ONSA, terminated.id)
    again = desk.reopen()
    assert states(again, connection.id) == ("ReserveStart", "Released", "Created", False)
    assert states(again, terminated.id)[2] == "Terminated"
    assert again.book.get(OPERATOR, connection.reservation).request.src_vlan == 1780
    again.desk.provision(ONSA, connection.id)
    again.confirm_flows()
    assert states(again, connection.id)[3] is True


def test_stps_read_as_onsa_writes_them() -> None:
    stp = parse_stp(f"{NET}:dtn1?vlan=1780-1799", "sourceSTP", NET)
    assert (stp.port, stp.vlans) == ("dtn1", (1780, 1799))
    assert stp.urn(1781) == f"{NET}:dtn1?vlan=1781"
    assert parse_stp(f"{NET}:dtn1?vlan=7", "s", NET).vlans == (7, 7)


def test_the_circuit_is_booked_as_a_vlan_circuit_on_the_book(desk: Desk) -> None:
    connection = desk.desk.reserve(ONSA, desk.ask())
    reservation = desk.book.get(OPERATOR, connection.reservation)
    assert (reservation.request.src, reservation.request.src_vlan) == ("dtn1", 1780)
    assert (reservation.request.dst, reservation.request.dst_vlan) == ("dtn3", 1790)
    assert reservation.state is State.HELD and not reservation.provisioned
