"""The live map's HTTP side on a ledger-only controller: page, JSON snapshot, SSE, /metrics."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from northbound.client import ApiError, TsdnClient
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.topology import Topology
from sdn_app.web.layout import map_layout
from tests.waiting import wait_for
from topologies import builtin_topology

G = 1_000_000_000


@pytest.fixture
def mapped(start_controller):
    """A ledger-only ring8 controller with its live map on a free loopback port."""
    return start_controller("ring8", listen_http="127.0.0.1:0")


def get(controller, path: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(f"http://{controller.http_address}{path}", timeout=5) as reply:
        return reply.status, reply.headers.get("Content-Type"), reply.read()


class Stream:
    """A reader of `/api/events`: `(kind, data)` per message."""

    def __init__(self, controller):
        self.reply = urllib.request.urlopen(f"http://{controller.http_address}/api/events", timeout=10)
        assert self.reply.headers.get("Content-Type") == "text/event-stream"

    def next(self) -> tuple[str, dict]:
        kind = data = None
        while True:
            line = self.reply.readline().decode()
            assert line, "the stream ended"
            if line.startswith("event:"):
                kind = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data = json.loads(line[len("data:"):])
            elif line == "\n" and kind is not None:
                return kind, data

    def until(self, kind: str, accept=lambda data: True, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got, data = self.next()
            if got == kind and accept(data):
                return data
        raise AssertionError(f"no {kind} message within {timeout}s")

    def close(self):
        self.reply.close()


def test_page_and_static_files(mapped):
    status, kind, body = get(mapped, "/")
    assert status == 200 and kind.startswith("text/html")
    assert b'id="map"' in body and b"/static/map.js" in body
    assert b"http://" not in body.replace(b'xmlns="http://www.w3.org/2000/svg"', b"")  # no CDN
    for name, mime in (("map.js", "text/javascript"), ("map.css", "text/css")):
        status, kind, body = get(mapped, f"/static/{name}")
        assert status == 200 and kind.startswith(mime) and body
    for path in ("/static/../server.py", "/nothing", "/static/nothing.js"):
        with pytest.raises(urllib.error.HTTPError) as info:
            get(mapped, path)
        assert info.value.code == 404


def test_snapshot_has_the_topology_with_coordinates(mapped):
    _, kind, body = get(mapped, "/api/snapshot")
    assert kind == "application/json"
    snap = json.loads(body)
    topo = snap["topology"]
    assert topo["name"] == "ring8"
    assert {s["name"] for s in topo["switches"]} == {f"s{i}" for i in range(1, 9)}
    assert all(0 <= s["x"] <= topo["width"] and 0 <= s["y"] <= topo["height"] for s in topo["switches"])
    assert {s["name"]: (s["lat"], s["lon"]) for s in topo["sites"]}["site1"] == (44.8, -98.6)
    assert {link["name"] for link in snap["links"]} == {link["name"] for link in topo["links"]}
    assert all(link["state"] == "up" and len(link["directions"]) == 2 for link in snap["links"])
    assert snap["reservations"] == [] and snap["scale"] == 1.0


def test_sse_delivers_a_reservation_event_and_ticks(mapped):
    stream = Stream(mapped)
    try:
        kind, first = stream.next()
        assert kind == "snapshot" and first["topology"]["name"] == "ring8"
        client = TsdnClient(mapped.address, timeout=10)
        created = client.create_reservation("dtn1", "dtn3", 10 * G)
        rid = created.name.rsplit("/", 1)[-1]
        message = stream.until("reservation", lambda d: d["reservation"]["id"] == rid)
        assert message["event"]["verb"] == "created"
        assert message["reservation"]["switches"] == ["s1", "s2", "s3"]
        assert message["reservation"]["links"] == ["s1-s2", "s2-s3"]
        tick = stream.until("tick", lambda d: any(r["id"] == rid for r in d["reservations"]))
        assert tick["throughput"]["reserved_bps"] == 10 * G
        assert {link["name"] for link in tick["links"]} == set(mapped.topology.links)
        snap = json.loads(get(mapped, "/api/snapshot")[2])
        assert any(e.get("id") == rid for e in snap["events"])
        client.close()
    finally:
        stream.close()


def test_link_down_reroutes_on_the_map(mapped):
    client = TsdnClient(mapped.address, timeout=10)
    rid = client.create_reservation("dtn1", "dtn3", 10 * G).name.rsplit("/", 1)[-1]
    stream = Stream(mapped)
    try:
        mapped.worker.call(mapped.book.set_link_state, "s2-s3", False, "test")
        moved = stream.until("reservation", lambda d: d["reservation"]["id"] == rid
                             and d["event"]["verb"] in ("rerouted", "moving"))  # not its creation's, late
        assert "s8" in moved["reservation"]["switches"]
        link = stream.until("link", lambda d: d["link"] == "s2-s3")
        assert link["up"] is False
        tick = stream.until("tick")
        assert {x["name"]: x["state"] for x in tick["links"]}["s2-s3"] == "down"
    finally:
        stream.close()
        client.close()
    metrics = get(mapped, "/metrics")[2].decode()
    assert 'tsdn_reroutes_total{cause="link"} 1.0' in metrics
    assert 'tsdn_link_up{link="s2-s3"} 0.0' in metrics


def test_metrics_families(mapped):
    client = TsdnClient(mapped.address, timeout=10)
    client.create_reservation("dtn1", "dtn3", 60 * G)
    with pytest.raises(ApiError):
        client.create_reservation("dtn2", "dtn4", 150 * G)  # more than any link (or NIC) carries
    client.close()

    def ticked() -> bool:  # the map reads the core once a second
        text = get(mapped, "/metrics")[2].decode()
        return 'tsdn_admissions_refused_total{reason="no_capacity"} 1.0' in text \
            and 'tsdn_reservations{state="ACTIVE"} 1.0' in text
    wait_for(ticked, "the map's tick to count the reservation and the refusal")
    status, kind, body = get(mapped, "/metrics")
    text = body.decode()
    assert status == 200 and kind.startswith("text/plain")
    for family in ("tsdn_link_capacity_bits_per_second", "tsdn_link_up", "tsdn_reservations",
                   "tsdn_admissions_refused_total", "tsdn_reroutes_total", "tsdn_reservation_setup_seconds_bucket",
                   "tsdn_throughput_bits_per_second"):
        assert f"\n{family}" in text, family
    for family in ("tsdn_link_measured_bits_per_second", "tsdn_link_nominal_bits_per_second",
                   "tsdn_link_utilization_ratio"):
        assert f"# TYPE {family} gauge" in text, family  # samples only once switches report counters
    assert 'tsdn_reservations{state="ACTIVE"} 1.0' in text
    assert 'tsdn_reservation_setup_seconds_count 1.0' in text
    assert 'tsdn_admissions_refused_total{reason="no_capacity"} 1.0' in text


def test_no_http_by_default_in_the_config(start_controller):
    assert start_controller("ring8").http_address is None


def test_busy_port_is_a_clear_error(mapped, start_controller, tmp_path):
    with pytest.raises(Exception, match="--listen-http"):  # on a state file of its own: one controller per state
        start_controller("ring8", listen_http=mapped.http_address, state=tmp_path / "other.db")


def test_sc16_booths_do_not_overlap():
    layout = map_layout(Topology.load(builtin_topology("sc16")))
    points = list(layout.switches.values())
    gaps = [((ax - bx) ** 2 + (ay - by) ** 2) ** 0.5 for i, (ax, ay) in enumerate(points) for bx, by in points[i + 1:]]
    assert min(gaps) > 10
    assert all(0 <= x <= layout.width and 0 <= y <= layout.height for x, y in points)


def test_the_map_follows_reservation_events_again_after_a_burst_left_it_behind(start_controller, monkeypatch, caplog):
    monkeypatch.setattr("sdn_app.worker.SUBSCRIBER_BACKLOG", 20)  # the map's subscription overflows at 20
    controller = start_controller("ring8", listen_http="127.0.0.1:0")
    book, admin = controller.book, Principal("noc", Role.ADMIN)

    def burst() -> None:  # 60 reservations in one call: their events reach the hub in one publish
        for _ in range(30):
            made = book.create(admin, PathRequest("dtn1", "dtn3", G, book.clock.now(), float("inf")))
            book.release(admin, made.id)

    controller.worker.call(burst)
    wait_for(lambda: "fell more than 20 reservation events behind" in caplog.text, "the map to notice the overflow")
    stream = Stream(controller)
    try:
        stream.until("snapshot")
        client = TsdnClient(controller.address, timeout=10)
        rid = client.create_reservation("dtn2", "dtn4", G).name.rsplit("/", 1)[-1]
        message = stream.until("reservation", lambda d: d["reservation"]["id"] == rid)
        assert message["event"]["verb"] == "created"
        client.close()
    finally:
        stream.close()
