"""The live map in a real headless Chromium (selenium), on ring8 in Mininet controlled by the
real `tsdn controller` process: every link is drawn, and cutting s2-s3 under a reservation
dtn1 -> dtn3 redraws its route around the ring (via s8) and the link as down, within seconds.
The screenshot is kept in artifacts/map.png (repo root, ignored by git).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from benchmarks.report import free_port
from mininet_tests.controlled import DEADLINE, SCALE, ControllerProcess, cli_env, connected_bridges, tsdn
from mininet_tests.traffic import start_iperf3
from tests.browser import chromium
from tests.waiting import wait_for

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
REROUTE_WITHIN = 10.0  # seconds from the cut to the new route on the page


@pytest.fixture
def browser():
    yield from chromium()


@pytest.fixture
def mapped(network, tmp_path):
    """ring8 in Mininet, a `tsdn controller` process serving the map; yields (net, env, map URL)."""
    http_port = free_port()
    controller = ControllerProcess(tmp_path, free_port(), extra=("--listen-http", f"127.0.0.1:{http_port}"))
    try:
        address = controller.start()
        net = network("ring8", scale=SCALE, controller=("127.0.0.1", controller.openflow_port))
        wait_for(lambda: connected_bridges() >= {f"s{i}" for i in range(1, 9)}, "all 8 switches to connect", DEADLINE)
        yield net, cli_env(address, tmp_path), f"http://127.0.0.1:{http_port}/"
    finally:
        controller.stop()


def attr(driver, css: str, name: str) -> str | None:
    found = driver.find_elements("css selector", css)
    return found[0].get_attribute(name) if found else None


def test_map_shows_links_and_a_reroute(mapped, browser):
    net, env, url = mapped
    browser.get(url)
    wait_for(lambda: browser.find_element("tag name", "body").get_attribute("data-ready") == "1",
             "the page to draw its snapshot", 15)
    drawn = {e.get_attribute("data-link") for e in browser.find_elements("css selector", "svg g.link[data-link]")}
    assert drawn == set(net.topology.links)

    made = tsdn(env, "path", "request", "dtn1", "dtn3", "-b", "10G", "--json")
    assert made.returncode == 0, made.stderr
    rid = json.loads(made.stdout)["id"].rsplit("/", 1)[-1]
    route = f'svg path.route[data-reservation="{rid}"]'
    wait_for(lambda: attr(browser, route, "data-path") == "s1 s2 s3", "the route s1 s2 s3 on the page", 10)

    # traffic on the reservation, so the links show load (10 Mbit/s metered on 100 Mbit/s links)
    run = start_iperf3(net.host("dtn1"), net.host("dtn3"), net.topology.dtns["dtn3"].ipv4, seconds=20,
                       offered_mbps=20, udp=True)
    try:
        wait_for(lambda: float(attr(browser, 'svg g.link[data-link="s1-s2"]', "data-fraction") or 0) > 0.02,
                 "load on s1-s2 on the page", 15, interval=0.2)
        cut = time.monotonic()
        net.mn.configLinkStatus(net.topo.mn_name("s2"), net.topo.mn_name("s3"), "down")
        wait_for(lambda: "s8" in (attr(browser, route, "data-path") or "").split(),
                 "the route via s8 on the page", REROUTE_WITHIN, interval=0.1)
        wait_for(lambda: attr(browser, 'svg g.link[data-link="s2-s3"]', "data-state") == "down",
                 "s2-s3 down on the page", REROUTE_WITHIN, interval=0.1)
        took = time.monotonic() - cut
        assert attr(browser, route, "data-path") == "s1 s8 s7 s6 s5 s4 s3"
        print(f"page showed the reroute {took:.1f} s after the cut")
        wait_for(lambda: float(attr(browser, 'svg g.link[data-link="s8-s1"]', "data-fraction") or 0) > 0.02,
                 "load on the new route on the page", 15, interval=0.2)
        feed = browser.find_element("id", "events").text
        assert "s2-s3" in feed
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "map.png"
        browser.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
    finally:
        run.server.kill()
        run.client.kill()
