"""tsdn.v1.AgentService: DTN agents register and heartbeat; services list, get and watch them.

Every call runs `AgentRegistry` methods on the `CoreWorker` thread; the worker ticks the
registry (marking silent agents LOST) and publishes its events to the registry's own hub.
"""

from __future__ import annotations

from collections.abc import Iterator

from northbound.auth import Authenticator
from northbound.convert import timestamp_out
from northbound.proto.tsdn.v1 import agent_pb2 as pb
from northbound.proto.tsdn.v1 import agent_pb2_grpc as pb_grpc
from northbound.servicers import _Base, rpc
from northbound.transfers import job_out, rate_in, role_in
from sdn_app.core.agents import Agent, AgentEvent, AgentFacts, AgentRegistry, AgentState, NicFacts, RdmaFacts
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.reservations import Principal
from sdn_app.core.transfers import JobOffer, TransferDesk
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
    if message.data_nic and message.data_nic not in {nic.name for nic in nics}:
        raise InvalidArgument(f"facts.data_nic {message.data_nic!r}: not one of the NICs reported "
                              f"({', '.join(nic.name for nic in nics) or 'none'})")
    rdma = tuple(RdmaFacts(d.name, tuple(d.netdevs)) for d in _bounded(message.rdma_devices, "rdma_devices"))
    numa = tuple((n.node, tuple(n.cpus)) for n in _bounded(message.numa_nodes, "numa_nodes"))
    return AgentFacts(nics=nics, rdma_devices=rdma, cpus=tuple(_bounded(message.cpus, "cpus")), numa_nodes=numa,
                      agent_version=message.agent_version, hostname=message.hostname, data_nic=message.data_nic)


def facts_out(facts: AgentFacts) -> pb.HostFacts:
    """The `HostFacts` message of the core's facts."""
    message = pb.HostFacts(cpus=facts.cpus, agent_version=facts.agent_version, hostname=facts.hostname,
                           data_nic=facts.data_nic,
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

    def __init__(self, worker: CoreWorker, auth: Authenticator, registry: AgentRegistry, desk: TransferDesk):
        super().__init__(worker, auth)
        self.registry = registry
        self.desk = desk
        self.hub = worker.hub_for(registry)

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
        def subscribe(principal: Principal):
            self.registry.check_may_read(principal)
            return self.hub.subscribe(lambda event: isinstance(event, AgentEvent)), self.registry.list()

        def first(existing: list[Agent]) -> Iterator[pb.AgentEvent]:
            if request.include_existing:
                for agent in existing:
                    yield pb.AgentEvent(state=_state_out(agent.state), reason="snapshot", agent=agent_out(agent))
        return self.stream(context, self.hub, subscribe, first, event_out)

    def TakeJobs(self, request: pb.TakeJobsRequest, context) -> Iterator[pb.TransferJob]:
        hub = self.worker.hub_for(self.desk)

        def subscribe(principal: Principal):
            pending = self.desk.jobs_for(principal, request.dtn, self.auth.bound_dtn(principal))
            wanted = request.dtn
            return hub.subscribe(lambda e: isinstance(e, JobOffer) and e.job.dtn == wanted), pending
        return self.stream(context, hub, subscribe, lambda pending: (job_out(job) for job in pending),
                           lambda offer: job_out(offer.job))

    @rpc
    def ReportTransfer(self, request: pb.TransferReport, context, principal: Principal):
        bound = self.auth.bound_dtn(principal)
        role = role_in(request.role)
        which = request.WhichOneof("what")
        desk = self.desk
        if which == "listening_port":
            stop, why = self.worker.call(lambda: desk.receiver_ready(
                principal, request.dtn, request.transfer, request.listening_port, request.listening_host, bound))
        elif which == "rate":
            report = rate_in(request.rate, request.transfer)
            stop, why = self.worker.call(lambda: desk.report(principal, request.dtn, request.transfer, role,
                                                             report, bound))
        elif which == "outcome":
            outcome = request.outcome
            final = rate_in(request.final, request.transfer) if request.HasField("final") else None
            verified = outcome.checksums_verified if outcome.HasField("checksums_verified") else None
            transfer = self.worker.call(lambda: desk.finished(principal, request.dtn, request.transfer, role,
                                                              outcome.ok, outcome.error, verified, final, bound))
            stop, why = True, transfer.reason
        else:
            raise InvalidArgument("give one of listening_port, rate and outcome")
        return pb.ReportTransferResponse(stop=stop, reason=why)
