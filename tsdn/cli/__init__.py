"""The `tsdn` command line: one entry point for topologies, paths and benchmarks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sdn_app.core.errors import TsdnError
from tsdn.cli import agent, bench, controller, demo, path, topo, transfer
from tsdn.output import fail


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every `tsdn` subcommand."""
    parser = argparse.ArgumentParser(
        prog="tsdn",
        description="SDN controller for terabit data-transfer demos: topologies, paths, bandwidth.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    topo.register(commands)
    path.register(commands)
    controller.register(commands)
    bench.register(commands)
    agent.register(commands)
    transfer.register(commands)
    demo.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `tsdn` with `argv` (default: the process arguments); return the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TsdnError as error:
        return fail(error)
    except KeyboardInterrupt:
        print("tsdn: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
