"""`tsdn controller`: the controller process (northbound gRPC API over the core)."""

from __future__ import annotations

import argparse
import logging
import math
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from northbound.auth import MAX_TOKENS, MAX_TOKENS_FILE_BYTES
from sdn_app.core.installs import FLOW_DESIGNS, LABELS
from sdn_app.core.labels import parse_label_range
from sdn_app.core.rerouting.policy import ReroutePolicy
from sdn_app.core.topology_schema import MAX_DTNS, MAX_LINKS, MAX_SWITCHES, MAX_TOPOLOGY_BYTES

DEFAULT_HTTP = "127.0.0.1:8080"  # the live map; busy (another controller on this host): a warning
DEFAULT_POLICY = ReroutePolicy()


def register(commands: argparse._SubParsersAction) -> None:
    """Add `controller`."""
    parser = commands.add_parser("controller", help="run the controller: OpenFlow switches and the gRPC API")
    parser.add_argument("--topology", required=True,
                        help="topology YAML, or a built-in name (sc16, ring8, sc16-nsi); at most "
                             f"{MAX_TOPOLOGY_BYTES // 1024} KiB, {MAX_SWITCHES:,} switches, {MAX_LINKS:,} links, "
                             f"{MAX_DTNS:,} DTNs (docs/topologies.md)")
    parser.add_argument("--listen-grpc", default="127.0.0.1:50051", metavar="HOST:PORT",
                        help="northbound gRPC address (default 127.0.0.1:50051; port 0 picks a free one)")
    parser.add_argument("--also-listen", action="append", default=[], metavar="ADDRESS",
                        help="serve the same gRPC API here too (repeatable): HOST:PORT, or unix:PATH for DTN "
                             "agents in Mininet hosts, which share the file system but not the loopback")
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--state", default="tsdn.db", metavar="FILE",
                       help="SQLite database of reservations and bookings (default tsdn.db); survives restarts. "
                            "One controller per file: locked (FILE.lock) while it runs, a second one refuses")
    store.add_argument("--store", metavar="etcd://HOST:PORT[,HOST:PORT...]",
                       help="share the state with other controllers in etcd (docs/ha.md): one leader, elected on an "
                            "etcd lease, writes switches and state; the others follow, answer reads and send writes "
                            "to it. etcd must run with --max-txn-ops 10000 --max-request-bytes 8388608")
    parser.add_argument("--lease-ttl", type=int, default=2, metavar="S",
                        help="with --store: seconds of the leader's lease, 2 to 60; a dead leader is replaced "
                             "after about this long (default 2)")
    parser.add_argument("--advertise", metavar="HOST:PORT",
                        help="with --store: the gRPC address other controllers send clients to when this one "
                             "leads (default: --listen-grpc)")
    parser.add_argument("--tokens", metavar="FILE",
                        help=f"bearer tokens file (at most {MAX_TOKENS_FILE_BYTES // 1024} KiB, "
                             f"{MAX_TOKENS:,} tokens); without it only loopback is allowed, in development mode")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate (with --tls-key)")
    parser.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    parser.add_argument("--client-ca", metavar="PEM", help="require client certificates signed by this CA")
    parser.add_argument("--allow-plaintext-tokens", action="store_true",
                        help="accept bearer tokens without TLS on addresses beyond loopback (refused by default: "
                             "anyone on the path can read them); warned about at every start")
    openflow = parser.add_mutually_exclusive_group()
    openflow.add_argument("--listen-openflow", default="0.0.0.0:6653", metavar="HOST:PORT",
                          help="control the OpenFlow 1.3 switches connecting here (default 0.0.0.0:6653)")
    openflow.add_argument("--no-openflow", action="store_true",
                          help="control no switches: reservations are booked in the ledger only (planning, tests)")
    parser.add_argument("--emulation-scale", type=float, default=1.0, metavar="X",
                        help="Mininet: meters enforce nominal rate x X, matching the emulated links (default 1)")
    parser.add_argument("--agent-timeout", type=float, default=15.0, metavar="S",
                        help="mark a DTN agent LOST after S seconds without a heartbeat (default 15)")
    parser.add_argument("--keep-ended", default="5m", metavar="DURATION",
                        help="keep an ended (released, expired, failed) reservation in memory this long, e.g. 90s, "
                             "1h; 0: not at all, 'forever': never forget. After that only --state holds it, and "
                             "GetReservation and ListReservations read it from there (default 5m)")
    parser.add_argument("--hold-timeout", default="120s", metavar="DURATION",
                        help="how long a two-phase hold (HELD) waits for its commit before its booking is freed "
                             "(default 120s, as OpenNSA and SuPA)")
    parser.add_argument("--share-step", type=float, default=5.0, metavar="PERCENT",
                        help="change an elastic reservation's meter only when a re-solve moves its share by more "
                             "than this percentage of its ceiling (default 5)")
    parser.add_argument("--share-solver", choices=("filling", "highs"), default="filling",
                        help="how each round of the weighted max-min sharing is solved: filling (its LP's "
                             "closed form, about 3 ms for 1,000 elastic reservations on sc16) or highs (the same "
                             "LP by HiGHS, the same shares, about 70 ms); docs/api.md")
    parser.add_argument("--flow-design", choices=FLOW_DESIGNS, default=LABELS,
                        help="how reservations are put on the switches: labels (default: a VLAN label per route "
                             "direction, shared on the transit switches; a reservation's own entries only at its "
                             "ingress, so a move is one flow-mod per direction) or per-hop (every reservation's "
                             "flows on every switch of its path: the design before labels, kept as a baseline)")
    parser.add_argument("--path-labels", default="2-4094", metavar="FIRST-LAST", type=_label_range,
                        help="the VLAN ids path labels are taken from (default 2-4094; leave out VLANs the "
                             "ring's links carry for anything else)")
    parser.add_argument("--label-grace", default="300s", metavar="DURATION",
                        help="how long a path nobody uses keeps its label and entries, so a move back costs "
                             "nothing (default 300s)")
    parser.add_argument("--max-meters", type=_meters, default=1024, metavar="N",
                        help="meter ids each switch has (default 1024; OpenFlow meter-features tell a switch's "
                             "max_meter): each reservation takes one per direction at its ingress switch, so a "
                             "switch is the ingress of at most N reservation directions")
    parser.add_argument("--no-bundles", action="store_true",
                        help="send each switch plain flow-mods and barriers, never OpenFlow bundles (by default "
                             "a switch that accepts bundles gets each decision's part as one atomic bundle)")
    http = parser.add_mutually_exclusive_group()
    http.add_argument("--listen-http", metavar="HOST:PORT",
                      help="serve the live traffic map, Prometheus /metrics, the SENSE API (/sense/api) and "
                           "ALTO (/alto/directory) here (default "
                           f"{DEFAULT_HTTP}, skipped with a warning when that port is busy)")
    http.add_argument("--no-http", action="store_true", help="serve no live map and no /metrics")
    parser.add_argument("--http-max-connections", type=int, default=512, metavar="N",
                        help="HTTP connections open at once; one more gets 503 (default 512)")
    parser.add_argument("--http-max-body", type=int, default=1024 * 1024, metavar="BYTES",
                        help="largest HTTP request body (SENSE intents, ALTO filters); larger gets 413 "
                             "(default 1 MiB)")
    parser.add_argument("--http-max-streams", type=int, default=64, metavar="N",
                        help="server-sent-event streams (live map pages, ALTO update streams) open at once; "
                             "one more gets 503 (default 64, at most 8 per client)")
    parser.add_argument("--domain", metavar="NAME",
                        help="this network's DNS-style name, e.g. sc16.caltech.edu: SENSE terminals are "
                             "urn:ogf:network:NAME:DTN, the NSI provider is NSA urn:ogf:network:NAME:nsa "
                             "(default: the topology's name)")
    parser.add_argument("--nsi-timeout", default="60s", metavar="DURATION",
                        help="how long a neighbouring NSA may take to confirm each step of a WAN segment "
                             "(reserve, commit, provision) before the reservation fails naming it (default 60s)")
    parser.add_argument("--max-streams", type=int, default=2000, metavar="N",
                        help="server streams (WatchReservations, WatchAgents, WatchTransfer, TakeJobs, health "
                             "Watch, reflection) open at once in all; one more gets RESOURCE_EXHAUSTED (default 2000)")
    parser.add_argument("--max-streams-per-principal", type=int, default=500, metavar="N",
                        help="server streams one principal (one token) may hold open at once; one more gets "
                             "RESOURCE_EXHAUSTED (default 500)")
    reroute = parser.add_argument_group(
        "rerouting on measured congestion",
        "a transfer under its booking moves only when a link of its path (either way) measures congested by "
        "traffic the controller does not own, onto a path with measured headroom; never for a shortfall at its "
        "hosts (docs/operations.md, Rerouting)")
    for option, name, kind, text in _REROUTE_OPTIONS:
        default = getattr(DEFAULT_POLICY, name)
        reroute.add_argument(option, dest=f"reroute_{name}", type=kind, default=default, metavar="X",
                             help=f"{text} (default {default:g})")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.set_defaults(run=run_controller)


def _web_limits(args: argparse.Namespace) -> Any:
    """The HTTP side's limits from --http-max-*; `InvalidArgument` naming a flag out of range."""
    from sdn_app.core.errors import InvalidArgument
    from sdn_app.web.server import WebLimits

    for flag, value, low, high in (("--http-max-connections", args.http_max_connections, 1, 65536),
                                   ("--http-max-body", args.http_max_body, 1024, 1 << 30),
                                   ("--http-max-streams", args.http_max_streams, 1, 10000)):
        if not low <= value <= high:
            raise InvalidArgument(f"{flag}: must be from {low} to {high}, got {value}")
    return WebLimits(max_connections=args.http_max_connections, max_body_bytes=args.http_max_body,
                     max_streams=args.http_max_streams,
                     max_streams_per_client=min(WebLimits.max_streams_per_client, args.http_max_streams))


_REROUTE_OPTIONS = (
    ("--reroute-below", "threshold", float, "a transfer underperforms below this share of its booking ..."),
    ("--reroute-reports", "consecutive", int, "... for this many rate reports in a row (one a second)"),
    ("--congested-at", "congested_at", float, "a link direction is congested from this share of its capacity ..."),
    ("--clear-at", "clear_at", float, "... until it measures below this share (hysteresis)"),
    ("--unowned-margin", "unowned_margin", float,
     "and only with this share of its capacity beyond the controller's own traffic (another tenant's)"),
    ("--clear-for", "clear_for", float,
     "seconds a link left for congestion must measure clear before a reservation moves back onto it"),
    ("--hold-down", "hold_down", float, "seconds after a move before the reservation may move again for congestion"),
    ("--move-budget", "move_budget", int,
     "moves for congestion (or to make room) per reservation within --budget-window; moves off failed links "
     "are not counted"),
    ("--budget-window", "budget_window", float, "seconds of the move budget"),
)


def run_controller(args: argparse.Namespace) -> int:
    """Run until SIGINT or SIGTERM."""
    from sdn_app.core.errors import InvalidArgument
    from sdn_app.ha.election import check_ttl
    from sdn_app.ha.etcd import parse_store
    from topologies import resolve_topology
    from tsdn.controller import Controller, ControllerConfig
    from tsdn.ha_controller import HAController

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    optional = {name: Path(value) for name in ("tokens", "tls_cert", "tls_key", "client_ca")
                if (value := getattr(args, name)) is not None}
    if args.store is None and (args.lease_ttl != 2 or args.advertise is not None):
        raise InvalidArgument("--lease-ttl and --advertise go with --store etcd://...")
    if args.store is not None:
        parse_store(args.store)
        check_ttl(args.lease_ttl)
        host = args.listen_grpc.rsplit(":", 1)[0].strip("[]")
        if args.advertise is None and host in ("0.0.0.0", "::", ""):
            raise InvalidArgument(f"--advertise: needed with --listen-grpc {args.listen_grpc}: the other controllers "
                                  "send clients to this address when this one leads, and a wildcard reaches nobody; "
                                  "give HOST:PORT as clients reach this host")
    config = ControllerConfig(topology=resolve_topology(args.topology),
                              listen_grpc=args.listen_grpc, state=Path(args.state),
                              also_listen=tuple(args.also_listen),
                              listen_openflow=None if args.no_openflow else args.listen_openflow,
                              emulation_scale=args.emulation_scale,
                              agent_timeout=args.agent_timeout,
                              listen_http=None if args.no_http else args.listen_http or DEFAULT_HTTP,
                              http_required=args.listen_http is not None, domain=args.domain,
                              web_limits=_web_limits(args),
                              allow_plaintext_tokens=args.allow_plaintext_tokens,
                              keep_ended=parse_keep_ended(args.keep_ended),
                              hold_timeout=_hold_timeout(args.hold_timeout),
                              nsi_timeout=_seconds_within(args.nsi_timeout, "--nsi-timeout", 3600),
                              share_step=_share_step(args.share_step), share_solver=args.share_solver,
                              flow_design=args.flow_design, path_labels=args.path_labels,
                              label_grace=_label_grace(args.label_grace), bundles=not args.no_bundles,
                              max_meters=args.max_meters,
                              max_streams=args.max_streams,
                              max_streams_per_principal=args.max_streams_per_principal,
                              reroute=reroute_policy(args),
                              store=args.store, lease_ttl=args.lease_ttl,
                              advertise=args.advertise, **optional)
    controller = HAController(config) if args.store is not None else Controller(config)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    controller.start()
    print(f"tsdn controller listening on {controller.address}", file=sys.stderr, flush=True)
    if getattr(controller, "plaintext_warning", None) is not None:
        print(f"tsdn controller: WARNING: {controller.plaintext_warning}", file=sys.stderr, flush=True)
    if getattr(controller, "http_address", None) is not None:
        print(f"tsdn live map on http://{controller.http_address}/", file=sys.stderr, flush=True)
    stop.wait()
    logging.getLogger(__name__).info("stopping")
    controller.stop()
    return 0


def reroute_policy(args: argparse.Namespace) -> ReroutePolicy:
    """The rerouting thresholds given on the command line, checked; errors name the options."""
    from sdn_app.core.errors import InvalidArgument

    try:
        return ReroutePolicy(**{name: getattr(args, f"reroute_{name}") for _, name, _, _ in _REROUTE_OPTIONS})
    except InvalidArgument as error:
        message = str(error)
        for option, name, _, _ in _REROUTE_OPTIONS:
            message = re.sub(rf"\b{name}\b", option, message)
        raise InvalidArgument(message) from None


def _hold_timeout(text: str) -> float:
    """Seconds of `--hold-timeout`: above 0, at most a day."""
    return _seconds_within(text, "--hold-timeout", 86400)


def _seconds_within(text: str, option: str, most: float) -> float:
    """Seconds of a duration flag: above 0, at most `most`."""
    from sdn_app.core.errors import InvalidArgument
    from sdn_app.core.units import parse_duration

    seconds = parse_duration(text, option)
    if not 0 < seconds <= most:
        limit = "a day" if most == 86400 else f"{most:g} s"
        raise InvalidArgument(f"{option}: above 0 and at most {limit}, got {text!r}")
    return seconds


def _label_range(text: str) -> tuple[int, int]:
    """`--path-labels FIRST-LAST`, for argparse (a bad range is a usage error naming it)."""
    try:
        return parse_label_range(text)
    except ValueError as why:
        raise argparse.ArgumentTypeError(str(why)) from None


def _meters(text: str) -> int:
    """`--max-meters N`, for argparse: a whole number from 1 to 2^32-256 (OpenFlow's meter ids)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None
    if not 1 <= value <= 0xFFFF0000:
        raise argparse.ArgumentTypeError(f"from 1 to {0xFFFF0000} (OpenFlow's meter ids), got {value}")
    return value


def _label_grace(text: str) -> float:
    """Seconds of `--label-grace`: zero or more, at most a day."""
    from sdn_app.core.errors import InvalidArgument
    from sdn_app.core.units import parse_duration

    if re.fullmatch(r"\s*0+(\.0*)?\s*[a-z]*\s*", text):  # no grace: parse_duration takes only positive ones
        return 0.0
    seconds = parse_duration(text, "--label-grace")
    if not 0 <= seconds <= 86400:
        raise InvalidArgument(f"--label-grace: from 0 to a day, got {text!r}")
    return seconds


def _share_step(percent: float) -> float:
    """`--share-step` as a fraction of the ceiling."""
    from sdn_app.core.errors import InvalidArgument

    if not 0 <= percent < 100:
        raise InvalidArgument(f"--share-step: a percentage from 0 to below 100, got {percent:g}")
    return percent / 100


def parse_keep_ended(text: str) -> float:
    """Seconds of `--keep-ended`: a duration, 0, or `forever` (math.inf)."""
    from sdn_app.core.errors import InvalidArgument
    from sdn_app.core.units import parse_duration

    cleaned = text.strip().lower()
    if cleaned == "forever":
        return math.inf
    if cleaned.rstrip("smhd") in ("0", "0.0"):
        return 0.0
    try:
        return parse_duration(text, "--keep-ended")
    except InvalidArgument as error:
        raise InvalidArgument(f"{error}; or 0 (not kept in memory at all) or forever") from None
