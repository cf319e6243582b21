"""Tagged ends on real Open vSwitch (ring8 in Mininet, os-ken in this process): a VLAN circuit
between dtn1's VLAN 1780 and dtn3's VLAN 1781 (the label design rewrites the tag at each end).

The VLAN ends are userspace ones on raw sockets (mininet_tests/vlan_probes.py: the hosts' kernel
has no 802.1Q), a ping between two VLAN interfaces. The two ends reach each other only while
the reservation is ACTIVE: not before it is installed, not after its release; a third VLAN,
the same at both hosts, and untagged frames never pass. What the switches report of the
circuit (classifiers on a VLAN, label rewrites, fast-failover buckets that rewrite the tag)
reads back as the specs the core wants.
"""

from __future__ import annotations

import time

import pytest

from mininet_tests.controlled import DEADLINE
from mininet_tests.vlan_probes import PROBES, both_ways, exchange
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

from sdn_app.core.clock import FakeClock
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role, State
from sdn_app.core.reservations import ReservationBook

G = 10**9
ADMIN = Principal("test", Role.ADMIN)
SRC_VLAN, DST_VLAN, THIRD = 1780, 1781, 1782
def circuit(net) -> tuple[int, int]:
    """Answers dtn1 (VLAN 1780) gets from dtn3 (VLAN 1781), and dtn3 from dtn1."""
    return both_ways(net, "dtn1", SRC_VLAN, "dtn3", DST_VLAN)


def apply(fab, book: ReservationBook) -> None:
    """Apply every queued change on the switches (paths first, as queued) and report the confirmed ones."""
    for change in book.take_changes():
        assert fab.apply(change.steps) is None, change.reservation_id
        if change.confirm:
            book.provisioned(change.reservation_id, None, change.token)


@pytest.mark.parametrize("protect", [False, True])
def test_a_vlan_circuit_carries_its_vlans_only_while_active(fabric, ring8, tmp_path, protect):
    fab, net = fabric
    assert circuit(net) == (0, 0), "the circuit's VLANs passed before any reservation"

    clock = FakeClock(time.time())
    ledger = Ledger(ring8.capacities(), tmp_path / "vlans.db", clock)
    book = ReservationBook(ring8, ledger, clock, provisioning=True)
    made = book.create(ADMIN, PathRequest("dtn1", "dtn3", 1 * G, clock.now(), clock.now() + 3600, protect=protect,
                                          src_vlan=SRC_VLAN, dst_vlan=DST_VLAN))
    assert book.get(ADMIN, made.name).state is State.PROVISIONING
    assert circuit(net) == (0, 0), "the circuit passed before its flows were installed"
    apply(fab, book)
    assert book.get(ADMIN, made.name).state is State.ACTIVE
    wait_for(lambda: circuit(net) == (PROBES, PROBES), "dtn1 VLAN 1780 and dtn3 VLAN 1781 to reach each other",
             DEADLINE)
    for vlan in (THIRD, 0):  # a VLAN nobody reserved, the same at both ends, and untagged frames: nobody
        assert exchange(net, "dtn1", vlan, "dtn3", vlan) == (0, 0), vlan
        assert exchange(net, "dtn3", vlan, "dtn1", vlan) == (0, 0), vlan
    assert exchange(net, "dtn1", DST_VLAN, "dtn3", DST_VLAN) == (0, 0)  # the far end's VLAN at the near end

    for switch in ring8.switches:  # what Open vSwitch reports decodes to the specs the core wants
        want = book.switch_plan(switch)
        found, unreadable = fab.read(switch)
        assert unreadable == [], switch
        assert set(found.flows) == set(want.flows), switch
        assert set(found.groups) == set(want.groups), switch
        assert fab.reconcile(switch, want).done.steps == (), switch
    assert any(g.retag for s in ("s1", "s3") for g in book.switch_plan(s).groups) == protect

    book.release(ADMIN, made.name)
    apply(fab, book)
    assert circuit(net) == (0, 0), "the circuit still passed after its release"
    ledger.close()
