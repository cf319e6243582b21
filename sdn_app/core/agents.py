"""DTN agents known to the controller: who registered for which DTN, with what host facts, and
whether they still send heartbeats.

Pure: the time comes from the core's clock, and the `CoreWorker` calls `tick` when
`next_deadline` passes, so a silent agent is marked LOST at most one tick after its timeout.

    registry = AgentRegistry(topology, clock, heartbeat_timeout=15.0)
    registry.register(principal, "caltech-a-dtn1", facts)
    registry.heartbeat(principal, "caltech-a-dtn1")
    registry.tick()          # -> [AgentEvent(... LOST, "no heartbeat for 15 s")] once it falls silent

Given the ledger (`store`), registrations are kept in its `agents` table (in etcd too, with
several controllers): a controller that starts, or a follower elected leader, knows every agent
and its host facts at once. Heartbeats are not stored (one write per agent every few seconds,
for nothing): a loaded agent is ONLINE and its next heartbeat is due within the timeout.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from sdn_app.core.clock import Clock
from sdn_app.core.errors import InvalidArgument, NotFound, PermissionDenied
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservation import HostLimit, Principal, Role
from sdn_app.core.topology import Topology

DEFAULT_HEARTBEAT_TIMEOUT = 15.0


class AgentState(StrEnum):
    """ONLINE while heartbeats arrive, LOST once none came within the timeout."""

    ONLINE = "ONLINE"
    LOST = "LOST"


@dataclass(frozen=True)
class NicFacts:
    """One NIC as the agent read it (None: unknown)."""

    name: str
    speed_bps: int | None = None
    mtu: int | None = None
    numa_node: int | None = None
    local_cpus: tuple[int, ...] = ()
    pcie_usable_bps: int | None = None
    capacity_bps: int | None = None
    limit: str = ""
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RdmaFacts:
    """One RDMA device and the network interfaces it sits on."""

    name: str
    netdevs: tuple[str, ...] = ()


@dataclass(frozen=True)
class AgentFacts:
    """What an agent reports about its host when it registers."""

    nics: tuple[NicFacts, ...] = ()
    rdma_devices: tuple[RdmaFacts, ...] = ()
    cpus: tuple[int, ...] = ()
    numa_nodes: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (node, its CPUs)
    agent_version: str = ""
    hostname: str = ""
    data_nic: str = ""  # the NIC that carries transfers; empty: the fastest

    def transfer_nic(self) -> NicFacts | None:
        """The NIC transfers use: `data_nic`, else the one of highest known capacity."""
        if self.data_nic:
            return next((nic for nic in self.nics if nic.name == self.data_nic), None)
        known = [nic for nic in self.nics if nic.capacity_bps is not None]
        return max(known, key=lambda nic: nic.capacity_bps or 0, default=None)


@dataclass(frozen=True)
class Agent:
    """An agent as the controller knows it."""

    dtn: str
    state: AgentState
    facts: AgentFacts
    principal: str
    registered: float
    last_heartbeat: float
    reason: str = ""

    @property
    def name(self) -> str:
        """The API name, `agents/{dtn}`."""
        return f"agents/{self.dtn}"


@dataclass(frozen=True)
class AgentEvent:
    """A change of an agent: registered (previous None), lost, back online."""

    previous: AgentState | None
    state: AgentState
    reason: str
    agent: Agent
    time: float


@dataclass
class AgentRegistry:
    """The agents of one controller run, by DTN; one owner: the core thread."""

    topology: Topology
    clock: Clock
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT
    emulation_scale: float = 1.0  # hosts carry nominal rates x this (Mininet)
    store: Ledger | None = None  # registrations kept in its `agents` table
    _agents: dict[str, Agent] = field(default_factory=dict, init=False)
    _events: list[AgentEvent] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not (self.heartbeat_timeout > 0 and math.isfinite(self.heartbeat_timeout)):
            raise InvalidArgument(f"agent heartbeat timeout: must be a positive number of seconds, "
                                  f"got {self.heartbeat_timeout}")
        if not 0 < self.emulation_scale <= 1:
            raise InvalidArgument(f"emulation scale: must be in (0, 1], got {self.emulation_scale}")
        if self.store is not None:
            self.store.write(_create_table)
            now = self.clock.now()
            for dtn, principal, registered, facts in self.store.query(
                    "SELECT id, principal, registered, facts FROM agents ORDER BY id"):
                if dtn in self.topology.dtns:  # an agent of a DTN the topology lost stays in the store only
                    self._agents[dtn] = Agent(dtn, AgentState.ONLINE, _facts_in(json.loads(facts)), principal,
                                              registered, now, "registered before this controller started")

    def register(self, principal: Principal, dtn: str, facts: AgentFacts, bound_dtn: str | None = None) -> Agent:
        """Record (or replace) the agent of `dtn` with `facts`, ONLINE as of now.

        `bound_dtn` is the only DTN the caller's token may act for (None: any). Raises
        PermissionDenied for a caller that is no agent or admin, or acts for another DTN, and
        InvalidArgument naming `dtn` when it is not a DTN of the topology.
        """
        self._authorize(principal, dtn, bound_dtn, "register")
        if dtn not in self.topology.dtns:
            known = ", ".join(sorted(self.topology.dtns)[:12]) or "none"
            raise InvalidArgument(f"dtn {dtn!r}: not a DTN of topology {self.topology.name} (known: {known})")
        now = self.clock.now()
        before = self._agents.get(dtn)
        agent = Agent(dtn, AgentState.ONLINE, facts, principal.name, now, now)
        if self.store is not None:  # first: a store that refuses it (a deposed leader) leaves everything as it was
            self.store.write(lambda db: _save(db, agent))
        self._agents[dtn] = agent
        if before is None:
            self._emit(None, agent, "registered")
        elif before.state is AgentState.LOST:
            self._emit(before.state, agent, f"back online: registered again after {now - before.last_heartbeat:.0f} s")
        else:
            self._emit(before.state, agent, "registered again: host facts replaced")
        return agent

    def heartbeat(self, principal: Principal, dtn: str, bound_dtn: str | None = None) -> Agent:
        """Note that the agent of `dtn` is alive; a LOST one is ONLINE again.

        Raises NotFound for a DTN whose agent has not registered (since the controller started).
        """
        self._authorize(principal, dtn, bound_dtn, "send heartbeats")
        before = self._agents.get(dtn)
        if before is None:
            raise NotFound(f"agent of dtn {dtn!r} is not registered (did the controller restart?): register first")
        now = self.clock.now()
        agent = replace(before, state=AgentState.ONLINE, last_heartbeat=now, reason="")
        self._agents[dtn] = agent
        if before.state is AgentState.LOST:
            self._emit(before.state, agent, f"back online: heartbeat after {now - before.last_heartbeat:.0f} s")
        return agent

    def tick(self) -> list[AgentEvent]:
        """Mark LOST every ONLINE agent silent for the timeout; return those events (also kept
        for `take_events`)."""
        now = self.clock.now()
        events: list[AgentEvent] = []
        for dtn, agent in sorted(self._agents.items()):
            if agent.state is AgentState.ONLINE and now - agent.last_heartbeat >= self.heartbeat_timeout:
                reason = f"no heartbeat for {self.heartbeat_timeout:g} s"
                lost = replace(agent, state=AgentState.LOST, reason=reason)
                self._agents[dtn] = lost
                events.append(self._emit(AgentState.ONLINE, lost, reason))
        return events

    def lost_reason(self, dtn: str) -> str | None:
        """Why the agent of `dtn` is LOST, or None when it is not (online, or never registered)."""
        agent = self._agents.get(dtn)
        return agent.reason if agent is not None and agent.state is AgentState.LOST else None

    def host_limit(self, dtn: str) -> HostLimit | None:
        """What the host of `dtn` can carry, in nominal bits/s, as its agent found (None: no
        agent registered, or its transfer NIC's capacity is unknown)."""
        agent = self._agents.get(dtn)
        nic = agent.facts.transfer_nic() if agent is not None else None
        if nic is None or nic.capacity_bps is None:
            return None
        why = f"{nic.limit or 'its capacity'} (NIC {nic.name}, as its agent reported)"
        if self.emulation_scale != 1:
            why += f"; emulated at scale {self.emulation_scale:g}"
        return HostLimit(int(nic.capacity_bps / self.emulation_scale), why)

    def next_deadline(self) -> float:
        """When the next ONLINE agent times out (epoch seconds); inf when none can."""
        return min((a.last_heartbeat + self.heartbeat_timeout for a in self._agents.values()
                    if a.state is AgentState.ONLINE), default=math.inf)

    def take_events(self) -> list[AgentEvent]:
        """The events since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def list(self) -> list[Agent]:
        """Every known agent, by DTN name."""
        return [self._agents[dtn] for dtn in sorted(self._agents)]

    def get(self, dtn: str) -> Agent:
        """The agent of `dtn` (`agents/` prefix allowed); NotFound when none registered."""
        dtn = dtn.removeprefix("agents/")
        try:
            return self._agents[dtn]
        except KeyError:
            raise NotFound(f"no agent registered for dtn {dtn!r}") from None

    @staticmethod
    def check_may_read(principal: Principal) -> None:
        """Admins and services may list, get and watch agents; agents only register and heartbeat."""
        if principal.role not in (Role.ADMIN, Role.SERVICE):
            raise PermissionDenied(f"{principal.name} (role {principal.role}): agents register and send "
                                   "heartbeats only; list or watch agents with a service or admin token")

    @staticmethod
    def _authorize(principal: Principal, dtn: str, bound_dtn: str | None, what: str) -> None:
        if principal.role not in (Role.AGENT, Role.ADMIN):
            raise PermissionDenied(f"{principal.name} (role {principal.role}) may not {what} for an agent: "
                                   "only agent and admin tokens may")
        if principal.role is Role.AGENT and bound_dtn is not None and dtn != bound_dtn:
            raise PermissionDenied(f"{principal.name}'s token is bound to dtn {bound_dtn!r}; "
                                   f"it may not {what} for dtn {dtn!r}")

    def _emit(self, previous: AgentState | None, agent: Agent, reason: str) -> AgentEvent:
        event = AgentEvent(previous, agent.state, reason, agent, self.clock.now())
        self._events.append(event)
        return event


def _create_table(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS agents (id TEXT PRIMARY KEY, principal TEXT NOT NULL, "
               "registered REAL NOT NULL, facts TEXT NOT NULL)")


def _save(db: sqlite3.Connection, agent: Agent) -> None:
    db.execute("INSERT INTO agents (id, principal, registered, facts) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO "
               "UPDATE SET principal=excluded.principal, registered=excluded.registered, facts=excluded.facts",
               (agent.dtn, agent.principal, agent.registered, json.dumps(asdict(agent.facts), sort_keys=True)))


def _facts_in(data: dict[str, Any]) -> AgentFacts:
    """Facts as `_save` stored them (lists back to tuples)."""
    nics = tuple(NicFacts(**{**nic, "local_cpus": tuple(nic["local_cpus"]), "warnings": tuple(nic["warnings"])})
                 for nic in data["nics"])
    rdma = tuple(RdmaFacts(d["name"], tuple(d["netdevs"])) for d in data["rdma_devices"])
    numa = tuple((int(node), tuple(cpus)) for node, cpus in data["numa_nodes"])
    return AgentFacts(nics, rdma, tuple(data["cpus"]), numa, data["agent_version"], data["hostname"], data["data_nic"])
