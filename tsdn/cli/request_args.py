"""Options shared by every command that describes a bandwidth request."""

from __future__ import annotations

import argparse
import math

from sdn_app.core.errors import InvalidArgument
from sdn_app.core.paths import POLICIES, PathRequest
from sdn_app.core.units import format_time, parse_bandwidth, parse_duration, parse_time


def add_request_arguments(parser: argparse.ArgumentParser, bandwidth: bool = True, protect: bool = True,
                          policy: str = "shortest") -> None:
    """The options bandwidth requests share: bandwidth, window, policy, constraints."""
    if bandwidth:
        parser.add_argument("--bandwidth", "-b", required=True, metavar="BW", help="e.g. 400M, 100G, 1.5T")
    parser.add_argument("--policy", choices=POLICIES, default=policy,
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
    if protect:
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
    bandwidth = parse_bandwidth(args.bandwidth, "--bandwidth") if hasattr(args, "bandwidth") else 1
    return PathRequest(
        src=args.src, dst=args.dst, bandwidth=bandwidth, start=start, end=end, policy=args.policy,
        include=tuple(args.include), exclude=tuple(args.exclude), max_hops=args.max_hops,
        protect=getattr(args, "protect", False),
    )
