"""A WAN segment booked over NSI carries traffic (Mininet, Open vSwitch userspace datapath): ring8 with the
inter-domain port `to-rnp` on s5 under a `tsdn controller` process with OpenFlow, RNP's NSA a real OpenNSA
(tests/nsi_peers.py), RNP's WAN the builder's standalone bridge with saopaulo-dtn1 on it, untagged.

Once the reservation dtn1 -> saopaulo-dtn1 is ACTIVE, the bridge port of saopaulo-dtn1 becomes an access
port of the VLAN OpenNSA confirmed (the neighbour's edge delivering the circuit untagged to the site's DTN;
this kernel has no 802.1Q, so the hosts cannot tag): dtn1 (untagged) pings saopaulo-dtn1 because tsdn's
egress at to-rnp pushes that VLAN. With another VLAN on the access port nothing passes, nor after the
reservation is released."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

from benchmarks.report import free_port
from mininet_tests.conftest import ALL_RING8_SWITCHES
from mininet_tests.controlled import DEADLINE, SCALE, TOKEN, ControllerProcess, connected_bridges, pings
from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from tests.nsi_peers import Neighbour, opennsa_rnp  # noqa: F401  (the fixture)
from tests.test_nsi_wan import DOMAIN, query, wan_topology
from tests.waiting import wait_for

G = 10**9


def set_access_vlan(net, dtn: str, vlan: int) -> None:
    """Make the WAN bridge's port towards `dtn` an access port of `vlan` (untagged towards the host)."""
    host = net.host(dtn)
    link = host.intf(net.host_intf(dtn)).link
    bridge_side = link.intf2 if link.intf1.node is host else link.intf1
    done = subprocess.run(["ovs-vsctl", "set", "port", bridge_side.name, f"tag={vlan}"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def never_pings(net, src: str, dst: str) -> bool:
    """Nothing of two pings gets through."""
    address = net.topology.dtns[dst].ipv4
    return " 100% packet loss" in net.host(src).cmd(f"ping -c 2 -i 0.2 -W 1 {address}")


@pytest.fixture
def rnp(opennsa_rnp: Neighbour) -> Neighbour:  # noqa: F811  (the session's OpenNSA standing in for RNP)
    """The OpenNSA standing in for RNP."""
    return opennsa_rnp


def test_dtn1_reaches_saopaulo_over_the_vlan_opennsa_confirmed_and_only_while_reserved(network, tmp_path: Path,
                                                                                       rnp: Neighbour):
    topology = wan_topology(tmp_path, rnp.url)
    process = ControllerProcess(tmp_path, free_port(), topology=str(topology),
                                extra=("--listen-http", "127.0.0.1:0", "--domain", DOMAIN, "--nsi-timeout", "30"))
    try:
        address = process.start()
        net = network(topology, scale=SCALE, controller=("127.0.0.1", process.openflow_port))
        wait_for(lambda: connected_bridges() >= ALL_RING8_SWITCHES, "all 8 switches to connect", DEADLINE)
        with TsdnClient(address, token=TOKEN, timeout=10) as client:
            created = client.create_reservation("dtn1", "saopaulo-dtn1", G, duration=3600)
            settled = wait_for(lambda: (r := client.get_reservation(created.id)).state not in (
                pb.HELD, pb.PROVISIONING) and r, "the reservation to settle (segment booked, flows confirmed)", 60)
            assert settled.state == pb.ACTIVE, settled.state_reason
            [remote] = [r for r in query(rnp) if created.id in r.description and r.states.lifecycle == "Created"]
            vlan = remote.criteria.dest_vlan
            assert vlan is not None and remote.states.provision == "Provisioned"

            set_access_vlan(net, "saopaulo-dtn1", vlan + 1)
            assert never_pings(net, "dtn1", "saopaulo-dtn1"), "a frame crossed on a VLAN nobody booked"
            set_access_vlan(net, "saopaulo-dtn1", vlan)
            wait_for(lambda: pings(net, "dtn1", "saopaulo-dtn1"), f"dtn1 to reach saopaulo-dtn1 over VLAN {vlan}",
                     DEADLINE)

            client.delete_reservation(created.id)
            wait_for(lambda: query(rnp, remote.connection_id)[0].states.lifecycle == "Terminated",
                     "the remote segment terminated", 60)
            wait_for(lambda: never_pings(net, "dtn1", "saopaulo-dtn1"), "traffic to stop after the release",
                     DEADLINE)
    finally:
        process.stop()
