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
    northbound = sub.add_parser("northbound", help="reservations admitted per second over gRPC by concurrent clients")
    northbound.add_argument("--quick", action="store_true", help="short phases; finishes in under 30 s")
    northbound.add_argument("--clients", type=int, default=16, help="concurrent client threads (default 16)")
    northbound.add_argument("--seconds", type=float, metavar="S",
                            help="length of each measured phase (default 20; 4 with --quick)")
    northbound.add_argument("--seed", type=int, default=16, help="random seed for DTN pairs")
    northbound.set_defaults(run=run_northbound)
    setup = sub.add_parser("setup", help="reservation setup time on sc16 in Mininet: request to every hop confirmed "
                                         "(needs root, Mininet, Open vSwitch)")
    setup.add_argument("--quick", action="store_true", help="50 sequential + 200 at once; finishes in under 2 min")
    setup.add_argument("--sequential", type=int, metavar="N",
                       help="sequential reservations (default 200; 50 with --quick)")
    setup.add_argument("--batch", type=int, metavar="M", help="reservations at once (default 1000; 200 with --quick)")
    setup.add_argument("--clients", type=int, default=16, help="client threads of the batch phase (default 16)")
    setup.add_argument("--seed", type=int, default=16, help="random seed for DTN pairs")
    setup.set_defaults(run=run_setup)
    reroute = sub.add_parser("reroute", help="link down to every affected reservation confirmed on its new path, and "
                                             "the fast-failover gap, on sc16 in Mininet (needs root, Mininet, OVS)")
    reroute.add_argument("--quick", action="store_true", help="fewer rounds; finishes in under 2 min")
    reroute.set_defaults(run=run_reroute)
    transfer = sub.add_parser("transfer", help="builtin transfer engine against iperf3 and FDT on loopback (1, 2, 4 "
                                               "streams), and disk-to-disk on tmpfs against memory-to-memory")
    transfer.add_argument("--quick", action="store_true",
                          help="fewer, shorter rounds; finishes in about a minute, three with FDT")
    transfer.add_argument("--fdt-jar", metavar="PATH",
                          help="fdt.jar to measure FDT with (default: env TSDN_FDT_JAR, else ../shared/tools/fdt.jar "
                               "beside the repository; FDT is left out when there is none)")
    transfer.set_defaults(run=run_transfer)


def run_paths(args: argparse.Namespace) -> int:
    """`tsdn bench paths [--quick]`."""
    from benchmarks.paths import main

    return main(quick=args.quick, seed=args.seed)


def run_northbound(args: argparse.Namespace) -> int:
    """`tsdn bench northbound [--quick] [--clients N] [--seconds S]`."""
    from benchmarks.northbound import main

    return main(quick=args.quick, clients=args.clients, seconds=args.seconds, seed=args.seed)


def run_setup(args: argparse.Namespace) -> int:
    """`tsdn bench setup [--quick] [--sequential N] [--batch M] [--clients C]`."""
    from benchmarks.setup import main

    return main(quick=args.quick, sequential=args.sequential, batch=args.batch, clients=args.clients, seed=args.seed)


def run_reroute(args: argparse.Namespace) -> int:
    """`tsdn bench reroute [--quick]`."""
    from benchmarks.reroute import main

    return main(quick=args.quick)


def run_transfer(args: argparse.Namespace) -> int:
    """`tsdn bench transfer [--quick] [--fdt-jar PATH]`."""
    from benchmarks.transfer import main

    return main(quick=args.quick, fdt_jar=args.fdt_jar)
