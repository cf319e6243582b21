"""`tsdn bench ...`: benchmarks; each prints one JSON object as its last line."""

from __future__ import annotations

import argparse
from collections.abc import Callable


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
    northbound.add_argument("--streams", type=int, default=1000, metavar="N",
                            help="server streams held open while unary latency is measured again (default 1000)")
    northbound.set_defaults(run=run_northbound)
    soak = sub.add_parser("soak", help="controller memory (RSS) over 100,000 reservations created and released over "
                                       "gRPC, with a short --keep-ended against keeping every ended one")
    soak.add_argument("--quick", action="store_true", help="8,000 pairs (baseline 3,000); finishes in under 2 min")
    soak.add_argument("--count", type=int, metavar="N", help="create + release pairs (default 100,000)")
    soak.add_argument("--baseline-count", type=int, metavar="N",
                      help="pairs of the --keep-ended forever baseline, extrapolated to --count (default 20,000)")
    soak.add_argument("--clients", type=int, default=16, help="concurrent client threads (default 16)")
    soak.add_argument("--keep-ended", metavar="DURATION", help="the controller's --keep-ended (default 10s; 5s quick)")
    soak.add_argument("--seed", type=int, default=16, help="random seed for DTN pairs")
    soak.set_defaults(run=run_soak)
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
    tables = sub.add_parser("tables", help="flow-table entries per switch with 10,000 reservations on sc16: "
                                           "label-switched paths against per-hop flows (no switches needed)")
    tables.add_argument("--count", type=_claims, default=10_000, metavar="N", help="reservations (default 10,000)")
    tables.add_argument("--seed", type=int, default=16, help="random seed for DTN pairs")
    tables.set_defaults(run=run_tables)
    transfer = sub.add_parser("transfer", help="builtin transfer engine against iperf3 and FDT on loopback (1, 2, 4 "
                                               "streams), and disk-to-disk on tmpfs against memory-to-memory")
    transfer.add_argument("--quick", action="store_true",
                          help="fewer, shorter rounds; finishes in about a minute, three with FDT")
    transfer.add_argument("--fdt-jar", metavar="PATH",
                          help="fdt.jar to measure FDT with (default: env TSDN_FDT_JAR, else ../shared/tools/fdt.jar "
                               "beside the repository; FDT is left out when there is none)")
    transfer.set_defaults(run=run_transfer)
    advisor = sub.add_parser("advisor", help="rate-driven rerouting on sc16 (the pure core, a fake clock): precision "
                                             "and recall of moves against generated episodes' ground truth, flaps, "
                                             "decision time, against the previous policy")
    advisor.add_argument("--quick", action="store_true", help="48 episodes; finishes in under 30 s")
    advisor.add_argument("--episodes", type=_episodes, metavar="N",
                         help="episodes, the kinds in turn (default 240; 48 with --quick; at least 8)")
    advisor.add_argument("--seed", type=int, default=16, help="random seed for the episodes")
    advisor.set_defaults(run=run_advisor)
    share = sub.add_parser("share", help="elastic sharing on sc16 (1,000 claims) and the largest Topology Zoo WAN "
                                         "(10,000): re-solve time and meters changed per perturbation, against "
                                         "floors only (the pure core)")
    share.add_argument("--quick", action="store_true", help="300 and 60 re-solves; finishes in under 20 s")
    share.add_argument("--claims", type=_claims, metavar="N",
                       help="claims on sc16 (default 1,000); the Zoo WAN gets ten times as many")
    share.add_argument("--resolves", type=_claims, metavar="N",
                       help="re-solves on each network (default 2,000 on sc16 and 400 on the Zoo WAN; 300 and "
                            "60 with --quick)")
    share.add_argument("--seed", type=int, default=16, help="random seed for claims and perturbations")
    share.set_defaults(run=run_share)
    sense = sub.add_parser("sense", help="SENSE instances created, provisioned and cancelled per second by 16 "
                                         "sense-o-api clients, and provision to flows installed, against gRPC "
                                         "(ledger only; on sc16 in Mininet too with root, Mininet, OVS)")
    sense.add_argument("--quick", action="store_true", help="96 instances; finishes in under a minute")
    sense.add_argument("--instances", type=_claims, metavar="N",
                       help="instances (and baseline reservations), one per ordered DTN pair (default 600; 96 with "
                            "--quick)")
    sense.add_argument("--clients", type=_claims, default=16, metavar="N", help="concurrent clients (default 16)")
    sense.add_argument("--ledger-only", action="store_true", help="skip the run on switches in Mininet")
    sense.add_argument("--seed", type=int, default=16, help="random seed for DTN pairs")
    sense.set_defaults(run=run_sense)
    nsi = sub.add_parser("nsi", help="NSI CS 2.0 connections reserved to provisioned (data plane up) per second by "
                                     "16 requesters, and the time it takes, against gRPC, with a sample of the real "
                                     "onsa (ledger only; on sc16 in Mininet too with root, Mininet, OVS)")
    nsi.add_argument("--quick", action="store_true", help="96 connections; finishes in under a minute")
    nsi.add_argument("--connections", type=_claims, metavar="N",
                     help="connections (and baseline reservations), one per ordered DTN pair (default 600; 96 with "
                          "--quick)")
    nsi.add_argument("--clients", type=_claims, default=16, metavar="N", help="concurrent requesters (default 16)")
    nsi.add_argument("--ledger-only", action="store_true", help="skip the run on switches in Mininet")
    nsi.add_argument("--seed", type=int, default=16, help="random seed for DTN pairs")
    nsi.set_defaults(run=run_nsi)
    failover = sub.add_parser("failover", help="kill -9 of the leader of 3 controllers sharing etcd, ring8 in Mininet: "
                                               "time to a new OpenFlow MASTER and to the first admission, what was "
                                               "lost; admissions per second on etcd against SQLite (needs root, "
                                               "Mininet, OVS, etcd)")
    failover.add_argument("--quick", action="store_true", help="one round of the admission rates; under 2 min")
    failover.add_argument("--etcd-cluster", type=int, choices=(1, 3), default=1, metavar="N",
                          help="etcd members on loopback: 1 (default) or 3")
    failover.set_defaults(run=run_failover)
    alto = sub.add_parser("alto", help="ALTO endpoint cost queries per second over HTTP from concurrent clients, "
                                       "against gRPC QueryAvailability and networkx on the same DTN pairs")
    alto.add_argument("--quick", action="store_true", help="3 s phases; finishes in under 40 s")
    alto.add_argument("--clients", type=_whole(1), default=16, help="concurrent clients (default 16)")
    alto.add_argument("--seconds", type=float, metavar="S", help="length of each measured phase (default 15; 3 "
                                                                  "with --quick)")
    alto.add_argument("--seed", type=int, default=16, help="random seed for the order of the DTN pairs")
    alto.set_defaults(run=run_alto)


def run_paths(args: argparse.Namespace) -> int:
    """`tsdn bench paths [--quick]`."""
    from benchmarks.paths import main

    return main(quick=args.quick, seed=args.seed)


def run_northbound(args: argparse.Namespace) -> int:
    """`tsdn bench northbound [--quick] [--clients N] [--seconds S]`."""
    from benchmarks.northbound import main

    return main(quick=args.quick, clients=args.clients, seconds=args.seconds, seed=args.seed, streams=args.streams)


def run_soak(args: argparse.Namespace) -> int:
    """`tsdn bench soak [--quick] [--count N] [--baseline-count N] [--clients C] [--keep-ended D]`."""
    from benchmarks.soak import main

    return main(quick=args.quick, count=args.count, baseline_count=args.baseline_count, clients=args.clients,
                keep_ended=args.keep_ended, seed=args.seed)


def run_setup(args: argparse.Namespace) -> int:
    """`tsdn bench setup [--quick] [--sequential N] [--batch M] [--clients C]`."""
    from benchmarks.setup import main

    return main(quick=args.quick, sequential=args.sequential, batch=args.batch, clients=args.clients, seed=args.seed)


def run_reroute(args: argparse.Namespace) -> int:
    """`tsdn bench reroute [--quick]`."""
    from benchmarks.reroute import main

    return main(quick=args.quick)


def run_tables(args: argparse.Namespace) -> int:
    """`tsdn bench tables [--count N] [--seed S]`."""
    from benchmarks.tables import main

    return main(count=args.count, seed=args.seed)


def run_transfer(args: argparse.Namespace) -> int:
    """`tsdn bench transfer [--quick] [--fdt-jar PATH]`."""
    from benchmarks.transfer import main

    return main(quick=args.quick, fdt_jar=args.fdt_jar)


def _whole(least: int, why: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number of at least `least` (`why`: the reason for that least)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"at least {least}{why}, got {value}")
        return value
    return parse


_episodes = _whole(8, " (one episode of each kind)")
_claims = _whole(1)


def run_advisor(args: argparse.Namespace) -> int:
    """`tsdn bench advisor [--quick] [--episodes N] [--seed S]`."""
    from benchmarks.advisor import main

    return main(quick=args.quick, seed=args.seed, episodes=args.episodes)


def run_share(args: argparse.Namespace) -> int:
    """`tsdn bench share [--quick] [--claims N] [--resolves N] [--seed S]`."""
    from benchmarks.share import main

    return main(quick=args.quick, seed=args.seed, claims=args.claims, resolves=args.resolves)


def run_failover(args: argparse.Namespace) -> int:
    """`tsdn bench failover [--quick] [--etcd-cluster 3]`."""
    from benchmarks.failover import main

    return main(quick=args.quick, etcd_members=args.etcd_cluster)


def run_alto(args: argparse.Namespace) -> int:
    """`tsdn bench alto [--quick] [--clients N] [--seconds S] [--seed S]`."""
    from benchmarks.alto import main

    return main(quick=args.quick, clients=args.clients, seconds=args.seconds, seed=args.seed)


def run_sense(args: argparse.Namespace) -> int:
    """`tsdn bench sense [--quick] [--instances N] [--clients N] [--ledger-only] [--seed S]`."""
    from benchmarks.sense import main

    return main(quick=args.quick, instances=args.instances, clients=args.clients, seed=args.seed,
                ledger_only=args.ledger_only)


def run_nsi(args: argparse.Namespace) -> int:
    """`tsdn bench nsi [--quick] [--connections N] [--clients N] [--ledger-only] [--seed S]`."""
    from benchmarks.nsi import main

    return main(quick=args.quick, connections=args.connections, clients=args.clients, seed=args.seed,
                ledger_only=args.ledger_only)
