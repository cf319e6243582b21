"""The DTN agent's link to the controller: register with this host's facts, then heartbeat.

    run_agent("controller.sc:50051", "caltech-a-dtn1", token)   # until SIGINT or SIGTERM

The agent registers (reading the host facts afresh each time), then sends a heartbeat every
`heartbeat_interval` seconds. While the controller cannot be reached it retries with backoff;
when a heartbeat answers NOT_FOUND (the controller restarted and forgot it) it registers again.
A refusal (bad token, wrong role, a DTN the topology does not have) ends it with `ApiError`.
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

import grpc

from dtn_agent.host import HostFacts, read_host_facts
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


def facts_message(facts: HostFacts) -> pb.HostFacts:
    """The `HostFacts` message of what `read_host_facts` found."""
    message = pb.HostFacts(cpus=facts.cpus_online, hostname=facts.hostname or "", agent_version=agent_version(),
                           numa_nodes=[pb.NumaNode(node=n, cpus=c) for n, c in sorted(facts.numa_nodes.items())],
                           rdma_devices=[pb.AgentRdmaDevice(name=d.name, netdevs=d.netdevs) for d in facts.rdma])
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
              tls_ca: bytes | None = None) -> None:
    """Register as the agent of `dtn` on `controller` (HOST:PORT) and heartbeat until `stop` is set
    (default: until SIGINT or SIGTERM). Raises `ApiError` when the controller refuses the agent."""
    if not heartbeat_interval > 0:
        raise ValueError(f"heartbeat interval: must be positive, got {heartbeat_interval}")
    stop = stop or threading.Event()
    with _stop_on_signals(stop), TsdnClient(controller, token=token, timeout=timeout, retries=0,
                                            tls_ca=tls_ca) as client:
        registered = False
        failures = 0
        while not stop.is_set():
            try:
                if registered:
                    client.heartbeat(dtn)
                else:
                    agent = client.register_agent(dtn, facts_message(read_host_facts(root)))
                    log.info("registered as %s on %s (%d NICs)", agent.name, controller, len(agent.facts.nics))
                    registered = True
                if failures:
                    log.info("controller %s answers again", controller)
                failures = 0
                wait = heartbeat_interval
            except ApiError as error:
                if error.code in FATAL:
                    raise
                if error.code is grpc.StatusCode.NOT_FOUND:  # the controller forgot us: it restarted
                    log.info("controller %s does not know this agent (restarted?): registering again", controller)
                    registered = False
                    wait = 0.0
                else:
                    failures += 1
                    wait = min(heartbeat_interval, FIRST_BACKOFF * 2 ** (failures - 1)) * random.uniform(0.75, 1.0)
                    log.warning("controller %s: %s; retrying in %.1f s", controller, error, wait)
            stop.wait(wait)
        log.info("agent of %s stopping", dtn)
