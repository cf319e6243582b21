"""The ALTO server (/alto, docs/alto.md) on a real controller, driven by real clients: the OpenALTO
client (Rucio/FTS work) for the network map, cost maps and endpoint costs; httpx-sse for the RFC
8895 update stream; reservations booked and released over gRPC in between. Bad requests are
answered with the RFC 7285 error body and change nothing; tokens are asked for as on gRPC."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from northbound.client import TsdnClient
from sdn_app.core.utilization import DirectionLoad
from sdn_app.web.alto import AltoApi
from sdn_app.web.server import WebLimits
from tests.conftest import TOKENS
from tests.test_alto_core import apply_patch
from tests.waiting import wait_for

G = 10**9
ERROR = "application/alto-error+json"
UPDATE_PARAMS = "application/alto-updatestreamparams+json"
ECS_PARAMS = "application/alto-endpointcostparams+json"
FILTER = "application/alto-costmapfilter+json"
# sc16 DTNs: a booth DTN of each 1T booth, SCinet's and the Caltech Tier2 in Pasadena (100G each)
CALTECH_A, STARLIGHT, SCINET, PASADENA = "10.16.1.11", "10.16.2.11", "10.16.3.11", "10.16.21.11"


def openalto_client() -> Any:
    """The OpenALTO client class (scripts/bootstrap.sh installs it from ../shared/tools/openalto);
    a skip saying why when it is missing, a failure in CI."""
    try:
        from alto.client import Client
    except ImportError as missing:
        why = (f"the OpenALTO client is not installed ({missing}): scripts/bootstrap.sh installs it from "
               "../shared/tools/openalto")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return Client


@pytest.fixture
def alto(start_controller):
    """A controller on sc16 with its HTTP side (development mode: no token asked on loopback)."""
    return start_controller("sc16", listen_http="127.0.0.1:0")


@pytest.fixture
def grpc(alto) -> Iterator[TsdnClient]:
    client = TsdnClient(alto.address, timeout=10)
    yield client
    client.close()


def base(controller) -> str:
    return f"http://{controller.http_address}/alto"


def api_of(controller) -> AltoApi:
    return next(api for api in controller.web.apis if isinstance(api, AltoApi))


def ecs(controller, metric: str, srcs: list[str], dsts: list[str], mode: str = "numerical") -> dict:
    body = {"cost-type": {"cost-mode": mode, "cost-metric": metric},
            "endpoints": {"srcs": [f"ipv4:{a}" for a in srcs], "dsts": [f"ipv4:{a}" for a in dsts]}}
    reply = httpx.post(f"{base(controller)}/endpointcost", content=json.dumps(body),
                       headers={"Content-Type": ECS_PARAMS}, timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.headers["Content-Type"] == "application/alto-endpointcost+json"
    return reply.json()["endpoint-cost-map"]


def test_the_openalto_client_reads_the_maps_and_sees_a_booking_come_and_go(alto, grpc, tmp_path, monkeypatch):
    Client = openalto_client()
    url = base(alto)
    config = tmp_path / "alto.conf"
    metrics = {"bw-available": {"resource_type": "cost-map", "url": f"{url}/costmap/num-bw-available",
                                "dependent_network_map": f"{url}/networkmap"},
               "hopcount": {"resource_type": "endpoint-cost", "url": f"{url}/endpointcost",
                            "cost_mode": "numerical", "cost_metric": "hopcount"}}
    config.write_text(f"[client]\ndefault_networkmap = {url}/networkmap\n"
                      f"default_costmap = {url}/costmap/num-routingcost\nmetrics = {json.dumps(metrics)}\n")
    monkeypatch.setenv("ALTO_CONFIG", str(config))
    client = Client()
    assert client.get_multiple_costs([SCINET], [PASADENA, STARLIGHT], ["bw-available", "hopcount"]) == {
        SCINET: {PASADENA: {"bw-available": 100 * G, "hopcount": 1}, STARLIGHT: {"bw-available": 100 * G,
                                                                               "hopcount": 1}}}

    network_map = client.get_network_map()
    assert network_map.vtag_.resource_id == "networkmap"
    assert network_map.get_pid([STARLIGHT, "10.16.1.21", SCINET, "192.0.2.1"]) == [
        "StarLight", "Caltech", "SCinet", "default"]

    # Routing cost: the latency of the path tsdn would book (sc16 declares every link's latency).
    shortest = grpc.query_availability("scinet-dtn1", "pasadena-dtn1", policy="shortest", duration=60,
                                       max_paths=1).paths[0]
    routing = client.get_routing_costs([SCINET], [PASADENA, STARLIGHT])
    assert routing[SCINET][PASADENA] == pytest.approx(shortest.latency_ms) and shortest.hop_count == 1
    rdma = grpc.query_availability("caltech-a-dtn1", "starlight-dtn1", policy="shortest", duration=60,
                                   max_paths=1).paths[0]
    hops = client.get_endpoint_cost(f"{url}/endpointcost", cost_mode="numerical", cost_metric="hopcount")
    assert hops.get_costs([CALTECH_A], [STARLIGHT, PASADENA]) == {CALTECH_A: {STARLIGHT: rdma.hop_count,
                                                                             PASADENA: 2}}
    assert hops.vtag_.resource_id == "endpointcost" and len(hops.vtag_.tag) == 64

    def bandwidths() -> tuple[int, int]:
        """SCinet -> Pasadena from the bw-available cost map, caltech-a-dtn1 -> starlight-dtn1 from
        the endpoint cost service, both as the OpenALTO client reads them."""
        cost_map = client.get_cost_map(f"{url}/costmap/num-bw-available", dependent_network_map=f"{url}/networkmap")
        assert cost_map.cost_type.metric == "bw-available" and cost_map.cost_type.mode == "numerical"
        endpoint = client.get_endpoint_cost(f"{url}/endpointcost", cost_mode="numerical", cost_metric="bw-residual")
        return (cost_map.get_endpoint_costs([SCINET], [PASADENA])[SCINET][PASADENA],
                endpoint.get_costs([CALTECH_A], [STARLIGHT])[CALTECH_A][STARLIGHT])

    idle = grpc.query_availability("caltech-a-dtn1", "starlight-dtn1", duration=60).max_bandwidth_bps
    assert bandwidths() == (100 * G, idle) and idle == 400 * G  # the DTNs' 400G NICs
    wan = grpc.create_reservation("scinet-dtn1", "pasadena-dtn1", 40 * G, duration=3600)
    demo = grpc.create_reservation("caltech-a-dtn1", "starlight-dtn1", 300 * G, duration=3600)
    booked = grpc.query_availability("caltech-a-dtn1", "starlight-dtn1", duration=60).max_bandwidth_bps
    assert wait_for(lambda: bandwidths() == (60 * G, booked), "ALTO to show both bookings", timeout=5)
    assert booked == 100 * G
    grpc.delete_reservation(wan.name)
    grpc.delete_reservation(demo.name)
    assert wait_for(lambda: bandwidths() == (100 * G, 400 * G), "ALTO to show the releases", timeout=5)


class Stream:
    """An ALTO update stream read by httpx-sse on a thread of its own: `next(timeout)` gives
    (event, data) in order, None once the server ended it, `queue.Empty` when nothing came."""

    def __init__(self, url: str, body: Any, headers: dict[str, str] | None = None):
        self.client = httpx.Client(timeout=httpx.Timeout(10.0, read=60.0))
        self._context = connect_sse(self.client, "POST", url, content=json.dumps(body),
                                    headers={"Content-Type": UPDATE_PARAMS, **(headers or {})})
        self.source = self._context.__enter__()
        assert self.source.response.status_code == 200, self.source.response.read()
        assert self.source.response.headers["Content-Type"] == "text/event-stream"
        self.events: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self.source.iter_sse():
                self.events.put((event.event, json.loads(event.data)))
        except Exception:  # closed under it by `close`
            pass
        finally:
            self.events.put(None)

    def next(self, timeout: float = 10.0) -> tuple[str, Any] | None:
        return self.events.get(timeout=timeout)

    def quiet(self, seconds: float) -> bool:
        """Whether nothing at all arrives for `seconds`."""
        try:
            self.events.get(timeout=seconds)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        """Hang up (a stream still open: its socket shut, which wakes the reader blocked on it)."""
        network = self.source.response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.client.close()
        self._thread.join(5)
        assert not self._thread.is_alive(), "the stream's reader did not stop"


def test_an_update_stream_patches_the_bandwidth_as_reservations_come_and_go(alto, grpc):
    url = base(alto)
    ecs_input = {"cost-type": {"cost-mode": "numerical", "cost-metric": "bw-residual"},
                 "endpoints": {"srcs": [f"ipv4:{CALTECH_A}"], "dsts": [f"ipv4:{STARLIGHT}"]}}
    stream = Stream(f"{url}/updates", {"add": {"bw": {"resource-id": "costmap-num-bw-available"},
                                               "ecs": {"resource-id": "endpointcost", "input": ecs_input}}})
    try:
        kind, control = stream.next()
        assert kind == "application/alto-updatestreamcontrol+json"
        control_uri = control["control-uri"]
        assert control_uri.startswith(f"{url}/updates/streams/")
        held = {}
        for _ in range(2):
            kind, data = stream.next()
            media_type, client_id = kind.split(",")
            held[client_id] = data
            assert media_type == {"bw": "application/alto-costmap+json",
                                  "ecs": "application/alto-endpointcost+json"}[client_id]
        initial = json.loads(json.dumps(held))
        assert held["bw"]["cost-map"]["SCinet"]["Caltech-Pasadena"] == 100 * G
        assert held["ecs"]["endpoint-cost-map"][f"ipv4:{CALTECH_A}"][f"ipv4:{STARLIGHT}"] == 400 * G
        assert stream.quiet(2.5), "an update came while nothing changed"

        def follow(until) -> None:
            """Apply the merge patches that come until `until(held)` holds (at most 5 s)."""
            while not until(held):
                kind, patch = stream.next(timeout=5)
                media_type, client_id = kind.split(",")
                assert media_type == "application/merge-patch+json"
                held[client_id] = apply_patch(held[client_id], patch)

        wan = grpc.create_reservation("scinet-dtn1", "pasadena-dtn1", 40 * G, duration=3600)
        demo = grpc.create_reservation("caltech-a-dtn1", "starlight-dtn1", 300 * G, duration=3600)
        follow(lambda h: h["bw"]["cost-map"]["SCinet"]["Caltech-Pasadena"] == 60 * G
               and h["ecs"]["endpoint-cost-map"][f"ipv4:{CALTECH_A}"][f"ipv4:{STARLIGHT}"] == 100 * G)
        assert held["bw"]["meta"]["vtag"]["tag"] != initial["bw"]["meta"]["vtag"]["tag"]
        assert stream.quiet(2.5), "an update came while nothing changed"
        grpc.delete_reservation(wan.name)
        grpc.delete_reservation(demo.name)
        follow(lambda h: h == initial)  # everything back, vtags included (a tag is the content's hash)

        # The stream control URI: remove one resource, add another, refuse what is wrong.
        assert httpx.post(control_uri, content=json.dumps({"remove": ["ecs"]}),
                          headers={"Content-Type": UPDATE_PARAMS}).status_code == 204
        assert stream.next() == ("application/alto-updatestreamcontrol+json", {"stopped": ["ecs"]})
        assert httpx.post(control_uri, content=json.dumps({"add": {"nm": {"resource-id": "networkmap"}}}),
                          headers={"Content-Type": UPDATE_PARAMS}).status_code == 204
        assert stream.next() == ("application/alto-updatestreamcontrol+json", {"started": ["nm"]})
        kind, network_map = stream.next()
        assert kind == "application/alto-networkmap+json,nm" and "StarLight" in network_map["network-map"]
        for body, status, code in ((b"{", 400, "E_SYNTAX"),
                                   (json.dumps({"remove": ["ecs"]}).encode(), 400, "E_INVALID_FIELD_VALUE")):
            refused = httpx.post(control_uri, content=body, headers={"Content-Type": UPDATE_PARAMS})
            assert (refused.status_code, refused.headers["Content-Type"], refused.json()["meta"]["code"]) == (
                status, ERROR, code)
        elsewhere = httpx.post(f"{url}/updates/streams/not-a-stream", content=json.dumps({"remove": ["nm"]}),
                               headers={"Content-Type": UPDATE_PARAMS})
        assert elsewhere.status_code == 404 and elsewhere.headers["Content-Type"] == ERROR
        # Removing the last resource ends the stream.
        assert httpx.post(control_uri, content=json.dumps({"remove": ["bw", "nm"]}),
                          headers={"Content-Type": UPDATE_PARAMS}).status_code == 204
        assert stream.next() == ("application/alto-updatestreamcontrol+json", {"stopped": ["bw", "nm"]})
        assert stream.next() == ("application/alto-updatestreamcontrol+json",
                                 {"description": "the stream carries no resource any more"})
        assert stream.next() is None
    finally:
        stream.close()
    wait_for(lambda: not api_of(alto)._streams, "the ended stream to be let go")


def test_streams_are_bounded_and_end_when_the_api_closes(start_controller):
    controller = start_controller("sc16", listen_http="127.0.0.1:0", web_limits=WebLimits(max_streams=1))
    url = base(controller)
    stream = Stream(f"{url}/updates", {"add": {"nm": {"resource-id": "networkmap"}}})
    try:
        assert stream.next()[0] == "application/alto-updatestreamcontrol+json"
        assert stream.next()[0] == "application/alto-networkmap+json,nm"
        refused = httpx.post(f"{url}/updates", content=json.dumps({"add": {"nm": {"resource-id": "networkmap"}}}),
                             headers={"Content-Type": UPDATE_PARAMS}, timeout=10)
        assert refused.status_code == 503 and refused.headers["Content-Type"] == ERROR
        assert refused.json()["meta"]["code"] == "E_SYNTAX" and "at most 1" in refused.json()["meta"]["message"]
        controller.loop.run(api_of(controller).close())
        kind, data = stream.next()
        assert kind == "application/alto-updatestreamcontrol+json"
        assert data == {"stopped": ["nm"], "description": "the controller is stopping"}
        assert stream.next() is None
    finally:
        stream.close()


def test_bad_requests_get_the_alto_error_body_and_change_nothing(start_controller):
    controller = start_controller("sc16", listen_http="127.0.0.1:0", web_limits=WebLimits(max_body_bytes=4096))
    url = base(controller)
    grpc = TsdnClient(controller.address, timeout=10)
    try:
        tags_before = {name: httpx.get(f"{url}/costmap/{name}").json()["meta"]["vtag"]["tag"]
                       for name in ("num-routingcost", "num-bw-available")}
        routing = {"cost-mode": "numerical", "cost-metric": "routingcost"}
        cases = [
            ("unknown PID", "/costmap/filtered", FILTER,
             json.dumps({"cost-type": routing, "pids": {"srcs": ["Caltech"], "dsts": ["Atlantis"]}}),
             400, "E_INVALID_FIELD_VALUE", "pids.dsts"),
            ("malformed JSON", "/costmap/filtered", FILTER, '{"cost-type": {', 400, "E_SYNTAX", None),
            ("missing field", "/endpointcost", ECS_PARAMS, json.dumps({"cost-type": routing}),
             400, "E_MISSING_FIELD", "endpoints"),
            ("wrong type", "/endpointcost", ECS_PARAMS,
             json.dumps({"cost-type": routing, "endpoints": {"dsts": "ipv4:10.16.2.11"}}),
             400, "E_INVALID_FIELD_TYPE", "endpoints.dsts"),
            ("bad address", "/endpointcost", ECS_PARAMS,
             json.dumps({"cost-type": routing, "endpoints": {"dsts": ["ipv4:10.16.2.300"]}}),
             400, "E_INVALID_FIELD_VALUE", "endpoints.dsts[0]"),
            ("cost type not offered", "/endpointcost", ECS_PARAMS,
             json.dumps({"cost-type": {"cost-mode": "ordinal", "cost-metric": "bw-residual"},
                         "endpoints": {"dsts": ["ipv4:10.16.2.11"]}}),
             400, "E_INVALID_FIELD_VALUE", "cost-type"),
            ("wrong media type", "/endpointcost", "application/json",
             json.dumps({"cost-type": routing, "endpoints": {"dsts": ["ipv4:10.16.2.11"]}}), 415, "E_SYNTAX", None),
            ("no media type", "/costmap/filtered", None, json.dumps({"cost-type": routing}), 415, "E_SYNTAX", None),
            ("body too large", "/endpointcost", ECS_PARAMS,
             json.dumps({"cost-type": routing, "endpoints": {"dsts": [f"ipv4:10.16.2.{i % 250}" for i in range(500)]}}),
             413, "E_SYNTAX", None),
            ("stream of nothing known", "/updates", UPDATE_PARAMS,
             json.dumps({"add": {"x": {"resource-id": "costmap-num-latency"}}}), 400, "E_INVALID_FIELD_VALUE",
             "add.x.resource-id"),
        ]
        for what, path, media_type, body, status, code, field in cases:
            headers = {"Content-Type": media_type} if media_type else {}
            reply = httpx.post(f"{url}{path}", content=body.encode(), headers=headers, timeout=10)
            assert reply.status_code == status, (what, reply.text)
            assert reply.headers["Content-Type"] == ERROR, what
            meta = reply.json()["meta"]
            assert meta["code"] == code and meta.get("field") == field, (what, meta)
        excluded = httpx.get(f"{url}/networkmap", headers={"Accept": "application/json"})
        assert excluded.status_code == 406 and excluded.headers["Content-Type"] == ERROR
        assert httpx.get(f"{url}/networkmap", headers={"Accept": "application/*;q=0.5"}).status_code == 200
        assert httpx.get(f"{url}/costmap/num-latency").status_code == 404
        assert httpx.get(f"{url}/endpointcost").status_code == 405
        # Nothing changed: no reservation, no stream, the same costs.
        assert list(grpc.list_reservations()) == [] and not api_of(controller)._streams
        assert {name: httpx.get(f"{url}/costmap/{name}").json()["meta"]["vtag"]["tag"]
                for name in tags_before} == tags_before
    finally:
        grpc.close()


def test_every_resource_has_its_exact_media_type_and_the_directory_lists_them(alto):
    url = base(alto)
    directory = httpx.get(f"{url}/directory")
    assert directory.headers["Content-Type"] == "application/alto-directory+json"
    listed = directory.json()
    assert listed["meta"]["default-alto-network-map"] == "networkmap"
    assert set(listed["meta"]["cost-types"]) == {"num-routingcost", "ord-routingcost", "num-hopcount",
                                                 "num-bw-residual", "num-bw-available"}
    assert listed["meta"]["cost-types"]["num-bw-available"]["cost-context"] == {"cost-source": "estimation"}
    for resource_id, entry in listed["resources"].items():
        if "accepts" in entry:
            continue
        reply = httpx.get(entry["uri"])
        assert reply.status_code == 200 and reply.headers["Content-Type"] == entry["media-type"], resource_id
        if entry["media-type"] == "application/alto-costmap+json":
            assert reply.json()["meta"]["cost-type"]["cost-metric"] == listed["meta"]["cost-types"][
                entry["capabilities"]["cost-type-names"][0]]["cost-metric"]
    updates = listed["resources"]["update-stream"]
    assert updates["media-type"] == "text/event-stream" and updates["accepts"] == UPDATE_PARAMS
    assert updates["capabilities"]["support-stream-control"] is True
    assert set(updates["capabilities"]["incremental-change-media-types"]) == set(updates["uses"])
    # An unknown address is in the catch-all PID: no cost; ordinal ranks among the pairs answered.
    assert ecs(alto, "routingcost", [CALTECH_A, "192.0.2.1"], [STARLIGHT, PASADENA], mode="ordinal") == {
        f"ipv4:{CALTECH_A}": {f"ipv4:{STARLIGHT}": 1, f"ipv4:{PASADENA}": 2}}
    # Without `srcs`, the source is the client itself (127.0.0.1: no DTN, so no cost).
    reply = httpx.post(f"{url}/endpointcost", headers={"Content-Type": ECS_PARAMS},
                       content=json.dumps({"cost-type": {"cost-mode": "numerical", "cost-metric": "hopcount"},
                                           "endpoints": {"dsts": [f"ipv4:{STARLIGHT}"]}}))
    assert reply.status_code == 200 and reply.json()["endpoint-cost-map"] == {}


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_tokens_are_asked_for_bearer_or_basic_and_refusals_are_alto_errors(start_controller, tokens_file: Path):
    controller = start_controller("sc16", listen_http="127.0.0.1:0", tokens=tokens_file)
    url = f"{base(controller)}/networkmap"
    rucio = TOKENS["rucio"][1]
    for header in (None, "Bearer wrong-token-0123456789", _basic("rucio", "wrong-token-0123456789")):
        reply = httpx.get(url, headers={"Authorization": header} if header else {})
        assert reply.status_code == 401 and reply.headers["Content-Type"] == ERROR, header
        assert reply.json()["meta"]["code"] == "E_SYNTAX" and "WWW-Authenticate" in reply.headers
    for header in (f"Bearer {rucio}", _basic("rucio", rucio)):
        reply = httpx.get(url, headers={"Authorization": header})
        assert reply.status_code == 200 and reply.headers["Content-Type"] == "application/alto-networkmap+json"
    agent = httpx.get(url, headers={"Authorization": f"Bearer {TOKENS['dtn-agent'][1]}"})
    assert agent.status_code == 403 and agent.headers["Content-Type"] == ERROR  # agents report; they do not ask


def test_the_openalto_client_authenticates_with_http_basic(start_controller, tokens_file, tmp_path, monkeypatch):
    Client = openalto_client()
    controller = start_controller("sc16", listen_http="127.0.0.1:0", tokens=tokens_file)
    url = base(controller)
    config = tmp_path / "alto.conf"
    config.write_text(f"[client]\ndefault_networkmap = {url}/networkmap\n"
                      f"default_costmap = {url}/costmap/num-hopcount\n"
                      f"auth_type = userpass\nusername = rucio\npassword = {TOKENS['rucio'][1]}\n")
    monkeypatch.setenv("ALTO_CONFIG", str(config))
    assert Client().get_routing_costs([CALTECH_A], [PASADENA]) == {CALTECH_A: {PASADENA: 2}}


def test_a_link_down_and_measured_congestion_reach_the_stream_without_any_reservation_event(alto):
    """Neither a link going down with nothing booked on it nor another tenant's load is a reservation
    event: the stream's once-a-second measurement finds them."""
    stream = Stream(f"{base(alto)}/updates", {"add": {"hops": {"resource-id": "costmap-num-hopcount"},
                                                      "bw": {"resource-id": "costmap-num-bw-available"}}})
    book, worker = alto.book, alto.worker
    try:
        assert stream.next()[0] == "application/alto-updatestreamcontrol+json"
        held = {}
        for _ in range(2):
            kind, data = stream.next()
            held[kind.split(",")[1]] = data
        assert held["hops"]["cost-map"]["Caltech"]["StarLight"] == 1  # over tbit-rdma

        def follow(until) -> None:
            while not until(held):
                kind, patch = stream.next(timeout=5)
                media_type, client_id = kind.split(",")
                assert media_type == "application/merge-patch+json"
                held[client_id] = apply_patch(held[client_id], patch)

        worker.call(book.set_link_state, "tbit-rdma", False, "test: fibre cut")
        follow(lambda h: h["hops"]["cost-map"]["Caltech"]["StarLight"] == 2)  # through SCinet now
        worker.call(book.set_link_state, "tbit-rdma", True, "test: repaired")
        follow(lambda h: h["hops"]["cost-map"]["Caltech"]["StarLight"] == 1)
        # Another tenant's 95G on every circuit out of SCinet: congested, nothing left to Pasadena.
        wan = [alto.topology.link_directions[name][0] for name in alto.topology.links if name.startswith("wan-")]
        loads = {d.id: DirectionLoad(d.id, d.link, d.src, d.dst, d.capacity, d.kind, 95 * G, 95 * G, 0.95)
                 for d in wan}
        worker.call(book.observe_loads, loads)
        follow(lambda h: h["bw"]["cost-map"]["SCinet"]["Caltech-Pasadena"] == 0)
        assert ecs(alto, "bw-available", [SCINET], [PASADENA]) == {f"ipv4:{SCINET}": {f"ipv4:{PASADENA}": 0}}
        assert ecs(alto, "bw-residual", [SCINET], [PASADENA]) == {f"ipv4:{SCINET}": {f"ipv4:{PASADENA}": 100 * G}}
    finally:
        stream.close()
    wait_for(lambda: not api_of(alto)._streams, "the stream the client hung up on to be let go")
