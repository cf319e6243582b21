"""The live map's domains (sdn_app.web.live, sdn_app.web.layout): the snapshot's topology lists the
interdomain ports and the neighbouring domains' remote sites, placed in the WAN's area; a
reservation with a remote end carries the remote part of its route and what was requested over
NSI, with the remote connection id once both segments are booked; one booked through tsdn's NSI
provider carries its connection id. Pure: a LiveMap with no worker, a SQLite ledger, no threads."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from sdn_app.core.clock import FakeClock
from sdn_app.core.ledger import Ledger
from sdn_app.core.nsi import LABEL as NSI_LABEL
from sdn_app.core.nsi_segments import SEGMENT_LABEL, SegmentDesk
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.web.layout import map_layout, nsa_short
from sdn_app.web.live import Domains, LiveMap, nsi_json, reservation_json
from tests.test_nsi_segments import ring8_with_a_neighbour
from topologies import TOPOLOGY_DIR, builtin_topology

G = 10**9
RNP = "urn:ogf:network:rnp.sc16:nsa"
I2 = "urn:ogf:network:i2.sc16:nsa"
RUCIO = Principal("rucio", Role.SERVICE)


@pytest.fixture(scope="module")
def sc16_nsi() -> Topology:
    return Topology.load(TOPOLOGY_DIR / "sc16-nsi.yaml")


def topology_json(topology: Topology) -> dict:
    return LiveMap(None, topology).topology_json()


def test_the_snapshot_lists_each_interdomain_port_with_its_neighbour(sc16_nsi: Topology) -> None:
    ports = {p["name"]: p for p in topology_json(sc16_nsi)["interdomain"]}
    assert set(ports) == {"to-rnp", "to-internet2"}
    rnp = ports["to-rnp"]
    assert (rnp["switch"], rnp["port"], rnp["capacity"], rnp["vlans"]) == ("scinet", 28, 100 * G, "1780-1799")
    assert (rnp["peer_nsa"], rnp["peer_stp"]) == (RNP, "urn:ogf:network:rnp.sc16:topology:scinet")
    assert rnp["domain_name"] == "rnp.sc16" and rnp["sites"] == ["RNP/ANSP Sao Paulo"]
    assert (ports["to-internet2"]["domain_name"], ports["to-internet2"]["sites"]) == ("i2.sc16", ["UMich Ann Arbor"])


def test_remote_sites_and_dtns_are_in_their_domain_in_the_wan_area(sc16_nsi: Topology) -> None:
    topo = topology_json(sc16_nsi)
    remote = {s["name"]: s for s in topo["remote_sites"]}
    assert set(remote) == {"RNP/ANSP Sao Paulo", "UMich Ann Arbor"}
    saopaulo, annarbor = remote["RNP/ANSP Sao Paulo"], remote["UMich Ann Arbor"]
    assert (saopaulo["port"], saopaulo["switch"], saopaulo["domain"], saopaulo["domain_name"]) == \
        ("to-rnp", "scinet", RNP, "rnp.sc16")
    assert saopaulo["dtns"] == ["saopaulo-dtn1"] and annarbor["dtns"] == ["annarbor-dtn1"]
    for site in remote.values():
        assert (site["pane"], site["role"]) == ("wan", "remote")
        assert 0 <= site["u"] <= 1 and 0 <= site["v"] <= 1
        assert 0 <= site["x"] <= topo["width"] and 0 <= site["y"] <= topo["height"]
    # geographic like the other WAN sites: Sao Paulo is the southernmost, Ann Arbor east of Chicago
    switches = {s["name"]: s for s in topo["switches"]}
    assert saopaulo["y"] > max(s["y"] for s in topo["switches"] if s["pane"] == "wan")
    assert annarbor["x"] > switches["starlight-chicago"]["x"]
    wan = next(p for p in topo["layout"]["panes"] if p["name"] == "wan")
    assert all(wan["x"] <= s["x"] <= wan["x"] + wan["width"] for s in remote.values())
    # clear of every switch
    for site in remote.values():
        assert min(math.dist((site["x"], site["y"]), (s["x"], s["y"])) for s in topo["switches"]) > 30
    dtns = {d["name"]: d for d in topo["dtns"]}
    assert (dtns["saopaulo-dtn1"]["domain"], dtns["saopaulo-dtn1"]["beyond"]) == (RNP, "to-rnp")
    assert (dtns["annarbor-dtn1"]["domain"], dtns["pasadena-dtn1"]["domain"]) == (I2, None)


def test_a_port_with_no_site_beyond_it_gets_a_point_named_by_its_neighbour(tmp_path: Path) -> None:
    topology = ring8_with_a_neighbour(tmp_path)
    (point,) = map_layout(topology).remote
    assert (point.name, point.port, point.switch) == ("rnp.test", "to-rnp", "s5")
    assert point.dtns == ("saopaulo-dtn1", "saopaulo-dtn2") and point.placement.pane == "wan"
    remote = topology_json(topology)["remote_sites"]
    assert [s["name"] for s in remote] == ["rnp.test"]


def test_topologies_without_domains_list_none(sc16_nsi: Topology) -> None:
    for name in ("sc16", "ring8"):
        topology = Topology.load(builtin_topology(name))
        topo = topology_json(topology)
        assert topo["interdomain"] == [] and topo["remote_sites"] == []
        assert map_layout(topology).remote == ()
        assert all(d["domain"] is None and d["beyond"] is None for d in topo["dtns"])


def test_nsa_short_names() -> None:
    assert nsa_short(RNP) == "rnp.sc16"
    assert nsa_short("urn:ogf:network:es.net:2013:nsa") == "es.net:2013"
    assert nsa_short("odd-id") == "odd-id"


class Book:
    """sc16-nsi's book with the segments desk, as the core thread holds them (no neighbour: the test
    plays its answers)."""

    def __init__(self, folder: Path, topology: Topology):
        self.clock = FakeClock()
        self.topology = topology
        self.ledger = Ledger(topology.capacities(), folder / "ledger.db", self.clock)
        self.book = ReservationBook(topology, self.ledger, self.clock, provisioning=True)
        self.desk = SegmentDesk(self.book)
        self.domains = Domains(topology, map_layout(topology))

    def create(self, src: str, dst: str):
        now = self.clock.now()
        reservation = self.book.create(RUCIO, PathRequest(src, dst, 10 * G, now, now + 3600))
        self.desk.react(self.book.take_events())
        return reservation


@pytest.fixture
def book(tmp_path: Path, sc16_nsi: Topology):
    made = Book(tmp_path, sc16_nsi)
    yield made
    made.ledger.close()


def test_a_segment_reservation_shows_its_remote_part_and_then_its_connection(book: Book) -> None:
    held = book.create("pasadena-dtn1", "saopaulo-dtn1")
    shown = reservation_json(held, None, book.domains)
    assert shown["switches"][-1] == "scinet"  # tsdn's part ends at the interdomain port's switch
    assert shown["remote"] == [{"end": "saopaulo-dtn1", "port": "to-rnp", "switch": "scinet",
                                "site": "RNP/ANSP Sao Paulo", "domain": RNP, "domain_name": "rnp.sc16"}]
    assert shown["nsi"] == {"kind": "requested", "nsa": RNP, "domain_name": "rnp.sc16", "connection_id": None,
                            "port": None, "vlan": 1780, "text": "NSI segment at rnp.sc16: requesting"}
    book.desk.advance(held.id, "committing", "OP-47992bcfda")
    committed = book.desk.commit_local(held.id)
    shown = reservation_json(committed, None, book.domains)
    assert shown["nsi"] == {"kind": "requested", "nsa": RNP, "domain_name": "rnp.sc16",
                            "connection_id": "OP-47992bcfda", "port": "to-rnp", "vlan": 1780,
                            "text": "NSI OP-47992bcfda at rnp.sc16, VLAN 1780"}
    assert shown["labels"][SEGMENT_LABEL] == RNP and len(shown["remote"]) == 1


def test_a_remote_source_is_a_remote_part_too(book: Book) -> None:
    shown = reservation_json(book.create("annarbor-dtn1", "caltech-a-dtn1"), None, book.domains)
    assert [(p["end"], p["port"], p["site"]) for p in shown["remote"]] == \
        [("annarbor-dtn1", "to-internet2", "UMich Ann Arbor")]
    assert shown["switches"][0] == "scinet" and shown["nsi"]["domain_name"] == "i2.sc16"


def test_own_reservations_have_no_nsi_part(book: Book) -> None:
    shown = reservation_json(book.create("pasadena-dtn1", "caltech-a-dtn1"), None, book.domains)
    assert shown["nsi"] is None and shown["remote"] == []
    assert reservation_json(book.create("pasadena-dtn1", "caltech-a-dtn2"))["remote"] == []  # no domains given


def test_a_connection_booked_through_tsdns_provider_shows_its_id(book: Book) -> None:
    reservation = book.create("pasadena-dtn1", "caltech-a-dtn1")
    provided = dataclasses.replace(reservation, labels={NSI_LABEL: "tsdn-0000000042"}, owner="nsa-rnp")
    assert nsi_json(provided) == {"kind": "provided", "connection_id": "tsdn-0000000042",
                                  "text": "NSI tsdn-0000000042, booked through tsdn by nsa-rnp"}


def test_a_segment_note_naming_another_nsa_is_not_taken_for_this_segment(book: Book) -> None:
    held = book.create("pasadena-dtn1", "saopaulo-dtn1")
    odd = dataclasses.replace(held, reason=f"WAN segment OP-1 at {I2} via to-internet2, VLAN 1800")
    assert nsi_json(odd)["connection_id"] is None


# -- in a real browser ---------------------------------------------------------------------------

CONNECTION = "OP-47992bcfda"

# In the page: the segment reservation's two parts (window pixels) and how each is drawn.
ROUTE_JS = """
const pick = (selector) => document.querySelector(selector);
const ends = (path) => { const m = path.getScreenCTM(), n = path.getTotalLength();
  return [0, n].map((at) => { const p = path.getPointAtLength(at);
    return [m.a * p.x + m.c * p.y + m.e, m.b * p.x + m.d * p.y + m.f]; }); };
const centre = (node) => { const r = node.getBoundingClientRect();
  return [(r.left + r.right) / 2, (r.top + r.bottom) / 2]; };
const local = pick(`path.route[data-reservation="${arguments[0]}"]`);
const far = pick(`path.route-remote[data-reservation="${arguments[0]}"]`);
const edge = pick('g.link.interdomain[data-port="to-rnp"] path.base');
const item = pick(`#legend li[data-reservation="${arguments[0]}"]`);
const label = pick(`#route-labels text[data-reservation="${arguments[0]}"]`);
return {
  local: local && { dash: getComputedStyle(local).strokeDasharray, path: local.getAttribute("data-path") },
  far: far && { dash: getComputedStyle(far).strokeDasharray, ends: ends(far), ports: far.getAttribute("data-ports"),
                connection: far.getAttribute("data-connection"), tip: far.getAttribute("data-tip") },
  edge: edge && { dash: getComputedStyle(edge).strokeDasharray },
  scinet: centre(pick('circle.switch[data-switch="scinet"]')),
  saopaulo: centre(pick('circle.remote-site[data-remote-site="RNP/ANSP Sao Paulo"]')),
  item: item && { nsi: item.getAttribute("data-nsi"), connection: item.getAttribute("data-nsi-connection"),
                  text: item.textContent },
  label: label && label.textContent,
  key: [...document.querySelectorAll("#scale-legend .domain-key")].filter((k) => !k.hidden).map((k) => k.textContent),
};
"""

WINDOWS = {"1600x1000": (1600, 1000), "1280x720": (1280, 720)}


@pytest.fixture(params=list(WINDOWS), ids=list(WINDOWS))
def window(request) -> tuple[str, tuple[int, int]]:
    return request.param, WINDOWS[request.param]


@pytest.fixture
def browser(window):
    from tests.browser import chromium

    yield from chromium(window=window[1])


def book_a_segment(controller, connection: str):
    """Book pasadena-dtn1 -> saopaulo-dtn1 as the segment runner would once the neighbour confirmed
    (on the core thread: the hold, its segment at `connection`, the hold committed)."""
    book, hub = controller.book, controller.worker.hub

    def job():
        now = book.clock.now()
        held = book.create(RUCIO, PathRequest("pasadena-dtn1", "saopaulo-dtn1", 10 * G, now, now + 3600))
        events = book.take_events()
        hub.publish(events)  # the map's events feed sees the hold as usual
        desk = SegmentDesk(book)
        desk.react(events)
        desk.advance(held.id, "committing", connection)
        return desk.commit_local(held.id)

    return controller.worker.call(job)


def test_sc16_nsi_map_marks_the_neighbours_and_the_segment_requested_over_nsi(
        start_controller, browser, window, tmp_path, monkeypatch) -> None:
    from tests.test_map_legible import LABELS_JS, label_problems, look_at_map, report
    from tests.waiting import wait_for

    # no requester: the test plays the neighbour's answers itself (book_a_segment)
    monkeypatch.setattr("sdn_app.web.nsi.SegmentRunner", lambda *args, **kwargs: None)
    controller = start_controller(TOPOLOGY_DIR / "sc16-nsi.yaml", listen_http="127.0.0.1:0")
    topology = controller.topology
    shot = tmp_path / f"sc16-nsi-{window[0]}.png"
    seen, problems = look_at_map(browser, controller, topology, shot, fully_labelled=True)
    shown = {x["text"] for x in seen["labels"]}
    problems += [f"no label {text!r} on the map" for text in
                 ("RNP/ANSP Sao Paulo", "UMich Ann Arbor", "rnp.sc16", "i2.sc16")
                 if not any(text == label or label.startswith(text) for label in shown)]
    assert not problems, report(topology, shot, problems)

    reservation = book_a_segment(controller, CONNECTION)
    text = f"NSI {CONNECTION} at rnp.sc16, VLAN 1780"
    wait_for(lambda: browser.execute_script(ROUTE_JS, reservation.id)["item"] is not None,
             "the segment reservation on the page", 10, interval=0.1)
    shot = tmp_path / f"sc16-nsi-segment-{window[0]}.png"
    browser.execute_script("document.getElementById('tooltip').hidden = true;")  # left by the hovering above
    browser.save_screenshot(str(shot))
    drawn = browser.execute_script(ROUTE_JS, reservation.id)
    problems = []
    if drawn["far"] is None:
        problems.append("no remote part drawn for the segment reservation")
    else:
        if drawn["far"]["dash"] in ("none", drawn["local"]["dash"]):
            problems.append(f"the remote part is drawn like tsdn's part ({drawn['far']['dash']!r})")
        named = (drawn["far"]["ports"], drawn["far"]["connection"], text in drawn["far"]["tip"])
        if named != ("to-rnp", CONNECTION, True):
            problems.append(f"the remote part names {drawn['far']}")
        start, end = drawn["far"]["ends"]
        if math.dist(start, drawn["scinet"]) > 40 or math.dist(end, drawn["saopaulo"]) > 40:
            problems.append(f"the remote part runs {start} -> {end}, not scinet {drawn['scinet']} -> "
                            f"Sao Paulo {drawn['saopaulo']}")
    if drawn["edge"] is None or drawn["edge"]["dash"] == "none":
        problems.append(f"the interdomain edge to-rnp is not dashed: {drawn['edge']}")
    if drawn["local"]["path"].split()[-1] != "scinet":
        problems.append(f"tsdn's part of the route is {drawn['local']['path']}")
    if (drawn["item"]["nsi"], drawn["item"]["connection"], text in drawn["item"]["text"]) != \
            ("requested", CONNECTION, True):
        problems.append(f"the reservation's list entry says {drawn['item']}")
    if window[0] == "1600x1000" and drawn["label"] != text:
        problems.append(f"the map's label of the segment is {drawn['label']!r}")
    if drawn["key"] != ["tsdn's", "requested over NSI (a neighbour's)"]:
        problems.append(f"the legend's domain keys are {drawn['key']}")
    problems += label_problems(browser.execute_script(LABELS_JS))
    assert not problems, report(topology, shot, problems)


def test_the_remote_part_follows_the_port_a_reservation_uses_now(tmp_path: Path) -> None:
    """A remote DTN reached through two ports: the map draws the remote part through the port the
    reservation uses (`via`: the alternate when the first is out of VLANs, or after a re-home)."""
    from tests.test_nsi_segments import ring8_with_a_neighbour

    topology = ring8_with_a_neighbour(tmp_path, vlans="1780-1780", alternate="1790-1791")
    made = Book(tmp_path, topology)
    try:
        first = made.create("dtn1", "saopaulo-dtn1")
        second = made.create("dtn2", "saopaulo-dtn2")  # to-rnp has no VLAN left: through to-rnp-b
        ports = [reservation_json(r, None, made.domains)["remote"][0] for r in (first, second)]
        assert [(p["port"], p["switch"]) for p in ports] == [("to-rnp", "s5"), ("to-rnp-b", "s7")]
    finally:
        made.ledger.close()
