"""tsdn.v1.AgentService: DTN agents register and heartbeat; services list, get and watch them.

Every call runs `AgentRegistry` methods on the `CoreWorker` thread; the worker ticks the
registry (marking silent agents LOST) and publishes its events to the registry's own hub.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from northbound.auth import Authenticator
from northbound.convert import name_in, rate_in, timestamp_out
from northbound.proto.tsdn.v1 import agent_pb2 as pb
from northbound.proto.tsdn.v1 import agent_pb2_grpc as pb_grpc
from northbound.servicers import _Base, rpc
from northbound.transfers import job_out, role_in
from sdn_app.core import validation as v
from sdn_app.core.agents import Agent, AgentEvent, AgentFacts, AgentRegistry, AgentState, NicFacts, RdmaFacts
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.reservation import Principal
from sdn_app.core.topology import Topology
from sdn_app.core.transfers import JobOffer, TransferDesk
from sdn_app.core.units import MAX_BANDWIDTH
from sdn_app.worker import CoreWorker, jobs_topic

MAX_FACT_ITEMS = v.MAX_LIST  # NICs, CPUs, ... per list: a real host has far fewer
MAX_WARNINGS = 64  # per NIC


def _optional(message, field: str, low: int, high: int, what: str) -> int | None:
    """An optional integer field of `message`, within [low, high]; None when unset."""
    if not message.HasField(field):
        return None
    return v.whole(getattr(message, field), f"{what}.{field}", low, high)


def _bounded(items, what: str) -> list:
    v.entries(items, f"facts.{what}", MAX_FACT_ITEMS)
    return list(items)


def _cpus(items, what: str) -> tuple[int, ...]:
    """A list of CPU numbers: at most MAX_FACT_ITEMS, each at most `validation.MAX_CPU_ID`."""
    for i, cpu in enumerate(_bounded(items, what)):
        v.whole(cpu, f"facts.{what}[{i}]", 0, v.MAX_CPU_ID)
    return tuple(items)


def _nic_in(n: pb.AgentNic, i: int) -> NicFacts:
    what = f"facts.nics[{i}]"
    v.text(n.name, f"{what}.name", v.MAX_NAME)
    if not n.name:
        raise InvalidArgument(f"{what}.name: empty; every NIC needs its interface name")
    v.text(n.limit, f"{what}.limit", v.MAX_SHORT_TEXT)
    v.texts(n.warnings, f"{what}.warnings", MAX_WARNINGS, v.MAX_TEXT)
    return NicFacts(
        name=n.name, speed_bps=_optional(n, "speed_bps", 0, MAX_BANDWIDTH, what),
        mtu=_optional(n, "mtu", 0, v.MAX_MTU, what), numa_node=_optional(n, "numa_node", -1, v.MAX_NUMA_NODE, what),
        local_cpus=_cpus(n.local_cpus, f"nics[{i}].local_cpus"),
        pcie_usable_bps=_optional(n, "pcie_usable_bps", 0, MAX_BANDWIDTH, what),
        capacity_bps=_optional(n, "capacity_bps", 0, MAX_BANDWIDTH, what), limit=n.limit, warnings=tuple(n.warnings))


def facts_in(message: pb.HostFacts) -> AgentFacts:
    """The core's facts of a `HostFacts` message, every field within the limits of `sdn_app.core.validation`."""
    nics = tuple(_nic_in(n, i) for i, n in enumerate(_bounded(message.nics, "nics")))
    v.text(message.data_nic, "facts.data_nic", v.MAX_NAME)
    if message.data_nic and message.data_nic not in {nic.name for nic in nics}:
        raise InvalidArgument(f"facts.data_nic {v.shown(message.data_nic)}: not one of the NICs reported "
                              f"({v.shown(', '.join(nic.name for nic in nics) or 'none', 200)})")
    rdma = []
    for i, d in enumerate(_bounded(message.rdma_devices, "rdma_devices")):
        v.text(d.name, f"facts.rdma_devices[{i}].name", v.MAX_NAME)
        rdma.append(RdmaFacts(d.name, v.texts(d.netdevs, f"facts.rdma_devices[{i}].netdevs", MAX_FACT_ITEMS,
                                              v.MAX_NAME)))
    numa = []
    for i, n in enumerate(_bounded(message.numa_nodes, "numa_nodes")):
        v.whole(n.node, f"facts.numa_nodes[{i}].node", 0, v.MAX_NUMA_NODE)
        numa.append((n.node, _cpus(n.cpus, f"numa_nodes[{i}].cpus")))
    v.text(message.agent_version, "facts.agent_version", v.MAX_SHORT_TEXT)
    v.text(message.hostname, "facts.hostname", v.MAX_HOST)
    return AgentFacts(nics=nics, rdma_devices=tuple(rdma), cpus=_cpus(message.cpus, "cpus"), numa_nodes=tuple(numa),
                      agent_version=message.agent_version, hostname=message.hostname, data_nic=message.data_nic)


def take_jobs_dtn(topology: Topology, dtn: str) -> str:
    """The DTN of a TakeJobs request: INVALID_ARGUMENT when empty or too long, NOT_FOUND when the
    topology has none of that name (no job could ever come: the stream is refused at once).
    The streaming handler calls it first, once the caller is authenticated."""
    return v.known_dtn(topology.dtns, dtn, "dtn", topology.name)


def _outcome_in(outcome: pb.TransferOutcome) -> None:
    v.text(outcome.error, "outcome.error", v.MAX_TEXT)
    v.texts(outcome.files, "outcome.files", v.MAX_OUTCOME_FILES, v.MAX_PATH)


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
        name_in(request.dtn, "dtn", required=True)
        facts = facts_in(request.facts)
        bound = self.auth.bound_dtn(principal)
        return self.worker.call(lambda: agent_out(self.registry.register(principal, request.dtn, facts, bound)))

    @rpc
    def Heartbeat(self, request: pb.HeartbeatRequest, context, principal: Principal):
        name_in(request.dtn, "dtn", required=True)
        bound = self.auth.bound_dtn(principal)
        return self.worker.call(lambda: agent_out(self.registry.heartbeat(principal, request.dtn, bound)))

    @rpc
    def ListAgents(self, request: pb.ListAgentsRequest, context, principal: Principal):
        self.registry.check_may_read(principal)
        return self.worker.call(lambda: pb.ListAgentsResponse(agents=[agent_out(a) for a in self.registry.list()]))

    @rpc
    def GetAgent(self, request: pb.GetAgentRequest, context, principal: Principal):
        self.registry.check_may_read(principal)
        name_in(request.name)
        return self.worker.call(lambda: agent_out(self.registry.get(request.name)))

    async def WatchAgents(self, request: pb.WatchAgentsRequest, context) -> AsyncIterator[pb.AgentEvent]:
        def subscribe(principal: Principal):
            self.registry.check_may_read(principal)
            return self.hub.subscribe(lambda event: isinstance(event, AgentEvent)), self.registry.list()

        def first(existing: list[Agent]) -> Iterator[pb.AgentEvent]:
            if request.include_existing:
                for agent in existing:
                    yield pb.AgentEvent(state=_state_out(agent.state), reason="snapshot", agent=agent_out(agent))
        async for message in self.stream(context, self.hub, subscribe, first, event_out):
            yield message

    async def TakeJobs(self, request: pb.TakeJobsRequest, context) -> AsyncIterator[pb.TransferJob]:
        hub = self.worker.hub_for(self.desk)

        def subscribe(principal: Principal):
            take_jobs_dtn(self.registry.topology, request.dtn)
            pending = self.desk.jobs_for(principal, request.dtn, self.auth.bound_dtn(principal))
            wanted = request.dtn
            return hub.subscribe(lambda e: isinstance(e, JobOffer) and e.job.dtn == wanted, jobs_topic(wanted)), pending
        async for message in self.stream(context, hub, subscribe, lambda pending: (job_out(job) for job in pending),
                                         lambda offer: job_out(offer.job)):
            yield message

    @rpc
    def ReportTransfer(self, request: pb.TransferReport, context, principal: Principal):
        bound = self.auth.bound_dtn(principal)
        name_in(request.transfer, "transfer", required=True)
        name_in(request.dtn, "dtn", required=True)
        role = role_in(request.role)
        which = request.WhichOneof("what")
        if request.HasField("final") and which != "outcome":
            raise InvalidArgument("final: only with outcome (the summary report of a side that ended)")
        if which != "listening_port" and request.listening_host:
            raise InvalidArgument("listening_host: only with listening_port")
        desk = self.desk
        if which == "listening_port":
            v.port(request.listening_port, "listening_port")
            v.host(request.listening_host, "listening_host")
            stop, why = self.worker.call(lambda: desk.receiver_ready(
                principal, request.dtn, request.transfer, request.listening_port, request.listening_host, bound))
        elif which == "rate":
            report = rate_in(request.rate, request.transfer)
            stop, why = self.worker.call(lambda: desk.report(principal, request.dtn, request.transfer, role,
                                                             report, bound))
        elif which == "outcome":
            outcome = request.outcome
            _outcome_in(outcome)
            final = rate_in(request.final, request.transfer, "final") if request.HasField("final") else None
            verified = outcome.checksums_verified if outcome.HasField("checksums_verified") else None
            transfer = self.worker.call(lambda: desk.finished(principal, request.dtn, request.transfer, role,
                                                              outcome.ok, outcome.error, verified, final, bound))
            stop, why = True, transfer.reason
        else:
            raise InvalidArgument("give one of listening_port, rate and outcome")
        return pb.ReportTransferResponse(stop=stop, reason=why)
