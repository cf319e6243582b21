"""Host limits: the reservation book refuses more than a DTN's host can carry (its transfer NIC,
or the PCIe slot it sits in), as the DTN's agent reported; in the core and through the API."""

from __future__ import annotations

import grpc
import pytest

from northbound.client import ApiError
from northbound.proto.tsdn.v1 import agent_pb2 as pb
from sdn_app.core.agents import AgentFacts, AgentRegistry, NicFacts
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import NoCapacity
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import ReservationBook
from sdn_app.core.topology import Topology
from tests.switched import request
from topologies import builtin_topology

G = 10**9
T = 10**12
RUCIO = Principal("rucio", Role.SERVICE)
AGENT = Principal("dtn-agent", Role.AGENT)
PCIE_LIMIT = "PCIe Gen3 x8: 63.0 Gbit/s usable"
PCIE_BOUND = NicFacts("ens1f0", speed_bps=100 * G, pcie_usable_bps=63 * G, capacity_bps=63 * G, limit=PCIE_LIMIT)


def make(tmp_path, scale: float = 1.0):
    topology = Topology.load(builtin_topology("ring8"))
    clock = FakeClock()
    ledger = Ledger(topology.capacities(), tmp_path / "t.db", clock)
    book = ReservationBook(topology, ledger, clock)
    registry = AgentRegistry(topology, clock, emulation_scale=scale)
    book.host_limits = registry.host_limit
    return book, registry, ledger


def test_a_booking_above_a_pcie_bound_host_is_refused_naming_the_dtn_and_pcie(tmp_path):
    book, registry, ledger = make(tmp_path)
    registry.register(AGENT, "dtn1", AgentFacts(nics=(PCIE_BOUND,)))
    limit = registry.host_limit("dtn1")
    assert limit.capacity_bps == 63 * G and limit.why == f"{PCIE_LIMIT} (NIC ens1f0, as its agent reported)"
    with pytest.raises(NoCapacity) as refused:
        book.create(RUCIO, request(book.clock, "dtn1", "dtn3", bandwidth=64 * G))
    message = str(refused.value)
    assert message.startswith("64G is more than dtn dtn1 can carry: 63G, limited by PCIe Gen3 x8")
    assert book.list(RUCIO)[0] == [] and ledger.bookings() == []
    # The limit holds on either end of the path.
    with pytest.raises(NoCapacity, match="more than dtn dtn1 can carry: 63G"):
        book.create(RUCIO, request(book.clock, "dtn5", "dtn1", bandwidth=70 * G))
    assert book.create(RUCIO, request(book.clock, "dtn1", "dtn3", bandwidth=63 * G)).request.bandwidth == 63 * G
    assert book.create(RUCIO, request(book.clock, "dtn3", "dtn1", bandwidth=40 * G)).request.bandwidth == 40 * G


def test_modify_above_the_host_limit_is_refused_and_changes_nothing(tmp_path):
    book, registry, ledger = make(tmp_path)
    registry.register(AGENT, "dtn3", AgentFacts(nics=(PCIE_BOUND,)))
    r = book.create(RUCIO, request(book.clock, "dtn1", "dtn3", bandwidth=40 * G))
    book.take_events()
    with pytest.raises(NoCapacity, match=r"80G is more than dtn dtn3 can carry: 63G, limited by PCIe"):
        book.modify(RUCIO, r.name, bandwidth=80 * G)
    assert book.get(RUCIO, r.name) == r and ledger.get(r.id).bandwidth == 40 * G
    assert book.take_events() == []
    assert book.modify(RUCIO, r.name, bandwidth=60 * G).request.bandwidth == 60 * G
    assert book.modify(RUCIO, r.name, bandwidth=10 * G).request.bandwidth == 10 * G  # shrinking is always fine


def test_an_emulated_host_is_limited_at_its_nominal_rate(tmp_path):
    book, registry, _ = make(tmp_path, scale=0.001)
    registry.register(AGENT, "dtn1", AgentFacts(nics=(NicFacts("dtn1-eth0", speed_bps=10 * G, capacity_bps=10 * G,
                                                                 limit="veth 10G"),)))
    limit = registry.host_limit("dtn1")
    assert limit.capacity_bps == 10 * T
    assert limit.why == "veth 10G (NIC dtn1-eth0, as its agent reported); emulated at scale 0.001"
    assert book.create(RUCIO, request(book.clock, "dtn1", "dtn3", bandwidth=50 * G)).request.bandwidth == 50 * G


def test_the_data_nic_sets_the_limit_else_the_fastest(tmp_path):
    book, registry, _ = make(tmp_path)
    fast = NicFacts("ens1f0", speed_bps=100 * G, capacity_bps=100 * G, limit="NIC 100G")
    slow = NicFacts("eno1", speed_bps=25 * G, capacity_bps=25 * G, limit="NIC 25G")
    registry.register(AGENT, "dtn1", AgentFacts(nics=(slow, fast)))
    assert registry.host_limit("dtn1").capacity_bps == 100 * G
    registry.register(AGENT, "dtn1", AgentFacts(nics=(slow, fast), data_nic="eno1"))
    assert registry.host_limit("dtn1").capacity_bps == 25 * G
    with pytest.raises(NoCapacity, match=r"more than dtn dtn1 can carry: 25G, limited by NIC 25G \(NIC eno1"):
        book.create(RUCIO, request(book.clock, "dtn1", "dtn3", bandwidth=40 * G))
    # A NIC of unknown capacity sets no limit.
    registry.register(AGENT, "dtn1", AgentFacts(nics=(NicFacts("eno1", speed_bps=None),)))
    assert registry.host_limit("dtn1") is None


def test_no_agent_means_no_host_limit(tmp_path):
    book, registry, _ = make(tmp_path)
    assert registry.host_limit("dtn1") is None
    assert book.create(RUCIO, request(book.clock, "dtn1", "dtn3", bandwidth=100 * G)).request.bandwidth == 100 * G


def test_the_api_refuses_a_reservation_above_a_registered_hosts_limit(client_for):
    dtn = "caltech-a-dtn1"
    facts = pb.HostFacts(nics=[pb.AgentNic(name="ens1f0", speed_bps=100 * G, pcie_usable_bps=63 * G,
                                           capacity_bps=63 * G, limit=PCIE_LIMIT)])
    client_for("dtn-agent").register_agent(dtn, facts)
    service = client_for("rucio")
    with pytest.raises(ApiError) as refused:
        service.create_reservation(dtn, "caltech-b-dtn1", 80 * G, duration=600)
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.message.startswith(f"80G is more than dtn {dtn} can carry: 63G, limited by {PCIE_LIMIT}")
    assert list(service.list_reservations()) == []
    assert service.create_reservation(dtn, "caltech-b-dtn1", 60 * G, duration=600).bandwidth_bps == 60 * G
