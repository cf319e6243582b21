"""Count the frames a host interface receives from the cross-traffic hosts, until stdin closes.

    python mininet_tests/sniff.py h8-eth0      # prints "ready", then at the end: "<count> <first frames>"

Run inside a Mininet host (raw socket, root). A frame counts when its source MAC is a cross host's
(02:c5:...) or it is IPv4 from the cross hosts' range (198.18.0.0/15); the kernel's own frames
(an IPv6 router solicitation of the switch-side interface, say) do not.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import sys

CROSS_MAC_PREFIX = bytes.fromhex("02c5")
CROSS_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")


def from_cross_host(frame: bytes) -> bool:
    if frame[6:8] == CROSS_MAC_PREFIX:
        return True
    return len(frame) >= 34 and frame[12:14] == b"\x08\x00" and ipaddress.IPv4Address(frame[26:30]) in CROSS_NETWORK


def main() -> None:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    sock.bind((sys.argv[1], 0))
    print("ready", flush=True)
    count, seen = 0, []
    while True:
        readable, _, _ = select.select([sock, sys.stdin], [], [], 1.0)
        if sys.stdin in readable and not sys.stdin.readline():
            break
        if sock in readable:
            frame, address = sock.recvfrom(65535)
            if address[2] != socket.PACKET_OUTGOING and from_cross_host(frame):
                count += 1
                if len(seen) < 3:
                    seen.append(frame[:42].hex())
    print(count, *seen, flush=True)


if __name__ == "__main__":
    main()
