"""One running controller: the core (reservation book, ledger, agents, transfers) on its worker
thread, its store, the OpenFlow fabric, the gRPC API and the live map, wired together."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2

from northbound.auth import is_loopback
from northbound.loop import LoopThread
from northbound.server import SERVICES, api_access, api_server, bind, host_port, http_ssl_context
from northbound.streams import DEFAULT_MAX_STREAMS, DEFAULT_MAX_STREAMS_PER_PRINCIPAL, StreamLimits, StreamSlots
from sdn_app.core.agents import DEFAULT_HEARTBEAT_TIMEOUT, AgentRegistry
from sdn_app.core.clock import Clock, SystemClock
from sdn_app.core.errors import FailedPrecondition, InvalidArgument
from sdn_app.core.installs import LABELS
from sdn_app.core.labels import DEFAULT_GRACE, DEFAULT_LABELS
from sdn_app.core.ledger import Ledger
from sdn_app.core.ledger_repair import repair_counts
from sdn_app.core.plans import DEFAULT_MAX_METER_ID
from sdn_app.core.replication import Replica
from sdn_app.core.rerouting.advisor import RateAdvisor
from sdn_app.core.rerouting.policy import ReroutePolicy
from sdn_app.core.reservation import Principal, Role
from sdn_app.core.reservations import DEFAULT_HOLD_TIMEOUT, DEFAULT_KEEP_ENDED, ReservationBook, Sweeper
from sdn_app.core.shares import DEFAULT_SHARE_STEP
from sdn_app.core.topology import Topology
from sdn_app.core.transfers import TransferDesk
from sdn_app.core.utilization import DirectionLoad
from sdn_app.core.validation import default_domain, domain_name
from sdn_app.openflow.provisioner import provisioned_worker
from sdn_app.web.alto import AltoApi
from sdn_app.web.api import ApiContext, HttpApi
from sdn_app.web.api import StreamSlots as WebStreamSlots
from sdn_app.web.live import LiveMap
from sdn_app.web.nsi import NsiApi
from sdn_app.web.sense import SenseApi
from sdn_app.web.server import WebLimits, WebServer
from sdn_app.worker import CoreWorker

log = logging.getLogger(__name__)
LOAD_INTERVAL = 1.0  # seconds between rounds of measured link loads into the book (the switches are polled as often)


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
    domain: str | None = None  # the network's DNS-style name (SENSE URNs, NSI); None: from the topology's name
    nsi_timeout: float = 60.0  # seconds a neighbour NSA may take to confirm a WAN segment's step
    web_limits: WebLimits = field(default_factory=WebLimits)  # what the HTTP side takes from its clients
    allow_plaintext_tokens: bool = False  # serve --tokens without TLS beyond loopback (warned about loudly)
    keep_ended: float = DEFAULT_KEEP_ENDED  # seconds an ended reservation stays in memory (inf: for good)
    hold_timeout: float = DEFAULT_HOLD_TIMEOUT  # seconds a two-phase hold waits for its commit
    share_step: float = DEFAULT_SHARE_STEP  # elastic meters change when a share moves more than this x ceiling
    share_solver: str = "filling"  # each round of elastic sharing in closed form, or as an LP by HiGHS ("highs")
    flow_design: str = LABELS  # label-switched paths, or every reservation's flows on every hop ("per-hop")
    path_labels: tuple[int, int] = DEFAULT_LABELS  # the VLAN ids path labels take
    label_grace: float = DEFAULT_GRACE  # seconds an unused path's entries stay (a move back is free)
    max_meters: int = DEFAULT_MAX_METER_ID  # meter ids each switch has (one per reservation direction at its ingress)
    bundles: bool = True  # each switch's part of a decision in one OpenFlow bundle, where the switch takes them
    max_streams: int = DEFAULT_MAX_STREAMS  # server streams (Watch*, TakeJobs, ...) open at once, in total
    max_streams_per_principal: int = DEFAULT_MAX_STREAMS_PER_PRINCIPAL  # ... and per principal
    reroute: ReroutePolicy = field(default_factory=ReroutePolicy)  # when and where rates move reservations
    clock: Clock = field(default_factory=SystemClock)
    store: str | None = None  # etcd://HOST:PORT[,...]: state shared by several controllers (tsdn/ha_controller.py)
    lease_ttl: int = 2  # seconds of the leader's etcd lease (with `store`)
    advertise: str | None = None  # the gRPC address followers send clients to (default: listen_grpc)


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


class Controller:
    """A running controller: the reservation book on its worker thread, served over gRPC."""

    def __init__(self, config: ControllerConfig, *, replica: Replica | None = None, fabric: Any = None,
                 before_bind: Callable[[], None] = lambda: None):
        """Load everything and bind the port; nothing is served until `start`.

        With `replica` (an elected leader, tsdn/ha_controller.py) the state is the replica's, not
        `config.state`'s; a given `fabric` (already connected to the switches, MASTER) is used
        instead of starting one, and left running by `stop`. `before_bind` runs just before the
        gRPC addresses are bound (the follower's server lets them go then).
        """
        self.config = config
        self._own_fabric = fabric is None
        self.auth, credentials, self.plaintext_tokens = api_access(config)
        self.domain = domain_name(config.domain) if config.domain is not None else None
        self.http_tls = http_ssl_context(config) if config.listen_http is not None else None
        self.nsi_client_tls = nsi_client_context(config) if config.listen_http is not None else None
        if (config.listen_http is not None and config.tokens is not None and self.http_tls is None
                and not is_loopback(config.listen_http)):
            if not config.allow_plaintext_tokens:
                raise InvalidArgument(
                    f"--listen-http {config.listen_http}: the SENSE and ALTO APIs there take bearer tokens, which "
                    "would cross the network in plaintext. Serve TLS (--tls-cert and --tls-key), listen on "
                    "loopback, or, on a network you trust, say so with --allow-plaintext-tokens")
            self.plaintext_tokens = [*self.plaintext_tokens, config.listen_http]
        if not 0 < config.emulation_scale <= 1:
            raise InvalidArgument(f"--emulation-scale: must be in (0, 1], got {config.emulation_scale}")
        self.streams = StreamSlots(StreamLimits(config.max_streams, config.max_streams_per_principal))
        self.topology = Topology.load(config.topology)
        self.domain = self.domain or default_domain(self.topology.name)
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
                                        advisor=RateAdvisor(config.reroute), keep_ended=config.keep_ended,
                                        hold_timeout=config.hold_timeout, share_step=config.share_step,
                                        share_solver=config.share_solver, flow_design=config.flow_design,
                                        path_labels=config.path_labels, label_grace=config.label_grace,
                                        max_meters=config.max_meters)
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

                host, port = host_port(config.listen_openflow, "--listen-openflow")
                self.fabric = start_openflow(self.topology, host, port, config.emulation_scale,
                                             bundles=config.bundles)
        except BaseException:
            self.ledger.close()
            raise
        tickers: tuple = (self.agents, self.transfers, Sweeper(self.book))
        if self.fabric is not None:
            tickers += (LoadFeed(self.book, self.fabric.utilization),)
        if self.fabric is not None:  # the book's changes applied to the switches by a provisioner
            self.worker = provisioned_worker(self.book, self.fabric, tickers=tickers)
        else:
            self.worker = CoreWorker(self.book, tickers=tickers)
        # gRPC and the HTTP side on asyncio, on a loop thread of their own: however many streams are
        # open, they hold no thread, and unary calls never queue behind them (see RPC_THREADS).
        before_bind()
        self.loop = LoopThread("tsdn-grpc")
        self.web = None
        try:
            self.health, self.server, self._pool = self.loop.run(
                api_server(self.worker, self.auth, self.streams, self.agents, self.transfers, self.fabric))
            self.port = bind(self.loop, self.server, config, credentials)
            if config.listen_http is not None:
                self.web = self._web_server(config.listen_http)
        except BaseException:
            self.loop.close()
            self.ledger.close()
            if self.fabric is not None and self._own_fabric:
                self.fabric.stop()
            raise

    def _web_server(self, address: str) -> WebServer | None:
        """The HTTP side (live map, /metrics, SENSE, ALTO), bound on the loop (served from `start`)."""
        host, port = host_port(address, "--listen-http")
        live = LiveMap(self.worker, self.topology, self.fabric, self.config.emulation_scale)
        live.metrics.set_ledger_repairs(repair_counts(self.book.repairs))  # all made while loading, before this
        auth = self.auth

        def authenticate(header: str | None) -> Principal:
            return auth.authenticate([("authorization", header)] if header is not None else [])

        limits = self.config.web_limits
        streams = WebStreamSlots(limits.max_streams, limits.max_streams_per_client)
        context = ApiContext(worker=self.worker, topology=self.topology, domain=self.domain, clock=self.config.clock,
                             loads=self.fabric.utilization if self.fabric is not None else dict,
                             streams=streams, wall_clock=live.wall_clock, authenticate=authenticate)
        nsi = NsiApi(context, segment_timeout=self.config.nsi_timeout, ssl_context=self.nsi_client_tls)
        web = WebServer(live, (host, port), authenticate=authenticate, ssl_context=self.http_tls,
                        limits=limits, apis=[*_http_apis(context), nsi], streams=streams,
                        loopback_only=self.auth.development_mode,
                        authenticate_certificate=auth.authenticate_certificate if self.http_tls else None)
        try:
            self.loop.run(web.bind())
        except OSError as exc:
            if not self.config.http_required:
                log.warning("no live map: cannot listen on %s (%s); give --listen-http another address",
                            address, exc.strerror or exc)
                return None
            raise FailedPrecondition(f"--listen-http {address}: cannot listen there ({exc.strerror or exc})") from None
        nsi.listening(web.scheme, web.address)
        if not is_loopback(address):
            log.warning("the live map and /metrics on %s are read-only but visible to anyone who can reach "
                        "that address (no token asked; the SENSE and ALTO APIs beside them ask for one)",
                        web.address)
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
        if self.web is not None:
            self.web.live.start()
            scheme = self.web.scheme
            log.info("live map on %s://%s/ (Prometheus metrics at /metrics; SENSE API at /sense/api, ALTO "
                     "directory at /alto/directory, domain %s)", scheme, self.web.address, self.domain)
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
        if self.web is not None and self.loop.running:
            self.web.live.stop()  # wakes every map stream
            self.loop.run(self.web.stop(), timeout=grace + 5)
        if self.loop.running:
            self.loop.run(self.health.enter_graceful_shutdown())
            self.worker.close_watchers()
            self.loop.run(self.server.stop(grace), timeout=grace + 5)
            self.loop.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.worker.stop()
        if self.fabric is not None and self._own_fabric:
            self.fabric.stop()
        self.ledger.close()


def nsi_client_context(config: ControllerConfig) -> ssl.SSLContext | None:
    """TLS towards neighbouring NSAs served over HTTPS: tsdn's --tls-cert/--tls-key as its client
    certificate, their servers checked against --client-ca (the NSI deployment's CA; None: no TLS
    material, the system's CAs and no client certificate)."""
    if config.tls_cert is None or config.tls_key is None:
        return None
    context = ssl.create_default_context(cafile=str(config.client_ca) if config.client_ca else None)
    context.load_cert_chain(config.tls_cert, config.tls_key)
    return context


def _http_apis(context: ApiContext) -> list[HttpApi]:
    """The APIs mounted beside the live map: SENSE under /sense/api, ALTO under /alto (and NSI under /NSI,
    made with the server's address: `_web_server`)."""
    return [SenseApi(context), AltoApi(context)]
