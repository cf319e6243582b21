"""The live map and /metrics explain rerouting: congested link directions marked with their
measured load and the part that is not the controller's, the reason of each reservation's last
move, and decisions counted by verdict. On a ledger-only ring8 controller whose book is fed
measured loads and rates through its worker (as the switches' load feed and the agents do), over
HTTP and in a real headless Chromium."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from northbound.client import TsdnClient
from sdn_app.core.decisions import Kind
from sdn_app.core.rerouting.policy import WIRE_OVERHEAD
from sdn_app.core.reservation import Principal, Role
from sdn_app.web.live import event_json, event_verb, reservation_json
from sdn_app.web.metrics import ControllerMetrics
from tests.browser import chromium
from tests.switched import G, confirm, measured_loads
from tests.test_advisor import S2_S3, mesh, rearranged
from tests.test_web import get
from tests.waiting import wait_for

ADMIN = Principal("ops", Role.ADMIN)
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"


@pytest.fixture
def congested(start_controller):
    """A ring8 controller with its map; dtn1 -> dtn3 (25G) moved off s2-s3, congested by 98G of
    which 90G is not the controller's. Yields (controller, reservation id, clear())."""
    controller = start_controller("ring8", listen_http="127.0.0.1:0")
    client = TsdnClient(controller.address, timeout=10)
    made = client.create_reservation("dtn1", "dtn3", 25 * G)
    client.close()
    book = controller.book

    def congest() -> None:
        for _ in range(3):
            book.observe_loads(measured_loads(book.topology, {S2_S3: 98 * G}))
            book.report_rate(ADMIN, made.name, 8 * G)

    def clear() -> None:
        controller.worker.call(lambda: book.observe_loads(measured_loads(book.topology, {})))

    controller.worker.call(congest)
    yield controller, made.id, clear


def snapshot(controller) -> dict:
    return json.loads(get(controller, "/api/snapshot")[2])


def link(snap: dict, name: str) -> dict:
    return next(x for x in snap["links"] if x["name"] == name)


def test_the_map_marks_congestion_and_tells_why_a_reservation_moved(congested):
    controller, rid, clear = congested
    wait_for(lambda: link(snapshot(controller), "s2-s3")["congested"], "s2-s3 marked congested on the map")
    snap = snapshot(controller)
    s2s3 = link(snap, "s2-s3")
    assert s2s3["congestion"] == "98% of 100G, 89.6G not ours"
    forward, backward = sorted(s2s3["directions"], key=lambda d: d["id"] != S2_S3)
    assert forward["congested"] and forward["congestion"]["unowned_bps"] == 98 * G - 8 * G * WIRE_OVERHEAD
    assert not backward["congested"]  # measured, idle: clear
    assert not any(x["congested"] for x in snap["links"] if x["name"] != "s2-s3")
    assert [c["id"] for c in snap["congested"]] == [S2_S3]
    mine = next(r for r in snap["reservations"] if r["id"] == rid)
    assert mine["switches"][:2] == ["s1", "s8"]
    assert mine["last_move"]["cause"] == "congestion"
    assert mine["verdict"] == "moved" and mine["decision"]["kind"] == "moved"  # the typed decision of its last change
    assert mine["last_move"]["links"] == mine["links"] and mine["links"][0] == "s8-s1"
    assert "congested: s2:1->s3:2 at 98% of 100G, 89.6G not the controller's" in mine["last_move"]["reason"]

    metrics = get(controller, "/metrics")[2].decode()
    assert 'tsdn_reroutes_total{cause="congestion"} 1.0' in metrics
    assert 'tsdn_reroute_decisions_total{verdict="moved"} 1.0' in metrics
    assert 'tsdn_reroute_decisions_total{verdict="hosts"} 0.0' in metrics
    assert 'tsdn_link_congested{dst="s3",link="s2-s3",src="s2"} 1.0' in metrics
    assert 'tsdn_link_congested{dst="s2",link="s2-s3",src="s3"} 0.0' in metrics
    assert 'tsdn_link_unowned_bits_per_second{dst="s3",link="s2-s3",src="s2"} 8.96e+10' in metrics

    clear()
    wait_for(lambda: not link(snapshot(controller), "s2-s3")["congested"], "s2-s3 clear again on the map")
    assert snapshot(controller)["congested"] == []
    wait_for(lambda: 'tsdn_link_congested{dst="s3",link="s2-s3",src="s2"} 0.0'
             in get(controller, "/metrics")[2].decode(), "the congestion gauge back to 0")


def test_metrics_count_a_rearrangement_as_one_decision_and_its_moves_by_cause(tmp_path):
    env = mesh(tmp_path)
    _s, _t, _r = rearranged(env)
    confirm(env)
    confirm(env)
    metrics = ControllerMetrics()
    metrics.observe_events(env.book.take_events())
    text = metrics.exposition().decode()
    assert 'tsdn_reroutes_total{cause="rearrangement"} 1.0' in text
    assert 'tsdn_reroutes_total{cause="congestion"} 1.0' in text
    assert 'tsdn_reroutes_total{cause="other"} 0.0' in text
    assert 'tsdn_reroute_decisions_total{verdict="rearranged"} 1.0' in text
    assert 'tsdn_reroute_decisions_total{verdict="moved"} 0.0' in text


def test_metrics_and_the_map_read_the_typed_decision_never_the_reason(tmp_path):
    env = mesh(tmp_path)
    rearranged(env)
    confirm(env)
    confirm(env)
    events = env.book.take_events()
    reworded = [replace(e, reason="reworded: nothing here to parse") for e in events]
    metrics = ControllerMetrics()
    metrics.observe_events(reworded)
    text = metrics.exposition().decode()
    assert 'tsdn_reroutes_total{cause="rearrangement"} 1.0' in text
    assert 'tsdn_reroutes_total{cause="congestion"} 1.0' in text
    assert 'tsdn_reroute_decisions_total{verdict="rearranged"} 1.0' in text
    assert [event_verb(e) for e in reworded] == [event_verb(e) for e in events]
    announced = next(e for e in reworded if e.decision is not None and e.decision.kind is Kind.REARRANGED)
    shown = reservation_json(announced.reservation)  # the reservation carries the decision its reason tells
    assert shown["verdict"] == "rearranged" and shown["decision"]["displaced"]
    assert event_json(announced)["decision"]["kind"] == "rearranged"
    untyped = ControllerMetrics()  # today's reasons without their decisions: nothing is counted
    untyped.observe_events([replace(e, decision=None) for e in events])
    text = untyped.exposition().decode()
    assert 'tsdn_reroutes_total{cause="rearrangement"} 0.0' in text
    assert 'tsdn_reroute_decisions_total{verdict="rearranged"} 0.0' in text
    assert reservation_json(replace(announced.reservation, decision=None))["verdict"] is None


@pytest.fixture
def browser():
    yield from chromium()


def test_the_page_shows_the_congested_link_its_load_and_the_reason_of_the_move(congested, browser):
    controller, rid, clear = congested
    browser.get(f"http://{controller.http_address}/")
    wait_for(lambda: browser.find_element("tag name", "body").get_attribute("data-ready") == "1",
             "the page to draw its snapshot", 15)

    def attr(css: str, name: str) -> str | None:  # read in the page: the legend is redrawn every tick
        return browser.execute_script("const e = document.querySelector(arguments[0]);"
                                      "return e ? e.getAttribute(arguments[1]) : null;", css, name)

    def text(css: str) -> str | None:
        return browser.execute_script("const e = document.querySelector(arguments[0]);"
                                      "return e ? e.textContent : null;", css)

    s2s3 = 'svg g.link[data-link="s2-s3"]'
    wait_for(lambda: attr(s2s3, "data-congested") == "1", "s2-s3 drawn congested", 15, interval=0.2)
    assert attr(f'{s2s3} .dir[data-direction="{S2_S3}"]', "data-congested") == "1"
    assert attr(f'{s2s3} .dir[data-direction="s3:2->s2:1"]', "data-congested") == "0"
    assert attr('svg g.link[data-link="s1-s2"]', "data-congested") == "0"
    assert text(f"{s2s3} text.congestion-label") == "98% of 100G, 89.6G not ours"
    assert "s2:1->s3:2: 98% of 100G, 89.6G not ours" in text("#congestion")
    entry = f'#legend li[data-reservation="{rid}"]'
    wait_for(lambda: attr(entry, "data-move-cause") == "congestion", "the reservation's last move on the page", 15,
             interval=0.2)
    assert attr(entry, "data-verdict") == "moved"  # the typed decision, as the map's JSON carries it
    why = text(f"{entry} .why")
    assert "(congestion): congested: achieved 8G of 25G booked for 3 reports" in why
    assert "s2:1->s3:2 at 98% of 100G" in why
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "map-congestion.png"))

    clear()
    wait_for(lambda: attr(s2s3, "data-congested") == "0", "s2-s3 drawn clear again", 15, interval=0.2)
    assert text(f"{s2s3} text.congestion-label") == ""
    assert "no congested link" in text("#congestion")
