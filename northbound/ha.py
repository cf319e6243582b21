"""`tsdn controller --store etcd://...`: one of several controllers sharing their state in etcd.

Every controller connects to the switches (SLAVE) and serves the gRPC API from the start. While it
follows, it answers reads (GetReservation, ListReservations) from a copy of the reservations, kept
warm by reading twice a second the rows changed since its last read (etcd3gw's watch stream
hangs without a word when its member dies; a read fails over to another member), and every
other call with UNAVAILABLE naming the leader in the `tsdn-leader` trailer, which tsdn's client
follows. When elected it claims OpenFlow MASTER with
the election's generation on every switch, loads the state from etcd and becomes a full
`Controller` on the same ports: the existing reconciliation makes every switch what the
reservations want, and installs and moves in flight resume. A deposed leader writes nothing more
(its etcd transactions fail their compare on the leader key, the switches took its MASTER role
away) and re-executes itself as a follower.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import grpc
from google.protobuf import message_factory
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from northbound import convert
from northbound.auth import Authenticator
from northbound.client import LEADER_TRAILER
from northbound.loop import LoopThread
from northbound.proto.tsdn.v1 import agent_pb2, bandwidth_pb2, topology_pb2, transfer_pb2
from northbound.server import SERVICES, Controller, ControllerConfig, _credentials, _host_port, api_access, bind
from northbound.servicers import _status, status_message
from sdn_app.core.errors import TsdnError
from sdn_app.core.reservations import create_table, list_page, read_row, read_visible
from sdn_app.core.topology import Topology
from sdn_app.ha.election import Election, Leader
from sdn_app.ha.etcd import Etcd, prefix_end, unb64
from sdn_app.ha.store import EtcdReplica, decode_row, leader_key, row_prefix

log = logging.getLogger(__name__)

MASTER_CONFIRMED = "OpenFlow MASTER confirmed by"  # logged once the switches answered the claim
REJOIN_RETRY = 2.0  # seconds between tries of a deposed leader cut off from etcd
VIEW_INTERVAL = 0.5  # seconds between reads of what changed, for the followers' copy


class ReservationView:
    """A follower's copy of the stored reservations, in an in-memory `reservations` table."""

    def __init__(self, etcd: Etcd, namespace: str, topology: Topology):
        self.etcd = etcd
        self.prefix = row_prefix(namespace, "reservations")
        self.topology = topology
        self.revision = 0
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        create_table(self._db)
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Take in the reservations stored or changed since the last call (one read of what changed)."""
        kvs, revision = self.etcd.range(self.prefix, prefix_end(self.prefix), "read the reservations",
                                        min_mod_revision=self.revision + 1)
        if not kvs:
            self.revision = revision
            return
        rows = [decode_row(unb64(kv.get("value", "")), unb64(kv["key"]).decode()) for kv in kvs]
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(reservations)")]
        with self._lock:  # reservation rows are never deleted: ended ones stay, so upserts are the whole story
            self._db.execute("BEGIN")
            self._db.executemany(f"INSERT OR REPLACE INTO reservations ({', '.join(columns)}) "
                                 f"VALUES ({', '.join('?' * len(columns))})",
                                 [tuple(row.get(c) for c in columns) for row in rows])
            self._db.execute("COMMIT")
        self.revision = revision

    def query(self, sql: str, parameters: tuple = ()) -> list[tuple]:
        """Rows of a read-only query on the copy."""
        with self._lock:
            return self._db.execute(sql, parameters).fetchall()


class FollowerServer:
    """The gRPC API of a controller that follows: reads from the view, everything else to the leader."""

    def __init__(self, config: ControllerConfig, auth: Authenticator, view: ReservationView,
                 leader: Callable[[], Leader | None]):
        self.config = config
        self.auth = auth
        self.view = view
        self.leader = leader
        self.loop = LoopThread("tsdn-follower")
        self._stop = threading.Event()
        self._refresher = threading.Thread(target=self._refresh, name="tsdn-follower-view", daemon=True)
        try:
            self.server = self.loop.run(self._server())
            self.port = bind(self.loop, self.server, config, _credentials(config))
        except BaseException:
            self.loop.close()
            raise

    async def _server(self) -> grpc.aio.Server:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        handlers: dict[str, dict[str, grpc.RpcMethodHandler]] = {}
        for module in (bandwidth_pb2, topology_pb2, agent_pb2, transfer_pb2):
            for service in module.DESCRIPTOR.services_by_name.values():
                for method in service.methods:
                    path = f"/{service.full_name}/{method.name}"
                    handlers.setdefault(service.full_name, {})[method.name] = self._handler(path, method)
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(name, methods)
                                         for name, methods in handlers.items()])
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        return server

    def _handler(self, path: str, method: Any) -> grpc.RpcMethodHandler:
        request_class = message_factory.GetMessageClass(method.input_type)
        if path == "/tsdn.v1.BandwidthService/GetReservation":
            return grpc.unary_unary_rpc_method_handler(self._get, request_class.FromString,
                                                       bandwidth_pb2.Reservation.SerializeToString)
        if path == "/tsdn.v1.BandwidthService/ListReservations":
            return grpc.unary_unary_rpc_method_handler(self._list, request_class.FromString,
                                                       bandwidth_pb2.ListReservationsResponse.SerializeToString)
        kind = {(False, False): grpc.unary_unary_rpc_method_handler,
                (False, True): grpc.unary_stream_rpc_method_handler,
                (True, False): grpc.stream_unary_rpc_method_handler,
                (True, True): grpc.stream_stream_rpc_method_handler}[(method.client_streaming, method.server_streaming)]
        return kind(self._redirect, request_class.FromString, None)

    async def _redirect(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        try:  # only callers with a token learn where the leader is
            self.auth.authenticate(context.invocation_metadata())
        except TsdnError as error:
            await context.abort(_status(error), status_message(error))
        leader = self.leader()
        if leader is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "this controller follows and no leader is elected yet; retry in a moment")
        context.set_trailing_metadata(((LEADER_TRAILER, leader.address),))
        await context.abort(grpc.StatusCode.UNAVAILABLE,
                            f"this controller follows; the leader is {leader.address} "
                            f"(generation {leader.generation}): send writes there")

    async def _read(self, context: grpc.aio.ServicerContext, read: Callable[[], Any]) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(None, read)
        except TsdnError as error:
            await context.abort(_status(error), status_message(error))

    async def _get(self, request: bandwidth_pb2.GetReservationRequest, context: grpc.aio.ServicerContext) -> Any:
        def read() -> bandwidth_pb2.Reservation:
            principal = self.auth.authenticate(context.invocation_metadata())
            convert.name_in(request.name)
            return convert.reservation_out(read_visible(
                principal, request.name, lambda found: read_row(self.view.query, self.view.topology, found)))
        return await self._read(context, read)

    async def _list(self, request: bandwidth_pb2.ListReservationsRequest, context: grpc.aio.ServicerContext) -> Any:
        def read() -> bandwidth_pb2.ListReservationsResponse:
            principal = self.auth.authenticate(context.invocation_metadata())
            state = convert.state_in(request.state)
            convert.name_in(request.dtn, "dtn")
            convert.name_in(request.owner, "owner")
            page, token = list_page(self.view.query, self.view.topology, principal, state, request.dtn,
                                    request.owner, request.page_size, request.page_token)
            return bandwidth_pb2.ListReservationsResponse(reservations=[convert.reservation_out(r) for r in page],
                                                          next_page_token=token)
        return await self._read(context, read)

    def start(self) -> None:
        """Serve, and keep the view warm."""
        self.loop.run(self.server.start())
        self.loop.run(self.health.set("", health_pb2.HealthCheckResponse.SERVING))
        for service in SERVICES:  # a follower serves only reads: callers wanting the API go to the leader
            self.loop.run(self.health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING))
        self._refresher.start()

    def _refresh(self) -> None:
        while not self._stop.wait(VIEW_INTERVAL):
            try:
                self.view.refresh()
            except TsdnError as error:
                log.warning("follower: the copy of the reservations is not refreshed: %s", error)

    def stop(self) -> None:
        """Stop serving at once (the leader's server takes the ports)."""
        self._stop.set()
        if self.loop.running:
            self.loop.run(self.server.stop(0), timeout=5)
            self.loop.close()


class _FencedFabric:
    """The fabric as an elected leader's core uses it: every write refused once `leads()` says no."""

    def __init__(self, fabric: Any, leads: Callable[[], bool]):
        object.__setattr__(self, "_fabric", fabric)
        object.__setattr__(self, "_leads", leads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fabric, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._fabric, name, value)

    def apply_many(self, changes: Any, timeout: float = 5.0) -> list[str | None]:
        if not self._leads():
            return ["this controller is no longer the leader: nothing sent to the switches"] * len(changes)
        return self._fabric.apply_many(changes, timeout)

    def reconcile(self, switch: str, expected: Any, timeout: float = 5.0) -> Any:
        if not self._leads():
            raise RuntimeError("this controller is no longer the leader: nothing sent to the switches")
        return self._fabric.reconcile(switch, expected, timeout)


REJOIN = "TSDN_HA_REJOIN"  # set in a re-executed deposed leader: wait for etcd rather than fail


def reexec(reason: str) -> None:
    """Start this process again from scratch, as a follower (the deposed leader's way back)."""
    log.error("deposed: %s; restarting as a follower", reason)
    logging.shutdown()
    os.environ[REJOIN] = "1"
    os.execv(sys.executable, [sys.executable, *sys.argv])


def _reach(etcd: Etcd, key: str) -> None:
    """Check etcd answers; a deposed leader cut off from it (a partition) waits until it does."""
    while True:
        try:
            etcd.range(key, what="answer (checked at start)")
            return
        except TsdnError as error:
            if not os.environ.get(REJOIN):
                raise
            log.warning("waiting for etcd to rejoin as a follower: %s", error)
            time.sleep(REJOIN_RETRY)


class HAController:
    """One controller of several sharing `config.store`: follows, and leads when elected."""

    def __init__(self, config: ControllerConfig, on_deposed: Callable[[str], None] = reexec):
        """Check etcd answers, connect to the switches (SLAVE) and bind the API; nothing served until `start`."""
        assert config.store is not None
        self.config = config
        self.topology = Topology.load(config.topology)
        self.namespace = self.topology.name
        self.etcd = Etcd(config.store)
        _reach(self.etcd, leader_key(self.namespace))
        self.auth, _, _ = api_access(config)  # refused here as by a single controller
        self._on_deposed = on_deposed
        self.leader: Controller | None = None
        self._replica: EtcdReplica | None = None
        self.fabric = None
        if config.listen_openflow is not None:
            from sdn_app.openflow.fabric import start_openflow

            host, port = _host_port(config.listen_openflow, "--listen-openflow")
            self.fabric = start_openflow(self.topology, host, port, config.emulation_scale)
        self.election = Election(self.etcd, leader_key(self.namespace), config.advertise or config.listen_grpc,
                                 config.lease_ttl, self._elected, self._deposed)
        try:
            self.follower: FollowerServer | None = FollowerServer(
                config, self.auth, ReservationView(self.etcd, self.namespace, self.topology), self.election.leader)
        except BaseException:
            if self.fabric is not None:
                self.fabric.stop()
            raise
        # Port 0 picked a port: the leader serves on that same one, and says so to the others.
        host = config.listen_grpc.rsplit(":", 1)[0]
        self.config = config = replace(config, listen_grpc=f"{host}:{self.follower.port}")
        self.election.address = self.advertise = config.advertise or config.listen_grpc

    @property
    def address(self) -> str:
        """The gRPC address served."""
        return self.config.listen_grpc

    def start(self) -> None:
        """Serve as a follower and campaign."""
        assert self.follower is not None
        if self.fabric is not None:
            # SLAVE (no writes, no packet-outs) until elected, with the leader's generation: an older
            # one would be refused by switches as stale.
            kvs, _ = self.etcd.range(leader_key(self.namespace), what="read the leader key")
            self.fabric.claim_role(False, int(kvs[0].get("create_revision", 0)) if kvs else 0)
        self.follower.start()
        self.election.start()
        log.info("tsdn controller (high availability): store %s, namespace %s, lease %ds, advertised as %s",
                 self.config.store, self.namespace, self.config.lease_ttl, self.advertise)

    def _elected(self, generation: int) -> None:
        if self.fabric is not None:
            claims = self.fabric.claim_role(True, generation)
            refused = {switch: why for switch, why in claims.items() if why}
            log.warning("%s %d of %d switch(es), generation %d", MASTER_CONFIRMED, len(claims) - len(refused),
                        len(claims), generation)
            if refused:
                log.warning("OpenFlow MASTER refused by %d switch(es): %s", len(refused),
                            "; ".join(f"{s}: {why}" for s, why in sorted(refused.items())))
        replica = self._replica = EtcdReplica(self.etcd, self.namespace, generation, self._fenced)
        fabric = _FencedFabric(self.fabric, self.election.is_leader) if self.fabric is not None else None
        # The follower's server keeps the port until the leader's binds it: a port closed for long
        # would tell the other controllers that this one's process is gone.
        self.leader = Controller(self.config, replica=replica, fabric=fabric, before_bind=self._stop_following)
        self.leader.start()
        log.warning("leading: generation %d, %d reservation row(s) loaded from %s", generation,
                    len(replica.rows("reservations")), self.config.store)

    def _stop_following(self) -> None:
        if self.follower is not None:
            self.follower.stop()
            self.follower = None

    def _fenced(self, why: str) -> None:
        """A commit found this controller may no longer write (on the core thread): step down now,
        from another thread (stepping down stops the core)."""
        threading.Thread(target=self.election.depose, args=(why,), name="tsdn-step-down", daemon=True).start()

    def _deposed(self, reason: str) -> None:
        if self._replica is not None:
            self._replica.fenced = f"deposed: {reason}"  # not one more commit, even if the lease lives on
        self._on_deposed(reason)

    def stop(self) -> None:
        """Stop serving; a leader resigns so that a follower takes over at once."""
        self.election.stop(resign=True)
        if self.leader is not None:
            self.leader.stop()
        if self.follower is not None:
            self.follower.stop()
        if self.fabric is not None:
            self.fabric.stop()
