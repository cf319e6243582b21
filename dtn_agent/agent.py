"""The DTN agent's link to the controller: register with this host's facts, then heartbeat.

    run_agent("controller.sc:50051", "caltech-a-dtn1", token)   # until SIGINT or SIGTERM

The agent registers (reading the host facts afresh each time), then sends a heartbeat every
`heartbeat_interval` seconds. While the controller cannot be reached it retries with backoff;
when a heartbeat answers NOT_FOUND (the controller restarted and forgot it) it registers again.
A refusal (bad token, wrong role, a DTN the topology does not have) ends it with `ApiError`.

Once registered, the agent also takes the transfer jobs the controller hands to its DTN and runs
them (`dtn_agent.jobs.JobRunner`), pinned to the data NIC's CPUs; stopping the agent cancels the
transfers still running, which are reported as failed ("agent stopping"). A controller restart
stops nothing: the transfers run on, and their reports reach the restarted controller, which
stored them, as soon as it answers (see `dtn_agent.jobs`).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import random
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from dtn_agent.host import HostFacts, Nic, read_host_facts
from dtn_agent.jobs import AGENT_STOPPING, JobOptions, JobRunner
from northbound.client import ApiError, TsdnClient
from northbound.proto.tsdn.v1 import agent_pb2 as pb

log = logging.getLogger(__name__)
FIRST_BACKOFF = 0.5  # seconds after the first failure; doubles up to the heartbeat interval
FATAL = {grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT,
         grpc.StatusCode.UNIMPLEMENTED}


def agent_version() -> str:
    """This agent's version, as installed."""
    try:
        return f"tsdn-agent {importlib.metadata.version('tsdn')}"
    except importlib.metadata.PackageNotFoundError:
        return "tsdn-agent unknown"


def data_nic(facts: HostFacts, name: str | None = None) -> Nic | None:
    """The NIC that carries transfers: the one called `name` (InvalidArgument naming the NICs there
    are when absent), else the one of highest known capacity (as the controller chooses), else None."""
    if name:
        return facts.nic(name)
    known = [nic for nic in facts.nics if nic.capacity_bps is not None]
    return max(known, key=lambda nic: nic.capacity_bps or 0, default=None)


def facts_message(facts: HostFacts, nic: str | None = None) -> pb.HostFacts:
    """The `HostFacts` message of what `read_host_facts` found; `data_nic` is `nic` (see `data_nic`)."""
    chosen = data_nic(facts, nic)
    message = pb.HostFacts(cpus=facts.cpus_online, hostname=facts.hostname or "", agent_version=agent_version(),
                           numa_nodes=[pb.NumaNode(node=n, cpus=c) for n, c in sorted(facts.numa_nodes.items())],
                           rdma_devices=[pb.AgentRdmaDevice(name=d.name, netdevs=d.netdevs) for d in facts.rdma],
                           data_nic=chosen.name if chosen is not None else "")
    for nic in facts.nics:
        entry = pb.AgentNic(name=nic.name, local_cpus=nic.local_cpus, limit=nic.limit, warnings=nic.warnings)
        if nic.pcie is not None and nic.pcie.usable_bps is not None:
            entry.pcie_usable_bps = nic.pcie.usable_bps
        for field in ("speed_bps", "mtu", "numa_node", "capacity_bps"):
            if (value := getattr(nic, field)) is not None:
                setattr(entry, field, value)
        message.nics.append(entry)
    return message


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set `stop` on SIGINT and SIGTERM while inside (main thread only; elsewhere, do nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_agent(controller: str, dtn: str, token: str | None, root: str | os.PathLike = "/",
              heartbeat_interval: float = 5.0, *, stop: threading.Event | None = None, timeout: float = 10.0,
              tls_ca: bytes | None = None, nic: str | None = None, fdt_jar: str | Path | None = None,
              listen: str = "0.0.0.0", advertise: str = "") -> None:
    """Register as the agent of `dtn` on `controller` (HOST:PORT), heartbeat and run the transfer
    jobs handed to it until `stop` is set (default: until SIGINT or SIGTERM). Raises `ApiError`
    when the controller refuses the agent, InvalidArgument when this host has no NIC `nic`.

    `nic`: the data NIC (default: the one of highest capacity); transfers are pinned to its CPUs
    when its NUMA node is known. `fdt_jar`: fdt.jar for the fdt engine. `listen`: the address
    receivers listen on. `advertise`: the address sent with a receiver's port, which a controller
    that controls no switches gives the sender (empty: the controller uses the topology's)."""
    if not heartbeat_interval > 0:
        raise ValueError(f"heartbeat interval: must be positive, got {heartbeat_interval}")
    stop = stop or threading.Event()
    data_nic(read_host_facts(root), nic)  # a NIC that is not there fails now, not at registration
    runner: JobRunner | None = None
    with _stop_on_signals(stop), TsdnClient(controller, token=token, timeout=timeout, retries=0,
                                            tls_ca=tls_ca) as client:
        try:
            registered = False
            failures = 0
            while not stop.is_set():
                try:
                    if registered:
                        client.heartbeat(dtn)
                    else:
                        facts = read_host_facts(root)
                        agent = client.register_agent(dtn, facts_message(facts, nic))
                        log.info("registered as %s on %s (%d NICs, data NIC %s)", agent.name, controller,
                                 len(agent.facts.nics), agent.facts.data_nic or "unknown")
                        registered = True
                        if runner is None:
                            runner = JobRunner(client, dtn, JobOptions(fdt_jar=fdt_jar, data_nic=data_nic(facts, nic),
                                                                       listen=listen, advertise=advertise)).start()
                    if failures:
                        log.info("controller %s answers again", controller)
                    failures = 0
                    wait = heartbeat_interval
                except ApiError as error:
                    if error.code in FATAL:
                        raise
                    if error.code is grpc.StatusCode.NOT_FOUND:  # the controller forgot us: it restarted
                        log.info("controller %s does not know this agent (restarted?): registering again",
                                 controller)
                        registered = False
                        wait = 0.0
                    else:
                        failures += 1
                        wait = min(heartbeat_interval, FIRST_BACKOFF * 2 ** (failures - 1)) * random.uniform(0.75,
                                                                                                              1.0)
                        log.warning("controller %s: %s; retrying in %.1f s", controller, error, wait)
                stop.wait(wait)
            log.info("agent of %s stopping", dtn)
        finally:
            if runner is not None:
                runner.stop(AGENT_STOPPING, timeout=timeout)
    if runner is not None:  # the client is closed: the job stream has ended
        runner.join(timeout)
