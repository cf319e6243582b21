"""Elastic reservations share a link by priority on real Open vSwitch: the meters follow every
re-solve, measured with real iperf3 (UDP offered above every ceiling, so the meter alone sets what
arrives). Two elastic reservations share s1->s2 1:3; a guaranteed one arrives on the same link and
they shrink to make room; it leaves and they grow back. The same with two elastic transfers run by
DTN agents: their senders are repaced to each new share (PACE jobs), and their rates follow."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from benchmarks.report import free_port
from mininet_tests.conftest import ALL_RING8_SWITCHES, ring8_under_controller
from mininet_tests.controlled import DEADLINE, TOKEN, ControllerProcess, connected_bridges, tsdn
from mininet_tests.test_transfer import Watch, start_agent
from mininet_tests.traffic import start_iperf3
from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2
from tests.waiting import wait_for

G = 10**9
OFFERED = 100 * G  # nominal: every flow offers a whole 100G link's worth


@pytest.fixture
def prioritised(network, tmp_path, rate_scale):
    """ring8 in Mininet under a `tsdn controller` whose service principal has priority 5, at the
    session's calibrated scale."""
    with ring8_under_controller(network, tmp_path, priority=5, scale=rate_scale) as (net, env, _):
        yield net, env


def request(env, *args) -> dict:
    made = tsdn(env, "path", "request", *args, "--json")
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)


def share(env, rid: str) -> int:
    shown = tsdn(env, "path", "show", rid, "--json")
    assert shown.returncode == 0, shown.stderr
    return int(json.loads(shown.stdout)["share_bps"])


def measured(net, flows: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Mbit/s received of UDP iperf3 run at once for each reservation's (source, destination)."""
    runs = {rid: start_iperf3(net.host(src), net.host(dst), net.topology.dtns[dst].ipv4, 4, OFFERED * net.scale / 1e6,
                              udp=True)
            for rid, (src, dst) in flows.items()}
    return {rid: run.report()["end"]["sum_received"]["bits_per_second"] / 1e6 for rid, run in runs.items()}


def meters_kbps(net, switch: str) -> set[int]:
    """The rates of the meters `switch` holds (kbit/s on the wire)."""
    out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-meters", net.topo.mn_name(switch)],
                         capture_output=True, text=True, timeout=10).stdout
    return {int(m) for m in re.findall(r"rate=(\d+)", out)}


def meters_at(net, expected: dict[str, int]) -> None:
    """Wait until each ingress switch holds a meter at its reservation's share (emulated)."""
    for switch, share_bps in expected.items():
        kbps = int(share_bps * net.scale) // 1000
        wait_for(lambda switch=switch, kbps=kbps: kbps in meters_kbps(net, switch),
                 f"{switch}'s meter at {kbps} kbit/s", DEADLINE, interval=0.2)


def check(rates: dict[str, float], shares: dict[str, int], scale: float) -> None:
    for rid, rate in rates.items():
        expected = shares[rid] * scale / 1e6
        print(f"{rid[:8]}: {rate:.2f} Mbit/s measured, share {expected:g}")
        assert abs(rate - expected) <= 0.1 * expected, f"{rid}: {rate:.1f} Mbit/s measured, share {expected:g}"


def test_elastic_shares_follow_a_guaranteed_arrival_and_departure(prioritised):
    net, env = prioritised
    # s1->s2 is shared: a dtn1 -> dtn3 (s1 s2 s3), b dtn8 -> dtn2 (s8 s1 s2); c dtn7 -> dtn2 (s7 s8 s1 s2)
    a = request(env, "dtn1", "dtn3", "-b", "10G", "--ceiling", "80G", "--priority", "1")
    b = request(env, "dtn8", "dtn2", "-b", "10G", "--ceiling", "80G", "--priority", "3")
    flows = {a["id"]: ("dtn1", "dtn3"), b["id"]: ("dtn8", "dtn2")}
    wait_for(lambda: (share(env, a["id"]), share(env, b["id"])) == (30 * G, 70 * G), "the 1:3 shares", DEADLINE)
    meters_at(net, {"s1": 30 * G, "s8": 70 * G})
    check(measured(net, flows), {a["id"]: 30 * G, b["id"]: 70 * G}, net.scale)

    c = request(env, "dtn7", "dtn2", "-b", "40G", "--no-wait")  # its admission, as announced
    assert f"{a['name']} 30G -> 20G, {b['name']} 70G -> 40G" in c["state_reason"] \
        or f"{b['name']} 70G -> 40G, {a['name']} 30G -> 20G" in c["state_reason"], c["state_reason"]
    assert (share(env, a["id"]), share(env, b["id"])) == (20 * G, 40 * G)
    meters_at(net, {"s1": 20 * G, "s8": 40 * G})
    check(measured(net, flows), {a["id"]: 20 * G, b["id"]: 40 * G}, net.scale)

    released = tsdn(env, "path", "release", c["id"])
    assert released.returncode == 0, released.stderr
    assert (share(env, a["id"]), share(env, b["id"])) == (30 * G, 70 * G)
    meters_at(net, {"s1": 30 * G, "s8": 70 * G})
    check(measured(net, flows), {a["id"]: 30 * G, b["id"]: 70 * G}, net.scale)


SENDERS, RECEIVERS = ("dtn1", "dtn8"), ("dtn3", "dtn2")


@pytest.fixture
def agents(network, tmp_path, rate_scale):
    """ring8 under a controller whose service has priority 5, agents in the senders' and receivers' hosts."""
    controller = ControllerProcess(tmp_path, free_port(), agents=SENDERS + RECEIVERS, priority=5, scale=rate_scale)
    processes = []
    try:
        address = controller.start()
        net = network("ring8", scale=rate_scale, controller=("127.0.0.1", controller.openflow_port))
        wait_for(lambda: connected_bridges() >= ALL_RING8_SWITCHES, "all 8 switches to connect", DEADLINE)
        processes.extend(start_agent(net, controller, dtn) for dtn in SENDERS + RECEIVERS)
        with TsdnClient(address, token=TOKEN) as client:
            wait_for(lambda: {a.dtn for a in client.list_agents() if a.state == agent_pb2.ONLINE}
                     >= set(SENDERS + RECEIVERS), "the agents to register", DEADLINE)
            yield client
    finally:
        for process in processes:
            process.kill()
            process.wait(10)
        controller.stop()


def settled(watch: Watch, share_bps: int, since: int) -> bool:
    """Whether the sender's last 3 reports after report `since` are within 10 % of `share_bps`
    (nominal): paced at 95 % of it, what the meter passes."""
    rates = watch.rates()[since:][-3:]
    return len(rates) == 3 and all(abs(t.nominal_bps - share_bps) <= 0.1 * share_bps for t in rates)


def test_elastic_transfers_are_repaced_to_their_shares(agents):
    client = agents
    big = 2 * 10**9  # bytes: more than the test lasts at these rates; cancelled at the end
    a = client.start_transfer("dtn1", "dtn3", 10 * G, size=big, ceiling_bps=80 * G, priority=1)
    b = client.start_transfer("dtn8", "dtn2", 10 * G, size=big, ceiling_bps=80 * G, priority=3)
    watches = {a.name: Watch(client, a.name), b.name: Watch(client, b.name)}
    try:
        for name, share_bps in ((a.name, 30 * G), (b.name, 70 * G)):
            wait_for(lambda name=name, share_bps=share_bps: settled(watches[name], share_bps, 0),
                     f"{name} at its 1:3 share {share_bps / G:g}G", 60, interval=0.5)
        seen = {name: len(w.rates()) for name, w in watches.items()}

        guaranteed = client.create_reservation("dtn7", "dtn2", 40 * G)
        for name, share_bps in ((a.name, 20 * G), (b.name, 40 * G)):
            wait_for(lambda name=name, share_bps=share_bps: settled(watches[name], share_bps, seen[name]),
                     f"{name} repaced to {share_bps / G:g}G", 60, interval=0.5)
            assert any(r.startswith("pacing ") and "the meter changed (share " in r
                       for r in watches[name].reasons()), watches[name].reasons()
        seen = {name: len(w.rates()) for name, w in watches.items()}

        client.delete_reservation(guaranteed.name)
        for name, share_bps in ((a.name, 30 * G), (b.name, 70 * G)):
            wait_for(lambda name=name, share_bps=share_bps: settled(watches[name], share_bps, seen[name]),
                     f"{name} back at {share_bps / G:g}G", 60, interval=0.5)
    finally:
        for transfer in (a, b):
            client.cancel_transfer(transfer.name)
