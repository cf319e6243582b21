"""The agent registry: registration, heartbeats, loss after the timeout, return, events; and
agent tokens bound to a DTN."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from northbound.auth import Authenticator
from sdn_app.core.agents import AgentFacts, AgentRegistry, AgentState, NicFacts
from sdn_app.core.clock import FakeClock
from sdn_app.core.errors import InvalidArgument, NotFound, PermissionDenied
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.topology import Topology
from topologies import builtin_topology

AGENT = Principal("dtn-agent", Role.AGENT)
SERVICE = Principal("rucio", Role.SERVICE)
ADMIN = Principal("noc", Role.ADMIN)
FACTS = AgentFacts(nics=(NicFacts("ens1f0", speed_bps=400 * 10**9, mtu=9000, numa_node=0, capacity_bps=400 * 10**9,
                                  limit="NIC 400G"),), cpus=tuple(range(32)), agent_version="test")


@pytest.fixture(scope="module")
def topology() -> Topology:
    return Topology.load(builtin_topology("sc16"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry(topology, clock) -> AgentRegistry:
    return AgentRegistry(topology, clock, heartbeat_timeout=15.0)


def test_register_makes_an_online_agent_and_an_event(registry, clock):
    agent = registry.register(AGENT, "caltech-a-dtn1", FACTS)
    assert (agent.name, agent.state, agent.principal) == ("agents/caltech-a-dtn1", AgentState.ONLINE, "dtn-agent")
    assert agent.registered == agent.last_heartbeat == clock.now()
    assert registry.get("agents/caltech-a-dtn1") == registry.get("caltech-a-dtn1") == agent
    assert registry.list() == [agent]
    [event] = registry.take_events()
    assert (event.previous, event.state, event.reason, event.agent) == (None, AgentState.ONLINE, "registered", agent)
    assert registry.take_events() == []


def test_unknown_dtn_is_refused_naming_it(registry):
    with pytest.raises(InvalidArgument, match="dtn 'no-such-dtn': not a DTN of topology"):
        registry.register(AGENT, "no-such-dtn", FACTS)
    assert registry.list() == []


def test_registering_again_replaces_the_facts(registry, clock):
    registry.register(AGENT, "caltech-a-dtn1", FACTS)
    clock.advance(3)
    newer = AgentFacts(nics=(NicFacts("ens2f0", speed_bps=100 * 10**9),))
    agent = registry.register(AGENT, "caltech-a-dtn1", newer)
    assert agent.facts == newer and registry.get("caltech-a-dtn1").facts == newer
    assert [e.reason for e in registry.take_events()] == ["registered", "registered again: host facts replaced"]


def test_heartbeat_of_an_unregistered_dtn_is_not_found(registry):
    with pytest.raises(NotFound, match=r"caltech-a-dtn1.*register first"):
        registry.heartbeat(AGENT, "caltech-a-dtn1")


def test_heartbeats_keep_an_agent_online(registry, clock):
    registry.register(AGENT, "caltech-a-dtn1", FACTS)
    for _ in range(5):
        clock.advance(10)
        assert registry.heartbeat(AGENT, "caltech-a-dtn1").last_heartbeat == clock.now()
        assert registry.tick() == []
    assert registry.next_deadline() == clock.now() + 15
    assert registry.get("caltech-a-dtn1").state is AgentState.ONLINE


def test_silent_agent_is_lost_after_the_timeout_and_comes_back(registry, clock):
    registry.register(AGENT, "caltech-a-dtn1", FACTS)
    registry.take_events()
    clock.advance(14.9)
    assert registry.tick() == []
    clock.advance(0.1)
    [lost] = registry.tick()
    assert (lost.previous, lost.state, lost.reason) == (AgentState.ONLINE, AgentState.LOST, "no heartbeat for 15 s")
    assert registry.get("caltech-a-dtn1").state is AgentState.LOST
    assert registry.get("caltech-a-dtn1").reason == "no heartbeat for 15 s"
    assert registry.next_deadline() == math.inf  # nothing left to time out
    assert registry.tick() == []  # lost once, not at every tick
    clock.advance(5)
    back = registry.heartbeat(AGENT, "caltech-a-dtn1")
    assert back.state is AgentState.ONLINE and back.reason == ""
    events = registry.take_events()
    assert [(e.previous, e.state) for e in events] == [(AgentState.ONLINE, AgentState.LOST),
                                                       (AgentState.LOST, AgentState.ONLINE)]
    assert events[1].reason == "back online: heartbeat after 20 s"


def test_lost_agent_registering_again_is_back_online(registry, clock):
    registry.register(AGENT, "caltech-a-dtn1", FACTS)
    clock.advance(30)
    registry.tick()
    registry.register(AGENT, "caltech-a-dtn1", FACTS)
    assert registry.take_events()[-1].reason == "back online: registered again after 30 s"


def test_next_deadline_is_the_earliest_online_agent(registry, clock):
    assert registry.next_deadline() == math.inf
    registry.register(AGENT, "caltech-a-dtn1", FACTS)
    clock.advance(5)
    registry.register(AGENT, "caltech-a-dtn2", FACTS)
    assert registry.next_deadline() == clock.now() - 5 + 15


def test_only_agents_and_admins_register_and_heartbeat(registry):
    with pytest.raises(PermissionDenied, match=r"rucio \(role service\).*only agent and admin tokens"):
        registry.register(SERVICE, "caltech-a-dtn1", FACTS)
    registry.register(ADMIN, "caltech-a-dtn1", FACTS)
    with pytest.raises(PermissionDenied):
        registry.heartbeat(SERVICE, "caltech-a-dtn1")
    registry.check_may_read(SERVICE)
    registry.check_may_read(ADMIN)
    with pytest.raises(PermissionDenied, match="service or admin token"):
        registry.check_may_read(AGENT)


def test_an_agent_bound_to_a_dtn_acts_for_that_dtn_only(registry):
    registry.register(AGENT, "caltech-a-dtn1", FACTS, bound_dtn="caltech-a-dtn1")
    with pytest.raises(PermissionDenied, match=r"bound to dtn 'caltech-a-dtn1'.*'caltech-a-dtn2'"):
        registry.register(AGENT, "caltech-a-dtn2", FACTS, bound_dtn="caltech-a-dtn1")
    with pytest.raises(PermissionDenied, match="bound to dtn"):
        registry.heartbeat(AGENT, "caltech-a-dtn2", bound_dtn="caltech-a-dtn1")
    registry.register(AGENT, "caltech-a-dtn2", FACTS)  # unbound: any DTN


def test_timeout_must_be_positive(topology, clock):
    with pytest.raises(InvalidArgument, match="timeout"):
        AgentRegistry(topology, clock, heartbeat_timeout=0)


def _tokens(tmp_path: Path, entries: list[dict]) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": entries}))
    path.chmod(0o600)
    return path


def test_tokens_file_binds_agent_tokens_to_a_dtn(tmp_path):
    auth = Authenticator.from_file(_tokens(tmp_path, [
        {"principal": "agent1", "role": "agent", "token": "agent1-token-0123456789", "dtn": "caltech-a-dtn1"},
        {"principal": "agent2", "role": "agent", "token": "agent2-token-0123456789"},
    ]))
    assert auth.bound_dtn(Principal("agent1", Role.AGENT)) == "caltech-a-dtn1"
    assert auth.bound_dtn(Principal("agent2", Role.AGENT)) is None


def test_dtn_is_for_agent_tokens_only(tmp_path):
    path = _tokens(tmp_path, [{"principal": "rucio", "role": "service", "token": "rucio-token-0123456789",
                               "dtn": "caltech-a-dtn1"}])
    with pytest.raises(InvalidArgument, match="dtn is for agent tokens only"):
        Authenticator.from_file(path)


def test_registrations_survive_a_restart_with_their_facts_and_are_due_a_heartbeat(tmp_path, clock):
    from sdn_app.core.ledger import Ledger

    topology = Topology.load(builtin_topology("sc16"))
    ledger = Ledger(topology.capacities(), tmp_path / "state.db", clock)
    AgentRegistry(topology, clock, 15.0, store=ledger).register(AGENT, "caltech-a-dtn1", FACTS)
    ledger.close()

    clock.advance(100)
    reopened = AgentRegistry(topology, clock, 15.0, store=Ledger(topology.capacities(), tmp_path / "state.db", clock))
    agent = reopened.get("caltech-a-dtn1")
    assert (agent.state, agent.facts, agent.principal) == (AgentState.ONLINE, FACTS, AGENT.name)
    assert reopened.heartbeat(AGENT, "caltech-a-dtn1").state is AgentState.ONLINE  # not NOT_FOUND: no re-register
    clock.advance(15)
    assert [e.state for e in reopened.tick()] == [AgentState.LOST]  # a dead agent is found out within the timeout
