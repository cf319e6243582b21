"""The OpenFlow adapter on real Open vSwitch: os-ken in the test process, ring8 in Mininet.

What must hold: every switch connects and gets the base flows (table-miss drop, ARP to the
controller); nothing passes without a plan (default deny); a plan applied with barriers puts
the reservation's flows on exactly the route's switches, carries ping (ARP answered by the
controller) and only between its pair, its meter holds a faster sender to the booked rate
(x scale), and removing it leaves no tsdn flow or meter behind. A plan touching a switch that
is not connected is refused before anything is sent.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from mininet_tests.traffic import iperf3
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

from sdn_app.core.paths import PathFinder, PathRequest, Unbooked
from sdn_app.core.plans import (
    COOKIE_TAG,
    PRIORITY,
    FlowPlan,
    FlowSpec,
    Match,
    Step,
    StepKind,
    is_tsdn_cookie,
    plan_for,
    plan_steps,
)
from sdn_app.core.topology import Topology

RID = "0123456789abcdef0123456789abcdef"
G = 1_000_000_000
BOOKED = 5 * G // 2  # 2.5G nominal: 5 Mbit/s at ring8's default scale (0.002)




def wait_until(predicate, timeout: float, what: str):
    """Poll `predicate` until it returns something true; fail naming `what` at the deadline."""
    return wait_for(predicate, what, timeout, interval=0.1)


def ofctl(*args: str) -> str:
    done = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"ovs-ofctl {' '.join(args)} failed: {done.stdout}{done.stderr}"
    return done.stdout


def flows(bridge: str) -> list[dict[str, str]]:
    """The flow entries of `bridge` as dicts: cookie, n_packets, priority, match, actions."""
    out = []
    for line in ofctl("dump-flows", bridge).splitlines():
        line = line.strip()
        if not line.startswith("cookie="):
            continue
        head, _, actions = line.partition(" actions=")
        fields = dict(re.findall(r"(\w+)=([^,\s]+)", head))
        priority = re.search(r"priority=(\d+)", head)
        fields["priority"] = priority.group(1) if priority else "32768"
        fields["match"] = head.split(f"priority={fields['priority']}", 1)[-1].strip(",")
        fields["actions"] = actions
        out.append(fields)
    return out


def tsdn_flows(bridge: str) -> list[dict[str, str]]:
    return [f for f in flows(bridge) if is_tsdn_cookie(int(f["cookie"], 16))]


def meters(bridge: str) -> str:
    return ofctl("dump-meters", bridge)


def pings(host, ip: str, count: int = 1) -> bool:
    return host.pexec("ping", "-c", str(count), "-W", "1", "-i", "0.2", ip)[2] == 0


def dtn1_to_dtn3(topology: Topology, bandwidth: int = BOOKED) -> FlowPlan:
    route = PathFinder(topology, Unbooked(topology)).route(PathRequest("dtn1", "dtn3", bandwidth, 0, 3600))
    assert route.primary.switches == ("s1", "s2", "s3")
    return plan_for(topology, RID, "dtn1", "dtn3", route, bandwidth)


def test_switches_connect_and_get_default_deny_and_arp_to_controller(fabric, ring8):
    fab, net = fabric
    assert fab.connected() == {s.dpid for s in ring8.switches.values()}

    def base_flows(bridge: str) -> bool:
        got = {(f["priority"], f["match"], f["actions"]) for f in flows(bridge)}
        return {("0", "", "drop"), ("1", "arp", "CONTROLLER:65535")} <= got

    for name in ring8.switches:
        wait_until(lambda name=name: base_flows(net.switch(name).name), 10, f"the base flows on {name}")
    assert not pings(net.host("dtn1"), ring8.dtn("dtn3").ipv4), "ping got through without a plan (default deny)"


def test_plan_forwards_only_its_pair_meters_and_is_removed(fabric, ring8):
    fab, net = fabric
    dtn1, dtn3 = net.host("dtn1"), net.host("dtn3")
    ip3, ip4 = ring8.dtn("dtn3").ipv4, ring8.dtn("dtn4").ipv4
    bridges = {name: net.switch(name).name for name in ring8.switches}
    wait_until(lambda: all(flows(b) for b in bridges.values()), 10, "the base flows on every switch")
    assert not pings(dtn1, ip3), "ping dtn1 -> dtn3 got through before the plan"

    plan = dtn1_to_dtn3(ring8)
    assert fab.apply(plan_steps(None, plan)) is None

    # Barriers confirmed: the flows are there now, on exactly the route's switches.
    on = {name: tsdn_flows(bridge) for name, bridge in bridges.items()}
    assert {name for name, fl in on.items() if fl} == {"s1", "s2", "s3"}
    for name in ("s1", "s2", "s3"):
        assert len(on[name]) == len(plan.flows_on(name)), on[name]
        assert all(int(f["cookie"], 16) == plan.cookie for f in on[name])
    s1_meters = meters(bridges["s1"])
    kbps = round(BOOKED * net.scale / 1000)
    assert re.search(rf"meter=\d+ kbps burst bands=\s*type=drop rate={kbps} burst_size=\d+", s1_meters), \
        s1_meters

    # Ping works (the controller answers ARP); dtn4 stays unreachable.
    wait_until(lambda: pings(dtn1, ip3), 15, "ping dtn1 -> dtn3 through the plan")
    assert "02:00:00:00:00:03" in dtn1.cmd(f"ip neigh show {ip3}")
    assert not pings(dtn1, ip4, count=2), "ping dtn1 -> dtn4 got through a dtn1 -> dtn3 plan"

    # Counters of the plan's flows, both directions, grow on the route's switches.
    # (OVS folds datapath statistics into the flows' counters about once a second: poll.)
    def counters() -> dict[tuple[str, str], int]:
        return {(n, f["match"]): int(f["n_packets"]) for n in ("s1", "s2", "s3") for f in tsdn_flows(bridges[n])}

    before = counters()
    assert len(before) == len(plan.flows)
    assert pings(dtn1, ip3, count=3)
    # Every IPv4 flow carried the 3 pings; every ARP twin has carried the hosts' own ARP exchange
    # (ARP goes along the reserved hops, so it needs no controller).
    wait_until(lambda: all(n >= 1 if k[1].startswith("arp") else n >= before[k] + 3 for k, n in counters().items()),
               10, f"every IPv4 flow's counter to grow by 3 packets and every ARP flow to have some (from {before})")
    assert not any(tsdn_flows(bridges[n]) for n in bridges if n not in ("s1", "s2", "s3"))

    # The meter: a sender at twice the booked rate gets at most the booked rate (x scale),
    # over TCP (acks through the reverse meter) and UDP (what the meter lets through).
    booked_mbps = BOOKED * net.scale / 1e6
    for protocol in ("tcp", "udp"):
        received = iperf3(dtn1, dtn3, ip3, 2 * booked_mbps, udp=protocol == "udp")
        print(f"iperf3 {protocol} dtn1 -> dtn3, {2 * booked_mbps:g} Mbit/s offered, booked {booked_mbps:g} Mbit/s "
              f"x scale: received {received:.2f} Mbit/s")
        assert received <= 1.1 * booked_mbps, f"{protocol}: {received:.2f} Mbit/s passed a {booked_mbps:g} Mbit/s meter"
        assert received >= 0.5 * booked_mbps, f"{protocol}: only {received:.2f} Mbit/s of {booked_mbps:g} Mbit/s booked"

    # Removal: nothing of the reservation is left, and the pair is cut off again.
    assert fab.apply(plan_steps(plan, None)) is None
    assert not any(tsdn_flows(b) for b in bridges.values())
    assert "meter=" not in meters(bridges["s1"]) and "meter=" not in meters(bridges["s3"])
    assert not pings(dtn1, ip3, count=2), "ping dtn1 -> dtn3 got through after the plan was removed"


def test_a_plan_touching_a_disconnected_switch_is_refused_before_anything_is_sent(fabric, ring8):
    fab, net = fabric
    bridges = {name: net.switch(name).name for name in ring8.switches}
    subprocess.run(["ovs-vsctl", "--timeout=10", "del-br", bridges["s2"]], check=True, capture_output=True)
    wait_until(lambda: ring8.switches["s2"].dpid not in fab.connected(), 15, "s2 to disconnect")

    reason = fab.apply(plan_steps(None, dtn1_to_dtn3(ring8)))
    assert reason == "switch s2 (dpid 0x2) not connected"
    for name in ("s1", "s3"):
        assert not tsdn_flows(bridges[name]), f"{name} got flows of a refused plan"
        assert "meter=" not in meters(bridges[name]), f"{name} got a meter of a refused plan"


def test_a_step_the_switch_refuses_is_reported_with_its_error(fabric, ring8):
    fab, net = fabric
    bridge = net.switch("s1").name
    lost = FlowSpec(switch="s1", dpid=ring8.switches["s1"].dpid, priority=PRIORITY,
                    match=Match(in_port=3, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.2"), cookie=COOKIE_TAG | 1,
                    output=1, meter_id=777)
    reason = fab.apply([Step(StepKind.ADD_FLOW, ("s1",), lost), Step(StepKind.BARRIER, ("s1",))])
    assert reason is not None and reason.startswith("switch s1 refused a flow: OFPET_"), reason
    assert "meter:777" in reason, reason
    print(f"refusal: {reason}")
    assert not tsdn_flows(bridge)
    # The connection survives a refusal: the next steps go through.
    assert fab.apply(plan_steps(None, dtn1_to_dtn3(ring8))) is None
    assert len(tsdn_flows(bridge)) == 4  # both directions, each with its ARP twin
