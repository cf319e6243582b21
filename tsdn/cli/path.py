"""`tsdn path ...`: compute routes between DTNs."""

from __future__ import annotations

import argparse

from sdn_app.core.clock import SystemClock
from sdn_app.core.paths import Path, PathFinder, PathRequest, Route, Unbooked, path_to_dict
from sdn_app.core.units import (
    format_bandwidth,
    format_time,
    format_window,
)
from tsdn.cli import reservations
from tsdn.cli.request_args import add_request_arguments, request_from_args
from tsdn.cli.topo import load
from tsdn.output import print_json, table


def register(commands: argparse._SubParsersAction) -> None:
    """Add `path` and its subcommands."""
    parser = commands.add_parser("path", help="paths between DTNs")
    sub = parser.add_subparsers(dest="path_command", metavar="SUBCOMMAND", required=True)

    compute = sub.add_parser(
        "compute", help="offline what-if: the route a request would get on an empty network (no controller)"
    )
    compute.add_argument("--topology", required=True, help="topology YAML, or a built-in name (sc16, ring8, sc16-nsi)")
    compute.add_argument("src", metavar="SRC", help="source DTN")
    compute.add_argument("dst", metavar="DST", help="destination DTN")
    add_request_arguments(compute)
    compute.add_argument("--alternatives", type=int, metavar="K",
                         help="list up to K alternative paths instead of one route")
    compute.add_argument("--json", action="store_true", help="machine-readable output")
    compute.set_defaults(run=run_compute)
    reservations.register(sub)


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
