"""The SENSE API (/sense/api) of a real controller, driven by the real `sense-o-api` client as the
Rucio-SENSE DMM drives it (its daemons' calls, in their order, with their intents and queries), a
plain dnc intent provisioned without waiting, refusals with SENSE's error body that change
nothing, the token endpoint, and a restart.

The client reads its config as the DMM's does (no argument: `SENSE_AUTH_OVERRIDE`, here a file in
the test's folder, with HOME moved there too): it fetches its token from the controller's token
endpoint with USERNAME (the tsdn principal) and PASSWORD (its tsdn token)."""

from __future__ import annotations

import ipaddress
import json
import re
import time
from pathlib import Path

import pytest
import requests
import yaml
from sense.client.address_api import AddressApi
from sense.client.discover_api import DiscoverApi
from sense.client.requestwrapper import RequestWrapper
from sense.client.workflow_combined_api import WorkflowCombinedApi

from northbound.client import TsdnClient
from northbound.proto.tsdn.v1 import bandwidth_pb2 as pb
from tests.conftest import TOKENS

DOMAIN = "ring8.show.example.net"
POOL = "RUCIO_Site_BGP_Subnet_Pool-"
G = 10**9
RUCIO_TOKEN = TOKENS["rucio"][1]


def urn(dtn: str) -> str:
    return f"urn:ogf:network:{DOMAIN}:{dtn}"


def write_config(folder: Path, base: str, **overrides: str) -> Path:
    config = {"AUTH_ENDPOINT": f"{base}/auth/token", "API_ENDPOINT": base, "CLIENT_ID": "rucio-dmm",
              "SECRET": "not-checked-by-tsdn", "USERNAME": "rucio", "PASSWORD": RUCIO_TOKEN, "verify": False,
              **overrides}
    path = folder / "sense-o-auth.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@pytest.fixture
def sense(start_controller, tokens_file, tmp_path, monkeypatch):
    """A controller on ring8 serving /sense/api, and the client's config pointed at it."""
    controller = start_controller("ring8", tokens=tokens_file, listen_http="127.0.0.1:0", domain=DOMAIN)
    base = f"http://{controller.http_address}/sense/api"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SENSE_AUTH_OVERRIDE", str(write_config(tmp_path, base)))
    monkeypatch.delenv("SENSE_FULL_DEBUG", raising=False)
    controller.sense_base = base
    return controller


def good_response(response) -> bool:
    """The DMM's check of a create's answer."""
    return bool(response and not any("ERROR" in r for r in response))


def format_ipv6(network: ipaddress.IPv6Network) -> str:
    """The DMM's handler writes the prefix it affiliates this way."""
    segments = [s.lstrip("0") or "0" for s in network.network_address.exploded.split(":")]
    return f"{':'.join(segments)}/{network.prefixlen}"


def dmm_intent(src: str, dst: str, src_range: str, dst_range: str, capacity: int | None, rule: str,
               stage: bool = False) -> dict:
    """The intent of the DMM's stager (`stage`), provisioner and modifier."""
    options = [{"data.connections[0].terminals[0].uri": src},
               {"data.connections[0].terminals[0].ipv6_prefix_list": src_range},
               {"data.connections[0].terminals[1].uri": dst},
               {"data.connections[0].terminals[1].ipv6_prefix_list": dst_range},
               {"data.connections[0].terminals[0].vlan_tag": "3602-3606"},
               {"data.connections[0].terminals[1].vlan_tag": "3602-3606"}]
    if capacity is not None:
        options.insert(0, {"data.connections[0].bandwidth.capacity": str(int(capacity))})
    queries = [{"ask": "edit", "options": options}]
    if stage:
        queries += [{"ask": "total-block-maximum-bandwidth",
                     "options": [{"name": "Connection 1", "start": "now", "end-before": "+24h"}]},
                    {"ask": "extract-result-values", "options": [{"sparql": (
                        "SELECT DISTINCT ?ipv6_subnet_uri ?ipv6_subnet WHERE {?route mrs:routeFrom ?ipv6_subnet_uri. "
                        "?ipv6_subnet_uri mrs:type 'ipv6-prefix-list'. ?ipv6_subnet_uri mrs:value ?ipv6_subnet}")}]}]
    return {"service_profile_uuid": "tsdn-dnc", "queries": queries, "alias": rule}


class Site:
    """What the DMM's site daemon learns of a site (RefreshSiteDBDaemon)."""

    def __init__(self, name: str):
        discover = DiscoverApi()
        response = discover.discover_lookup_name_get(name, search="metadata", type="/sitename")
        assert good_response(response) and response["results"]
        matched = [r for r in response["results"] if name in r["name/tag/value"]]
        root = discover.discover_lookup_rooturi_get(matched[0]["resource"])
        info = discover.discover_domain_id_get(root)
        self.name, self.sense_uri, self.query_url = name, info["domain_uri"], info["domain_url"]
        manifest = {"Metadata": "?metadata?", "required": "true", "sparql-ext": (
            "SELECT ?metadata WHERE { ?site nml:hasService ?md_svc. ?md_svc mrs:hasNetworkAttribute ?dir_xrootd. "
            "?dir_xrootd mrs:type 'metadata:directory'. ?dir_xrootd mrs:tag '/xrootd'. ?dir_xrootd mrs:value "
            f"?metadata.  FILTER regex(str(?site), '{self.sense_uri}') }} LIMIT 1")}
        metadata = json.loads(WorkflowCombinedApi().manifest_create(json.dumps(manifest))["jsonTemplate"])
        self.endpoints = {ipaddress.IPv6Network(r).compressed: host
                          for r, host in json.loads(metadata["Metadata"].replace("'", '"')).items()}

    def allocate(self, rule: str) -> str:
        """The DMM's allocator: a /64 for the rule, which must be one of the site's endpoints."""
        allocation = AddressApi().allocate_address(POOL + self.name, "IPv6", rule, netmask="/64", batch="subnet")
        ip_range = ipaddress.IPv6Network(allocation).compressed
        assert ip_range in self.endpoints
        return ip_range


class Rule:
    """One Rucio rule through the DMM's SENSE daemons."""

    def __init__(self, rule: str, src: Site, dst: Site):
        self.rule, self.src, self.dst = rule, src, dst
        self.src_range, self.dst_range = src.allocate(rule), dst.allocate(rule)

    def intent(self, capacity: int | None, stage: bool = False) -> str:
        return json.dumps(dmm_intent(self.src.sense_uri, self.dst.sense_uri, self.src_range, self.dst_range, capacity,
                                     self.rule, stage))

    def stage(self) -> dict:
        workflow = WorkflowCombinedApi()
        workflow.instance_new()
        response = workflow.instance_create(self.intent(None, stage=True))
        assert good_response(response)
        self.uuid = response["service_uuid"]
        self.src_uri = response.get("queries")[2].get("results")[0].get("ipv6_subnet_uri")
        self.dst_uri = response.get("queries")[2].get("results")[1].get("ipv6_subnet_uri")
        return response

    def status(self) -> str:
        return WorkflowCombinedApi().instance_get_status(si_uuid=self.uuid) or "UNKNOWN"

    def affiliate(self) -> None:
        """The DMM's handler, once the instance is compiled."""
        assert re.match(r"(CREATE) - (COMPILED|COMMITTED|COMMITTING|READY)$", self.status())
        address = AddressApi()
        address.affiliate_address(pool=POOL + self.src.name, uri=self.src_uri,
                                  address=format_ipv6(ipaddress.IPv6Network(self.src_range)))
        address.affiliate_address(pool=POOL + self.dst.name, uri=self.dst_uri,
                                  address=format_ipv6(ipaddress.IPv6Network(self.dst_range)))

    def provision(self, capacity: int) -> None:
        """The DMM's provisioner: compiled again with the bandwidth, then provisioned, waiting."""
        assert re.match(r"(CREATE) - COMPILED$", self.status())
        workflow = WorkflowCombinedApi()
        workflow.si_uuid = self.uuid
        assert good_response(workflow.instance_create(self.intent(capacity)))
        workflow.instance_operate("provision", sync="true")

    def modify(self, capacity: int) -> None:
        """The DMM's modifier."""
        assert re.match(r"(CREATE|MODIFY|REINSTATE) - READY$", self.status())
        workflow = WorkflowCombinedApi()
        workflow.si_uuid = self.uuid
        workflow.instance_modify(self.intent(capacity), sync="true")

    def cancel(self) -> None:
        """The DMM's canceller."""
        status = self.status()
        assert re.match(r"(CREATE|MODIFY|REINSTATE) - READY$", status)
        WorkflowCombinedApi().instance_operate("cancel", si_uuid=self.uuid, sync="true",
                                               force=str("READY" not in status).lower())

    def delete(self) -> None:
        """The DMM's deleter, and the frees of the older DMM's canceller."""
        assert re.match(r"(CANCEL) - READY$", self.status())
        WorkflowCombinedApi().instance_delete(si_uuid=self.uuid)
        AddressApi().free_address(POOL + self.src.name, name=self.rule)
        AddressApi().free_address(POOL + self.dst.name, name=self.rule)


def reservation_of(client: TsdnClient, uuid: str) -> pb.Reservation:
    found = [r for r in client.list_reservations() if r.labels.get("tsdn/sense") == uuid]
    return max(found, key=lambda r: r.create_time.ToSeconds())


def test_the_dmm_drives_two_rules_between_the_same_sites_with_the_real_client(sense):
    caltech, sdsc = Site("dtn1"), Site("dtn5")
    assert caltech.sense_uri == urn("dtn1") and caltech.query_url == sense.sense_base
    assert len(caltech.endpoints) == 256 and set(caltech.endpoints.values()) == {"dtn1"}
    rules = [Rule(f"{i}f0c7e2b9a1d4c5e8b7a6f5e4d3c2b1a0", caltech, sdsc) for i in (1, 2)]
    assert [r.src_range for r in rules] == ["2001:db8:8:100::/64", "2001:db8:8:101::/64"]
    for rule, free in zip(rules, (100_000, 99_000), strict=True):  # the first one's hold: 1 Gbit/s
        answer = rule.stage()
        assert answer["queries"][1]["asked"] == "total-block-maximum-bandwidth"
        assert int(answer["queries"][1]["results"][0]["bandwidth"]) / 1000**2 == free  # Mbit/s, as the DMM reads
        assert rule.status() == "CREATE - COMPILED"
        rule.affiliate()
    for rule, capacity in zip(rules, (40_000, 30_000), strict=True):
        rule.provision(capacity)
        assert rule.status() == "CREATE - READY"
    with TsdnClient(sense.address, token=RUCIO_TOKEN) as client:
        booked = [reservation_of(client, rule.uuid) for rule in rules]
        assert [r.bandwidth_bps for r in booked] == [40 * G, 30 * G]
        assert [(r.src_prefix, r.dst_prefix) for r in booked] == [(r.src_range, r.dst_range) for r in rules]
        assert all(r.state == pb.ACTIVE for r in booked)
        rules[0].modify(20_000)
        assert rules[0].status() == "MODIFY - READY"
        assert reservation_of(client, rules[0].uuid).bandwidth_bps == 20 * G
        for rule in rules:
            rule.cancel()
            assert rule.status() == "CANCEL - READY"
            assert reservation_of(client, rule.uuid).state == pb.RELEASED
            rule.delete()
            with pytest.raises(ValueError, match="Returned code 404 with error service instance"):
                rule.status()
    assert AddressApi().get_allocations(POOL + "dtn1") == []


def test_a_plain_dnc_intent_provisioned_without_waiting_is_polled_until_ready(sense):
    workflow = WorkflowCombinedApi()
    uuid = workflow.instance_new()
    intent = {"service": "dnc", "alias": "plain-dnc", "data": {"type": "Multi-Path P2P VLAN", "connections": [{
        "name": "Connection 1", "bandwidth": {"qos_class": "softCapped", "capacity": "25000"},
        "schedule": {"start": "now", "duration": "2h"},
        "terminals": [{"uri": urn("dtn2"), "vlan_tag": "any"}, {"uri": urn("dtn6"), "vlan_tag": "any"}]}]}}
    response = workflow.instance_create(json.dumps(intent))
    assert response["service_uuid"] == uuid and response["queries"] == []
    assert workflow.instance_get_status() == "CREATE - COMPILED"
    workflow.instance_operate("provision", sync="false")
    deadline = time.monotonic() + 30
    while (status := workflow.instance_get_status()) != "CREATE - READY":
        assert status in ("CREATE - COMPILED", "CREATE - COMMITTING", "CREATE - COMMITTED"), status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)  # polling, as SENSE clients do
    assert workflow.instance_get_status(status="phase") == "CREATE"
    assert workflow.instance_get_status(status="substatus") == "READY"
    details = workflow.instance_get_status(verbose=True)
    assert details["state"] == "CREATE - READY" and details["connection"]["qos_class"] == "softCapped"
    assert details["reservation"]["bandwidth_bps"] == 25 * G and details["reservation"]["ceiling_bps"] == 100 * G
    found = DiscoverApi().discover_service_instances_get(search="plain-dnc")["instances"]
    assert [i["referenceUUID"] for i in found] == [uuid]
    assert json.loads(workflow.instance_get_intents()[0]["json"])["data"]["connections"][0]["bandwidth"] == {
        "qos_class": "softCapped", "capacity": "25000"}
    workflow.instance_operate("cancel", sync="false", force="false")
    assert workflow.instance_get_status() == "CANCEL - READY"
    workflow.instance_operate("reprovision", sync="true")
    assert workflow.instance_get_status() == "REINSTATE - READY"
    workflow.instance_operate("cancel", sync="true")
    workflow.instance_delete()


def sense_error(call) -> tuple[int, dict]:
    with pytest.raises(ValueError) as raised:
        call()
    match = re.match(r"Returned code (\d+) with error", str(raised.value))
    assert match, str(raised.value)
    return int(match[1]), raised.value.json


def test_bad_requests_get_sense_errors_and_change_nothing(sense):
    workflow = WorkflowCombinedApi()
    address = AddressApi()
    kept = address.allocate_address(POOL + "dtn1", "IPv6", "kept", netmask="/64", batch="subnet")
    unknown = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
    cases = {
        "unknown instance": (lambda: workflow.instance_get_status(si_uuid=unknown), 404, "no such instance"),
        "provision of an unknown instance": (lambda: workflow.instance_operate(
            "provision", si_uuid=unknown, sync="true"), 404, "no such instance"),
        "not JSON": (lambda: workflow.instance_create("{not json", si_uuid=unknown), 400, "not JSON"),
        "malformed intent": (lambda: workflow.instance_create(json.dumps(
            {"service": "dnc", "data": {"connections": [{"terminals": [{"uri": urn("dtn1")}]}]}}),
            si_uuid=unknown), 400, "exactly two"),
        "unknown terminal": (lambda: workflow.instance_create(json.dumps(plain("dtn1", "dtn42", "1000")),
                                                              si_uuid=unknown), 404, "'dtn42' is not a DTN"),
        "beyond capacity": (lambda: workflow.instance_create(json.dumps(plain("dtn1", "dtn3", "400000")),
                                                             si_uuid=unknown), 409, "400G"),
        "unallocated prefix": (lambda: workflow.instance_create(json.dumps(dmm_intent(
            urn("dtn1"), urn("dtn3"), "2001:db8:8:1ff::/64", "2001:db8:8:3ff::/64", 1000, "r")), si_uuid=unknown),
            409, "is not allocated"),
        "unknown pool": (lambda: address.allocate_address(POOL + "T2_US_Nowhere", "IPv6", "r", netmask="/64",
                                                           batch="subnet"), 404, "no DTN's pool"),
    }
    for what, (call, status, message) in cases.items():
        code, body = sense_error(call)
        assert code == status and message in body["exception"] and body["status"] == status, (what, body)
    with TsdnClient(sense.address, token=RUCIO_TOKEN) as client:
        assert list(client.list_reservations()) == []
    assert [a["address"] for a in address.get_allocations(POOL + "dtn1")] == [kept]
    code, body = sense_error(lambda: workflow.instance_get_status(si_uuid=unknown))
    assert code == 404

    # too large a body: 413 with SENSE's body, before anything is read
    headers = {"Authorization": f"Bearer {RUCIO_TOKEN}", "Content-Type": "application/json"}
    too_large = requests.post(f"{sense.sense_base}/instance/{unknown}", data=b"{" + b" " * (2 * 1024 * 1024) + b"}",
                              headers=headers, timeout=30)
    assert too_large.status_code == 413 and too_large.headers["content-type"] == "application/json"
    assert "too large" in too_large.json()["exception"]
    # no token, a wrong one
    assert requests.get(f"{sense.sense_base}/instance", timeout=10).status_code == 401
    wrong = requests.get(f"{sense.sense_base}/instance", headers={"Authorization": "Bearer wrong-token-0123456789"},
                         timeout=10)
    assert wrong.status_code == 401 and "unknown token" in wrong.json()["exception"]

    # delete before cancel
    uuid = workflow.instance_new()
    workflow.instance_create(json.dumps(plain("dtn1", "dtn3", "1000")))
    workflow.instance_operate("provision", sync="true")
    code, body = sense_error(lambda: workflow.instance_delete(si_uuid=uuid))
    assert code == 409 and "cancel it first" in body["exception"]
    assert workflow.instance_get_status(si_uuid=uuid) == "CREATE - READY"


def plain(src: str, dst: str, capacity: str) -> dict:
    return {"service": "dnc", "data": {"connections": [{"name": "c", "bandwidth": {"capacity": capacity},
                                                        "terminals": [{"uri": urn(src)}, {"uri": urn(dst)}]}]}}


def test_the_token_endpoint_checks_the_principal_and_its_tsdn_token(sense, tmp_path):
    token_url = f"{sense.sense_base}/auth/token"
    refresh = requests.post(token_url, data={"grant_type": "refresh_token", "refresh_token": RUCIO_TOKEN,
                                             "client_id": "x", "client_secret": "y"}, timeout=10)
    assert refresh.status_code == 200 and refresh.json()["access_token"] == RUCIO_TOKEN
    for username, password, description in (("rucio", "not-the-token-0123456789", "not a tsdn token"),
                                            ("fts", RUCIO_TOKEN, "not 'fts'")):
        config = write_config(tmp_path, sense.sense_base, USERNAME=username, PASSWORD=password)
        with pytest.raises(Exception, match=f"Failed to get token. Bad credentials.*{description}"):
            RequestWrapper(config=yaml.safe_load(config.read_text()))
    unsupported = requests.post(token_url, data={"grant_type": "client_credentials"}, timeout=10)
    assert unsupported.status_code == 400 and unsupported.json()["error"] == "unsupported_grant_type"


def test_instances_and_allocations_survive_a_restart(sense, start_controller, tokens_file):
    workflow = WorkflowCombinedApi()
    address = AddressApi()
    src = address.allocate_address(POOL + "dtn4", "IPv6", "rule-9", netmask="/64", batch="subnet")
    dst = address.allocate_address(POOL + "dtn8", "IPv6", "rule-9", netmask="/64", batch="subnet")
    uuid = workflow.instance_new()
    workflow.instance_create(json.dumps(dmm_intent(urn("dtn4"), urn("dtn8"), src, dst, 15_000, "rule-9")))
    workflow.instance_operate("provision", sync="true")
    compiled = workflow.instance_new()
    workflow.instance_create(json.dumps(plain("dtn2", "dtn3", "5000")), si_uuid=compiled)
    sense.stop()
    again = start_controller("ring8", tokens=tokens_file, listen_http="127.0.0.1:0", domain=DOMAIN)
    base = f"http://{again.http_address}/sense/api"
    client = WorkflowCombinedApi(req_wrapper=RequestWrapper(config=yaml.safe_load(
        write_config(Path(again.config.state).parent, base).read_text())))
    assert client.instance_get_status(si_uuid=uuid) == "CREATE - READY"
    assert client.instance_get_status(si_uuid=compiled) == "CREATE - COMPILED"
    allocations = AddressApi(req_wrapper=client.client).get_allocations(POOL + "dtn4")
    assert [a["address"] for a in allocations] == [src]
    client.instance_operate("cancel", si_uuid=uuid, sync="true")
    assert client.instance_get_status(si_uuid=uuid) == "CANCEL - READY"
