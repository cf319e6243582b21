"""`tsdn controller`: the controller process (northbound gRPC API over the core)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

DEFAULT_HTTP = "127.0.0.1:8080"  # the live map; busy (another controller on this host): a warning


def register(commands: argparse._SubParsersAction) -> None:
    """Add `controller`."""
    parser = commands.add_parser("controller", help="run the controller: OpenFlow switches and the gRPC API")
    parser.add_argument("--topology", required=True, help="topology YAML, or a built-in name (sc16, ring8)")
    parser.add_argument("--listen-grpc", default="127.0.0.1:50051", metavar="HOST:PORT",
                        help="northbound gRPC address (default 127.0.0.1:50051; port 0 picks a free one)")
    parser.add_argument("--also-listen", action="append", default=[], metavar="ADDRESS",
                        help="serve the same gRPC API here too (repeatable): HOST:PORT, or unix:PATH for DTN "
                             "agents in Mininet hosts, which share the file system but not the loopback")
    parser.add_argument("--state", default="tsdn.db", metavar="FILE",
                        help="SQLite database of reservations and bookings (default tsdn.db); survives restarts")
    parser.add_argument("--tokens", metavar="FILE",
                        help="bearer tokens file; without it only loopback is allowed, in development mode")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate (with --tls-key)")
    parser.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    parser.add_argument("--client-ca", metavar="PEM", help="require client certificates signed by this CA")
    openflow = parser.add_mutually_exclusive_group()
    openflow.add_argument("--listen-openflow", default="0.0.0.0:6653", metavar="HOST:PORT",
                          help="control the OpenFlow 1.3 switches connecting here (default 0.0.0.0:6653)")
    openflow.add_argument("--no-openflow", action="store_true",
                          help="control no switches: reservations are booked in the ledger only (planning, tests)")
    parser.add_argument("--emulation-scale", type=float, default=1.0, metavar="X",
                        help="Mininet: meters enforce nominal rate x X, matching the emulated links (default 1)")
    parser.add_argument("--agent-timeout", type=float, default=15.0, metavar="S",
                        help="mark a DTN agent LOST after S seconds without a heartbeat (default 15)")
    http = parser.add_mutually_exclusive_group()
    http.add_argument("--listen-http", metavar="HOST:PORT",
                      help="serve the live traffic map and Prometheus /metrics here (read-only; default "
                           f"{DEFAULT_HTTP}, skipped with a warning when that port is busy)")
    http.add_argument("--no-http", action="store_true", help="serve no live map and no /metrics")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.set_defaults(run=run_controller)


def run_controller(args: argparse.Namespace) -> int:
    """Run until SIGINT or SIGTERM."""
    from northbound.server import Controller, ControllerConfig
    from topologies import resolve_topology

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    optional = {name: Path(value) for name in ("tokens", "tls_cert", "tls_key", "client_ca")
                if (value := getattr(args, name)) is not None}
    controller = Controller(ControllerConfig(topology=resolve_topology(args.topology),
                                             listen_grpc=args.listen_grpc, state=Path(args.state),
                                             also_listen=tuple(args.also_listen),
                                             listen_openflow=None if args.no_openflow else args.listen_openflow,
                                             emulation_scale=args.emulation_scale,
                                             agent_timeout=args.agent_timeout,
                                             listen_http=None if args.no_http else args.listen_http or DEFAULT_HTTP,
                                             http_required=args.listen_http is not None, **optional))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    controller.start()
    print(f"tsdn controller listening on {controller.address}", file=sys.stderr, flush=True)
    if controller.http_address is not None:
        print(f"tsdn live map on http://{controller.http_address}/", file=sys.stderr, flush=True)
    stop.wait()
    logging.getLogger(__name__).info("stopping")
    controller.stop()
    return 0
