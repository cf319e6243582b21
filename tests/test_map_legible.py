"""The live map is legible where the demo happens. A real headless Chromium opens the map of a real
(ledger-only) controller at 1600 x 1000 and 1280 x 720 and checks what a person at the screen
would: no two labels overlap and every one lies on the map; every link can be pointed at on its
own (a real mouse move to a point of it brings up a tooltip naming that link); SC16's show floor
takes a real share of the map, and its WAN leaves no wide empty band of ocean. SC16 and ring8
keep every label; a Topology Zoo network too big for its labels may hide some, and then the page
says so. The screenshots are saved in the test's tmp_path."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import dump_topology_spec
from tests.browser import chromium
from tests.waiting import wait_for
from topologies import TOPOLOGY_DIR, builtin_topology
from topologies.zoo_import import import_zoo

G = 1_000_000_000
FLOOR_KINDS = {"booth", "hub"}
WINDOWS = {"1600x1000": (1600, 1000), "1280x720": (1280, 720)}

# In the page: every text on the map that shows something, with its box in window pixels.
LABELS_JS = """
const map = document.getElementById("map").getBoundingClientRect();
const texts = [...document.querySelectorAll("#map text")].filter((t) => t.textContent.trim() &&
  getComputedStyle(t).display !== "none" && getComputedStyle(t).visibility !== "hidden" &&
  !t.closest("[display=none]"));
return {
  map: [map.left, map.top, map.right, map.bottom], window: [innerWidth, innerHeight],
  labels: texts.map((t) => { const r = t.getBoundingClientRect();
    return { id: t.getAttribute("data-label") || t.getAttribute("class"), text: t.textContent,
             box: [r.left, r.top, r.right, r.bottom] }; }),
};
"""

# In the page: for each link, a point on it (window pixels, whole numbers) where the element on top
# belongs to that link, or null when every point of it is covered by something else.
LINK_POINTS_JS = """
const map = document.getElementById("map").getBoundingClientRect();
const out = {};
for (const g of document.querySelectorAll("#map g.link")) {
  let found = null;
  for (const shape of g.querySelectorAll("path, line")) {
    const length = shape.getTotalLength(), m = shape.getScreenCTM();
    for (let i = 1; i < 60 && !found; i++) {
      const p = shape.getPointAtLength(length * ((i * 37) % 60) / 60);  // spread over the link, not end first
      const x = Math.round(m.a * p.x + m.c * p.y + m.e), y = Math.round(m.b * p.x + m.d * p.y + m.f);
      if (x <= map.left || y <= map.top || x >= map.right || y >= map.bottom) continue;
      const mine = (dx, dy) => {
        const e = document.elementFromPoint(x + dx, y + dy);
        return e && e.closest("g.link") === g;
      };
      if (mine(0, 0) && mine(2, 0) && mine(-2, 0) && mine(0, 2) && mine(0, -2)) found = [x, y];
    }
    if (found) break;
  }
  out[g.getAttribute("data-link")] = found;
}
return out;
"""

# In the page: after each mouse move over the map, note where it is and the tooltip then shown.
TOOLTIP_LOG_JS = """
window.tsdnTooltips = [];
document.getElementById("map").addEventListener("pointermove", (e) => {
  const tip = document.getElementById("tooltip");
  window.tsdnTooltips.push([Math.round(e.clientX), Math.round(e.clientY), tip && !tip.hidden ? tip.textContent : null]);
});
"""

SWITCHES_JS = """
const out = {};
for (const c of document.querySelectorAll("#map circle.switch")) {
  const r = c.getBoundingClientRect();
  out[c.getAttribute("data-switch")] = [r.left, r.top, r.right, r.bottom];
}
return out;
"""


def overlap(a: list[float], b: list[float]) -> bool:
    """Whether two boxes (left, top, right, bottom) share more than a hairline."""
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def within(box: list[float], area: list[float]) -> bool:
    return box[0] >= area[0] - 0.5 and box[1] >= area[1] - 0.5 and box[2] <= area[2] + 0.5 and box[3] <= area[3] + 0.5


def centre(box: list[float]) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def open_map(browser, controller) -> None:
    """Load the page and wait until it has drawn the map and not drawn it again for a moment (the
    page draws again whenever the map's size changes)."""
    browser.get(f"http://{controller.http_address}/")
    wait_for(lambda: browser.execute_script("return document.body.getAttribute('data-ready')") == "1",
             "the page to draw its snapshot", 15, interval=0.1)
    draws = [None]

    def settled() -> bool:
        now = browser.execute_script("return document.getElementById('map').getAttribute('data-draws')")
        steady, draws[0] = now == draws[0], now
        return steady
    wait_for(settled, "the map to stop drawing again", 10, interval=0.3)


def label_problems(seen: dict[str, Any]) -> list[str]:
    """Labels that overlap one another or stick out of the map (or the window)."""
    area = [max(seen["map"][0], 0), max(seen["map"][1], 0), min(seen["map"][2], seen["window"][0]),
            min(seen["map"][3], seen["window"][1])]
    labels = seen["labels"]
    problems = [f"label {a['text']!r} overlaps {b['text']!r}" for i, a in enumerate(labels)
                for b in labels[i + 1:] if overlap(a["box"], b["box"])]
    problems += [f"label {x['text']!r} at {[round(v) for v in x['box']]} is outside the visible map "
                 f"{[round(v) for v in area]}" for x in labels if not within(x["box"], area)]
    return problems


def hover_problems(browser, topology: Topology) -> list[str]:
    """Links with no point of their own, or whose tooltip does not name them under a real mouse
    (WebDriver pointer actions: the browser's own mouse events, one move to each link's point; the
    page records the tooltip it shows after each move)."""
    from selenium.webdriver.common.actions.action_builder import ActionBuilder

    points = browser.execute_script(LINK_POINTS_JS)
    problems = [f"link {name} has no point of its own: every point of it is under another link or a switch"
                for name in topology.links if points.get(name) is None]
    browser.execute_script(TOOLTIP_LOG_JS)
    actions = ActionBuilder(browser, duration=0)
    aimed = [(name, point) for name, point in points.items() if point is not None]
    for _, point in aimed:
        actions.pointer_action.move_to_location(*point)
    actions.perform()
    shown = {(x, y): tip for x, y, tip in browser.execute_script("return window.tsdnTooltips;")}
    for name, (x, y) in aimed:
        tip = shown.get((x, y))
        named = tip.split("\n", 1)[0].split(" ", 1)[0] if tip else None
        if named != name:
            problems.append(f"the mouse on link {name} at {[x, y]} shows the tooltip {tip!r}")
    return problems


def switch_problems(switches: dict[str, list[float]]) -> list[str]:
    """Switches drawn on top of one another (closer than their circles plus a gap)."""
    names = sorted(switches)
    problems = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (ax, ay), (bx, by) = centre(switches[a]), centre(switches[b])
            room = (switches[a][2] - switches[a][0] + switches[b][2] - switches[b][0]) / 2 + 6
            if ((ax - bx) ** 2 + (ay - by) ** 2) ** 0.5 < room:
                problems.append(f"switches {a} and {b} overlap")
    return problems


def named_everything(seen: dict[str, Any], topology: Topology) -> list[str]:
    """Every site and every switch named by a label on the map."""
    shown = " ".join(x["text"] for x in seen["labels"])
    squashed = "".join(ch for ch in shown.lower() if ch.isalnum())
    missing = [f"site {s.name!r}" for s in topology.spec.sites if s.switches and s.name not in shown]
    missing += [f"switch {name!r}" for name in topology.switches
                if name not in shown and "".join(ch for ch in name if ch.isalnum()) not in squashed]
    return [f"{what} has no label on the map" for what in missing]


def look_at_map(browser, controller, topology: Topology, shot: Path,
                fully_labelled: bool) -> tuple[dict[str, Any], list[str]]:
    """Open the map, save its screenshot to `shot`; what the page shows and what is wrong with it."""
    open_map(browser, controller)
    browser.save_screenshot(str(shot))
    seen = browser.execute_script(LABELS_JS)
    seen["switches"] = browser.execute_script(SWITCHES_JS)
    problems = label_problems(seen) + switch_problems(seen["switches"])
    note = browser.execute_script("const n = document.getElementById('map-note');"
                                  "return n && !n.hidden ? n.textContent : '';")
    hidden = int(browser.execute_script("return document.getElementById('map').getAttribute('data-labels-hidden')")
                 or 0)
    if fully_labelled:
        problems += named_everything(seen, topology)
        if hidden or note:
            problems.append(f"labels hidden on {topology.name}: {note!r}")
    elif hidden and "hidden" not in note:
        problems.append(f"{hidden} labels hidden but the page does not say so (note: {note!r})")
    problems += hover_problems(browser, topology)
    return seen, problems


def report(topology: Topology, shot: Path, problems: list[str]) -> str:
    return f"{topology.name} at {shot.stem} (screenshot {shot}):\n" + "\n".join(problems)


@pytest.fixture(params=list(WINDOWS), ids=list(WINDOWS))
def window(request) -> tuple[str, tuple[int, int]]:
    return request.param, WINDOWS[request.param]


@pytest.fixture
def browser(window):
    yield from chromium(window=window[1])


def test_sc16_show_floor_and_wan_are_legible(start_controller, browser, window, tmp_path):
    controller = start_controller("sc16", listen_http="127.0.0.1:0")
    topology = controller.topology
    shot = tmp_path / f"sc16-{window[0]}.png"
    seen, problems = look_at_map(browser, controller, topology, shot, fully_labelled=True)
    switches = seen["switches"]
    left, top, right, bottom = seen["map"]

    # the show floor is not a corner: its switches span a real part of the map
    floor = [n for s in topology.spec.sites if s.kind in FLOOR_KINDS for n in s.switches]
    xs = [x for n in floor for x in (switches[n][0], switches[n][2])]
    ys = [y for n in floor for y in (switches[n][1], switches[n][3])]
    share = (max(xs) - min(xs)) * (max(ys) - min(ys)) / ((right - left) * (bottom - top))
    if share < 0.12:
        problems.append(f"the show floor covers only {share:.1%} of the map")
    shown = " ".join(x["text"] for x in seen["labels"])
    problems += [f"the 1 Tbit/s link {name} is not named on the map" for name in ("tbit-tcp", "tbit-rdma")
                 if name not in shown]

    # no wide band of empty ocean: along each axis no gap between switches (or a switch and the
    # map's edge) is more than a third of the map
    for axis, (low, high) in ((0, (left, right)), (1, (top, bottom))):
        coordinates = sorted([low, high, *(centre(box)[axis] for box in switches.values())])
        gap = max(b - a for a, b in itertools.pairwise(coordinates))
        if gap > (high - low) / 3:
            problems.append(f"an empty band of {gap:.0f} px along {'xy'[axis]} on a {high - low:.0f} px map")
    assert not problems, report(topology, shot, problems)


# Three switches, two links between the first two and three between the last two (bundles of
# separate circuits, as a Topology Zoo file or a WAN with a backup wave has them).
PARALLEL = """
name: parallel
switches:
  - {name: west, dpid: 1, ports: ["1-8"]}
  - {name: middle, dpid: 2, ports: ["1-8"]}
  - {name: east, dpid: 3, ports: ["1-8"]}
links:
  - {name: west-middle-1, a: west, a_port: 1, b: middle, b_port: 1, capacity: 100G}
  - {name: west-middle-2, a: middle, a_port: 2, b: west, b_port: 2, capacity: 100G}
  - {name: middle-east-1, a: middle, a_port: 3, b: east, b_port: 1, capacity: 100G}
  - {name: middle-east-2, a: middle, a_port: 4, b: east, b_port: 2, capacity: 400G}
  - {name: middle-east-3, a: east, a_port: 3, b: middle, b_port: 5, capacity: 100G}
  - {name: west-east, a: west, a_port: 3, b: east, b_port: 4, capacity: 100G}
sites:
  - {name: Seattle, lat: 47.6, lon: -122.3, switches: [west]}
  - {name: Denver, lat: 39.7, lon: -105.0, switches: [middle]}
  - {name: Chicago, lat: 41.9, lon: -87.6, switches: [east]}
"""


@pytest.mark.parametrize("name", ["ring8", "parallel", "Internet2", "Esnet"])
def test_other_topologies_are_legible(start_controller, browser, window, tmp_path, name):
    """ring8 (geographic, a ring), parallel links between the same two switches, Internet2 (no
    coordinates at all), ESnet (68 switches, most without coordinates, parallel links)."""
    if name == "ring8":
        path = builtin_topology("ring8")
    elif name == "parallel":
        path = tmp_path / "parallel.yaml"
        path.write_text(PARALLEL)
    else:
        path = tmp_path / f"{name.lower()}.yaml"
        path.write_text(dump_topology_spec(import_zoo(TOPOLOGY_DIR / "zoo" / f"{name}.graphml", 100 * G).spec))
    controller = start_controller(path, listen_http="127.0.0.1:0")
    shot = tmp_path / f"{name}-{window[0]}.png"
    _, problems = look_at_map(browser, controller, controller.topology, shot,
                              fully_labelled=name in ("ring8", "parallel"))
    assert not problems, report(controller.topology, shot, problems)
