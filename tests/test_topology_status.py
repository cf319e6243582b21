"""Link status end to end without switches: the LLDP wire format, the fabric's link hooks, the
GetTopologyStatus API on a real gRPC server, and `tsdn topo status`.

Where a controller controls switches (an OpenFlow listener on loopback, nobody connecting), the
test plays the switches' part by feeding the app's own `LinkMonitor` under the app's lock, as
the OpenFlow handlers do; real switches and real LLDP are in mininet_tests/test_links.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import grpc
import pytest
from os_ken.lib.packet import arp, ethernet, lldp, packet
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from benchmarks.report import free_port
from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import topology_pb2 as topo_pb
from sdn_app.openflow import encoder
from tests.conftest import TOKENS
from tests.waiting import wait_for
from tsdn.cli import main

UP, DOWN, UNVERIFIED, UNKNOWN = (topo_pb.LinkStatus.UP, topo_pb.LinkStatus.DOWN, topo_pb.LinkStatus.UNVERIFIED,
                                 topo_pb.LinkStatus.UNKNOWN)


class StandInDatapath:
    """What the encoder reads of a datapath: os-ken's real OpenFlow 1.3 modules and an id."""

    ofproto = ofp
    ofproto_parser = parser
    id = 0x1601


DP = StandInDatapath()



# --- the LLDP wire format ----------------------------------------------------------------------


@pytest.mark.parametrize(("dpid", "port"), [(1, 1), (0x1601, 32), ((1 << 64) - 1, 0xFFFFFF00)])
def test_an_lldp_frame_names_the_switch_and_port_it_was_sent_from(dpid, port):
    frame = encoder.lldp_frame(dpid, port, "02:00:00:00:00:01")
    assert encoder.lldp_origin(frame) == (dpid, port)
    pkt = packet.Packet(frame)
    eth, lldpdu = pkt.get_protocol(ethernet.ethernet), pkt.get_protocol(lldp.lldp)
    assert (eth.dst, eth.ethertype) == (lldp.LLDP_MAC_NEAREST_BRIDGE, 0x88CC)
    assert lldpdu.tlvs[0].chassis_id == b"dpid:%016x" % dpid
    assert lldpdu.tlvs[1].port_id == port.to_bytes(4, "big")


def test_frames_tsdn_did_not_send_are_not_read_as_its_lldp():
    foreign = packet.Packet()  # an lldpd host: chassis id is its MAC, port id its interface name
    foreign.add_protocol(ethernet.ethernet(dst=lldp.LLDP_MAC_NEAREST_BRIDGE, src="02:00:00:00:00:09",
                                           ethertype=0x88CC))
    foreign.add_protocol(lldp.lldp([
        lldp.ChassisID(subtype=lldp.ChassisID.SUB_MAC_ADDRESS, chassis_id=b"\x02\x00\x00\x00\x00\x09"),
        lldp.PortID(subtype=lldp.PortID.SUB_INTERFACE_NAME, port_id=b"eth0"),
        lldp.TTL(ttl=120), lldp.End()]))
    foreign.serialize()
    request = packet.Packet()
    request.add_protocol(ethernet.ethernet(ethertype=0x0806, dst="ff:ff:ff:ff:ff:ff", src="02:00:00:00:00:01"))
    request.add_protocol(arp.arp(src_mac="02:00:00:00:00:01", src_ip="10.0.0.1", dst_ip="10.0.0.3"))
    request.serialize()
    ours = encoder.lldp_frame(7, 2, "02:00:00:00:00:01")
    other_port_subtype = ours.replace(b"\x04\x05\x02\x00\x00\x00\x02", b"\x04\x05\x07\x00\x00\x00\x02")
    assert other_port_subtype != ours
    for frame in (bytes(foreign.data), bytes(request.data), ours[:20], b"", b"\x00" * 64,
                  ours.replace(b"dpid:", b"dpix:"), other_port_subtype):
        assert encoder.lldp_origin(frame) is None, frame


def test_lldp_goes_to_the_controller_under_cookie_zero_and_out_of_one_port():
    flow = encoder.lldp_to_controller(DP)
    assert (flow.cookie, flow.priority, flow.command, flow.table_id) == (0, encoder.LLDP_PRIORITY, ofp.OFPFC_ADD, 0)
    assert dict(flow.match.items()) == {"eth_type": 0x88CC}
    (action,) = flow.instructions[0].actions
    assert (action.port, action.max_len) == (ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
    flow.serialize()
    out = encoder.lldp_packet_out(DP, 5, "02:00:00:00:16:01")
    assert out.in_port == ofp.OFPP_CONTROLLER and [a.port for a in out.actions] == [5]
    assert encoder.lldp_origin(out.data) == (0x1601, 5)
    out.serialize()


@pytest.mark.parametrize(("state", "config", "up"), [
    (0, 0, True), (ofp.OFPPS_LIVE, 0, True), (ofp.OFPPS_LINK_DOWN, 0, False), (0, ofp.OFPPC_PORT_DOWN, False),
    (ofp.OFPPS_BLOCKED, 0, True),
])
def test_a_port_is_up_unless_its_link_or_its_config_is_down(state, config, up):
    port = parser.OFPPort(port_no=1, hw_addr="02:00:00:00:00:01", name=b"s1-eth1", config=config, state=state,
                          curr=0, advertised=0, supported=0, peer=0, curr_speed=0, max_speed=0)
    assert encoder.port_is_up(ofp, port) is up


# --- a ledger-only controller ------------------------------------------------------------------


def test_a_controller_without_openflow_says_it_controls_no_switch(controller, client_for, capsys):
    status = client_for("rucio").get_topology_status()
    assert not status.controlled
    assert "--no-openflow" in status.note and "not watched" in status.note
    assert status.topology == "sc16" and len(status.links) == 24 and len(status.switches) == 14
    assert {link.state for link in status.links} == {UNKNOWN}
    assert not any(s.connected or s.HasField("connected_since") for s in status.switches)
    assert status.links[0].a == "caltech-a:1" and status.links[0].b == "caltech-b:1"

    token_file = controller.config.tokens.parent / "noc.token"
    token_file.write_text(TOKENS["noc"][1])
    args = ["topo", "status", "--controller", controller.address, "--token-file", str(token_file)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("topology sc16: this controller controls no switches (started with --no-openflow")
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["topology"] == "sc16" and "controlled" not in data  # false is left out, as proto3 JSON does
    assert data["links"][0]["state"] == "UNKNOWN"


def test_topology_status_needs_a_token(controller, client_for, capsys):
    with pytest.raises(ApiError) as refused:
        client_for(None).get_topology_status()
    assert refused.value.code is grpc.StatusCode.UNAUTHENTICATED
    assert main(["topo", "status", "--controller", controller.address]) == 3
    assert "tsdn: error:" in capsys.readouterr().err


# --- a controller controlling switches (none connects; the test speaks for them) --------------


@pytest.fixture
def controlling(start_controller, tokens_file):
    """A controller on ring8 with an OpenFlow listener on loopback; yields (controller, app, client)."""
    controller = start_controller("ring8", tokens=tokens_file, listen_openflow=f"127.0.0.1:{free_port()}")
    client = TsdnClient(controller.address, token=TOKENS["rucio"][1], timeout=10)
    try:
        yield controller, controller.fabric.app, client
    finally:
        client.close()


def feed(app, observe: Callable) -> list:
    """Run `observe(monitor, now)` under the app's lock, as the OpenFlow handlers do; its events
    go through the app's logging and link hook."""
    with app.lock:
        events = observe(app.links, time.monotonic())
        app._link_events(events)
        return events


def verify(monitor, a: tuple[int, int], b: tuple[int, int], at: float) -> None:
    """LLDP sent out of `a` heard on `b` and back, at `at`."""
    for src, dst in ((a, b), (b, a)):
        monitor.lldp_sent(*src, at)
        monitor.lldp_seen(*src, *dst, at)


def test_the_status_shows_verified_down_unknown_links_switches_and_mismatches(controlling, capsys, caplog):
    controller, app, client = controlling
    status = client.get_topology_status()
    assert status.controlled and status.note == ""
    assert {link.state for link in status.links} == {UNKNOWN}  # nothing connected yet
    assert "s2 not connected yet" in status.links[1].reason

    def observe(monitor, now):
        events = []
        for dpid in (1, 2, 3):
            events += monitor.switch_connected(dpid, now - 5)
        verify(monitor, (1, 1), (2, 2), now - 0.5)  # s1-s2 verified
        events += monitor.port_state(2, 1, False, now)  # s2-s3 down
        events += monitor.lldp_seen(3, 1, 1, 3, now)  # s3's LLDP on dtn1's port
        return events
    with caplog.at_level("INFO", logger="tsdn.openflow"):
        events = feed(app, observe)
    assert len(events) == 2
    assert "link s2-s3 down: port s2:1 went down (port status)" in caplog.text
    assert "wiring mismatch at s1:3: topology ring8 attaches DTN dtn1 there, but LLDP from s3:1 arrives there" \
        in caplog.text

    before = time.time()
    status = client.get_topology_status()
    links = {link.name: link for link in status.links}
    assert links["s1-s2"].state == UP and links["s1-s2"].reason == "verified by LLDP both ways"
    assert 0.4 < links["s1-s2"].lldp_age_a_to_b_s < 5 and 0.4 < links["s1-s2"].lldp_age_b_to_a_s < 5
    assert links["s2-s3"].state == DOWN and links["s2-s3"].reason == "port s2:1 went down (port status)"
    assert not links["s2-s3"].HasField("lldp_age_a_to_b_s")
    assert links["s3-s4"].state == UNKNOWN and links["s3-s4"].reason == "switch s4 not connected yet"
    switches = {s.name: s for s in status.switches}
    assert [n for n, s in switches.items() if s.connected] == ["s1", "s2", "s3"]
    since = switches["s1"].connected_since.seconds + switches["s1"].connected_since.nanos / 1e9
    assert before - 15 < since < before  # connected "5 s ago", in wall-clock time
    (mismatch,) = status.mismatches
    assert (mismatch.at, mismatch.expected, mismatch.observed) == ("s1:3", "DTN dtn1", "LLDP from s3:1")

    token_file = controller.config.tokens.parent / "rucio.token"
    token_file.write_text(TOKENS["rucio"][1])
    args = ["topo", "status", "--controller", controller.address, "--token-file", str(token_file)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("topology ring8: 3 of 8 switches connected\n")
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("s")}
    assert lines["s1-s2"].split()[1:4] == ["UP", "s1:1", "s2:2"] and "verified by LLDP both ways" in lines["s1-s2"]
    assert lines["s2-s3"].split()[1] == "DOWN" and lines["s2-s3"].endswith("port s2:1 went down (port status)")
    assert "never" in lines["s2-s3"]
    assert "wiring mismatches:\n  wiring mismatch at s1:3:" in out
    assert out.rstrip().endswith("switches not connected: s4, s5, s6, s7, s8")
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["controlled"] is True
    assert {link["name"]: link["state"] for link in data["links"]}["s2-s3"] == "DOWN"
    assert data["mismatches"][0]["at"] == "s1:3"


def test_the_link_listener_hears_links_already_down_and_every_change_after(controlling):
    controller, app, _ = controlling
    fabric = controller.fabric
    feed(app, lambda monitor, now: [*monitor.switch_connected(4, now), *monitor.switch_connected(5, now),
                                    *monitor.port_state(4, 1, False, now)])
    heard: list[tuple[str, bool, str]] = []
    fabric.link_listener = lambda link, up, reason: heard.append((link, up, reason))
    assert heard == [("s4-s5", False, "port s4:1 went down (port status)")]  # replayed when set
    assert fabric.link_listener is not None

    feed(app, lambda monitor, now: monitor.port_state(4, 1, True, now))
    assert heard[1:] == [("s4-s5", True, "ports up again (no LLDP heard on this link yet)")]

    def silence(monitor, now):  # s6-s7 heard 10 s ago, LLDP sent every second since, none back
        events = [*monitor.switch_connected(6, now - 20), *monitor.switch_connected(7, now - 20)]
        verify(monitor, (6, 1), (7, 2), now - 10)
        for t in range(9, 0, -1):
            monitor.lldp_sent(6, 1, now - t)
            monitor.lldp_sent(7, 2, now - t)
        return events
    feed(app, silence)
    app.lldp_round()  # the sender thread's round ticks the monitor too
    wait_for(lambda: len(heard) == 3, "the listener to hear s6-s7 go down")
    assert heard[2] == ("s6-s7", False, "no LLDP from s6:1 on s7:2 for 3.5s")

    def failing(link, up, reason):
        raise RuntimeError("listener bug")
    fabric.link_listener = failing  # a failing listener is logged; the app goes on
    feed(app, lambda monitor, now: monitor.port_state(4, 1, False, now))
    fabric.link_listener = None
    assert controller.fabric.link_status().link("s4-s5").state.value == "DOWN"
