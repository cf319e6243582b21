"""tsdn as an NSI provider on real Open vSwitch: OpenNSA's own requester command line `onsa` books a VLAN
circuit between dtn1 (VLAN 1780) and dtn3 (VLAN 1790) from a `tsdn controller` process serving /NSI on its
HTTP side, with ring8 in Mininet under it, and the hosts' tagged frames (mininet_tests/vlan_probes.py)
cross it only while it is provisioned: not while held or committed, not after release or terminate, and
again after a second provision. A third VLAN and untagged frames never cross. A hold onsa never commits
times out (ReserveTimeout) and gives its VLANs back.

onsa comes from OpenNSA's recipe (tests/nsi_peers.py): without it these skip saying why, and fail when CI
is set.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mininet_tests.conftest import ring8_under_controller
from mininet_tests.controlled import DEADLINE, TOKEN
from mininet_tests.vlan_probes import PROBES, both_ways, exchange
from tests.nsi_peers import free_port, onsa, opennsa, opennsa_build  # noqa: F401  (the onsa fixture and its own)
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

DOMAIN = "ring8.test"
NSA = f"urn:ogf:network:{DOMAIN}:nsa"
SRC_VLAN, DST_VLAN, THIRD = 1780, 1790, 1785
SOURCE, DEST = f"{DOMAIN}:topology:dtn1#vlan={SRC_VLAN}", f"{DOMAIN}:topology:dtn3#vlan={DST_VLAN}"
ONSA_TIMEOUT = 180  # seconds; onsa itself gives up on a confirmation after 130 s
HOLD_TIMEOUT = 5  # seconds, the controller's --hold-timeout in the timeout test


class Provider:
    """ring8 in Mininet under a `tsdn controller` process serving NSI for DOMAIN, and `onsa` pointed at it."""

    def __init__(self, net, process, http: str, onsa_command: Path, home: Path):
        self.net, self.process, self.http, self.onsa_command, self.home = net, process, http, onsa_command, home

    def onsa(self, command: str, *args: str) -> str:
        """Run `onsa command args` as the rucio principal (its callbacks on a free port of 127.0.0.1):
        what it printed."""
        line = [str(self.onsa_command), command, "-u", f"http://{self.http}/NSI/services/CS2", "-p", f"{DOMAIN}:nsa",
                "-r", "campus.test:nsa", "-h", "127.0.0.1", "-o", str(free_port()), "-m", f"Bearer {TOKEN}", *args]
        done = subprocess.run(line, capture_output=True, text=True, timeout=ONSA_TIMEOUT, check=False,
                              env={**os.environ, "HOME": str(self.home)})
        return done.stdout + done.stderr

    def reserve_only(self) -> str:
        """`onsa reserveonly` of dtn1 VLAN 1780 to dtn3 VLAN 1790 at 100 Mbit/s for an hour: its connection id."""
        end = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(hours=1)
        printed = self.onsa("reserveonly", "-s", SOURCE, "-d", DEST, "-b", "100",
                            "-e", end.strftime("%Y-%m-%dT%H:%M:%S"))
        found = re.search(rf"Connection created and held\. Id (\S+) at {NSA}", printed)
        assert found, printed + self.evidence()
        return found.group(1)

    def query(self, cid: str) -> tuple[str, bool]:
        """What `onsa query` says of connection `cid`: its States line, and whether its data plane is active."""
        printed = self.onsa("query", "-c", cid)
        states = re.search(r"^States\s+(.*)$", printed, re.MULTILINE)
        plane = re.search(r"^Dataplane\s+Active : (True|False)", printed, re.MULTILINE)
        assert states and plane, printed + self.evidence()
        return states.group(1).strip(), plane.group(1) == "True"

    def wait_query(self, cid: str, want: tuple[str, bool], what: str) -> None:
        """Query `cid` with onsa again and again until it says `want` (a deadline, then the evidence)."""
        seen: list[tuple[str, bool]] = []

        def arrived() -> bool:
            seen.append(self.query(cid))
            return seen[-1] == want

        try:
            wait_for(arrived, what, DEADLINE)
        except AssertionError as failed:
            raise AssertionError(f"{failed}; onsa last said {seen[-1:]}{self.evidence()}") from None

    def circuit(self) -> tuple[int, int]:
        """Answers dtn1 (VLAN 1780) gets from dtn3 (VLAN 1790), and dtn3 from dtn1."""
        return both_ways(self.net, "dtn1", SRC_VLAN, "dtn3", DST_VLAN)

    def evidence(self) -> str:
        """What s1 and s3 hold and the controller's log, for a failure message."""
        flows = []
        for bridge in ("s1", "s3"):
            name = self.net.switch(bridge).name
            dumped = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", name], capture_output=True,
                                    text=True, timeout=10)
            flows.append(f"--- {bridge} ({name}) flows:\n{dumped.stdout}{dumped.stderr}")
        return "\n" + "".join(flows) + "--- controller log (tail):\n" + "".join(self.process.log[-80:])

    def closed(self, why: str) -> None:
        """Assert that dtn1's and dtn3's VLANs do not reach each other now."""
        found = self.circuit()
        assert found == (0, 0), f"{why}: answers {found}{self.evidence()}"

    def opens(self, why: str) -> None:
        """Wait (with a deadline) until every probe on dtn1's and dtn3's VLANs gets its answer, both ways."""
        found: list[tuple[int, int]] = []

        def all_answered() -> bool:
            found.append(self.circuit())
            return found[-1] == (PROBES, PROBES)

        try:
            wait_for(all_answered, why, DEADLINE)
        except AssertionError as failed:
            raise AssertionError(f"{failed}; answers {found[-1:]} of {PROBES}{self.evidence()}") from None


@pytest.fixture
def start_provider(network, tmp_path: Path, onsa: Path) -> Iterator[Callable[..., Provider]]:  # noqa: F811
    """`start_provider(*controller_args)`: a `Provider` (one per test: the network is torn down after it)."""
    with contextlib.ExitStack() as stack:

        def start(*args: str) -> Provider:
            http = f"127.0.0.1:{free_port()}"
            net, _, process = stack.enter_context(ring8_under_controller(
                network, tmp_path, extra=("--listen-http", http, "--domain", DOMAIN, *args)))
            home = tmp_path / "onsa-home"  # no ~/.opennsa-cli of whoever runs the tests
            home.mkdir()
            return Provider(net, process, http, onsa, home)

        yield start


def test_onsa_circuit_carries_the_agreed_vlans_only_while_provisioned(start_provider):
    provider: Provider = start_provider()
    provider.closed("the VLANs passed before any reservation")

    cid = provider.reserve_only()
    assert provider.query(cid) == ("ReserveHeld, Released, Created", False)
    provider.closed("the VLANs passed while the reservation was only held")

    assert f"Reservation committed at {NSA}" in provider.onsa("reservecommit", "-c", cid)
    assert provider.query(cid) == ("ReserveStart, Released, Created", False)
    provider.closed("the VLANs passed while the reservation was committed, not provisioned")

    assert f"Connection {cid} provisioned" in provider.onsa("provision", "-c", cid)
    provider.wait_query(cid, ("ReserveStart, Provisioned, Created", True), "onsa to see the data plane active")
    provider.opens("dtn1 VLAN 1780 and dtn3 VLAN 1790 to reach each other once provisioned")
    net = provider.net
    for vlan in (THIRD, 0):  # a VLAN nobody reserved, the same at both ends, and untagged frames: nobody
        assert exchange(net, "dtn1", vlan, "dtn3", vlan) == (0, 0), vlan
        assert exchange(net, "dtn3", vlan, "dtn1", vlan) == (0, 0), vlan
    assert exchange(net, "dtn1", DST_VLAN, "dtn3", DST_VLAN) == (0, 0)  # the far end's VLAN at the near end
    assert exchange(net, "dtn3", SRC_VLAN, "dtn1", SRC_VLAN) == (0, 0)

    assert f"Connection {cid} released" in provider.onsa("release", "-c", cid)
    assert provider.query(cid) == ("ReserveStart, Released, Created", False)
    provider.closed("the VLANs still passed after release")

    assert f"Connection {cid} provisioned" in provider.onsa("provision", "-c", cid)
    provider.wait_query(cid, ("ReserveStart, Provisioned, Created", True), "onsa to see the data plane active again")
    provider.opens("dtn1 VLAN 1780 and dtn3 VLAN 1790 to reach each other after the second provision")

    assert f"Connection {cid} terminated" in provider.onsa("terminate", "-c", cid)
    assert provider.query(cid) == ("ReserveStart, Released, Terminated", False)
    provider.closed("the VLANs still passed after terminate")


def test_a_hold_onsa_never_commits_times_out_and_frees_its_vlans(start_provider):
    provider: Provider = start_provider("--hold-timeout", f"{HOLD_TIMEOUT}s")
    cid = provider.reserve_only()
    provider.wait_query(cid, ("ReserveTimeout, Released, Created", False), "onsa to see the hold time out")
    provider.closed("the VLANs of a hold that timed out passed")
    assert provider.reserve_only() != cid  # the same VLANs again: held, so they were free
