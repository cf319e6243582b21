"""The gRPC API of a controller that follows (`tsdn controller --store etcd://...`): reads
(GetReservation, ListReservations) from a copy of the stored reservations, kept warm by reading
twice a second the rows changed since the last read (etcd3gw's watch stream hangs without a word
when its member dies; a read fails over to another member); every other call UNAVAILABLE naming
the leader in the `tsdn-leader` trailer, which tsdn's client follows."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from northbound import convert
from northbound.auth import Authenticator
from northbound.client import LEADER_TRAILER
from northbound.decoding import RequestDecoding
from northbound.loop import LoopThread
from northbound.proto.tsdn.v1 import agent_pb2, bandwidth_pb2, topology_pb2, transfer_pb2
from northbound.server import SERVICES, ApiSettings, bind, tls_credentials
from northbound.servicers import _status, status_message
from sdn_app.core.errors import TsdnError
from sdn_app.core.reservation_store import create_table, list_page, read_row, read_visible
from sdn_app.core.topology import Topology
from sdn_app.ha.election import Leader
from sdn_app.ha.etcd import Etcd, prefix_end, unb64
from sdn_app.ha.store import decode_row, row_prefix

log = logging.getLogger(__name__)

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

    def __init__(self, config: ApiSettings, auth: Authenticator, view: ReservationView,
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
            self.port = bind(self.loop, self.server, config, tls_credentials(config))
        except BaseException:
            self.loop.close()
            raise

    async def _server(self) -> grpc.aio.Server:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)], interceptors=[RequestDecoding()])
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
