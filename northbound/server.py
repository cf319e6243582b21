"""The controller process's northbound side: core worker + gRPC server with health and reflection."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from northbound.agent_servicer import AgentServicer
from northbound.auth import Authenticator, is_loopback, plaintext_token_addresses
from northbound.loop import LoopThread
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
from northbound.streams import (
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_STREAMS_PER_PRINCIPAL,
    StreamGate,
    StreamLimits,
    StreamSlots,
)
from northbound.transfers import TransferServicer
from sdn_app.core.advisor import RateAdvisor
from sdn_app.core.agents import DEFAULT_HEARTBEAT_TIMEOUT, AgentRegistry
from sdn_app.core.clock import Clock, SystemClock
from sdn_app.core.congestion import ReroutePolicy
from sdn_app.core.errors import FailedPrecondition, InvalidArgument
from sdn_app.core.ledger import Ledger
from sdn_app.core.replication import Replica
from sdn_app.core.reservations import DEFAULT_KEEP_ENDED, Principal, ReservationBook, Role, Sweeper
from sdn_app.core.topology import Topology
from sdn_app.core.transfers import TransferDesk
from sdn_app.core.utilization import DirectionLoad
from sdn_app.worker import CoreWorker

log = logging.getLogger(__name__)
LOAD_INTERVAL = 1.0  # seconds between rounds of measured link loads into the book (the switches are polled as often)
SERVICES = (
    bandwidth_pb2.DESCRIPTOR.services_by_name["BandwidthService"].full_name,
    topology_pb2.DESCRIPTOR.services_by_name["TopologyService"].full_name,
    agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name,
    transfer_pb2.DESCRIPTOR.services_by_name["TransferService"].full_name,
)
# gRPC runs on asyncio (northbound/loop.py): streams wait there without holding a thread, and a unary
# call's body runs as one job on the core worker (servicers.rpc). This pool only runs the bodies kept
# off the core thread (`@rpc(on_core=False)`: GetTopologyStatus, ListReservations).
RPC_THREADS = 16


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
    allow_plaintext_tokens: bool = False  # serve --tokens without TLS beyond loopback (warned about loudly)
    keep_ended: float = DEFAULT_KEEP_ENDED  # seconds an ended reservation stays in memory (inf: for good)
    max_streams: int = DEFAULT_MAX_STREAMS  # server streams (Watch*, TakeJobs, ...) open at once, in total
    max_streams_per_principal: int = DEFAULT_MAX_STREAMS_PER_PRINCIPAL  # ... and per principal
    reroute: ReroutePolicy = field(default_factory=ReroutePolicy)  # when and where rates move reservations
    clock: Clock = field(default_factory=SystemClock)
    store: str | None = None  # etcd://HOST:PORT[,...]: state shared by several controllers (northbound/ha.py)
    lease_ttl: int = 2  # seconds of the leader's etcd lease (with `store`)
    advertise: str | None = None  # the gRPC address followers send clients to (default: listen_grpc)


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
    _check_tls(config.tls_cert, pair[1], config.tls_key, pair[0], config.client_ca, client_ca)
    try:
        return grpc.ssl_server_credentials([pair], root_certificates=client_ca, require_client_auth=bool(client_ca))
    except (ValueError, RuntimeError) as exc:
        raise InvalidArgument(f"--tls-cert/--tls-key: not a usable PEM certificate and key: {exc}") from None


def _check_tls(cert_path: Path, cert: bytes, key_path: Path, key: bytes, ca_path: Path | None,
               ca: bytes | None) -> None:
    """InvalidArgument naming the file and what is wrong with it, for TLS material gRPC would take
    and then fail to listen with ("Failed to bind"): a certificate or key that is not PEM, an
    encrypted key, a key that does not match the certificate, a client CA with no certificate."""
    if b"-----BEGIN CERTIFICATE-----" not in cert:
        raise InvalidArgument(f"--tls-cert {cert_path}: not a PEM certificate (no -----BEGIN CERTIFICATE----- line)")
    if b"PRIVATE KEY-----" not in key:
        raise InvalidArgument(f"--tls-key {key_path}: not a PEM private key (no -----BEGIN ... PRIVATE KEY----- line)")
    if b"ENCRYPTED" in key:
        raise InvalidArgument(f"--tls-key {key_path}: the key is encrypted; gRPC cannot ask for its passphrase, "
                              "give it unencrypted (openssl pkey -in KEY -out KEY.plain) and chmod 600")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_verify_locations(cadata=cert.decode("ascii", errors="replace"))
    except ssl.SSLError as exc:
        raise InvalidArgument(f"--tls-cert {cert_path}: the certificate cannot be read: damaged, or not X.509 "
                              f"(OpenSSL: {_ssl_reason(exc)})") from None

    def no_passphrase() -> bytes:
        raise InvalidArgument(f"--tls-key {key_path}: the key is encrypted; give it unencrypted")
    try:
        context.load_cert_chain(cert_path, key_path, password=no_passphrase)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise InvalidArgument(f"--tls-key {key_path}: does not match the certificate in --tls-cert {cert_path} "
                                  "(they are not one key pair)") from None
        raise InvalidArgument(f"--tls-key {key_path}: the private key cannot be read: damaged, or of a kind "
                              f"OpenSSL does not know (OpenSSL: {_ssl_reason(exc)})") from None
    except OSError as exc:
        raise InvalidArgument(f"--tls-cert {cert_path} / --tls-key {key_path}: {exc.strerror or exc}") from None
    if ca is not None:
        if b"-----BEGIN CERTIFICATE-----" not in ca:
            raise InvalidArgument(f"--client-ca {ca_path}: not a PEM CA certificate "
                                  "(no -----BEGIN CERTIFICATE----- line)")
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
        except ssl.SSLError as exc:
            raise InvalidArgument(f"--client-ca {ca_path}: the CA certificate cannot be read: damaged, or not X.509 "
                                  f"(OpenSSL: {_ssl_reason(exc)})") from None


def _ssl_reason(error: ssl.SSLError) -> str:
    """What OpenSSL found, in words (its reason code, or its message without the source line)."""
    if error.reason:
        return error.reason.replace("_", " ").lower()
    return str(error.args[1] if len(error.args) > 1 else error).split(" (_ssl.c")[0]


def _host_port(address: str, option: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument(f"{option} {address}: expected HOST:PORT, e.g. 127.0.0.1:6653")
    return host.strip("[]"), int(port)


class LoadFeed:
    """The switches' measured link loads into the book every `LOAD_INTERVAL` s (a ticker of the core
    worker, so on its thread); each congestion verdict that changes is logged."""

    def __init__(self, book: ReservationBook, measure: Callable[[], Mapping[str, DirectionLoad]]):
        self.book = book
        self.measure = measure
        self._next = book.clock.now()

    def tick(self) -> None:
        """Feed one round of loads."""
        self._next = self.book.clock.now() + LOAD_INTERVAL
        for condition in self.book.observe_loads(self.measure()):
            if condition.congested:
                log.warning("link direction congested: %s", condition.describe())
            else:
                log.info("link direction clear again: %s", condition.describe())

    def next_deadline(self) -> float:
        return self._next

    def take_events(self) -> list:
        return []


def api_access(config: ControllerConfig) -> tuple[Authenticator, grpc.ServerCredentials | None, list[str]]:
    """Who may call the API and how it is served: the authenticator, the TLS credentials (None:
    plaintext) and the addresses where tokens would cross in plaintext; `InvalidArgument` for an
    open API beyond loopback or plaintext tokens not allowed."""
    if config.tokens is None:
        for option, address in (("--listen-grpc", config.listen_grpc),
                                *(("--also-listen", a) for a in config.also_listen)):
            if not is_loopback(address):
                raise InvalidArgument(f"{option} {address}: without --tokens the API is open to every caller, "
                                      "which is allowed only on a loopback address or a unix: socket")
        auth = Authenticator(None)
    else:
        auth = Authenticator.from_file(config.tokens)
    credentials = _credentials(config)
    plaintext = plaintext_token_addresses((config.listen_grpc, *config.also_listen),
                                          tokens=config.tokens is not None, tls=credentials is not None)
    if plaintext and not config.allow_plaintext_tokens:
        option = "--listen-grpc" if plaintext[0] == config.listen_grpc else "--also-listen"
        raise InvalidArgument(
            f"{option} {plaintext[0]}: bearer tokens would cross the network in plaintext there, "
            "where anyone on the path can read and reuse them. Serve TLS (--tls-cert and --tls-key), or, "
            "on a network you trust, say so with --allow-plaintext-tokens")
    return auth, credentials, plaintext


def bind(loop: LoopThread, server: grpc.aio.Server, config: ControllerConfig,
         credentials: grpc.ServerCredentials | None) -> int:
    """Bind `server` to `--listen-grpc` and every `--also-listen`; the port of the first (chosen by
    the OS for port 0). `FailedPrecondition` naming an address that cannot be listened on."""
    first = 0
    for address in (config.listen_grpc, *config.also_listen):
        try:
            port = (loop.call(server.add_insecure_port, address) if credentials is None
                    else loop.call(server.add_secure_port, address, credentials))
        except RuntimeError as exc:
            raise FailedPrecondition(f"gRPC address {address}: cannot listen there ({exc})") from None
        if not port:
            raise FailedPrecondition(f"gRPC address {address}: cannot listen there (in use?)")
        first = first or port
    return first


class Controller:
    """A running controller: the reservation book on its worker thread, served over gRPC."""

    def __init__(self, config: ControllerConfig, *, replica: Replica | None = None, fabric: Any = None,
                 before_bind: Callable[[], None] = lambda: None):
        """Load everything and bind the port; nothing is served until `start`.

        With `replica` (an elected leader, northbound/ha.py) the state is the replica's, not
        `config.state`'s; a given `fabric` (already connected to the switches, MASTER) is used
        instead of starting one, and left running by `stop`. `before_bind` runs just before the
        gRPC addresses are bound (the follower's server lets them go then).
        """
        self.config = config
        self._own_fabric = fabric is None
        self.auth, credentials, self.plaintext_tokens = api_access(config)
        if not 0 < config.emulation_scale <= 1:
            raise InvalidArgument(f"--emulation-scale: must be in (0, 1], got {config.emulation_scale}")
        self.streams = StreamSlots(StreamLimits(config.max_streams, config.max_streams_per_principal))
        self.topology = Topology.load(config.topology)
        for warning in self.topology.unreachable_dtn_warnings():  # as `tsdn topo validate` says
            log.warning("%s: %s", config.topology, warning)
        for principal, dtn in sorted(self.auth.agent_dtns.items()):
            if dtn not in self.topology.dtns:
                raise InvalidArgument(f"{config.tokens}: agent {principal}: dtn {dtn!r} is not a DTN of "
                                      f"topology {self.topology.name}")
        # exclusive: one controller per state file; a second one refuses, naming this one
        self.ledger = Ledger(self.topology.capacities(), config.state, config.clock, exclusive=True, replica=replica)
        self.fabric = fabric
        try:
            self.agents = AgentRegistry(self.topology, config.clock, config.agent_timeout, config.emulation_scale,
                                        store=self.ledger)
            self.book = ReservationBook(self.topology, self.ledger, config.clock,
                                        provisioning=config.listen_openflow is not None,
                                        advisor=RateAdvisor(config.reroute), keep_ended=config.keep_ended)
            for repair in self.book.repairs:  # bookings that no longer fit the topology: never silently
                log.warning("%s: %s %s: %s", config.state, repair.reservation, repair.action, repair.reason)
            self.book.host_limits = self.agents.host_limit
            # The transfers stored with the reservations: the running ones are picked up.
            self.transfers = TransferDesk(self.book, self.agents, config.clock, config.emulation_scale)
            self.ledger.flush()  # what loading repaired, stored before anything is served (with a replica)
            live = [t for t in self.transfers.list(Principal("tsdn", Role.ADMIN)) if not t.state.ended]
            if live:
                log.info("%s: %d live transfer(s) picked up: %s", self.ledger.path, len(live),
                         ", ".join(f"{t.name} {t.state}" for t in live))
            if config.listen_openflow is not None and self.fabric is None:
                from sdn_app.openflow.fabric import start_openflow  # os-ken only when switches are controlled

                host, port = _host_port(config.listen_openflow, "--listen-openflow")
                self.fabric = start_openflow(self.topology, host, port, config.emulation_scale)
        except BaseException:
            self.ledger.close()
            raise
        tickers: tuple = (self.agents, self.transfers, Sweeper(self.book))
        if self.fabric is not None:
            tickers += (LoadFeed(self.book, self.fabric.utilization),)
        self.worker = CoreWorker(self.book, self.fabric, tickers=tickers)
        # --- live map and /metrics (sdn_app/web) ---
        self.web = None
        if config.listen_http is not None:
            self.web = self._web_server(config.listen_http)
        # --- end live map ---
        # gRPC on asyncio, on a loop thread of its own: however many streams are open, they hold no
        # thread, and unary calls never queue behind them (see RPC_THREADS).
        before_bind()
        self.loop = LoopThread("tsdn-grpc")
        try:
            self.health, self.server = self.loop.run(self._grpc_server())
            self.port = bind(self.loop, self.server, config, credentials)
        except BaseException:
            self.loop.close()
            self.ledger.close()
            raise

    async def _grpc_server(self) -> tuple[health.aio.HealthServicer, grpc.aio.Server]:
        """The asyncio gRPC server with every service, health and reflection (on the loop: it binds to it)."""
        self._pool = ThreadPoolExecutor(max_workers=RPC_THREADS, thread_name_prefix="grpc")
        asyncio.get_running_loop().set_default_executor(self._pool)  # for the few unary calls kept off the core
        server = grpc.aio.server(migration_thread_pool=self._pool, options=[("grpc.so_reuseport", 0)],
                                 interceptors=[StreamGate(self.auth, self.streams)])
        bandwidth_pb2_grpc.add_BandwidthServiceServicer_to_server(BandwidthServicer(self.worker, self.auth), server)
        topology_pb2_grpc.add_TopologyServiceServicer_to_server(TopologyServicer(self.worker, self.auth, self.fabric),
                                                                server)
        agent_pb2_grpc.add_AgentServiceServicer_to_server(
            AgentServicer(self.worker, self.auth, self.agents, self.transfers), server)
        transfer_pb2_grpc.add_TransferServiceServicer_to_server(
            TransferServicer(self.worker, self.auth, self.transfers), server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (*SERVICES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server)
        return health_servicer, server

    def _web_server(self, address: str):
        """The read-only HTTP server of the live map and /metrics, bound (served from `start`)."""
        from sdn_app.web import LiveMap, WebServer

        host, port = _host_port(address, "--listen-http")
        live = LiveMap(self.worker, self.topology, self.fabric, self.config.emulation_scale)
        live.metrics.set_ledger_repairs(self.book.ledger_repairs)  # all made while loading, before this
        try:
            web = WebServer(live, (host, port))
        except OSError as exc:
            if not self.config.http_required:
                log.warning("no live map: cannot listen on %s (%s); give --listen-http another address",
                            address, exc.strerror or exc)
                return None
            self.ledger.close()
            if self.fabric is not None and self._own_fabric:
                self.fabric.stop()
            raise FailedPrecondition(f"--listen-http {address}: cannot listen there ({exc.strerror or exc})") from None
        if not is_loopback(address):
            log.warning("the live map and /metrics on %s are read-only but visible to anyone who can reach "
                        "that address (no authentication)", web.address)
        return web

    @property
    def plaintext_warning(self) -> str | None:
        """What to warn of when --allow-plaintext-tokens let tokens cross a network in plaintext (None: nowhere)."""
        if not self.plaintext_tokens:
            return None
        return (f"PLAINTEXT TOKENS: bearer tokens reach {', '.join(self.plaintext_tokens)} without TLS "
                "(--allow-plaintext-tokens): anyone on the path can read and reuse them. Serve TLS "
                "(--tls-cert and --tls-key) unless every network between callers and this controller is trusted.")

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
        self.loop.run(self.server.start())
        if self.web is not None:  # live map
            self.web.start()
            log.info("live map on http://%s/ (Prometheus metrics at /metrics)", self.web.address)
        for service in ("", *SERVICES):
            self.loop.run(self.health.set(service, health_pb2.HealthCheckResponse.SERVING))
        if self.auth.development_mode:
            log.warning("DEVELOPMENT MODE: no --tokens file, so every caller on %s is the admin 'dev'. "
                        "Give --tokens before anyone else can reach this port.", self.address)
        if self.plaintext_warning is not None:
            log.warning("%s", self.plaintext_warning)
        log.info("tsdn controller: topology %s, state %s, gRPC on %s%s", self.topology.summary(), self.ledger.path,
                 self.address, " (TLS)" if self.config.tls_cert else "")

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving (in-flight calls get `grace` seconds), stop the worker, close the database."""
        if self.loop.running:
            self.loop.run(self.health.enter_graceful_shutdown())
            self.worker.close_watchers()
            self.loop.run(self.server.stop(grace), timeout=grace + 5)
            self.loop.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self.web is not None:  # live map
            self.web.stop()
        self.worker.stop()
        if self.fabric is not None and self._own_fabric:
            self.fabric.stop()
        self.ledger.close()
