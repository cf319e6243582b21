"""`tsdn controller` as a real process controlling ring8 in Mininet, driven through the real CLI.

No connectivity without a reservation; `tsdn path request` returns once every hop is
barrier-confirmed (ACTIVE) and packets then flow; release takes every tsdn flow away; a
switch that is not there makes the reservation FAILED with its name, and nothing is left
installed elsewhere.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from mininet_tests.conftest import ALL_RING8_SWITCHES as ALL_SWITCHES
from mininet_tests.controlled import DEADLINE, connected_bridges, pings, tsdn, tsdn_flows
from tests.waiting import wait_for


def test_reservation_opens_the_path_and_release_closes_it(controlled):
    net, env, _ = controlled
    assert not pings(net, "dtn1", "dtn3"), "DTNs talk without a reservation"
    made = tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json")
    assert made.returncode == 0, made.stderr
    reservation = json.loads(made.stdout)
    assert reservation["state"] == "ACTIVE", reservation
    assert reservation["path"]["route"] == ["dtn1", "s1", "s2", "s3", "dtn3"]
    assert all(tsdn_flows(net.topo.mn_name(s)) for s in ("s1", "s2", "s3"))
    assert not any(tsdn_flows(net.topo.mn_name(s)) for s in ("s4", "s5", "s6", "s7", "s8"))
    assert pings(net, "dtn1", "dtn3")
    assert not pings(net, "dtn1", "dtn4"), "a reservation opened more than its own pair"

    released = tsdn(env, "path", "release", reservation["id"], "--json")
    assert json.loads(released.stdout)["state"] == "RELEASED"
    wait_for(lambda: not any(tsdn_flows(f"s{i}") for i in range(1, 9)), "every tsdn flow to be removed", DEADLINE)
    assert not pings(net, "dtn1", "dtn3")


def test_a_missing_switch_fails_the_reservation_and_leaves_nothing(controlled):
    net, env, _ = controlled
    subprocess.run(["ovs-vsctl", "del-controller", net.topo.mn_name("s2")], check=True, timeout=10)
    wait_for(lambda: "s2" not in connected_bridges(), "s2 to disconnect", DEADLINE)
    made = tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json")
    assert made.returncode == 1, made.stderr
    reservation = json.loads(made.stdout)
    assert reservation["state"] == "FAILED" and "s2" in reservation["state_reason"], reservation
    wait_for(lambda: not any(tsdn_flows(f"s{i}") for i in range(1, 9)), "no tsdn flow left anywhere", DEADLINE)
    assert not pings(net, "dtn1", "dtn3")


def test_traffic_survives_a_controller_crash_and_a_restart_knows_its_flows(controlled):
    net, env, controller = controlled
    made = json.loads(tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json").stdout)
    assert made["state"] == "ACTIVE"
    controller.kill()
    wait_for(lambda: not connected_bridges(), "the switches to notice the controller is gone", DEADLINE)
    assert pings(net, "dtn1", "dtn3"), "fail-mode secure switches must keep forwarding without a controller"
    assert not pings(net, "dtn1", "dtn4")

    controller.start()
    wait_for(lambda: connected_bridges() >= ALL_SWITCHES, "all 8 switches to reconnect", DEADLINE)
    assert pings(net, "dtn1", "dtn3")
    shown = json.loads(tsdn(env, "path", "show", made["id"], "--json").stdout)
    assert shown["state"] == "ACTIVE"
    released = tsdn(env, "path", "release", made["id"], "--json")
    assert json.loads(released.stdout)["state"] == "RELEASED"
    wait_for(lambda: not any(tsdn_flows(f"s{i}") for i in range(1, 9)), "the restarted controller to remove them",
             DEADLINE)
    assert not pings(net, "dtn1", "dtn3")


@pytest.mark.parametrize("cut", [("s1", "s2"), ("s2", "s3")], ids=["at-the-ingress", "downstream"])
def test_protected_reservation_fails_over_with_the_controller_stopped(controlled, cut):
    net, env, controller = controlled
    made = json.loads(tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--protect", "--json").stdout)
    assert made["state"] == "ACTIVE" and made["path"]["route"][1:-1] == ["s1", "s2", "s3"]
    assert made["backup_path"]["route"][1:-1] == ["s1", "s8", "s7", "s6", "s5", "s4", "s3"]
    assert pings(net, "dtn1", "dtn3")
    controller.kill()
    before = backup_packets(net)
    net.mn.configLinkStatus(net.topo.mn_name(cut[0]), net.topo.mn_name(cut[1]), "down")
    # A packet on the wire when the link dies is lost; the ones after it must go around the ring.
    wait_for(lambda: pings(net, "dtn1", "dtn3"), f"traffic to resume with {cut[0]}-{cut[1]} down, no controller",
             timeout=10)
    wait_for(lambda: backup_packets(net) > before, "the traffic to be counted on the backup path", timeout=5)
    assert controller.process.poll() is not None, "the controller must still be down"


def backup_packets(net) -> int:
    """Packets counted by the tsdn flows of s6, a switch only the backup path crosses."""
    return sum(int(part.split("=")[1].rstrip(","))
               for line in tsdn_flows(net.topo.mn_name("s6")) for part in line.split() if part.startswith("n_packets="))
