"""OpenFlow bundles on real Open vSwitch: os-ken in the test process, ring8 in Mininet.

What must hold: with bundles on, each switch gets a round's flow and group changes in one
bundle that it commits (seen in its count of commits and on the wire with `ovs-ofctl snoop`);
with bundles off, none is sent. A change whose message a switch refuses, in the same round
and so the same bundle as good changes, fails alone with the refusal naming its step, while
the good changes get None and their flows and groups are on the switch, and nothing of the
refused change's round is left on that switch (its other flow of that round is absent). A
switch that refuses bundles (simulated: the bundle messages go out with an experimenter id
Open vSwitch does not know, and it answers OFPBRC_BAD_EXPERIMENTER) still gets every change,
through plain messages and barriers, and is not sent a bundle again while it stays
connected; each change's result is the one it gets without bundles.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mininet_tests.conftest import ring8_under_fabric
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

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
    plan_for,
    plan_steps,
)
from sdn_app.core.topology import Topology
from sdn_app.openflow import bundles

G = 10**9
MISSING_GROUP = 4242
UNKNOWN_EXPERIMENTER = 0x00DEAD00  # no experimenter id Open vSwitch knows


def ofctl(*args: str) -> str:
    done = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"ovs-ofctl {' '.join(args)} failed: {done.stdout}{done.stderr}"
    return done.stdout


def cookies(bridge: str) -> list[int]:
    """Cookies of the tsdn flows on `bridge`, one per flow."""
    found = (int(c, 16) for c in re.findall(r"cookie=(0x[0-9a-f]+)", ofctl("dump-flows", bridge)))
    return [c for c in found if c & COOKIE_TAG == COOKIE_TAG]


def group_ids(bridge: str) -> set[int]:
    return {int(g) for g in re.findall(r"group_id=(\d+)", ofctl("dump-groups", bridge))}


def pings(net, src: str, dst: str) -> bool:
    address = net.topology.dtns[dst].ipv4
    return " 0% packet loss" in net.host(src).cmd(f"ping -c 2 -i 0.2 -W 1 {address}")


def protected_plan(topology: Topology, rid: str, src: str, dst: str) -> FlowPlan:
    """A protected plan (fast-failover groups on the route's switches) as on an empty network."""
    route = PathFinder(topology, Unbooked(topology)).route(PathRequest(src, dst, 10 * G, 0, 3600, protect=True))
    return plan_for(topology, rid, src, dst, route, 10 * G, IdAllocator())


def s1_flow(topology: Topology, tag: int, *, group_id: int | None = None) -> FlowSpec:
    """A flow on s1 for addresses no DTN has (10.9.0.x), with cookie COOKIE_TAG | tag."""
    return FlowSpec(switch="s1", dpid=topology.switches["s1"].dpid, priority=PRIORITY, cookie=COOKIE_TAG | tag,
                    match=Match(in_port=1, ipv4_src=f"10.9.0.{tag}", ipv4_dst="10.9.0.254"),
                    output=None if group_id is not None else 2, group_id=group_id)


def one_phase(*flows: FlowSpec) -> list[Step]:
    """The flows added in one phase, closed by a barrier on their switches."""
    return [*(Step(StepKind.ADD_FLOW, (f.switch,), f) for f in flows),
            Step(StepKind.BARRIER, tuple(sorted({f.switch for f in flows})))]


@pytest.fixture
def start_fabric(network, ring8) -> Iterator[Callable[..., tuple[object, object]]]:
    """Factory: `start_fabric(bundles=...)` starts `ring8_under_fabric`; returns (fabric, network)."""
    with contextlib.ExitStack() as stack:
        yield lambda bundles=True: stack.enter_context(ring8_under_fabric(network, ring8, bundles))


class Snoop:
    """`ovs-ofctl snoop` on one bridge: every OpenFlow message between it and the controller, decoded."""

    def __init__(self, bridge: str, log: Path):
        self.log = log
        self._out = log.open("w")
        self._process = subprocess.Popen(["ovs-ofctl", "-O", "OpenFlow13", "snoop", bridge], stdout=self._out,
                                         stderr=subprocess.STDOUT)
        # The fabric polls port statistics every second: once one shows, the snoop is attached.
        wait_for(lambda: "OFPST_PORT" in self.text(), f"ovs-ofctl snoop {bridge} to show the port stats polls", 15)

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(10)
        self._out.close()


def test_a_refused_change_fails_alone_and_nothing_of_its_round_is_left_on_the_switch(start_fabric, ring8):
    fab, net = start_fabric(bundles=True)
    s1 = net.switch("s1").name
    good = protected_plan(ring8, "01" * 16, "dtn1", "dtn3")
    assert good.for_switch("s1").groups, "the protected plan must have a fast-failover group on s1"
    # One phase each, so all of them share s1's first round, and its bundle, with the plan's groups.
    refused = one_phase(s1_flow(ring8, 0x51), s1_flow(ring8, 0x52, group_id=MISSING_GROUP))
    other = one_phase(s1_flow(ring8, 0x61), s1_flow(ring8, 0x62))

    results = fab.apply_many([plan_steps(None, good), refused, other])

    assert results[0] is None and results[2] is None, results
    assert results[1] is not None and results[1].startswith(
        "switch s1 refused a flow: OFPET_BAD_ACTION/OFPBAC_BAD_OUT_GROUP"), results[1]
    assert f"group:{MISSING_GROUP}" in results[1], f"the refusal must name the refused step: {results[1]}"
    held = cookies(s1)
    assert COOKIE_TAG | 0x61 in held and COOKIE_TAG | 0x62 in held, "the good change's flows must be on s1"
    assert held.count(good.cookie) == len(good.flows_on("s1")), held
    assert {g.group_id for g in good.for_switch("s1").groups} <= group_ids(s1)
    assert COOKIE_TAG | 0x51 not in held, "the refused change's other flow of that round must not be applied"
    assert MISSING_GROUP not in group_ids(s1)
    assert fab.bundle_support().get("s1") is True
    committed = fab.bundles_committed()
    assert all(committed.get(name, 0) >= 1 for name in ("s1", "s2", "s3")), committed
    wait_for(lambda: pings(net, "dtn1", "dtn3"), "ping dtn1 -> dtn3 through the good plan", 15)


def test_bundles_are_committed_by_the_switches_and_seen_on_the_wire(start_fabric, ring8, tmp_path):
    fab, net = start_fabric(bundles=True)
    plan = protected_plan(ring8, "02" * 16, "dtn1", "dtn3")
    snoop = Snoop(net.switch("s2").name, tmp_path / "snoop-s2.txt")
    try:
        before = fab.bundles_committed()
        assert fab.apply(plan_steps(None, plan)) is None
        wait_for(lambda: "COMMIT_REPLY" in snoop.text(), "s2's commit reply in ovs-ofctl snoop", 10)
    finally:
        snoop.stop()
    wire = snoop.text()
    after = fab.bundles_committed()
    on_route = set(plan.switches)
    assert {"s1", "s2", "s3"} <= on_route
    for name in ring8.switches:
        grew = after.get(name, 0) - before.get(name, 0)
        assert (grew >= 1) if name in on_route else (grew == 0), (name, before, after)
    # s2's flows went in bundles: each flow mod on the wire is inside a bundle ADD (snoop prints
    # the ADD, then the message it carries).
    assert "type=OPEN_REQUEST" in wire and "type=COMMIT_REQUEST" in wire, wire[-3000:]
    lines = wire.splitlines()
    mods = [i for i, line in enumerate(lines) if line.startswith("OFPT_FLOW_MOD")]
    assert mods, wire[-3000:]
    assert all(lines[i - 2].startswith("ONFT_BUNDLE_ADD_MESSAGE") for i in mods), wire[-3000:]
    assert all(value is True for value in fab.bundle_support().values()) and "s2" in fab.bundle_support()
    held = cookies(net.switch("s2").name)
    assert held.count(plan.cookie) == len(plan.flows_on("s2"))


def test_with_bundles_off_no_bundle_is_sent(start_fabric, ring8, tmp_path):
    fab, net = start_fabric(bundles=False)
    plan = protected_plan(ring8, "03" * 16, "dtn1", "dtn3")
    snoop = Snoop(net.switch("s2").name, tmp_path / "snoop-s2.txt")
    try:
        assert fab.apply(plan_steps(None, plan)) is None
        wait_for(lambda: "OFPT_BARRIER_REPLY" in snoop.text() and "OFPT_FLOW_MOD" in snoop.text(),
                 "s2's flow mods and barrier reply in ovs-ofctl snoop", 10)
    finally:
        snoop.stop()
    assert "BUNDLE" not in snoop.text()
    assert fab.bundles_committed() == {} and fab.bundle_support() == {}
    assert cookies(net.switch("s2").name).count(plan.cookie) == len(plan.flows_on("s2"))
    wait_for(lambda: pings(net, "dtn1", "dtn3"), "ping dtn1 -> dtn3 through the plan", 15)


def test_a_switch_refusing_bundles_gets_plain_messages_and_no_bundle_again(start_fabric, ring8, monkeypatch):
    fab, net = start_fabric(bundles=True)
    s1 = net.switch("s1").name

    def unknown(make):
        def made(*args):
            msg = make(*args)
            msg.experimenter = UNKNOWN_EXPERIMENTER
            return msg
        return made

    with monkeypatch.context() as patched:  # bundles in an extension Open vSwitch does not speak
        for name in ("open_request", "add_message", "commit_request"):
            patched.setattr(bundles, name, unknown(getattr(bundles, name)))
        good = protected_plan(ring8, "04" * 16, "dtn1", "dtn3")
        refused = one_phase(s1_flow(ring8, 0x71), s1_flow(ring8, 0x72, group_id=MISSING_GROUP))
        results = fab.apply_many([plan_steps(None, good), refused])

    assert results[0] is None, results
    # Without bundles, the refusal is the same and the refused change's other flow stays applied.
    assert results[1] is not None and results[1].startswith(
        "switch s1 refused a flow: OFPET_BAD_ACTION/OFPBAC_BAD_OUT_GROUP"), results[1]
    assert f"group:{MISSING_GROUP}" in results[1], results[1]
    held = cookies(s1)
    assert held.count(good.cookie) == len(good.flows_on("s1")), held
    assert COOKIE_TAG | 0x71 in held
    support = fab.bundle_support()
    assert support.get("s1") is False and support.get("s2") is False, support
    assert fab.bundles_committed() == {}
    wait_for(lambda: pings(net, "dtn1", "dtn3"), "ping dtn1 -> dtn3 through the plan", 15)

    # With real bundles again, the switches that refused one are still not sent any.
    assert fab.apply(one_phase(s1_flow(ring8, 0x73))) is None
    assert COOKIE_TAG | 0x73 in cookies(s1)
    assert fab.bundles_committed() == {}
    assert fab.apply(plan_steps(good, None)) is None
    assert good.cookie not in cookies(s1)
