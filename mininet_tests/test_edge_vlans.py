"""Tagged ends on real Open vSwitch (ring8 in Mininet, os-ken in this process): a VLAN circuit
between dtn1's VLAN 1780 and dtn3's VLAN 1781 (the label design rewrites the tag at each end).

The hosts' kernel has no 802.1Q support (`ip link add ... type vlan` says "Unknown device type"),
so the VLAN ends are userspace ones on raw sockets (`PROBE`): a responder on one host answers
the probes that reach it tagged with its VLAN, tagged with that VLAN, and a sender on the other
counts the answers that come back tagged with its own: a ping between two VLAN interfaces,
of a frame type (0x88b5) that carries no IP at all. The two ends reach each other only while
the reservation is ACTIVE: not before it is installed, not after its release; a third VLAN,
the same at both hosts, and untagged frames never pass. What the switches report of the
circuit (classifiers on a VLAN, label rewrites, fast-failover buckets that rewrite the tag)
reads back as the specs the core wants.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mininet_tests.controlled import DEADLINE
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
PROBES = 10

# `respond IFACE VLAN`: answer each probe arriving tagged VLAN (0: untagged) until 1 s passes without one
# (4 s at most), then print "echoed N seen M" (M: probes seen with any tag or none).
# `send IFACE VLAN DST_MAC`: send PROBES probes tagged VLAN, then print "replies N": answers back tagged VLAN.
# The kernel hands a received tag to a raw socket apart (PACKET_AUXDATA), or leaves it in the frame.
PROBE = r"""
import select, socket, struct, sys, time
mode, iface, vlan = sys.argv[1], sys.argv[2], int(sys.argv[3])
SOL_PACKET, PACKET_AUXDATA, VLAN_VALID, OUTGOING, TYPE = 263, 8, 1 << 4, 4, 0x88B5
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((iface, 0))
s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
mine = s.getsockname()[4]

def send(dst, kind, seq):
    tag = struct.pack("!HH", 0x8100, vlan) if vlan else b""
    s.send(dst + mine + tag + struct.pack("!H", TYPE) + kind + struct.pack("!I", seq) + bytes(40))

def receive(timeout):
    if not select.select([s], [], [], timeout)[0]:
        return None
    data, ancillary, _, address = s.recvmsg(4096, socket.CMSG_SPACE(20))
    if address[2] == OUTGOING:
        return ()
    tag = 0
    for level, kind, value in ancillary:
        if level == SOL_PACKET and kind == PACKET_AUXDATA:
            status, _, _, _, _, tci = struct.unpack_from("IIIHHH", value)
            tag = tci & 0xFFF if status & VLAN_VALID else 0
    if data[12:14] == b"\x81\x00":
        tag, data = struct.unpack("!H", data[14:16])[0] & 0xFFF, data[:12] + data[16:]
    if data[12:14] != struct.pack("!H", TYPE):
        return ()
    return data[6:12], tag, data[14:18], struct.unpack("!I", data[18:22])[0]

if mode == "respond":
    print("ready", flush=True)
    echoed = seen = 0
    end, quiet = time.monotonic() + 4, None
    while time.monotonic() < (quiet or end):
        got = receive(0.1)
        if got and got[2] == b"PING":
            seen += 1
            quiet = time.monotonic() + 1
            if got[1] == vlan:
                send(got[0], b"PONG", got[3])
                echoed += 1
    print("echoed", echoed, "seen", seen)
else:
    for seq in range(int(sys.argv[5])):
        send(bytes.fromhex(sys.argv[4].replace(":", "")), b"PING", seq)
        time.sleep(0.02)
    replies, end = set(), time.monotonic() + 1.5
    while time.monotonic() < end:
        got = receive(0.1)
        if got and got[2] == b"PONG" and got[1] == vlan:
            replies.add(got[3])
    print("replies", len(replies))
"""


def exchange(net, sender: str, sender_vlan: int, responder: str, responder_vlan: int) -> tuple[int, int]:
    """(answers `sender` got back on its VLAN, probes `responder` saw at all): `sender` probes
    `responder` from VLAN `sender_vlan`; `responder` answers those reaching it on `responder_vlan`."""
    listener = net.host(responder).popen([sys.executable, "-c", PROBE, "respond", net.host_intf(responder),
                                          str(responder_vlan)], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout.readline().strip() == "ready"
        probe = net.host(sender).popen([sys.executable, "-c", PROBE, "send", net.host_intf(sender), str(sender_vlan),
                                        net.host(responder).MAC(), str(PROBES)],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = probe.communicate(timeout=30)
        assert probe.returncode == 0, err
        heard = listener.communicate(timeout=30)[0].split()
    finally:
        if listener.poll() is None:
            listener.kill()
    return int(out.split()[-1]), int(heard[-1])


def both_ways(net) -> tuple[int, int]:
    """Answers dtn1 (VLAN 1780) gets from dtn3 (VLAN 1781), and dtn3 from dtn1."""
    return (exchange(net, "dtn1", SRC_VLAN, "dtn3", DST_VLAN)[0], exchange(net, "dtn3", DST_VLAN, "dtn1", SRC_VLAN)[0])


def apply(fab, book: ReservationBook) -> None:
    """Apply every queued change on the switches (paths first, as queued) and report the confirmed ones."""
    for change in book.take_changes():
        assert fab.apply(change.steps) is None, change.reservation_id
        if change.confirm:
            book.provisioned(change.reservation_id, None, change.token)


@pytest.mark.parametrize("protect", [False, True])
def test_a_vlan_circuit_carries_its_vlans_only_while_active(fabric, ring8, tmp_path, protect):
    fab, net = fabric
    assert both_ways(net) == (0, 0), "the circuit's VLANs passed before any reservation"

    clock = FakeClock(time.time())
    ledger = Ledger(ring8.capacities(), tmp_path / "vlans.db", clock)
    book = ReservationBook(ring8, ledger, clock, provisioning=True)
    made = book.create(ADMIN, PathRequest("dtn1", "dtn3", 1 * G, clock.now(), clock.now() + 3600, protect=protect,
                                          src_vlan=SRC_VLAN, dst_vlan=DST_VLAN))
    assert book.get(ADMIN, made.name).state is State.PROVISIONING
    assert both_ways(net) == (0, 0), "the circuit passed before its flows were installed"
    apply(fab, book)
    assert book.get(ADMIN, made.name).state is State.ACTIVE
    wait_for(lambda: both_ways(net) == (PROBES, PROBES), "dtn1 VLAN 1780 and dtn3 VLAN 1781 to reach each other",
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
    assert both_ways(net) == (0, 0), "the circuit still passed after its release"
    ledger.close()
