"""The SENSE API on real Open vSwitch: ring8 in Mininet under a real `tsdn controller` process
(`--listen-http`, `--domain`), driven by the real `sense-o-api` client as the Rucio-SENSE DMM drives
it. Two rules between dtn1 and dtn3, each with a /64 per site from the address pools; the DTN hosts
get addresses in those /64s. A rule's traffic passes only once its instance is provisioned (CREATE
- READY: every hop confirmed), each at its own metered rate measured with real UDP iperf3 (at the
session's calibrated scale, `rate_scale`: ring8's 100G at 100 Mbit/s where the machine carries it),
follows a modify, and stops once the instance is cancelled while the other rule's goes on."""

from __future__ import annotations

import ipaddress
import json
import re

import pytest

from benchmarks.report import free_port
from mininet_tests.conftest import ALL_RING8_SWITCHES as ALL_SWITCHES
from mininet_tests.controlled import DEADLINE, TOKEN, ControllerProcess, connected_bridges, tsdn_flows
from mininet_tests.traffic import Iperf3Run
from tests.waiting import wait_for

pytest.importorskip("mininet.net", reason="Mininet system tests need the mininet Python package (Debian: mininet)")

from sense.client.address_api import AddressApi
from sense.client.requestwrapper import RequestWrapper
from sense.client.workflow_combined_api import WorkflowCombinedApi

from sdn_app.core.plans import reservation_cookie

DOMAIN = "ring8.show.example.net"
POOL = "RUCIO_Site_BGP_Subnet_Pool-"
PEERS = {"dtn1": "2001:db8:8:300::/56", "dtn3": "2001:db8:8:100::/56"}  # the other site's pool, on-link


def urn(dtn: str) -> str:
    return f"urn:ogf:network:{DOMAIN}:{dtn}"


@pytest.fixture
def sense(network, tmp_path, rate_scale):
    """ring8 in Mininet under a controller serving /sense/api; yields (network, the client's request wrapper)."""
    http = free_port()
    controller = ControllerProcess(tmp_path, free_port(), scale=rate_scale,
                                   extra=("--listen-http", f"127.0.0.1:{http}", "--domain", DOMAIN))
    try:
        controller.start()
        net = network("ring8", scale=rate_scale, controller=("127.0.0.1", controller.openflow_port))
        wait_for(lambda: connected_bridges() >= ALL_SWITCHES, "all 8 switches to connect", DEADLINE)
        base = f"http://127.0.0.1:{http}/sense/api"
        yield net, RequestWrapper(config={"AUTH_ENDPOINT": f"{base}/auth/token", "API_ENDPOINT": base,
                                          "CLIENT_ID": "rucio-dmm", "SECRET": "unused", "ACCESS_TOKEN": TOKEN,
                                          "verify": False})
    finally:
        controller.stop()


class Rule:
    """A Rucio rule dtn1 -> dtn3: its /64s, the hosts' addresses in them, its SENSE instance."""

    def __init__(self, net, client: RequestWrapper, name: str, port: int):
        self.net, self.name, self.port = net, name, port
        self.workflow = WorkflowCombinedApi(req_wrapper=client)
        address = AddressApi(req_wrapper=client)
        self.src_range = address.allocate_address(POOL + "dtn1", "IPv6", name, netmask="/64", batch="subnet")
        self.dst_range = address.allocate_address(POOL + "dtn3", "IPv6", name, netmask="/64", batch="subnet")
        self.src = str(ipaddress.IPv6Network(self.src_range)[16])
        self.dst = str(ipaddress.IPv6Network(self.dst_range)[32])
        for dtn, ip in (("dtn1", self.src), ("dtn3", self.dst)):
            host, intf = net.host(dtn), net.host_intf(dtn)
            host.cmd(f"ip -6 addr add {ip}/64 dev {intf} nodad")
            host.cmd(f"ip -6 route replace {PEERS[dtn]} dev {intf}")
        self.uuid = self.workflow.instance_new()
        self.address_api = address

    def intent(self, capacity_mbps: int) -> str:
        options = [{"data.connections[0].bandwidth.capacity": str(capacity_mbps)},
                   {"data.connections[0].terminals[0].uri": urn("dtn1")},
                   {"data.connections[0].terminals[0].ipv6_prefix_list": self.src_range},
                   {"data.connections[0].terminals[1].uri": urn("dtn3")},
                   {"data.connections[0].terminals[1].ipv6_prefix_list": self.dst_range}]
        return json.dumps({"service_profile_uuid": "tsdn-dnc", "alias": self.name,
                           "queries": [{"ask": "edit", "options": options}]})

    def status(self) -> str:
        return self.workflow.instance_get_status(si_uuid=self.uuid)

    def flows(self) -> list[str]:
        """This rule's flows on the switches (by its reservation's cookie)."""
        name = self.workflow.instance_get_status(si_uuid=self.uuid, verbose=True)["reservation"]["name"]
        cookie = f"cookie={reservation_cookie(name.split('/', 1)[1]):#x}"
        return [line for s in ALL_SWITCHES for line in tsdn_flows(self.net.topo.mn_name(s)) if cookie in line]

    def pings(self) -> bool:
        out = self.net.host("dtn1").cmd(f"ping -6 -n -c 3 -i 0.2 -W 1 -I {self.src} {self.dst}")
        found = re.search(r"(\d+) received", out)
        assert found, out
        return int(found.group(1)) > 0

    def udp(self, offered_mbps: float, seconds: float = 4) -> Iperf3Run:
        """UDP iperf3 from this rule's dtn1 address to its dtn3 address (a server on the rule's port)."""
        server_host, client_host = self.net.host("dtn3"), self.net.host("dtn1")
        server = server_host.popen(["iperf3", "-s", "-1", "-p", str(self.port), "-B", self.dst])
        wait_for(lambda: server.poll() is None and server_host.pexec("ss", "-Hltn", f"sport = :{self.port}")[0]
                 .strip(), f"the iperf3 server on port {self.port}", 10, interval=0.1)
        command = ["iperf3", "-c", self.dst, "-B", self.src, "-p", str(self.port), "-u", "-b", f"{offered_mbps:g}M",
                   "-t", f"{seconds:g}", "-i", "1", "-J", "--connect-timeout", "5000"]
        return Iperf3Run(command, server, client_host.popen(command), seconds)


def received_mbps(runs: dict[str, Iperf3Run]) -> dict[str, float]:
    return {name: run.report()["end"]["sum_received"]["bits_per_second"] / 1e6 for name, run in runs.items()}


def near(measured: float, booked_mbps: int, scale: float) -> bool:
    """Within 10 % of the booking's emulated rate (Mbit/s nominal x scale)."""
    expected = booked_mbps * scale
    print(f"{measured:.2f} Mbit/s measured, metered at {expected:g}")
    return abs(measured - expected) <= 0.1 * expected


def test_rules_flow_only_while_provisioned_at_their_metered_rates(sense):
    net, client = sense
    scale = net.scale
    per_g = 1000 * scale  # Mbit/s as emulated per nominal Gbit/s
    a, b = Rule(net, client, "rule-a", 5301), Rule(net, client, "rule-b", 5302)
    assert (a.src_range, b.src_range) == ("2001:db8:8:100::/64", "2001:db8:8:101::/64")

    a.workflow.instance_create(a.intent(40_000), si_uuid=a.uuid)
    assert a.status() == "CREATE - COMPILED" and a.flows() == []  # held: booked, no flows
    assert not a.pings(), "traffic passed before the instance was provisioned"

    for rule, mbps in ((a, 40_000), (b, 20_000)):
        if rule is b:
            rule.workflow.instance_create(rule.intent(mbps), si_uuid=rule.uuid)
        rule.workflow.instance_operate("provision", si_uuid=rule.uuid, sync="true")
        assert rule.status() == "CREATE - READY"  # sync=true answers once every hop is confirmed
        flows = rule.flows()  # labels: per direction two classifiers (table 0) and a steer entry, at its ingress
        classifiers = [f for f in flows if "metadata=" not in f.split("actions=")[0]]
        assert len(flows) == 6 and len(classifiers) == 4 and all("ipv6" in f or "icmp6" in f for f in classifiers)
        wait_for(rule.pings, f"{rule.name}'s ping6 to be answered", 15)  # neighbour discovery retried
    rates = received_mbps({"a": a.udp(60 * per_g), "b": b.udp(30 * per_g)})  # each above its meter, under the NICs
    assert near(rates["a"], 40_000, scale) and near(rates["b"], 20_000, scale), rates

    a.workflow.instance_modify(a.intent(10_000), si_uuid=a.uuid, sync="true")
    assert a.status() == "MODIFY - READY"
    assert near(received_mbps({"a": a.udp(30 * per_g)})["a"], 10_000, scale)

    a.workflow.instance_operate("cancel", si_uuid=a.uuid, sync="true", force="false")
    assert a.status() == "CANCEL - READY"
    wait_for(lambda: a.flows() == [], "rule a's flows to be removed", DEADLINE)
    assert not a.pings(), "rule a's traffic went on after its cancel"
    assert b.pings(), "rule b stopped with rule a"
    assert near(received_mbps({"b": b.udp(30 * per_g)})["b"], 20_000, scale)

    b.workflow.instance_operate("cancel", si_uuid=b.uuid, sync="true")
    for rule in (a, b):
        rule.workflow.instance_delete(si_uuid=rule.uuid)
        rule.address_api.free_address(POOL + "dtn1", name=rule.name)
        rule.address_api.free_address(POOL + "dtn3", name=rule.name)
    wait_for(lambda: not any(tsdn_flows(net.topo.mn_name(s)) for s in ALL_SWITCHES), "every tsdn flow to go",
             DEADLINE)
