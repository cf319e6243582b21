"""Reservations told apart by IPv6 prefixes (one /64 per Rucio rule and site) on real Open
vSwitch, ring8 in Mininet under a real `tsdn controller` process, created over gRPC.

dtn1 and dtn3 get addresses in two rules' prefixes and one outside them (`ip -6 addr add ...
nodad`, the peer site's /56 on-link). ping6 between a rule's addresses passes only while its
reservation is active, neighbour discovery included (no static neighbours); an address outside
the prefixes, an address of the other rule and the DTNs' IPv4 get nothing; after a release the
rule's traffic stops and the other rule's goes on. A restart of the controller finds the IPv6
flows on the switches exactly as planned (reconciliation changes nothing).
"""

from __future__ import annotations

import re

import pytest

from mininet_tests.conftest import ALL_RING8_SWITCHES as ALL_SWITCHES
from mininet_tests.controlled import DEADLINE, TOKEN, connected_bridges, pings, tsdn_flows
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from sdn_app.core.plans import reservation_cookie

G = 10**9
# Two Rucio rules between dtn1 and dtn3: a /64 each at each site, inside ring8's /56 pools.
RULE_A = ("2001:db8:8:101::/64", "2001:db8:8:301::/64")
RULE_B = ("2001:db8:8:102::/64", "2001:db8:8:302::/64")
A1, A3 = "2001:db8:8:101::10", "2001:db8:8:301::20"
B1, B3 = "2001:db8:8:102::10", "2001:db8:8:302::20"
OUTSIDE1 = "2001:db8:8:1ff::10"  # dtn1's, in no reservation's prefix
ADDRESSES = {"dtn1": ((A1, B1, OUTSIDE1), "2001:db8:8:300::/56"), "dtn3": ((A3, B3), "2001:db8:8:100::/56")}


def add_addresses(net) -> None:
    """Each DTN's test addresses (/64, no duplicate address detection) and its peer's /56 on-link."""
    for dtn, (addresses, peer) in ADDRESSES.items():
        host, intf = net.host(dtn), net.host_intf(dtn)
        for address in addresses:
            host.cmd(f"ip -6 addr add {address}/64 dev {intf} nodad")
        host.cmd(f"ip -6 route add {peer} dev {intf}")
        shown = host.cmd(f"ip -6 addr show dev {intf}")
        assert all(f"{a}/64" in shown for a in addresses), shown


def ping6(net, dtn: str, src: str, dst: str) -> bool:
    """Whether a ping from address `src` of DTN `dtn` to `dst` gets any answer (3 tries)."""
    out = net.host(dtn).cmd(f"ping -6 -n -c 3 -i 0.2 -W 1 -I {src} {dst}")
    found = re.search(r"(\d+) received", out)
    assert found, out
    return int(found.group(1)) > 0


def reaches(net, dtn: str, src: str, dst: str) -> None:
    """Wait until a ping from `src` to `dst` is answered: a neighbour that failed to resolve
    before the reservation (a refused ping) is solicited again only after a while."""
    wait_for(lambda: ping6(net, dtn, src, dst), f"ping6 {src} -> {dst} to be answered", 15)


def reserve(client: TsdnClient, prefixes: tuple[str, str]) -> pb.Reservation:
    """A reservation dtn1 -> dtn3 for `prefixes`, once the switches confirmed it."""
    made = client.create_reservation("dtn1", "dtn3", 10 * G, src_prefix=prefixes[0], dst_prefix=prefixes[1])
    assert (made.src_prefix, made.dst_prefix) == prefixes
    return wait_for(lambda: (r := client.get_reservation(made.name)).state == pb.ACTIVE and r,
                    f"{made.name} to be ACTIVE", DEADLINE)


def flows_of(net, reservation: pb.Reservation) -> list[str]:
    cookie = f"cookie={reservation_cookie(reservation.id):#x}"
    return [line for s in ALL_SWITCHES for line in tsdn_flows(net.topo.mn_name(s)) if cookie in line]


@pytest.fixture
def client(controlled):
    _, env, _ = controlled
    with TsdnClient(env["TSDN_CONTROLLER"], token=TOKEN, timeout=10) as tsdn:
        yield tsdn


def test_two_rules_carry_only_their_prefixes_while_reserved(controlled, client):
    net, _, _ = controlled
    add_addresses(net)
    assert not ping6(net, "dtn1", A1, A3), "IPv6 flows without a reservation"

    a = reserve(client, RULE_A)
    assert list(a.path.route) == ["dtn1", "s1", "s2", "s3", "dtn3"]
    lines = flows_of(net, a)  # labels: per direction two classifiers and a steer entry, at its ingress
    classifiers = [line for line in lines if "metadata=" not in line.split("actions=")[0]]
    assert len(lines) == 6 and len(classifiers) == 4, lines
    assert all("ipv6" in line or "icmp6" in line for line in classifiers), lines
    assert any("ipv6_dst=ff02::1:ff00:0/104" in line and "icmp_type=135" in line for line in lines), lines
    reaches(net, "dtn1", A1, A3)
    reaches(net, "dtn3", A3, A1)
    assert not ping6(net, "dtn1", OUTSIDE1, A3), "an address outside the prefixes got through"
    assert not ping6(net, "dtn1", B1, B3), "rule B's addresses got through before it was reserved"
    assert not pings(net, "dtn1", "dtn3"), "the DTNs' IPv4 got through: only the prefixes are reserved"

    b = reserve(client, RULE_B)
    reaches(net, "dtn1", B1, B3)
    assert ping6(net, "dtn1", A1, A3)
    assert not ping6(net, "dtn1", A1, B3), "across two rules"

    assert client.delete_reservation(a.name).state == pb.RELEASED
    wait_for(lambda: not flows_of(net, a), "rule A's flows to be removed", DEADLINE)
    assert not ping6(net, "dtn1", A1, A3), "rule A's traffic went on after its release"
    assert ping6(net, "dtn1", B1, B3)
    client.delete_reservation(b.name)
    wait_for(lambda: not any(tsdn_flows(net.topo.mn_name(s)) for s in ALL_SWITCHES), "every tsdn flow to go",
             DEADLINE)
    assert not ping6(net, "dtn1", B1, B3)


def test_a_restart_finds_the_ipv6_flows_as_planned(controlled, client):
    net, _, controller = controlled
    add_addresses(net)
    a = reserve(client, RULE_A)
    reaches(net, "dtn1", A1, A3)
    before = sorted(re.sub(r"duration=[^,]*, |n_packets=\d+, |n_bytes=\d+, |idle_age=\d+, ", "", line)
                    for line in flows_of(net, a))
    controller.kill()
    wait_for(lambda: not connected_bridges(), "the switches to notice the controller is gone", DEADLINE)
    assert ping6(net, "dtn1", A1, A3), "fail-mode secure switches must keep forwarding without a controller"

    since = len(controller.log)
    controller.start()
    wait_for(lambda: connected_bridges() >= ALL_SWITCHES, "all 8 switches to reconnect", DEADLINE)
    for switch in ("s1", "s2", "s3"):
        wait_for(lambda switch=switch: any(f"{switch}: reconciled: nothing to change" in line
                                           for line in controller.log[since:]),
                 f"{switch} to be reconciled with nothing to change", DEADLINE)
    after = sorted(re.sub(r"duration=[^,]*, |n_packets=\d+, |n_bytes=\d+, |idle_age=\d+, ", "", line)
                   for line in flows_of(net, a))
    assert after == before
    assert ping6(net, "dtn1", A1, A3)
    shown = client.get_reservation(a.name)
    assert (shown.state, shown.src_prefix, shown.dst_prefix) == (pb.ACTIVE, *RULE_A)
