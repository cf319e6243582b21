"""The SENSE orchestrator's core (sdn_app/core/sense.py, sense_intents.py, address_pool.py,
sense_store.py): the instance lifecycle and its statuses, the DMM's profile-and-queries intents, QoS
classes onto guaranteed and elastic reservations, the address pools, refusals that change nothing,
and everything back after a restart. Driven without threads by a FakeClock, on a SQLite file."""

from __future__ import annotations

import copy
import ipaddress
import json
from dataclasses import replace
from pathlib import Path

import pytest

from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NoCapacity,
    NotFound,
    PermissionDenied,
)
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import Principal, Role, State
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.sense import LABEL, Instance, SenseDesk, status_of
from sdn_app.core.sense_intents import MBPS
from sdn_app.core.sense_profiles import BUILTIN_PROFILE
from sdn_app.core.topology import Topology
from sdn_app.core.topology_schema import TopologyError, parse_topology_spec
from topologies import builtin_topology

G = 10**9
RING8 = Topology.load(builtin_topology("ring8"))
DOMAIN = "ring8.example.net"
DMM = Principal("dmm", Role.SERVICE, priority=5)
OTHER = Principal("fts", Role.SERVICE)
ADMIN = Principal("noc", Role.ADMIN, priority=1000)
POOL = "RUCIO_Site_BGP_Subnet_Pool-"
U1 = "0b6d0ec2-5ad1-4f3c-9a43-5e0d1b5b2a11"
U2 = "6a1f4c1e-8f0b-4c7e-9b55-2f1f0e9d3c22"


def urn(dtn: str) -> str:
    return f"urn:ogf:network:{DOMAIN}:{dtn}"


class Controller:
    """A book (switches controlled: changes confirmed by hand, as the provisioner would) and its desk."""

    def __init__(self, db: Path, clock: FakeClock | None = None, provisioning: bool = True,
                 hold_timeout: float = 120.0):
        self.db = db
        self.clock = clock or FakeClock()
        self.provisioning = provisioning
        self.ledger = Ledger(RING8.capacities(), db, self.clock)
        self.book = ReservationBook(RING8, self.ledger, self.clock, provisioning=provisioning,
                                    hold_timeout=hold_timeout)
        self.desk = SenseDesk(self.book, DOMAIN)

    def confirm(self, error: str | None = None) -> None:
        """The provisioner's reports on every queued change."""
        for change in self.book.take_changes():
            if change.confirm:
                self.book.provisioned(change.reservation_id, error, change.token)

    def allocate(self, dtn: str, name: str, principal: Principal = DMM) -> str:
        return self.desk.pools.allocate(principal, POOL + dtn, {"type": "IPv6", "name": name, "allocate": {
            "scope": "default", "batch": "subnet", "netmask": "/64"}}).prefix

    def reopen(self) -> Controller:
        self.ledger.close()
        return Controller(self.db, self.clock, self.provisioning)

    def booked(self, direction: str = "dtn1->s1:3") -> int:
        now = self.clock.now()
        return self.ledger.used(direction, now, now + 1)


@pytest.fixture
def ctl(tmp_path: Path) -> Controller:
    return Controller(tmp_path / "tsdn.db")


def dmm_intent(src_prefix: str, dst_prefix: str, capacity: str | None = None, src: str = "dtn1",
               dst: str = "dtn3", queries: bool = True, profile: str = BUILTIN_PROFILE) -> dict:
    """The intent the DMM's stager (no capacity, three queries) or provisioner and modifier (a
    capacity, the edit only) sends."""
    options = [{"data.connections[0].terminals[0].uri": urn(src)},
               {"data.connections[0].terminals[0].ipv6_prefix_list": src_prefix},
               {"data.connections[0].terminals[1].uri": urn(dst)},
               {"data.connections[0].terminals[1].ipv6_prefix_list": dst_prefix},
               {"data.connections[0].terminals[0].vlan_tag": "3602-3606"},
               {"data.connections[0].terminals[1].vlan_tag": "3602-3606"}]
    if capacity is not None:
        options.insert(0, {"data.connections[0].bandwidth.capacity": capacity})
    asked = [{"ask": "edit", "options": options}]
    if queries:
        asked += [{"ask": "total-block-maximum-bandwidth",
                   "options": [{"name": "Connection 1", "start": "now", "end-before": "+24h"}]},
                  {"ask": "extract-result-values", "options": [{"sparql": (
                      "SELECT DISTINCT ?ipv6_subnet_uri ?ipv6_subnet WHERE {?route mrs:routeFrom ?ipv6_subnet_uri. "
                      "?ipv6_subnet_uri mrs:type 'ipv6-prefix-list'. ?ipv6_subnet_uri mrs:value ?ipv6_subnet}")}]}]
    return {"service_profile_uuid": profile, "queries": asked, "alias": "rule-1"}


def dnc(src: str = "dtn1", dst: str = "dtn3", capacity: str | None = "10000", qos: str = "guaranteedCapped",
        **terminal_extra: str) -> dict:
    bandwidth = {"qos_class": qos} if capacity is None else {"qos_class": qos, "capacity": capacity}
    return {"service": "dnc", "alias": "plain", "data": {"type": "Multi-Path P2P VLAN", "connections": [{
        "name": "Connection 1", "bandwidth": bandwidth,
        "terminals": [{"uri": urn(src), "vlan_tag": "any", **terminal_extra}, {"uri": urn(dst), "vlan_tag": "any"}]}]}}


# -- the DMM's sequence ----------------------------------------------------------------------------


def test_the_dmm_sequence_from_stage_to_delete(ctl: Controller):
    src, dst = ctl.allocate("dtn1", "rule-1"), ctl.allocate("dtn3", "rule-1")
    assert (src, dst) == ("2001:db8:8:100::/64", "2001:db8:8:300::/64")  # lowest first in each DTN's pool
    staged = ctl.desk.create(DMM, U1, dmm_intent(src, dst))
    assert str(staged.view.status) == "CREATE - COMPILED"
    held = staged.view.reservation
    assert held is not None and held.state is State.HELD and held.labels == {LABEL: U1}
    assert (held.request.src_prefix, held.request.dst_prefix) == (src, dst)
    assert held.request.bandwidth == 1000 * MBPS  # the built-in profile's 1 Gbit/s until the DMM sets one
    answers = staged.as_json()
    assert answers["service_uuid"] == U1 and [q["asked"] for q in answers["queries"]] == [
        "edit", "total-block-maximum-bandwidth", "extract-result-values"]
    assert answers["queries"][1]["results"][0]["bandwidth"] == str(100 * G)  # its own hold not counted
    subnets = answers["queries"][2]["results"]
    assert [r["ipv6_subnet"] for r in subnets] == [src, dst]
    assert subnets[0]["ipv6_subnet_uri"] == f"{urn('dtn1')}:service+{U1}:ipv6-prefix-list"
    for pool, result in (("dtn1", subnets[0]), ("dtn3", subnets[1])):  # the handler affiliates them
        exploded = ipaddress.IPv6Network(result["ipv6_subnet"]).exploded.replace("0000", "0")
        ctl.desk.pools.affiliate(DMM, POOL + pool, "default", result["ipv6_subnet_uri"], address=exploded)
    assert {a.affiliation for a in ctl.desk.pools.listed(DMM, POOL + "dtn1")} == {subnets[0]["ipv6_subnet_uri"]}

    # the provisioner compiles again with the bandwidth, then provisions
    again = ctl.desk.create(DMM, U1, dmm_intent(src, dst, "40000", queries=False))
    assert str(again.view.status) == "CREATE - COMPILED" and again.view.reservation.id == held.id  # modified
    assert again.view.reservation.request.bandwidth == 40 * G and ctl.booked() == 40 * G
    committing = ctl.desk.operate(DMM, U1, "provision")
    assert str(committing.status) == "CREATE - COMMITTING"
    ctl.confirm()
    assert str(ctl.desk.view(DMM, U1).status) == "CREATE - READY"
    assert ctl.desk.operate(DMM, U1, "provision").status.substate == "READY"  # a retry

    # priorities changed: the modifier
    modified = ctl.desk.modify(DMM, U1, dmm_intent(src, dst, "25000", queries=False))
    assert str(modified.view.status) == "MODIFY - READY" and ctl.booked() == 25 * G
    with pytest.raises(FailedPrecondition, match="matched by the flows of instance"):
        ctl.desk.pools.free(DMM, POOL + "dtn1", "default", name="rule-1")

    # finished: cancel, delete, free
    assert str(ctl.desk.operate(DMM, U1, "cancel").status) == "CANCEL - READY"
    assert str(ctl.desk.view(DMM, U1).status) == "CANCEL - READY" and ctl.booked() == 0
    ctl.desk.delete(DMM, U1)
    with pytest.raises(NotFound, match="no such instance"):
        ctl.desk.view(DMM, U1)
    assert [a.prefix for a in ctl.desk.pools.free(DMM, POOL + "dtn1", "default", name="rule-1")] == [src]
    assert ctl.desk.pools.free(DMM, POOL + "dtn1", "default", name="rule-1") == []  # a retry frees nothing


def test_two_rules_between_the_same_dtns_are_two_reservations_told_apart_by_their_prefixes(ctl: Controller):
    pairs = [(ctl.allocate("dtn1", f"rule-{i}"), ctl.allocate("dtn3", f"rule-{i}")) for i in (1, 2)]
    for uuid, (src, dst) in zip((U1, U2), pairs, strict=True):
        ctl.desk.create(DMM, uuid, dmm_intent(src, dst, "30000", queries=False))
        ctl.desk.operate(DMM, uuid, "provision")
    ctl.confirm()
    views = [ctl.desk.view(DMM, u) for u in (U1, U2)]
    assert [str(v.status) for v in views] == ["CREATE - READY"] * 2
    assert {(v.reservation.request.src_prefix, v.reservation.request.dst_prefix) for v in views} == set(pairs)
    assert ctl.booked() == 60 * G
    plans = [ctl.book.installs.plan(v.reservation.id) for v in views]
    matches = [{(f.match.ipv6_src, f.match.ipv6_dst) for f in plan.flows if f.match.ipv6_src} for plan in plans]
    assert matches[0] and matches[1] and not matches[0] & matches[1]


def test_a_plain_dnc_intent_without_prefixes_carries_the_dtns_own_addresses(tmp_path: Path):
    ctl = Controller(tmp_path / "tsdn.db", provisioning=False)
    answer = ctl.desk.create(DMM, U1, dnc())
    assert answer.view.reservation.request.src_prefix is None
    assert str(ctl.desk.operate(DMM, U1, "provision").status) == "CREATE - READY"  # no switches: at once
    assert ctl.booked() == 10 * G


# -- statuses --------------------------------------------------------------------------------------


def test_a_hold_that_timed_out_stays_compiled_and_provision_books_it_again(tmp_path: Path):
    ctl = Controller(tmp_path / "tsdn.db", hold_timeout=60)
    ctl.desk.create(DMM, U1, dnc(capacity="20000"))
    ctl.clock.advance(61)
    view = ctl.desk.view(DMM, U1)
    assert str(view.status) == "CREATE - COMPILED" and view.reservation.state is State.EXPIRED
    assert "provision books it again" in view.status.detail and ctl.booked() == 0
    provisioned = ctl.desk.operate(DMM, U1, "provision")
    assert str(provisioned.status) == "CREATE - COMMITTING" and provisioned.reservation.id != view.reservation.id
    assert ctl.booked() == 20 * G and "booked afresh" in provisioned.instance.note


def test_a_lapsed_hold_that_no_longer_fits_is_refused_and_stays_compiled(tmp_path: Path):
    ctl = Controller(tmp_path / "tsdn.db", hold_timeout=60)
    ctl.desk.create(DMM, U1, dnc(capacity="60000"))
    ctl.clock.advance(61)
    ctl.desk.create(OTHER, U2, dnc(dst="dtn2", capacity="60000"))  # through dtn1's 100G NIC too
    with pytest.raises(NoCapacity):
        ctl.desk.operate(DMM, U1, "provision")
    assert str(ctl.desk.view(DMM, U1).status) == "CREATE - COMPILED"


def test_a_switch_failure_is_failed_and_cancel_needs_force(ctl: Controller):
    ctl.desk.create(DMM, U1, dnc())
    ctl.desk.operate(DMM, U1, "provision")
    ctl.confirm(error="switch s2 (dpid 0x2) not connected")
    view = ctl.desk.view(DMM, U1)
    assert str(view.status) == "CREATE - FAILED" and "not connected" in view.status.detail
    with pytest.raises(FailedPrecondition, match="force=true"):
        ctl.desk.operate(DMM, U1, "cancel")
    assert str(ctl.desk.operate(DMM, U1, "cancel", force=True).status) == "CANCEL - READY"
    ctl.desk.delete(DMM, U1)


def test_reprovision_books_a_cancelled_instance_again(ctl: Controller):
    ctl.desk.create(DMM, U1, dnc())
    ctl.desk.operate(DMM, U1, "provision")
    ctl.confirm()
    ctl.desk.operate(DMM, U1, "cancel")
    assert ctl.booked() == 0
    assert str(ctl.desk.operate(DMM, U1, "reprovision").status) == "REINSTATE - COMMITTING"
    ctl.confirm()
    assert str(ctl.desk.view(DMM, U1).status) == "REINSTATE - READY" and ctl.booked() == 10 * G


def test_operations_in_the_wrong_status_are_refused_and_change_nothing(ctl: Controller):
    ctl.desk.create(DMM, U1, dnc())
    with pytest.raises(FailedPrecondition, match="only a READY"):
        ctl.desk.modify(DMM, U1, dnc(capacity="5000"))
    with pytest.raises(FailedPrecondition, match="only a CANCEL - READY"):
        ctl.desk.operate(DMM, U1, "reprovision")
    ctl.desk.operate(DMM, U1, "provision")
    ctl.confirm()
    with pytest.raises(FailedPrecondition, match="cancel it first"):
        ctl.desk.delete(DMM, U1)
    with pytest.raises(FailedPrecondition, match="only a CREATE - COMPILED instance takes a new intent"):
        ctl.desk.create(DMM, U1, dnc(capacity="5000"))
    with pytest.raises(InvalidArgument, match="terminals and their prefixes cannot change"):
        ctl.desk.modify(DMM, U1, dnc(dst="dtn4"))
    with pytest.raises(InvalidArgument, match="into the other kind"):
        ctl.desk.modify(DMM, U1, dnc(qos="bestEffort"))
    assert str(ctl.desk.view(DMM, U1).status) == "CREATE - READY" and ctl.booked() == 10 * G


@pytest.mark.parametrize(("state", "phase", "committed", "expected"), [
    (State.HELD, "CREATE", False, "CREATE - COMPILED"),
    (State.EXPIRED, "CREATE", False, "CREATE - COMPILED"),
    (State.SCHEDULED, "CREATE", True, "CREATE - COMMITTED"),
    (State.PROVISIONING, "CREATE", True, "CREATE - COMMITTING"),
    (State.ACTIVE, "CREATE", True, "CREATE - READY"),
    (State.MOVING, "MODIFY", True, "MODIFY - READY"),
    (State.DEGRADED, "REINSTATE", True, "REINSTATE - READY"),
    (State.FAILED, "CREATE", True, "CREATE - FAILED"),
    (State.FAILED, "MODIFY", True, "MODIFY - FAILED"),
    (State.RELEASED, "CANCEL", True, "CANCEL - READY"),
    (State.EXPIRED, "CREATE", True, "CANCEL - READY"),  # its window ended
    (State.RELEASED, "MODIFY", True, "CANCEL - READY"),  # released by someone else
])
def test_every_reservation_state_has_its_status(ctl: Controller, state, phase, committed, expected):
    held = ctl.desk.create(DMM, U1, dnc()).view
    reservation = held.reservation
    instance: Instance = held.instance
    status = status_of(replace(instance, phase=phase, committed=committed), replace(reservation, state=state))
    assert str(status) == expected


# -- recompiling -----------------------------------------------------------------------------------


def test_a_new_intent_of_another_kind_replaces_the_hold_and_a_refused_one_keeps_the_old(ctl: Controller):
    first = ctl.desk.create(DMM, U1, dnc(capacity="20000")).view.reservation
    elastic = ctl.desk.create(DMM, U1, dnc(capacity="30000", qos="bestEffort")).view
    assert elastic.reservation.id != first.id and elastic.reservation.ceiling == 30 * G
    assert ctl.book.get(ADMIN, first.id).state is State.RELEASED
    with pytest.raises(NoCapacity):
        ctl.desk.create(DMM, U1, dnc(capacity="200000"))
    view = ctl.desk.view(DMM, U1)
    assert str(view.status) == "CREATE - COMPILED" and view.reservation.state is State.HELD
    assert view.reservation.ceiling == 30 * G and view.instance.connection.qos_class == "bestEffort"
    assert ctl.booked() == MBPS


# -- QoS classes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("qos", "capacity", "bandwidth", "ceiling", "priority"), [
    ("guaranteedCapped", "40000", 40 * G, 0, 5),  # the caller's own priority
    ("softCapped", "40000", 40 * G, 100 * G, 5),  # bursts up to the NICs
    ("softCapped", "100000", 100 * G, 0, 5),  # already the NICs: guaranteed
    ("bestEffort", "40000", MBPS, 40 * G, 1),
    ("anyAvailable", None, MBPS, 100 * G, 1),
])
def test_qos_classes_map_onto_guaranteed_and_elastic_reservations(ctl: Controller, qos, capacity, bandwidth, ceiling,
                                                                   priority):
    reservation = ctl.desk.create(DMM, U1, dnc(capacity=capacity, qos=qos)).view.reservation
    assert (reservation.request.bandwidth, reservation.ceiling, reservation.priority) == (bandwidth, ceiling, priority)


def test_an_elastic_instance_is_modified_within_its_kind(ctl: Controller):
    ctl.desk.create(DMM, U1, dnc(capacity="40000", qos="bestEffort"))
    ctl.desk.operate(DMM, U1, "provision")
    ctl.confirm()
    view = ctl.desk.modify(DMM, U1, dnc(capacity="60000", qos="bestEffort")).view
    assert view.reservation.ceiling == 60 * G and str(view.status) == "MODIFY - READY"


# -- refusals that change nothing -----------------------------------------------------------------


@pytest.mark.parametrize(("body", "error", "match"), [
    ([], InvalidArgument, "intent: expected a JSON object"),
    ({"service": "dnc"}, InvalidArgument, "give data"),
    ({"service": "vcn", "data": {}}, InvalidArgument, "dnc service"),
    ({"service": "dnc", "data": {"connections": []}}, InvalidArgument, "0 connections"),
    (dnc(capacity="lots"), InvalidArgument, "not a number of Mbit/s"),
    (dnc(capacity="-5"), InvalidArgument, "positive"),
    (dnc(qos="platinum"), InvalidArgument, "qos_class"),
    (dnc(qos="guaranteedCapped", capacity=None), InvalidArgument, "capacity: required"),
    (dnc(src="dtn3"), InvalidArgument, "both terminals are dtn3"),
    (dnc(ipv6_prefix_list="2001:db8:8:100::/64"), InvalidArgument, "give both terminals a prefix"),
    (dnc(src="dtn99"), NotFound, "'dtn99' is not a DTN of this network"),
    ({**dnc(), "data": {"connections": [{"terminals": [{"uri": "urn:ogf:network:es.net:2013:x"}, {"uri": urn("dtn1")}],
                                         "bandwidth": {"capacity": "10"}}]}}, NotFound, "not in this network"),
    (dnc(capacity="200000"), NoCapacity, "200G"),  # beyond the 100G NICs
    ({**dnc(), "queries": [{"ask": "guess-bandwidth"}]}, InvalidArgument, "tsdn answers edit"),
    ({**dnc(), "queries": [{"ask": "edit", "options": []}]}, InvalidArgument, "no service_profile_uuid"),
    (dmm_intent("2001:db8:8:100::/64", "2001:db8:8:300::/64"), FailedPrecondition, "is not allocated"),
    (dmm_intent("2001:db8:9:100::/64", "2001:db8:8:300::/64"), InvalidArgument, "not in dtn1's pool"),
    (dmm_intent("2001:db8:8:100::/64", "2001:db8:8:300::/64", profile="nope"), NotFound, "service profile"),
    ({"service_profile_uuid": BUILTIN_PROFILE, "queries": [{"ask": "edit", "options": [
        {"data.connections[0].bandwidth.qos_class": "bestEffort"}, {"alias": "x"}]}]}, InvalidArgument,
     "lets intents edit only"),
    ({"service_profile_uuid": BUILTIN_PROFILE, "queries": [{"ask": "edit", "options": [
        {"data.connections[0].terminals[5].uri": urn("dtn1")}]}]}, InvalidArgument, "lets intents edit only"),
])
def test_a_bad_intent_is_refused_naming_what_is_wrong_and_nothing_changes(ctl: Controller, body, error, match):
    with pytest.raises(error, match=match):
        ctl.desk.create(DMM, U1, body)
    with pytest.raises(NotFound):
        ctl.desk.view(DMM, U1)
    assert ctl.book.list(ADMIN)[0] == [] and ctl.booked() == 0
    assert ctl.ledger.query("SELECT COUNT(*) FROM sense_instances") == [(0,)]


def test_unknown_instances_and_other_principals_instances_are_not_found(ctl: Controller):
    ctl.desk.create(DMM, U1, dnc())
    for call in (lambda: ctl.desk.view(OTHER, U1), lambda: ctl.desk.operate(OTHER, U1, "provision"),
                 lambda: ctl.desk.view(DMM, U2), lambda: ctl.desk.delete(DMM, U2)):
        with pytest.raises(NotFound, match="no such instance"):
            call()
    with pytest.raises(InvalidArgument, match="not a service instance UUID"):
        ctl.desk.view(DMM, "not-a-uuid")
    assert ctl.desk.view(ADMIN, U1).instance.owner == "dmm"
    with pytest.raises(AlreadyExists):
        ctl.desk.create(OTHER, U1, dnc(src="dtn5", dst="dtn6"))
    with pytest.raises(PermissionDenied):
        ctl.desk.create(Principal("agent", Role.AGENT), U2, dnc())


# -- address pools ---------------------------------------------------------------------------------


def test_pools_hand_out_the_lowest_free_prefix_once_per_name(ctl: Controller):
    pools = ctl.desk.pools
    first = ctl.allocate("dtn2", "a")
    assert ctl.allocate("dtn2", "a") == first  # the same name again
    second = ctl.allocate("dtn2", "b")
    assert (first, second) == ("2001:db8:8:200::/64", "2001:db8:8:201::/64")
    pools.free(DMM, "dtn2", "default", name="a")
    assert ctl.allocate("dtn2", "c") == first  # freed, handed out again
    with pytest.raises(AlreadyExists, match="name b is taken"):
        ctl.allocate("dtn2", "b", principal=OTHER)
    assert [a.name for a in pools.listed(OTHER, "dtn2")] == []  # someone else's
    assert [a.name for a in pools.listed(ADMIN, "dtn2")] == ["c", "b"]
    wide = pools.allocate(DMM, "dtn2", {"type": "IPv6", "name": "w", "allocate": {"batch": "subnet", "netmask": "60"}})
    assert wide.prefix == "2001:db8:8:210::/60"
    assert [a.name for a in pools.free(DMM, "dtn2", "default")] == ["c", "b", "w"]  # the whole scope


@pytest.mark.parametrize(("pool", "body", "error", "match"), [
    ("RUCIO_Site_BGP_Subnet_Pool-T2_US_Nowhere", {"name": "x"}, NotFound, "no DTN's pool"),
    ("dtn1", {"type": "IPv4", "name": "x"}, InvalidArgument, "IPv6 prefixes only"),
    ("dtn1", {"name": "x", "allocate": {"batch": "3"}}, InvalidArgument, "subnets only"),
    ("dtn1", {"name": "x", "allocate": {"batch": "subnet", "netmask": "/48"}}, InvalidArgument, "does not fit"),
    ("dtn1", {"name": "a b"}, InvalidArgument, "no spaces"),
    ("dtn1", "x", InvalidArgument, "JSON object"),
])
def test_bad_allocations_are_refused(ctl: Controller, pool, body, error, match):
    with pytest.raises(error, match=match):
        ctl.desk.pools.allocate(DMM, pool, body)
    assert ctl.desk.pools.count() == 0


def test_a_full_pool_is_refused_and_longest_dtn_names_win(tmp_path: Path):
    spec = RING8.spec.model_dump(mode="json", exclude_none=True)
    spec["dtns"][0]["ipv6_pool"] = "2001:db8:8:100::/64"
    spec["dtns"][1]["name"], spec["dtns"][1]["ipv6_pool"] = "site-dtn1", "2001:db8:8:200::/63"
    topology = Topology(parse_topology_spec(spec, "test"))
    clock = FakeClock()
    ledger = Ledger(topology.capacities(), tmp_path / "t.db", clock)
    desk = SenseDesk(ReservationBook(topology, ledger, clock), DOMAIN)
    assert desk.pools.dtn_of("RUCIO_Site_BGP_Subnet_Pool-site-dtn1") == "site-dtn1"
    assert desk.pools.dtn_of("RUCIO_Site_BGP_Subnet_Pool-dtn1") == "dtn1"
    body = {"type": "IPv6", "allocate": {"batch": "subnet", "netmask": "/64"}}
    desk.pools.allocate(DMM, "dtn1", {**body, "name": "one"})
    with pytest.raises(NoCapacity, match="has no free /64"):
        desk.pools.allocate(DMM, "dtn1", {**body, "name": "two"})


def test_an_affiliation_must_lie_under_the_pools_terminal(ctl: Controller):
    prefix = ctl.allocate("dtn1", "r")
    with pytest.raises(InvalidArgument, match="is not under"):
        ctl.desk.pools.affiliate(DMM, "dtn1", "default", urn("dtn2"), name="r")
    with pytest.raises(NotFound, match="no allocation named q"):
        ctl.desk.pools.affiliate(DMM, "dtn1", "default", urn("dtn1"), name="q")
    assert ctl.desk.pools.affiliate(DMM, "dtn1", "default", urn("dtn1"), address=prefix).affiliation == urn("dtn1")


# -- restart -----------------------------------------------------------------------------------------


def test_instances_allocations_and_profiles_are_back_after_a_restart(ctl: Controller):
    src, dst = ctl.allocate("dtn1", "rule-1"), ctl.allocate("dtn3", "rule-1")
    ctl.desk.create(DMM, U1, dmm_intent(src, dst, "40000", queries=False))
    ctl.desk.operate(DMM, U1, "provision")
    ctl.confirm()
    ctl.desk.create(DMM, U2, dnc(src="dtn5", dst="dtn6"))
    profile = ctl.desk.profiles.create(DMM, {"name": "rucio", "data": json.dumps(dnc()), "editable": True})
    before = {u: ctl.desk.view(DMM, u).as_json() for u in (U1, U2)}
    again = ctl.reopen()
    after = {u: again.desk.view(DMM, u).as_json() for u in (U1, U2)}
    assert after == before
    assert str(again.desk.view(DMM, U1).status) == "CREATE - READY"
    assert [a.prefix for a in again.desk.pools.listed(DMM, "dtn1")] == [src]
    assert again.desk.profiles.get(DMM, "rucio").uuid == profile.uuid
    assert again.allocate("dtn1", "rule-2") == "2001:db8:8:101::/64"
    again.desk.operate(DMM, U1, "cancel")
    assert str(again.desk.view(DMM, U1).status) == "CANCEL - READY"


def test_the_instance_row_is_written_in_the_transaction_of_its_reservations_row(ctl: Controller):
    ctl.desk.create(DMM, U1, dnc())
    rows = ctl.ledger.query("SELECT id, body FROM sense_instances")
    reservation = ctl.desk.view(DMM, U1).reservation
    assert rows[0][0] == U1 and json.loads(rows[0][1])["reservation"] == reservation.id
    # a refusal inside the book (no capacity) leaves neither row
    with pytest.raises(NoCapacity):
        ctl.desk.create(DMM, U2, dnc(dst="dtn2", capacity="150000"))
    assert ctl.ledger.query("SELECT COUNT(*) FROM sense_instances") == [(1,)]


# -- profiles, discovery, manifests -------------------------------------------------------------------


def test_profiles_restrict_edits_to_their_paths_and_values(ctl: Controller):
    template = dnc()
    template["data"]["connections"][0]["terminals"] = [{"uri": urn("dtn1")}, {"uri": urn("dtn2")}]
    profile = ctl.desk.profiles.create(DMM, {"name": "capped", "data": template, "edit": [
        {"path": "data.connections[0].bandwidth.capacity", "valid": "[0-9]{1,5}"}]})
    edit = {"service_profile_uuid": "capped", "queries": [{"ask": "edit", "options": [
        {"data.connections[0].bandwidth.capacity": "20000"}]}]}
    assert ctl.desk.create(DMM, U1, edit).view.reservation.request.bandwidth == 20 * G
    too_much = copy.deepcopy(edit)
    too_much["queries"][0]["options"][0]["data.connections[0].bandwidth.capacity"] = "200000"
    with pytest.raises(InvalidArgument, match="does not match"):
        ctl.desk.create(DMM, U2, too_much)
    with pytest.raises(AlreadyExists):
        ctl.desk.profiles.create(DMM, {"name": "capped", "data": template})
    with pytest.raises(FailedPrecondition, match="built in"):
        ctl.desk.profiles.delete(ADMIN, BUILTIN_PROFILE)
    with pytest.raises(PermissionDenied):
        ctl.desk.profiles.delete(OTHER, profile.uuid)
    assert [p.name for p in ctl.desk.profiles.listed(OTHER)] == [BUILTIN_PROFILE, "capped"]
    ctl.desk.profiles.delete(DMM, profile.uuid)
    assert [p.name for p in ctl.desk.profiles.listed(OTHER)] == [BUILTIN_PROFILE]


def test_discovery_names_each_terminal_as_its_own_site(ctl: Controller):
    discovery = ctl.desk.discovery
    assert discovery.lookup("dtn1") == [{"resource": urn("dtn1"), "name/tag/value": "dtn1", "type": "/sitename"}]
    assert [r["name/tag/value"] for r in discovery.lookup("dtn")] == [f"dtn{i}" for i in range(1, 9)]
    assert discovery.root_uri(urn("dtn1")) == urn("dtn1")
    assert discovery.root_uri(urn("dtn1") + ":service+x") == urn("dtn1")
    with pytest.raises(NotFound):
        discovery.root_uri("urn:ogf:network:es.net:2013")
    domain = discovery.domain(urn("dtn2"), "http://h/sense/api")
    assert domain["domain_uri"] == urn("dtn2") and domain["domain_url"] == "http://h/sense/api"
    assert domain["peer_points"][0]["port_capacity"] == str(100 * G) and domain["ipv6_pool"] == "2001:db8:8:200::/56"
    assert ctl.desk.discovery.ipv6_pool(urn("dtn2"))["routing"][0]["ipv6_subnet_pool"] == "2001:db8:8:200::/56"


def test_the_manifest_lists_every_64_of_a_terminals_pool(ctl: Controller):
    template = {"Metadata": "?metadata?", "Host": "?hostname?", "required": "true", "sparql-ext": (
        f"SELECT ?metadata WHERE {{ ?site nml:hasService ?md_svc. FILTER regex(str(?site), '{urn('dtn4')}') }} "
        "LIMIT 1")}
    filled = json.loads(ctl.desk.discovery.manifest(DMM, template)["jsonTemplate"])
    endpoints = json.loads(filled["Metadata"].replace("'", '"'))
    assert len(endpoints) == 256 and endpoints["2001:db8:8:400::/64"] == "dtn4" and filled["Host"] == "dtn4"
    with pytest.raises(InvalidArgument, match=r"\?nicname\?"):
        ctl.desk.discovery.manifest(DMM, {**template, "NIC": "?nicname?"})
    with pytest.raises(InvalidArgument, match="FILTER regex"):
        ctl.desk.discovery.manifest(DMM, {"Metadata": "?metadata?"})


# -- the topology file's pools ------------------------------------------------------------------------


def test_pools_in_topology_files_are_checked_and_old_files_stay_valid():
    spec = RING8.spec.model_dump(mode="json", exclude_none=True)
    for dtn in spec["dtns"]:
        dtn.pop("ipv6_pool")
    assert all(d.ipv6_pool is None for d in parse_topology_spec(spec, "old").dtns)
    for pool, match in (("2001:db8:8::/48", "a /56 to a /64"), ("2001:db8:8:100::1/64", "host bits"),
                        ("ff02::/64", "multicast"), ("fe80::/64", "not unicast"), ("10.0.0.0/8", "IPv6 network")):
        bad = copy.deepcopy(spec)
        bad["dtns"][0]["ipv6_pool"] = pool
        with pytest.raises(TopologyError, match=match):
            parse_topology_spec(bad, "bad")
    overlap = copy.deepcopy(spec)
    overlap["dtns"][0]["ipv6_pool"], overlap["dtns"][1]["ipv6_pool"] = "2001:db8::/56", "2001:db8::/64"
    with pytest.raises(TopologyError, match="overlaps the pool of dtn dtn1"):
        parse_topology_spec(overlap, "overlap")
    sc16 = Topology.load(builtin_topology("sc16"))
    pools = [ipaddress.IPv6Network(d.ipv6_pool) for d in sc16.dtns.values()]
    assert len(pools) == len(sc16.dtns) and all(p.subnet_of(ipaddress.IPv6Network("2001:db8::/32")) for p in pools)



class MemoryReplica:
    """A shared store in memory (what etcd holds for several controllers): rows by table and id."""

    description = "memory://replica"

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, dict]] = {}

    def rows(self, table: str) -> list[dict]:
        return [dict(row) for row in self.tables.get(table, {}).values()]

    def commit(self, changes) -> None:
        for change in changes:
            table = self.tables.setdefault(change.table, {})
            if change.row is None:
                table.pop(change.key, None)
            else:
                table[change.key] = dict(change.row)


def test_with_several_controllers_the_next_leader_has_the_instances_and_allocations():
    replica, clock = MemoryReplica(), FakeClock()

    def leader() -> tuple[Ledger, SenseDesk]:
        ledger = Ledger(RING8.capacities(), None, clock, replica=replica)
        book = ReservationBook(RING8, ledger, clock)
        return ledger, SenseDesk(book, DOMAIN)

    ledger, desk = leader()
    prefix = desk.pools.allocate(DMM, "dtn1", {"type": "IPv6", "name": "r", "allocate": {"netmask": "/64"}}).prefix
    desk.create(DMM, U1, dnc())
    desk.operate(DMM, U1, "provision")
    ledger.flush()
    assert set(replica.tables) >= {"sense_instances", "sense_addresses", "reservations", "bookings"}
    ledger.close()
    ledger, desk = leader()
    assert str(desk.view(DMM, U1).status) == "CREATE - READY"
    assert [a.prefix for a in desk.pools.listed(DMM, "dtn1")] == [prefix]
    ledger.close()


def test_deeply_nested_intents_and_templates_are_refused(ctl: Controller):
    deep: dict = {}
    node = deep
    for _ in range(200):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(InvalidArgument, match="nested more than 32 deep"):
        ctl.desk.create(DMM, U1, {**dnc(), "extra": deep})
    with pytest.raises(InvalidArgument, match="nested more than 32 deep"):
        ctl.desk.profiles.create(DMM, {"name": "deep", "data": {**dnc(), "extra": deep}})
