"""Reconciliation and batched applies on real Open vSwitch (ring8 in Mininet).

With os-ken in the test process: what a switch reports reads back as exactly the plans applied
to it (flows, meters through the emulation scale, fast-failover groups), so a reconciliation
of a right switch changes nothing; a flow in a shape tsdn never installs is removed; a batch
whose one change the switch refuses fails only that change.

With a real `tsdn controller` process: a switch that reconnects after losing a reservation's
flows and gaining a stale flow and a stale meter gets the flows back and loses the stale
entries; after a crash (kill -9), tampering and a restart, every switch holds exactly what the
plans say, and the ping of a reservation nobody touched never lost a packet.

A reconnect is forced by pointing the bridge at a dead port and back, not with
`ovs-vsctl del-controller`/`set-controller`: Open vSwitch flushes a bridge's flows and meters
when it goes from having a controller configured to none, or from none to one (seen on 3.1.0).
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
import subprocess
import time

import pytest

from benchmarks.report import free_port
from mininet_tests.conftest import ALL_RING8_SWITCHES as ALL_SWITCHES
from mininet_tests.controlled import DEADLINE, connected_bridges, pings, tsdn, tsdn_flows
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

from sdn_app.core.clock import FakeClock
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathFinder, PathRequest, Unbooked
from sdn_app.core.plans import (
    COOKIE_TAG,
    PRIORITY,
    FlowPlan,
    FlowSpec,
    IdAllocator,
    Match,
    Step,
    StepKind,
    SwitchPlan,
    plan_for,
    plan_steps,
)
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.openflow.encoder import held_meter

G = 10**9
STALE_COOKIE = COOKIE_TAG | 0xBAD




def ofctl(*args: str) -> str:
    done = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"ovs-ofctl {' '.join(args)} failed: {done.stdout}{done.stderr}"
    return done.stdout


def meter_ids(bridge: str) -> set[int]:
    return {int(m) for m in re.findall(r"meter=(\d+)", ofctl("dump-meters", bridge))}


def group_ids(bridge: str) -> set[int]:
    return {int(g) for g in re.findall(r"group_id=(\d+)", ofctl("dump-groups", bridge))}


def cookies(bridge: str) -> list[int]:
    return [int(re.search(r"cookie=(0x[0-9a-f]+)", line).group(1), 16) for line in tsdn_flows(bridge)]


def make_plans(topology: Topology, *pairs: tuple[str, str, str, bool]) -> list[FlowPlan]:
    """Plans for (reservation id, src, dst, protect), ids from one allocator, routes as an empty network's."""
    ids, out = IdAllocator(), []
    for rid, src, dst, protect in pairs:
        route = PathFinder(topology, Unbooked(topology)).route(PathRequest(src, dst, 10 * G, 0, 3600, protect=protect))
        out.append(plan_for(topology, rid, src, dst, route, 10 * G, ids))
    return out


def merged(switch: str, plans: list[FlowPlan]) -> SwitchPlan:
    parts = [p.for_switch(switch) for p in plans]
    return SwitchPlan(tuple(f for p in parts for f in p.flows), tuple(m for p in parts for m in p.meters),
                      tuple(g for p in parts for g in p.groups))


def add_stale_entries(bridge: str) -> None:
    """A tsdn-cookie flow and a meter that no reservation owns."""
    ofctl("add-flow", bridge, f"cookie={STALE_COOKIE:#x},priority={PRIORITY},ip,in_port=1,nw_src=10.9.9.9,"
                              "nw_dst=10.9.9.8,actions=output:2")
    ofctl("add-meter", bridge, "meter=999,kbps,burst,band=type=drop,rate=1000,burst_size=1000")


# --- the fabric in this process ----------------------------------------------------------------


def test_a_switch_reads_back_as_the_plans_applied_and_a_right_switch_is_left_alone(fabric, ring8):
    fab, net = fabric
    plans = make_plans(ring8, ("01" * 16, "dtn1", "dtn3", True), ("02" * 16, "dtn5", "dtn7", False))
    assert fab.apply_many([plan_steps(None, p) for p in plans]) == [None, None]
    for switch in ring8.switches:
        want = merged(switch, plans)
        held, unreadable = fab.read(switch)
        assert unreadable == []
        assert set(held.flows) == set(want.flows), switch
        assert set(held.groups) == set(want.groups), switch
        reported = {m.meter_id: (m.rate_bps, m.burst_bits) for m in held.meters}
        assert reported == {m.meter_id: (held_meter(m, fab.scale).rate_bps, held_meter(m, fab.scale).burst_bits)
                            for m in want.meters}, switch
        done = fab.reconcile(switch, want)
        assert done.done.steps == () and done.summary() == "nothing to change", switch
    assert pings(net, "dtn1", "dtn3") and pings(net, "dtn5", "dtn7")


def test_label_switched_entries_read_back_as_applied_and_carry_traffic(fabric, ring8, tmp_path):
    """The label design's entries (VLAN push, set and pop, two tables, metadata, fast-failover
    buckets that push a label) as Open vSwitch reports them decode to the specs the core wants."""
    fab, net = fabric
    clock = FakeClock(time.time())
    ledger = Ledger(ring8.capacities(), tmp_path / "labels.db", clock)
    book = ReservationBook(ring8, ledger, clock, provisioning=True)
    for src, dst, protect in (("dtn1", "dtn3", True), ("dtn5", "dtn7", False)):
        book.create(Principal("test", Role.ADMIN), PathRequest(src, dst, 10 * G, clock.now(), clock.now() + 3600,
                                                               protect=protect))
    changes = book.take_changes()
    assert any(c.reservation_id.startswith("path-") for c in changes)
    for change in changes:  # paths first, as the provisioner orders them
        assert fab.apply(change.steps) is None, change.reservation_id
    for switch in ring8.switches:
        want = book.switch_plan(switch)
        found, unreadable = fab.read(switch)
        assert unreadable == []
        assert set(found.flows) == set(want.flows), switch
        assert set(found.groups) == set(want.groups), switch
        done = fab.reconcile(switch, want)
        assert done.done.steps == () and done.summary() == "nothing to change", switch
    assert pings(net, "dtn1", "dtn3") and pings(net, "dtn5", "dtn7")
    ledger.close()


def test_reconcile_puts_back_what_is_missing_and_removes_any_stale_tsdn_flow(fabric, ring8):
    fab, net = fabric
    (plan,) = make_plans(ring8, ("01" * 16, "dtn1", "dtn3", False))
    assert fab.apply(plan_steps(None, plan)) is None
    bridge = net.switch("s2").name
    ofctl("del-flows", bridge, f"cookie={plan.cookie:#x}/-1")
    add_stale_entries(bridge)
    # A tsdn-cookie flow whose match no plan can express: deleted exactly as the switch reports it.
    ofctl("add-flow", bridge, f"cookie={STALE_COOKIE + 1:#x},priority=5,tcp,tp_dst=22,actions=drop")
    assert not pings(net, "dtn1", "dtn3")

    done = fab.reconcile("s2", merged("s2", [plan]))
    assert done.done.count(StepKind.ADD_FLOW) == len(plan.flows_on("s2"))
    assert len(done.unreadable) == 1 and "tcp_dst" in done.unreadable[0]
    assert sorted(cookies(bridge)) == [plan.cookie] * len(plan.flows_on("s2"))
    assert 999 not in meter_ids(bridge)
    base = ofctl("dump-flows", bridge)
    assert "priority=0" in base and "arp" in base, "the base flows (cookie 0) must stay"
    wait_for(lambda: pings(net, "dtn1", "dtn3"), "ping dtn1 -> dtn3 after reconciliation", 15)


def test_a_batch_fails_only_the_change_the_switch_refuses(fabric, ring8):
    fab, net = fabric
    good, other = make_plans(ring8, ("01" * 16, "dtn1", "dtn3", False), ("02" * 16, "dtn5", "dtn7", False))
    lost = FlowSpec(switch="s1", dpid=ring8.switches["s1"].dpid, priority=PRIORITY, cookie=COOKIE_TAG | 7,
                    match=Match(in_port=3, ipv4_src="10.0.0.1", ipv4_dst="10.0.0.2"), output=1, meter_id=777)
    refused = [Step(StepKind.ADD_FLOW, ("s1",), lost), Step(StepKind.BARRIER, ("s1",)),
               Step(StepKind.ADD_FLOW, ("s1",), dataclasses.replace(lost, meter_id=None))]
    results = fab.apply_many([plan_steps(None, good), refused, plan_steps(None, other)])
    assert results[0] is None and results[2] is None, results
    assert results[1] is not None and results[1].startswith("switch s1 refused a flow: OFPET_"), results
    assert "meter:777" in results[1]
    s1 = cookies(net.switch("s1").name)
    assert COOKIE_TAG | 7 not in s1, "a refused change must stop at its failed phase"
    assert s1.count(good.cookie) == len(good.flows_on("s1"))
    wait_for(lambda: pings(net, "dtn1", "dtn3") and pings(net, "dtn5", "dtn7"), "both good plans to carry ping", 15)


# --- a real controller process -------------------------------------------------------------------


ALL_TSDN = "cookie=0x75d5000000000000/0xffff000000000000"  # every tsdn flow: reservations' and paths'


def held(net) -> dict[str, tuple[list[int], set[int], set[int]]]:
    """Per switch: the cookies of its tsdn flows (sorted), its meter ids and its group ids."""
    out = {}
    for switch in ALL_SWITCHES:
        bridge = net.topo.mn_name(switch)
        out[switch] = (sorted(cookies(bridge)), meter_ids(bridge), group_ids(bridge))
    return out


def wait_logged(controller, text: str, since: int = 0) -> None:
    """Wait until the controller has logged a line containing `text` (among its lines from
    number `since` on); fail showing its reconciliation lines."""
    try:
        wait_for(lambda: any(text in line for line in controller.log[since:]), f"{text!r} in the controller's log",
                 10)
    except AssertionError as missing:
        lines = "".join(line for line in controller.log[since:] if "reconcil" in line)
        raise AssertionError(f"{missing}; its reconciliation lines:\n{lines}") from None


def request(env, src: str, dst: str) -> dict:
    made = tsdn(env, "path", "request", src, dst, "-b", "10G", "--json")
    assert made.returncode == 0, made.stderr
    reservation = json.loads(made.stdout)
    assert reservation["state"] == "ACTIVE", reservation
    return reservation


def test_a_reconnecting_switch_gets_its_flows_back_and_loses_stale_ones(controlled):
    net, env, controller = controlled
    made = request(env, "dtn1", "dtn3")
    assert made["path"]["route"][1:-1] == ["s1", "s2", "s3"]
    want = held(net)  # as the controller installed it (the two designs differ; tests/ check both)
    assert want["s2"][0], "nothing on s2, a switch of the reservation's path"
    bridge = net.topo.mn_name("s2")
    target = subprocess.run(["ovs-vsctl", "get-controller", bridge], capture_output=True, text=True,
                            timeout=10, check=True).stdout.split()
    # Not del-controller: Open vSwitch flushes every flow and meter of a bridge that goes from having
    # a controller configured to none (and back); pointed at a dead port, s2 just loses its connection.
    subprocess.run(["ovs-vsctl", "set-controller", bridge, f"tcp:127.0.0.1:{free_port()}"], check=True, timeout=10)
    wait_for(lambda: "s2" not in connected_bridges(), "s2 to disconnect", DEADLINE)
    ofctl("del-flows", bridge, ALL_TSDN)
    add_stale_entries(bridge)
    assert not pings(net, "dtn1", "dtn3")

    subprocess.run(["ovs-vsctl", "set-controller", bridge, *target], check=True, timeout=10)
    wait_for(lambda: "s2" in connected_bridges(), "s2 to reconnect", DEADLINE)
    wait_for(lambda: held(net) == want, "s2 to hold exactly what it held, nothing stale", DEADLINE)
    assert STALE_COOKIE not in cookies(bridge)
    wait_for(lambda: pings(net, "dtn1", "dtn3"), "ping dtn1 -> dtn3 after reconciliation", 15)
    wait_logged(controller, f"s2: reconciled: added {len(want['s2'][0])} missing flows, removed 1 stale flow, "
                            "removed 1 stale meter")


def test_a_restart_after_a_crash_reconciles_every_switch_and_traffic_never_stops(controlled):
    net, env, controller = controlled
    kept = request(env, "dtn1", "dtn3")
    request(env, "dtn5", "dtn7")
    want = held(net)
    assert want["s6"][0], "nothing on s6, a switch of dtn5 -> dtn7"
    dtn1 = net.host("dtn1")
    ping = dtn1.popen(["ping", "-i", "0.1", "-W", "1", net.topology.dtns["dtn3"].ipv4])
    try:
        wait_for(lambda: pings(net, "dtn5", "dtn7"), "the second reservation to carry ping", 15)
        controller.kill()
        wait_for(lambda: not connected_bridges(), "the switches to notice the controller is gone", DEADLINE)
        # While it is down: the second reservation loses its flows on s6, s2 (on the untouched
        # reservation's path) gains a stale flow and a stale meter, s4 a stale group.
        ofctl("del-flows", net.topo.mn_name("s6"), ALL_TSDN)
        add_stale_entries(net.topo.mn_name("s2"))
        ofctl("add-group", net.topo.mn_name("s4"), "group_id=4242,type=ff,bucket=watch_port:1,output:1")
        assert not pings(net, "dtn5", "dtn7")

        since = len(controller.log)
        controller.start()
        wait_for(lambda: connected_bridges() >= ALL_SWITCHES, "all 8 switches to reconnect", DEADLINE)
        wait_for(lambda: held(net) == want, "every switch to hold exactly what it held, nothing stale", DEADLINE)
        wait_for(lambda: pings(net, "dtn5", "dtn7"), "the second reservation to carry ping again", 15)
        for switch in ("s1", "s3", "s5", "s7"):  # right already, meters included: nothing was touched
            wait_logged(controller, f"{switch}: reconciled: nothing to change", since)
        wait_logged(controller, f"s6: reconciled: added {len(want['s6'][0])} missing flows", since)
        shown = json.loads(tsdn(env, "path", "show", kept["id"], "--json").stdout)
        assert shown["state"] == "ACTIVE"
    finally:
        ping.send_signal(signal.SIGINT)
        out = ping.communicate(timeout=10)[0]
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
    sent, received = (int(n) for n in re.search(r"(\d+) packets transmitted, (\d+) received", out).groups())
    assert sent >= 20, out
    assert received == sent, f"the untouched reservation lost {sent - received} of {sent} pings:\n{out}"
