"""Reservations under change on real Open vSwitch, through the `tsdn controller` process and CLI:
the meter holds iperf3 to the booked rate, traffic crosses exactly the reported path (sc16), a
cut link moves traffic to the alternate, and a move asked for is make-before-break under a
running iperf3.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.report import free_port
from mininet_tests.controlled import (
    DEADLINE,
    SCALE,
    ControllerProcess,
    cli_env,
    connected_bridges,
    pings,
    tsdn,
    tsdn_flows,
)
from mininet_tests.traffic import iperf3, start_iperf3
from tests.waiting import wait_for

SC16_SCALE = 0.0002  # sc16's 1 Tbit/s links run at 200 Mbit/s


def packets(bridge: str) -> int:
    """Packets counted by the tsdn flows of `bridge`."""
    return sum(int(part.split("=")[1].rstrip(","))
               for line in tsdn_flows(bridge) for part in line.split() if part.startswith("n_packets="))


def show(env, rid: str) -> dict:
    shown = tsdn(env, "path", "show", rid, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def request(env, *args) -> dict:
    made = tsdn(env, "path", "request", *args, "--json")
    assert made.returncode == 0, made.stderr
    reservation = json.loads(made.stdout)
    assert reservation["state"] == "ACTIVE", reservation
    return reservation


@pytest.mark.parametrize("protocol", ["udp", "tcp"])
def test_the_meter_holds_iperf3_to_the_booked_rate(controlled, protocol):
    net, env, _ = controlled
    request(env, "dtn1", "dtn3", "-b", "10G")
    booked_mbps = 10_000 * SCALE
    dtn1, dtn3 = net.host("dtn1"), net.host("dtn3")
    received = iperf3(dtn1, dtn3, net.topology.dtns["dtn3"].ipv4, 2 * booked_mbps, udp=protocol == "udp")
    print(f"iperf3 {protocol}: {2 * booked_mbps:g} Mbit/s offered, {received:.2f} received, booked {booked_mbps:g}")
    assert 0 < received <= 1.1 * booked_mbps, f"{received:.2f} Mbit/s passed a {booked_mbps:g} Mbit/s booking"


def test_traffic_crosses_exactly_the_reported_path_on_sc16(network, tmp_path):
    controller = ControllerProcess(tmp_path, free_port(), topology="sc16", scale=SC16_SCALE)
    try:
        env = cli_env(controller.start(), tmp_path)
        net = network("sc16", scale=SC16_SCALE, controller=("127.0.0.1", controller.openflow_port))
        switches = set(net.topology.switches)
        wait_for(lambda: {net.topo.topo_name(b) for b in connected_bridges()} >= switches,
                 "all sc16 switches to connect", DEADLINE)
        assert not pings(net, "caltech-a-dtn1", "starlight-dtn1"), "DTNs talk without a reservation"
        made = request(env, "caltech-a-dtn1", "starlight-dtn1", "-b", "100G", "--exclude", "tbit-rdma")
        route = made["path"]["route"][1:-1]
        assert pings(net, "caltech-a-dtn1", "starlight-dtn1")
        received = iperf3(net.host("caltech-a-dtn1"), net.host("starlight-dtn1"),
                          net.topology.dtns["starlight-dtn1"].ipv4)
        assert received > 0
        crossed = {name for name in switches if packets(net.topo.mn_name(name)) > 0}
        assert crossed == set(route), f"traffic crossed {sorted(crossed)}, the reported path is {route}"
        assert not pings(net, "caltech-a-dtn1", "starlight-dtn2"), "the reservation opened another pair"
    finally:
        controller.stop()


def test_a_cut_link_moves_traffic_to_the_alternate(controlled):
    net, env, _ = controlled
    made = request(env, "dtn1", "dtn3", "-b", "10G")
    assert made["path"]["route"][1:-1] == ["s1", "s2", "s3"]
    net.mn.configLinkStatus(net.topo.mn_name("s2"), net.topo.mn_name("s3"), "down")
    wait_for(lambda: show(env, made["id"])["path"]["route"][1:-1] == ["s1", "s8", "s7", "s6", "s5", "s4", "s3"]
             and show(env, made["id"])["state"] == "ACTIVE", "the reservation to be ACTIVE around the ring", DEADLINE)
    assert "s2-s3" in show(env, made["id"])["state_reason"] or "moved" in show(env, made["id"])["state_reason"]
    before = packets(net.topo.mn_name("s6"))
    assert pings(net, "dtn1", "dtn3")
    assert packets(net.topo.mn_name("s6")) > before, "the traffic did not take the alternate"
    wait_for(lambda: not tsdn_flows(net.topo.mn_name("s2")), "the old path's entries to leave s2", DEADLINE)


def test_a_cut_with_no_alternate_is_degraded_and_recovers_with_the_link(controlled):
    net, env, _ = controlled
    made = request(env, "dtn1", "dtn3", "-b", "60G")
    request(env, "dtn7", "dtn5", "-b", "50G")  # the way round has 50G left on s7->s6->s5
    net.mn.configLinkStatus(net.topo.mn_name("s2"), net.topo.mn_name("s3"), "down")
    wait_for(lambda: show(env, made["id"])["state"] == "DEGRADED", "the reservation to be DEGRADED", DEADLINE)
    assert "s2-s3" in show(env, made["id"])["state_reason"]
    assert not pings(net, "dtn1", "dtn3")
    net.mn.configLinkStatus(net.topo.mn_name("s2"), net.topo.mn_name("s3"), "up")
    wait_for(lambda: show(env, made["id"])["state"] == "ACTIVE", "the reservation to recover", DEADLINE)
    assert pings(net, "dtn1", "dtn3")


def test_a_move_is_make_before_break_under_a_running_iperf3(controlled):
    net, env, _ = controlled
    made = request(env, "dtn1", "dtn3", "-b", "10G")
    booked_mbps = 10_000 * SCALE
    s2, s6 = net.topo.mn_name("s2"), net.topo.mn_name("s6")
    run = start_iperf3(net.host("dtn1"), net.host("dtn3"), net.topology.dtns["dtn3"].ipv4, seconds=8,
                       offered_mbps=0.8 * booked_mbps)
    wait_for(lambda: packets(s2) > 50, "the iperf3 stream to flow through s2", DEADLINE)
    moved = tsdn(env, "path", "modify", made["id"], "--move", "--exclude", "s2", "--json")
    assert moved.returncode == 0, moved.stderr
    wait_for(lambda: show(env, made["id"])["state"] == "ACTIVE", "the move to be confirmed", DEADLINE)
    assert show(env, made["id"])["path"]["route"][1:-1] == ["s1", "s8", "s7", "s6", "s5", "s4", "s3"]
    report = run.report()  # iperf3 reports an error if the connection broke
    rates = [interval["sum"]["bits_per_second"] / 1e6 for interval in report["intervals"]]
    print(f"iperf3 through the move, Mbit/s per second: {[round(r, 2) for r in rates]}")
    assert len(rates) >= 7 and min(rates) > 0.25 * booked_mbps, f"the stream stalled during the move: {rates}"
    assert packets(s6) > 50, "the stream never took the new path"
    wait_for(lambda: not tsdn_flows(s2), "the old path's entries to leave s2", DEADLINE)
