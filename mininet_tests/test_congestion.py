"""Congestion as a show floor has it: traffic the controller does not own, sent through the real
switches by the cross-traffic hosts (`tsdn.demo.cross_traffic`, what `congest_link` does),
on ring8 under a real `tsdn controller` process.

- The controller's own port statistics see the congested direction near its capacity, and not
  the reverse; the cross-traffic flows survive a switch's reconnect and reconciliation; a tsdn
  reservation on other links keeps its traffic; clearing brings the load down and removes the
  flows.
- Default deny still holds: the cross hosts reach no DTN, even with a route and the DTN's MAC.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from benchmarks.report import free_port
from mininet_tests.conftest import ALL_RING8_SWITCHES
from mininet_tests.controlled import DEADLINE, ControllerProcess, cli_env, connected_bridges, tsdn
from mininet_tests.traffic import start_iperf3
from tests.waiting import wait_for
from tsdn.demo.cross_traffic import CrossTraffic, cross_cookie

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

G = 10**9
CONGESTED = "s7:1->s8:2"  # ring8's s7-s8, the way congest_link {link: s7-s8, from: s7} loads it
REVERSE = "s8:2->s7:1"
NEAR_CAPACITY = 0.85  # the cross traffic sends 95% of the capacity; the controller averages over a second
QUIET = 0.2


@pytest.fixture
def congestible(network, tmp_path, rate_scale):
    """ring8 with cross-traffic hosts on s7 and s8, a controller process serving its map (loads), at the
    session's calibrated scale; yields (net, CLI env, controller, map URL, CrossTraffic)."""
    http_port = free_port()
    controller = ControllerProcess(tmp_path, free_port(), extra=("--listen-http", f"127.0.0.1:{http_port}"),
                                   scale=rate_scale)
    cross = None
    try:
        address = controller.start()
        net = network("ring8", scale=rate_scale, controller=("127.0.0.1", controller.openflow_port),
                      cross_traffic=("s7", "s8"))
        wait_for(lambda: connected_bridges() >= ALL_RING8_SWITCHES, "all 8 switches to connect", DEADLINE)
        cross = CrossTraffic(net)
        yield net, cli_env(address, tmp_path), controller, f"http://127.0.0.1:{http_port}", cross
    finally:
        if cross is not None:
            cross.close()
        controller.stop()


def loads(url: str) -> dict[str, float]:
    """The controller's measured load of every link direction, as a share of its capacity."""
    with urllib.request.urlopen(f"{url}/api/snapshot", timeout=10) as answer:
        snapshot = json.load(answer)
    return {d["id"]: d["fraction"] or 0.0 for link in snapshot["links"] for d in link["directions"]}


def congested_verdicts(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/api/snapshot", timeout=10) as answer:
        return [c.get("direction", str(c)) for c in json.load(answer)["congested"]]


def cross_flows(bridge: str, cookie: int) -> list[str]:
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge, f"cookie={cookie:#x}/-1"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    return [line for line in out.splitlines() if "cookie=" in line]


def direction(net, direction_id: str):
    return net.topology.directions[direction_id]


def test_cross_traffic_congests_one_direction_as_the_controller_measures_it(congestible):
    net, env, controller, url, cross = congestible
    made = tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["path"]["route"][1:-1] == ["s1", "s2", "s3"]
    wait_for(lambda: CONGESTED in loads(url), "the controller to measure s7 -> s8", DEADLINE)
    assert loads(url)[CONGESTED] < QUIET, "s7 -> s8 is loaded before any cross traffic"

    forward = direction(net, CONGESTED)
    stream = cross.start(forward, 95 * G)
    assert stream.emulated_bps == round(95 * G * net.scale)
    wait_for(lambda: loads(url)[CONGESTED] >= NEAR_CAPACITY, "the controller to measure s7 -> s8 near capacity",
             DEADLINE, interval=0.5)
    measured = loads(url)
    print(f"controller: s7->s8 {measured[CONGESTED]:.0%}, s8->s7 {measured[REVERSE]:.0%}; "
          f"congested verdicts: {congested_verdicts(url)}")
    assert measured[REVERSE] < QUIET, f"the reverse direction is loaded too: {measured[REVERSE]:.0%}"
    cross.measure()
    wait_for(lambda: cross.measure().get(CONGESTED, 0) >= NEAR_CAPACITY * forward.capacity,
             "the runner's own measurement of s7 -> s8 near capacity", DEADLINE, interval=1.0)

    # The reservation on s1 s2 s3 keeps its traffic: a UDP stream at 80% of its booking arrives whole.
    booked_mbps = 10_000 * net.scale
    run = start_iperf3(net.host("dtn1"), net.host("dtn3"), net.topology.dtns["dtn3"].ipv4, seconds=4,
                       offered_mbps=0.8 * booked_mbps, udp=True)
    end = run.report()["end"]["sum"]
    print(f"reservation dtn1->dtn3 during the congestion: {end['lost_percent']:.2f}% lost")
    assert end["lost_percent"] < 2.0

    # A reconnect of s7 makes the controller reconcile it: the cross-traffic flows stay (not tsdn's cookie).
    cookie = cross_cookie(next(i for i, link in enumerate(net.topology.spec.links) if link.label == "s7-s8"))
    s7, s8 = net.topo.mn_name("s7"), net.topo.mn_name("s8")
    assert len(cross_flows(s7, cookie)) == 2 and len(cross_flows(s8, cookie)) == 2
    target = subprocess.run(["ovs-vsctl", "get-controller", s7], capture_output=True, text=True, timeout=10,
                            check=True).stdout.split()
    since = len(controller.log)
    subprocess.run(["ovs-vsctl", "set-controller", s7, f"tcp:127.0.0.1:{free_port()}"], check=True, timeout=10)
    wait_for(lambda: s7 not in connected_bridges(), "s7 to disconnect", DEADLINE)
    subprocess.run(["ovs-vsctl", "set-controller", s7, *target], check=True, timeout=10)
    wait_for(lambda: s7 in connected_bridges(), "s7 to reconnect", DEADLINE)
    wait_for(lambda: any("s7: reconciled" in line for line in controller.log[since:]), "s7 to be reconciled",
             DEADLINE)
    assert len(cross_flows(s7, cookie)) == 2, "reconciliation removed the cross-traffic flows of s7"
    wait_for(lambda: loads(url).get(CONGESTED, 0) >= NEAR_CAPACITY, "s7 -> s8 near capacity after the reconnect",
             DEADLINE, interval=0.5)

    cross.stop(forward)
    assert cross_flows(s7, cookie) == [] and cross_flows(s8, cookie) == []
    wait_for(lambda: loads(url)[CONGESTED] < QUIET, "s7 -> s8 to measure quiet again", DEADLINE, interval=0.5)


SNIFF = Path(__file__).resolve().parent / "sniff.py"


def test_the_cross_hosts_reach_no_dtn(congestible):
    net, _, _, _, cross = congestible
    cross.start(direction(net, CONGESTED), 50 * G)
    sniffers = {dtn: net.host(dtn).popen([sys.executable, str(SNIFF), net.host_intf(dtn)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True) for dtn in net.topology.dtns}
    try:
        for dtn, sniffer in sniffers.items():
            assert sniffer.stdout.readline().strip() == "ready", f"the sniffer on {dtn} did not start"
        x7 = net.cross_host("s7")
        intf = x7.defaultIntf().name
        for dtn, spec in net.topology.dtns.items():
            # Everything a sender needs but the fabric's consent: a route and the DTN's MAC.
            x7.cmd(f"ip route replace {spec.ipv4}/32 dev {intf}")
            x7.cmd(f"ip neigh replace {spec.ipv4} lladdr {spec.mac} dev {intf} nud permanent")
            out = x7.cmd(f"ping -c 3 -i 0.2 -W 1 {spec.ipv4}")
            assert re.search(r" 100% packet loss", out), f"the cross host of s7 reached {dtn}: {out}"
        # The cross traffic itself flows meanwhile (so the silence is the fabric's default deny).
        cross.measure()
        wait_for(lambda: cross.measure().get(CONGESTED, 0) >= 0.4 * direction(net, CONGESTED).capacity,
                 "the cross traffic to load s7 -> s8", DEADLINE, interval=1.0)
    finally:
        counts = {dtn: sniffer.communicate("", timeout=30)[0].split() for dtn, sniffer in sniffers.items()}
    reached = {dtn: words for dtn, words in counts.items() if words and words[0] != "0"}
    assert all(counts.values()), f"a sniffer printed nothing: {counts}"
    assert not reached, f"frames of the cross hosts reached DTNs (count, first frames): {reached}"
