"""VLAN ends on raw sockets for the system tests: a ping between two VLAN interfaces, in userspace.

The hosts' kernel has no 802.1Q support (`ip link add ... type vlan` says "Unknown device type"),
so the VLAN ends are userspace ones on raw sockets (`PROBE`): a responder on one host answers
the probes that reach it tagged with its VLAN, tagged with that VLAN, and a sender on the other
counts the answers that come back tagged with its own. The probes are of a frame type (0x88b5)
that carries no IP at all, so nothing but the circuit under test can carry them.

Shared by mininet_tests/test_edge_vlans.py (the core book on os-ken) and mininet_tests/test_nsi.py
(OpenNSA's onsa against a `tsdn controller` process).
"""

from __future__ import annotations

import subprocess
import sys

PROBES = 10  # probes a sender sends per exchange

# `respond IFACE VLAN`: answer each probe arriving tagged VLAN (0: untagged) until 1 s passes without one
# (4 s at most), then print "echoed N seen M" (M: probes seen with any tag or none).
# `send IFACE VLAN DST_MAC COUNT`: send COUNT probes tagged VLAN, then print "replies N": answers back tagged VLAN.
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
    """(answers `sender` got back on its VLAN, probes `responder` saw at all): `sender` sends PROBES probes
    to `responder` from VLAN `sender_vlan` (0: untagged); `responder` answers those reaching it on
    `responder_vlan`."""
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


def both_ways(net, a: str, a_vlan: int, b: str, b_vlan: int) -> tuple[int, int]:
    """Answers `a` (on VLAN `a_vlan`) gets from `b` (on VLAN `b_vlan`), and `b` from `a`."""
    return exchange(net, a, a_vlan, b, b_vlan)[0], exchange(net, b, b_vlan, a, a_vlan)[0]
