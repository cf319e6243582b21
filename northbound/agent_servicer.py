"""tsdn.v1.AgentService: DTN agents register and heartbeat; services list, get and watch them.

Every call runs `AgentRegistry` methods on the `CoreWorker` thread; the worker ticks the
registry (marking silent agents LOST) and publishes its events to the registry's own hub.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator

import grpc

from northbound.auth import Authenticator
from northbound.convert import timestamp_out
from northbound.proto.tsdn.v1 import agent_pb2 as pb
from northbound.proto.tsdn.v1 import agent_pb2_grpc as pb_grpc
from northbound.servicers import WATCH_POLL_SECONDS, _Base, _status, rpc
from sdn_app.core.agents import Agent, AgentEvent, AgentFacts, AgentRegistry, AgentState, NicFacts, RdmaFacts
from sdn_app.core.errors import InvalidArgument, TsdnError
from sdn_app.core.reservations import Principal
from sdn_app.worker import CoreWorker

MAX_FACT_ITEMS = 4096  # NICs, CPUs, ... per list: a real host has far fewer


def _optional(message, field: str) -> int | None:
    return getattr(message, field) if message.HasField(field) else None


def _bounded(items, what: str) -> list:
    if len(items) > MAX_FACT_ITEMS:
        raise InvalidArgument(f"facts.{what}: {len(items)} entries, at most {MAX_FACT_ITEMS} are accepted")
    return list(items)


def facts_in(message: pb.HostFacts) -> AgentFacts:
    """The core's facts of a `HostFacts` message."""
    nics = tuple(NicFacts(
        name=n.name, speed_bps=_optional(n, "speed_bps"), mtu=_optional(n, "mtu"),
        numa_node=_optional(n, "numa_node"), local_cpus=tuple(_bounded(n.local_cpus, f"nics[{i}].local_cpus")),
        pcie_usable_bps=_optional(n, "pcie_usable_bps"), capacity_bps=_optional(n, "capacity_bps"),
        limit=n.limit, warnings=tuple(n.warnings)) for i, n in enumerate(_bounded(message.nics, "nics")))
    for i, nic in enumerate(nics):
        if not nic.name:
            raise InvalidArgument(f"facts.nics[{i}].name: empty; every NIC needs its interface name")
    rdma = tuple(RdmaFacts(d.name, tuple(d.netdevs)) for d in _bounded(message.rdma_devices, "rdma_devices"))
    numa = tuple((n.node, tuple(n.cpus)) for n in _bounded(message.numa_nodes, "numa_nodes"))
    return AgentFacts(nics=nics, rdma_devices=rdma, cpus=tuple(_bounded(message.cpus, "cpus")), numa_nodes=numa,
                      agent_version=message.agent_version, hostname=message.hostname)


def facts_out(facts: AgentFacts) -> pb.HostFacts:
    """The `HostFacts` message of the core's facts."""
    message = pb.HostFacts(cpus=facts.cpus, agent_version=facts.agent_version, hostname=facts.hostname,
                           rdma_devices=[pb.AgentRdmaDevice(name=d.name, netdevs=d.netdevs)
                                         for d in facts.rdma_devices],
                           numa_nodes=[pb.NumaNode(node=node, cpus=cpus) for node, cpus in facts.numa_nodes])
    for nic in facts.nics:
        entry = pb.AgentNic(name=nic.name, local_cpus=nic.local_cpus, limit=nic.limit, warnings=nic.warnings)
        for field in ("speed_bps", "mtu", "numa_node", "pcie_usable_bps", "capacity_bps"):
            if (value := getattr(nic, field)) is not None:
                setattr(entry, field, value)
        message.nics.append(entry)
    return message


def _state_out(state: AgentState | None) -> int:
    return pb.AgentState.Value(state.value) if state is not None else pb.AGENT_STATE_UNSPECIFIED


def agent_out(agent: Agent) -> pb.Agent:
    """The `Agent` message of a registry entry."""
    return pb.Agent(name=agent.name, dtn=agent.dtn, state=_state_out(agent.state), state_reason=agent.reason,
                    registered_time=timestamp_out(agent.registered),
                    last_heartbeat_time=timestamp_out(agent.last_heartbeat), facts=facts_out(agent.facts),
                    principal=agent.principal)


def event_out(event: AgentEvent) -> pb.AgentEvent:
    """The `AgentEvent` message of a registry event."""
    return pb.AgentEvent(previous_state=_state_out(event.previous), state=_state_out(event.state),
                         reason=event.reason, agent=agent_out(event.agent), time=timestamp_out(event.time))


class AgentServicer(_Base, pb_grpc.AgentServiceServicer):
    """tsdn.v1.AgentService over `registry`, which the worker owns and ticks."""

    def __init__(self, worker: CoreWorker, auth: Authenticator, registry: AgentRegistry):
        super().__init__(worker, auth)
        self.registry = registry

    @rpc
    def RegisterAgent(self, request: pb.RegisterAgentRequest, context, principal: Principal):
        facts = facts_in(request.facts)
        bound = self.auth.bound_dtn(principal)
        return self.worker.call(lambda: agent_out(self.registry.register(principal, request.dtn, facts, bound)))

    @rpc
    def Heartbeat(self, request: pb.HeartbeatRequest, context, principal: Principal):
        bound = self.auth.bound_dtn(principal)
        return self.worker.call(lambda: agent_out(self.registry.heartbeat(principal, request.dtn, bound)))

    @rpc
    def ListAgents(self, request: pb.ListAgentsRequest, context, principal: Principal):
        self.registry.check_may_read(principal)
        return self.worker.call(lambda: pb.ListAgentsResponse(agents=[agent_out(a) for a in self.registry.list()]))

    @rpc
    def GetAgent(self, request: pb.GetAgentRequest, context, principal: Principal):
        self.registry.check_may_read(principal)
        return self.worker.call(lambda: agent_out(self.registry.get(request.name)))

    def WatchAgents(self, request: pb.WatchAgentsRequest, context) -> Iterator[pb.AgentEvent]:
        hub = self.worker.hub_for(self.registry)
        try:
            principal = self.auth.authenticate(context.invocation_metadata())
            self.registry.check_may_read(principal)
            # On the worker thread: the snapshot and the subscription see exactly the same events.
            subscription, existing = self.worker.call(lambda: (hub.subscribe(lambda _: True), self.registry.list()))
        except TsdnError as error:
            context.abort(_status(error), str(error))
        context.add_callback(lambda: hub.unsubscribe(subscription))
        try:
            if request.include_existing:
                for agent in existing:
                    yield pb.AgentEvent(state=_state_out(agent.state), reason="snapshot", agent=agent_out(agent))
            closed = False
            while context.is_active():
                try:
                    event = subscription.events.get(timeout=WATCH_POLL_SECONDS)
                except queue.Empty:
                    if subscription.overflowed:
                        break
                    continue
                if event is None:
                    closed = True
                    break
                yield event_out(event)
        finally:
            hub.unsubscribe(subscription)
        if subscription.overflowed:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          "this watcher fell too far behind; watch again with include_existing to resynchronize")
        if (closed and context.is_active()) or not self.worker.running:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the controller is shutting down; watch again after restart")
