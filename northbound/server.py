"""The gRPC side of a controller: the server with every service, health and reflection, who may call
it (tokens, TLS) and where it listens. `tsdn.controller` wires it to the core worker."""

from __future__ import annotations

import asyncio
import ssl
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from northbound.agent_servicer import AgentServicer
from northbound.auth import Authenticator, is_loopback, plaintext_token_addresses
from northbound.decoding import RequestDecoding
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
from northbound.streams import StreamGate, StreamSlots
from northbound.transfers import TransferServicer
from sdn_app.core.agents import AgentRegistry
from sdn_app.core.errors import FailedPrecondition, InvalidArgument
from sdn_app.core.transfers import TransferDesk
from sdn_app.worker import CoreWorker

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


class ApiSettings(Protocol):
    """Where the API listens and who may call it: the fields of `tsdn controller`'s options it reads."""

    listen_grpc: str
    also_listen: tuple[str, ...]  # more gRPC addresses (HOST:PORT or unix:PATH), e.g. for agents in Mininet
    tokens: Path | None
    tls_cert: Path | None
    tls_key: Path | None
    client_ca: Path | None
    allow_plaintext_tokens: bool



def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"{what} {path}: {exc.strerror or exc}") from None


def tls_credentials(config: ApiSettings) -> grpc.ServerCredentials | None:
    """The TLS credentials `config` asks for (None: plaintext); `InvalidArgument` naming a bad file."""
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


def http_ssl_context(config: ApiSettings) -> ssl.SSLContext | None:
    """The TLS context of the HTTP side from the same --tls-cert/--tls-key/--client-ca as gRPC (None:
    plaintext); with --client-ca, a client certificate signed by it is required."""
    if tls_credentials(config) is None:  # checks the files first, with the same messages
        return None
    assert config.tls_cert is not None and config.tls_key is not None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.tls_cert, config.tls_key)
    if config.client_ca is not None:
        context.load_verify_locations(cafile=str(config.client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


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


def host_port(address: str, option: str) -> tuple[str, int]:
    """(host, port) of `address`; `InvalidArgument` naming `option` when it is not HOST:PORT."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidArgument(f"{option} {address}: expected HOST:PORT, e.g. 127.0.0.1:6653")
    return host.strip("[]"), int(port)


def api_access(config: ApiSettings) -> tuple[Authenticator, grpc.ServerCredentials | None, list[str]]:
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
    credentials = tls_credentials(config)
    plaintext = plaintext_token_addresses((config.listen_grpc, *config.also_listen),
                                          tokens=config.tokens is not None, tls=credentials is not None)
    if plaintext and not config.allow_plaintext_tokens:
        option = "--listen-grpc" if plaintext[0] == config.listen_grpc else "--also-listen"
        raise InvalidArgument(
            f"{option} {plaintext[0]}: bearer tokens would cross the network in plaintext there, "
            "where anyone on the path can read and reuse them. Serve TLS (--tls-cert and --tls-key), or, "
            "on a network you trust, say so with --allow-plaintext-tokens")
    return auth, credentials, plaintext


def bind(loop: LoopThread, server: grpc.aio.Server, config: ApiSettings,
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


async def api_server(worker: CoreWorker, auth: Authenticator, streams: StreamSlots, agents: AgentRegistry,
                     transfers: TransferDesk, fabric: Any) -> tuple[health.aio.HealthServicer, grpc.aio.Server,
                                                                   ThreadPoolExecutor]:
    """The asyncio gRPC server with every service, health and reflection, and the thread pool of the
    calls kept off the core worker (run on the server's loop: the server binds to it)."""
    pool = ThreadPoolExecutor(max_workers=RPC_THREADS, thread_name_prefix="grpc")
    asyncio.get_running_loop().set_default_executor(pool)  # for the few unary calls kept off the core
    # RequestDecoding last: it wraps the registered handlers themselves (bytes that are not a request
    # message: INVALID_ARGUMENT naming the type, not gRPC's UNKNOWN and traceback), StreamGate wraps its.
    server = grpc.aio.server(migration_thread_pool=pool, options=[("grpc.so_reuseport", 0)],
                             interceptors=[StreamGate(auth, streams), RequestDecoding()])
    bandwidth_pb2_grpc.add_BandwidthServiceServicer_to_server(BandwidthServicer(worker, auth), server)
    topology_pb2_grpc.add_TopologyServiceServicer_to_server(TopologyServicer(worker, auth, fabric), server)
    agent_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(worker, auth, agents, transfers), server)
    transfer_pb2_grpc.add_TransferServiceServicer_to_server(TransferServicer(worker, auth, transfers), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server)
    return health_servicer, server, pool
