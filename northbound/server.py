"""The controller process's northbound side: core worker + gRPC server with health and reflection."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from northbound.agent_servicer import AgentServicer
from northbound.auth import Authenticator, is_loopback
from northbound.proto.tsdn.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    bandwidth_pb2,
    bandwidth_pb2_grpc,
    topology_pb2,
    topology_pb2_grpc,
    transfer_pb2,
    transfer_pb2_grpc,
)
from northbound.servicers import BandwidthServicer, TopologyServicer
from northbound.transfers import TransferServicer
from sdn_app.core.agents import DEFAULT_HEARTBEAT_TIMEOUT, AgentRegistry
from sdn_app.core.clock import Clock, SystemClock
from sdn_app.core.errors import FailedPrecondition, InvalidArgument
from sdn_app.core.ledger import Ledger
from sdn_app.core.reservations import Principal, ReservationBook, Role
from sdn_app.core.topology import Topology
from sdn_app.core.transfers import TransferDesk
from sdn_app.worker import CoreWorker

log = logging.getLogger(__name__)
SERVICES = (
    bandwidth_pb2.DESCRIPTOR.services_by_name["BandwidthService"].full_name,
    topology_pb2.DESCRIPTOR.services_by_name["TopologyService"].full_name,
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    transfer_pb2.DESCRIPTOR.services_by_name["TransferService"].full_name,
)
RPC_THREADS = 64  # each open WatchReservations stream holds one


@dataclass
class ControllerConfig:
    """What `tsdn controller` is started with."""

    topology: Path
    listen_grpc: str = "127.0.0.1:50051"
    also_listen: tuple[str, ...] = ()  # more gRPC addresses (HOST:PORT or unix:PATH), e.g. for agents in Mininet
    state: Path = Path("tsdn.db")
    tokens: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_ca: Path | None = None
    listen_openflow: str | None = None  # None: no switches, reservations are booked in the ledger only
    emulation_scale: float = 1.0  # meters carry nominal rate x scale (Mininet); 1 on real switches
    agent_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT  # seconds without a heartbeat before an agent is LOST
    listen_http: str | None = None  # live map + /metrics (HOST:PORT; `tsdn controller` defaults to 127.0.0.1:8080)
    http_required: bool = True  # False: a busy listen_http is a warning (the CLI's default address), not an error
    clock: Clock = field(default_factory=SystemClock)


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"{what} {path}: {exc.strerror or exc}") from None


def _credentials(config: ControllerConfig) -> grpc.ServerCredentials | None:
    if (config.tls_cert is None) != (config.tls_key is None):
        raise InvalidArgument("--tls-cert and --tls-key go together")
    if config.tls_cert is None:
        if config.client_ca is not None:
            raise InvalidArgument("--client-ca needs --tls-cert and --tls-key")
        return None
    assert config.tls_key is not None
    pair = (_read(config.tls_key, "--tls-key"), _read(config.tls_cert, "--tls-cert"))
    client_ca = _read(config.client_ca, "--client-ca") if config.client_ca else None
    try:
        return grpc.ssl_server_credentials([pair], root_certificates=client_ca, require_client_auth=bool(client_ca))
    except (ValueError, RuntimeError) as exc:
        raise InvalidArgument(f"--tls-cert/--tls-key: not a usable PEM certificate and key: {exc}") from None


def _host_port(address: str, option: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument(f"{option} {address}: expected HOST:PORT, e.g. 127.0.0.1:6653")
    return host.strip("[]"), int(port)


class Controller:
    """A running controller: the reservation book on its worker thread, served over gRPC."""

    def __init__(self, config: ControllerConfig):
        """Load everything and bind the port; nothing is served until `start`."""
        self.config = config
        if config.tokens is None:
            for option, address in (("--listen-grpc", config.listen_grpc),
                                    *(("--also-listen", a) for a in config.also_listen)):
                if not is_loopback(address):
                    raise InvalidArgument(f"{option} {address}: without --tokens the API is open to every caller, "
                                          "which is allowed only on a loopback address or a unix: socket")
            self.auth = Authenticator(None)
        else:
            self.auth = Authenticator.from_file(config.tokens)
        credentials = _credentials(config)
        if not 0 < config.emulation_scale <= 1:
            raise InvalidArgument(f"--emulation-scale: must be in (0, 1], got {config.emulation_scale}")
        self.topology = Topology.load(config.topology)
        self.agents = AgentRegistry(self.topology, config.clock, config.agent_timeout, config.emulation_scale)
        for principal, dtn in sorted(self.auth.agent_dtns.items()):
            if dtn not in self.topology.dtns:
                raise InvalidArgument(f"{config.tokens}: agent {principal}: dtn {dtn!r} is not a DTN of "
                                      f"topology {self.topology.name}")
        self.ledger = Ledger(self.topology.capacities(), config.state, config.clock)
        self.fabric = None
        try:
            self.book = ReservationBook(self.topology, self.ledger, config.clock,
                                        provisioning=config.listen_openflow is not None)
            self.book.host_limits = self.agents.host_limit
            # The transfers stored with the reservations: the running ones are picked up.
            self.transfers = TransferDesk(self.book, self.agents, config.clock, config.emulation_scale)
            live = [t for t in self.transfers.list(Principal("tsdn", Role.ADMIN)) if not t.state.ended]
            if live:
                log.info("%s: %d live transfer(s) picked up: %s", config.state, len(live),
                         ", ".join(f"{t.name} {t.state}" for t in live))
            if config.listen_openflow is not None:
                from sdn_app.openflow.fabric import start_openflow  # os-ken only when switches are controlled

                host, port = _host_port(config.listen_openflow, "--listen-openflow")
                self.fabric = start_openflow(self.topology, host, port, config.emulation_scale)
        except BaseException:
            self.ledger.close()
            raise
        self.worker = CoreWorker(self.book, self.fabric, tickers=(self.agents, self.transfers))
        # --- live map and /metrics (sdn_app/web) ---
        self.web = None
        if config.listen_http is not None:
            self.web = self._web_server(config.listen_http)
        # --- end live map ---
        self.health = health.HealthServicer()
        self.server = grpc.server(ThreadPoolExecutor(max_workers=RPC_THREADS, thread_name_prefix="grpc"),
                                  options=[("grpc.so_reuseport", 0)])
        bandwidth_pb2_grpc.add_BandwidthServiceServicer_to_server(BandwidthServicer(self.worker, self.auth),
                                                                  self.server)
        topology_pb2_grpc.add_TopologyServiceServicer_to_server(TopologyServicer(self.worker, self.auth, self.fabric),
                                                                self.server)
        agent_pb2_grpc.add_AgentServiceServicer_to_server(
            AgentServicer(self.worker, self.auth, self.agents, self.transfers), self.server)
        transfer_pb2_grpc.add_TransferServiceServicer_to_server(
            TransferServicer(self.worker, self.auth, self.transfers), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (*SERVICES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.server,
        )
        self.port = 0
        for address in (config.listen_grpc, *config.also_listen):
            try:
                port = (self.server.add_insecure_port(address) if credentials is None
                        else self.server.add_secure_port(address, credentials))
            except RuntimeError as exc:
                self.ledger.close()
                raise FailedPrecondition(f"gRPC address {address}: cannot listen there ({exc})") from None
            if not port:
                self.ledger.close()
                raise FailedPrecondition(f"gRPC address {address}: cannot listen there (in use?)")
            self.port = self.port or port

    def _web_server(self, address: str):
        """The read-only HTTP server of the live map and /metrics, bound (served from `start`)."""
        from sdn_app.web import LiveMap, WebServer

        host, port = _host_port(address, "--listen-http")
        live = LiveMap(self.worker, self.topology, self.fabric, self.config.emulation_scale)
        try:
            web = WebServer(live, (host, port))
        except OSError as exc:
            if not self.config.http_required:
                log.warning("no live map: cannot listen on %s (%s); give --listen-http another address",
                            address, exc.strerror or exc)
                return None
            self.ledger.close()
            if self.fabric is not None:
                self.fabric.stop()
            raise FailedPrecondition(f"--listen-http {address}: cannot listen there ({exc.strerror or exc})") from None
        if not is_loopback(address):
            log.warning("the live map and /metrics on %s are read-only but visible to anyone who can reach "
                        "that address (no authentication)", web.address)
        return web

    @property
    def http_address(self) -> str | None:
        """`host:port` of the live map, when served."""
        return self.web.address if self.web is not None else None

    @property
    def address(self) -> str:
        """`host:port` actually bound (the port is chosen by the OS when 0 was asked for)."""
        return f"{self.config.listen_grpc.rsplit(':', 1)[0]}:{self.port}"

    def start(self) -> None:
        """Start the core worker and serve; links the switches report down or up move reservations."""
        self.worker.start()
        if self.fabric is not None:
            book, worker = self.book, self.worker
            self.fabric.link_listener = lambda link, up, reason: worker.submit(book.set_link_state, link, up, reason)
        self.server.start()
        if self.web is not None:  # live map
            self.web.start()
            log.info("live map on http://%s/ (Prometheus metrics at /metrics)", self.web.address)
        for service in ("", *SERVICES):
            self.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        if self.auth.development_mode:
            log.warning("DEVELOPMENT MODE: no --tokens file, so every caller on %s is the admin 'dev'. "
                        "Give --tokens before anyone else can reach this port.", self.address)
        log.info("tsdn controller: topology %s, state %s, gRPC on %s%s", self.topology.summary(), self.config.state,
                 self.address, " (TLS)" if self.config.tls_cert else "")

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving (in-flight calls get `grace` seconds), stop the worker, close the database."""
        self.health.enter_graceful_shutdown()
        self.worker.close_watchers()
        self.server.stop(grace).wait(grace + 1)
        if self.web is not None:  # live map
            self.web.stop()
        self.worker.stop()
        if self.fabric is not None:
            self.fabric.stop()
        self.ledger.close()
