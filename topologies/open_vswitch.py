"""Open vSwitch on this machine, as the emulation needs it: running in userspace, and with a packet
socket big enough for every emulated switch.

The userspace datapath sends every packet of every port of every bridge through one AF_PACKET
socket, whose send buffer is `net.core.wmem_default` when the socket opens (208 KiB by default).
Packets waiting in a port's queue (a link shaped by TCLink and full: a congested link, a DTN
link booked to its last bit) hold that buffer; once they fill it, the socket refuses every
further send, for every port, and Open vSwitch drops them. One congested link then starves flows
that never cross it (seen on sc16: transfers on other links fell from 95% of their booking to
0-20% while tbit-tcp was congested, at every emulation scale). A hardware switch has a buffer per
port. `ensure()` gives the socket `PACKET_SEND_BUFFER` (16 MiB: the deepest queue of a shaped
port, 1000 packets, many of them 9000-byte cross-traffic frames) by raising
`net.core.wmem_default` before Open vSwitch opens it, restarting Open vSwitch when it opened a
smaller one. `problem()` says what is wrong, for the demo and the benchmarks to refuse to run
with a datapath that would blame the network for what the socket drops.

    python -m topologies.open_vswitch    # what scripts/bootstrap.sh runs (root)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
OVS_START = [OVS_CTL, "start", "--system-id=random", "--no-monitor"]
PACKET_SEND_BUFFER = 16 * 1024 * 1024
WMEM_DEFAULT = Path("/proc/sys/net/core/wmem_default")
START_DEADLINE = 30.0
_SEND_SOCKET = re.compile(r'^p_raw\s.*\s\[0\]:\*\s.*"ovs-vswitchd".*\btb(\d+)\b')
FIX = "run scripts/bootstrap.sh as root (it starts Open vSwitch with a packet socket big enough)"


def running() -> bool:
    """Whether ovsdb-server and ovs-vswitchd answer `ovs-vsctl show`."""
    try:
        probe = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, timeout=15)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def send_buffer() -> int | None:
    """The send buffer (bytes) of the packet socket ovs-vswitchd sends through, None while it has
    not opened one (it opens it at its first packet)."""
    listing = subprocess.run(["ss", "-f", "link", "-a", "-m", "-p"], capture_output=True, text=True, timeout=15)
    for line in listing.stdout.splitlines():
        found = _SEND_SOCKET.search(line)
        if found:
            return int(found.group(1))
    return None


def problem() -> str:
    """What keeps the emulation from carrying a congested link as a switch would ("" when nothing)."""
    opened = send_buffer()
    if opened is not None:
        if opened < PACKET_SEND_BUFFER:
            return (f"Open vSwitch's packet socket, which every emulated port sends through, has a send buffer of "
                    f"{opened // 1024} KiB, under the {PACKET_SEND_BUFFER // 1024} KiB a congested link's queue needs "
                    f"(else every other port's packets are dropped): {FIX}")
        return ""
    default = int(WMEM_DEFAULT.read_text())
    if default < PACKET_SEND_BUFFER:
        return (f"net.core.wmem_default is {default} bytes: the packet socket Open vSwitch opens would be smaller "
                f"than the {PACKET_SEND_BUFFER} bytes a congested link's queue needs: {FIX}")
    return ""


def _wait_running() -> None:
    deadline = time.monotonic() + START_DEADLINE
    while not running():
        if time.monotonic() > deadline:
            raise RuntimeError(f"Open vSwitch did not start ({' '.join(OVS_START)})")
        time.sleep(0.2)  # polling interval of a condition with a deadline


def ensure() -> str:
    """As root: `net.core.wmem_default` at least `PACKET_SEND_BUFFER`, Open vSwitch running, and its
    packet socket (if open) that big, restarting it otherwise; what was done, in a line."""
    if os.geteuid() != 0:
        raise PermissionError("Open vSwitch and the kernel's socket defaults need root")
    done = []
    if int(WMEM_DEFAULT.read_text()) < PACKET_SEND_BUFFER:
        WMEM_DEFAULT.write_text(str(PACKET_SEND_BUFFER))
        done.append(f"net.core.wmem_default={PACKET_SEND_BUFFER}")
    if not running():
        subprocess.run(OVS_START, capture_output=True, timeout=120, check=False)
        _wait_running()
        done.append("Open vSwitch started")
    opened = send_buffer()
    if opened is not None and opened < PACKET_SEND_BUFFER:
        subprocess.run([OVS_CTL, "stop"], capture_output=True, timeout=120, check=False)
        subprocess.run(OVS_START, capture_output=True, timeout=120, check=False)
        _wait_running()
        done.append(f"Open vSwitch restarted (its packet socket had {opened // 1024} KiB)")
    return ", ".join(done)


if __name__ == "__main__":
    try:
        said = ensure()
    except (PermissionError, RuntimeError, OSError) as error:
        print(f"open_vswitch: {error}", file=sys.stderr)
        sys.exit(1)
    if said:
        print(f"open_vswitch: {said}", file=sys.stderr)
