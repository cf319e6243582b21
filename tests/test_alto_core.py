"""The ALTO information of the pure core (sdn_app/core/alto.py): the network map, costs that agree
with the book's own path computation (QueryAvailability's answer, the route it would book), the
measured load in bw-available, requests refused with the right RFC 7285 code, and merge patches."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sdn_app.core.alto import (
    DEFAULT_PID,
    AltoError,
    AltoView,
    LinkState,
    merge_patch,
    parse_endpoint_request,
    parse_filter,
    parse_update_request,
    pid_name,
)
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import FailedPrecondition, NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.paths import PathRequest
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from sdn_app.core.utilization import DirectionLoad
from topologies import builtin_topology

G = 10**9
HOUR = 3600.0
NOC = Principal("noc", Role.ADMIN)
SC16 = Topology.load(builtin_topology("sc16"))
VIEW = AltoView(SC16)


def apply_patch(target, patch):
    """RFC 7396 section 2, as a client applies a merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_patch(result.get(key), value)
    return result


def book_on(topology: Topology) -> tuple[ReservationBook, FakeClock]:
    clock = FakeClock()
    return ReservationBook(topology, Ledger(topology.capacities(), None, clock), clock), clock


def measure(view: AltoView, book: ReservationBook) -> LinkState:
    return view.measure(book.ledger, book.rerouter.watch, book.down_links(), book.clock.now())


def test_one_pid_per_site_with_its_dtns_and_a_catch_all():
    network = VIEW.network_map
    assert list(network.pids)[-1] == DEFAULT_PID
    assert network.message["network-map"][DEFAULT_PID] == {"ipv4": ["0.0.0.0/0"], "ipv6": ["::/0"]}
    caltech = network.pids["Caltech"]  # two switches, eight DTNs
    assert set(caltech.dtns) == {d for d in SC16.dtns if d.startswith("caltech-")}
    assert "10.16.1.11/32" in caltech.ipv4 and len(caltech.ipv4) == 8
    assert network.pid_of(ipaddress.ip_address("10.16.2.11")) == "StarLight"  # a booth DTN
    assert network.pid_of(ipaddress.ip_address("10.16.2.99")) == DEFAULT_PID  # no DTN has it
    assert network.pid_of(ipaddress.ip_address("2001:db8::1")) in (DEFAULT_PID, *network.pids)
    # Site names become PIDNames: at most 64 of 0-9 A-Z a-z - : @ _
    assert "AmLight-FIU-Miami" in network.pids and "RNP-ANSP-Sao-Paulo" in network.pids
    assert pid_name("a b/c.d" + "x" * 80) == ("a-b-c-d" + "x" * 80)[:64]
    assert network.vtag["tag"] == AltoView(SC16).network_map.vtag["tag"]  # the same content, the same tag


def test_a_switch_of_no_site_is_a_pid_of_its_own_and_ipv6_pools_are_in_the_map(tmp_path: Path):
    spec = yaml.safe_load(builtin_topology("ring8").read_text())
    spec["sites"] = [s for s in spec["sites"] if s["name"] != "site3"]  # s3 belongs to no site now
    spec["sites"][0]["name"] = DEFAULT_PID  # a site may not take the catch-all's name
    spec["dtns"][1]["ipv6_pool"] = "2001:db8:16:200::/56"
    path = tmp_path / "ring8.yaml"
    path.write_text(yaml.safe_dump(spec))
    network = AltoView(Topology.load(path)).network_map
    assert network.pids["s3"].dtns == ("dtn3",)
    assert network.pids["default-2"].dtns == ("dtn1",)
    assert network.pids["site2"].ipv6 == ("2001:db8:16:200::/56",)
    assert network.dtn_at(ipaddress.ip_address("2001:db8:16:2ff::7")) == "dtn2"
    assert network.dtn_at(ipaddress.ip_address("2001:db8:16:300::7")) is None
    assert network.pid_of(ipaddress.ip_address("10.0.0.3")) == "s3"


def test_costs_agree_with_the_book_for_every_dtn_pair_after_bookings_and_a_link_down():
    book, clock = book_on(SC16)
    rng = random.Random(16)
    names = sorted(SC16.dtns)
    booked = 0
    while booked < 12:
        a, b = rng.sample(names, 2)
        try:
            book.create(NOC, PathRequest(a, b, rng.choice([10, 25, 40, 100]) * G, clock.now(), clock.now() + HOUR,
                                         policy=rng.choice(["shortest", "widest"])))
            booked += 1
        except (NoCapacity, FailedPrecondition):
            continue
    book.set_link_state("tbit-rdma", up=False, reason="test")
    costs = VIEW.costs(measure(VIEW, book))
    full_nics = 0
    for a in names:
        for b in names:
            if a == b:
                continue
            found = book.availability(NOC, PathRequest(a, b, 1, clock.now(), clock.now() + 1.0), max_paths=1)
            assert costs.dtn_value("bw-residual", a, b) == found.max_bandwidth, (a, b)
            assert costs.dtn_value("bw-available", a, b) == found.max_bandwidth, (a, b)  # nothing measured
            try:
                shortest = book.finder.route(PathRequest(a, b, 1, clock.now(), clock.now() + 1.0)).primary
            except NoCapacity:  # a DTN's NIC is fully booked: the route is still the one it would take
                full_nics += 1
                continue
            assert costs.dtn_value("hopcount", a, b) == shortest.hop_count, (a, b)
            assert costs.dtn_value("routingcost", a, b) == pytest.approx(shortest.latency_ms), (a, b)
    assert full_nics < len(names) * 4
    # Between PIDs: the best DTN pair.
    caltech, starlight = VIEW.network_map.pids["Caltech"], VIEW.network_map.pids["StarLight"]
    best = max(costs.dtn_value("bw-residual", a, b) for a in caltech.dtns for b in starlight.dtns)
    assert costs.pid_values("bw-residual")["Caltech"]["StarLight"] == best
    assert costs.pid_values("hopcount")["Caltech"]["StarLight"] == 2  # tbit-rdma is down: through SCinet


def test_a_booking_lowers_bandwidth_only_where_it_is_booked_and_its_release_restores_it():
    book, clock = book_on(SC16)
    before = VIEW.costs(measure(VIEW, book))
    r = book.create(NOC, PathRequest("scinet-dtn1", "pasadena-dtn1", 40 * G, clock.now(), clock.now() + HOUR))
    during = VIEW.costs(measure(VIEW, book))
    assert before.pid_values("bw-residual")["SCinet"]["Caltech-Pasadena"] == 100 * G
    assert during.pid_values("bw-residual")["SCinet"]["Caltech-Pasadena"] == 60 * G
    assert during.pid_values("bw-residual")["Caltech-Pasadena"]["SCinet"] == 100 * G  # the other direction
    assert during.pid_values("routingcost") == before.pid_values("routingcost")
    assert during.tag != before.tag
    book.release(NOC, r.name)
    after = VIEW.costs(measure(VIEW, book))
    assert after is before  # the same link state: the cached costs, and their tag
    residual = VIEW.cost_types["num-bw-residual"]
    patch = merge_patch(before.cost_map(residual), during.cost_map(residual))
    assert patch["meta"] == {"vtag": {"tag": during.cost_map(residual)["meta"]["vtag"]["tag"]}}
    # What changed: from SCinet (its one DTN's NIC has 60G left) and to Pasadena (the WAN circuit).
    changed = {(s, d): v for s, row in patch["cost-map"].items() for d, v in row.items()}
    assert changed[("SCinet", "Caltech-Pasadena")] == 60 * G
    assert all(v == 60 * G and (s == "SCinet" or d == "Caltech-Pasadena") for (s, d), v in changed.items())
    assert ("Caltech", "StarLight") not in changed


def test_bw_available_takes_out_the_measured_load_that_is_not_the_controllers():
    book, _ = book_on(SC16)
    wan = {name: SC16.link_directions[name][0] for name in SC16.links if name.startswith("wan-")}  # out of SCinet

    def observe(gbps: dict[str, int]):
        loads = {}
        for name, direction in wan.items():
            nominal = gbps.get(name, gbps.get("*", 0)) * G
            loads[direction.id] = DirectionLoad(direction.id, direction.link, direction.src, direction.dst,
                                                direction.capacity, direction.kind, nominal, nominal,
                                                nominal / direction.capacity)
        book.observe_loads(loads)
        return VIEW.costs(measure(VIEW, book))

    def available(costs):
        return costs.dtn_value("bw-available", "scinet-dtn1", "pasadena-dtn1")
    costs = observe({"wan-pasadena": 30})  # another tenant's 30G on the direct circuit: the widest goes round it
    assert costs.dtn_value("bw-residual", "scinet-dtn1", "pasadena-dtn1") == 100 * G
    assert available(costs) == 100 * G
    costs = observe({"*": 30})  # 30G on every circuit out of SCinet
    assert available(costs) == 70 * G
    assert costs.dtn_value("bw-available", "pasadena-dtn1", "scinet-dtn1") == 100 * G  # the other way is clear
    assert costs.dtn_value("bw-residual", "scinet-dtn1", "pasadena-dtn1") == 100 * G  # bookings alone: all free
    assert costs.pid_values("bw-available")["SCinet"]["Caltech-Pasadena"] == 70 * G
    costs = observe({"*": 30, "wan-pasadena": 95})  # the direct circuit congested: nothing there
    assert book.rerouter.watch.congested(wan["wan-pasadena"].id) and available(costs) == 70 * G
    costs = observe({"*": 95})  # every way out of SCinet congested
    assert available(costs) == 0 and costs.pid_values("bw-available")["SCinet"]["Caltech-Pasadena"] == 0
    assert costs.dtn_value("bw-residual", "scinet-dtn1", "pasadena-dtn1") == 100 * G


def test_ordinal_ranks_and_filters():
    costs = VIEW.costs(measure(VIEW, book_on(SC16)[0]))
    numerical = costs.cost_map(VIEW.cost_types["num-routingcost"])["cost-map"]
    ordinal = costs.cost_map(VIEW.cost_types["ord-routingcost"])["cost-map"]
    flat = [(numerical[s][d], ordinal[s][d]) for s in numerical for d in numerical[s]]
    assert min(rank for _, rank in flat) == 1
    for cost_a, rank_a in flat:
        for cost_b, rank_b in flat:
            assert (cost_a < cost_b) == (rank_a < rank_b) and (cost_a == cost_b) == (rank_a == rank_b)
    request = parse_filter({"cost-type": {"cost-mode": "numerical", "cost-metric": "hopcount"},
                            "pids": {"srcs": ["Caltech"], "dsts": ["StarLight", "Caltech-Pasadena", "default"]},
                            "constraints": ["ge 1"]}, VIEW)
    assert costs.filtered(request)["cost-map"] == {"Caltech": {"StarLight": 1, "Caltech-Pasadena": 2}}
    ecs = parse_endpoint_request({"cost-type": {"cost-mode": "ordinal", "cost-metric": "routingcost"},
                                  "endpoints": {"srcs": ["ipv4:10.16.1.11", "ipv4:192.0.2.1"],
                                                "dsts": ["ipv4:10.16.2.11", "ipv4:10.16.21.11", "ipv4:10.16.1.11"]}},
                                 VIEW)
    answer = costs.endpoint_costs(ecs, ecs.srcs)
    # unknown source and a DTN to itself: left out; ranks among the pairs answered
    assert answer["endpoint-cost-map"] == {"ipv4:10.16.1.11": {"ipv4:10.16.2.11": 1, "ipv4:10.16.21.11": 2}}
    assert answer["meta"]["vtag"] == {"resource-id": "endpointcost", "tag": costs.tag}


@pytest.mark.parametrize(("body", "code", "field"), [
    ([], "E_INVALID_FIELD_TYPE", None),
    ({}, "E_MISSING_FIELD", "cost-type"),
    ({"cost-type": {"cost-mode": "numerical"}}, "E_MISSING_FIELD", "cost-type.cost-metric"),
    ({"cost-type": {"cost-mode": "numerical", "cost-metric": 7}}, "E_INVALID_FIELD_TYPE", "cost-type.cost-metric"),
    ({"cost-type": {"cost-mode": "ordinal", "cost-metric": "bw-available"}}, "E_INVALID_FIELD_VALUE", "cost-type"),
    ({"cost-type": {"cost-mode": "numerical", "cost-metric": "bw-available",
                    "cost-context": {"cost-source": "sla"}}}, "E_INVALID_FIELD_VALUE",
     "cost-type.cost-context.cost-source"),
    ({"cost-type": {"cost-mode": "numerical", "cost-metric": "routingcost"}, "pids": {"srcs": ["Nowhere"]}},
     "E_INVALID_FIELD_VALUE", "pids.srcs"),
    ({"cost-type": {"cost-mode": "numerical", "cost-metric": "routingcost"}, "pids": {"dsts": "Caltech"}},
     "E_INVALID_FIELD_TYPE", "pids.dsts"),
    ({"cost-type": {"cost-mode": "numerical", "cost-metric": "routingcost"}, "constraints": ["about 5"]},
     "E_INVALID_FIELD_VALUE", "constraints[0]"),
])
def test_filter_requests_are_refused_with_the_rfc_7285_code_and_field(body, code, field):
    with pytest.raises(AltoError) as refused:
        parse_filter(body, VIEW)
    assert refused.value.alto_code == code and refused.value.field == field
    assert refused.value.meta()["code"] == code


@pytest.mark.parametrize(("endpoints", "code", "field"), [
    ({"srcs": ["ipv4:10.16.1.11"]}, "E_MISSING_FIELD", "endpoints.dsts"),
    ({"dsts": []}, "E_INVALID_FIELD_VALUE", "endpoints.dsts"),
    ({"dsts": ["10.16.1.11"]}, "E_INVALID_FIELD_VALUE", "endpoints.dsts[0]"),
    ({"dsts": ["ipv4:2001:db8::1"]}, "E_INVALID_FIELD_VALUE", "endpoints.dsts[0]"),
    ({"dsts": ["ipv6:10.0.0.1"]}, "E_INVALID_FIELD_VALUE", "endpoints.dsts[0]"),
    ({"dsts": [5]}, "E_INVALID_FIELD_TYPE", "endpoints.dsts[0]"),
    ({"srcs": ["ipv4:10.16.1.11"] * 400, "dsts": ["ipv4:10.16.2.11"] * 400}, "E_INVALID_FIELD_VALUE", "endpoints"),
])
def test_endpoint_requests_are_refused_with_the_rfc_7285_code_and_field(endpoints, code, field):
    body = {"cost-type": {"cost-mode": "numerical", "cost-metric": "routingcost"}, "endpoints": endpoints}
    with pytest.raises(AltoError) as refused:
        parse_endpoint_request(body, VIEW)
    assert (refused.value.alto_code, refused.value.field) == (code, field)


def test_update_requests():
    update = parse_update_request({"add": {"bw": {"resource-id": "costmap-num-bw-available"},
                                           "ecs": {"resource-id": "endpointcost", "incremental-changes": False,
                                                   "input": {"cost-type": {"cost-mode": "numerical",
                                                                           "cost-metric": "hopcount"},
                                                             "endpoints": {"srcs": ["ipv4:10.16.1.11"],
                                                                           "dsts": ["ipv4:10.16.2.11"]}}}}},
                                  VIEW, control=False)
    assert [(s.client_id, s.resource_id, s.incremental) for s in update.add] == [
        ("bw", "costmap-num-bw-available", True), ("ecs", "endpointcost", False)]
    refusals = [
        ({}, False, (), "E_MISSING_FIELD"),
        ({"add": {"x": {"resource-id": "costmap-nope"}}}, False, (), "E_INVALID_FIELD_VALUE"),
        ({"add": {"x y": {"resource-id": "networkmap"}}}, False, (), "E_INVALID_FIELD_VALUE"),
        ({"add": {"x": {"resource-id": "networkmap", "input": {}}}}, False, (), "E_INVALID_FIELD_VALUE"),
        ({"add": {"x": {"resource-id": "endpointcost"}}}, False, (), "E_MISSING_FIELD"),
        ({"add": {"x": {"resource-id": "networkmap"}}, "remove": ["x"]}, False, (), "E_INVALID_FIELD_VALUE"),
        ({"remove": ["y"]}, True, ("x",), "E_INVALID_FIELD_VALUE"),
        ({"add": {"x": {"resource-id": "networkmap"}}}, True, ("x",), "E_INVALID_FIELD_VALUE"),
        ({"add": {"x": {"resource-id": "networkmap", "incremental-changes": "yes"}}}, False, (),
         "E_INVALID_FIELD_TYPE"),
    ]
    for body, control, carried, code in refusals:
        with pytest.raises(AltoError) as refused:
            parse_update_request(body, VIEW, control=control, carried=carried)
        assert refused.value.alto_code == code, body
    # the stream control may swap a client id in one request
    swap = parse_update_request({"remove": ["x"], "add": {"x": {"resource-id": "networkmap"}}}, VIEW, control=True,
                                carried=("x",))
    assert swap.remove == ("x",) and swap.add[0].client_id == "x"


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                        max_size=4), max_leaves=20)
documents = st.dictionaries(st.text(max_size=3), json_values.filter(lambda v: v is not None), max_size=5)


def _no_nulls(value):
    if isinstance(value, dict):
        return all(v is not None and _no_nulls(v) for v in value.values())
    return True


@settings(max_examples=300, deadline=None)
@given(documents, documents)
def test_a_merge_patch_turns_the_old_document_into_the_new_one(old, new):
    patch = merge_patch(old, new)
    if not _no_nulls(new):  # RFC 7396 cannot carry a null member; ALTO messages have none
        return
    assert (patch is None) == (old == new)
    assert apply_patch(old, patch) == new if patch is not None else old == new
