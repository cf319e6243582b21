"""`tsdn bench ...`: benchmarks; each prints one JSON object as its last line."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    """Add `bench` and its subcommands."""
    parser = commands.add_parser("bench", help="benchmarks (last line of output is one JSON object)")
    sub = parser.add_subparsers(dest="bench_command", metavar="BENCHMARK", required=True)
    paths = sub.add_parser("paths", help="path computation + admission rate against plain networkx")
    paths.add_argument("--quick", action="store_true", help="fewer requests; finishes in under 30 s")
    paths.add_argument("--seed", type=int, default=16, help="random seed for generated topology and requests")
    paths.set_defaults(run=run_paths)


def run_paths(args: argparse.Namespace) -> int:
    """`tsdn bench paths [--quick]`."""
    from benchmarks.paths import main

    return main(quick=args.quick, seed=args.seed)
