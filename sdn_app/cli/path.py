"""`tsdn path ...`: compute routes between DTNs."""

from __future__ import annotations

import argparse
import math

from sdn_app.cli.output import print_json, table
from sdn_app.cli.topo import load
from sdn_app.core.clock import SystemClock
from sdn_app.core.errors import InvalidArgument
from sdn_app.core.paths import POLICIES, Path, PathFinder, PathRequest, Route, Unbooked, path_to_dict
from sdn_app.core.units import (
    format_bandwidth,
    format_time,
    format_window,
    parse_bandwidth,
    parse_duration,
    parse_time,
)


def register(commands: argparse._SubParsersAction) -> None:
    """Add `path` and its subcommands."""
    parser = commands.add_parser("path", help="paths between DTNs")
    sub = parser.add_subparsers(dest="path_command", metavar="SUBCOMMAND", required=True)

    compute = sub.add_parser(
        "compute", help="offline what-if: the route a request would get on an empty network (no controller)"
    )
    compute.add_argument("--topology", required=True, help="topology YAML, or a built-in name (sc16, ring8)")
    compute.add_argument("src", metavar="SRC", help="source DTN")
    compute.add_argument("dst", metavar="DST", help="destination DTN")
    add_request_arguments(compute)
    compute.add_argument("--alternatives", type=int, metavar="K",
                         help="list up to K alternative paths instead of one route")
    compute.add_argument("--json", action="store_true", help="machine-readable output")
    compute.set_defaults(run=run_compute)


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every bandwidth request shares: bandwidth, window, policy, constraints."""
    parser.add_argument("--bandwidth", "-b", required=True, metavar="BW", help="e.g. 400M, 100G, 1.5T")
    parser.add_argument("--policy", choices=POLICIES, default="shortest",
                        help="shortest (hops, or latency when every link has one) or widest (most free bandwidth)")
    parser.add_argument("--start", default="now", metavar="T",
                        help="'now', '+30m', ISO 8601 (UTC unless a zone is given), or epoch seconds")
    end = parser.add_mutually_exclusive_group()
    end.add_argument("--end", metavar="T", help="end of the window (default: until released)")
    end.add_argument("--duration", metavar="D", help="length of the window, e.g. 90s, 1h30m, 2d")
    parser.add_argument("--include", action="append", default=[], metavar="SWITCH|LINK",
                        help="pass through this switch or link (repeat, in order)")
    parser.add_argument("--exclude", action="append", default=[], metavar="SWITCH|LINK",
                        help="avoid this switch or link; 'a--b' means every link between a and b (repeat)")
    parser.add_argument("--max-hops", type=int, metavar="N", help="at most N switch-to-switch links")
    parser.add_argument("--protect", action="store_true", help="also find a link-disjoint backup path")


def request_from_args(args: argparse.Namespace, now: float) -> PathRequest:
    """Build a `PathRequest` from parsed options, with errors that name the option."""
    start = parse_time(args.start, now, "--start")
    if args.end is not None:
        end = parse_time(args.end, now, "--end")
    elif args.duration is not None:
        end = start + parse_duration(args.duration, "--duration")
    else:
        end = math.inf
    if end <= start:
        raise InvalidArgument(f"--end: {format_time(end)} is not after --start {format_time(start)}")
    if args.max_hops is not None and args.max_hops < 0:
        raise InvalidArgument(f"--max-hops: must be zero or more, got {args.max_hops}")
    return PathRequest(
        src=args.src, dst=args.dst, bandwidth=parse_bandwidth(args.bandwidth, "--bandwidth"),
        start=start, end=end, policy=args.policy, include=tuple(args.include), exclude=tuple(args.exclude),
        max_hops=args.max_hops, protect=args.protect,
    )


def run_compute(args: argparse.Namespace) -> int:
    """`tsdn path compute --topology FILE SRC DST --bandwidth BW ...`."""
    topology = load(args.topology)
    request = request_from_args(args, SystemClock().now())
    finder = PathFinder(topology, Unbooked(topology))
    header = {
        "topology": topology.name, "src": request.src, "dst": request.dst, "bandwidth_bps": request.bandwidth,
        "policy": request.policy, "start": format_time(request.start), "end": format_time(request.end),
    }
    if args.alternatives is not None:
        paths = finder.alternatives(request, args.alternatives)
        if args.json:
            print_json({**header, "alternatives": [path_to_dict(p) for p in paths]})
        else:
            print(_headline(request, topology.name))
            print(table(["#", "ROUTE", "HOPS", "LATENCY_MS", "FREE"],
                        [(i + 1, p.describe(), p.hop_count, _latency(p), format_bandwidth(p.free_bps))
                         for i, p in enumerate(paths)]))
        return 0
    route = finder.route(request)
    if args.json:
        print_json({**header, "primary": path_to_dict(route.primary),
                    "backup": path_to_dict(route.backup) if route.backup else None})
    else:
        print(_headline(request, topology.name))
        _print_route(route)
    return 0


def _headline(request: PathRequest, topology: str) -> str:
    return (f"{request.src} -> {request.dst}: {format_bandwidth(request.bandwidth)}, {request.policy}, "
            f"on {topology}, {format_window(request.start, request.end)}")


def _latency(path: Path) -> str:
    return "" if path.latency_ms is None else f"{path.latency_ms:g}"


def _print_route(route: Route) -> None:
    for label, path in (("primary", route.primary), ("backup", route.backup)):
        if path is None:
            continue
        latency = f", {_latency(path)} ms" if path.latency_ms is not None else ""
        hops = f"{path.hop_count} hop" + ("" if path.hop_count == 1 else "s")
        print(f"\n{label}: {path.describe()}  ({hops}{latency}, "
              f"{format_bandwidth(path.free_bps)} free at bottleneck {path.bottleneck})")
        print(table(["SWITCH", "IN_PORT", "OUT_PORT"], [(h.switch, h.in_port, h.out_port) for h in path.hops]))
