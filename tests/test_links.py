"""Link verification (sdn_app.core.links): port status, LLDP silence, switch connections, mismatches.

`Rig` plays the OpenFlow adapter's part with no threads and a clock in plain numbers: every
round (one LLDP interval) it sends LLDP out of `lldp_targets()`, delivers each frame along
the real wiring (the topology's own, unless a test miswires or cuts it) and ticks the monitor.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdn_app.core.links import LinkChange, LinkMonitor, LinkState, Mismatch
from sdn_app.core.topology import Topology
from topologies import builtin_topology


def changes_only(events: list) -> list[LinkChange]:
    """The link changes among `events`."""
    return [e for e in events if isinstance(e, LinkChange)]

Port = tuple[int, int]  # (dpid, port)


def load(name: str) -> Topology:
    return Topology.load(builtin_topology(name))


RING8 = load("ring8")
SC16 = load("sc16")


def wiring_of(topology: Topology) -> dict[Port, Port]:
    """Each link port -> the port at the other end of its cable, as the topology says."""
    dpid = {s.name: s.dpid for s in topology.spec.switches}
    wires: dict[Port, Port] = {}
    for link in topology.spec.links:
        a, b = (dpid[link.a], link.a_port), (dpid[link.b], link.b_port)
        wires[a], wires[b] = b, a
    return wires


class Rig:
    """A monitor, the real wiring, a clock, and every event the monitor returned."""

    def __init__(self, topology: Topology = RING8, wiring: dict[Port, Port] | None = None):
        self.topology = topology
        self.monitor = LinkMonitor(topology, lldp_interval=1.0, silence_timeout=3.5)
        self.wiring = dict(wiring_of(topology) if wiring is None else wiring)
        self.lost: set[Port] = set()  # frames sent out of these ports never arrive
        self.connected: set[int] = set()
        self.now = 0.0
        self.events: list[LinkChange | Mismatch] = []

    def take(self) -> list[LinkChange | Mismatch]:
        events, self.events = self.events, []
        return events

    def connect(self, *names: str, down: tuple[int, ...] = ()) -> None:
        """Connect switches (all when none named), their port descriptions with `down` ports down."""
        for switch in [self.topology.switches[n] for n in names] or self.topology.spec.switches:
            self.events += self.monitor.ports_described(switch.dpid, {p: p not in down for p in switch.ports},
                                                        self.now)
            self.events += self.monitor.switch_connected(switch.dpid, self.now)
            self.connected.add(switch.dpid)

    def disconnect(self, name: str) -> None:
        dpid = self.topology.switches[name].dpid
        self.connected.discard(dpid)
        self.events += self.monitor.switch_disconnected(dpid, self.now)

    def port(self, end: str, up: bool, **kwargs) -> list[LinkChange | Mismatch]:
        """Port status of `end` ("s2:1"); returns (and records) its events."""
        name, _, port = end.partition(":")
        events = self.monitor.port_state(self.topology.switches[name].dpid, int(port), up, self.now, **kwargs)
        self.events += events
        return events

    def round(self) -> None:
        """One LLDP interval: send on every target, deliver along the wiring, tick."""
        self.now += 1.0
        for dpid, port in self.monitor.lldp_targets():
            self.monitor.lldp_sent(dpid, port, self.now)
            far = self.wiring.get((dpid, port))
            if far is not None and (dpid, port) not in self.lost and far[0] in self.connected:
                self.events += self.monitor.lldp_seen(dpid, port, far[0], far[1], self.now)
        self.events += self.monitor.tick(self.now)

    def rounds(self, n: int) -> None:
        for _ in range(n):
            self.round()

    def state(self, link: str) -> LinkState:
        return self.monitor.status(self.now).link(link).state

    def reason(self, link: str) -> str:
        return self.monitor.status(self.now).link(link).reason

    def end(self, label: str) -> Port:
        name, _, port = label.partition(":")
        return self.topology.switches[name].dpid, int(port)


@pytest.fixture
def rig() -> Rig:
    """ring8, every switch connected, every port up, every link verified by LLDP."""
    rig = Rig()
    rig.connect()
    rig.rounds(2)
    assert rig.take() == []
    return rig


# --- no evidence, verification --------------------------------------------------------------


def test_without_evidence_every_link_counts_as_up():
    rig = Rig()
    status = rig.monitor.status(0.0)
    assert {link.state for link in status.links} == {LinkState.UNKNOWN}
    assert all(link.up and rig.monitor.is_up(link.name) for link in status.links)
    assert "not connected yet" in status.link("s1-s2").reason
    rig.connect()
    rig.wiring = {}  # LLDP goes nowhere: no evidence either way, for as long as it lasts
    rig.rounds(20)
    assert rig.take() == []
    status = rig.monitor.status(rig.now)
    assert {link.state for link in status.links} == {LinkState.UNVERIFIED}
    assert status.link("s1-s2").reason == "no LLDP heard on it yet"
    assert status.link("s1-s2").lldp_age_ab is None and status.link("s1-s2").lldp_age_ba is None
    assert all(rig.monitor.is_up(name) for name in RING8.links)


def test_lldp_both_ways_verifies_every_ring_link(rig):
    status = rig.monitor.status(rig.now)
    assert [link.name for link in status.links] == list(RING8.links)
    assert {link.state for link in status.links} == {LinkState.UP}
    s1_s2 = status.link("s1-s2")
    assert (s1_s2.a, s1_s2.b) == ("s1:1", "s2:2")
    assert s1_s2.reason == "verified by LLDP both ways"
    assert 0 <= s1_s2.lldp_age_ab < 1 and 0 <= s1_s2.lldp_age_ba < 1
    assert status.mismatches == ()
    assert [(s.name, s.connected) for s in status.switches] == [(f"s{i}", True) for i in range(1, 9)]


def test_lldp_is_sent_on_link_ports_only_never_towards_dtns():
    rig = Rig()
    assert rig.monitor.lldp_targets() == []  # nothing connected
    rig.connect("s1", "s2")
    assert sorted(rig.monitor.lldp_targets()) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert rig.port("s1:3", False) == []  # dtn1's access port: not watched
    assert rig.monitor.down_links() == []


def test_lldp_heard_one_way_only_leaves_the_link_unverified_and_up():
    rig = Rig()
    rig.connect()
    rig.lost.add(rig.end("s2:1"))  # s2-s3: frames from s2 never reach s3
    rig.rounds(10)
    assert rig.take() == []
    assert rig.state("s2-s3") is LinkState.UNVERIFIED
    assert rig.reason("s2-s3") == "LLDP heard from s3:2 on s2:1, none yet from s2:1 on s3:2"
    assert rig.monitor.is_up("s2-s3")


# --- port status ----------------------------------------------------------------------------


def test_a_port_going_down_takes_its_link_down_at_once_and_once(rig):
    events = rig.port("s2:1", False)
    assert events == [LinkChange("s2-s3", False, "port s2:1 went down (port status)")]
    assert rig.port("s2:1", False) == []
    assert rig.port("s3:2", False) == []  # the other end too: still the same transition
    assert (2, 1) not in rig.monitor.lldp_targets() and (3, 2) not in rig.monitor.lldp_targets()
    rig.rounds(6)
    assert rig.take() == [events[0]]
    assert rig.state("s2-s3") is LinkState.DOWN
    assert rig.reason("s2-s3").startswith("port s2:1 went down (port status)")
    assert {link.name for link in rig.monitor.status(rig.now).links if link.state is LinkState.UP} == \
        set(RING8.links) - {"s2-s3"}
    assert rig.monitor.down_links() == [events[0]]
    assert not rig.monitor.is_up("s2-s3")


def test_a_link_down_by_port_comes_up_when_ports_are_up_and_lldp_is_heard_again(rig):
    rig.port("s2:1", False)
    rig.take()
    rig.now += 0.5
    assert rig.port("s2:1", True) == []  # ports up is not enough: LLDP was heard on it before
    assert rig.state("s2-s3") is LinkState.DOWN
    assert "waiting for LLDP" in rig.reason("s2-s3")
    rig.round()
    assert rig.take() == [LinkChange("s2-s3", True, "LLDP heard again")]
    assert rig.state("s2-s3") is LinkState.UP
    rig.rounds(10)
    assert rig.take() == []  # no flapping afterwards


def test_a_link_never_heard_comes_back_up_with_its_ports():
    rig = Rig(wiring={})
    rig.connect()
    assert rig.port("s4:1", False) == [LinkChange("s4-s5", False, "port s4:1 went down (port status)")]
    assert rig.port("s4:1", True) == [LinkChange("s4-s5", True, "ports up again (no LLDP heard on this link yet)")]
    assert rig.state("s4-s5") is LinkState.UNVERIFIED


def test_a_port_down_in_the_port_description_and_a_removed_port():
    rig = Rig()
    rig.connect("s3", down=(2,))
    rig.connect("s1", "s2", "s4", "s5", "s6", "s7", "s8")
    assert changes_only(rig.take()) == [LinkChange("s2-s3", False, "port s3:2 is down (port description)")]
    rig.round()
    assert rig.port("s6:1", False, removed=True) == [LinkChange("s6-s7", False, "port s6:1 was removed (port status)")]


def test_a_port_missing_from_the_port_description_is_a_mismatch_until_it_appears():
    rig = Rig()
    described = {1: True, 3: True}  # s5 without port 2 (link s4-s5)
    events = rig.monitor.ports_described(5, described, 0.0)
    assert events == [Mismatch("s5:2", "port 2 for link s4-s5", "the switch has no such port",
                               "switch s5 has no port 2, which link s4-s5 uses in topology ring8", 0.0, 0.0)]
    assert rig.monitor.ports_described(5, described, 1.0) == []  # once per observation
    assert [m.at for m in rig.monitor.status(100.0).mismatches] == ["s5:2"]  # lasts while the switch says so
    assert rig.monitor.is_up("s4-s5")  # a mismatch takes no link down
    assert rig.monitor.ports_described(5, {1: True, 2: True, 3: True}, 101.0) == []
    assert rig.monitor.status(101.0).mismatches == ()


# --- LLDP silence ---------------------------------------------------------------------------


def test_lldp_silence_takes_a_heard_link_down_after_the_timeout_and_lldp_brings_it_back(rig):
    rig.lost |= {rig.end("s2:1"), rig.end("s3:2")}  # a dead fibre whose ports stay up
    cut_at = rig.now
    rig.rounds(3)
    assert rig.take() == [], "down before silence_timeout"
    rig.round()
    assert rig.take() == [LinkChange("s2-s3", False, "no LLDP from s2:1 on s3:2 for 3.5s")]
    assert rig.now - cut_at >= 3.5
    rig.rounds(5)
    assert rig.take() == []
    status = rig.monitor.status(rig.now)
    assert status.link("s2-s3").state is LinkState.DOWN and status.link("s2-s3").lldp_age_ab > 3.5
    assert {link.name for link in status.links if link.state is not LinkState.UP} == {"s2-s3"}
    rig.lost.clear()
    rig.round()
    assert rig.take() == [LinkChange("s2-s3", True, "LLDP heard again")]
    assert rig.state("s2-s3") is LinkState.UP


def test_silence_in_one_direction_is_enough_and_the_other_direction_does_not_bring_it_back(rig):
    rig.lost.add(rig.end("s3:2"))  # s3 -> s2 lost, s2 -> s3 fine
    rig.rounds(4)
    assert rig.take() == [LinkChange("s2-s3", False, "no LLDP from s3:2 on s2:1 for 3.5s")]
    rig.rounds(5)
    assert rig.take() == []
    assert rig.state("s2-s3") is LinkState.DOWN
    rig.lost.clear()
    rig.round()
    assert rig.take() == [LinkChange("s2-s3", True, "LLDP heard again")]


def test_silence_counts_only_while_lldp_is_being_sent():
    rig = Rig()
    rig.connect()
    rig.rounds(2)
    rig.now += 30  # the sender stalled: nothing sent, nothing heard
    assert rig.monitor.tick(rig.now) == []
    rig.round()  # it resumes and the frames come back
    rig.rounds(5)
    assert rig.take() == []
    assert {link.state for link in rig.monitor.status(rig.now).links} == {LinkState.UP}


def test_a_disconnected_switch_takes_no_link_down_and_its_links_are_unknown(rig):
    rig.disconnect("s2")
    rig.rounds(10)  # s1 and s3 keep sending towards s2; nothing comes back
    assert rig.take() == []
    status = rig.monitor.status(rig.now)
    for name in ("s1-s2", "s2-s3"):
        assert status.link(name).state is LinkState.UNKNOWN
        assert status.link(name).reason == \
            "switch s2 disconnected: counted as up (a fail-secure switch keeps forwarding)"
        assert rig.monitor.is_up(name)
    assert {link.state for link in status.links if link.name not in ("s1-s2", "s2-s3")} == {LinkState.UP}
    s2 = next(s for s in status.switches if s.name == "s2")
    assert (s2.connected, s2.since) == (False, 2.0)
    assert (2, 1) not in rig.monitor.lldp_targets()


def test_a_reconnected_switch_is_reverified_without_a_false_down(rig):
    rig.disconnect("s2")
    rig.rounds(10)
    rig.connect("s2")
    assert rig.state("s1-s2") is LinkState.UNVERIFIED  # the old LLDP is from before the reconnect
    rig.round()
    assert rig.state("s1-s2") is LinkState.UP
    rig.lost |= {rig.end("s2:2"), rig.end("s1:1")}
    rig.rounds(4)
    assert rig.take() == [LinkChange("s1-s2", False, "no LLDP from s1:1 on s2:2 for 3.5s")]


def test_a_down_link_stays_down_while_a_switch_is_away(rig):
    rig.port("s2:1", False)
    rig.disconnect("s3")
    rig.rounds(5)
    assert changes_only(rig.take()) == [LinkChange("s2-s3", False, "port s2:1 went down (port status)")]
    assert rig.state("s2-s3") is LinkState.DOWN
    assert rig.reason("s2-s3") == "port s2:1 went down (port status) (switch s3 disconnected)"


def test_a_listener_that_starts_late_gets_the_links_already_down(rig):
    rig.port("s7:1", False)
    rig.lost |= {rig.end("s4:1"), rig.end("s5:2")}
    rig.rounds(4)
    assert sorted(rig.monitor.down_links(), key=lambda c: c.link) == [
        LinkChange("s4-s5", False, "no LLDP from s4:1 on s5:2 for 3.5s"),
        LinkChange("s7-s8", False, "port s7:1 went down (port status)"),
    ]


# --- mismatches -----------------------------------------------------------------------------


def test_lldp_on_a_dtn_port_is_a_mismatch_reported_once_while_it_lasts():
    # real cabling: s2:1 goes to s3:3, where the file puts dtn3; s3:2 goes to dtn3
    wiring = wiring_of(RING8)
    del wiring[(3, 2)]
    wiring[(2, 1)] = (3, 3)
    rig = Rig(wiring=wiring)
    rig.connect()
    rig.rounds(6)
    mismatches = [e for e in rig.take() if isinstance(e, Mismatch)]
    assert len(mismatches) == 1
    m = mismatches[0]
    assert (m.at, m.expected, m.observed) == ("s3:3", "DTN dtn3", "LLDP from s2:1")
    assert m.message == "wiring mismatch at s3:3: topology ring8 attaches DTN dtn3 there, but LLDP from s2:1 " \
                        "arrives there"
    status = rig.monitor.status(rig.now)
    assert [x.at for x in status.mismatches] == ["s3:3"] and status.mismatches[0].last_seen > m.first_seen
    assert status.link("s2-s3").state is LinkState.UNVERIFIED  # never heard, so never down
    assert rig.monitor.is_up("s2-s3")
    rig.wiring = wiring_of(RING8)  # recabled as the file says
    rig.rounds(5)
    assert rig.take() == []
    assert rig.monitor.status(rig.now).mismatches == ()
    assert rig.state("s2-s3") is LinkState.UP
    rig.wiring = wiring
    rig.round()
    assert [e.at for e in rig.take() if isinstance(e, Mismatch)] == ["s3:3"], "back after it lapsed: reported again"


def test_crossed_cables_name_the_expected_and_the_observed_end():
    wiring = wiring_of(RING8)  # s1:1 and s3:1 swapped: s1:1 <-> s4:2, s3:1 <-> s2:2
    wiring[(1, 1)], wiring[(4, 2)] = (4, 2), (1, 1)
    wiring[(3, 1)], wiring[(2, 2)] = (2, 2), (3, 1)
    rig = Rig(wiring=wiring)
    rig.connect()
    rig.rounds(3)
    found = {m.at: m for m in rig.take() if isinstance(m, Mismatch)}
    assert set(found) == {"s4:2", "s1:1", "s2:2", "s3:1"}
    assert (found["s4:2"].expected, found["s4:2"].observed) == ("s3:1 (link s3-s4)", "LLDP from s1:1")
    assert found["s4:2"].message == "wiring mismatch at s4:2: topology ring8 connects it to s3:1 (link s3-s4), " \
                                    "but LLDP from s1:1 arrives there"
    assert {link.state for link in rig.monitor.status(rig.now).links
            if link.name in ("s1-s2", "s3-s4")} == {LinkState.UNVERIFIED}


def test_a_verified_link_recabled_elsewhere_goes_down_by_silence_not_by_the_mismatch(rig):
    rig.wiring[(2, 1)], rig.wiring[(3, 3)] = (3, 3), (2, 1)
    del rig.wiring[(3, 2)]
    rig.round()
    assert [type(e) for e in rig.take()] == [Mismatch]
    assert rig.monitor.is_up("s2-s3")
    rig.rounds(3)
    assert changes_only(rig.take()) == [LinkChange("s2-s3", False, "no LLDP from s2:1 on s3:2 for 3.5s")]


def test_unknown_switches_and_ports_never_crash():
    rig = Rig()
    rig.connect()
    assert rig.monitor.port_state(0x63, 1, False, 1.0) == []
    assert rig.monitor.port_state(2, 99, False, 1.0) == []
    assert rig.monitor.ports_described(0x63, {1: True}, 1.0) == []
    rig.monitor.lldp_sent(0x63, 1, 1.0)
    rig.monitor.lldp_sent(2, 99, 1.0)
    assert rig.monitor.switch_disconnected(0x63, 1.0) == []

    events = rig.monitor.lldp_seen(0x63, 1, 2, 2, 1.0)
    assert [(m.at, m.expected, m.observed) for m in events] == [
        ("s2:2", "s1:1 (link s1-s2)", "LLDP from dpid 0x63 port 1, a switch not in topology ring8")]
    events = rig.monitor.lldp_seen(1, 1, 0x63, 4, 1.0)
    assert [(m.at, m.expected) for m in events] == [("dpid 0x63 port 4", "nothing: dpid 0x63 is not in topology ring8")]
    events = rig.monitor.lldp_seen(1, 1, 2, 7, 1.0)
    assert [(m.at, m.expected) for m in events] == [("s2:7", "nothing (switch s2 has no port 7 in the topology)")]
    events = rig.monitor.lldp_seen(1, 1, 1, 2, 1.0)  # looped back onto its own switch
    assert [(m.at, m.expected) for m in events] == [("s1:2", "s8:1 (link s8-s1)")]

    events = rig.monitor.switch_connected(0x63, 1.0)
    assert [(m.at, m.observed) for m in events] == [("dpid 0x63", "a switch connected with it")]
    assert rig.monitor.switch_connected(0x63, 2.0) == []
    assert "dpid 0x63" in [m.at for m in rig.monitor.status(50.0).mismatches]  # while it stays connected
    rig.monitor.switch_disconnected(0x63, 51.0)
    assert rig.monitor.status(52.0).mismatches == ()  # the LLDP ones lapsed, the switch left
    assert all(rig.monitor.is_up(name) for name in RING8.links)
    with pytest.raises(KeyError, match="no link 'nope'"):
        rig.monitor.status(1.0).link("nope")


def test_timeouts_that_cannot_work_are_refused():
    with pytest.raises(ValueError, match="silence_timeout"):
        LinkMonitor(RING8, lldp_interval=1.0, silence_timeout=1.0)
    with pytest.raises(ValueError, match="lldp_interval must be positive"):
        LinkMonitor(RING8, lldp_interval=0, silence_timeout=3)


# --- sc16 -----------------------------------------------------------------------------------


def test_sc16_every_link_verified_and_one_cut_affects_only_that_link():
    rig = Rig(SC16)
    rig.connect()
    rig.rounds(2)
    assert rig.take() == []
    status = rig.monitor.status(rig.now)
    assert len(status.links) == len(SC16.links) == 24
    assert {link.state for link in status.links} == {LinkState.UP}
    targets = rig.monitor.lldp_targets()
    assert len(targets) == 48 and (0x1601, 21) not in targets  # no LLDP towards caltech-a-dtn1
    assert rig.port("caltech-b:1", False) == [LinkChange("tbit-tcp", False, "port caltech-b:1 went down (port status)")]
    rig.take()
    rig.lost |= {rig.end("scinet:27"), rig.end("amlight-miami:1")}
    rig.rounds(4)
    assert rig.take() == [LinkChange("wan-miami", False, "no LLDP from scinet:27 on amlight-miami:1 for 3.5s")]
    assert {link.name for link in rig.monitor.status(rig.now).links if link.state is LinkState.DOWN} == \
        {"tbit-tcp", "wan-miami"}


# --- every transition once, whatever happens ------------------------------------------------

ACTIONS = st.lists(st.tuples(st.sampled_from(["round", "port", "lose", "heal", "disconnect", "connect", "wait"]),
                             st.sampled_from(sorted(wiring_of(RING8))), st.booleans()), max_size=60)


@settings(max_examples=60, deadline=None)
@given(ACTIONS)
def test_changes_alternate_and_match_the_state(actions):
    rig = Rig()
    rig.connect()
    for action, (dpid, port), flag in actions:
        name = RING8.switch_by_dpid(dpid)
        if action == "round":
            rig.round()
        elif action == "port":
            rig.events += rig.monitor.port_state(dpid, port, flag, rig.now)
        elif action == "lose":
            rig.lost.add((dpid, port))
        elif action == "heal":
            rig.lost.discard((dpid, port))
        elif action == "disconnect" and dpid in rig.connected:
            rig.disconnect(name)
        elif action == "connect":
            rig.connect(name)
        elif action == "wait":
            rig.now += 2.5
            rig.events += rig.monitor.tick(rig.now)
    up = {name: True for name in RING8.links}
    for change in changes_only(rig.take()):
        assert change.up != up[change.link], f"{change} reported twice"
        up[change.link] = change.up
    assert up == {name: rig.monitor.is_up(name) for name in RING8.links}
    states = {link.name: link.state for link in rig.monitor.status(rig.now).links}
    assert {n for n, s in states.items() if s is LinkState.DOWN} == {n for n, u in up.items() if not u}
